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

# kubectl for the control-plane maintenance scripts: nodes from /run/cluster/nodes (`<name> <Ready status>
# <lastTransitionTime>`; a name not there is NotFound), the kubeadm-certs Secret from /run/cluster/kubeadm-certs,
# `replace -f` keeps the manifest under /run/cluster/replaced/.
KUBECTL = r"""#!/bin/bash
echo "kubectl $*" >> /var/log/standins.log
[ "$1" = --kubeconfig ] && shift 2
case "$*" in
  "get node "*)
    line=$(grep "^$3 " /run/cluster/nodes 2>/dev/null) || { echo "Error from server (NotFound): nodes \"$3\" not found" >&2; exit 1; }
    echo "${line#* }"; exit 0 ;;
  "-n kube-system get secret kubeadm-certs") [ -f /run/cluster/kubeadm-certs ] || { echo 'Error from server (NotFound)' >&2; exit 1; } ;;
  "replace -f "*) mkdir -p /run/cluster/replaced; cp "$3" /run/cluster/replaced/ ;;
esac
exit 0
"""


def _nodes(root: BootRoot, **status: tuple[str, int]) -> None:
    """Peer Nodes as the API has them: name -> (Ready status, seconds since its last transition)."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc)
    (root.root / "run/cluster/nodes").write_text("".join(
        f"{name.replace('_', '-')} {ready} {(now - datetime.timedelta(seconds=ago)).strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
        for name, (ready, ago) in status.items()))


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


def _readback_token(files: dict[str, str]) -> str:
    return files[READBACK_TOKEN_FILE].strip()


def _assert_readback_secret(root: BootRoot, files: dict[str, str]) -> None:
    """kubectl applied the read-back token's Secret: kube-system/bootstrap-token-<id>, signing only, no expiry."""
    token_id, _, token_secret = _readback_token(files).partition(".")
    applied = [d for d in yaml.safe_load_all(root.file("/run/applied.yaml")) if d and d.get("kind") == "Secret"]
    secret = next(d for d in applied if d["metadata"]["name"] == f"bootstrap-token-{token_id}")
    assert secret["metadata"]["namespace"] == "kube-system" and secret["type"] == "bootstrap.kubernetes.io/token"
    data = secret["stringData"]
    assert (data["token-id"], data["token-secret"], data["usage-bootstrap-signing"]) == (token_id, token_secret, "true")
    # Never a join credential, never expires.
    assert "usage-bootstrap-authentication" not in data and "auth-extra-groups" not in data and "expiration" not in data


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
    # The read-back token's Secret, created after kubeadm init (kubeadm refuses a signing-only token in its config).
    init_at = next(i for i, line in enumerate(log) if " init --config" in line)
    assert [i for i, line in enumerate(log) if " apply -f " in line and i > init_at], log
    _assert_readback_secret(root, files)
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
    _nodes(root, gpu_staging_cp_1=("True", 86400), gpu_staging_cp_2=("True", 86400))
    assert root.run(script).returncode == 0
    assert not [line for line in root.log() if "upload-certs" in line]
    # cp-2 replaced (its Node gone): the certificates are uploaded, with the certificate key from disk.
    _nodes(root, gpu_staging_cp_1=("True", 86400))
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
    script = files[render.BOOTSTRAP_SCRIPT_PATH]
    if signed_for == "other-token":
        # One pass over the peers, not the real 180 s of retries (it never trusts a forged cluster-info however
        # long it waits; the unit retries the script).
        wait = f"deadline=$((SECONDS + {render.PEER_WAIT_SECONDS}))"
        assert wait in script
        script = script.replace(wait, "deadline=$((SECONDS + 0))")
    proc = root.run(script)
    log = root.log()
    assert not [line for line in log if " init --config" in line], "cp-0 must not initialise while a peer answers"
    if signed_for == "other-token":
        assert proc.returncode == 1 and "not yet with a cluster-info signed for a token this node holds" in proc.stderr
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


# --- the Linode review of the first version (issue 32 item 5): each test fails on that code ----------------------

CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
# What the scripts are given, spelled out (so each test below fails on the first version's behaviour, not on a
# missing name); test_the_program_records_the_cluster_after_the_read_back checks them against render's.
RECORD_KEY = "cluster/ca.crt"
READBACK_TOKEN_SCRIPT = "/usr/local/sbin/gpu-platform-readback-token.sh"
INIT_NEW_CONTROL_PLANE = "/var/lib/gpu-platform/init-new-control-plane"
READBACK_TOKEN_FILE = "/etc/gpu-platform/readback-token"
# kubeadm's defaults (cmd/kubeadm/app/apis/bootstraptoken/v1 defaults.go SetDefaults_BootstrapToken, v1.35.4).
KUBEADM_DEFAULT_USAGES = ["signing", "authentication"]
KUBEADM_DEFAULT_GROUPS = ["system:bootstrappers:kubeadm:default-node-token"]


def _no_wait(script: str) -> str:
    return script.replace(f"deadline=$((SECONDS + {render.PEER_WAIT_SECONDS}))", "deadline=$((SECONDS + 0))")


def _record(root: BootRoot, ca_pem: str = "", status: str = "") -> None:
    """The etcd bucket's answer for the cluster record: the CA the program recorded, or an HTTP status."""
    where = "s3-status" if status else "s3"
    target = root.root / "run" / where / RECORD_KEY
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(status or ca_pem)


def _init_config(files: dict[str, str]) -> dict:
    return yaml.safe_load(files[render.KUBEADM_CONFIG_PATH].split("---\n")[0])


@needs_namespaces
@pytest.mark.parametrize("case", ["peer-503", "recorded-no-peer", "bucket-503", "bucket-403"])
def test_a_replaced_ha_cp0_never_initialises_without_evidence_that_no_cluster_exists(tmp_path, plans, ha_files, case):
    """Major 1: a peer answering 5xx is a cluster (not "no peer"); with no peer answering, cp-0 initialises only
    when the etcd bucket answers 404 for the record the program writes once it read a CA back. A recorded
    cluster, or a bucket that cannot say, is a retry: never a second cluster behind the NodeBalancer."""
    files = ha_files["gpu-staging-cp-0"]
    root = _root(tmp_path, files, versions.KUBERNETES_PATCH["1.35"])
    if case == "peer-503":
        status = root.root / "run" / "api-status" / CLUSTER_INFO.lstrip("/")
        status.parent.mkdir(parents=True)
        status.write_text("503")
    elif case == "recorded-no-peer":
        _record(root, _ca(plans))
    else:
        # 403: Linode answering a missing object to the read_write key with 403 rather than 404 (not verified,
        # docs/linode.md): cannot tell, so a retry naming the bucket, never an init.
        _record(root, status=case.removeprefix("bucket-"))
    proc = root.run(_no_wait(files[render.BOOTSTRAP_SCRIPT_PATH]))
    log = root.log()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert not [line for line in log if " init " in line], "cp-0 initialised a second cluster"
    expected = {"peer-503": "answers HTTP 503", "recorded-no-peer": "waiting for one; never a second cluster",
                "bucket-503": "answers 503 for s3://", "bucket-403": "answers 403 for s3://"}[case]
    assert expected in proc.stderr
    assert not (root.root / render.JOINED_MARKER.lstrip("/")).exists()


@needs_namespaces
@pytest.mark.parametrize("operator_says_init", [False, True])
def test_a_replaced_single_cp0_of_a_recorded_cluster_refuses_to_initialise_unless_told(tmp_path, plans, operator_says_init):
    """Major 1, single control plane: no peer can answer, so the bucket record decides. A recorded cluster's
    replaced cp-0 refuses (loudly, naming the restore) until the operator asks for a new control plane."""
    files = _files(_docs(plans["linode-dev"])["gpu-dev-cp-0"])
    release = versions.KUBERNETES_PATCH["1.35"]
    root = _root(tmp_path, files, release)
    _record(root, "-----BEGIN CERTIFICATE-----\nrecorded\n-----END CERTIFICATE-----\n")
    if operator_says_init:
        (root.root / INIT_NEW_CONTROL_PLANE.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root.root / INIT_NEW_CONTROL_PLANE.lstrip("/")).touch()
    proc = root.run(files[render.BOOTSTRAP_SCRIPT_PATH])
    inits = [line for line in root.log() if " init --config" in line]
    if not operator_says_init:
        assert proc.returncode == 1 and "REFUSING to initialise" in proc.stderr
        assert "Restoring a single control plane" in proc.stderr and not inits
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert inits


