"""Issue 32 item 5: no CA or service-account key in any Linode node's user data. cp-0's kubeadm generates
them (`kubeadm init --upload-certs`), further and replaced control planes download them with the certificate
key, joins pin the CA the program read back from the signed cluster-info. The boot flow is executed in the
throwaway root (tests/boot_harness.py) with stand-ins for kubeadm, kubectl and the API server."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess

import pytest
import yaml

from gpu_platform.components.linode import cluster_info, render
from gpu_platform.data import linode_versions as versions
from tests.boot_harness import INSTALL_PACKAGES, IMAGE_PACKAGES, BootRoot, Stub, kubernetes_stubs, namespaces_work
from gpu_platform.preflight.runner import redact
from tests.conftest import plan_stack

INSTANCE = "linode:index/instance:Instance"
needs_namespaces = pytest.mark.skipif(not namespaces_work(), reason="needs unshare --user --mount and dpkg")
REV = versions.KUBERNETES_DEB_REVISION


@pytest.fixture(scope="module")
def plans():
    return {stack: plan_stack(stack) for stack in ("linode-dev", "linode-ha")}


def _docs(plan) -> dict[str, str]:
    return {r.plain_inputs["label"]: render.decode_user_data(r.plain_inputs["metadatas"][0]["userData"])
            for r in plan.by_type(INSTANCE)}


def _files(text: str) -> dict[str, str]:
    return {f["path"]: f["content"] for f in yaml.safe_load(text)["write_files"]}


def _key_material(text: str) -> list[str]:
    """Private key material in a document: PEM private key blocks (also base64-wrapped, as in a kubeconfig's
    client-key-data), and files named like kubeadm's keys (*.key)."""
    found = [m.group(0) for m in re.finditer(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", text)]
    for blob in re.findall(r"[A-Za-z0-9+/]{60,}={0,2}", text):
        try:
            if b"PRIVATE KEY" in base64.b64decode(blob + "=" * (-len(blob) % 4)):
                found.append("base64 " + blob[:20])
        except ValueError:
            pass
    found += [p for p in _files(text) if p.endswith(".key") or p.endswith("-key.pem")]
    return found


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_no_node_user_data_holds_a_private_key(plans, stack):
    docs = _docs(plans[stack])
    assert docs, stack
    for label, text in docs.items():
        assert _key_material(text) == [], label
    cp0 = next(t for label, t in docs.items() if label.endswith("-cp-0"))
    files = _files(cp0)
    assert f"{render.PKI_DIR}/ca.key" not in files and f"{render.PKI_DIR}/sa.key" not in files
    init = yaml.safe_load(files[render.KUBEADM_CONFIG_PATH].split("---\n")[0])
    # kubeadm generates the CAs; the key that decrypts their upload is here, hex of 32 bytes.
    assert re.fullmatch(r"[0-9a-f]{64}", init["certificateKey"])
    assert init["bootstrapTokens"][0]["ttl"] == render.INIT_TOKEN_TTL
    assert "--upload-certs" in files[render.BOOTSTRAP_SCRIPT_PATH]


def test_the_detector_finds_what_todays_control_planes_carried():
    """The check above would see a key however it is shipped (a pki file, a PEM, a kubeconfig blob)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    doc = render.cloud_config("n", [render.File("/etc/kubernetes/pki/sa.key", "x")], [])
    assert _key_material(doc) == ["/etc/kubernetes/pki/sa.key"]
    doc = render.cloud_config("n", [render.File("/etc/x.conf", pem)], [])
    assert _key_material(doc)
    doc = render.cloud_config("n", [render.File("/etc/x.conf", "client-key-data: " + base64.b64encode(pem.encode()).decode())], [])
    assert _key_material(doc)


def test_joins_pin_the_ca_read_back_from_cp0_and_carry_the_certificate_key(plans):
    plan = plans["linode-ha"]
    docs = {label: _files(t) for label, t in _docs(plan).items()}
    ca_reads = [r for r in plan.by_type("command:local:Command") if r.name.endswith("-cluster-ca")]
    assert len(ca_reads) == 1
    ca_pem = render.checked_ca_pem(ca_reads[0].outputs["stdout"])
    ca_hash = render.discovery_hash(ca_pem)
    cp0_key = yaml.safe_load(docs["gpu-staging-cp-0"][render.KUBEADM_CONFIG_PATH].split("---\n")[0])["certificateKey"]
    for label in ("gpu-staging-cp-1", "gpu-staging-cp-2"):
        join = yaml.safe_load(docs[label][render.KUBEADM_CONFIG_PATH].split("---\n")[0])
        assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [ca_hash]
        assert join["controlPlane"]["certificateKey"] == cp0_key
        assert docs[label][render.CLUSTER_CA_PATH] == ca_pem
        assert "--discovery-token-unsafe-skip-ca-verification" not in "\n".join(docs[label].values())
    for label in ("gpu-staging-system-0", "gpu-staging-ada-0"):
        join = yaml.safe_load(docs[label][render.KUBEADM_CONFIG_PATH].split("---\n")[0])
        assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [ca_hash]
        assert "certificateKey" not in docs[label][render.KUBEADM_CONFIG_PATH]  # workers never get it
    # cp-0's own join config (a replaced cp-0) learns the hash at boot, from a signed cluster-info.
    cp0_join = yaml.safe_load(docs["gpu-staging-cp-0"][render.KUBEADM_JOIN_CONFIG_PATH].split("---\n")[0])
    assert cp0_join["discovery"]["bootstrapToken"]["caCertHashes"] == [render.CA_HASH_FROM_PEERS]
    # Every control plane gets its own token, renewed as a Secret like the workers'.
    secrets = [r for r in plan.by_type("kubernetes:core/v1:Secret") if "-cp-" in r.name and r.name.endswith("-join-token")]
    assert len(secrets) == 3


def test_the_certificate_key_and_tokens_are_secrets_and_no_output_holds_them(plans):
    plan = plans["linode-ha"]
    for r in plan.by_type("random:index/randomBytes:RandomBytes"):
        assert r.name.endswith(("kubeadm-certificate-key", "secrets-encryption-key")), r.name
    key = next(r for r in plan.by_type("random:index/randomBytes:RandomBytes") if r.name.endswith("certificate-key"))
    hexkey = key.outputs["hex"]
    tokens = [r.outputs["result"] for r in plan.by_type("random:index/randomString:RandomString")
              if "token-secret" in r.name]
    assert tokens
    # The user data (where they live) is a secret input; no stack output holds them in clear.
    for r in plan.by_type(INSTANCE):
        assert r.inputs["metadatas"][0]["userData"] == "[secret]", r.name
    outputs = json.dumps(redact(plan.outputs))
    assert hexkey not in outputs and not any(t in outputs for t in tokens)
    ca_read = next(r for r in plan.by_type("command:local:Command") if r.name.endswith("-cluster-ca"))
    assert ca_read.inputs["environment"]["TOKENS"] == "[secret]"
    plain = json.dumps([r.inputs for r in plan.resources])
    assert hexkey not in plain and not any(t in plain for t in tokens)


# --- the flow, executed --------------------------------------------------------------------------------


def _signed_cluster_info(ca_pem: str, token: str, endpoint: str) -> str:
    token_id, _, secret = token.partition(".")
    kubeconfig = (f"apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: "
                  f"{base64.b64encode(ca_pem.encode()).decode()}\n    server: https://{endpoint}\n  name: \"\"\n"
                  "contexts: null\ncurrent-context: \"\"\nkind: Config\nusers: null\n")
    return json.dumps({"kind": "ConfigMap", "data": {
        "kubeconfig": kubeconfig, f"jws-kubeconfig-{token_id}": cluster_info.detached_signature(kubeconfig, token_id, secret)}})


# kubeadm as the uploader needs it (tests/boot_harness.py plays init and download-certs): `init phase
# upload-certs` creates the Secret, with the certificate key from its config; `version -o short` prints the release.
KUBEADM_EXTRA = r"""
case "$*" in
  *"init phase upload-certs --upload-certs"*)
    cfg=${@: -1}
    grep -q "^certificateKey: [0-9a-f]\{64\}$" "$cfg" || { echo "no certificate key in $cfg" >&2; exit 1; }
    touch /run/cluster/kubeadm-certs ;;
  "version -o short") cat /run/kubeadm-release ;;
