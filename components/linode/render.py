"""Pure rendering for the Linode kubeadm cluster: kubeadm v1beta4 configs, node scripts, cloud-init.

Nothing here touches Pulumi: the component feeds resolved values in (inside an `apply`) and tests
call these functions directly, then check the results with kubeadm's schema rules, `cloud-init
schema` and shellcheck.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from dataclasses import dataclass, field
from typing import Optional, Sequence

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from components.cluster import Taint
from components.linode import versions

KUBEADM_API = "kubeadm.k8s.io/v1beta4"
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
KUBEADM_CONFIG_PATH = "/etc/kubernetes/kubeadm-config.yaml"
INSTALL_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-install-kubernetes.sh"
NVIDIA_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-install-nvidia.sh"
BOOTSTRAP_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-bootstrap.sh"

# Label of the untainted CPU workers where ordinary platform pods run (Kueue, Kubeflow controllers,
# monitoring, JupyterHub): control planes carry the control-plane taint, GPU workers the GPU taint.
ROLE_LABEL = "gpu-platform.io/role"
SYSTEM_ROLE = "system"

# Kubelet reservations on every node (KubeletConfiguration kubeReserved/systemReserved/evictionHard).
# components/capacity.py subtracts them from the plan's size to get Linode allocatable. Sized for
# containerd + kubelet at the default 110 pods (the same order as GKE's and EKS's smallest tiers).
KUBE_RESERVED = {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
SYSTEM_RESERVED = {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "1Gi"}
# Setting any evictionHard threshold drops the kubelet's other defaults (they become 0), so all four
# defaults are restated here (kubelet docs, "Node-pressure Eviction": hard eviction thresholds).
EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%",
                 "nodefs.inodesFree": "5%"}
MAX_PODS = 110


# ---------------------------------------------------------------------------------------------
# PKI helpers
# ---------------------------------------------------------------------------------------------


def discovery_hash(ca_cert_pem: str) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's DER SubjectPublicKeyInfo."""
    cert = x509.load_pem_x509_certificate(ca_cert_pem.encode())
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def bootstrap_token(token_id: str, token_secret: str) -> str:
    """kubeadm's bootstrap token form [a-z0-9]{6}.[a-z0-9]{16}."""
    token = f"{token_id}.{token_secret}"
    if len(token_id) != 6 or len(token_secret) != 16 or not token.replace(".", "").isalnum() or token.lower() != token:
        raise ValueError("bootstrap token must match [a-z0-9]{6}.[a-z0-9]{16}")
    return token


# ---------------------------------------------------------------------------------------------
# Addressing: every node gets a fixed VPC address, so configs can be rendered before boot
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Addresses:
    control_planes: list[str]
    system: list[str]
    gpu_pools: list[list[str]]


def vpc_addresses(subnet_cidr: str, control_planes: int, system_nodes: int, pool_sizes: Sequence[int]) -> Addresses:
    """Control planes from .10, system workers from .20 (up to 20), GPU pools in blocks of 50 from
    .100 (room to grow each pool). Fixed per node index, so configs render before boot."""
    net = ipaddress.ip_network(subnet_cidr)
    hosts = list(net.hosts())
    needed = 100 + 50 * len(pool_sizes)
    if len(hosts) < needed or control_planes > 10 or system_nodes > 20 or any(s > 50 for s in pool_sizes):
        raise ValueError(f"subnet {subnet_cidr} too small for {control_planes} control planes, "
                         f"{system_nodes} system workers and pools {list(pool_sizes)}")
    return Addresses(
        control_planes=[str(hosts[9 + i]) for i in range(control_planes)],
        system=[str(hosts[19 + i]) for i in range(system_nodes)],
        gpu_pools=[[str(hosts[99 + 50 * p + i]) for i in range(size)] for p, size in enumerate(pool_sizes)],
    )


