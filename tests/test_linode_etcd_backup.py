"""Etcd snapshots of the Linode control planes: taken on a timer, uploaded to the stack's bucket with
retention, and restorable: a snapshot made by a real etcd (Debian's etcd-server) restored with the
procedure's own command brings back what was written before it, and nothing after."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import pytest
import yaml

from gpu_platform.components.linode import render
from tests.boot_harness import BootRoot, namespaces_work
from tests.conftest import plan_stack
from gpu_platform.components.linode.render import decode_user_data

INSTANCE = "linode:index/instance:Instance"


def _files(resource) -> dict[str, dict]:
    doc = yaml.safe_load(decode_user_data(resource.plain_inputs["metadatas"][0]["userData"]))
    return {f["path"]: f for f in doc["write_files"]}, doc["runcmd"]


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_every_control_plane_snapshots_etcd_to_the_bucket_on_a_timer_with_retention(stack):
    plan = plan_stack(stack)
    bucket = plan.one("linode:index/objectStorageBucket:ObjectStorageBucket")
    rules = {r["id"]: r for r in bucket.plain_inputs["lifecycleRules"]}
    assert rules["expire-etcd-snapshots"]["prefix"] == "etcd/" and rules["expire-etcd-snapshots"]["expiration"]["days"] == 14
    keys = [k for k in plan.by_type("linode:index/objectStorageKey:ObjectStorageKey") if k.name.endswith("etcd-backup-key")]
    assert len(keys) == 1 and keys[0].plain_inputs["bucketAccesses"][0]["bucketName"] == bucket.plain_inputs["label"]
    for instance in plan.by_type(INSTANCE):
        files, runcmd = _files(instance)
        control_plane = "-cp-" in instance.plain_inputs["label"]
        assert (render.ETCD_SNAPSHOT_SCRIPT_PATH in files) is control_plane
        if control_plane:
            env = files[render.ETCD_BACKUP_ENV_PATH]
            assert env["permissions"] == "0600" and f"BUCKET={bucket.plain_inputs['label']}" in env["content"]
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
while [ $# -gt 0 ]; do case "$1" in --upload-file) test -s "$2" || exit 26; shift ;; esac; shift; done
"""


@pytest.mark.skipif(not namespaces_work(), reason="needs unshare --user --mount (Debian util-linux)")
def test_the_snapshot_script_saves_inside_the_etcd_pod_and_uploads_signed_to_the_bucket(tmp_path):
    root = BootRoot(tmp_path, [], image=[])
    for name, text in (("crictl", CRICTL), ("curl", CURL)):
        (root.root / "standins" / name).write_text(text)
        (root.root / "standins" / name).chmod(0o755)
    for d in ("var/lib/gpu-platform", "var/lib/etcd", "etc/gpu-platform"):
        (root.root / d).mkdir(parents=True)
    (root.root / "var/lib/gpu-platform/joined").touch()
    backup = render.EtcdBackup("ckpt-1", "us-ord-1.linodeobjects.com", "us-ord", "AKEY", "SKEY")
    (root.root / render.ETCD_BACKUP_ENV_PATH.lstrip("/")).write_text(render.etcd_backup_env(backup))
    proc = root.run(render.etcd_snapshot_script("gpu-dev-cp-0"))
    assert proc.returncode == 0, proc.stderr
    log = root.log()
    exec_line = next(line for line in log if " exec etcd-container-1 etcdctl" in line)
    assert "snapshot save /var/lib/etcd/gpu-platform-snapshot.db" in exec_line
    upload = next(line for line in log if line.startswith("curl "))
    assert "--aws-sigv4 aws:amz:us-ord:s3 --user AKEY:SKEY" in upload
    assert " https://ckpt-1.us-ord-1.linodeobjects.com/etcd/gpu-dev-cp-0/" in upload and upload.endswith("Z.db")
    assert not (root.root / "var/lib/etcd/gpu-platform-snapshot.db").exists()  # not left on disk
    assert root.run(render.etcd_snapshot_script("gpu-dev-cp-0"), env={"NO_ETCD": "1"}).returncode != 0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.mark.skipif(shutil.which("etcd") is None or shutil.which("etcdctl") is None,
                    reason="Debian packages etcd-server and etcd-client not installed (.ci/run installs them)")
def test_a_snapshot_made_by_real_etcd_restores_what_was_written_before_it(tmp_path):
    peer = _port()
    etcd = _Etcd(tmp_path / "lost", "gpu-dev-cp-0", _port(), peer)
    try:
        for key, value in (("/registry/namespaces/team-a", "ns"), ("/registry/secrets/team-a/s", "v1")):
            assert etcd.ctl("put", key, value).returncode == 0
        snapshot = tmp_path / "snapshot.db"
        saved = etcd.ctl("snapshot", "save", str(snapshot))
        assert saved.returncode == 0, saved.stderr
        assert etcd.ctl("put", "/registry/namespaces/after-snapshot", "ns").returncode == 0
    finally:
        etcd.stop()
    # The procedure's restore command (docs/etcd-restore.md), with etcd 3.4's etcdctl in place of etcdutl.
    restored_dir = tmp_path / "restored"
    args = render.etcd_restore_args(str(snapshot), "gpu-dev-cp-0", f"http://127.0.0.1:{peer}", str(restored_dir),
                                    tool="etcdctl")
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "ETCDCTL_API": "3"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    etcd = _Etcd(restored_dir, "gpu-dev-cp-0", _port(), peer)
    try:
        assert etcd.ctl("get", "/registry/secrets/team-a/s", "--print-value-only").stdout.strip() == "v1"
        assert etcd.ctl("get", "/registry/namespaces/team-a", "--print-value-only").stdout.strip() == "ns"
        assert etcd.ctl("get", "/registry/namespaces/after-snapshot", "--print-value-only").stdout.strip() == ""
    finally:
        etcd.stop()