esac
"""

# kubectl for the control-plane maintenance scripts: nodes from /run/cluster/ready-nodes, the kubeadm-certs
# Secret from /run/cluster/kubeadm-certs.
KUBECTL = r"""#!/bin/bash
echo "kubectl $*" >> /var/log/standins.log
[ "$1" = --kubeconfig ] && shift 2
case "$*" in
  "get node "*) grep -qx "$3" /run/cluster/ready-nodes 2>/dev/null && echo True; exit 0 ;;
  "-n kube-system get secret kubeadm-certs") [ -f /run/cluster/kubeadm-certs ] || { echo 'Error from server (NotFound)' >&2; exit 1; } ;;
esac
exit 0
"""


def _root(tmp_path, files: dict[str, str], release: str) -> BootRoot:
    """`release` is what the cluster runs; the pinned one of the stack is offered too (a new cp-0 installs it)."""
    offered = sorted({release, versions.KUBERNETES_PATCH["1.35"]})
    stubs = kubernetes_stubs(*[f"{r}-{REV}" for r in offered]) + [Stub(n) for n in INSTALL_PACKAGES]
    for s in stubs:
        if s.name == "kubeadm":
            path, (text, mode) = next(iter(s.files.items()))
            s.files = {path: (text.replace("exit 0\n", KUBEADM_EXTRA + "exit 0\n"), mode)}
    root = BootRoot(tmp_path, stubs, IMAGE_PACKAGES)
    for path, content in files.items():
        rel = path.lstrip("/")
        target = root.root / ("local/" + rel.removeprefix("usr/local/") if rel.startswith("usr/local/") else rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o700 if rel.startswith("usr/local/sbin/") else 0o600)
    shutil.copytree("/etc/ssl", root.root / "etc" / "ssl", symlinks=True, dirs_exist_ok=True)
    for d in ("modules-load.d", "sysctl.d"):
        (root.root / "etc" / d).mkdir(exist_ok=True)
    (root.root / "etc" / "fstab").write_text("/dev/sda / ext4 defaults 0 1\n")
    (root.root / "run" / "cluster").mkdir()
    (root.root / "run" / "kubeadm-release").write_text(f"v{release}\n")
    return root


def _serve(root: BootRoot, path: str, body: str) -> None:
    """The harness's curl answers https://<peer>:6443<path> from /run/api<path>."""
    target = root.root / "run" / "api" / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(body)


