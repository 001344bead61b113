"""The Linode kubeadm cluster as planned offline: what gets created, and every rendered artifact
checked by a real validator (cloud-init schema, shellcheck, openssl)."""

from __future__ import annotations

import base64
import os
import json
import re
import shutil
import subprocess

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from gpu_platform.components.cluster import GPU_TAINT, POOL_LABEL
from gpu_platform.components.linode import render
from gpu_platform.data import linode_kubelet
from gpu_platform.data import linode_versions as versions
from gpu_platform.components.linode.addons import DEFAULT_STORAGE_CLASS
from gpu_platform.components.linode.cluster import firewall_rules
from gpu_platform.preflight.runner import SECRET_SIG, SIG_KEY
from tests.conftest import plan_config, plan_stack, stack_config
from gpu_platform.components.linode.render import decode_user_data

INSTANCE = "linode:index/instance:Instance"
FIREWALL = "linode:index/firewall:Firewall"
RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def dev():
    # linode-dev with its GPU pool at a fixed size (minNodes == maxNodes == 1): the Pulumi-owned GPU
    # instance these tests look at. linode-dev itself autoscales the pool (tests/test_linode_autoscaling.py).
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:gpuPools"][0]["minNodes"] = 1
    return plan_config(cfg, "linode-dev")


@pytest.fixture(scope="module")
def ha():
    return plan_stack("linode-ha")


def user_data(resource) -> str:
    return decode_user_data(resource.plain_inputs["metadatas"][0]["userData"])


def all_user_data(plan) -> dict[str, str]:
    return {r.plain_inputs["label"]: user_data(r) for r in plan.by_type(INSTANCE)}


# --- what linode-dev creates ------------------------------------------------------------------


def test_dev_has_one_control_plane_two_system_workers_and_one_rtx4000_ada_worker(dev):
    # Two system workers: one cannot hold the platform's pods, the operator's Prometheus/Alertmanager and
    # a CPU notebook (cluster fit, docs/rehearsal.md).
    instances = {r.inputs["label"]: r.inputs for r in dev.by_type(INSTANCE)}
    assert instances["gpu-dev-cp-0"]["type"] == "g6-standard-4"
    assert instances["gpu-dev-system-0"]["type"] == instances["gpu-dev-system-1"]["type"] == "g6-standard-4"
    assert instances["gpu-dev-ada-0"]["type"] == "g2-gpu-rtx4000a1-m"
    assert set(instances) == {"gpu-dev-cp-0", "gpu-dev-system-0", "gpu-dev-system-1", "gpu-dev-ada-0"}
    for inputs in instances.values():
        assert inputs["region"] == "us-ord"
        assert inputs["diskEncryption"] == "enabled"
        assert {"owner:ml-platform", "cost-center:research", "environment:dev"} <= set(inputs["tags"])
        assert inputs["metadatas"][0]["userData"] == "[secret]"
        assert "authorizedKeys" not in inputs  # no SSH keys configured: no SSH at all


def test_firewall_drops_by_default_and_opens_the_api_only_to_admins_and_the_vpc(dev):
    fw = dev.one(FIREWALL).inputs
    assert fw["inboundPolicy"] == "DROP"
    rules = fw["inbounds"]
    api = [r for r in rules if r.get("ports") == "6443"]
    assert api == [{"label": "admin-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": "6443",
                    "ipv4s": ["203.0.113.0/24"]}]
    assert not [r for r in rules if r.get("ports") == "22"]
    world = [r for r in rules if "0.0.0.0/0" in r.get("ipv4s", []) or "::/0" in r.get("ipv6s", [])]
    assert world == []
    # Everything without a port list (kubelet 10250, etcd 2379-2380, VXLAN) is VPC/pod-network only.
    for r in rules:
        if "ports" not in r:
            assert r["ipv4s"] == ["10.0.0.0/24", "10.244.0.0/16"]


