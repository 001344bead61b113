"""Etcd snapshots of the Linode control planes: taken on a timer, uploaded to the stack's bucket with
retention, and restorable: a snapshot made by a real etcd (Debian's etcd-server) restored with the
procedure's own command brings back what was written before it, and nothing after."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import yaml

from gpu_platform.components.linode import render
from tests.boot_harness import BootRoot, namespaces_work
from tests.conftest import plan_stack
from gpu_platform.components.linode.render import decode_user_data
from gpu_platform.rehearsal.processes import free_port

INSTANCE = "linode:index/instance:Instance"


def _files(resource) -> dict[str, dict]:
    doc = yaml.safe_load(decode_user_data(resource.plain_inputs["metadatas"][0]["userData"]))
    return {f["path"]: f for f in doc["write_files"]}, doc["runcmd"]



@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_every_control_plane_snapshots_etcd_to_a_bucket_of_its_own_on_a_timer_with_retention(stack):
    """Snapshots hold every Secret of the cluster: they go to a bucket whose key only the control planes hold,
    never to the checkpoint bucket, whose read/write key every training pod has."""
    plan = plan_stack(stack)
    buckets = {b.name.rsplit("-", 1)[-1]: b for b in plan.by_type("linode:index/objectStorageBucket:ObjectStorageBucket")}
    etcd_bucket, checkpoints = buckets["backups"], buckets["checkpoints"]
    assert etcd_bucket.plain_inputs["label"] != checkpoints.plain_inputs["label"]
    assert "-etcd-" in etcd_bucket.plain_inputs["label"] and etcd_bucket.plain_inputs["acl"] == "private"
    [rule] = etcd_bucket.plain_inputs["lifecycleRules"]
    # Snapshots only: the cluster record beside them (render.CLUSTER_RECORD_KEY) must never expire.
    assert rule["expiration"]["days"] == 14 and rule["prefix"] == f"{render.ETCD_SNAPSHOT_PREFIX}/"
    keys = {k.name: k for k in plan.by_type("linode:index/objectStorageKey:ObjectStorageKey")}
    etcd_key = next(k for n, k in keys.items() if n.endswith("-etcd-backup-key"))
    training_key = next(k for n, k in keys.items() if n.endswith("-checkpoints-key"))
    assert [a["bucketName"] for a in etcd_key.plain_inputs["bucketAccesses"]] == [etcd_bucket.plain_inputs["label"]]
    assert [a["bucketName"] for a in training_key.plain_inputs["bucketAccesses"]] == [checkpoints.plain_inputs["label"]]
    for instance in plan.by_type(INSTANCE):
        files, runcmd = _files(instance)
        control_plane = "-cp-" in instance.plain_inputs["label"]
        # Every node has the textfile collector's folder from the start (missing: a scrape error alert).
        assert f"{render.NODE_METRICS_DIR}/README" in files
        assert (render.ETCD_SNAPSHOT_SCRIPT_PATH in files) is control_plane
        assert (render.ETCD_BACKUP_ENV_PATH in files) is control_plane
        if control_plane:
            env = files[render.ETCD_BACKUP_ENV_PATH]
            assert env["permissions"] == "0600" and f"BUCKET={etcd_bucket.plain_inputs['label']}" in env["content"]
            assert "BEGIN CERTIFICATE" in files[render.ETCD_BACKUP_RECIPIENT_PATH]["content"]
            assert ["systemctl", "enable", "--now", render.ETCD_SNAPSHOT_TIMER] in runcmd
            assert "OnCalendar=00/6:00" in files[f"/etc/systemd/system/{render.ETCD_SNAPSHOT_TIMER}"]["content"]


CRICTL = r"""#!/bin/bash
echo "crictl $*" >> /var/log/standins.log
set -- "${@:3}"
case "$1" in
  pods) [ "$3" = component=etcd ] && [ -z "${NO_ETCD:-}" ] && echo etcd-pod-1 ;;
  ps) [ "$3" = etcd-pod-1 ] && echo etcd-container-1 ;;
  exec) shift 2; for a in "$@"; do last=$a; done; echo "snapshot bytes" > "$last" ;;