@pytest.fixture(scope="module")
def ha_files(plans):
    return {label: _files(t) for label, t in _docs(plans["linode-ha"]).items()}


def _ca(plans) -> str:
    return render.checked_ca_pem(next(r for r in plans["linode-ha"].by_type("command:local:Command")
                                      if r.name.endswith("-cluster-ca")).outputs["stdout"])


def _bootstrap_env(root: BootRoot, files: dict[str, str]) -> None:
    (root.root / "run" / "apiserver-version").write_text(f"v{versions.KUBERNETES_PATCH['1.36']}\n")


@needs_namespaces
def test_cp0_initialises_with_upload_certs_and_publishes_the_admin_certificate(tmp_path, ha_files):
    """A new cluster: no peer answers, so cp-0 runs kubeadm init with --upload-certs (its config carries the
    certificate key and the init token), then signs the program's admin CSR with the CA kubeadm generated
    and publishes the certificate in kube-public."""
    from cryptography import x509

    files = ha_files["gpu-staging-cp-0"]
    release = versions.KUBERNETES_PATCH["1.35"]
    root = _root(tmp_path, files, release)
    proc = root.run(files[render.BOOTSTRAP_SCRIPT_PATH].replace(
        f"deadline=$((SECONDS + {render.PEER_WAIT_SECONDS}))", "deadline=$((SECONDS + 0))"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = root.log()
    assert f"kubeadm@{release}-{REV} init --config {render.KUBEADM_CONFIG_PATH} --upload-certs --skip-token-print " \
           "--skip-certificate-key-print" in log, log
    assert not [line for line in log if " join " in line]
    published = [line for line in log if "create configmap gpu-platform-admin --from-file=cert.pem=" in line]
    assert published and [line for line in log if "create rolebinding gpu-platform-admin" in line and "system:anonymous" in line]
    # The program's CSR (public): its key stays in Pulumi state.
    csr = x509.load_pem_x509_csr(files[render.ADMIN_CSR_PATH].encode())
    assert csr.subject.rfc4514_string() == "O=kubeadm:cluster-admins,CN=gpu-platform-admin"
    assert (root.root / render.JOINED_MARKER.lstrip("/")).exists()


@needs_namespaces
@pytest.mark.parametrize("certs_present", [True, False])
def test_a_further_control_plane_downloads_the_certificates_then_joins(tmp_path, ha_files, certs_present):
    """cp-2 (or its replacement, days later): it downloads the CAs with the certificate key before removing a
    stale etcd member and joining; while the kubeadm-certs Secret is gone it retries (the unit runs it again)."""
    files = ha_files["gpu-staging-cp-2"]
    release = versions.KUBERNETES_PATCH["1.36"]
    root = _root(tmp_path, files, release)
    _bootstrap_env(root, files)
    if not certs_present:
        (root.root / "run" / "kubeadm-certs-gone").touch()
    proc = root.run(files[render.BOOTSTRAP_SCRIPT_PATH])
    log = root.log()
    download = f"kubeadm@{release}-{REV} join phase control-plane-prepare download-certs --config {render.KUBEADM_CONFIG_PATH}"
    assert download in log, log
    if not certs_present:
        assert proc.returncode == 1 and "retrying later" in proc.stderr
        assert not [line for line in log if line.endswith(f" join --config {render.KUBEADM_CONFIG_PATH}")]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    join = f"kubeadm@{release}-{REV} join --config {render.KUBEADM_CONFIG_PATH}"
    assert log.index(download) < log.index(join)
    # The stale member is removed with a client certificate from the etcd CA just downloaded.
    members = [i for i, line in enumerate(log) if line.startswith("ctr ") and "member list" in line]
    assert members and log.index(download) < members[0] < log.index(join)
    assert (root.root / render.JOINED_MARKER.lstrip("/")).exists()


@needs_namespaces
def test_a_live_control_plane_uploads_the_certificates_again_while_a_peer_is_missing(tmp_path, ha_files):
    files = ha_files["gpu-staging-cp-0"]
    script = files[render.CERTS_UPLOAD_SCRIPT_PATH]
    root = _root(tmp_path, files, versions.KUBERNETES_PATCH["1.36"])
    (root.root / render.JOINED_MARKER.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root.root / render.JOINED_MARKER.lstrip("/")).touch()
    assert root.run(f"apt-get install -y kubeadm={versions.KUBERNETES_PATCH['1.36']}-{REV}").returncode == 0
    (root.root / "standins" / "kubectl").write_text(KUBECTL)
    (root.root / "standins" / "kubectl").chmod(0o755)
    # Every peer Ready: nothing uploaded (the Secret expired two hours after init and stays gone).
    (root.root / "run/cluster/ready-nodes").write_text("gpu-staging-cp-1\ngpu-staging-cp-2\n")
    assert root.run(script).returncode == 0
    assert not [line for line in root.log() if "upload-certs" in line]
    # cp-2 replaced (its Node gone): the certificates are uploaded, with the certificate key from disk.
    (root.root / "run/cluster/ready-nodes").write_text("gpu-staging-cp-1\n")
    proc = root.run(script)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in root.log() if "init phase upload-certs --upload-certs" in line]
    assert (root.root / "run/cluster/kubeadm-certs").exists()
    # Already there: not again.
    before = len(root.log())
    assert root.run(script).returncode == 0
    assert not [line for line in root.log()[before:] if "upload-certs" in line]


@needs_namespaces
@pytest.mark.parametrize("signed_for", ["own-token", "other-token"])
def test_a_replaced_cp0_pins_the_ca_from_a_cluster_info_signed_for_its_token(tmp_path, plans, ha_files, signed_for):
    """cp-0's user data was written before the CA existed. Replaced, it finds a peer, checks the peer's
    cluster-info against its own token, pins that CA's hash in its join config and joins; a cluster-info not
    signed for its token (an expired token, someone else's API) is never trusted, and cp-0 never initialises
    a second cluster while a peer answers."""
    files = ha_files["gpu-staging-cp-0"]
    release = versions.KUBERNETES_PATCH["1.36"]
    root = _root(tmp_path, files, release)
    _bootstrap_env(root, files)
    ca_pem = _ca(plans)
    join_cfg = yaml.safe_load(files[render.KUBEADM_JOIN_CONFIG_PATH].split("---\n")[0])
    token = join_cfg["discovery"]["bootstrapToken"]["token"] if signed_for == "own-token" else "abcdef.0123456789abcdef"
    _serve(root, "/api/v1/namespaces/kube-public/configmaps/cluster-info",
           _signed_cluster_info(ca_pem, token, "192.168.0.11:6443"))
    proc = root.run(files[render.BOOTSTRAP_SCRIPT_PATH])
    log = root.log()
    assert not [line for line in log if " init --config" in line], "cp-0 must not initialise while a peer answers"
    if signed_for == "other-token":
        assert proc.returncode == 1 and "not signed for this node's token" in proc.stderr
        assert not [line for line in log if " join " in line]
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = yaml.safe_load(root.file(render.KUBEADM_JOIN_CONFIG_PATH).split("---\n")[0])
    assert written["discovery"]["bootstrapToken"]["caCertHashes"] == [render.discovery_hash(ca_pem)]
    assert root.file(render.CLUSTER_CA_PATH).strip() == ca_pem.strip()
    assert f"kubeadm@{release}-{REV} join --config {render.KUBEADM_JOIN_CONFIG_PATH}" in log


def test_cluster_info_check_matches_kubeadms_signature_and_refuses_a_forgery():
    """The JWS kubeadm's bootstrap signer writes (k8s.io/cluster-bootstrap token/jws: HS256, kid = token id,
    detached payload), checked as token discovery checks it."""
    kubeconfig = "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: " + base64.b64encode(b"PEM").decode() + "\n"
    sig = cluster_info.detached_signature(kubeconfig, "abcdef", "0123456789abcdef")
    header = json.loads(base64.urlsafe_b64decode(sig.split("..")[0] + "=="))
    assert header == {"alg": "HS256", "kid": "abcdef"} and sig.count(".") == 2
    info = {"data": {"kubeconfig": kubeconfig, "jws-kubeconfig-abcdef": sig}}
    assert cluster_info.verified_ca(info, ["abcdef.0123456789abcdef"]) == "PEM"
    with pytest.raises(cluster_info.ClusterInfoError, match="no valid signature"):
        cluster_info.verified_ca(info, ["abcdef.ffffffffffffffff"])
    forged = {"data": {"kubeconfig": kubeconfig.replace("UEVN", "WFhY"), "jws-kubeconfig-abcdef": sig}}
    with pytest.raises(cluster_info.ClusterInfoError):
        cluster_info.verified_ca(forged, ["abcdef.0123456789abcdef"])
