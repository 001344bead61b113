"""The rehearsal's background stand-ins (the Provisioner's volumes, the HookRunner's hook pods) share one loop
(gpu_platform/rehearsal/kube.py PollingLoop): a pass that meets an API error or a refused connection is retried at
the next, and stop() ends the thread."""

from __future__ import annotations

import threading

from gpu_platform.rehearsal.hooks import HookRunner
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