esac
"""
CURL = r"""#!/bin/bash
echo "curl $*" >> /var/log/standins.log
[ -f /run/fail-upload ] && { echo "curl: (22) The requested URL returned error: 403" >&2; exit 22; }
while [ $# -gt 0 ]; do case "$1" in --upload-file) test -s "$2" || exit 26; cp "$2" /var/log/uploaded ;; esac; shift; done
exit 0
"""


def _backup_pki(folder):
    """The recipient certificate and key as the program makes them (RSA 4096, self-signed), with openssl."""
    folder.mkdir(parents=True, exist_ok=True)
    key, cert = folder / "backup.key", folder / "backup.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:4096", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-subj", "/CN=gpu-dev etcd backups", "-days", "3650"], check=True, capture_output=True)
    return key, cert.read_text()


def _snapshot_root(tmp_path, recipient: str, snapshot: bytes = b"snapshot bytes\n") -> BootRoot:
    """A control plane's root for the snapshot script: crictl's `exec ... snapshot save` writes `snapshot`."""
    root = BootRoot(tmp_path / "node", [], image=[])
    crictl = CRICTL.replace('echo "snapshot bytes" > "$last"', 'cp /run/etcd-snapshot "$last"')
    for name, text in (("crictl", crictl), ("curl", CURL)):
        (root.root / "standins" / name).write_text(text)
        (root.root / "standins" / name).chmod(0o755)
    for d in ("var/lib/gpu-platform", "var/lib/etcd", "etc/gpu-platform"):
        (root.root / d).mkdir(parents=True)
    shutil.copytree("/etc/ssl", root.root / "etc" / "ssl", symlinks=True, dirs_exist_ok=True)
    (root.root / "var/lib/gpu-platform/joined").touch()
    (root.root / "run" / "etcd-snapshot").write_bytes(snapshot)
    backup = render.EtcdBackup("gpu-dev-etcd-1", "us-ord-1.linodeobjects.com", "us-ord", "AKEY", "SKEY", recipient)
    (root.root / render.ETCD_BACKUP_ENV_PATH.lstrip("/")).write_text(render.etcd_backup_env(backup))
    (root.root / render.ETCD_BACKUP_RECIPIENT_PATH.lstrip("/")).write_text(recipient)
    return root


def _metric(root: BootRoot, name: str) -> dict[str, float]:
    path = root.root / render.NODE_METRICS_DIR.lstrip("/") / name
    if not path.exists():
        return {}
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in path.read_text().splitlines() if not line.startswith("#")}


needs_root = pytest.mark.skipif(shutil.which("openssl") is None or not namespaces_work(),
                                reason="needs openssl and unshare --user --mount (Debian openssl, util-linux)")


@needs_root
def test_the_snapshot_leaves_the_node_encrypted_and_only_the_backup_key_opens_it(tmp_path):
    key, recipient = _backup_pki(tmp_path / "pki")
    plain = b"etcd snapshot: /registry/secrets/training/checkpoint-credentials AWS_SECRET_ACCESS_KEY=abc\n" * 50
    root = _snapshot_root(tmp_path, recipient, plain)
    proc = root.run(render.etcd_snapshot_script("gpu-dev-cp-0"))
    assert proc.returncode == 0, proc.stderr
    log = root.log()
    exec_line = next(line for line in log if " exec etcd-container-1 etcdctl" in line)
    assert "snapshot save /var/lib/etcd/gpu-platform-snapshot.db" in exec_line
    upload = next(line for line in log if line.startswith("curl "))
    assert "--aws-sigv4 aws:amz:us-ord:s3 --user AKEY:SKEY" in upload
    assert " https://gpu-dev-etcd-1.us-ord-1.linodeobjects.com/etcd/gpu-dev-cp-0/" in upload
    assert upload.endswith("Z" + render.ETCD_SNAPSHOT_SUFFIX)
    uploaded = (root.root / "var/log/uploaded").read_bytes()
    assert b"AWS_SECRET_ACCESS_KEY" not in uploaded and b"/registry/secrets" not in uploaded
    out = tmp_path / "decrypted.db"
    opened = subprocess.run(render.etcd_snapshot_decrypt_args(str(root.root / "var/log/uploaded"), str(key), str(out)),
                            capture_output=True, text=True)
    assert opened.returncode == 0 and out.read_bytes() == plain, opened.stderr
    other_key, _ = _backup_pki(tmp_path / "other")
    refused = subprocess.run(render.etcd_snapshot_decrypt_args(str(root.root / "var/log/uploaded"), str(other_key),
                                                               str(tmp_path / "x.db")), capture_output=True, text=True)
    assert refused.returncode != 0
    for leftover in ("gpu-platform-snapshot.db", "gpu-platform-snapshot.db.cms"):
        assert not (root.root / "var/lib/etcd" / leftover).exists()  # not left on disk
    assert _metric(root, "etcd-snapshot-success.prom")[f'{render.ETCD_SNAPSHOT_SUCCESS_METRIC}{{node="gpu-dev-cp-0"}}'] > 0
    assert _metric(root, "etcd-snapshot-failure.prom") == {}


@needs_root
@pytest.mark.parametrize("failure", ["no etcd", "upload refused"])
def test_a_failed_snapshot_is_recorded_for_the_alert(tmp_path, failure):
    _, recipient = _backup_pki(tmp_path / "pki")
    root = _snapshot_root(tmp_path, recipient)
    if failure == "upload refused":
        (root.root / "run" / "fail-upload").touch()
    proc = root.run(render.etcd_snapshot_script("gpu-dev-cp-0"), env={"NO_ETCD": "1"} if failure == "no etcd" else None)
    assert proc.returncode != 0
    failed = _metric(root, "etcd-snapshot-failure.prom")
    assert failed[f'{render.ETCD_SNAPSHOT_FAILURE_METRIC}{{node="gpu-dev-cp-0"}}'] > 0, failed
    assert _metric(root, "etcd-snapshot-success.prom") == {}
    assert not (root.root / "var/lib/etcd/gpu-platform-snapshot.db").exists()


class _Etcd:
    def __init__(self, data_dir, name: str, client: int, peer: int):
        self.url = f"http://127.0.0.1:{client}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", name, "--data-dir", str(data_dir), "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"{name}=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while self.ctl("endpoint", "health").returncode != 0:
            assert time.monotonic() < deadline and self.proc.poll() is None, "etcd did not start"
            time.sleep(0.2)

    def ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["etcdctl", "--endpoints", self.url, *args], capture_output=True, text=True,
                              env={**os.environ, "ETCDCTL_API": "3"}, timeout=30)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@needs_root
@pytest.mark.skipif(shutil.which("etcd") is None or shutil.which("etcdctl") is None,
                    reason="Debian packages etcd-server and etcd-client not installed (.ci/run installs them)")
def test_a_snapshot_made_by_real_etcd_restores_what_was_written_before_it(tmp_path):
    """The whole path: a real etcd's snapshot, encrypted and uploaded by the snapshot script, decrypted with
    the backup key (docs/linode.md, restore step 1) and restored with the procedure's command."""
    peer = free_port()
    etcd = _Etcd(tmp_path / "lost", "gpu-dev-cp-0", free_port(), peer)
    try:
        for key, value in (("/registry/namespaces/team-a", "ns"), ("/registry/secrets/team-a/s", "v1")):
            assert etcd.ctl("put", key, value).returncode == 0
        snapshot = tmp_path / "snapshot.db"
        saved = etcd.ctl("snapshot", "save", str(snapshot))
        assert saved.returncode == 0, saved.stderr
        assert etcd.ctl("put", "/registry/namespaces/after-snapshot", "ns").returncode == 0
    finally:
        etcd.stop()
    key, recipient = _backup_pki(tmp_path / "pki")
    root = _snapshot_root(tmp_path, recipient, snapshot.read_bytes())
    proc = root.run(render.etcd_snapshot_script("gpu-dev-cp-0"))
    assert proc.returncode == 0, proc.stderr
    decrypted = tmp_path / "decrypted.db"
    opened = subprocess.run(render.etcd_snapshot_decrypt_args(str(root.root / "var/log/uploaded"), str(key),
                                                              str(decrypted)), capture_output=True, text=True)
    assert opened.returncode == 0, opened.stderr
    # The procedure's restore command (docs/linode.md), with etcd 3.4's etcdctl in place of etcdutl.
    restored_dir = tmp_path / "restored"
    args = render.etcd_restore_args(str(decrypted), "gpu-dev-cp-0", f"http://127.0.0.1:{peer}", str(restored_dir),
                                    tool="etcdctl")
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    etcd = _Etcd(restored_dir, "gpu-dev-cp-0", free_port(), peer)
    try:
        assert etcd.ctl("get", "/registry/secrets/team-a/s", "--print-value-only").stdout.strip() == "v1"
        assert etcd.ctl("get", "/registry/namespaces/team-a", "--print-value-only").stdout.strip() == "ns"
        assert etcd.ctl("get", "/registry/namespaces/after-snapshot", "--print-value-only").stdout.strip() == ""
    finally:
        etcd.stop()


# --- the alerts on what the script records ------------------------------------------------------------------

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian package prometheus)")
OK, FAILED = render.ETCD_SNAPSHOT_SUCCESS_METRIC, render.ETCD_SNAPSHOT_FAILURE_METRIC