def test_ssh_opens_only_with_keys_and_only_to_admin_cidrs():
    rules = firewall_rules(["203.0.113.0/24", "2001:db8::/48"], "10.0.0.0/24", "10.244.0.0/16", ssh_enabled=True)
    ssh = [r for r in rules if r.get("ports") == "22"]
    assert ssh == [{"label": "admin-ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22",
                    "ipv4s": ["203.0.113.0/24"], "ipv6s": ["2001:db8::/48"]}]
    assert not [r for r in firewall_rules([], "10.0.0.0/24", "10.244.0.0/16", ssh_enabled=True)
                if r["label"].startswith("admin")]


def test_ssh_keys_reach_the_instances_when_given():
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:linode"]["sshAuthorizedKeys"] = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 ops@example.com"]
    plan = plan_config(cfg)
    assert all(r.inputs["authorizedKeys"] for r in plan.by_type(INSTANCE))
    assert [r for r in plan.one(FIREWALL).inputs["inbounds"] if r.get("ports") == "22"]


def test_dev_has_a_vpc_and_workers_on_fixed_vpc_addresses(dev):
    subnet = dev.one("linode:index/vpcSubnet:VpcSubnet").inputs
    assert subnet["ipv4"] == "10.0.0.0/24"
    assert dev.one("linode:index/vpc:Vpc").inputs["region"] == "us-ord"
    vpc_ips = {r.inputs["label"]: r.inputs["interfaces"][1]["ipv4"]["vpc"] for r in dev.by_type(INSTANCE)}
    assert vpc_ips == {"gpu-dev-cp-0": "10.0.0.10", "gpu-dev-system-0": "10.0.0.20", "gpu-dev-system-1": "10.0.0.21",
                       "gpu-dev-ada-0": "10.0.0.100"}


def test_addons_are_pinned_helm_releases(dev):
    charts = {r.inputs["chart"]: r.inputs["version"] for r in dev.by_type(RELEASE)}
    assert charts["cilium"] == versions.cni_chart("cilium", "1.35").version
    assert charts["ccm-linode"] == versions.LINODE_CCM_CHART.version
    assert charts["linode-blockstorage-csi-driver"] == versions.LINODE_CSI_CHART.version
    assert charts["nvidia-device-plugin"] == versions.NVIDIA_DEVICE_PLUGIN_CHART.version
    token = next(r for r in dev.by_type("kubernetes:core/v1:Secret") if r.name.endswith("-linode-api")).inputs
    assert token["stringData"] == "[secret]"  # the Linode API token never shows in a plan
    sc = dev.one("kubernetes:storage.k8s.io/v1:StorageClass").inputs
    assert sc["metadata"]["name"] == DEFAULT_STORAGE_CLASS
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["parameters"]["linodebs.csi.linode.com/encrypted"] == "true"


def test_device_plugin_tolerates_the_gpu_taint(dev):
    values = next(r for r in dev.by_type(RELEASE) if r.inputs["chart"] == "nvidia-device-plugin").inputs["values"]
    assert GPU_TAINT.toleration() in values["tolerations"]


def test_kubeconfig_is_a_secret_signed_by_the_cluster_ca_for_cluster_admins(dev):
    wire = dev.outputs["kubeconfig"]
    assert wire[SIG_KEY] == SECRET_SIG
    kubeconfig = yaml.safe_load(wire["value"])
    assert kubeconfig["clusters"][0]["cluster"]["server"].endswith(":6443")
    ca = x509.load_pem_x509_certificate(base64.b64decode(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]))
    client = x509.load_pem_x509_certificate(base64.b64decode(kubeconfig["users"][0]["user"]["client-certificate-data"]))
    assert client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "kubeadm:cluster-admins"
    assert client.issuer == ca.subject
    client.verify_directly_issued_by(ca)


def test_checkpoint_bucket_is_private_with_a_scoped_key(dev):
    bucket = dev.one("linode:index/objectStorageBucket:ObjectStorageBucket", "checkpoints").inputs
    assert bucket["acl"] == "private" and bucket["versioning"] is True
    key = dev.one("linode:index/objectStorageKey:ObjectStorageKey", "checkpoints-key").inputs
    assert key["bucketAccesses"][0]["permissions"] == "read_write"