@needs_namespaces
def test_a_failed_init_is_resumed_with_the_cas_it_generated(tmp_path, ha_files):
    """Major 3: kubeadm init generated the CAs, then failed (wait-control-plane): the next attempt resumes the
    init with those CAs (the program may have read them back already), it never resets them."""
    files = ha_files["gpu-staging-cp-0"]
    root = _root(tmp_path, files, versions.KUBERNETES_PATCH["1.35"])
    (root.root / "run" / "kubeadm-init-times-out").touch()
    script = _no_wait(files[render.BOOTSTRAP_SCRIPT_PATH])
    first = root.run(script)
    assert first.returncode != 0 and "context deadline exceeded" in first.stderr
    ca = root.file(f"{render.PKI_DIR}/ca.crt")
    assert "BEGIN CERTIFICATE" in ca
    # Meanwhile the program read that CA back and recorded it: the retry must still resume, not wait or refuse.
    _record(root, ca)
    second = root.run(script)
    assert second.returncode == 0, second.stderr[-2000:]
    log = root.log()
    assert not [line for line in log if " reset " in line], "a reset throws away the CAs the program pinned"
    resumed_at = next(i for i, line in enumerate(log) if " init --config" in line and "--skip-phases=preflight" in line)
    assert [i for i, line in enumerate(log) if " apply -f " in line and i > resumed_at], log
    _assert_readback_secret(root, files)
    assert root.file(f"{render.PKI_DIR}/ca.crt") == ca
    assert (root.root / render.JOINED_MARKER.lstrip("/")).exists()


def test_the_read_back_token_never_expires_signs_only_and_the_program_holds_it(plans):
    """Major 2: cluster-info stays signed for a token the program and cp-0 hold however long the stack is left
    alone: cp-0 keeps it (root 0600) and creates its Secret after kubeadm init (signing only, no expiry: see
    _assert_readback_secret), it is not in kubeadm's configuration, and the read-back checks it."""
    for stack, prefix in (("linode-dev", "gpu-dev"), ("linode-ha", "gpu-staging")):
        files = _files(_docs(plans[stack])[f"{prefix}-cp-0"])
        readback = _readback_token(files)
        assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", readback)
        assert readback not in files[render.KUBEADM_CONFIG_PATH]
        read = next(r for r in plans[stack].by_type("command:local:Command") if r.name == f"{prefix}-cluster-ca")
        assert readback in read.plain_inputs["environment"]["TOKENS"].split("\n")
        # Workers and further control planes never get it.
        for label, text in _docs(plans[stack]).items():
            if not label.endswith("-cp-0"):
                assert readback not in text, label


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_kubeadm_accepts_every_bootstrap_token_in_cp0s_init_configuration(plans, stack):
    """Blocker: kubeadm gives a token without `groups` the default node-join group, then refuses groups unless
    `usages` includes "authentication" (cmd/kubeadm/app/apis/kubeadm/validation/validation.go
    ValidateBootstrapTokens, v1.35.4): a signing-only token there made `kubeadm init` fail on every new cluster."""
    prefix = {"linode-dev": "gpu-dev", "linode-ha": "gpu-staging"}[stack]
    files = _files(_docs(plans[stack])[f"{prefix}-cp-0"])
    tokens = _init_config(files).get("bootstrapTokens") or []
    assert tokens, "the init token (the program's first read-back) is in the InitConfiguration"
    for token in tokens:
        usages = token.get("usages") or KUBEADM_DEFAULT_USAGES
        groups = token.get("groups") or KUBEADM_DEFAULT_GROUPS
        assert not groups or "authentication" in usages, (
            f"kubeadm refuses token {token['token'].split('.')[0]}: groups {groups} without the authentication usage")


@needs_namespaces
def test_cp0_replaced_long_after_the_last_up_pins_the_ca_signed_for_the_read_back_token(tmp_path, plans, ha_files):
    """Major 2: cp-0 replaced weeks after the last `pulumi up`: its join token's Secret has expired and the init
    token is long gone, so the survivors' cluster-info is signed only for the read-back token. cp-0 pins the
    CA from that signature and joins (the replacing `pulumi up` renews its join token's Secret meanwhile)."""
    files = ha_files["gpu-staging-cp-0"]
    release = versions.KUBERNETES_PATCH["1.36"]
    root = _root(tmp_path, files, release)
    _bootstrap_env(root, files)
    ca_pem = _ca(plans)
    readback = _readback_token(files)
    _serve(root, CLUSTER_INFO, _signed_cluster_info(ca_pem, readback, "192.168.0.11:6443"))
    _record(root, ca_pem)
    proc = root.run(files[render.BOOTSTRAP_SCRIPT_PATH])
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = yaml.safe_load(root.file(render.KUBEADM_JOIN_CONFIG_PATH).split("---\n")[0])
    assert written["discovery"]["bootstrapToken"]["caCertHashes"] == [render.discovery_hash(ca_pem)]
    assert not [line for line in root.log() if " init --config" in line]