def _promtool(tmp_path, series: list[dict], checks: list[tuple[str, str, list[dict]]]) -> None:
    from gpu_platform.components.linode import addons

    rule = addons.etcd_backup_rule()
    annotations = {r["alert"]: r["annotations"] for r in rule["spec"]["groups"][0]["rules"]}

    def expected(name: str, labels: dict) -> dict:
        return {"exp_labels": labels, "exp_annotations": {
            k: v.replace("{{ $labels.node }}", labels.get("node", "")) for k, v in annotations[name].items()}}

    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    check = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    test = {"rule_files": [str(rules)], "evaluation_interval": "5m", "tests": [{
        "interval": "5m", "input_series": series,
        "alert_rule_test": [{"eval_time": t, "alertname": name, "exp_alerts": [expected(name, labels) for labels in firing]}
                            for t, name, firing in checks]}]}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_an_alert_fires_when_the_newest_snapshot_is_older_than_twice_the_interval(tmp_path):
    """cp-0 snapshotted at 0h and 6h, cp-1 only at 0h: the cluster's newest is 6h old at 12h (fine); with
    nothing after, it passes 12 hours at 18h and the alert fires 15 minutes later."""
    steps = 24 * 12  # a day of 5-minute samples
    series = [{"series": f'{OK}{{node="gpu-dev-cp-0"}}', "values": f"0x71 21600x{steps - 72}"},
              {"series": f'{OK}{{node="gpu-dev-cp-1"}}', "values": f"0x{steps}"}]
    critical = [{"severity": "critical"}]
    _promtool(tmp_path, series, [("11h", "EtcdSnapshotTooOld", []), ("17h55m", "EtcdSnapshotTooOld", []),
                                 ("18h20m", "EtcdSnapshotTooOld", critical),
                                 ("18h20m", "EtcdSnapshotMissing", [])])


