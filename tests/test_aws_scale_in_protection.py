"""The scale-in protection controller against moto's Auto Scaling API and recorded pod lists.

moto emulates Auto Scaling but is lenient where AWS is strict: it accepts more than 50 instance IDs
per SetInstanceProtection call and silently ignores IDs that are not in the group. `StrictAutoScaling`
wraps the moto client and enforces both rules as AWS does (ValidationError), so the controller's
batching and its handling of instances that left the group are really exercised.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any, Optional

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from gpu_platform.controllers.scale_in_protection import (
    MAX_BATCH,
    SCALE_DOWN_DISABLED,
    Controller,
    InClusterKube,
    busy_node_names,
    instance_id,
    pod_requests_gpu,
)

DATA = Path(__file__).parent / "data"
REGION = "us-east-1"
GRACE = 900.0


def load(name: str) -> list[dict[str, Any]]:
    return json.loads((DATA / name).read_text())["items"]


class Clock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class RecordedKube:
    """KubeReader over recorded `kubectl get -o json` lists; node providerIDs point at moto instances."""

    def __init__(self, nodes: list[dict], pods: list[dict]):
        self.nodes = nodes
        self.pods = pods
        self.patches: list[tuple[str, str, Optional[str]]] = []

    def list_pods(self) -> list[dict]:
        return copy.deepcopy(self.pods)

    def list_nodes(self) -> list[dict]:
        return copy.deepcopy(self.nodes)

    def set_node_annotation(self, node: str, key: str, value: Optional[str]) -> None:
        self.patches.append((node, key, value))
        for n in self.nodes:
            if n["metadata"]["name"] == node:
                ann = n["metadata"].setdefault("annotations", {})
                if value is None:
                    ann.pop(key, None)
                else:
                    ann[key] = value


class StrictAutoScaling:
    """The moto client with AWS's SetInstanceProtection rules, call recording and fault injection.

    `states` overrides an instance's LifecycleState as DescribeAutoScalingGroups reports it (moto
    does not run lifecycle hooks, so it never shows Terminating:Wait); SetInstanceProtection then
    refuses that instance with a ValidationError, as AWS refuses instances that are not in service."""

    def __init__(self, client: Any):
        self.client = client
        self.protection_calls: list[list[str]] = []
        self.throttle_next = 0
        self.throttle_groups: set[str] = set()  # every call on these groups is throttled
        self.fail_describe = False
        self.states: dict[str, str] = {}
        self.before_set: Optional[Any] = None  # hook run before a SetInstanceProtection call (races)

    def describe_auto_scaling_groups(self, **kwargs: Any) -> dict:
        if self.fail_describe:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not authorized"}}, "DescribeAutoScalingGroups")
        page = self.client.describe_auto_scaling_groups(**kwargs)
        for g in page["AutoScalingGroups"]:
            for inst in g["Instances"]:
                inst["LifecycleState"] = self.states.get(inst["InstanceId"], inst["LifecycleState"])
        return page

    def set_instance_protection(self, **kwargs: Any) -> dict:
        if self.before_set is not None:
            hook, self.before_set = self.before_set, None
            hook()
        ids = kwargs["InstanceIds"]
        self.protection_calls.append(list(ids))
        if kwargs["AutoScalingGroupName"] in self.throttle_groups:
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "SetInstanceProtection")
        if self.throttle_next:
            self.throttle_next -= 1
            raise ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "SetInstanceProtection")
        if len(ids) > MAX_BATCH:
            raise ClientError({"Error": {"Code": "ValidationError", "Message": "at most 50 instance IDs"}}, "SetInstanceProtection")
        members = {i["InstanceId"] for i in self.client.describe_auto_scaling_groups(
            AutoScalingGroupNames=[kwargs["AutoScalingGroupName"]])["AutoScalingGroups"][0]["Instances"]}
        for i in ids:
            if self.states.get(i, "InService") != "InService":
                raise ClientError({"Error": {"Code": "ValidationError",
                                             "Message": f"The instance {i} is not in InService or EnteringStandby or Standby."}},
                                  "SetInstanceProtection")
            if i not in members:
                raise ClientError({"Error": {"Code": "ValidationError",
                                             "Message": f"The instance {i} is not part of Auto Scaling group {kwargs['AutoScalingGroupName']}."}},
                                  "SetInstanceProtection")
        return self.client.set_instance_protection(**kwargs)


@pytest.fixture(scope="module")
def moto_aws():
    """One emulated account for the module (starting moto's EC2 takes seconds); each test gets its own group."""
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        lt = ec2.create_launch_template(LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": "ami-12c6146b",
                                                                                     "InstanceType": "g5.xlarge"})
        yield boto3.client("autoscaling", region_name=REGION), lt["LaunchTemplate"]["LaunchTemplateId"]