# --- linode-ha ----------------------------------------------------------------------------------


def test_ha_puts_three_control_planes_behind_a_firewalled_nodebalancer(ha):
    labels = sorted(r.inputs["label"] for r in ha.by_type(INSTANCE))
    assert labels == ["gpu-staging-ada-0", "gpu-staging-ada-1", "gpu-staging-cp-0", "gpu-staging-cp-1", "gpu-staging-cp-2",
                      "gpu-staging-system-0", "gpu-staging-system-1"]
    assert {r.inputs["type"] for r in ha.by_type(INSTANCE) if "-ada-" in r.inputs["label"]} == {"g2-gpu-rtx4000a1-m"}
    assert ha.one("linode:index/nodeBalancerConfig:NodeBalancerConfig").inputs["port"] == 6443
    nodes = ha.by_type("linode:index/nodeBalancerNode:NodeBalancerNode")
    # Backends on the control planes' private IPv4s (no VPC-backend NodeBalancer, no v4beta API).
    cps = {r.outputs["privateIpAddress"] for r in ha.by_type(INSTANCE) if "-cp-" in r.inputs["label"]}
    assert {n.inputs["address"] for n in nodes} == {f"{ip}:6443" for ip in cps} and len(cps) == 3
    assert all(ip.startswith("192.168.") for ip in cps)
    assert all("subnetId" not in n.inputs for n in nodes)
    assert "vpcs" not in ha.one("linode:index/nodeBalancer:NodeBalancer").inputs
    fw = next(r.inputs for r in ha.by_type(FIREWALL) if r.inputs["label"].endswith("-nodes"))
    assert {"label": "nodebalancer-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": "6443",
            "ipv4s": ["192.168.255.0/24"]} in fw["inbounds"]
    lb_fw = ha.one(FIREWALL, "api-lb-firewall").inputs
    assert lb_fw["inboundPolicy"] == "DROP"
    rule = lb_fw["inbounds"][0]
    assert "203.0.113.0/24" in rule["ipv4s"] and rule["ipv6s"] == ["2001:db8::/48"]
    assert ha.one("linode:index/firewallDevice:FirewallDevice").inputs["entityType"] == "nodebalancer"


def test_ha_control_planes_join_with_the_certificate_key_and_a_pinned_token(ha):
    """cp-0's kubeadm generates the CAs and uploads them (--upload-certs, certificateKey); cp-1 and cp-2
    download them with the same key and discover the API with their own token, pinned to the CA's hash."""
    docs = all_user_data(ha)
    cp1 = yaml.safe_load(docs["gpu-staging-cp-1"])
    join_cp = yaml.safe_load(next(f["content"] for f in cp1["write_files"] if f["path"] == render.KUBEADM_CONFIG_PATH)
                             .split("---\n")[0])
    init = [yaml.safe_load(d) for d in next(f["content"] for f in yaml.safe_load(docs["gpu-staging-cp-0"])["write_files"]
                                            if f["path"] == render.KUBEADM_CONFIG_PATH).split("---\n")]
    assert join_cp["kind"] == "JoinConfiguration"
    assert join_cp["controlPlane"]["certificateKey"] == init[0]["certificateKey"]
    boot = join_cp["discovery"]["bootstrapToken"]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", boot["caCertHashes"][0])
    assert boot["token"] != init[0]["bootstrapTokens"][0]["token"]  # its own, renewed; the init token expires in 24 h
    paths = {f["path"] for f in cp1["write_files"]}
    assert not {f"{render.PKI_DIR}/{p}" for p in ("ca.key", "front-proxy-ca.key", "etcd/ca.key", "sa.key")} & paths
    lb = ha.one("linode:index/nodeBalancer:NodeBalancer").inputs
    assert init[1]["controlPlaneEndpoint"] == f"{lb['ipv4']}:6443" if "ipv4" in lb else True


# --- rendered artifacts, checked by real validators ---------------------------------------------


@pytest.fixture(scope="module")
def documents(dev, ha):
    return {**all_user_data(dev), **all_user_data(ha)}