@needs_promtool
def test_an_alert_fires_when_no_snapshot_was_ever_recorded_for_twice_the_interval(tmp_path):
    series = [{"series": 'node_boot_time_seconds{node="gpu-dev-cp-0"}', "values": "0x300"}]
    _promtool(tmp_path, series, [("6h", "EtcdSnapshotMissing", []), ("11h55m", "EtcdSnapshotMissing", []),
                                 ("12h05m", "EtcdSnapshotMissing", [{"severity": "critical"}])])


@needs_promtool
def test_an_alert_fires_when_a_control_planes_last_run_failed(tmp_path):
    """cp-0 failed after its last success; cp-1 failed once but succeeded since; cp-2 never succeeded."""
    series = [{"series": f'{OK}{{node="gpu-dev-cp-0"}}', "values": "100x20"},
              {"series": f'{FAILED}{{node="gpu-dev-cp-0"}}', "values": "200x20"},
              {"series": f'{OK}{{node="gpu-dev-cp-1"}}', "values": "300x20"},
              {"series": f'{FAILED}{{node="gpu-dev-cp-1"}}', "values": "200x20"},
              {"series": f'{FAILED}{{node="gpu-dev-cp-2"}}', "values": "50x20"}]
    _promtool(tmp_path, series, [("10m", "EtcdSnapshotUploadFailed", [
        {"severity": "warning", "node": "gpu-dev-cp-0"}, {"severity": "warning", "node": "gpu-dev-cp-2"}])])