@pytest.fixture
def aws(moto_aws, request):
    """(autoscaling client, launch template ID, a group name of this test's own)."""
    client, lt = moto_aws
    return client, lt, f"gpu-prod-gpu-{request.node.name[5:45].replace('_', '-')}"


def make_group(client: Any, lt_id: str, name: str, size: int, protected: bool = True) -> list[str]:
    client.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=0, MaxSize=max(size, 1), DesiredCapacity=size,
        LaunchTemplate={"LaunchTemplateId": lt_id, "Version": "$Latest"}, AvailabilityZones=["us-east-1a"],
        NewInstancesProtectedFromScaleIn=protected)
    return sorted(i["InstanceId"] for i in client.describe_auto_scaling_groups(AutoScalingGroupNames=[name])
                  ["AutoScalingGroups"][0]["Instances"])


def protection(client: Any, name: str) -> dict[str, bool]:
    g = client.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return {i["InstanceId"]: i["ProtectedFromScaleIn"] for i in g["Instances"]}


def recorded_nodes(instance_ids: list[str]) -> list[dict]:
    """The recorded nodes, their providerIDs pointed at the moto instances (in order)."""
    nodes = load("scale_in_nodes.json")
    for node, iid in zip(nodes, instance_ids):
        zone = node["spec"]["providerID"].split("/")[3]
        node["spec"]["providerID"] = f"aws:///{zone}/{iid}"
    return nodes


def node_names() -> list[str]:
    return [n["metadata"]["name"] for n in load("scale_in_nodes.json")]


# --- the pure parts, on the recorded pod list -----------------------------------------------


def test_recorded_pod_list_busy_nodes():
    pods = load("scale_in_pods_busy.json")
    n1, n2, n3 = node_names()
    # n1: running GPU job; n3: GPU only through an init container's limit; n2: a finished GPU job,
    # daemonsets and a pod asking for 0 GPUs; the unscheduled GPU pod counts for no node.
    assert busy_node_names(pods) == {n1, n3}
    assert busy_node_names(load("scale_in_pods_all_done.json")) == set()
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert pod_requests_gpu(by_name["llm-eval-0"])
    assert not pod_requests_gpu(by_name["dcgm-exporter-x7d2q"])


def test_instance_id_from_provider_id():
    assert instance_id({"spec": {"providerID": "aws:///us-east-1a/i-0abc123def4567890"}}) == "i-0abc123def4567890"
    assert instance_id({"spec": {"providerID": "gce://project/zone/vm"}}) is None
    assert instance_id({"spec": {}}) is None


# --- against moto -----------------------------------------------------------------------------


def test_busy_node_stays_protected_and_idle_node_waits_for_grace(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=True)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    clock = Clock()
    ctl = Controller(StrictAutoScaling(client), kube, [group], GRACE, clock=clock, sleep=lambda s: None)
    n1, n2, n3 = node_names()

    first = ctl.reconcile()
    assert first.unprotected == []  # the idle node's grace period starts now
    assert protection(client, group) == {ids[0]: True, ids[1]: True, ids[2]: True}
    assert kube.nodes[0]["metadata"]["annotations"][SCALE_DOWN_DISABLED] == "true"

    clock.advance(GRACE - 1)
    assert ctl.reconcile().unprotected == []
    assert protection(client, group)[ids[1]] is True

    clock.advance(2)
    result = ctl.reconcile()
    assert result.unprotected == [ids[1]]
    assert protection(client, group) == {ids[0]: True, ids[1]: False, ids[2]: True}
    assert SCALE_DOWN_DISABLED not in kube.nodes[1]["metadata"]["annotations"]
    assert (n2, SCALE_DOWN_DISABLED, None) in kube.patches
    # busy nodes keep both protections however long they run
    clock.advance(10 * GRACE)
    assert ctl.reconcile().unprotected == []
    assert protection(client, group)[ids[0]] is True and protection(client, group)[ids[2]] is True