def _ca_cert(organization: str = "") -> str:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    name, key = x509.Name(attrs), ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.mark.parametrize("made_by", ["kubeadm", "program"])
def test_an_unsigned_cluster_info_is_explained_by_whose_ca_it_carries(made_by):
    """Major 2's message: linode.pki is named only for a CA the program made (0.2.0's pulumi-tls CA, O=gpu-platform);
    a kubeadm CA whose cluster-info is signed for none of the tokens gets the command that re-creates them."""
    info = json.loads(_signed_cluster_info(_ca_cert("gpu-platform" if made_by == "program" else ""),
                                           "zzzzzz.0123456789abcdef", "192.168.0.11:6443"))
    info["metadata"] = {"creationTimestamp": "2026-06-01T10:00:00Z"}
    with pytest.raises(cluster_info.UnsignedClusterError) as err:
        cluster_info.checked_cluster_ca("198.51.100.7", info, ["abcdef.0123456789abcdef"])
    message = str(err.value)
    if made_by == "program":
        assert "linode.pki: program" in message
    else:
        assert "set `linode.pki: program`" not in message and READBACK_TOKEN_SCRIPT in message and "kubeadm init phase bootstrap-token" not in message


def test_the_read_back_refuses_a_cluster_info_whose_ca_the_api_server_does_not_use(monkeypatch):
    """Major 4: etcd restored on a re-initialised control plane brings back a cluster-info signed for the
    read-back token but carrying the old CA. The read-back checks the CA against the API server's own
    certificate and pins nothing until they agree (the restore's republish step), naming that step."""
    import ssl

    token = "abcdef.0123456789abcdef"
    old, new = _ca_cert(), _ca_cert()
    answers = {"info": json.loads(_signed_cluster_info(old, token, "192.168.0.11:6443"))}

    def fake_get(host, path, context):
        if path == "/version":
            # The API server's certificate is signed by `new`: TLS verified with another CA fails.
            if answers["info"] is stale:
                raise ssl.SSLCertVerificationError("certificate verify failed: unable to get local issuer certificate")
            return {"gitVersion": "v1.35.8"}
        return answers["info"]

    stale = answers["info"]
    monkeypatch.setattr(cluster_info, "_get", fake_get)
    with pytest.raises(cluster_info.ClusterInfoError) as err:
        cluster_info.read_ca("198.51.100.7", [token], timeout=0, interval=0)
    assert "gpu-platform-republish-cluster-info.sh" in str(err.value)
    answers["info"] = json.loads(_signed_cluster_info(new, token, "192.168.0.11:6443"))
    assert cluster_info.read_ca("198.51.100.7", [token], timeout=0, interval=0).strip() == new.strip()