def test_node_exporter_reads_the_folder_the_script_writes_and_keeps_the_charts_own_arguments():
    """extraArgs replaces kube-prometheus-stack's own node-exporter arguments: they are repeated, checked here
    against the pinned chart's values."""
    import tarfile

    from gpu_platform.components.platform.monitoring import NODE_EXPORTER_CHART_ARGS
    from gpu_platform.data import platform_versions
    from tests.fit_support import chart_archive

    chart = platform_versions.KUBE_PROMETHEUS_STACK
    with tarfile.open(chart_archive(chart.chart, chart.version)) as tar:
        values = yaml.safe_load(tar.extractfile("kube-prometheus-stack/values.yaml").read())
    assert tuple(values["prometheus-node-exporter"]["extraArgs"]) == NODE_EXPORTER_CHART_ARGS
    with tarfile.open(chart_archive(chart.chart, chart.version)) as tar:
        exporter = yaml.safe_load(tar.extractfile("kube-prometheus-stack/charts/prometheus-node-exporter/values.yaml").read())
    assert exporter["hostRootFsMount"]["enabled"] is True  # the node's / at /host/root
    plan = plan_stack("linode-dev")
    kps = next(r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.plain_inputs["chart"] == "kube-prometheus-stack")
    args = kps.plain_inputs["values"]["prometheus-node-exporter"]["extraArgs"]
    assert args == [*NODE_EXPORTER_CHART_ARGS, f"--collector.textfile.directory=/host/root{render.NODE_METRICS_DIR}"]
    rules = [r for r in plan.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
             if r.plain_inputs["metadata"]["name"] == "linode-etcd-backups"]
    assert len(rules) == 1 and rules[0].plain_inputs["metadata"]["namespace"] == "monitoring"


# --- Secrets encrypted at rest -------------------------------------------------------------------------------


def test_control_planes_start_the_api_server_with_secrets_encrypted_at_rest():
    """kubeadm's ClusterConfiguration names the EncryptionConfiguration and mounts its folder into the API
    server's static pod; every control plane's user data writes it (root 0600) with the stack's own key."""
    plan = plan_stack("linode-ha")
    keys = set()
    for instance in plan.by_type(INSTANCE):
        files, _ = _files(instance)
        control_plane = "-cp-" in instance.plain_inputs["label"]
        assert (render.ENCRYPTION_CONFIG_PATH in files) is control_plane
        if not control_plane:
            continue
        config = yaml.safe_load(files[render.ENCRYPTION_CONFIG_PATH]["content"])
        assert files[render.ENCRYPTION_CONFIG_PATH]["permissions"] == "0600"
        [entry] = config["resources"]
        assert entry["resources"] == ["secrets"] and list(entry["providers"][0]) == ["secretbox"]
        keys.add(entry["providers"][0]["secretbox"]["keys"][0]["secret"])
        if "-cp-0" in instance.plain_inputs["label"]:
            docs = list(yaml.safe_load_all(files[render.KUBEADM_CONFIG_PATH]["content"]))
            api = next(d for d in docs if d.get("kind") == "ClusterConfiguration")["apiServer"]
            assert {"name": "encryption-provider-config", "value": render.ENCRYPTION_CONFIG_PATH} in api["extraArgs"]
            assert api["extraVolumes"] == [{"name": "encryption-config", "hostPath": render.ENCRYPTION_DIR,
                                            "mountPath": render.ENCRYPTION_DIR, "readOnly": True,
                                            "pathType": "DirectoryOrCreate"}]
    assert len(keys) == 1, "every control plane encrypts with the same key"