@pytest.mark.skipif(shutil.which("cloud-init") is None, reason="Debian package cloud-init not installed (.ci/run installs it)")
def test_every_cloud_init_document_passes_cloud_init_schema(documents, tmp_path):
    assert sorted(documents) == sorted(
        ["gpu-dev-cp-0", "gpu-dev-system-0", "gpu-dev-system-1", "gpu-dev-ada-0"]
        + [f"gpu-staging-cp-{i}" for i in range(3)] + ["gpu-staging-system-0", "gpu-staging-system-1",
                                                        "gpu-staging-ada-0", "gpu-staging-ada-1"])
    for label, doc in documents.items():
        path = tmp_path / f"{label}.yaml"
        path.write_text(doc)
        run = subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True)
        assert run.returncode == 0, f"{label}: {run.stdout}{run.stderr}"
        assert "Valid cloud-config" in run.stdout or "Valid schema" in run.stdout


def test_cloud_init_schema_rejects_a_broken_document(tmp_path):
    if shutil.which("cloud-init") is None:
        pytest.skip("Debian package cloud-init not installed")
    path = tmp_path / "broken.yaml"
    path.write_text("#cloud-config\nruncmd: 5\nwrite_files: [{content: x}]\n")
    assert subprocess.run(["cloud-init", "schema", "--config-file", str(path)], capture_output=True).returncode != 0


def embedded_scripts(documents) -> dict[str, str]:
    scripts = {"wait-for-api.sh": render.wait_for_api_script()}
    for label, doc in documents.items():
        for f in yaml.safe_load(doc)["write_files"]:
            if f["path"].endswith(".sh"):
                scripts[f"{label}:{f['path']}"] = f["content"]
    return scripts


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="Debian package shellcheck not installed (.ci/run installs it)")
def test_every_embedded_shell_script_passes_shellcheck(documents, tmp_path):
    scripts = embedded_scripts(documents)
    assert len(scripts) >= 1 + 9 * 2
    for i, (name, content) in enumerate(scripts.items()):
        path = tmp_path / f"script-{i}.sh"
        path.write_text(content)
        run = subprocess.run(["shellcheck", "--severity=style", str(path)], capture_output=True, text=True)
        assert run.returncode == 0, f"{name}:\n{run.stdout}"


def test_gpu_worker_boots_with_driver_toolkit_and_joins_tainted_and_labelled(dev):
    doc = yaml.safe_load(all_user_data(dev)["gpu-dev-ada-0"])
    paths = [f["path"] for f in doc["write_files"]]
    assert doc["runcmd"] == [["systemctl", "daemon-reload"], ["systemctl", "enable", "--now", render.METADATA_BLOCK_UNIT],
                             ["systemctl", "enable", "--now", render.METADATA_ALLOW_UNIT],
                             ["systemctl", "enable", "--now", "--no-block", render.BOOTSTRAP_UNIT]]
    nvidia = next(f["content"] for f in doc["write_files"] if f["path"] == render.NVIDIA_SCRIPT_PATH)
    branch = versions.NVIDIA_DRIVER_BRANCH
    # Ubuntu's signed precompiled modules for the running kernel, the no-DKMS userspace, all held.
    assert f'"linux-modules-nvidia-${{branch}}-server-${{kernel}}"' in nvidia and f"branch={branch}" in nvidia
    assert '"nvidia-headless-no-dkms-${branch}-server"' in nvidia
    assert "nvidia-|libnvidia-|linux-(modules|image|headers)-" in nvidia and "apt-mark hold" in nvidia
    bootstrap = next(f["content"] for f in doc["write_files"] if f["path"] == render.BOOTSTRAP_SCRIPT_PATH)
    # nvidia-smi must pass (set -e) before kubeadm join runs.
    assert bootstrap.index(render.NVIDIA_SCRIPT_PATH) < bootstrap.index("kubeadm join")
    assert f"nvidia-container-toolkit={versions.NVIDIA_CONTAINER_TOOLKIT}" in nvidia
    assert "nvidia-ctk runtime configure --runtime=containerd --set-as-default" in nvidia
    install = next(f["content"] for f in doc["write_files"] if f["path"] == render.INSTALL_SCRIPT_PATH)
    # A worker installs what the API server runs when it boots (GET /version, verified with the CA).
    assert '"kubeadm=${pkg}"' in install and f"--cacert {render.CLUSTER_CA_PATH}" in install
    assert "/version" in install and f"-{versions.KUBERNETES_DEB_REVISION}" in install
    assert "SystemdCgroup = true" in install
    join = [yaml.safe_load(d) for d in next(f["content"] for f in doc["write_files"]
                                            if f["path"] == render.KUBEADM_CONFIG_PATH).split("---\n")]
    assert join[0]["apiVersion"] == "kubeadm.k8s.io/v1beta4" and join[0]["kind"] == "JoinConfiguration"
    reg = join[0]["nodeRegistration"]
    assert reg["name"] == "gpu-dev-ada-0"  # node name = Linode label (the CCM matches on it)
    assert reg["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    args = {a["name"]: a["value"] for a in reg["kubeletExtraArgs"]}
    assert args["cloud-provider"] == "external" and args["node-ip"] == "10.0.0.100"
    assert f"{POOL_LABEL}=ada" in args["node-labels"]
    assert join[1]["cgroupDriver"] == "systemd"
    token = join[0]["discovery"]["bootstrapToken"]
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token["token"])
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", token["caCertHashes"][0])
    assert token["apiServerEndpoint"] == "10.0.0.10:6443"
    assert "/etc/kubernetes/pki/ca.key" not in paths  # only the first control plane holds the CA key