@needs_namespaces
def test_the_restore_republishes_cluster_info_from_the_nodes_own_ca(tmp_path, ha_files):
    """Major 4, the restore step: cluster-info is written again from /etc/kubernetes/pki/ca.crt (the CA the
    program read back after the new init), with admin.conf's server; once the bootstrap signer signs it for the
    read-back token, the program's check reads that CA, the one it pinned."""
    files = ha_files["gpu-staging-cp-0"]
    root = _root(tmp_path, files, versions.KUBERNETES_PATCH["1.35"])
    (root.root / "standins" / "kubectl").write_text(KUBECTL)
    (root.root / "standins" / "kubectl").chmod(0o755)
    node_ca = _ca_cert()
    (root.root / "etc/kubernetes/pki").mkdir(parents=True)
    (root.root / "etc/kubernetes/pki/ca.crt").write_text(node_ca)
    (root.root / "etc/kubernetes/admin.conf").write_text(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: eA==\n    server: https://192.168.0.10:6443\n")
    proc = root.run(files[render.REPUBLISH_SCRIPT_PATH])
    assert proc.returncode == 0, proc.stderr
    manifest = yaml.safe_load((root.root / "run/cluster/replaced/cluster-info.yaml").read_text())
    assert manifest["metadata"] == {"name": "cluster-info", "namespace": "kube-public"}
    assert list(manifest["data"]) == ["kubeconfig"], "old signatures must go with the old CA"
    kubeconfig = yaml.safe_load(manifest["data"]["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://192.168.0.10:6443"
    token = _readback_token(files)
    token_id, _, secret = token.partition(".")
    manifest["data"][f"jws-kubeconfig-{token_id}"] = cluster_info.detached_signature(manifest["data"]["kubeconfig"],
                                                                                      token_id, secret)
    assert cluster_info.verified_ca(manifest, [token]).strip() == node_ca.strip()


@needs_namespaces
def test_certificates_are_not_uploaded_for_a_peer_that_is_only_briefly_silent_or_still_reporting(tmp_path, ha_files):
    """Minor: a kubelet restart (Ready=Unknown for a minute) or a NotReady node whose kubelet still reports
    (Ready=False) needs no certificates; a peer silent for PEER_GONE_SECONDS does (it is being replaced)."""
    files = ha_files["gpu-staging-cp-0"]
    script = files[render.CERTS_UPLOAD_SCRIPT_PATH]
    root = _root(tmp_path, files, versions.KUBERNETES_PATCH["1.36"])
    (root.root / render.JOINED_MARKER.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root.root / render.JOINED_MARKER.lstrip("/")).touch()
    assert root.run(f"apt-get install -y kubeadm={versions.KUBERNETES_PATCH['1.36']}-{REV}").returncode == 0
    (root.root / "standins" / "kubectl").write_text(KUBECTL)
    (root.root / "standins" / "kubectl").chmod(0o755)
    _nodes(root, gpu_staging_cp_1=("Unknown", 60), gpu_staging_cp_2=("False", 3600))
    assert root.run(script).returncode == 0
    assert not [line for line in root.log() if "upload-certs" in line]
    _nodes(root, gpu_staging_cp_1=("True", 60), gpu_staging_cp_2=("Unknown", render.PEER_GONE_SECONDS + 60))
    proc = root.run(script)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in root.log() if "init phase upload-certs --upload-certs" in line]


def test_the_program_records_the_cluster_after_the_read_back(plans):
    """The record a new cp-0 reads: the CA the program pinned, in the etcd bucket, written after the read-back and
    before any further node; the bucket's expiry rule covers snapshots only, so the record never expires."""
    assert (render.CLUSTER_RECORD_KEY, render.READBACK_TOKEN_PATH, render.INIT_NEW_CONTROL_PLANE_PATH) == (
        RECORD_KEY, READBACK_TOKEN_FILE, INIT_NEW_CONTROL_PLANE)
    assert render.READBACK_TOKEN_SCRIPT_PATH == cluster_info.READBACK_TOKEN_SCRIPT_PATH == READBACK_TOKEN_SCRIPT
    for stack, prefix in (("linode-dev", "gpu-dev"), ("linode-ha", "gpu-staging")):
        plan = plans[stack]
        record = next(r for r in plan.by_type("linode:index/objectStorageObject:ObjectStorageObject")
                      if r.name == f"{prefix}-cluster-record")
        assert record.plain_inputs["key"] == RECORD_KEY
        assert record.plain_inputs["content"] == _ca_of(plan, prefix)
        bucket = next(r for r in plan.by_type("linode:index/objectStorageBucket:ObjectStorageBucket")
                      if r.name == f"{prefix}-etcd-backups")
        assert all(rule.get("prefix") == f"{render.ETCD_SNAPSHOT_PREFIX}/" for rule in bucket.plain_inputs["lifecycleRules"]
                   if "expiration" in rule)


def _ca_of(plan, prefix: str) -> str:
    return render.checked_ca_pem(next(r for r in plan.by_type("command:local:Command")
                                      if r.name == f"{prefix}-cluster-ca").outputs["stdout"])


def test_the_read_back_commands_name_no_path(plans):
    """Minor: the read-back's text is the same wherever the package is installed (pulumi-command runs `create`
    again on any change of its inputs): the source goes on stdin."""
    for r in plans["linode-ha"].by_type("command:local:Command"):
        if r.name.endswith(("-cluster-ca", "-admin-cert")):
            assert r.plain_inputs["create"] in ("python3 - ca", "python3 - admin"), r.plain_inputs["create"]
            assert r.plain_inputs["stdin"] == render.cluster_info_script()