def test_a_secret_written_through_the_real_api_server_is_encrypted_in_etcd(tmp_path):
    """The rendered EncryptionConfiguration given to the real kube-apiserver (the rehearsal's build): a Secret
    it stores is `k8s:enc:secretbox:v1:<key name>:` ciphertext in etcd, so an etcd snapshot holds no Secret in
    clear; and it reads the Secret back."""
    import base64
    import secrets as pysecrets

    from gpu_platform.rehearsal import binaries, pki
    from gpu_platform.rehearsal.kube import Client

    apiserver, etcd_bin = binaries.find("kube-apiserver"), binaries.find("etcd") or shutil.which("etcd")
    if apiserver is None or etcd_bin is None or shutil.which("etcdctl") is None:
        pytest.skip("needs the rehearsal's kube-apiserver (`make rehearsal-build`) and etcd, etcdctl")
    key = base64.b64encode(os.urandom(32)).decode()
    config = tmp_path / "encryption.yaml"
    config.write_text(render.encryption_configuration(key))
    ca = pki.CA.new("encryption test CA")
    pki.write(tmp_path / "ca.crt", ca.cert_pem)
    crt, crt_key = ca.issue("kube-apiserver", dns=["localhost"], ips=["127.0.0.1"])
    pki.write(tmp_path / "apiserver.crt", crt)
    pki.write(tmp_path / "apiserver.key", crt_key, private=True)
    sa_priv, sa_pub = pki.service_account_key()
    pki.write(tmp_path / "sa.key", sa_priv, private=True)
    pki.write(tmp_path / "sa.pub", sa_pub)
    token = pysecrets.token_urlsafe(24)
    pki.write(tmp_path / "tokens.csv", f'{token},admin,admin,"system:masters"\n'.encode(), private=True)
    etcd_port, peer, port = free_port(), free_port(), free_port()
    procs = [subprocess.Popen(
        [str(etcd_bin), "--name=t", f"--data-dir={tmp_path / 'etcd'}", f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
         f"--advertise-client-urls=http://127.0.0.1:{etcd_port}", f"--listen-peer-urls=http://127.0.0.1:{peer}",
         f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}", f"--initial-cluster=t=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen(
            [str(apiserver), f"--etcd-servers=http://127.0.0.1:{etcd_port}", "--bind-address=127.0.0.1",
             "--advertise-address=127.0.0.1", f"--secure-port={port}", f"--tls-cert-file={tmp_path / 'apiserver.crt'}",
             f"--tls-private-key-file={tmp_path / 'apiserver.key'}", f"--token-auth-file={tmp_path / 'tokens.csv'}",
             "--service-account-issuer=https://kubernetes.default.svc", f"--service-account-key-file={tmp_path / 'sa.pub'}",
             f"--service-account-signing-key-file={tmp_path / 'sa.key'}", "--service-cluster-ip-range=10.96.0.0/12",
             "--authorization-mode=RBAC", f"--encryption-provider-config={config}", "--endpoint-reconciler-type=none",
             f"--cert-dir={tmp_path / 'certs'}"],
            stdout=open(tmp_path / "apiserver.log", "w"), stderr=subprocess.STDOUT))
        client = Client("127.0.0.1", port, str(tmp_path / "ca.crt"), token)
        deadline = time.monotonic() + 120
        while True:
            try:
                if client.request("GET", "/readyz") == "ok":
                    break
            except Exception:
                pass
            assert time.monotonic() < deadline and procs[1].poll() is None, (tmp_path / "apiserver.log").read_text()[-3000:]
            time.sleep(1)
        client.request("POST", "/api/v1/namespaces/default/secrets", {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "checkpoint-credentials"},
            "stringData": {"AWS_SECRET_ACCESS_KEY": "plain-text-secret-value"}})
        raw = subprocess.run(["etcdctl", "--endpoints", f"http://127.0.0.1:{etcd_port}", "get",
                              "/registry/secrets/default/checkpoint-credentials", "--print-value-only"],
                             capture_output=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=30).stdout
        assert raw.startswith(f"k8s:enc:secretbox:v1:{render.ENCRYPTION_KEY_NAME}:".encode()), raw[:80]
        assert b"plain-text-secret-value" not in raw
        back = client.request("GET", "/api/v1/namespaces/default/secrets/checkpoint-credentials")
        assert base64.b64decode(back["data"]["AWS_SECRET_ACCESS_KEY"]) == b"plain-text-secret-value"
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_the_single_control_plane_restore_runbook_names_what_the_nodes_have(stack):
    """The restore of a single control plane (docs/linode.md) ends with cluster-info published again from the
    node's own CA, so the CA the program pinned after the new init and cluster-info agree: the runbook's steps
    name the operator's file the bootstrap reads and the republish script every control plane carries
    (executed: tests/test_linode_ca_keys.py, test_the_restore_republishes_cluster_info_from_the_nodes_own_ca)."""
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "linode.md").read_text()
    section = doc.split("### Restoring a single control plane", 1)[1].split("\n## ", 1)[0]
    steps = section.split("\n1. ", 1)[1]
    assert steps.index(render.INIT_NEW_CONTROL_PLANE_PATH) < steps.index("Restore the newest snapshot") \
        < steps.index(render.REPUBLISH_SCRIPT_PATH) < steps.index("`pulumi up` again")
    plan = plan_stack(stack)
    for r in plan.by_type("linode:index/instance:Instance"):
        if "-cp-" in r.plain_inputs["label"]:
            files = {f["path"]: f for f in yaml.safe_load(render.decode_user_data(
                r.plain_inputs["metadatas"][0]["userData"]))["write_files"]}
            assert render.REPUBLISH_SCRIPT_PATH in files, r.plain_inputs["label"]
            if r.plain_inputs["label"].endswith("-cp-0"):
                assert render.INIT_NEW_CONTROL_PLANE_PATH in files[render.BOOTSTRAP_SCRIPT_PATH]["content"]