# ---------------------------------------------------------------------------------------------
# kubeadm configuration (v1beta4)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    kubernetes_minor: str
    control_plane_endpoint: str  # host:port every node uses (VPC IP or the NodeBalancer)
    pod_cidr: str
    service_cidr: str
    cert_sans: Sequence[str]


@dataclass(frozen=True)
class NodeSpec:
    name: str  # = the Linode label, so the Linode CCM can match node and instance
    vpc_ip: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()


def _kubelet_args(node: NodeSpec) -> list[dict[str, str]]:
    args = [{"name": "cloud-provider", "value": "external"}, {"name": "node-ip", "value": node.vpc_ip}]
    if node.labels:
        args.append({"name": "node-labels", "value": ",".join(f"{k}={v}" for k, v in sorted(node.labels.items()))})
    return args


def _node_registration(node: NodeSpec, control_plane: bool) -> dict:
    taints = [t.as_k8s() for t in node.taints]
    if control_plane:
        taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
    return {"name": node.name, "criSocket": CRI_SOCKET, "kubeletExtraArgs": _kubelet_args(node), "taints": taints}


def _cluster_configuration(cluster: ClusterSpec) -> dict:
    return {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": cluster.name,
        "kubernetesVersion": "v" + versions.KUBERNETES_PATCH[cluster.kubernetes_minor],
        "controlPlaneEndpoint": cluster.control_plane_endpoint,
        "networking": {"podSubnet": cluster.pod_cidr, "serviceSubnet": cluster.service_cidr, "dnsDomain": "cluster.local"},
        "apiServer": {
            "certSANs": list(cluster.cert_sans),
            "extraArgs": [{"name": "profiling", "value": "false"}],
        },
        "controllerManager": {"extraArgs": [{"name": "cloud-provider", "value": "external"},
                                            {"name": "profiling", "value": "false"}]},
        "scheduler": {"extraArgs": [{"name": "profiling", "value": "false"}]},
        "encryptionAlgorithm": "ECDSA-P256",
    }


def _kubelet_configuration() -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "serverTLSBootstrap": False,
        "protectKernelDefaults": True,
        "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}},
        "authorization": {"mode": "Webhook"},
        "maxPods": MAX_PODS,
        "kubeReserved": dict(KUBE_RESERVED),
        "systemReserved": dict(SYSTEM_RESERVED),
        "evictionHard": dict(EVICTION_HARD),
    }


def _dump(docs: list[dict]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


def kubeadm_init_config(cluster: ClusterSpec, node: NodeSpec, token: str, certificate_key: str) -> str:
    """InitConfiguration + ClusterConfiguration + KubeletConfiguration for the first control plane."""
    init = {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        # Never expires: nodes are added declaratively long after init. The token is a Pulumi
        # secret and joining also needs the CA hash and a network path the firewall allows.
        "bootstrapTokens": [{"token": token, "ttl": "0s", "usages": ["signing", "authentication"],
                             "groups": ["system:bootstrappers:kubeadm:default-node-token"],
                             "description": "gpu-platform declarative node join"}],
        "nodeRegistration": _node_registration(node, control_plane=True),
        "localAPIEndpoint": {"advertiseAddress": node.vpc_ip, "bindPort": 6443},
        "certificateKey": certificate_key,
    }
    return _dump([init, _cluster_configuration(cluster), _kubelet_configuration()])


def kubeadm_join_config(cluster: ClusterSpec, node: NodeSpec, token: str, ca_hash: str,
                        control_plane_certificate_key: Optional[str] = None) -> str:
    """JoinConfiguration for a worker, or for a further control plane when given the certificate key."""
    join: dict = {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": cluster.control_plane_endpoint, "token": token,
                                         "caCertHashes": [ca_hash]}},
        "nodeRegistration": _node_registration(node, control_plane=control_plane_certificate_key is not None),
    }
    if control_plane_certificate_key is not None:
        join["controlPlane"] = {"localAPIEndpoint": {"advertiseAddress": node.vpc_ip, "bindPort": 6443},
                                "certificateKey": control_plane_certificate_key}
    return _dump([join, _kubelet_configuration()])


