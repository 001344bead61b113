"""Pure rendering for the Linode kubeadm cluster: kubeadm v1beta4 configs, node scripts, cloud-init.

Nothing here touches Pulumi: the component feeds resolved values in (inside an `apply`) and tests
call these functions directly, then check the results with kubeadm's schema rules, `cloud-init
schema` and shellcheck.
"""

from __future__ import annotations

import base64
import datetime
import functools
import gzip
import hashlib
import ipaddress
from dataclasses import dataclass, field
from typing import Optional, Sequence

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpu_platform.components.cluster import Taint, toolkit_isolation_command
from gpu_platform.data import linode_kubelet
from gpu_platform.data import linode_versions as versions

KUBEADM_API = "kubeadm.k8s.io/v1beta4"
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
KUBEADM_CONFIG_PATH = "/etc/kubernetes/kubeadm-config.yaml"
INSTALL_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-install-kubernetes.sh"
NVIDIA_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-install-nvidia.sh"
# Workers: the cluster CA certificate (public), to verify the API server when asking its version.
# Not under /etc/kubernetes/pki: kubeadm join refuses to run when ca.crt already exists there.
CLUSTER_CA_PATH = "/var/lib/gpu-platform/cluster-ca.crt"
BOOTSTRAP_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-bootstrap.sh"

# Label of the untainted CPU workers where ordinary platform pods run (Kueue, Kubeflow controllers,
# monitoring, JupyterHub): control planes carry the control-plane taint, GPU workers the GPU taint.
ROLE_LABEL = "gpu-platform.io/role"
SYSTEM_ROLE = "system"



# ---------------------------------------------------------------------------------------------
# PKI helpers
# ---------------------------------------------------------------------------------------------


def discovery_hash(ca_cert_pem: str) -> str:
    """kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's DER SubjectPublicKeyInfo."""
    cert = x509.load_pem_x509_certificate(ca_cert_pem.encode())
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def checked_ca_pem(text: str) -> str:
    """The CA certificate the program read back from cp-0's signed cluster-info (cluster_info.py ca)."""
    try:
        cert = x509.load_pem_x509_certificate((text or "").strip().encode())
        ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except (ValueError, x509.ExtensionNotFound) as exc:
        raise ValueError(f"the cluster CA read back from cluster-info is not a CA certificate: {exc}") from None
    if not ca:
        raise ValueError("the cluster CA read back from cluster-info is not a CA certificate")
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def checked_admin_cert(text: str, public_key_pem: str, ca_pem: str) -> str:
    """The admin certificate a control plane signed: for the program's own key, issued by the cluster CA."""
    cert = x509.load_pem_x509_certificate((text or "").strip().encode())
    ca = x509.load_pem_x509_certificate(ca_pem.encode())
    pub = serialization.load_pem_public_key(public_key_pem.encode())
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(*spki) != pub.public_bytes(*spki):
        raise ValueError("the published admin certificate is not for the program's admin key")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception) as exc:  # InvalidSignature included
        raise ValueError(f"the published admin certificate is not signed by the cluster CA: {exc}") from None
    return cert.public_bytes(serialization.Encoding.PEM).decode()


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
# Control-plane keys: cp-0 generates every CA and the service-account key itself (`kubeadm init`), and
# uploads them encrypted with the certificate key (`--upload-certs`: the kubeadm-certs Secret, deleted
# with its two-hour token, kubeadm constants DefaultCertTokenDuration). Further and replaced control
# planes download them with that key; a live control plane uploads them again while a peer is missing
# (certs_upload_script). No private key is ever in user data or Pulumi state.
# ---------------------------------------------------------------------------------------------

PKI_DIR = "/etc/kubernetes/pki"
# kubeadm's certificate key (hex of 32 random bytes, copycerts.CreateCertificateKey): it decrypts the
# kubeadm-certs Secret, which only exists for two hours after an upload.
CERTIFICATE_KEY_PATH = "/etc/gpu-platform/kubeadm-certificate-key"
# The program's admin client CSR (public): control planes sign it with the cluster CA and publish the
# certificate in kube-public (admin_cert_script); the private key stays in Pulumi state.
ADMIN_CSR_PATH = "/etc/gpu-platform/admin.csr"


@dataclass(frozen=True)
class ControlPlaneKeys:
    """What a control plane's user data carries instead of the CAs: all symmetric or public."""

    # kubeadm's certificate key (64 hex characters).
    certificate_key: str
    # The key the API server encrypts Secrets with before they reach etcd (32 random bytes, base64). Not
    # among what `upload-certs` shares, so every control plane gets it here.
    secrets_encryption_key: str
    # This control plane's bootstrap token (its Secret renewed by every `pulumi up`): a further control
    # plane's join, and cp-0's own when it replaces a lost cp-0.
    join_token: str
    admin_csr: str
    # cp-0 only: the 24-hour token kubeadm init creates, whose cluster-info signature the program checks.
    init_token: str = ""
    # cp-0 only: the read-back token (signing only, never expires, authenticates nobody): cp-0 creates its Secret
    # after kubeadm init (readback_token_script), so cluster-info stays signed for a token the program and cp-0
    # hold however long the stack is left alone (the CA read-back and a replaced cp-0's peer check never depend
    # on a token that can expire).
    readback_token: str = ""

    def __post_init__(self) -> None:
        if len(self.certificate_key) != 64 or any(c not in "0123456789abcdef" for c in self.certificate_key):
            raise ValueError("the kubeadm certificate key must be 32 bytes, hex-encoded")
        if "PRIVATE KEY" in self.admin_csr or "CERTIFICATE REQUEST" not in self.admin_csr:
            raise ValueError("control planes get the admin CSR, never a key")


# linode.pki: program (gpu-platform 0.2.0's flow, kept for clusters created by it): every CA is the program's
# (pulumi-tls), placed on control planes before kubeadm runs, so kubeadm uses them instead of generating its
# own (kubeadm "custom certificates" mode); control planes join with a discovery kubeconfig they mint from
# the cluster CA. The CA keys travel in user data and sit in Pulumi state (docs/linode.md).
PKI_SEED = "/var/lib/gpu-platform/pki"


@dataclass(frozen=True)
class ControlPlanePki:
    """PEM material of one cluster: what every control plane needs and nothing a worker gets."""

    ca_cert: str
    ca_key: str
    front_proxy_ca_cert: str
    front_proxy_ca_key: str
    etcd_ca_cert: str
    etcd_ca_key: str
    service_account_key: str
    service_account_pub: str
    # The key the API server encrypts Secrets with before they reach etcd (32 random bytes, base64).
    secrets_encryption_key: str


ENCRYPTION_DIR = "/etc/kubernetes/encryption"
ENCRYPTION_CONFIG_PATH = f"{ENCRYPTION_DIR}/config.yaml"
ENCRYPTION_KEY_NAME = "gpu-platform-1"


def encryption_configuration(key_b64: str) -> str:
    """The API server's EncryptionConfiguration (apiserver.config.k8s.io/v1): Secrets written with
    `secretbox` (XSalsa20-Poly1305; Kubernetes docs "Encrypting Confidential Data at Rest" rate it strong,
    aescbc weak, aesgcm needing rotation every 200k writes), `identity` last only to read what was stored
    before encryption was on. So etcd, and every snapshot of it, holds Secrets encrypted."""
    if len(base64.b64decode(key_b64)) != 32:
        raise ValueError("the secrets encryption key must be 32 bytes")
    return yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "EncryptionConfiguration",
        "resources": [{"resources": ["secrets"], "providers": [
            {"secretbox": {"keys": [{"name": ENCRYPTION_KEY_NAME, "secret": key_b64}]}},
            {"identity": {}},
        ]}],
    }, sort_keys=False)


def pki_files(pki: ControlPlanePki) -> list["File"]:
    """linode.pki: program: the files kubeadm expects in its certificatesDir (names from kubeadm's constants)."""
    return [
        File(f"{PKI_DIR}/ca.crt", pki.ca_cert, "0644"),
        File(f"{PKI_DIR}/ca.key", pki.ca_key, "0600"),
        File(f"{PKI_DIR}/front-proxy-ca.crt", pki.front_proxy_ca_cert, "0644"),
        File(f"{PKI_DIR}/front-proxy-ca.key", pki.front_proxy_ca_key, "0600"),
        File(f"{PKI_DIR}/etcd/ca.crt", pki.etcd_ca_cert, "0644"),
        File(f"{PKI_DIR}/etcd/ca.key", pki.etcd_ca_key, "0600"),
        File(f"{PKI_DIR}/sa.key", pki.service_account_key, "0600"),
        File(f"{PKI_DIR}/sa.pub", pki.service_account_pub, "0644"),
        File(ENCRYPTION_CONFIG_PATH, encryption_configuration(pki.secrets_encryption_key), "0600"),
    ]


# ---------------------------------------------------------------------------------------------
# kubeadm configuration (v1beta4)
# ---------------------------------------------------------------------------------------------

# cp-0 holds both: it initialises a new cluster, or joins one that already answers (a replaced cp-0).
KUBEADM_JOIN_CONFIG_PATH = "/etc/kubernetes/kubeadm-join-config.yaml"
# cp-0's join config is written before the cluster CA exists: its CA hash is filled in at boot, from the
# cluster-info a peer serves, signed for cp-0's own token (cluster_info.py).
CA_HASH_FROM_PEERS = "sha256:ca-hash-from-signed-cluster-info"
INIT_TOKEN_TTL = "24h0m0s"
# The read-back token is NOT in kubeadm's configuration: kubeadm defaults a token's empty `groups` to
# [system:bootstrappers:kubeadm:default-node-token] (cmd/kubeadm/app/apis/bootstraptoken/v1 defaults.go) and then
# refuses groups unless `usages` includes "authentication" (apis/kubeadm/validation/validation.go
# ValidateBootstrapTokens: "token groups cannot be specified unless --usages includes \"authentication\""), so a
# signing-only token there fails `kubeadm init`. cp-0 creates its Secret itself after init (readback_token_script):
# no `expiration` (it never expires; the token cleaner deletes only expired ones), usage-bootstrap-signing only
# (the bootstrap authenticator accepts no token without usage-bootstrap-authentication: it authenticates nobody).
READBACK_TOKEN_PATH = "/etc/gpu-platform/readback-token"
READBACK_TOKEN_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-readback-token.sh"
NODE_TOKEN_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# linode.pki: program: control planes join with file discovery, a kubeconfig the node mints at boot from
# the cluster CA it holds (a one-day client certificate for system:node:<name>), so no bootstrap token.
DISCOVERY_KUBECONFIG_PATH = "/etc/kubernetes/discovery-kubeconfig.conf"


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
        "certificatesDir": PKI_DIR,
        "networking": {"podSubnet": cluster.pod_cidr, "serviceSubnet": cluster.service_cidr, "dnsDomain": "cluster.local"},
        "apiServer": {
            "certSANs": list(cluster.cert_sans),
            "extraArgs": [{"name": "profiling", "value": "false"},
                          # Secrets encrypted before they reach etcd (encryption_configuration).
                          {"name": "encryption-provider-config", "value": ENCRYPTION_CONFIG_PATH}],
            "extraVolumes": [{"name": "encryption-config", "hostPath": ENCRYPTION_DIR, "mountPath": ENCRYPTION_DIR,
                              "readOnly": True, "pathType": "DirectoryOrCreate"}],
        },
        "controllerManager": {"extraArgs": [{"name": "cloud-provider", "value": "external"},
                                            {"name": "profiling", "value": "false"}]},
        "scheduler": {"extraArgs": [{"name": "profiling", "value": "false"}]},
        "etcd": {"local": {"dataDir": "/var/lib/etcd"}},
        "encryptionAlgorithm": "ECDSA-P256",
    }