def test_node_idle_after_jobs_finish_loses_protection_only_after_grace(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    clock = Clock()
    ctl = Controller(StrictAutoScaling(client), kube, [group], GRACE, clock=clock, sleep=lambda s: None)

    assert ctl.reconcile().protected == sorted([ids[0], ids[2]])  # busy nodes get protected
    assert protection(client, group) == {ids[0]: True, ids[1]: False, ids[2]: True}

    kube.pods = load("scale_in_pods_all_done.json")  # the jobs finished
    clock.advance(60)
    assert ctl.reconcile().unprotected == []  # first seen idle: the grace period starts now
    clock.advance(GRACE - 1)
    assert ctl.reconcile().unprotected == []
    clock.advance(2)
    assert sorted(ctl.reconcile().unprotected) == sorted([ids[0], ids[2]])
    assert set(protection(client, group).values()) == {False}


def test_a_new_job_restarts_the_grace_period(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=True)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_all_done.json"))
    clock = Clock()
    ctl = Controller(StrictAutoScaling(client), kube, [group], GRACE, clock=clock, sleep=lambda s: None)
    ctl.reconcile()
    clock.advance(GRACE - 10)
    kube.pods = load("scale_in_pods_busy.json")  # node 1 picks up a job just in time
    ctl.reconcile()
    kube.pods = load("scale_in_pods_all_done.json")
    clock.advance(20)
    released = ctl.reconcile().unprotected
    assert ids[0] not in released and ids[1] in released


def test_more_than_fifty_instances_are_protected_in_batches(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 120, protected=False)
    template = next(p for p in load("scale_in_pods_busy.json") if p["metadata"]["name"] == "bert-finetune-7xk2p-worker-0")
    base_node = load("scale_in_nodes.json")[0]
    nodes, pods = [], []
    for k, iid in enumerate(ids):
        node = copy.deepcopy(base_node)
        node["metadata"]["name"] = f"ip-10-40-1-{k}.ec2.internal"
        node["spec"]["providerID"] = f"aws:///us-east-1a/{iid}"
        nodes.append(node)
        pod = copy.deepcopy(template)
        pod["metadata"]["name"] = f"sweep-{k}"
        pod["spec"]["nodeName"] = node["metadata"]["name"]
        pods.append(pod)
    strict = StrictAutoScaling(client)
    ctl = Controller(strict, RecordedKube(nodes, pods), [group], GRACE, clock=Clock(), sleep=lambda s: None)
    result = ctl.reconcile()
    assert sorted(result.protected) == ids
    assert set(protection(client, group).values()) == {True}
    assert [len(c) for c in strict.protection_calls] == [50, 50, 20]


def test_instance_that_left_the_group_is_skipped(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    strict = StrictAutoScaling(client)
    ctl = Controller(strict, kube, [group], GRACE, clock=Clock(), sleep=lambda s: None)
    # Between the describe and the protection call, node 1's instance is detached: AWS rejects the batch.
    strict.before_set = lambda: client.detach_instances(InstanceIds=[ids[0]], AutoScalingGroupName=group,
                                                        ShouldDecrementDesiredCapacity=True)
    result = ctl.reconcile()
    assert result.left_group == [ids[0]]
    assert result.protected == [ids[2]]
    assert protection(client, group) == {ids[1]: False, ids[2]: True}
    assert strict.protection_calls == [[ids[0], ids[2]], [ids[2]]]
    # Next cycle: the instance is simply gone; nothing is called for it and its state is forgotten.
    strict.protection_calls.clear()
    ctl.reconcile()
    assert strict.protection_calls == []
    assert ids[0] not in ctl.idle_since


def test_throttled_call_is_retried_with_backoff(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    strict = StrictAutoScaling(client)
    strict.throttle_next = 1
    sleeps: list[float] = []
    ctl = Controller(strict, RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json")), [group], GRACE,
                     clock=Clock(), sleep=sleeps.append)
    result = ctl.reconcile()
    assert result.protected == sorted([ids[0], ids[2]])
    assert protection(client, group)[ids[0]] is True
    assert len(strict.protection_calls) == 2 and len(sleeps) == 1 and 0 < sleeps[0] <= 20


def test_persistent_throttling_gives_up_and_other_errors_are_not_retried(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    strict = StrictAutoScaling(client)
    strict.throttle_next = 100
    sleeps: list[float] = []
    ctl = Controller(strict, RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json")), [group], GRACE,
                     clock=Clock(), sleep=sleeps.append, max_attempts=4)
    # The group's failure is reported, not raised: the cycle still annotates the busy nodes.
    result = ctl.reconcile()
    assert "Throttling" in result.errors[group] and result.protected == []
    n1, _, n3 = node_names()
    assert result.annotated == {n1: "true", n3: "true"}
    assert len(strict.protection_calls) == 4 and len(sleeps) == 3
    assert sleeps == sorted(sleeps) or max(sleeps) <= 20  # capped exponential backoff

    ctl2 = Controller(strict, RecordedKube([], []), ["no-such-group"], GRACE, clock=Clock(), sleep=sleeps.append)
    assert ctl2.reconcile().protected == []  # an unknown group describes as empty, no error


def test_in_cluster_reader_paginates_and_patches(tmp_path):
    token = tmp_path / "token"
    token.write_text("tok-1\n")
    seen: list[Any] = []
    pages = {None: {"items": [{"n": 1}], "metadata": {"continue": "c2"}}, "c2": {"items": [{"n": 2}], "metadata": {}}}

    class Resp(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def urlopen(req):
        seen.append(req)
        from urllib.parse import parse_qs, urlparse
        q = parse_qs(urlparse(req.full_url).query)
        if req.get_method() == "GET":
            return Resp(json.dumps(pages[q.get("continue", [None])[0]]).encode())
        return Resp(b"{}")

    kube = InClusterKube(base_url="https://k8s.test", token_file=str(token), urlopen=urlopen, node_selector="gpu-platform.io/pool")
    assert kube.list_pods() == [{"n": 1}, {"n": 2}]
    assert "fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded" in seen[0].full_url
    assert seen[0].headers["Authorization"] == "Bearer tok-1"
    kube.list_nodes()
    assert "labelSelector=gpu-platform.io%2Fpool" in seen[2].full_url
    kube.set_node_annotation("ip-1", SCALE_DOWN_DISABLED, None)
    patch = seen[-1]
    assert patch.get_method() == "PATCH" and patch.full_url == "https://k8s.test/api/v1/nodes/ip-1"
    assert patch.headers["Content-type"] == "application/merge-patch+json"
    assert json.loads(patch.data) == {"metadata": {"annotations": {SCALE_DOWN_DISABLED: None}}}


def test_the_kubernetes_api_is_the_pods_service_account_unless_service_account_dir_names_another():
    """In a pod: the mounted service account and the in-cluster address. SERVICE_ACCOUNT_DIR (the rehearsal's
    TokenRequest token and the cluster's CA, as for the Linode node-group provider) replaces the folder only;
    an empty value keeps the pod's."""
    from gpu_platform.controllers.scale_in_protection.controller import kube_from_env

    pod = kube_from_env({"KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443",
                         "NODE_SELECTOR": "gpu-platform.io/pool"})
    assert (pod.base_url, pod.token_file, pod.ca_file, pod.node_selector) == (
        "https://10.100.0.1:443", "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", "gpu-platform.io/pool")
    assert kube_from_env({"SERVICE_ACCOUNT_DIR": ""}).token_file == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    drill = kube_from_env({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "40001",
                           "SERVICE_ACCOUNT_DIR": "/tmp/drill/sa"})
    assert (drill.base_url, drill.token_file, drill.ca_file, drill.node_selector) == (
        "https://127.0.0.1:40001", "/tmp/drill/sa/token", "/tmp/drill/sa/ca.crt", "")


# --- instances that are not in service, failures that must not cost the busy nodes their guard ---------


def test_instance_entering_terminating_wait_mid_cycle_does_not_block_the_rest(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    strict = StrictAutoScaling(client)
    ctl = Controller(strict, kube, [group], GRACE, clock=Clock(), sleep=lambda s: None)
    # A Spot interruption puts node 1's instance into Terminating:Wait between the describe and the call.
    strict.before_set = lambda: strict.states.update({ids[0]: "Terminating:Wait"})
    result = ctl.reconcile()
    assert strict.protection_calls == [[ids[0], ids[2]], [ids[2]]]  # retried with the in-service one only
    assert result.protected == [ids[2]] and result.left_group == [ids[0]] and result.errors == {}
    assert protection(client, group)[ids[2]] is True
    n1, _, n3 = node_names()
    assert kube.nodes[0]["metadata"]["annotations"][SCALE_DOWN_DISABLED] == "true"  # busy: guarded all along
    assert kube.nodes[2]["metadata"]["annotations"][SCALE_DOWN_DISABLED] == "true"
    # Next cycle: the terminating instance is not touched at all.
    strict.protection_calls.clear()
    assert ctl.reconcile().errors == {} and strict.protection_calls == []


def test_a_second_refusal_costs_only_the_refused_instance(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    strict = StrictAutoScaling(client)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    ctl = Controller(strict, kube, [group], GRACE, clock=Clock(), sleep=lambda s: None)

    def first():  # node 1 starts terminating; then, before the retry, node 3 too
        strict.states[ids[0]] = "Terminating:Wait"
        strict.before_set = second

    def second():
        strict.states[ids[2]] = "Terminating:Wait"

    strict.before_set = first
    result = ctl.reconcile()
    assert result.errors == {} and result.protected == [] and sorted(result.left_group) == [ids[0], ids[2]]
    assert strict.protection_calls == [[ids[0], ids[2]], [ids[2]], [ids[2]]]


def test_terminating_instance_is_left_alone_and_its_busy_node_stays_annotated(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    strict = StrictAutoScaling(client)
    strict.states[ids[0]] = "Terminating:Wait"
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    result = Controller(strict, kube, [group], GRACE, clock=Clock(), sleep=lambda s: None).reconcile()
    assert strict.protection_calls == [[ids[2]]] and result.protected == [ids[2]]
    assert kube.nodes[0]["metadata"]["annotations"][SCALE_DOWN_DISABLED] == "true"


def test_one_failing_group_leaves_the_other_groups_busy_nodes_protected(aws):
    client, lt, group = aws
    other = group[:40] + "-b"
    ids_a = make_group(client, lt, group, 3, protected=False)
    ids_b = make_group(client, lt, other, 3, protected=False)
    nodes = recorded_nodes(ids_a) + recorded_nodes(ids_b)
    for n in nodes[3:]:
        n["metadata"]["name"] += "-b"
    pods = load("scale_in_pods_busy.json")
    pods_b = json.loads(json.dumps(pods))
    for pod in pods_b:
        if pod["spec"].get("nodeName"):
            pod["spec"]["nodeName"] += "-b"
    strict = StrictAutoScaling(client)
    first, second = sorted([group, other])
    strict.throttle_groups = {first}
    ctl = Controller(strict, RecordedKube(nodes, pods + pods_b), [group, other], GRACE, clock=Clock(), sleep=lambda s: None,
                     max_attempts=2)
    result = ctl.reconcile()
    ids_second = ids_a if second == group else ids_b
    assert set(result.errors) == {first} and sorted(result.protected) == sorted([ids_second[0], ids_second[2]])
    assert protection(client, second)[ids_second[0]] is True
    busy = {n["metadata"]["name"] for i, n in enumerate(nodes) if i % 3 != 1}
    assert {n for n, v in result.annotated.items() if v == "true"} == busy  # both groups' busy nodes guarded


def test_describe_failure_still_marks_busy_nodes(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=False)
    strict = StrictAutoScaling(client)
    strict.fail_describe = True
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    result = Controller(strict, kube, [group], GRACE, clock=Clock(), sleep=lambda s: None).reconcile()
    n1, _, n3 = node_names()
    assert "AccessDenied" in result.errors["describe"] and result.annotated == {n1: "true", n3: "true"}
    assert strict.protection_calls == []


def test_a_failed_release_keeps_the_annotation(aws):
    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=True)
    strict = StrictAutoScaling(client)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_all_done.json"))
    clock = Clock()
    ctl = Controller(strict, kube, [group], GRACE, clock=clock, sleep=lambda s: None, max_attempts=1)
    ctl.reconcile()
    assert all(n["metadata"]["annotations"][SCALE_DOWN_DISABLED] == "true" for n in kube.nodes)
    clock.advance(GRACE + 1)
    strict.throttle_groups = {group}
    result = ctl.reconcile()
    assert group in result.errors and result.unprotected == []
    assert all(n["metadata"]["annotations"][SCALE_DOWN_DISABLED] == "true" for n in kube.nodes)
    strict.throttle_groups = set()
    assert sorted(ctl.reconcile().unprotected) == ids
    assert all(SCALE_DOWN_DISABLED not in n["metadata"]["annotations"] for n in kube.nodes)


# --- the controller's grace and the autoscaler's unneeded-time, played against each other -----------


class AutoscalerModel:
    """cluster-autoscaler's scale-down as its FAQ describes it, for one group: every scan, a node that
    carries scale-down-disabled=true, or runs a GPU pod, is not unneeded (its count restarts); any
    other node is unneeded from the first scan that sees it so, and is deleted at the first scan
    where it has been unneeded for the group's unneeded-time (read from the rendered ASG tag)."""

    def __init__(self, kube: RecordedKube, unneeded_seconds: float):
        self.kube = kube
        self.unneeded_seconds = unneeded_seconds
        self.since: dict[str, float] = {}
        self.deleted: dict[str, float] = {}

    def scan(self, now: float) -> None:
        busy = busy_node_names(self.kube.pods)
        for node in self.kube.nodes:
            name = node["metadata"]["name"]
            held = (node["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED) == "true"
            if name in self.deleted or held or name in busy:
                self.since.pop(name, None)
                continue
            start = self.since.setdefault(name, now)
            if now - start >= self.unneeded_seconds:
                self.deleted[name] = now


def play(aws, timing, idle_after: float = 600.0) -> float:
    """Run the controller (every controller interval) and the autoscaler model (every scan) on one
    clock; the jobs finish at `idle_after`. Returns how long node 1 lived after going idle."""
    from gpu_platform.components.aws.gpu_asg import autoscaler_tags
    from gpu_platform.components.aws.scale_down import UNNEEDED_TIME_TAG, parse_go_duration
    from gpu_platform.components.cluster import GpuPoolSpec

    client, lt, group = aws
    ids = make_group(client, lt, group, 3, protected=True)
    kube = RecordedKube(recorded_nodes(ids), load("scale_in_pods_busy.json"))
    spec = GpuPoolSpec(name="a10g", instance_type="g5.xlarge", gpu_model="NVIDIA A10G", gpus_per_node=1, min_nodes=0,
                       max_nodes=8, capacity="spot", node_labels={"gpu-platform.io/pool": "a10g"})
    tag = autoscaler_tags("gpu-prod", spec, timing.unneeded_tag_value())[UNNEEDED_TIME_TAG]
    ca = AutoscalerModel(kube, parse_go_duration(tag))
    clock = Clock(0.0)
    ctl = Controller(StrictAutoScaling(client), kube, [group], timing.controller_grace_seconds, clock=clock,
                     sleep=lambda s: None)
    n1 = kube.nodes[0]["metadata"]["name"]
    # The jobs end between two controller cycles (the worst case: noticed one interval late).
    idle_at = idle_after + 1
    while n1 not in ca.deleted and clock.t < idle_at + 4 * timing.grace_seconds:
        if clock.t >= idle_at:
            kube.pods = load("scale_in_pods_all_done.json")
        if clock.t % timing.controller_interval_seconds == 0:
            ctl.reconcile()
        if clock.t % timing.scan_interval_seconds == 0:
            ca.scan(clock.t)
        clock.advance(1)
    assert n1 in ca.deleted, "the idle node was never removed"
    return ca.deleted[n1] - idle_at


def test_scale_down_timing_splits_the_grace_period():
    from gpu_platform.components.aws.scale_down import parse_go_duration, scale_down_timing

    t = scale_down_timing(900)
    assert (t.controller_grace_seconds, t.autoscaler_unneeded_seconds) == (780, 120)
    assert t.controller_grace_seconds + t.autoscaler_unneeded_seconds == 900
    assert t.unneeded_tag_value() == "2m0s" and parse_go_duration("2m0s") == 120 and parse_go_duration("10m") == 600
    short = scale_down_timing(60)
    assert (short.controller_grace_seconds, short.autoscaler_unneeded_seconds) == (0, 60)
    alone = scale_down_timing(900, controller_enabled=False)
    assert (alone.controller_grace_seconds, alone.autoscaler_unneeded_seconds) == (0, 900)
    with pytest.raises(ValueError):
        scale_down_timing(30)


@pytest.mark.parametrize("grace", [60, 900, 3600])
def test_idle_node_leaves_after_one_grace_period(aws, grace):
    from gpu_platform.components.aws.scale_down import scale_down_timing

    timing = scale_down_timing(grace)
    lived = play(aws, timing)
    assert grace <= lived <= grace + timing.slack_seconds, lived


def test_the_old_composition_kept_idle_nodes_twice_the_grace_period(aws):
    """Controller grace and unneeded-time both set to the grace period: the defect issue 12 names."""
    from gpu_platform.components.aws.scale_down import ScaleDownTiming

    lived = play(aws, ScaleDownTiming(900, controller_grace_seconds=900, autoscaler_unneeded_seconds=900))
    assert lived >= 2 * 900