# ---------------------------------------------------------------------------------------------
# Node scripts (each passes shellcheck; see tests)
# ---------------------------------------------------------------------------------------------


def install_kubernetes_script(kubernetes_minor: str) -> str:
    """containerd (systemd cgroups) and pinned kubeadm/kubelet/kubectl from pkgs.k8s.io."""
    pkg = versions.kubernetes_package_version(kubernetes_minor)
    return f"""#!/usr/bin/env bash
# Installs containerd and pinned Kubernetes packages; idempotent so a re-run is harmless.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

swapoff -a
sed -i '/ swap / s/^/#/' /etc/fstab
printf 'overlay\\nbr_netfilter\\n' > /etc/modules-load.d/k8s.conf
modprobe overlay
modprobe br_netfilter
cat > /etc/sysctl.d/99-kubernetes.conf <<'SYSCTL'
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward = 1
vm.overcommit_memory = 1
kernel.panic = 10
kernel.panic_on_oops = 1
SYSCTL
sysctl --system

apt-get update -q
apt-get install -y -q apt-transport-https ca-certificates curl gpg containerd
mkdir -p /etc/containerd /etc/apt/keyrings
containerd config default > /etc/containerd/config.toml
# kubelet and containerd must agree on the cgroup driver (systemd on Ubuntu 24.04).
sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml
systemctl restart containerd
systemctl enable containerd

curl -fsSL https://pkgs.k8s.io/core:/stable:/v{kubernetes_minor}/deb/Release.key \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
echo 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v{kubernetes_minor}/deb/ /' \\
  > /etc/apt/sources.list.d/kubernetes.list
apt-get update -q
apt-get install -y -q kubelet={pkg} kubeadm={pkg} kubectl={pkg}
apt-mark hold kubelet kubeadm kubectl containerd
systemctl enable kubelet
"""


def install_nvidia_script() -> str:
    """Pinned NVIDIA server driver and container toolkit; containerd gets the nvidia runtime as default."""
    branch = versions.NVIDIA_DRIVER_BRANCH
    toolkit = versions.NVIDIA_CONTAINER_TOOLKIT
    return f"""#!/usr/bin/env bash
# Installs the NVIDIA server driver {branch} and container toolkit {toolkit}, then makes the nvidia
# runtime containerd's default so the device plugin and GPU pods need no runtimeClassName.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

apt-get install -y -q "nvidia-headless-{branch}-server" "nvidia-utils-{branch}-server"
modprobe nvidia
nvidia-smi -L

curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/nvidia-container-toolkit.gpg
curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \\
  | sed 's#deb https://#deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] https://#' \\
  > /etc/apt/sources.list.d/nvidia-container-toolkit.list
apt-get update -q
apt-get install -y -q \\
  "nvidia-container-toolkit={toolkit}" "nvidia-container-toolkit-base={toolkit}" \\
  "libnvidia-container-tools={toolkit}" "libnvidia-container1={toolkit}"
apt-mark hold "nvidia-headless-{branch}-server" nvidia-container-toolkit
nvidia-ctk runtime configure --runtime=containerd --set-as-default
systemctl restart containerd
"""


def bootstrap_script(role: str) -> str:
    """Runs kubeadm once: init on the first control plane, join elsewhere. Marker file = done."""
    if role == "init":
        kubeadm = f"kubeadm init --config {KUBEADM_CONFIG_PATH} --upload-certs"
    elif role in ("join", "join-control-plane"):
        kubeadm = f"kubeadm join --config {KUBEADM_CONFIG_PATH}"
    else:
        raise ValueError(f"unknown role {role!r}")
    return f"""#!/usr/bin/env bash
# Brings this node into the cluster with kubeadm ({role}); safe to re-run after a reboot.
set -euo pipefail
marker=/var/lib/gpu-platform/kubeadm-done
if [ -f "$marker" ]; then
  exit 0
fi
mkdir -p /var/lib/gpu-platform
{kubeadm}
# The kubeadm config holds the bootstrap token: keep it only as long as needed.
shred -u {KUBEADM_CONFIG_PATH}
touch "$marker"
"""