def _kubelet_configuration() -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "serverTLSBootstrap": False,
        # The kubelet renews its own client certificate before it expires (kubeadm binds the
        # auto-approval of those CSRs); kubeadm's control-plane certificates renew on a timer.
        "rotateCertificates": True,
        "protectKernelDefaults": True,
        "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True}},
        "authorization": {"mode": "Webhook"},
        "maxPods": linode_kubelet.MAX_PODS,
        "kubeReserved": dict(linode_kubelet.KUBE_RESERVED),
        "systemReserved": dict(linode_kubelet.SYSTEM_RESERVED),
        "evictionHard": dict(linode_kubelet.EVICTION_HARD),
    }


def _dump(docs: list[dict]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)


def kubeadm_init_config(cluster: ClusterSpec, node: NodeSpec, init_token: str = "", certificate_key: str = "") -> str:
    """InitConfiguration + ClusterConfiguration + KubeletConfiguration for the first control plane.

    kubeadm generates the CAs and the service-account key; `kubeadm init --upload-certs` stores them in
    the kubeadm-certs Secret encrypted with `certificateKey`. `bootstrapTokens`: the init token (24 h), the
    one whose cluster-info signature the program checks to learn the CA; workers and further control
    planes join with tokens the program keeps as Secrets."""
    init: dict = {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "nodeRegistration": _node_registration(node, control_plane=True),
        "localAPIEndpoint": {"advertiseAddress": node.vpc_ip, "bindPort": 6443},
    }
    if init_token:
        init["bootstrapTokens"] = [{"token": init_token, "ttl": INIT_TOKEN_TTL, "usages": ["signing", "authentication"],
                                    "groups": [NODE_TOKEN_GROUP],
                                    "description": "gpu-platform init: the program reads the cluster CA with it"}]
    if certificate_key:
        init["certificateKey"] = certificate_key
    return _dump([init, _cluster_configuration(cluster), _kubelet_configuration()])


def kubeadm_control_plane_join_config(cluster: ClusterSpec, node: NodeSpec, token: str = "",
                                      ca_hash: str = CA_HASH_FROM_PEERS, certificate_key: str = "",
                                      program_pki: bool = False) -> str:
    """JoinConfiguration for a further (or replaced) control plane: token discovery pinned to the CA hash
    (cp-0's is filled in at boot, CA_HASH_FROM_PEERS), certificates downloaded with the certificate key.
    `program_pki` (linode.pki: program): file discovery with the minted node kubeconfig, certificates from
    the node's own pki directory (no token, no certificateKey)."""
    if program_pki:
        return _dump([{
            "apiVersion": KUBEADM_API,
            "kind": "JoinConfiguration",
            "discovery": {"file": {"kubeConfigPath": DISCOVERY_KUBECONFIG_PATH}},
            "nodeRegistration": _node_registration(node, control_plane=True),
            "controlPlane": {"localAPIEndpoint": {"advertiseAddress": node.vpc_ip, "bindPort": 6443}},
        }, _kubelet_configuration()])
    join = {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": cluster.control_plane_endpoint, "token": token,
                                         "caCertHashes": [ca_hash]}},
        "nodeRegistration": _node_registration(node, control_plane=True),
        "controlPlane": {"localAPIEndpoint": {"advertiseAddress": node.vpc_ip, "bindPort": 6443},
                         "certificateKey": certificate_key},
    }
    return _dump([join, _kubelet_configuration()])


def kubeadm_worker_join_config(cluster: ClusterSpec, node: NodeSpec, token: str, ca_hash: str) -> str:
    """JoinConfiguration for a worker: the program's bootstrap token, pinned to the cluster CA."""
    join: dict = {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {"bootstrapToken": {"apiServerEndpoint": cluster.control_plane_endpoint, "token": token,
                                         "caCertHashes": [ca_hash]}},
        "nodeRegistration": _node_registration(node, control_plane=False),
    }
    return _dump([join, _kubelet_configuration()])


def readback_token_script() -> str:
    """cp-0 (after `kubeadm init`, a resumed init, and by hand when the program says the token is gone): create the
    read-back token's Secret from READBACK_TOKEN_PATH with `kubectl apply` (idempotent): kube-system
    bootstrap-token-<id>, type bootstrap.kubernetes.io/token, usage-bootstrap-signing only, no expiration (the
    bootstrap signer signs cluster-info for it; it authenticates nobody, so it is no join credential)."""
    return f"""#!/usr/bin/env bash
# Creates (or keeps) the read-back token's Secret: cluster-info stays signed for a token the program holds.
set -euo pipefail
token=$(tr -d '[:space:]' < {READBACK_TOKEN_PATH})
[[ "$token" =~ ^[a-z0-9]{{6}}\.[a-z0-9]{{16}}$ ]] || {{ echo "{READBACK_TOKEN_PATH} holds no bootstrap token" >&2; exit 1; }}
id=${{token%%.*}}
secret=${{token#*.}}
umask 077
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
cat > "$tmp" <<MANIFEST
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-$id
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "$id"
  token-secret: "$secret"
  usage-bootstrap-signing: "true"
  description: "gpu-platform read-back: signs cluster-info only (no expiry, authenticates nobody)"
MANIFEST
kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f "$tmp"
echo "read-back token kube-system/bootstrap-token-$id in place (signing only, no expiry)"
"""


def bootstrap_token_secret(token_id: str, token_secret: str, expiration: str) -> dict:
    """The `bootstrap.kubernetes.io/token` Secret a worker's join authenticates with (kube-system,
    named bootstrap-token-<id>; kubeadm's node-join groups; the token cleaner deletes it at expiry)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}", "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": token_id,
            "token-secret": token_secret,
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
            "description": "gpu-platform worker join (rotated by pulumi up)",
        },
    }


def token_window(now: "datetime.datetime", days: int) -> tuple[str, "datetime.datetime"]:
    """The rotation window `now` falls in: (window id, window end). A new window = a new token on the
    next `pulumi up`; the token stays valid one more window after its own ends, so a node created
    just before a rotation still joins."""
    epoch = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    index = (now - epoch).days // days
    end = epoch + datetime.timedelta(days=(index + 1) * days)
    return f"w{index}", end


def token_expiration(window_end: "datetime.datetime", days: int) -> str:
    return (window_end + datetime.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# Node scripts (each passes shellcheck; see tests)
# ---------------------------------------------------------------------------------------------


def _discover_version(endpoint: str) -> str:
    """Shell that sets `minor` and `pkg` from what the API server at `endpoint` runs (GET /version is
    readable without credentials: kubeadm binds system:public-info-viewer to system:unauthenticated),
    verified with the cluster CA shipped beside the join config."""
    return f"""# A worker installs exactly the version the control plane runs now, whenever it boots: its user data
# is kept as first written (ignore_changes), so a replaced worker must not trust a minor frozen there.
version=$(curl --silent --show-error --fail --max-time 10 --cacert {CLUSTER_CA_PATH} "https://{endpoint}/version" \\
  | sed -n 's/.*"gitVersion": *"\\(v[0-9][0-9.]*\\)".*/\\1/p')
if ! [[ "$version" =~ ^v1\\.[0-9]+\\.[0-9]+$ ]]; then
  echo "the API server at {endpoint} did not answer /version (got '$version'): retrying later" >&2
  exit 1