def test_first_control_plane_inits_with_external_cloud_provider(dev):
    doc = yaml.safe_load(all_user_data(dev)["gpu-dev-cp-0"])
    files = {f["path"]: f for f in doc["write_files"]}
    assert "/etc/kubernetes/pki/ca.key" not in files  # kubeadm generates it on cp-0
    assert files[render.CERTIFICATE_KEY_PATH]["permissions"] == "0600"
    init, cluster, kubelet = [yaml.safe_load(d) for d in files[render.KUBEADM_CONFIG_PATH]["content"].split("---\n")]
    assert init["kind"] == "InitConfiguration" and cluster["kind"] == "ClusterConfiguration"
    assert cluster["kubernetesVersion"] == "v" + versions.KUBERNETES_PATCH["1.35"]
    assert {"name": "cloud-provider", "value": "external"} in cluster["controllerManager"]["extraArgs"]
    assert cluster["networking"] == {"podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/12", "dnsDomain": "cluster.local"}
    # The init token (24 h): the program checks cluster-info's signature with it; and the certificate key. The
    # read-back token is not there (kubeadm refuses a signing-only token): cp-0 keeps it in a root-only file.
    assert [t["ttl"] for t in init["bootstrapTokens"]] == [render.INIT_TOKEN_TTL]
    assert files[render.READBACK_TOKEN_PATH]["permissions"] == "0600"
    assert re.fullmatch(r"[0-9a-f]{64}", init["certificateKey"])
    assert "kubeadm init --config" in files[render.BOOTSTRAP_SCRIPT_PATH]["content"]
    assert "--upload-certs" in files[render.BOOTSTRAP_SCRIPT_PATH]["content"]
    assert kubelet["cgroupDriver"] == "systemd"


def test_worker_join_hash_is_the_hash_of_the_cluster_ca(dev):
    worker = yaml.safe_load(all_user_data(dev)["gpu-dev-ada-0"])
    # The CA the program read back from cp-0's signed cluster-info (the mock stands in for cp-0's kubeadm).
    ca_pem = render.checked_ca_pem(dev.one("command:local:Command", "-cluster-ca").outputs["stdout"])
    assert next(f["content"] for f in worker["write_files"] if f["path"] == render.CLUSTER_CA_PATH) == ca_pem
    join = yaml.safe_load(next(f["content"] for f in worker["write_files"] if f["path"] == render.KUBEADM_CONFIG_PATH).split("---\n")[0])
    assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [render.discovery_hash(ca_pem)]


