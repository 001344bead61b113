"""A rehearsal scenario that expects something NOT to happen concludes from the controller's own verdict
(Kueue's Workload condition, the scheduler's PodScheduled condition, the autoscaler's log and the RBAC
objects), not by waiting out the hang guard. These tests read the verdicts as the pinned components write
them (Kueue v0.19.2, kube-scheduler v1.35.4, cluster-autoscaler 1.35.2); no component runs here. The
rehearsal tests that plant each bug (tests/test_rehearsal*.py, tests/test_queue_resources.py) check the
same verdicts on the real components.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_platform.rehearsal import autoscale, scenarios
from gpu_platform.rehearsal.scenarios import KUEUE, kueue_never_admits, scheduler_never_binds, wait_admission
from tests.conftest import ROOT

RBAC = "rbac.authorization.k8s.io/v1"


class FakeClient:
    """get/list over a dict of objects keyed (apiVersion, kind, namespace, name)."""

    def __init__(self, objects: list[dict]):
        self.objects = {(o["apiVersion"], o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}

    def get(self, api_version, kind, name, namespace=None):
        return self.objects.get((api_version, kind, namespace, name))

    def list(self, api_version, kind, namespace=None, selector=None):
        return [o for (a, k, ns, _), o in self.objects.items() if a == api_version and k == kind
                and (namespace is None or ns == namespace)]


def _queues(generation: int = 2, observed: int = 2) -> list[dict]:
    return [{"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "gpu-queue", "namespace": "training"},
             "spec": {"clusterQueue": "gpu-training"}},
            {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "gpu-training", "generation": generation},
             "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready",
                                        "observedGeneration": observed}]}}]


def _workload(reason: str, message: str, status: str = "False") -> dict:
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": {"name": "trainjob-x", "namespace": "training"},
            "spec": {"queueName": "gpu-queue"},
            "status": {"conditions": [{"type": "QuotaReserved", "status": status, "reason": reason, "message": message}]}}


# Kueue v0.19.2's words (pkg/scheduler/flavorassigner/flavorassigner.go) on the condition it writes
# (pkg/scheduler/scheduler.go: reason "Pending" unless the UnadmittedWorkloadsObservability gate is on).
EXCEEDS = ("couldn't assign flavors to pod set node: insufficient quota for nvidia.com/gpu in flavor ada, previously "
           "considered podsets requests (0) + current podset request (1) > maximum capacity (0)")
UNCOVERED = "couldn't assign flavors to pod set main: resource ephemeral-storage unavailable in ClusterQueue"
IN_USE = "couldn't assign flavors to pod set node: insufficient unused quota for nvidia.com/gpu in flavor ada, 1 more needed"


NEVER = "ClusterQueue gpu-training can never admit it as it stands"


@pytest.mark.parametrize("reason, message, verdict", [
    ("Pending", EXCEEDS, NEVER),
    ("ExceedsMaxQuota", EXCEEDS, NEVER),  # the reason, with the UnadmittedWorkloadsObservability gate on
    ("Pending", UNCOVERED, NEVER),
    ("Pending", "couldn't assign flavors to pod set node: flavor ada doesn't match node affinity, untolerated taint "
                "nvidia.com/gpu=present:NoSchedule in flavor system", NEVER),
    # the quota is in use: it frees when another workload ends
    ("Pending", IN_USE, None),
    # one flavor can never take it, another may once its quota frees
    ("Pending", EXCEEDS + ", insufficient unused quota for nvidia.com/gpu in flavor rtx, 1 more needed", None),
    ("Pending", "", None),
    # a flavor Kueue's cache does not hold yet (just created): no verdict
    ("Pending", "couldn't assign flavors to pod set node: flavor ada not found", None),
    # two pod sets, the second may fit later
    ("Pending", EXCEEDS + "; couldn't assign flavors to pod set launcher: " + IN_USE.split(": ", 1)[1], None),
])
def test_kueue_says_never_only_for_a_reason_no_wait_changes(reason, message, verdict):
    assert kueue_never_admits(FakeClient(_queues()), _workload(reason, message)) == verdict


def test_kueue_verdict_counts_only_once_its_cache_holds_the_cluster_queue_as_it_is():
    """A verdict Kueue reached before its cache held the ClusterQueue's current spec (observedGeneration behind
    the generation: just changed, say by a planted run being put back) is no verdict."""
    stale = FakeClient(_queues(generation=3, observed=2))
    assert kueue_never_admits(stale, _workload("Pending", EXCEEDS)) is None
    assert kueue_never_admits(FakeClient(_queues()), _workload("Pending", EXCEEDS, status="True")) is None
    assert kueue_never_admits(FakeClient(_queues()), None) is None


def test_waiting_for_admission_ends_on_kueues_verdict_not_the_hang_guard(monkeypatch):
    monkeypatch.setattr(scenarios, "VERDICT_STANDS_S", 0.2)
    ctx = SimpleNamespace(client=FakeClient(_queues()))
    started = time.monotonic()
    w, verdict = wait_admission(ctx, lambda: _workload("Pending", EXCEEDS), timeout=60)
    assert verdict == NEVER and time.monotonic() - started < 10
    # Waiting for quota in use is no verdict: the wait goes on to its end.
    started = time.monotonic()
    w, verdict = wait_admission(ctx, lambda: _workload("Pending", IN_USE), timeout=1)
    assert verdict is None and time.monotonic() - started >= 1


def _pending(message: str, reason: str = "Unschedulable") -> dict:
    return {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": reason, "message": message}]}}


# kube-scheduler v1.35.4's FitError (pkg/scheduler/framework/types.go) with DefaultPreemption's PostFilter message.
VOLUME_ELSEWHERE = ("0/12 nodes are available: 4 node(s) didn't match PersistentVolume's node affinity, 8 node(s) didn't "
                    "match Pod's node affinity/selector. preemption: 0/12 nodes are available: 12 Preemption is not "
                    "helpful for scheduling.")


# As the rehearsal's kube-scheduler wrote it for the zone drill's planted notebook (aws-prod, 2026-11-28): the
# DynamicResources plugin's PostFilter words come before DefaultPreemption's.
ZONE_DRILL = ("0/16 nodes are available: 13 node(s) didn't match Pod's node affinity/selector, 3 node(s) didn't match "
              "PersistentVolume's node affinity. no new claims to deallocate, preemption: 0/16 nodes are available: 16 "
              "Preemption is not helpful for scheduling.")


def test_the_scheduler_says_never_when_every_node_is_refused_for_what_no_eviction_changes():
    assert scheduler_never_binds(_pending(VOLUME_ELSEWHERE)) == VOLUME_ELSEWHERE
    assert scheduler_never_binds(_pending(ZONE_DRILL)) == ZONE_DRILL
    tainted = ("0/3 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}, 2 node(s) didn't "
               "match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful "
               "for scheduling.")
    assert scheduler_never_binds(_pending(tainted)) == tainted


@pytest.mark.parametrize("message, reason", [
    # a node that is only full: another pod ending (or a preemption) frees it
    ("0/12 nodes are available: 1 Insufficient nvidia.com/gpu, 11 node(s) didn't match Pod's node affinity/selector. "
     "preemption: 0/12 nodes are available: 1 No preemption victims found for incoming pod, 11 Preemption is not helpful "
     "for scheduling.", "Unschedulable"),
    # the claim not bound yet: the volume controller binds it in a moment
    ("0/12 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/12 nodes are available: "
     "12 Preemption is not helpful for scheduling.", "Unschedulable"),
    (VOLUME_ELSEWHERE, "SchedulingGated"),
    # the first try, the claim not bound yet (as the zone drill's pod was for its first seconds)
    ("0/16 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found", "Unschedulable"),
    # another PostFilter plugin that might free something
    (ZONE_DRILL.replace("no new claims to deallocate", "claim x deallocated"), "Unschedulable"),
])
def test_the_scheduler_says_nothing_final_while_a_node_may_still_take_the_pod(message, reason):
    assert scheduler_never_binds(_pending(message, reason)) is None


def _binding(kind: str, name: str, role: str, subjects: list[dict], namespace=None) -> dict:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta, "subjects": subjects,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}}


def _role(name: str, rules: list[dict]) -> dict:
    return {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}


SA = {"kind": "ServiceAccount", "name": "cluster-autoscaler", "namespace": "kube-system"}
DRA = {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses", "resourceclaims", "resourceslices"],
       "verbs": ["get", "list", "watch"]}


def test_a_refusal_no_rbac_object_grants_stands():
    chart_only = FakeClient([_role("chart", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
                             _binding("ClusterRoleBinding", "chart", "chart", [SA])])
    assert not autoscale.rbac_grants(chart_only, "kube-system", "cluster-autoscaler", "list resourceslices.resource.k8s.io")
    assert autoscale.rbac_grants(chart_only, "kube-system", "cluster-autoscaler", "list pods")
    program = FakeClient([_role("extra", [DRA]), _binding("ClusterRoleBinding", "extra", "extra", [SA])])
    assert autoscale.rbac_grants(program, "kube-system", "cluster-autoscaler", "list resourceslices.resource.k8s.io")
    # bound to another ServiceAccount, or only for named objects: not granted
    other = FakeClient([_role("extra", [DRA]), _binding("ClusterRoleBinding", "extra", "extra", [{**SA, "name": "other"}])])
    assert not autoscale.rbac_grants(other, "kube-system", "cluster-autoscaler", "list resourceslices.resource.k8s.io")
    named = FakeClient([_role("extra", [{**DRA, "resourceNames": ["x"]}]), _binding("ClusterRoleBinding", "extra", "extra", [SA])])
    assert not autoscale.rbac_grants(named, "kube-system", "cluster-autoscaler", "list resourceslices.resource.k8s.io")
    # a group every ServiceAccount is in, through a RoleBinding in its namespace
    group = FakeClient([_role("extra", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
                        _binding("RoleBinding", "extra", "extra", [{"kind": "Group", "name": "system:serviceaccounts"}],
                                 namespace="kube-system")])
    assert autoscale.rbac_grants(group, "kube-system", "cluster-autoscaler", "list resourceslices.resource.k8s.io")


# cluster-autoscaler 1.35.2's log lines, as the rehearsal's real run wrote them (klog; client-go's reflector).
REFLECTOR = ('E1128 12:50:57.788295   20232 reflector.go:204] "Failed to watch" err="failed to list *v1.ResourceSlice: '
             'resourceslices.resource.k8s.io is forbidden: User \\"system:serviceaccount:kube-system:cluster-autoscaler\\" '
             'cannot list resource \\"resourceslices\\" in API group \\"resource.k8s.io\\" at the cluster scope" '
             'logger="UnhandledError"')
WATCHLIST = ('I1128 12:50:57.788295   20232 reflector.go:429] "Data couldn\'t be fetched in watchlist mode. Falling back '
             'to regular list." err="deviceclasses.resource.k8s.io is forbidden: User \\"system:serviceaccount:kube-system:'
             'cluster-autoscaler\\" cannot watch resource \\"deviceclasses\\" in API group \\"resource.k8s.io\\" at the cluster scope"')
NO_FIT = ("I1128 12:50:57.788295   20232 orchestrator.go:629] Pod training/rehearsal-autoscale-a-node-0-0-x7k2p can't be "
          "scheduled on ada, predicate checking error: can't schedule pod training/rehearsal-autoscale-a-node-0-0-x7k2p: "
          'predicate "NodeResourcesFit" didn\'t pass (predicateReasons=[Insufficient ephemeral-storage]; debugInfo=nodeName: '
          '"template-node-for-ada-2340244436357625910")')


def _process(tmp_path: Path, lines: list[str]) -> SimpleNamespace:
    log = tmp_path / "cluster-autoscaler-1.log"
    log.write_text("\n".join(lines) + "\n")
    return SimpleNamespace(proc=SimpleNamespace(log=log))


def test_the_lists_refused_to_the_autoscalers_informers_are_read_from_its_reflector(tmp_path):
    proc = _process(tmp_path, [WATCHLIST, REFLECTOR, REFLECTOR])
    assert autoscale.AutoscalerProcess.informers_refused(proc) == ["list resourceslices.resource.k8s.io"]


def test_the_autoscaler_says_never_after_its_simulation_fails_on_the_template_in_two_loops(tmp_path):
    drill = autoscale.Drill.__new__(autoscale.Drill)
    drill.autoscaler = _process(tmp_path, [NO_FIT, "I1128 12:50:57.788339   20232 orchestrator.go:170] No expansion options"])
    never = drill.never_scales_for("training", "rehearsal-autoscale-a", "ada")
    assert never() is None  # one loop: not yet
    drill.autoscaler = _process(tmp_path, [NO_FIT, NO_FIT])
    said = never()
    assert said and "ada's template node fails, 2 loops running" in said and "Insufficient ephemeral-storage" in said
    # another pool, another job: not this verdict
    assert drill.never_scales_for("training", "rehearsal-autoscale-b", "ada")() is None
    assert drill.never_scales_for("training", "rehearsal-autoscale-a", "rtx")() is None


def _not_triggered(name: str, pod_uid: str, message: str) -> dict:
    """A NotTriggerScaleUp Event as cluster-autoscaler 1.35.2 records it (eventing_scale_up_processor.go)."""
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": "jupyterhub"},
            "reason": "NotTriggerScaleUp", "message": message, "lastTimestamp": "2026-11-28T23:40:00Z",
            "involvedObject": {"kind": "Pod", "namespace": "jupyterhub", "name": "jupyter-rehearsal-autoscale", "uid": pod_uid}}


def test_the_autoscalers_no_scale_up_verdict_is_read_for_the_pod_there_now():
    """An earlier drill's pod of the same name (a planted run before, on the same cluster) left its
    NotTriggerScaleUp Event behind (Events live an hour): the verdict is the current pod's, by UID, or a later
    drill fails at once on the earlier pod's words (it did: "1 Insufficient nvidia.com/gpu" from the run
    before ended a drill after 0 s)."""
    drill = autoscale.Drill.__new__(autoscale.Drill)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "jupyter-rehearsal-autoscale", "namespace": "jupyterhub",
                                                           "uid": "new-pod"}}
    earlier = _not_triggered("jupyter-rehearsal-autoscale.1", "earlier-pod", "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu")
    drill.client = FakeClient([earlier, pod])
    assert drill.no_scale_up("jupyterhub", "jupyter-rehearsal-autoscale") is None
    now = _not_triggered("jupyter-rehearsal-autoscale.2", "new-pod", "pod didn't trigger scale-up: 1 max node group size reached")
    drill.client = FakeClient([earlier, pod, now])
    assert drill.no_scale_up("jupyterhub", "jupyter-rehearsal-autoscale") == "pod didn't trigger scale-up: 1 max node group size reached"


def test_the_prepared_stacks_fit_folder_goes_when_the_test_process_ends(tmp_path):
    """tests/rehearsal_support.prepared() made /tmp/rehearsal-test-<stack>-* for every process (each xdist
    worker, every session, the check lane too) and left it there."""
    code = ("import tests.rehearsal_support as s\n"
            "s._prepare = lambda stack, config, out, example=None: out\n"
            "print(s.prepared('linode-dev'))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    made = Path(proc.stdout.strip().splitlines()[-1])
    assert made.name.startswith("rehearsal-test-linode-dev-") and made.parent == tmp_path
    assert not made.exists()


class _PreemptedOneNodePool:
    """The example TrainJob on a one-node pool as the pinned controllers showed it when preemption-not-counted
    deletes that node (linode-dev's rehearsal, 2026-11-29): PodGC force-deletes the pod after its 40 s quarantine,
    the JobSet's restart count moves at once, while Kueue's PodsReady is still the True (Recovered) the drill
    before left; the replacement pod appears a poll later and binds only once the node is back. Each
    time.sleep of the scenario is one poll."""

    def __init__(self):
        from gpu_platform.rehearsal.nodes import GROUP_LABEL

        self.NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ada-0", "labels": {GROUP_LABEL: "ada"}}}
        self.poll, self.deleted_at, self.back_at = 0, None, None
        self.time = SimpleNamespace(monotonic=lambda: self.poll * 2.0, sleep=self.sleep)

    def sleep(self, _seconds):
        self.poll += 1

    # the client
    def delete(self, api_version, kind, name, namespace=None):
        assert (kind, name) == ("Node", "ada-0")
        self.deleted_at = self.poll
        return True

    def create(self, obj):
        assert obj["metadata"]["name"] == "ada-0"
        self.back_at = self.poll

    def apply(self, obj, subresource=None):
        pass

    def get(self, api_version, kind, name, namespace=None):
        if kind == "JobSet":
            return {"status": {"restarts": 1 if self.deleted_at is None else 2, "restartsCountTowardsMax": 0}}
        return None

    def list(self, api_version, kind, namespace=None, selector=None):
        if kind == "Node":
            return [self.NODE] if self.deleted_at is None or self.back_at is not None else []
        if kind == "Pod":
            if self.deleted_at is None:
                return [{"metadata": {"uid": "old", "name": "resnet-node-0-0-old"}, "spec": {"nodeName": "ada-0"}}]
            if self.poll == self.deleted_at:
                return []  # the old pod gone, the restarted Job's pod not created yet
            bound = self.back_at is not None
            return [{"metadata": {"uid": "new", "name": "resnet-node-0-0-new"}, "spec": {"nodeName": "ada-0" if bound else None},
                     "status": {"phase": "Running" if bound else "Pending"}}]
        raise AssertionError(kind)

    def workload(self, *_args):
        stale = self.deleted_at is None or self.poll == self.deleted_at
        ready = stale or (self.back_at is not None and self.poll > self.back_at)
        pods_ready = ({"type": "PodsReady", "status": "True", "reason": "Recovered"} if ready
                      else {"type": "PodsReady", "status": "False", "reason": "WaitForRecovery"})
        return {"metadata": {"name": "trainjob-resnet"}, "status": {"conditions": [
            {"type": "Admitted", "status": "True"}, pods_ready]}}


def test_preemption_not_counted_waits_for_a_replacement_pod_and_never_leaves_the_pool_without_its_node(monkeypatch):
    """The stale Recovered condition and the moved restart count came together one poll before any replacement
    pod existed: the scenario passed there, never brought the one-node pool's node back, and every GPU scenario
    after it (unsuspend-by-hand, notebook-profiles) failed for want of a node."""
    world = _PreemptedOneNodePool()
    monkeypatch.setattr(scenarios, "time", world.time)
    monkeypatch.setattr(scenarios, "example_or_not_rehearsed",
                        lambda ctx, sc, controllers: {"metadata": {"name": "resnet", "namespace": "training"}})
    monkeypatch.setattr(scenarios, "_wait_for_pods_ready_config", lambda ctx: {})
    monkeypatch.setattr(scenarios, "_workload_for", world.workload)
    monkeypatch.setattr(scenarios, "node_objects", lambda model: [(world.NODE, {"metadata": {"name": "ada-0"}})])
    ctx = SimpleNamespace(client=world, model=None, timeout=60.0)
    sc = scenarios.preemption_not_counted(ctx)
    assert world.back_at is not None, "the pool's only node was never brought back"
    assert sc.status == "PASS", sc.problems
    assert any(d.startswith("the autoscaler's node ada-0 (group ada) added: pod resnet-node-0-0-new bound to ada-0")
               for d in sc.details), sc.details
    assert any("Workload PodsReady True (Recovered)" in d for d in sc.details), sc.details


class QuotaClient:
    """create() refused by the namespace's ResourceQuota `full` times (the previous scenario's pod still counted), as
    kube-apiserver v1.35 words it, then taken."""

    QUOTA = ('pods "rehearsal-ungated-by-hand" is forbidden: exceeded quota: training-quota, requested: '
             'requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1')

    def __init__(self, full: int, other: str = ""):
        self.full, self.other, self.calls = full, other, 0

    def create(self, obj):
        self.calls += 1
        if self.other:
            raise scenarios.ApiError(403, self.other)
        if self.calls <= self.full:
            raise scenarios.ApiError(403, self.QUOTA)
        self.created = obj
        return obj

    # What queue-bypass's gate step reads and writes next: the pod Kueue gated, the gate policy's refusal.
    def get(self, api_version, kind, name, namespace=None):
        return {**self.created, "spec": {**self.created["spec"], "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}}

    def merge_patch(self, api_version, kind, name, patch, namespace=None):
        raise scenarios.ApiError(403, "ValidatingAdmissionPolicy 'admission-gate-removed-only-by-kueue' denied request")

    def delete(self, api_version, kind, name, namespace=None):
        self.deleted = name


def test_a_pod_refused_for_quota_the_scenario_before_still_holds_is_tried_again_until_there_is_room():
    """linode-dev's shipped run on CI (2026-11-29): queue-bypass's gated GPU pod was refused for `exceeded quota`
    while the pods of the scenario before still counted against the training namespace's one GPU."""
    client = QuotaClient(full=3)
    ctx = SimpleNamespace(client=client, timeout=30)
    assert scenarios.submit_within_quota(ctx, {"metadata": {"name": "p"}}, interval=0.01) is None
    assert client.calls == 4
    # The scenario step itself waits for the room.
    client = QuotaClient(full=2)
    sc = scenarios.Scenario("queue-bypass", "")
    scenarios._ungate_by_hand(SimpleNamespace(client=client, timeout=30), sc, "training")
    assert sc.status == "PASS" and not sc.problems and client.calls == 3, sc.problems
    assert "Kueue's admission gate removed by hand: refused" in sc.details[0] and client.deleted == "rehearsal-ungated-by-hand"
    # Any other refusal is the answer at once; a quota that never frees is the refusal after the run's timeout.
    client = QuotaClient(full=0, other='admission webhook "vpod.kb.io" denied the request')
    err = scenarios.submit_within_quota(SimpleNamespace(client=client, timeout=30), {}, interval=0.01)
    assert "vpod.kb.io" in err and client.calls == 1
    client = QuotaClient(full=10**9)
    started = time.monotonic()
    err = scenarios.submit_within_quota(SimpleNamespace(client=client, timeout=0.3), {}, interval=0.01)
    assert "exceeded quota: training-quota" in err and err.endswith("(still after 0s)"), err
    assert 0.3 <= time.monotonic() - started < 5 and client.calls > 1