fi
minor=${{version#v}}
minor=${{minor%.*}}
pkg="${{version#v}}-{versions.KUBERNETES_DEB_REVISION}"
"""


def install_kubernetes_script(kubernetes_minor: str, discover_endpoint: str = "") -> str:
    """containerd (systemd cgroups) and kubeadm/kubelet/kubectl from pkgs.k8s.io: workers
    (`discover_endpoint` set) the exact version the API server runs when they boot; control planes the
    version their bootstrap passes as $1 (what the running control planes report: a control plane that
    joins an existing cluster, cp-0 replaced included), else the pinned patch of `kubernetes_minor` (a
    new cluster)."""
    if discover_endpoint:
        choose = _discover_version(discover_endpoint)
    else:
        choose = f"""# A control plane joining a running cluster installs what that cluster runs ($1, from its peers): its
# user data is kept as first written (ignore_changes), so the pinned minor below may be an old one.
version=${{1:-}}
if [ -n "$version" ]; then
  if ! [[ "$version" =~ ^v1\\.[0-9]+\\.[0-9]+$ ]]; then
    echo "not a Kubernetes release: '$version'" >&2
    exit 1
  fi
  minor=${{version#v}}
  minor=${{minor%.*}}
  pkg="${{version#v}}-{versions.KUBERNETES_DEB_REVISION}"
else
  minor={kubernetes_minor}
  pkg={versions.kubernetes_package_version(kubernetes_minor)}
fi
"""
    return f"""#!/usr/bin/env bash
# Installs containerd and pinned Kubernetes packages; idempotent so a re-run is harmless.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
{choose}
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
apt-get install -y -q apt-transport-https ca-certificates curl gpg openssl containerd
mkdir -p /etc/containerd /etc/apt/keyrings
if ! grep -q 'SystemdCgroup = true' /etc/containerd/config.toml 2>/dev/null; then
  containerd config default > /etc/containerd/config.toml
  # kubelet and containerd must agree on the cgroup driver (systemd on Ubuntu 24.04).
  sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml
  systemctl restart containerd
fi
systemctl enable containerd

curl -fsSL "https://pkgs.k8s.io/core:/stable:/v${{minor}}/deb/Release.key" \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v${{minor}}/deb/ /" \\
  > /etc/apt/sources.list.d/kubernetes.list
apt-get update -q
apt-get install -y -q --allow-change-held-packages "kubelet=${{pkg}}" "kubeadm=${{pkg}}" "kubectl=${{pkg}}"
# Kubernetes moves only through the node-upgrade Jobs (upgrade.py: kubeadm upgrade), never apt.
apt-mark hold kubelet kubeadm kubectl containerd
systemctl enable kubelet
"""


def install_nvidia_script() -> str:
    """NVIDIA driver from Ubuntu's signed, precompiled modules for the running kernel (no DKMS build,
    no headers), every NVIDIA package held, and `nvidia-smi` must work before the node may join."""
    branch = versions.NVIDIA_DRIVER_BRANCH
    toolkit = versions.NVIDIA_CONTAINER_TOOLKIT
    return f"""#!/usr/bin/env bash
# Installs the NVIDIA {branch} server driver for the running kernel and container toolkit {toolkit},
# then makes the nvidia runtime containerd's default so the device plugin and GPU pods need no
# runtimeClassName. Exits non-zero (and the node does not join) unless nvidia-smi sees the GPU.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
branch={branch}
kernel=$(uname -r)

apt-get update -q
# Ubuntu builds and signs the module for each kernel (source linux-restricted-modules): it loads
# under Secure Boot and needs no compiler. Without a build for this kernel, fall back to DKMS
# against this kernel's own headers.
if apt-cache show "linux-modules-nvidia-${{branch}}-server-${{kernel}}" >/dev/null 2>&1; then
  apt-get install -y -q --no-install-recommends \\
    "linux-modules-nvidia-${{branch}}-server-${{kernel}}" \\
    "nvidia-headless-no-dkms-${{branch}}-server" "nvidia-utils-${{branch}}-server"
else
  echo "no precompiled NVIDIA ${{branch}} modules for kernel ${{kernel}}: building with DKMS" >&2
  apt-get install -y -q --no-install-recommends "linux-headers-${{kernel}}" \\
    "nvidia-dkms-${{branch}}-server" "nvidia-headless-no-dkms-${{branch}}-server" "nvidia-utils-${{branch}}-server"
fi
modprobe nvidia
nvidia-smi -L

curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/nvidia-container-toolkit.gpg
curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \\
  | sed 's#deb https://#deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg] https://#' \\
  > /etc/apt/sources.list.d/nvidia-container-toolkit.list
apt-get update -q
apt-get install -y -q --allow-change-held-packages \\
  "nvidia-container-toolkit={toolkit}" "nvidia-container-toolkit-base={toolkit}" \\
  "libnvidia-container-tools={toolkit}" "libnvidia-container1={toolkit}"
# Driver, NVML and kernel module must move together: hold every installed NVIDIA package and the
# kernel (a new kernel would boot without this driver's module). Nodes change through replacement.
# Filtered from the full list: `dpkg-query -W PATTERN` exits 1 when a pattern matches nothing (no
# headers on the precompiled path, no linux-modules-nvidia on the DKMS one), which pipefail turns
# into an abort before containerd is configured.
dpkg-query -W -f='${{db:Status-Abbrev}} ${{binary:Package}}\\n' \\
  | awk '$1 ~ /^[ih]i$/ && $2 ~ /^(nvidia-|libnvidia-|linux-(modules|image|headers)-|linux-generic)/ {{print $2}}' \\
  | xargs --no-run-if-empty apt-mark hold
nvidia-ctk runtime configure --runtime=containerd --set-as-default
# A pod sees only the GPUs it was allocated: devices from the device plugin's volume mounts, never
# from an unprivileged container's own NVIDIA_VISIBLE_DEVICES (components/cluster.py DEVICE_LIST_STRATEGY).
{toolkit_isolation_command()}
systemctl restart containerd
nvidia-smi -L
"""


def mint_client_cert_script() -> str:
    """Shell: `mint_client_cert <ca path without .crt/.key> <subject> <out path without .key/.crt>`
    writes a P-256 key and a one-day client certificate signed by that CA. A joining control plane uses it
    for the etcd member clean-up, with the etcd CA it has just downloaded from the kubeadm-certs Secret."""
    return """mint_client_cert() {
  local ca=$1 subject=$2 out=$3
  openssl ecparam -name prime256v1 -genkey -noout -out "$out.key"
  openssl req -new -key "$out.key" -subj "$subject" -out "$out.csr"
  printf 'keyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth\\n' > "$out.ext"
  openssl x509 -req -in "$out.csr" -CA "$ca.crt" -CAkey "$ca.key" \\
    -set_serial "0x$(openssl rand -hex 16)" -days 1 -sha256 -extfile "$out.ext" -out "$out.crt" 2>/dev/null
}
"""


def mint_discovery_kubeconfig_script(node_name: str, endpoint: str) -> str:
    """linode.pki: program. Shell that writes DISCOVERY_KUBECONFIG_PATH: a one-day client certificate for
    system:node:<name> (group system:nodes) signed with the cluster CA this control plane holds.
    kubeadm join uses it for discovery and the kubelet's TLS bootstrap (the node authorizer and
    kubeadm's auto-approval of node client certificates accept it), so no token is involved."""
    return f"""mint_discovery_kubeconfig() {{
  local tmp
  tmp=$(mktemp -d)
  mint_client_cert "{PKI_DIR}/ca" "/O=system:nodes/CN=system:node:{node_name}" "$tmp/node"
  umask 077
  cat > "{DISCOVERY_KUBECONFIG_PATH}" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: https://{endpoint}
    certificate-authority-data: $(base64 -w0 < "{PKI_DIR}/ca.crt")
users:
- name: system:node:{node_name}
  user:
    client-certificate-data: $(base64 -w0 < "$tmp/node.crt")
    client-key-data: $(base64 -w0 < "$tmp/node.key")
contexts:
- name: join
  context:
    cluster: kubernetes
    user: system:node:{node_name}
current-context: join
KUBECONFIG
  rm -rf "$tmp"
}}
"""


def remove_stale_etcd_member_script(node_name: str) -> str:
    """Shell: before a control plane joins, remove an etcd member that still carries its name (the
    node it replaces), asking each surviving peer in turn. Uses etcdctl from the etcd image kubeadm
    runs at the cluster's version ($version, what the peers report) through containerd, and a one-day
    client certificate from the etcd CA this node downloaded (kubeadm join phase control-plane-prepare
    download-certs). Nothing to remove (a first deploy) or no peer
    answering is not an error: kubeadm join decides."""
    return f"""etcd_peer() {{
  ctr -n k8s.io run --rm --net-host --mount "type=bind,src=$etcd_tmp,dst=/certs,options=rbind:ro" \\
    "$etcd_image" "etcdctl-$$-$RANDOM" etcdctl --endpoints "https://$1:2379" --cacert /certs/ca.crt \\
    --cert /certs/client.crt --key /certs/client.key "${{@:2}}"
}}
remove_stale_etcd_member() {{
  local ip id
  etcd_tmp=$(mktemp -d)
  mint_client_cert "{PKI_DIR}/etcd/ca" "/CN=gpu-platform-etcd-member-cleanup" "$etcd_tmp/client"
  cp "{PKI_DIR}/etcd/ca.crt" "$etcd_tmp/ca.crt"
  etcd_image=$(kubeadm config images list --kubernetes-version "$version" | grep '/etcd:')
  ctr -n k8s.io images pull "$etcd_image" >/dev/null
  for ip in "${{peers[@]}}"; do
    if id=$(etcd_peer "$ip" member list | awk -F', ' -v name="{node_name}" '$3 == name {{print $1}}'); then
      if [ -n "$id" ]; then
        echo "removing the etcd member $id left by the {node_name} this node replaces"
        etcd_peer "$ip" member remove "$id"
      fi
      break
    fi
  done
  rm -rf "$etcd_tmp"
}}
"""


# A replaced cp-0 of an HA cluster must join the survivors, never initialise a second cluster: it
# looks for an answering peer this long before it concludes the cluster is new (on a first deploy the
# peers wait for cp-0, so this only delays that first boot).
PEER_WAIT_SECONDS = 180


def cluster_version_script(wait_seconds: int, ca_path: str = CLUSTER_CA_PATH) -> str:
    """Shell: `cluster_version` prints what the first answering peer's API server runs (GET /version,
    readable without credentials: kubeadm binds system:public-info-viewer to system:unauthenticated,
    verified with the cluster CA at `ca_path`: CLUSTER_CA_PATH, or with linode.pki: program the CA the node
    holds in its pki directory), trying for up to `wait_seconds` (0: one round); exit 1 when none answers."""
    return f"""cluster_version() {{
  local ip v deadline=$((SECONDS + {wait_seconds}))
  while :; do
    for ip in "${{peers[@]}}"; do
      v=$(curl --silent --fail --max-time 5 --cacert {ca_path} "https://$ip:6443/version" \\
        | sed -n 's/.*"gitVersion": *"\\(v[0-9][0-9.]*\\)".*/\\1/p') || continue
      if [[ "$v" =~ ^v1\\.[0-9]+\\.[0-9]+$ ]]; then
        echo "$v"
        return 0
      fi
    done
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 10
  done
}}"""


CLUSTER_INFO_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-cluster-info.py"


def cluster_info_script() -> str:
    """components/linode/cluster_info.py itself (standard library only): the check the program makes on the
    operator's machine (the read-back commands' stdin)."""
    from pathlib import Path

    return "#!/usr/bin/env python3\n" + (Path(__file__).parent / "cluster_info.py").read_text()


def cluster_info_verify_script() -> str:
    """What a replaced cp-0 runs (CLUSTER_INFO_SCRIPT_PATH, `verify`: cluster-info's JSON on stdin, TOKENS in the
    environment, the CA on stdout): cluster_info.py's own signature check, its functions' source as they are
    (inspect), without the read-back's polling and messages, which would not fit in user data."""
    import inspect

    from gpu_platform.components.linode import cluster_info as ci

    parts = [inspect.getsource(f) for f in (ci.ClusterInfoError, ci.NotSignedError, ci._b64url,
                                             ci.detached_signature, ci.verified_ca)]
    return ("#!/usr/bin/env python3\n# gpu-platform: cluster_info.py's signature check (verify only).\n"
            "import base64, hashlib, hmac, json, os, re, sys\nfrom typing import Any, Optional\n\n\n"
            + "\n\n".join(parts) + "\n\n"
            "try:\n"
            "    sys.stdout.write(verified_ca(json.load(sys.stdin), os.environ.get(\"TOKENS\", \"\").split()))\n"
            "except (ClusterInfoError, ValueError) as exc:\n"
            "    sys.exit(f\"cluster-info: {exc}\")\n")


PEER_CLUSTER_INFO_PATH = "/var/lib/gpu-platform/peer-cluster-info.json"
# Where the program records a cluster it has read the CA of (the etcd bucket, cluster.py `{name}-cluster-record`):
# cp-0's positive evidence, at boot, of whether this cluster was ever created.
CLUSTER_RECORD_KEY = "cluster/ca.crt"
# Written just before cp-0's `kubeadm init`: a later attempt on the same disk resumes that init, never resets it.
INIT_STARTED_PATH = "/var/lib/gpu-platform/init-started"
# An operator's decision (Lish, docs/linode.md "Restoring a single control plane"): the only control plane of a
# recorded cluster is gone, initialise a new one (new CAs) to restore the snapshot into.
INIT_NEW_CONTROL_PLANE_PATH = "/var/lib/gpu-platform/init-new-control-plane"


def peer_cluster_ca_script(wait_seconds: int) -> str:
    """Shell (cp-0 of an HA cluster): `peer_cluster_ca` asks the peers for cluster-info (kube-public, readable
    without credentials) for up to `wait_seconds`. Returns 0 with CLUSTER_CA_PATH written when a peer's is
    signed for one of the tokens this node holds (its join token, the init token, the read-back token, which
    never expires): the CA is the cluster's, only a holder of such a token could sign it. 2 when a peer
    answered at all (a TCP connection to 6443: any HTTP status, 5xx and 403 included, or a timeout after
    connecting) without such a cluster-info: a cluster is there, so retry, never initialise. 1 only when no
    peer could be connected to for the whole wait."""
    return f"""peer_cluster_ca() {{
  local ip out code connects tokens answered=0 deadline=$((SECONDS + {wait_seconds}))
  tokens="$(sed -n 's/^[ -]*token: *//p' {KUBEADM_JOIN_CONFIG_PATH} {KUBEADM_CONFIG_PATH}) $(cat {READBACK_TOKEN_PATH} 2>/dev/null || true)"
  while :; do
    for ip in "${{peers[@]}}"; do
      rm -f {PEER_CLUSTER_INFO_PATH}
      # The channel is not checked (no CA yet): the content is, with this node's tokens.
      out=$(curl --silent --insecure --connect-timeout 5 --max-time 10 --output {PEER_CLUSTER_INFO_PATH} \
        --write-out '%{{http_code}} %{{num_connects}}' \
        "https://$ip:6443/api/v1/namespaces/kube-public/configmaps/cluster-info") || true
      code=${{out%% *}}
      connects=${{out##* }}
      # Nothing listens there (refused, unreachable): no answer from this peer.
      [ "${{connects:-0}}" -gt 0 ] 2>/dev/null || continue
      answered=1
      if [ "$code" != 200 ]; then
        echo "peer $ip answers HTTP $code: a cluster is there" >&2
        continue
      fi
      if TOKENS="$tokens" python3 {CLUSTER_INFO_SCRIPT_PATH} verify < {PEER_CLUSTER_INFO_PATH} > "{CLUSTER_CA_PATH}.new"; then
        mv "{CLUSTER_CA_PATH}.new" {CLUSTER_CA_PATH}
        return 0
      fi
      rm -f "{CLUSTER_CA_PATH}.new"
    done
    [ "$SECONDS" -lt "$deadline" ] || break
    sleep 10
  done
  [ "$answered" -eq 0 ] || return 2
  return 1
}}"""


def cluster_record_script() -> str:
    """Shell (cp-0): `cluster_record` asks the etcd bucket (its key is in ETCD_BACKUP_ENV_PATH) for the record
    the program writes once it has read this cluster's CA back (CLUSTER_RECORD_KEY). 0: recorded (this cluster
    exists, or existed: never initialise another); 1: HTTP 404, never recorded (the first creation); 2: any
    other answer or none (cannot tell: retry)."""
    return f"""cluster_record() {{
  local code
  # shellcheck disable=SC1091 # written by cloud-init
  . {ETCD_BACKUP_ENV_PATH}
  code=$(curl --silent --connect-timeout 10 --max-time 30 --output /dev/null --write-out '%{{http_code}}' \
    --aws-sigv4 "aws:amz:${{REGION}}:s3" --user "${{ACCESS_KEY}}:${{SECRET_KEY}}" \
    "https://${{BUCKET}}.${{ENDPOINT}}/{CLUSTER_RECORD_KEY}") || true
  case "$code" in
    200) return 0 ;;
    404) return 1 ;;
  esac
  echo "the etcd bucket answers ${{code:-nothing}} for s3://${{BUCKET}}/{CLUSTER_RECORD_KEY}: cannot tell whether this cluster exists" >&2
  return 2
}}"""


def bootstrap_script(role: str, node_name: str = "", endpoint: str = "", peers: Sequence[str] = (),
                     gpu: bool = False, kubernetes_minor: str = "", program_pki: bool = False) -> str:
    """The node's whole bootstrap, run by BOOTSTRAP_UNIT until it succeeds: install, driver (GPU
    nodes: must pass nvidia-smi first), then kubeadm. role: init (cp-0) | join-control-plane | join.

    Control planes first ask their peers which release the cluster runs: one that joins installs that
    release (its user data, kept as first written, names the minor of the day it was created); cp-0 finds
    no peer answering on a first deploy and initialises the pinned release.

    `program_pki` (linode.pki: program): gpu-platform 0.2.0's script, the CAs already on the node
    (_program_pki_bootstrap_script)."""
    if role not in ("init", "join-control-plane", "join"):
        raise ValueError(f"unknown role {role!r}")
    if program_pki and role != "join":
        return _program_pki_bootstrap_script(role, node_name, endpoint, peers)
    reset_comment = (["# A previous attempt that failed half-way left kubeadm state behind: reset it (kubeadm reset",
                      "# also empties the pki directory, so control planes keep a copy of what cloud-init wrote)."]
                     if program_pki else ["# A previous attempt that failed half-way left kubeadm state behind: reset it."])
    lines = [
        "#!/usr/bin/env bash",
        f"# Brings this node into the cluster ({role}). Run by {BOOTSTRAP_UNIT}, which retries until this",
        "# exits 0; every step is idempotent, and the marker file makes later boots a no-op.",
        "set -euo pipefail",
        f"marker={JOINED_MARKER}",
        'if [ -f "$marker" ]; then',
        "  exit 0",
        "fi",
        "mkdir -p /var/lib/gpu-platform",
    ]
    if role == "join":
        lines += [INSTALL_SCRIPT_PATH, *([NVIDIA_SCRIPT_PATH] if gpu else [])]
    else:
        lines += [f"peers=({' '.join(peers)})", cluster_version_script(0)]
        if role == "init":
            lines += [peer_cluster_ca_script(PEER_WAIT_SECONDS if peers else 0), cluster_record_script()]
            lines += [
                "# cp-0 initialises only on positive evidence that no cluster exists: no peer could be connected to",
                "# AND the etcd bucket answers 404 for the record the program writes once it has read a CA back.",
                "# Anything else (a peer answering 5xx, the bucket unreachable) is a cluster to join or a retry.",
                f"if [ -f {INIT_STARTED_PATH} ] && [ -f {PKI_DIR}/ca.crt ] && [ -f {PKI_DIR}/ca.key ]; then",
                "  # An earlier attempt on this disk ran kubeadm init: resume it with the CAs it generated (the",
                "  # program may already have read them back and recorded them); never reset them.",
                "  mode=\"resume\"",
                "  version=\"\"",
                "else",
                "  found=1",
                "  if [ ${#peers[@]} -gt 0 ]; then",
                "    found=0",
                "    peer_cluster_ca || found=$?",
                "  fi",
                "  if [ \"$found\" -eq 2 ]; then",
                "    echo 'a peer control plane answers, but not yet with a cluster-info signed for a token this node holds: retrying later (never a second cluster)' >&2",
                "    exit 1",
                "  elif [ \"$found\" -eq 0 ]; then",
                "    # Pin the CA the signature vouched for (kubeadm's caCertHashes: sha256 of its public key).",
                f"    hash=$(openssl x509 -pubkey -noout -in {CLUSTER_CA_PATH} | openssl pkey -pubin -outform DER | sha256sum | cut -d' ' -f1)",
                f"    sed -i \"s|{CA_HASH_FROM_PEERS}|sha256:$hash|\" {KUBEADM_JOIN_CONFIG_PATH}",
                "    if ! version=$(cluster_version); then",
                "      echo 'no control plane of this cluster answers /version: retrying later' >&2",
                "      exit 1",
                "    fi",
                "    mode=\"join\"",
                "    echo \"a control plane of this cluster answers (it runs $version): joining it (replaced cp-0)\"",
                "  else",
                "    recorded=0",
                "    cluster_record || recorded=$?",
                "    if [ \"$recorded\" -eq 2 ]; then",
                "      exit 1",
                "    # A recorded cluster: initialise a new control plane (new CAs, to restore a snapshot into) only on the",
                "    # operator's explicit word (docs/linode.md: a single control plane lost, or every HA control plane).",
                f"    elif [ \"$recorded\" -eq 0 ] && [ ! -f {INIT_NEW_CONTROL_PLANE_PATH} ]; then",
                "      if [ ${#peers[@]} -gt 0 ]; then",
                "        echo 'this cluster exists (the program recorded its CA) and no peer control plane answers: waiting for one; never a second cluster' >&2",
                f"        echo 'If every control plane is lost, follow docs/linode.md \"Losing every control plane\" (it starts with: touch {INIT_NEW_CONTROL_PLANE_PATH}).' >&2",
                "      else",
                "        echo 'REFUSING to initialise: this cluster exists (the program recorded its CA) and its only control plane is gone.' >&2",
                f"        echo 'To restore it, follow docs/linode.md \"Restoring a single control plane\" (it starts with: touch {INIT_NEW_CONTROL_PLANE_PATH}).' >&2",
                "      fi",
                "      exit 1",
                "    fi",
                "    mode=\"init\"",
                "    version=\"\"",
                "  fi",
                "fi",
            ]
        else:
            lines += [
                "if ! version=$(cluster_version); then",
                "  echo 'no control plane of this cluster answers /version yet: retrying later' >&2",
                "  exit 1",
                "fi",
                "mode=\"join\"",
            ]
        lines.append(f'{INSTALL_SCRIPT_PATH} "$version"')
    reset_test = "if [ -f /etc/kubernetes/kubelet.conf ] || [ -n \"$(ls -A /etc/kubernetes/manifests 2>/dev/null)\" ]; then"
    if role == "init" and not program_pki:
        # A resumed init keeps everything; a join or a fresh init starts from a clean node.
        reset_test = "if [ \"$mode\" != resume ] && { " + reset_test[3:-6] + "; }; then"
    lines += [
        *reset_comment,
        reset_test,
        "  kubeadm reset --force",
        "fi",
    ]
    if role == "join":
        lines += [
            "# kubeadm's preflight refuses a kubelet newer than the control plane (version skew).",
            f"kubeadm join --config {KUBEADM_CONFIG_PATH}",
            "# The config holds the bootstrap token: it is useless once joined, and expires anyway.",
            f"shred -u {KUBEADM_CONFIG_PATH}",
        ]
    else:
        config = KUBEADM_JOIN_CONFIG_PATH if role == "init" else KUBEADM_CONFIG_PATH
        lines.append(mint_client_cert_script().rstrip("\n"))
        lines.append(remove_stale_etcd_member_script(node_name).rstrip("\n"))
        join = [
            "# The CAs and the service-account key, from the kubeadm-certs Secret (the certificate key decrypts",
            "# it). It lives two hours after an upload: a live control plane uploads again while this one is",
            f"# missing ({CERTS_UPLOAD_SCRIPT_PATH}), so a failure here is retried.",
            f"if ! kubeadm join phase control-plane-prepare download-certs --config {config}; then",
            "  echo 'the kubeadm-certs Secret is not there yet (a live control plane uploads it within minutes): retrying later' >&2",
            "  exit 1",
            "fi",
            *(["remove_stale_etcd_member"] if peers else []),
            f"kubeadm join --config {config}",
        ]
        lines += [
            'if [ "$mode" = join ]; then',
            *[f"  {line}" for line in join],
            "elif [ \"$mode\" = resume ]; then",
            "  # kubeadm's certs and kubeconfig phases use the files an earlier attempt wrote (\"Using existing ca",
            "  # certificate authority\"); preflight is skipped, as it refuses the manifests and etcd data it left.",
            f"  kubeadm init --config {KUBEADM_CONFIG_PATH} --upload-certs --skip-token-print --skip-certificate-key-print --skip-phases=preflight",
            f"  {READBACK_TOKEN_SCRIPT_PATH}",
            f"  {ADMIN_CERT_SCRIPT_PATH} publish",
            "else",
            f"  touch {INIT_STARTED_PATH}",
            f"  kubeadm init --config {KUBEADM_CONFIG_PATH} --upload-certs --skip-token-print --skip-certificate-key-print",
            "  # The read-back token: not in kubeadm's config (kubeadm refuses a signing-only token there).",
            f"  {READBACK_TOKEN_SCRIPT_PATH}",
            f"  {ADMIN_CERT_SCRIPT_PATH} publish",
            "fi",
        ]
    lines.append('touch "$marker"')
    return "\n".join(lines) + "\n"


def _program_pki_bootstrap_script(role: str, node_name: str, endpoint: str, peers: Sequence[str]) -> str:
    """A control plane's bootstrap with linode.pki: program, as gpu-platform 0.2.0 wrote it: the program's CAs
    are in PKI_DIR (cloud-init wrote them; a copy in PKI_SEED survives `kubeadm reset`); a joining control
    plane mints its discovery kubeconfig from the cluster CA (mint_discovery_kubeconfig_script); a replaced
    cp-0 waits PEER_WAIT_SECONDS for a peer before it initialises."""
    lines = [
        "#!/usr/bin/env bash",
        f"# Brings this node into the cluster ({role}). Run by {BOOTSTRAP_UNIT}, which retries until this",
        "# exits 0; every step is idempotent, and the marker file makes later boots a no-op.",
        "set -euo pipefail",
        f"marker={JOINED_MARKER}",
        'if [ -f "$marker" ]; then',
        "  exit 0",
        "fi",
        "mkdir -p /var/lib/gpu-platform",
        f"peers=({' '.join(peers)})",
        cluster_version_script(PEER_WAIT_SECONDS if role == "init" and peers else 0, f"{PKI_DIR}/ca.crt"),
    ]
    if role == "init":
        lines += [
            "# A replaced cp-0 of an HA cluster joins the survivors; a first deploy finds nobody and initialises.",
            "if version=$(cluster_version); then",
            "  mode=\"join\"",
            "  echo \"a control plane of this cluster answers (it runs $version): joining it (replaced cp-0)\"",
            "else",
            "  mode=\"init\"",
            "  version=\"\"",
            "fi",
        ]
    else:
        lines += [
            "if ! version=$(cluster_version); then",
            "  echo 'no control plane of this cluster answers /version yet: retrying later' >&2",
            "  exit 1",
            "fi",
            "mode=\"join\"",
        ]
    lines += [
        f'{INSTALL_SCRIPT_PATH} "$version"',
        "# A previous attempt that failed half-way left kubeadm state behind: reset it (kubeadm reset",
        "# also empties the pki directory, so control planes keep a copy of what cloud-init wrote).",
        f"[ -d {PKI_SEED} ] || cp -a {PKI_DIR} {PKI_SEED}",
        "if [ -f /etc/kubernetes/kubelet.conf ] || [ -n \"$(ls -A /etc/kubernetes/manifests 2>/dev/null)\" ]; then",
        "  kubeadm reset --force",
        f"  cp -a {PKI_SEED}/. {PKI_DIR}/",
        "fi",
        mint_client_cert_script().rstrip("\n"),
        mint_discovery_kubeconfig_script(node_name, endpoint).rstrip("\n"),
        remove_stale_etcd_member_script(node_name).rstrip("\n"),
    ]
    join = [
        "mint_discovery_kubeconfig",
        *(["remove_stale_etcd_member"] if peers else []),
        f"kubeadm join --config {KUBEADM_JOIN_CONFIG_PATH if role == 'init' else KUBEADM_CONFIG_PATH}",
        f"rm -f {DISCOVERY_KUBECONFIG_PATH}",
    ]
    lines += [
        'if [ "$mode" = join ]; then',
        *[f"  {line}" for line in join],
        "else",
        f"  kubeadm init --config {KUBEADM_CONFIG_PATH} --skip-token-print",
        "fi",
        'touch "$marker"',
    ]
    return "\n".join(lines) + "\n"


def renew_certs_script(program_pki: bool = False) -> str:
    """Control planes: renew kubeadm's certificates (1-year validity) monthly, then restart the static
    pods one at a time so they load them (kubeadm docs, "Certificate Management with kubeadm", manual
    renewal). The manifests never leave /etc/kubernetes/manifests: each pod's sandbox is stopped with
    crictl (cri-tools, a dependency of the kubeadm package) and the kubelet starts it again, so an
    interrupted run (a reboot, a kill) cannot strand a control-plane component without its manifest.
    Stray `*.yaml.renewing` files that older versions of this script left behind are put back first.
    Certificates signed by the cluster's CAs (kubeadm's, valid 10 years). Then the program's admin certificate,
    if it expires within ADMIN_CERT_RENEW_DAYS (admin_cert_script renew). `program_pki` (linode.pki: program):
    the script gpu-platform 0.2.0 wrote, without that step (the program signs the admin certificate)."""
    admin_renew = "" if program_pki else f"""if [ -x {ADMIN_CERT_SCRIPT_PATH} ]; then
  {ADMIN_CERT_SCRIPT_PATH} renew
fi
"""
    return f"""#!/usr/bin/env bash
# Renews every kubeadm-managed certificate of this control plane and restarts its static pods.
set -euo pipefail
[ -f {JOINED_MARKER} ] || exit 0
for stray in /etc/kubernetes/*.yaml.renewing; do
  [ -e "$stray" ] || continue
  name=$(basename "$stray" .renewing)
  [ -e "/etc/kubernetes/manifests/$name" ] || mv "$stray" "/etc/kubernetes/manifests/$name"
done
kubeadm certs renew all
crictl_() {{ crictl --runtime-endpoint unix:///run/containerd/containerd.sock "$@"; }}
for component in etcd kube-apiserver kube-controller-manager kube-scheduler; do
  old=$(crictl_ pods --label "component=${{component}}" --state ready -q)
  for pod in $old; do
    crictl_ stopp "$pod"
  done
  # The kubelet starts a new sandbox from the unchanged manifest; wait for it before the next one.
  for _ in $(seq 60); do
    new=$(crictl_ pods --label "component=${{component}}" --state ready -q)
    if [ -n "$new" ] && [ "$new" != "$old" ]; then
      break
    fi
    sleep 5
  done
  if [ -z "$new" ] || [ "$new" = "$old" ]; then
    echo "${{component}} did not come back within 5 minutes" >&2
    exit 1
  fi
done
{admin_renew}kubeadm certs check-expiration
"""


# ---------------------------------------------------------------------------------------------
# systemd units and cloud-init
# ---------------------------------------------------------------------------------------------

BOOTSTRAP_UNIT = "gpu-platform-bootstrap.service"
RENEW_UNIT = "gpu-platform-renew-certs.service"
RENEW_TIMER = "gpu-platform-renew-certs.timer"
RENEW_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-renew-certs.sh"
JOINED_MARKER = "/var/lib/gpu-platform/joined"
ADMIN_CERT_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-admin-cert.sh"
CERTS_UPLOAD_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-upload-certs.sh"
CERTS_UPLOAD_UNIT = "gpu-platform-upload-certs.service"
CERTS_UPLOAD_TIMER = "gpu-platform-upload-certs.timer"
ADMIN_CERT_DAYS = 365
ADMIN_CERT_RENEW_DAYS = 60


def admin_cert_script() -> str:
    """Control planes: sign the program's admin CSR (ADMIN_CSR_PATH; its key is in Pulumi state only) with the
    cluster CA and publish the certificate in the kube-public ConfigMap cluster_info.ADMIN_CERT_CONFIGMAP,
    readable without credentials like cluster-info (a certificate is public). `publish` after kubeadm init;
    `renew` (the monthly renewal timer) only when the published one expires within ADMIN_CERT_RENEW_DAYS.
    The program reads it back verified with the CA (cluster_info.py admin) on each renewal window."""
    from gpu_platform.components.linode.cluster_info import ADMIN_CERT_CONFIGMAP, ADMIN_CERT_KEY

    return f"""#!/usr/bin/env bash
# Signs the program's admin client CSR with the cluster CA and publishes the certificate in kube-public.
set -euo pipefail
k() {{ kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }}
name={ADMIN_CERT_CONFIGMAP}
if [ "${{1:-publish}}" = renew ]; then
  current=$(k -n kube-public get configmap "$name" -o jsonpath='{{.data.cert\.pem}}' 2>/dev/null || true)
  if [ -n "$current" ] && openssl x509 -noout -checkend {ADMIN_CERT_RENEW_DAYS * 86400} <<<"$current" >/dev/null; then
    exit 0
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > "$tmp/ext"
openssl x509 -req -in {ADMIN_CSR_PATH} -CA {PKI_DIR}/ca.crt -CAkey {PKI_DIR}/ca.key \
  -set_serial "0x$(openssl rand -hex 16)" -days {ADMIN_CERT_DAYS} -sha256 -extfile "$tmp/ext" -out "$tmp/admin.crt"
k -n kube-public create configmap "$name" --from-file={ADMIN_CERT_KEY}="$tmp/admin.crt" --dry-run=client -o yaml \
  | k apply -f -
k -n kube-public create role "$name" --verb=get --resource=configmaps --resource-name="$name" --dry-run=client -o yaml \
  | k apply -f -
k -n kube-public create rolebinding "$name" --role="$name" --user=system:anonymous --dry-run=client -o yaml \
  | k apply -f -
echo "admin certificate published: kube-public/$name"
"""


# A peer control plane whose kubelet has posted no status this long (Ready=Unknown: the machine is gone, a
# replacement is booting) may need the certificates; a shorter silence (a kubelet restart, a reboot) does not.
PEER_GONE_SECONDS = 300


def certs_upload_script(peer_names: Sequence[str]) -> str:
    """Control planes of an HA cluster, every few minutes: while a peer control plane is gone (its Node missing,
    or Ready=Unknown, i.e. no kubelet status, for PEER_GONE_SECONDS: the machine was lost and a replacement
    is booting) and no kubeadm-certs Secret exists, upload the certificates again, encrypted with the
    certificate key (`kubeadm init phase upload-certs --upload-certs`, the way kubeadm's own error names when
    the Secret has expired). The Secret goes again two hours later (its token's TTL). A peer that is
    NotReady with its kubelet reporting (Ready=False), or silent for less than that, gets nothing."""
    names = " ".join(peer_names)
    return f"""#!/usr/bin/env bash
# Keeps the kubeadm-certs Secret available while a peer control plane is gone (being replaced).
set -euo pipefail
[ -f {JOINED_MARKER} ] || exit 0
k() {{ kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }}
missing=""
now=$(date +%s)
for name in {names}; do
  if ! ready=$(k get node "$name" -o jsonpath='{{range .status.conditions[?(@.type=="Ready")]}}{{.status}} {{.lastTransitionTime}}{{end}}' 2>/dev/null); then
    missing="$missing $name"
    continue
  fi
  if [ "${{ready%% *}}" = Unknown ]; then
    since=$(date -d "${{ready#* }}" +%s 2>/dev/null || echo "$now")
    [ $((now - since)) -lt {PEER_GONE_SECONDS} ] || missing="$missing $name"
  fi
done
[ -n "$missing" ] || exit 0
if k -n kube-system get secret kubeadm-certs >/dev/null 2>&1; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
umask 077
cat > "$tmp/upload.yaml" <<CONFIG
apiVersion: {KUBEADM_API}
kind: InitConfiguration
certificateKey: $(cat {CERTIFICATE_KEY_PATH})
---
apiVersion: {KUBEADM_API}
kind: ClusterConfiguration
kubernetesVersion: $(kubeadm version -o short)
CONFIG
echo "control plane(s)$missing gone for {PEER_GONE_SECONDS // 60} minutes and no kubeadm-certs Secret: uploading the certificates (for 2 hours)"
kubeadm init phase upload-certs --upload-certs --skip-certificate-key-print --config "$tmp/upload.yaml"
"""


REPUBLISH_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-republish-cluster-info.sh"


def republish_cluster_info_script() -> str:
    """Control planes, by hand in a restore (docs/linode.md "Restoring a single control plane"): publish
    kube-public/cluster-info again from this node's own CA, as kubeadm init wrote it (the cluster of admin.conf:
    its server, the CA of PKI_DIR). etcd restored from a snapshot brings back the cluster-info of the CA the
    snapshot's cluster had, which kubeadm never rewrites (clusterinfo.CreateBootstrapConfigMapIfNotExists); the
    whole object is replaced, so every old signature goes and the bootstrap signer signs it again for every
    signing token (the read-back token the program checks among them)."""
    return f"""#!/usr/bin/env bash
# Publishes kube-public/cluster-info again from this control plane's own CA.
set -euo pipefail
k() {{ kubectl --kubeconfig /etc/kubernetes/admin.conf "$@"; }}
server=$(sed -n 's/^ *server: *//p' /etc/kubernetes/admin.conf | head -n 1)
[ -n "$server" ] || {{ echo "no server in /etc/kubernetes/admin.conf" >&2; exit 1; }}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/cluster-info.yaml" <<MANIFEST
apiVersion: v1
kind: ConfigMap
metadata:
  name: cluster-info
  namespace: kube-public
data:
  kubeconfig: |
    apiVersion: v1
    clusters:
    - cluster:
        certificate-authority-data: $(base64 -w0 {PKI_DIR}/ca.crt)
        server: $server
      name: ""
    contexts: null
    current-context: ""
    kind: Config
    preferences: {{}}
    users: null
MANIFEST
k replace -f "$tmp/cluster-info.yaml"
echo "cluster-info published again from {PKI_DIR}/ca.crt; the bootstrap signer signs it within seconds"
"""


def certs_upload_units() -> tuple[str, str]:
    service = f"""[Unit]
Description=gpu-platform: upload the control-plane certificates while a peer control plane is missing
ConditionPathExists={JOINED_MARKER}

[Service]
Type=oneshot
ExecStart={CERTS_UPLOAD_SCRIPT_PATH}
"""
    timer = """[Unit]
Description=gpu-platform: check every 2 minutes for a missing peer control plane

[Timer]
OnBootSec=2min
OnUnitActiveSec=2min

[Install]
WantedBy=timers.target
"""
    return service, timer


def bootstrap_unit() -> str:
    """Retries the bootstrap every 30 s until it succeeds (apt mirrors, the API or the token may not
    be there yet on first boot); `journalctl -u gpu-platform-bootstrap` shows why a node waits."""
    return f"""[Unit]
Description=gpu-platform: install Kubernetes (and the NVIDIA driver) and join the cluster
Wants=network-online.target
After=network-online.target
ConditionPathExists=!{JOINED_MARKER}
StartLimitIntervalSec=0

[Service]
Type=oneshot
ExecStart={BOOTSTRAP_SCRIPT_PATH}
Restart=on-failure
RestartSec=30
TimeoutStartSec=3600

[Install]
WantedBy=multi-user.target
"""


METADATA_BLOCK_UNIT = "gpu-platform-block-metadata.service"
METADATA_ALLOW_UNIT = "gpu-platform-metadata-allow.service"
METADATA_GUARD_PATH = "/usr/local/sbin/gpu-platform-metadata-guard.sh"
# Linode's metadata service, as cloud-init's Akamai datasource reaches it (canonical/cloud-init
# cloudinit/sources/DataSourceAkamai.py BUILTIN_DS_CONFIG base_urls: ipv4 http://169.254.169.254, ipv6
# http://[fd00:a9fe:a9fe::1], both allowed by default): a node's user data is served on both.
METADATA_ADDRESS = "169.254.169.254"
METADATA_ADDRESS_V6 = "fd00:a9fe:a9fe::1"
# The kubelet's pod cgroup under the systemd cgroup driver (KubeletConfiguration cgroupDriver: systemd).
POD_CGROUP = "kubepods.slice"
# The filter-table chain OUTPUT sends pod-cgroup traffic for the metadata service through: RETURN for the
# pods allowed (below), DROP for every other.
METADATA_CHAIN = "GPU-PLATFORM-METADATA"
# The one pod that needs the metadata service: the Linode CSI driver's node plugin (hostNetwork). In the
# pinned driver (linode/linode-blockstorage-csi-driver v1.0.6, internal/driver/metadata.go GetNodeMetadata)
# it finds its own instance through the metadata service first; the fallbacks (product_serial, then the
# Node's providerID) both ask the Linode API, and the chart gives the node plugin no token (only the
# controller gets LINODE_TOKEN), so without the metadata service the plugin exits, the driver never
# registers on the node and no volume attaches. Selected by what the chart's DaemonSet sets: namespace
# kube-system (where only cluster admins create pods) and its pod label.
METADATA_ALLOWED_PODS = (("kube-system", "app=csi-linode-node"),)
METADATA_ALLOW_INTERVAL_SECONDS = 3


def metadata_guard_script() -> str:
    """`setup`: the host rules (IPv4 and IPv6), idempotent. Pod traffic is denied by a Cilium clusterwide
    policy (addons.metadata_deny_policy: per endpoint in eBPF; an iptables FORWARD rule alone is passed
    over by Cilium's CILIUM_FORWARD chain, which ACCEPTs lxc traffic first); FORWARD stays as a second
    layer. hostNetwork pods bypass both: their packets leave through OUTPUT, so OUTPUT sends those whose
    socket belongs to the kubelet's pod cgroup tree (kubepods.slice; Cilium's CILIUM_OUTPUT only marks
    such traffic, it accepts only its proxy's) to METADATA_CHAIN, which drops them. The node's own
    services (cloud-init, root shells) still reach the metadata service.

    `allow` (one pass) / `watch` (every few seconds, the allow unit): METADATA_CHAIN gets a RETURN rule
    for the pod cgroup of each running METADATA_ALLOWED_PODS pod, ahead of its DROP, rewritten atomically
    (iptables-restore --noflush replaces the chain in one commit) when the set changes. A pod's cgroup
    (kubepods[-<qos>].slice/kubepods-<qos>-pod<uid>.slice) is made with its sandbox, before its containers
    start, and keeps its name across container restarts. `-m cgroup --path` matches that cgroup and its
    descendants (the containers' scopes): kernel net/netfilter/xt_cgroup.c, cgroup_mt_v1 ->
    cgroup_is_descendant. A plugin that starts before its rule is in retries its connection (its SYNs pass
    OUTPUT again) or is restarted by the kubelet into the same pod cgroup."""
    pods = " ".join(f"{ns}/{label}" for ns, label in METADATA_ALLOWED_PODS)
    return f"""#!/usr/bin/env bash
# Keeps pods (hostNetwork ones included) off the Linode metadata service, where this node's user data stays
# readable for its whole life, except the pods listed in allowed_pods (the CSI node plugin).
set -euo pipefail
chain={METADATA_CHAIN}
cgroup_root=${{CGROUP_ROOT:-/sys/fs/cgroup}}
allowed_pods=({pods})
families=("iptables {METADATA_ADDRESS}/32" "ip6tables {METADATA_ADDRESS_V6}/128")
crictl_() {{ crictl --runtime-endpoint unix:///run/containerd/containerd.sock "$@"; }}

setup() {{
  local tool address family
  for family in "${{families[@]}}"; do
    read -r tool address <<<"$family"
    "$tool" -w -N "$chain" 2>/dev/null || true
    "$tool" -w -C "$chain" -j DROP 2>/dev/null || "$tool" -w -A "$chain" -j DROP
    "$tool" -w -C FORWARD -d "$address" -j DROP 2>/dev/null || "$tool" -w -I FORWARD -d "$address" -j DROP
    "$tool" -w -C OUTPUT -d "$address" -m cgroup --path {POD_CGROUP} -j "$chain" 2>/dev/null \\
      || "$tool" -w -I OUTPUT -d "$address" -m cgroup --path {POD_CGROUP} -j "$chain"
  done
}}

# The cgroup paths (relative to the cgroup root) of the running allowed pods, one a line, sorted.
allowed_cgroups() {{
  local entry ns label uid dir
  command -v crictl >/dev/null 2>&1 || return 0
  for entry in "${{allowed_pods[@]}}"; do
    ns=${{entry%%/*}}
    label=${{entry#*/}}
    for uid in $(crictl_ pods --namespace "$ns" --label "$label" --state ready -o json 2>/dev/null \\
        | python3 -c 'import json, sys; [print(p["metadata"]["uid"]) for p in json.load(sys.stdin).get("items") or []]'); do
      [[ "$uid" =~ ^[0-9a-f-]+$ ]] || continue
      # The systemd cgroup driver names the pod's slice after its UID with dashes as underscores.
      dir=$(find "$cgroup_root/{POD_CGROUP}" -maxdepth 2 -type d -name "kubepods*-pod${{uid//-/_}}.slice" 2>/dev/null \
        | head -n 1 || true)
      if [ -n "$dir" ]; then
        echo "${{dir#"$cgroup_root"/}}"
      fi
    done
  done | sort -u
}}

applied=""
allow() {{
  local want family tool address rules path
  want=$(allowed_cgroups)
  [ "$want" != "$applied" ] || return 0
  for family in "${{families[@]}}"; do
    read -r tool address <<<"$family"
    rules="*filter"$'\\n'":$chain - [0:0]"$'\\n'
    while read -r path; do
      [ -n "$path" ] && rules+="-A $chain -m cgroup --path $path -j RETURN"$'\\n'
    done <<<"$want"
    rules+="-A $chain -j DROP"$'\\n'"COMMIT"$'\\n'
    # A pod gone between the listing and this call fails the commit and leaves the chain as it was.
    printf '%s' "$rules" | "$tool-restore" -w --noflush || return 0
  done
  applied=$want
  echo "metadata service open to pod cgroups: ${{want:-none}}"
}}

case "${{1:-}}" in
  setup) setup ;;
  allow) allow ;;
  watch)
    while :; do
      allow || true
      sleep {METADATA_ALLOW_INTERVAL_SECONDS}
    done ;;
  *) echo "usage: $0 setup|allow|watch" >&2; exit 2 ;;
esac
"""


def metadata_block_unit() -> str:
    """The host rules (metadata_guard_script setup), before the kubelet starts any pod. The slice is
    started first so the cgroup exists when the rule naming it is inserted."""
    return f"""[Unit]
Description=gpu-platform: keep pods (hostNetwork ones included) off the instance metadata service
Before=kubelet.service
After=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStartPre=/bin/systemctl start {POD_CGROUP}
ExecStart={METADATA_GUARD_PATH} setup

[Install]
WantedBy=multi-user.target
"""


def metadata_allow_unit() -> str:
    """Keeps the allowed pods' RETURN rules current (metadata_guard_script watch)."""
    return f"""[Unit]
Description=gpu-platform: let the CSI node plugin (only) reach the instance metadata service
Wants={METADATA_BLOCK_UNIT}
After={METADATA_BLOCK_UNIT}
Before=kubelet.service

[Service]
Type=simple
ExecStart={METADATA_GUARD_PATH} watch
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


def renew_units() -> tuple[str, str]:
    service = f"""[Unit]
Description=gpu-platform: renew kubeadm certificates
ConditionPathExists={JOINED_MARKER}

[Service]
Type=oneshot
ExecStart={RENEW_SCRIPT_PATH}
"""
    timer = """[Unit]
Description=gpu-platform: renew kubeadm certificates monthly (they are valid for one year)

[Timer]
OnCalendar=monthly
RandomizedDelaySec=12h
Persistent=true

[Install]
WantedBy=timers.target
"""
    return service, timer


ETCD_SNAPSHOT_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-etcd-snapshot.sh"
ETCD_SNAPSHOT_UNIT = "gpu-platform-etcd-snapshot.service"
ETCD_SNAPSHOT_TIMER = "gpu-platform-etcd-snapshot.timer"
ETCD_BACKUP_ENV_PATH = "/etc/gpu-platform/etcd-backup.env"
# The certificate snapshots are encrypted to (public; its private key is in Pulumi state only).
ETCD_BACKUP_RECIPIENT_PATH = "/etc/gpu-platform/etcd-backup-recipient.crt"
ETCD_SNAPSHOT_PREFIX = "etcd"
ETCD_SNAPSHOT_SUFFIX = ".db.cms"
ETCD_SNAPSHOT_INTERVAL_HOURS = 6
# node-exporter's textfile collector reads *.prom here (platform monitoring: the node's root is mounted at
# /host/root); the snapshot script writes its last success and last failure times.
NODE_METRICS_DIR = "/var/lib/gpu-platform/metrics"
ETCD_SNAPSHOT_SUCCESS_METRIC = "gpu_platform_etcd_snapshot_last_success_timestamp_seconds"
ETCD_SNAPSHOT_FAILURE_METRIC = "gpu_platform_etcd_snapshot_last_failure_timestamp_seconds"


@dataclass(frozen=True)
class EtcdBackup:
    """Where control planes put etcd snapshots: a bucket of their own (S3 API) with a key for it alone, and
    the certificate they encrypt each snapshot to."""
    bucket: str
    endpoint: str  # e.g. us-ord-1.linodeobjects.com
    region: str
    access_key: str
    secret_key: str
    recipient_cert: str = ""


def etcd_backup_env(backup: EtcdBackup) -> str:
    return (f"BUCKET={backup.bucket}\nENDPOINT={backup.endpoint}\nREGION={backup.region}\n"
            f"ACCESS_KEY={backup.access_key}\nSECRET_KEY={backup.secret_key}\n")


def etcd_snapshot_script(node_name: str) -> str:
    """Control planes: an etcd snapshot every few hours, taken by the etcdctl inside the running etcd
    static pod (its image ships etcdctl; kubeadm mounts /var/lib/etcd and the etcd PKI into it), encrypted
    to the backup certificate (CMS AuthEnvelopedData, AES-256-GCM, the key wrapped with RSA-OAEP: only the
    private key in Pulumi state opens it), then uploaded to the stack's etcd bucket under etcd/<node>/ with
    curl's SigV4 signing (curl >= 7.75; Ubuntu 24.04 has 8.5). The bucket's lifecycle rule expires old
    snapshots (retention). Every run leaves its outcome for node-exporter's textfile collector (the last
    success, the last failure), which the platform's alerts read."""
    return f"""#!/usr/bin/env bash
# Saves an etcd snapshot of this control plane, encrypts it and uploads it to the etcd backup bucket.
set -euo pipefail
[ -f {JOINED_MARKER} ] || exit 0
# shellcheck disable=SC1091 # written by cloud-init
. {ETCD_BACKUP_ENV_PATH}
metrics={NODE_METRICS_DIR}
snapshot=/var/lib/etcd/gpu-platform-snapshot.db
# The outcome, for node-exporter's textfile collector (written whole, then renamed: never read half-way).
record() {{
  local status=$? metric file
  rm -f "$snapshot" "$snapshot.cms"
  if [ "$status" -eq 0 ]; then metric={ETCD_SNAPSHOT_SUCCESS_METRIC}; file="etcd-snapshot-success.prom"
  else metric={ETCD_SNAPSHOT_FAILURE_METRIC}; file="etcd-snapshot-failure.prom"; fi
  mkdir -p "$metrics"
  printf '# TYPE %s gauge\n%s{{node="{node_name}"}} %s\n' "$metric" "$metric" "$(date +%s)" > "$metrics/$file.tmp"
  mv "$metrics/$file.tmp" "$metrics/$file"
}}
trap record EXIT
crictl_() {{ crictl --runtime-endpoint unix:///run/containerd/containerd.sock "$@"; }}
# The static pod carries kubeadm's label component=etcd (pod labels are on the sandbox, not on its
# containers): find the pod, then its running container.
pod=$(crictl_ pods --label component=etcd --state ready -q | head -n 1)
etcd=""
if [ -n "$pod" ]; then
  etcd=$(crictl_ ps --pod "$pod" --state running -q | head -n 1)
fi
if [ -z "$etcd" ]; then
  echo "no running etcd container on this node" >&2
  exit 1
fi
rm -f "$snapshot" "$snapshot.cms"
crictl_ exec "$etcd" etcdctl --endpoints=https://127.0.0.1:2379 \\
  --cacert=/etc/kubernetes/pki/etcd/ca.crt \\
  --cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt \\
  --key=/etc/kubernetes/pki/etcd/healthcheck-client.key \\
  snapshot save "$snapshot"
# Every Secret of the cluster is in it: it leaves this node encrypted.
openssl cms -encrypt -binary -stream -aes-256-gcm -outform DER -recip {ETCD_BACKUP_RECIPIENT_PATH} \\
  -keyopt rsa_padding_mode:oaep -in "$snapshot" -out "$snapshot.cms"
name="{ETCD_SNAPSHOT_PREFIX}/{node_name}/$(date -u +%Y%m%dT%H%M%SZ){ETCD_SNAPSHOT_SUFFIX}"
curl --silent --show-error --fail --max-time 600 \\
  --aws-sigv4 "aws:amz:${{REGION}}:s3" --user "${{ACCESS_KEY}}:${{SECRET_KEY}}" \\
  --upload-file "$snapshot.cms" "https://${{BUCKET}}.${{ENDPOINT}}/${{name}}"
echo "etcd snapshot uploaded, encrypted: s3://${{BUCKET}}/${{name}}"
"""


def etcd_snapshot_decrypt_args(encrypted: str, private_key: str, out: str) -> list[str]:
    """The first step of a restore (docs/linode.md): the snapshot as etcd wrote it, from what the bucket holds."""
    return ["openssl", "cms", "-decrypt", "-binary", "-inform", "DER", "-inkey", private_key, "-in", encrypted,
            "-out", out]


def etcd_restore_args(snapshot: str, member: str, peer_url: str, data_dir: str,
                      initial_cluster: str = "", tool: str = "etcdutl") -> list[str]:
    """The restore step of docs/linode.md ("Etcd snapshots, and restoring one"): a fresh data directory for one member from a snapshot.
    `etcdutl` (in the etcd image kubeadm runs, etcd >= 3.5); etcd 3.4's `etcdctl` takes the same flags.
    HA: run it on every control plane with the same `initial_cluster` (all members' peer URLs)."""
    return [tool, "snapshot", "restore", snapshot, "--name", member, "--data-dir", data_dir,
            "--initial-cluster", initial_cluster or f"{member}={peer_url}",
            "--initial-advertise-peer-urls", peer_url]


def etcd_snapshot_units() -> tuple[str, str]:
    service = f"""[Unit]
Description=gpu-platform: encrypted etcd snapshot to the etcd backup bucket
ConditionPathExists={JOINED_MARKER}

[Service]
Type=oneshot
ExecStart={ETCD_SNAPSHOT_SCRIPT_PATH}
"""
    timer = f"""[Unit]
Description=gpu-platform: etcd snapshot every {ETCD_SNAPSHOT_INTERVAL_HOURS} hours

[Timer]
OnCalendar=00/{ETCD_SNAPSHOT_INTERVAL_HOURS}:00
RandomizedDelaySec=15m
Persistent=true

[Install]
WantedBy=timers.target
"""
    return service, timer


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
    return _cloud_config(hostname, tuple(files), tuple(commands))


# PyYAML's emitter takes tens of milliseconds for a node's document (scripts and PEM blocks): a process that runs the
# program again with the same nodes (preflight's tests, the differential check) writes each document once.
@functools.lru_cache(maxsize=32)
def _cloud_config(hostname: str, files: tuple[File, ...], commands: tuple[str, ...]) -> str:
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


def node_user_data(role: str, node: NodeSpec, kubeadm_config: str, kubernetes_minor: str, gpu: bool, *,
                   endpoint: str = "", peers: Sequence[str] = (), keys: Optional[ControlPlaneKeys] = None,
                   join_config: Optional[str] = None, cluster_ca_pem: str = "",
                   etcd_backup: Optional[EtcdBackup] = None, peer_names: Sequence[str] = (),
                   pki: Optional[ControlPlanePki] = None, program_pki: bool = False) -> str:
    """The whole first-boot document of one node. role: init | join-control-plane | join.

    What each role carries, no private key in any: control planes the certificate key (the CAs come from
    cp-0's kubeadm, through the kubeadm-certs Secret), a bootstrap token, the Secrets encryption key and
    the admin CSR; further control planes and workers the CA certificate and its hash (cp-0's document is
    written before the CA exists: it learns it from a signed cluster-info when it replaces a lost cp-0);
    workers only a bootstrap token with an expiry. The bootstrap runs as a systemd unit that retries until
    it succeeds.

    `pki` instead of `keys` (linode.pki: program, gpu-platform 0.2.0's flow for clusters created by it):
    control planes carry the program's CAs and mint their own join credential; with `program_pki` (implied
    by `pki`) every document is the one 0.2.0 wrote, workers' included."""
    program_pki = program_pki or pki is not None
    control_plane = role in ("init", "join-control-plane")
    if control_plane and program_pki and pki is None:
        raise ValueError("a control plane of a linode.pki: program cluster needs the program's CAs")
    if control_plane and keys is not None and pki is not None:
        raise ValueError("a control plane gets either its keys (linode.pki: cluster) or the program's CAs (program)")
    if control_plane and keys is None and pki is None:
        raise ValueError("a control plane needs its keys (certificate key, token, encryption key, admin CSR)")
    if role == "join-control-plane" and pki is None and not cluster_ca_pem:
        raise ValueError("a further control plane needs the cluster CA certificate (read back from cp-0)")
    if role == "init" and join_config is None:
        raise ValueError("cp-0 needs its join configuration (used when it replaces a lost cp-0)")
    if role == "join" and not (endpoint and cluster_ca_pem):
        raise ValueError("a worker needs the API endpoint and the cluster CA certificate (it installs the version the API runs)")
    files = [
        File(INSTALL_SCRIPT_PATH, install_kubernetes_script(kubernetes_minor, endpoint if role == "join" else ""), "0700"),
        File(BOOTSTRAP_SCRIPT_PATH, bootstrap_script(role, node.name, endpoint, peers, gpu, kubernetes_minor,
                                                          program_pki=program_pki), "0700"),
        File(KUBEADM_CONFIG_PATH, kubeadm_config, "0600"),
        File(f"/etc/systemd/system/{BOOTSTRAP_UNIT}", bootstrap_unit(), "0644"),
        File(METADATA_GUARD_PATH, metadata_guard_script(), "0700"),
        File(f"/etc/systemd/system/{METADATA_BLOCK_UNIT}", metadata_block_unit(), "0644"),
        File(f"/etc/systemd/system/{METADATA_ALLOW_UNIT}", metadata_allow_unit(), "0644"),
        # The folder node-exporter's textfile collector reads must exist on every node from the start: a
        # missing one is a scrape error (node_textfile_scrape_error, kube-prometheus-stack's
        # NodeTextFileCollectorScrapeError alert).
        File(f"{NODE_METRICS_DIR}/README", "node-exporter's textfile collector reads *.prom files here\n", "0644"),
    ]
    commands = ["systemctl daemon-reload", f"systemctl enable --now {METADATA_BLOCK_UNIT}",
                f"systemctl enable --now {METADATA_ALLOW_UNIT}",
                f"systemctl enable --now --no-block {BOOTSTRAP_UNIT}"]
    if gpu:
        files.append(File(NVIDIA_SCRIPT_PATH, install_nvidia_script(), "0700"))
    if control_plane and pki is not None:
        files += pki_files(pki)
    elif control_plane:
        assert keys is not None
        files += [File(CERTIFICATE_KEY_PATH, keys.certificate_key + "\n", "0600"),
                  File(ENCRYPTION_CONFIG_PATH, encryption_configuration(keys.secrets_encryption_key), "0600"),
                  File(ADMIN_CSR_PATH, keys.admin_csr, "0644"),
                  File(ADMIN_CERT_SCRIPT_PATH, admin_cert_script(), "0700"),
                  File(REPUBLISH_SCRIPT_PATH, republish_cluster_info_script(), "0700")]
        if role == "init":
            files.append(File(CLUSTER_INFO_SCRIPT_PATH, cluster_info_verify_script(), "0755"))
            if keys.readback_token:
                files += [File(READBACK_TOKEN_PATH, keys.readback_token + "\n", "0600"),
                          File(READBACK_TOKEN_SCRIPT_PATH, readback_token_script(), "0700")]
        if peer_names:
            service, timer = certs_upload_units()
            files += [File(CERTS_UPLOAD_SCRIPT_PATH, certs_upload_script(peer_names), "0700"),
                      File(f"/etc/systemd/system/{CERTS_UPLOAD_UNIT}", service, "0644"),
                      File(f"/etc/systemd/system/{CERTS_UPLOAD_TIMER}", timer, "0644")]
            commands.insert(2, f"systemctl enable --now {CERTS_UPLOAD_TIMER}")
    if control_plane:
        service, timer = renew_units()
        files += [File(RENEW_SCRIPT_PATH, renew_certs_script(program_pki=pki is not None), "0700"),
                  File(f"/etc/systemd/system/{RENEW_UNIT}", service, "0644"),
                  File(f"/etc/systemd/system/{RENEW_TIMER}", timer, "0644")]
        commands.insert(2, f"systemctl enable --now {RENEW_TIMER}")  # cloud-init runs after boot: start it now
        if etcd_backup is not None:
            if not etcd_backup.recipient_cert:
                raise ValueError("etcd snapshots need the certificate they are encrypted to")
            service, timer = etcd_snapshot_units()
            files += [File(ETCD_BACKUP_ENV_PATH, etcd_backup_env(etcd_backup), "0600"),
                      File(ETCD_BACKUP_RECIPIENT_PATH, etcd_backup.recipient_cert, "0644"),
                      File(ETCD_SNAPSHOT_SCRIPT_PATH, etcd_snapshot_script(node.name), "0700"),
                      File(f"/etc/systemd/system/{ETCD_SNAPSHOT_UNIT}", service, "0644"),
                      File(f"/etc/systemd/system/{ETCD_SNAPSHOT_TIMER}", timer, "0644")]
            commands.insert(3, f"systemctl enable --now {ETCD_SNAPSHOT_TIMER}")
    if join_config is not None:
        files.append(File(KUBEADM_JOIN_CONFIG_PATH, join_config, "0600"))
    if role == "join" or (role == "join-control-plane" and pki is None):
        files.append(File(CLUSTER_CA_PATH, cluster_ca_pem, "0644"))
    return cloud_config(node.name, files, commands)


# Linode refuses user data whose base64-decoded bytes exceed this ("[400] [metadata.user_data] decoded
# user_data must not exceed 16384 bytes"; linode/cluster-api-provider-linode
# linodemachine_controller_helpers.go, maxBootstrapDataBytes): a control plane's document is ~19 KB.
USER_DATA_LIMIT_BYTES = 16384


def encode_user_data(document: str) -> str:
    """Linode's metadata service takes user data base64-encoded. A document that fits Linode's limit goes
    as it is (every cloud-init reads it); a larger one (a control plane's) gzip-compressed first, which
    cloud-init undoes itself (cloud-init docs, "User-data formats": gzip-compressed content is uncompressed
    and then used as if it were not compressed) from 24.4 on: before, its Linode (Akamai) datasource
    decoded the bytes as text and failed (canonical/cloud-init#5751; config refuses a private image with an
    older one, linode.imageCloudInit). mtime 0: the same document gives the same bytes (no Pulumi diff)."""
    raw = document.encode()
    if len(raw) > USER_DATA_LIMIT_BYTES:
        raw = gzip.compress(raw, compresslevel=9, mtime=0)
        if len(raw) > USER_DATA_LIMIT_BYTES:
            raise ValueError(f"user data of {len(raw)} bytes compressed is over Linode's {USER_DATA_LIMIT_BYTES}-byte limit")
    return base64.b64encode(raw).decode()


def decode_user_data(encoded: str) -> str:
    """The document encode_user_data encoded (plain base64 is read too)."""
    raw = base64.b64decode(encoded)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


# ---------------------------------------------------------------------------------------------
# Admin kubeconfig
# ---------------------------------------------------------------------------------------------


def admin_kubeconfig(cluster_name: str, server: str, ca_cert_pem: str, client_cert_pem: str, client_key_pem: str) -> str:
    b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
    user = f"{cluster_name}-admin"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        # The API certificate always names "kubernetes"; the public address may not be one of its SANs.
        "clusters": [{"name": cluster_name, "cluster": {"server": server, "certificate-authority-data": b64(ca_cert_pem),
                                                        "tls-server-name": "kubernetes"}}],
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
# Verify the certificate for the name "kubernetes" (always a SAN), reached at the public address.
until curl --silent --fail --cacert "$ca_file" --max-time 5 --resolve "kubernetes:6443:${API_HOST}" \
    "https://kubernetes:6443/readyz" >/dev/null; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "API server at ${API_HOST}:6443 not ready after 30 minutes; check the instances' console (Lish)" >&2
    exit 1
  fi
  sleep 10
done
"""
