"""The rehearsal's background stand-ins (the Provisioner's volumes, the HookRunner's hook pods) share one loop
(gpu_platform/rehearsal/kube.py PollingLoop): a pass that meets an API error or a refused connection is retried at
the next, and stop() ends the thread. The install's waits are as long as the run's."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from gpu_platform.rehearsal import run
from gpu_platform.rehearsal.hooks import HookRunner
from gpu_platform.rehearsal.install import InstallLog
from gpu_platform.rehearsal.kube import ApiError, PollingLoop, UnknownKind
from gpu_platform.rehearsal.volumes import Provisioner


class Flaky(PollingLoop):
    name = "test-loop"

    def __init__(self):
        super().__init__(client=None, interval=0.01)  # type: ignore[arg-type]
        self.passes = 0
        self.third = threading.Event()

    def once(self) -> None:
        self.passes += 1
        if self.passes == 1:
            raise ApiError(500, "etcd leader changed")
        if self.passes == 2:
            raise ConnectionRefusedError("the API server restarts")
        if self.passes == 3:
            raise UnknownKind("a CRD not served yet")
        self.third.set()


def test_a_failed_pass_is_retried_and_stop_ends_the_thread():
    loop = Flaky().start()
    assert loop.third.wait(5), f"the loop stopped after {loop.passes} passes"
    loop.stop()
    assert not loop._thread.is_alive() and loop._thread.name == "test-loop"


def test_the_provisioner_and_the_hook_runner_are_such_loops():
    for cls, name in ((Provisioner, "rehearsal-provisioner"), (HookRunner, "rehearsal-hook-runner")):
        loop = cls(client=None, interval=0.01)  # type: ignore[arg-type]
        assert isinstance(loop, PollingLoop) and loop._thread.name == name


class FakeClient:
    """The three calls Provisioner.once makes, on a cluster holding `classes` and `claims`."""

    def __init__(self, classes: dict, claims: list):
        self.classes, self.claims, self.created = classes, claims, []

    def list(self, api_version, kind):
        assert (api_version, kind) == ("v1", "PersistentVolumeClaim")
        return self.claims

    def get(self, api_version, kind, name):
        assert (api_version, kind) == ("storage.k8s.io/v1", "StorageClass")
        return self.classes.get(name)

    def create(self, obj):
        self.created.append(obj)


def _claim(name: str, cls=None) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if cls is not None:
        spec["storageClassName"] = cls
    return {"metadata": {"name": name, "namespace": "kubeflow", "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Pending"}}


def test_the_provisioner_binds_only_claims_on_a_class_the_cluster_has():
    """Found by review (2026-11-29): the stand-in bound class-less claims on a cluster with no default StorageClass
    (onprem-dev's), so neither preflight nor the engine showed Katib's and Pipelines' databases and the hub's staying
    Pending on such a cluster. In a cluster no provisioner takes a claim without a class, or on a class it lacks."""
    client = FakeClient({"rook-ceph-block": {"volumeBindingMode": "Immediate"}},
                        [_claim("mysql-pv-claim"), _claim("katib-mysql", "rook-ceph-block"), _claim("seaweedfs-pvc", "gone")])
    provisioner = Provisioner(client, interval=0.01)  # type: ignore[arg-type]
    provisioner.once()
    assert [pv["spec"]["claimRef"]["name"] for pv in client.created] == ["katib-mysql"]
    assert client.created[0]["spec"]["storageClassName"] == "rook-ceph-block"
    assert provisioner.unprovisioned == {"kubeflow/mysql-pv-claim (no class)",
                                         "kubeflow/seaweedfs-pvc (class gone, which the cluster lacks)"}


def test_the_install_waits_for_crds_and_controllers_as_long_as_the_run_does(monkeypatch, tmp_path):
    """CI (2026-11-29): aws-prod's cluster gave up after a fixed 60 s waiting for 39 CRDs to be served on a loaded
    2-core machine, though the suite gives each wait 180 s. The CRD wait and each controller's readiness wait take the
    run's timeout (never less than their own 60 s)."""
    waits: dict[str, float] = {}

    class Recorder:
        def __init__(self, client, releases, controllers, ca_pem, log, on_release):
            self.on_release = on_release

        def namespaces(self):
            pass

        def crds(self, timeout, registered=()):
            waits["crds"] = timeout

        def release(self, rel, run_hook_job):
            self.on_release(rel)

    monkeypatch.setattr(run, "Installer", Recorder)
    monkeypatch.setattr(run.ctlmod, "start", lambda *a: None)
    monkeypatch.setattr(run.ctlmod, "wait_ready", lambda ctl, ca, timeout: waits.setdefault("kueue-manager", timeout))
    rel = SimpleNamespace(name="kueue", rendered=True, source="helm", chart="kueue", urn="urn:kueue", depends_on=set(), objects=[])
    ctl = SimpleNamespace(release="kueue", status="built", binary="kueue-manager")
    for timeout, expected in ((180.0, 180.0), (30.0, 60.0)):
        waits.clear()
        run.install(SimpleNamespace(client=None, tmp=str(tmp_path), server="", ca_file="", procs=[]), [rel], [ctl],
                    b"ca", tmp_path, InstallLog(), timeout=timeout)
        assert waits == {"crds": expected, "kueue-manager": expected}