def _self_signed_ca(key) -> str:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
@pytest.mark.parametrize("kind", ["rsa", "ecdsa"])
def test_discovery_hash_matches_the_kubeadm_docs_openssl_pipeline(kind, tmp_path):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "rsa" else ec.generate_private_key(ec.SECP256R1())
    pem = _self_signed_ca(key)
    (tmp_path / "ca.crt").write_text(pem)
    # kubeadm docs: openssl x509 -pubkey -in ca.crt | openssl rsa -pubin -outform der | openssl dgst -sha256 -hex
    # (`openssl pkey` is the same step for an ECDSA CA).
    der_step = "openssl rsa -pubin -outform der" if kind == "rsa" else "openssl pkey -pubin -outform der"
    out = subprocess.run(f"openssl x509 -pubkey -in ca.crt | {der_step} 2>/dev/null | openssl dgst -sha256 -hex | sed 's/^.* //'",
                         shell=True, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    assert render.discovery_hash(pem) == f"sha256:{out}"


def test_bootstrap_token_form_is_enforced():
    assert render.bootstrap_token("abc123", "0123456789abcdef") == "abc123.0123456789abcdef"
    for bad in (("ABC123", "0123456789abcdef"), ("abc12", "0123456789abcdef"), ("abc123", "0123456789abcde!")):
        with pytest.raises(ValueError):
            render.bootstrap_token(*bad)


# --- preflight's files --------------------------------------------------------------------------


def test_preflight_writes_plan_and_artifacts_without_secret_values(tmp_path):
    from gpu_platform.preflight.__main__ import main
    from gpu_platform.preflight.mocks import SENSITIVE

    assert main(["linode-dev", "--out", str(tmp_path), "--no-policies", "--quiet"]) == 0
    out = tmp_path / "linode-dev"
    plan_text = (out / "plan.json").read_text()
    plan = json.loads(plan_text)
    types = {r["type"] for r in plan["resources"]}
    assert {INSTANCE, FIREWALL, "linode:index/vpc:Vpc", RELEASE} <= types
    assert [r for r in plan["resources"] if r["type"] == FIREWALL][0]["inputs"]["inboundPolicy"] == "DROP"
    assert "PRIVATE KEY" not in plan_text
    # linode:token is a `secure:` value preflight cannot decrypt: planned as a secret, never shown.
    from gpu_platform.preflight.runner import UNDECRYPTABLE
    assert UNDECRYPTABLE not in plan_text
    # Two random strings are names, public by design: the bucket suffix and the bootstrap token's id
    # (kubeadm: the id is public, only the token secret is secret; it names the Secret).
    token_names = [r["inputs"]["metadata"]["name"] for r in plan["resources"]
                   if r["type"] == "kubernetes:core/v1:Secret" and r["inputs"].get("type") == "bootstrap.kubernetes.io/token"]
    # Both buckets' labels end in the same public random suffix.
    bucket = next(r["inputs"]["label"] for r in plan["resources"]
                  if r["type"] == "linode:index/objectStorageBucket:ObjectStorageBucket")
    public = {*(n.removeprefix("bootstrap-token-") for n in token_names), bucket.rsplit("-", 1)[1]}
    assert SENSITIVE and not [s for s in SENSITIVE - public if len(s) >= 6 and s in plan_text]
    assert plan["outputs"]["kubeconfig"] == "[secret]"
    artifacts = sorted(p.relative_to(out / "artifacts").as_posix() for p in (out / "artifacts").rglob("*") if p.is_file())
    # The GPU pool autoscales: its nodes' boot documents are rendered by the node-group provider when
    # it creates them (tests/test_linode_node_groups.py), so the plan has the control plane's and the system worker's.
    assert "cloud-init/gpu-dev-cp-0.yaml" in artifacts and "kubeadm/gpu-dev-system-0.yaml" in artifacts
    pieces = {line.strip() for s in SENSITIVE for line in s.splitlines() if len(line.strip()) >= 6 and not line.startswith("-----")}
    cp0 = (out / "artifacts" / "cloud-init" / "gpu-dev-cp-0.yaml").read_text()
    # No private key at all (kubeadm generates the CAs on cp-0); its tokens and certificate key are masked.
    assert "PRIVATE KEY" not in cp0 and "<masked-by-preflight>" in cp0
    for p in (out / "artifacts").rglob("*"):
        if p.is_file():
            text = p.read_text()
            assert not [s for s in pieces if s in text], p
    assert (out / "cost.json").exists()


def test_stack_exports_the_cost_estimate(dev):
    cost = dev.outputs["costEstimate"]
    # One RTX 4000 Ada x1 Medium (Linode's $446 monthly cap) + a g6-standard-4 control plane and system
    # worker ($48 each), pools fixed-size; the estimator may add smaller items (storage, transfer).
    assert cost["idleMonthlyUsd"] == cost["fullCapacityMonthlyUsd"]
    assert 542.0 <= cost["idleMonthlyUsd"] < 650
    assert cost["monthlyBudgetUsd"] == 1500


# --- the system (CPU) pool ----------------------------------------------------------------------


def test_system_workers_join_untainted_labelled_and_without_the_gpu_driver(dev):
    doc = yaml.safe_load(all_user_data(dev)["gpu-dev-system-0"])
    paths = [f["path"] for f in doc["write_files"]]
    assert render.NVIDIA_SCRIPT_PATH not in paths
    assert "/etc/kubernetes/pki/ca.key" not in paths
    join, kubelet = [yaml.safe_load(d) for d in next(f["content"] for f in doc["write_files"]
                                                     if f["path"] == render.KUBEADM_CONFIG_PATH).split("---\n")]
    reg = join["nodeRegistration"]
    assert join["kind"] == "JoinConfiguration" and "controlPlane" not in join
    assert reg["name"] == "gpu-dev-system-0" and reg["taints"] == []
    args = {a["name"]: a["value"] for a in reg["kubeletExtraArgs"]}
    assert args["node-labels"] == f"{render.ROLE_LABEL}={render.SYSTEM_ROLE}"
    assert POOL_LABEL not in args["node-labels"] and "nvidia.com" not in args["node-labels"]
    assert kubelet["kubeReserved"] == linode_kubelet.KUBE_RESERVED and kubelet["evictionHard"] == linode_kubelet.EVICTION_HARD


def test_system_pool_type_and_count_come_from_the_stack():
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:linode"]["systemPool"] = {"instanceType": "g6-standard-8", "minNodes": 2, "maxNodes": 2}
    plan = plan_config(cfg)
    system = {r.inputs["label"]: r.inputs for r in plan.by_type(INSTANCE) if "-system-" in r.inputs["label"]}
    assert set(system) == {"gpu-dev-system-0", "gpu-dev-system-1"}
    assert {i["type"] for i in system.values()} == {"g6-standard-8"}
    assert {k: i["interfaces"][1]["ipv4"]["vpc"] for k, i in system.items()} == {"gpu-dev-system-0": "10.0.0.20",
                                                                         "gpu-dev-system-1": "10.0.0.21"}


def test_system_pool_defaults_to_two_four_vcpu_plans():
    """Two: on one, the platform's pods leave no room for a CPU notebook (tests/test_linode_defaults.py)."""
    from gpu_platform.config.linode import LinodeSection
    from gpu_platform.costs.catalog import load_catalog

    section = LinodeSection.model_validate({"region": "us-east"})
    plan = load_catalog().instance("linode", section.system_pool.instance_type)
    assert section.system_pool.min_nodes == section.system_pool.max_nodes == 2 and plan.vcpus == 4 and not plan.is_gpu


def test_kubelet_reservations_set_every_hard_eviction_default():
    # Any evictionHard entry replaces the kubelet's defaults: all four must be restated.
    assert set(linode_kubelet.EVICTION_HARD) == {"memory.available", "nodefs.available", "imagefs.available", "nodefs.inodesFree"}
    kubelet = render._kubelet_configuration()
    assert kubelet["systemReserved"] == linode_kubelet.SYSTEM_RESERVED and kubelet["maxPods"] == linode_kubelet.MAX_PODS


def test_ccm_and_csi_images_are_pinned_to_their_chart_release():
    """Both charts default their own image to `latest` (appVersion is set only when Linode publishes
    them): the rendered pods must name the image of the pinned release instead."""
    import helm_python

    from gpu_platform.data import linode_versions as versions
    from gpu_platform.components.linode.addons import ccm_values, csi_values

    from tests.fit_support import chart_archive

    for chart, values in ((versions.LINODE_CCM_CHART, ccm_values("vpc", "nodes")), (versions.LINODE_CSI_CHART, csi_values())):
        loaded = helm_python.Chart.load_archive(chart_archive(chart.chart, chart.version).read_bytes())
        images = set()
        for text in loaded.render(values, name=chart.chart, namespace="kube-system").values():
            for doc in yaml.safe_load_all(text):
                for pod in ((doc or {}).get("spec", {}).get("template", {}).get("spec", {}),):
                    images |= {c["image"] for c in pod.get("containers", []) + pod.get("initContainers", [])}
        linode_images = {i for i in images if i.startswith("linode/")}
        assert linode_images and all(i.endswith(f":{chart.version}") for i in linode_images), images


def test_preflight_mock_addresses_do_not_depend_on_registration_order():
    """The program registers from several threads: a mock that handed out addresses in call order made
    two runs of linode-ha write different plan.json bytes (firewall rules list the nodes' addresses)."""
    from gpu_platform.preflight.mocks import linode as mock

    names = ["gpu-staging-cp-0", "gpu-staging-cp-1", "gpu-staging-ada-0", "gpu-staging-api"]
    forward = {n: mock.RESOURCES["linode:index/instance:Instance"]({}, n)["ipAddress"] for n in names}
    backward = {n: mock.RESOURCES["linode:index/instance:Instance"]({}, n)["ipAddress"] for n in reversed(names)}
    assert forward == backward and len(set(forward.values())) == len(names)
    assert mock.RESOURCES["linode:index/nodeBalancer:NodeBalancer"]({}, "api")["ipv4"] == mock.public_address("api")
    plan = plan_stack("linode-ha")
    addresses = [r.outputs.get("ipAddress") for r in plan.by_type("linode:index/instance:Instance")]
    assert len(set(addresses)) == len(addresses)  # distinct per node, as Linode's would be


@pytest.mark.parametrize("stack", ["dev", "ha"])
def test_every_instances_user_data_is_within_linodes_limit_and_round_trips(stack, request):
    """Linode review (blocker): the control planes' boot documents are ~19 KB and Linode refuses decoded
    user data over 16,384 bytes, so no control plane could be created. They go gzip-compressed now
    (cloud-init uncompresses gzip user data)."""
    from gpu_platform.components.linode.render import USER_DATA_LIMIT_BYTES

    plan = request.getfixturevalue(stack)
    instances = plan.by_type("linode:index/instance:Instance")
    assert instances
    for r in instances:
        encoded = r.plain_inputs["metadatas"][0]["userData"]
        assert len(base64.b64decode(encoded)) <= USER_DATA_LIMIT_BYTES, r.name
        assert user_data(r).startswith("#cloud-config"), r.name
    assert max(len(user_data(r).encode()) for r in instances) > USER_DATA_LIMIT_BYTES  # uncompressed, over the limit


def test_encoding_is_deterministic_and_refuses_what_even_gzip_cannot_fit():
    from gpu_platform.components.linode.render import decode_user_data, encode_user_data

    doc = "#cloud-config\n" + "runcmd: [true]\n" * 100
    assert encode_user_data(doc) == encode_user_data(doc) and decode_user_data(encode_user_data(doc)) == doc
    with pytest.raises(ValueError, match="16384-byte limit"):
        encode_user_data(base64.b64encode(os.urandom(20000)).decode())