# ---------------------------------------------------------------------------------------------
# cloud-init
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class File:
    path: str
    content: str
    permissions: str = "0600"


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (scripts, configs, PEM) as literal blocks: readable, and diff-friendly."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str_representer)


def cloud_config(hostname: str, files: Sequence[File], commands: Sequence[str]) -> str:
    """A #cloud-config document (validated by `cloud-init schema` in the tests)."""
    doc = {
        "hostname": hostname,
        "preserve_hostname": False,
        "package_update": True,
        "package_upgrade": False,
        "ssh_pwauth": False,
        "disable_root": False,
        "write_files": [{"path": f.path, "content": f.content, "owner": "root:root", "permissions": f.permissions}
                        for f in files],
        "runcmd": [list(c.split(" ")) for c in commands],
    }
    return "#cloud-config\n" + yaml.dump(doc, Dumper=_BlockDumper, sort_keys=False, width=10_000)


def node_user_data(role: str, node: NodeSpec, kubeadm_config: str, kubernetes_minor: str, gpu: bool,
                   ca_cert_pem: Optional[str] = None, ca_key_pem: Optional[str] = None) -> str:
    """The whole first-boot document of one node. role: init | join-control-plane | join."""
    files = [
        File(INSTALL_SCRIPT_PATH, install_kubernetes_script(kubernetes_minor), "0700"),
        File(BOOTSTRAP_SCRIPT_PATH, bootstrap_script(role), "0700"),
        File(KUBEADM_CONFIG_PATH, kubeadm_config, "0600"),
    ]
    if role == "init":
        if not (ca_cert_pem and ca_key_pem):
            raise ValueError("the first control plane needs the cluster CA")
        files += [File("/etc/kubernetes/pki/ca.crt", ca_cert_pem, "0644"),
                  File("/etc/kubernetes/pki/ca.key", ca_key_pem, "0600")]
    commands = [INSTALL_SCRIPT_PATH]
    if gpu:
        files.append(File(NVIDIA_SCRIPT_PATH, install_nvidia_script(), "0700"))
        commands.append(NVIDIA_SCRIPT_PATH)
    commands.append(BOOTSTRAP_SCRIPT_PATH)
    return cloud_config(node.name, files, commands)


def encode_user_data(document: str) -> str:
    """Linode's metadata service takes user data base64-encoded."""
    return base64.b64encode(document.encode()).decode()


# ---------------------------------------------------------------------------------------------
# Admin kubeconfig
# ---------------------------------------------------------------------------------------------


def admin_kubeconfig(cluster_name: str, server: str, ca_cert_pem: str, client_cert_pem: str, client_key_pem: str) -> str:
    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    user = f"{cluster_name}-admin"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": server, "certificate-authority-data": b64(ca_cert_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(client_cert_pem),
                                          "client-key-data": b64(client_key_pem)}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def wait_for_api_script() -> str:
    """Run on the operator's machine (pulumi-command) until the new API server answers /readyz."""
    return """#!/usr/bin/env bash
# Waits up to 30 minutes for the API server to come up (first boot installs drivers and kubeadm).
set -euo pipefail
ca_file=$(mktemp)
trap 'rm -f "$ca_file"' EXIT
printf '%s' "$CLUSTER_CA_PEM" > "$ca_file"
deadline=$((SECONDS + 1800))
until curl --silent --fail --cacert "$ca_file" --max-time 5 "https://${API_HOST}:6443/readyz" >/dev/null; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "API server at ${API_HOST}:6443 not ready after 30 minutes; check the instances' console (Lish)" >&2
    exit 1
  fi
  sleep 10
done
"""
