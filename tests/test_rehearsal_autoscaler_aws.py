"""The real cluster-autoscaler (aws) in the rehearsal against moto (gpu_platform/rehearsal/autoscale_aws.py).

The first tests need no component: the plan's Auto Scaling groups as the drill reads them, their
node-template tags against the launch template's nodeadm NodeConfig and the node model, the groups
created in moto's server as the autoscaler will discover them, the cloud config pointing it at moto. The
rehearsal tests run the real autoscaler (`cluster-autoscaler-aws`, built by `make rehearsal-build` from
../shared/sources) on the shared aws-prod cluster: scale from zero and back, a busy node kept, and its
informers with the chart's RBAC alone (never synced) and with the program's rules (synced), a Katib
trial and a GPU notebook each from zero, two half-used 4-GPU nodes keeping their trainers, a node that never
joins, the autoscaler killed mid-scale-up; then each fix taken out again (the node-template ephemeral-storage
tag, the runtime's safe-to-evict annotation) on the same cluster, where the drill must find the defect."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from gpu_platform.rehearsal import autoscale_aws, binaries
from gpu_platform.rehearsal.processes import ProcessGroup
from tests.conftest import AWS_PROD_DRILLS, plan_stack


@pytest.fixture(scope="module")
def groups():
    return autoscale_aws.planned_groups(plan_stack("aws-prod"))


def test_the_drill_reads_every_discovered_group_of_the_plan_with_its_launch_template_and_subnets(groups):
    by_name = {g.name: g for g in groups}
    assert sorted(by_name) == ["gpu-prod-gpu-a10g-us-east-1a", "gpu-prod-gpu-a10g-us-east-1b", "gpu-prod-gpu-a10g-us-east-1c",
                               "gpu-prod-gpu-l4x4-us-east-1a", "gpu-prod-gpu-l4x4-us-east-1b"]
    g = by_name["gpu-prod-gpu-l4x4-us-east-1b"]
    assert (g.pool, g.zone, g.instance_types) == ("l4x4", "us-east-1b", ["g6.12xlarge"])
    assert g.subnets == [{"name": "gpu-prod-network-private-us-east-1b", "cidr": "10.40.32.0/19", "zone": "us-east-1b"}]
    assert g.launch_template_name == "gpu-prod-gpu-l4x4-us-east-1b-launch-template"
    assert g.template_node() == {
        "labels": {"gpu-platform.io/pool": "l4x4", "nvidia.com/gpu.present": "true", "gpu-platform.io/capacity": "spot",
                   "k8s.amazonaws.com/accelerator": "nvidia-l4"},
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        # 300 GiB root volume: 299 less nodeadm's 1 GiB kubeReserved and 10 % nodefs eviction (gpu_asg.py).
        "resources": {"nvidia.com/gpu": "4", "ephemeral-storage": "268Gi"}}


def test_a_group_whose_launch_template_is_not_in_the_plan_is_named():
    plan = plan_stack("aws-prod")

    class Without:
        def by_type(self, t):
            return [] if t == autoscale_aws.LAUNCH_TEMPLATE else plan.by_type(t)

    with pytest.raises(ValueError, match=r"Auto Scaling group (gpu-prod-gpu-\w+-us-east-1[abc]): its launch template "
                                         r"'\1-launch-template-id' is not a launch template of the plan"):
        autoscale_aws.planned_groups(Without())


def test_the_node_template_tags_agree_with_the_nodeconfig_the_instance_type_and_the_node_model(groups):
    from tests.rehearsal_support import prepared

    model = prepared("aws-prod")[2].model
    for g in groups:
        group = next(m for m in model.node_groups if m.name == g.pool and m.labels["topology.kubernetes.io/zone"] == g.zone)
        assert autoscale_aws.tag_disagreements(g, group, {"g5.xlarge": 1, "g6.12xlarge": 4}[g.instance_types[0]]) == [], g.name


def test_a_node_template_tag_the_kubelet_does_not_match_is_a_disagreement(groups):
    g = copy.deepcopy(groups[0])
    g.asg["tags"] = [t for t in g.asg["tags"] if "/taint/" not in t["key"]]
    for t in g.asg["tags"]:
        if t["key"].endswith("/resources/nvidia.com/gpu"):
            t["value"] = "2"
    problems = autoscale_aws.tag_disagreements(g, None, 1)
    assert any("the kubelet registers taints [{'key': 'nvidia.com/gpu'" in p for p in problems), problems
    assert any("the node-template tags say 2 nvidia.com/gpu, the instance type has 1" in p for p in problems), problems


def test_the_cloud_config_points_every_service_the_autoscaler_calls_at_moto():
    text, changes = autoscale_aws.cloud_config("http://127.0.0.1:4242", "us-east-1")
    sections = re.findall(r'\[ServiceOverride "\d"\]\nService = (\w+)\nRegion = us-east-1\nURL = http://127.0.0.1:4242\n'
                          r"SigningRegion = us-east-1", text)
    assert sections == ["autoscaling", "ec2", "eks"]
    assert "legacy endpoint resolvers" in changes[0]


def test_moto_holds_the_plans_groups_as_the_autoscaler_discovers_them_and_launches_into_their_zone(groups, tmp_path):
    """moto's server, the plan's groups created in it: the autoscaler's auto-discovery filters
    (aws_wrapper.go getAutoscalingGroupsByTags: tag-key per --node-group-auto-discovery tag) find all five,
    with their mixed-instances override, suspended AZRebalance and the drill's unneeded time; a desired
    capacity of one launches an instance in the group's zone and TerminateInstanceInAutoScalingGroup
    takes it back to zero."""
    pytest.importorskip("flask")
    procs = ProcessGroup(tmp_path / "logs")
    try:
        moto = autoscale_aws.Moto(procs, "us-east-1")
        assert moto.ready(), moto.proc.tail()
        changes = moto.create(groups, autoscale_aws.vpc_cidr(plan_stack("aws-prod")), "20s")
        assert len(changes) == 5 and all(c.endswith("scaledownunneededtime: 2m0s -> 20s") for c in changes)
        found = moto.autoscaling.describe_auto_scaling_groups(Filters=[
            {"Name": "tag-key", "Values": ["k8s.io/cluster-autoscaler/enabled"]},
            {"Name": "tag-key", "Values": ["k8s.io/cluster-autoscaler/gpu-prod"]}])["AutoScalingGroups"]
        assert sorted(g["AutoScalingGroupName"] for g in found) == sorted(g.name for g in groups)
        asg = next(g for g in found if g["AutoScalingGroupName"] == "gpu-prod-gpu-a10g-us-east-1b")
        assert asg["MixedInstancesPolicy"]["LaunchTemplate"]["Overrides"] == [{"InstanceType": "g5.xlarge"}]
        assert [p["ProcessName"] for p in asg["SuspendedProcesses"]] == ["AZRebalance"]
        assert asg["AvailabilityZones"] == ["us-east-1b"] and asg["DesiredCapacity"] == 0
        assert moto.gpus_of_type("g6.12xlarge") == 4
        moto.autoscaling.set_desired_capacity(AutoScalingGroupName=asg["AutoScalingGroupName"], DesiredCapacity=1)
        [inst] = moto.groups([asg["AutoScalingGroupName"]])[asg["AutoScalingGroupName"]]["Instances"]
        assert inst["AvailabilityZone"] == "us-east-1b"
        moto.autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=inst["InstanceId"], ShouldDecrementDesiredCapacity=True)
        after = moto.groups([asg["AutoScalingGroupName"]])[asg["AutoScalingGroupName"]]
        assert after["DesiredCapacity"] == 0 and after["Instances"] == []
        assert moto.instances([inst["InstanceId"]])[inst["InstanceId"]]["State"]["Name"] == "terminated"
    finally:
        procs.stop_all()


def test_the_protection_controller_runs_as_its_planned_deployment_on_the_drills_clock(tmp_path):
    """The controller's process: its planned Deployment's environment (groups, selector, region), its grace and
    cycle on the drill's clock (seconds where the stack has minutes, the cycle at least 1 s), moto's endpoint
    for boto3, the rehearsal API server with its ServiceAccount's token (SERVICE_ACCOUNT_DIR), this checkout's
    module; and the stack's promise split as the drill checks it."""
    from tests.rehearsal_support import prepared

    fit = prepared("aws-prod")[2]
    planned = autoscale_aws.planned_protection(fit.releases)
    assert planned is not None and planned.source.startswith("the plan's Deployment kube-system/gpu-scale-in-protection")
    assert (planned.namespace, planned.service_account) == ("kube-system", "gpu-scale-in-protection")

    class Api:
        host, port = "127.0.0.1", 40001

        def token(self, ns, sa):
            return f"token-of-{ns}/{sa}"

    class Procs:
        started: list = []

        def start(self, name, argv, env=None, cwd=None):
            self.started.append((name, argv, env, cwd))

    procs = Procs()
    p = autoscale_aws.ProtectionProcess(planned, Api(), b"CA", tmp_path, "http://127.0.0.1:4242", procs)
    env = p.env
    assert (env["GRACE_SECONDS"], env["INTERVAL_SECONDS"]) == ("13", "1")
    assert env["ASG_NAMES"].split(",") == ["gpu-prod-gpu-a10g-us-east-1a", "gpu-prod-gpu-a10g-us-east-1b",
                                          "gpu-prod-gpu-a10g-us-east-1c", "gpu-prod-gpu-l4x4-us-east-1a",
                                          "gpu-prod-gpu-l4x4-us-east-1b"]
    assert (env["NODE_SELECTOR"], env["AWS_REGION"]) == ("gpu-platform.io/pool", "us-east-1")
    assert env["AWS_ENDPOINT_URL"] == env["AWS_ENDPOINT_URL_AUTO_SCALING"] == "http://127.0.0.1:4242"
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "40001")
    p.start()
    [(name, argv, _, cwd)] = procs.started
    assert argv[1:] == ["-m", "gpu_platform.controllers.scale_in_protection.controller"]
    assert (Path(cwd) / "gpu_platform" / "controllers" / "scale_in_protection" / "controller.py").is_file()
    sa = Path(env["SERVICE_ACCOUNT_DIR"])
    assert (sa / "token").read_text() == "token-of-kube-system/gpu-scale-in-protection" and (sa / "ca.crt").read_bytes() == b"CA"
    assert p.changes[:2] == ["GRACE_SECONDS 780 -> 13", "INTERVAL_SECONDS 30 -> 1"]


def test_the_drill_needs_the_aws_autoscaler_binary(monkeypatch):
    from gpu_platform.rehearsal import autoscale

    monkeypatch.setattr(binaries, "find", lambda name: None)
    release = autoscale.AutoscalerRelease([{"kind": "Deployment", "metadata": {"name": "ca"}, "spec": {"template": {"spec": {
        "containers": [{"command": ["./cluster-autoscaler"]}]}}}}], "test", True)
    with pytest.raises(binaries.MissingBinaries, match=autoscale_aws.AUTOSCALER):
        autoscale.AutoscalerProcess(release, None, "", "", Path("/nonexistent"), Path("/nonexistent"), 1, autoscale.Timing(), None,
                                    binary=autoscale_aws.AUTOSCALER, config=("", []))


# --- the real autoscaler on the shared aws-prod rehearsal cluster -------------------------------------------


def _drill(tmp_path):
    """The eks-autoscaling scenario of the shipped aws-prod run: (scenario, its details and problems as one text)."""
    from tests.test_rehearsal import HAVE_CACHE
    from tests.rehearsal_support import rehearse
    from gpu_platform.rehearsal.scenarios import eks_autoscaling

    if not HAVE_CACHE:
        pytest.skip(f"no rehearsal component cache (`{binaries.BUILD_COMMAND}`)")
    result = rehearse("aws-prod", tmp_path, scenarios=(eks_autoscaling,))
    [sc] = result.scenarios
    assert sc.status != "NOT REHEARSED", sc.problems
    return sc, "\n".join(sc.details + [f"PROBLEM: {p}" for p in sc.problems])


def _no_problem(sc, *prefixes: str) -> None:
    mine = [p for p in sc.problems if p.startswith(prefixes)]
    assert not mine, mine


GROUP = r"gpu-prod-gpu-(?:a10g|l4x4)-us-east-1[abc]"


@pytest.mark.rehearsal(stack="aws-prod")
def test_a_katib_trial_scales_its_group_from_zero_and_binds_on_a_node_in_the_instances_zone(tmp_path):
    """The example TrainJob pending with what Katib's metrics collector sidecar adds to a trial's pod (500Mi of
    ephemeral storage): the group's node-template tag offers it, so the autoscaler scales the group from zero."""
    sc, text = _drill(tmp_path)
    _no_problem(sc, "scale-up", "gpu-prod-gpu-")
    m = re.search(rf"scale-up: 1 scale-up\(s\) of (a10g|l4x4) \(Scale-up: setting group ({GROUP}) size to 1 \(pods "
                  rf"training/rehearsal-autoscale-a-\S+ unschedulable; plan \[[^\]]*\]\)\) -> instance\(s\) \[\('(i-[0-9a-f]+)', "
                  r"'([^']+)', '(us-east-1[abc])'\)\] -> node\(s\) \[\('(ip-[0-9-]+\.ec2\.internal)', '(us-east-1[abc])', "
                  r"'aws:///(us-east-1[abc])/(i-[0-9a-f]+)'\)\]; TrainJob \(the example resnet-checkpointed as a Katib "
                  r"trial, with 500Mi ephemeral-storage\) admitted, bound and running", text)
    assert m, text
    assert m[2] == m[4], "the group the autoscaler scaled is the one moto launched into"
    assert m[5] == m[7] == m[8] and m[3] == m[9], "the node is in its instance's zone, with its providerID"


@pytest.mark.rehearsal(stack="aws-prod")
def test_a_node_running_a_training_pod_is_kept_past_the_grace(tmp_path):
    sc, text = _drill(tmp_path)
    _no_problem(sc, "busy node")
    # The stack's scale-in protection controller annotates the busy node: the autoscaler skips it for that.
    assert re.search(r"busy node: ip-\S+ kept while TrainJob rehearsal-autoscale-a runs .*the autoscaler's reason: Skipping "
                     r"ip-\S+ from delete consideration - the node is marked as no scale down", text), text


@pytest.mark.rehearsal(stack="aws-prod")
def test_after_the_job_ends_the_node_goes_after_the_grace_and_its_instance_is_terminated(tmp_path):
    sc, text = _drill(tmp_path)
    _no_problem(sc, "scale-down")
    m = re.search(r'scale-down: Scale-down: removing empty node "?(ip-\S+?)"?, (\d+)s after the job ended \(grace (\d+)s\); '
                  r"Terminated instance (i-[0-9a-f]+) in autoscaling group: [^;]*; moto: instance (i-[0-9a-f]+) terminated, "
                  rf"{GROUP} desired capacity 0", text)
    assert m and int(m[2]) >= int(m[3]) and m[4] == m[5], text
    assert sc.status == "PASS", sc.problems


@pytest.mark.rehearsal(stack="aws-prod")
def test_the_grace_is_the_controllers_hold_then_the_autoscalers_unneeded_time(tmp_path):
    """aws-prod's 15-minute grace is two parts (components/aws/scale_down.py): the scale-in protection controller
    (the real one, as its Deployment runs it) keeps the idle node annotated and its instance protected for 780 s,
    then the autoscaler waits its 2m0s; on the drill's clock 13 s, then the drill's 20 s. Each part is measured."""
    sc, text = _drill(tmp_path)
    _no_problem(sc, "scale-down grace", "scale-in protection controller")
    assert re.search(r"scale-in protection controller: the plan's Deployment kube-system/gpu-scale-in-protection \(release "
                     r"gpu-prod-scale-in-protection\) run as `python -m gpu_platform.controllers.scale_in_protection.controller` "
                     r"\(the image's controller.py\), changed: GRACE_SECONDS 780 -> 13; INTERVAL_SECONDS 30 -> 1; ", text), text
    m = re.search(r"scale-down grace: 33s on the drill's clock, the stack's 900s in two parts: the scale-in protection controller "
                  r"kept (ip-\S+) annotated cluster-autoscaler.kubernetes.io/scale-down-disabled and (i-[0-9a-f]+) protected from "
                  r"scale-in for (\d+)s after the job ended \(its part 13s, GRACE_SECONDS 780 in the plan, run with 13; annotation "
                  r"removed after (\d+)s, protection after (\d+)s\), then the autoscaler removed the node (\d+)s later \(its part "
                  r"20s: scaledownunneededtime 120s in the plan\)", text)
    assert m, text
    assert 12 <= int(m[3]) <= 13 + 2 + 5 and int(m[6]) >= 19, text


@pytest.mark.rehearsal(stack="aws-prod")
def test_with_the_charts_rbac_alone_the_aws_autoscaler_never_syncs_and_with_the_programs_it_does(tmp_path):
    sc, text = _drill(tmp_path)
    _no_problem(sc, "chart's RBAC alone", "sync with the program's RBAC")
    m = re.search(r"chart's RBAC alone: the autoscaler never synced its informers in \d+s; the API server refused: ([^(]+)", text)
    assert m, text
    assert {"list resourceslices.resource.k8s.io", "list resourceclaims.resource.k8s.io",
            "list deviceclasses.resource.k8s.io"} <= {x.strip() for x in m[1].split(",")}
    assert re.search(r"sync with the program's RBAC: cluster-autoscaler 1.35.2 \(as kube-system/cluster-autoscaler\) synced "
                     r"its informers and ran its loop", text), text


@pytest.mark.rehearsal(stack="aws-prod")
def test_the_report_names_each_groups_scale_ups_and_downs_with_the_autoscalers_reasons(tmp_path):
    sc, text = _drill(tmp_path)
    m = re.search(rf"node group ({GROUP}): (\d+) scale-up\(s\), (\d+) scale-down\(s\), as cluster-autoscaler logged them:", text)
    assert m and int(m[2]) == 1 and int(m[3]) == 1, text
    lines = [d for d in sc.details if d.startswith(f"  {m[1]}: ")]
    assert any(f"scale-up: Scale-up: setting group {m[1]} size to 1 (pods training/" in ln for ln in lines), lines
    assert any("scale-down: Scale-down: removing empty node" in ln for ln in lines), lines


# --- the extended drill (eks-autoscaling-extended: not in the default run), once on the shared aws-prod cluster ---

_EXTENDED: dict = {}

# aws-prod's extended and planted autoscaler drills run on a second aws-prod cluster, on another worker (as
# linode-dev's): with them the stack's group was the whole suite's critical path (shipped run 571 s + extended
# drill 363 s + planted drills 193 s in one worker, 2026-11-29); a second control plane costs about a minute of CPU.
AWS_DRILLS = AWS_PROD_DRILLS


def _extended(tmp_path):
    """The eks-autoscaling-extended scenario run once on the shared aws-prod cluster (nothing planted): a GPU
    notebook from zero, two half-used 4-GPU nodes, a node that never joins, the autoscaler killed mid-scale-up.
    Not in the default run: about six more minutes would take aws-prod's `--rehearse` past preflight's
    default --timeout on a loaded machine. Returns (scenario, its details and problems as one text)."""
    from gpu_platform.rehearsal.scenarios import eks_autoscaling_extended

    if "result" not in _EXTENDED:
        _EXTENDED["result"] = _planted_drill(tmp_path, None, scenario=eks_autoscaling_extended)[0]
    sc = _EXTENDED["result"]
    return sc, "\n".join(sc.details + [f"PROBLEM: {p}" for p in sc.problems])


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_the_extended_drill_reports_each_pools_scale_ups_and_downs_each_with_its_pods(tmp_path):
    """Per pool, summed over its groups: a10g scaled up for the notebook, the node that never joined and its
    replacement (the restarted autoscaler added none), and down twice (the lost node is removed as
    unregistered, not scaled down); l4x4 for the two half-used nodes (a balanced plan: one line per group),
    and down twice. Every scale-up names the pods it was for, a balanced one's second group too."""
    sc, text = _extended(tmp_path)
    assert sc.status == "PASS", sc.problems
    counts: dict[str, list[int]] = {}
    for group, ups, downs in re.findall(rf"node group ({GROUP}): (\d+) scale-up\(s\), (\d+) scale-down\(s\), as "
                                        r"cluster-autoscaler logged them:", text):
        pool = group.split("-")[3]
        counts.setdefault(pool, [0, 0])
        counts[pool][0] += int(ups)
        counts[pool][1] += int(downs)
    assert counts == {"a10g": [3, 2], "l4x4": [2, 2]}, text
    lines = [d for d in sc.details if re.match(rf"  {GROUP}: ", d)]
    ups = [ln for ln in lines if " scale-up: Scale-up: setting group " in ln]
    assert len(ups) == 5 and all(re.search(r"size to 1 \(pods (training|jupyterhub)/\S+ .*unschedulable; plan \[", ln)
                                 for ln in ups), ups
    assert any("unregistered removed: Removing 1 unregistered nodes for node group" in ln for ln in lines), lines


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_a_gpu_notebook_scales_its_profiles_pool_from_zero_binds_and_runs(tmp_path):
    """The pod the hub's KubeSpawner makes for a GPU profile (as aws-prod's hub values render it, queued in
    Kueue's gpu-queue) scales its pool from zero; stopped, the pool goes back to zero after the grace, the
    autoscaler terminating the instance (the phase linode-dev's drill runs too: autoscale.gpu_notebook_from_zero)."""
    sc, text = _extended(tmp_path)
    _no_problem(sc, "GPU notebook")
    m = re.search(rf"GPU notebook: 1 scale-up\(s\) of (a10g|l4x4) \(Scale-up: setting group ({GROUP}) size to 1 \(pods "
                  r"jupyterhub/jupyter-rehearsal-autoscale unschedulable; plan \[[^\]]*\]\)\) -> instance\(s\) \[\('(i-[0-9a-f]+)', "
                  r"'([^']+)', '(us-east-1[ab])'\)\] -> node\(s\) \[\('(ip-[0-9-]+\.ec2\.internal)', '(us-east-1[ab])', "
                  r"'aws:///(us-east-1[ab])/(i-[0-9a-f]+)'\)\]; notebook pod of profile gpu-(\w+) \(the hub's KubeSpawner pod as "
                  r"rendered; LocalQueue gpu-queue, Kueue workload \S+\) admitted, bound and running", text)
    assert m, text
    assert m[1] == m[10] and m[2] == m[4] and m[5] == m[7] == m[8] and m[3] == m[9], "its profile's pool, in its instance's zone"
    s = re.search(rf"GPU notebook: stopped; {m[1]} back at zero \(0 instance\(s\), 0 node\(s\)\) (\d+)s after \(grace (\d+)s\): "
                  rf'Scale-down: removing empty node "?{re.escape(m[6])}"?; Terminated instance {m[3]} in autoscaling group: '
                  rf"[^;]*; moto: instance {m[3]} terminated, {m[2]} desired capacity 0", text)
    assert s and int(s[1]) >= int(s[2]), text


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_two_half_used_4_gpu_nodes_keep_their_trainers_and_the_autoscaler_says_why(tmp_path):
    """aws-prod's l4x4 (g6.12xlarge, 4 GPUs, a group in us-east-1a and one in 1b): a 2-GPU and a 1-GPU trainer on
    two nodes, each at or below the 0.5 threshold with room for the other: the runtime's safe-to-evict "false"
    keeps both, concluded as soon as the autoscaler says so for each node (not after a watch)."""
    sc, text = _extended(tmp_path)
    _no_problem(sc, "half-used nodes")
    assert re.search(r"half-used nodes: ip-\S+ runs TrainJob rehearsal-autoscale-[mfs], ip-\S+ runs TrainJob "
                     r"rehearsal-autoscale-[mfs] \((2 and 1|1 and 2) of 4 GPUs\)", text), text
    m = re.search(r"half-used nodes: \['(ip-\S+)', '(ip-\S+)'\] and their training pods kept \((\d+)s after the 2-GPU TrainJob "
                  r"rehearsal-autoscale-[mf] ended, grace (\d+)s\); the autoscaler's reasons: Node (ip-\S+) cannot be removed: "
                  r"pod annotated as not safe to evict present: rehearsal-autoscale-[mfs]-\S+; Node (ip-\S+) cannot be removed: "
                  r"pod annotated as not safe to evict present: rehearsal-autoscale-[mfs]-\S+", text)
    assert m and {m[1], m[2]} == {m[5], m[6]}, text
    assert int(m[3]) < int(m[4]) + 40, "concluded from the autoscaler's words, within the watch"


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_a_node_that_never_joins_is_removed_at_the_join_deadline_and_the_group_recovers(tmp_path):
    """moto launches the instance, no node registers: at --max-node-provision-time (aws-prod's chart renders
    none, so the autoscaler's 15m default; the drill's 30s, as the Linode drill's) the autoscaler removes the
    long-unregistered node through TerminateInstanceInAutoScalingGroup (ShouldDecrementDesiredCapacity: moto
    terminates it and lowers the desired capacity) and scales the pool up again."""
    sc, text = _extended(tmp_path)
    _no_problem(sc, "never joined")
    m = re.search(rf"never joined: instance (i-[0-9a-f]+) of ({GROUP}) launched, never registered; at the join deadline "
                  r"\(30s\) the autoscaler: ([^\n]*?); Terminated instance (i-[0-9a-f]+) in autoscaling group: [^;]*; moto: "
                  rf"(i-[0-9a-f]+) terminated; (a10g|l4x4) scaled up again \((i-[0-9a-f]+) in ({GROUP})\)", text)
    assert m and m[1] == m[4] == m[5] and m[7] != m[1], text
    assert f"Removing 1 unregistered nodes for node group {m[2]}" in m[3], m[3]
    assert "--max-node-provision-time: (default) -> 30s" in text


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_the_autoscaler_killed_mid_scale_up_neither_leaks_nor_duplicates_an_instance(tmp_path):
    sc, text = _extended(tmp_path)
    _no_problem(sc, "restart", "TrainJob training/rehearsal-autoscale-b")
    m = re.search(r"restart: killed \(SIGKILL\) while its scale-up \((i-[0-9a-f]+): launched, not yet a node\) was in flight, "
                  r"started again: cluster-autoscaler 1\.35\.2 \(as kube-system/cluster-autoscaler\) synced", text)
    assert m, text
    after = re.search(rf"after the restart: (a10g|l4x4)'s groups \(desired capacity, instances, nodes\): ({GROUP}): 1, "
                      r"\['(i-[0-9a-f]+)'\], \['(ip-\S+)'\]; EC2 instances outside any group: none", text)
    assert after and after[3] == m[1], text
    assert "every GPU group back at zero: desired capacity 0, instances running in moto: none" in text
    assert sc.status == "PASS", sc.problems


# --- each fix taken out again: the drill on the shared aws-prod cluster, with the program's old behaviour planted ---


def _nothing_planted_in_the_releases(releases) -> None:
    """The defect is in what the cloud holds (the Auto Scaling groups' tags: `plant`), not in the releases."""


def _planted_drill(tmp_path, phases, plant=None, mutate=None, scenario=None):
    """The drill's `phases` (or a `scenario` of scenarios.py) on the shared aws-prod cluster with `plant`
    changing the plan's groups before moto gets them and/or `mutate` the installed releases; returns
    (scenario, its problems as one text)."""
    from tests.test_rehearsal import HAVE_CACHE
    from tests.rehearsal_support import rehearse
    from gpu_platform.rehearsal.scenarios import Scenario, restore_model_nodes

    if not HAVE_CACHE:
        pytest.skip(f"no rehearsal component cache (`{binaries.BUILD_COMMAND}`)")

    def eks_autoscaling_planted(ctx):
        sc = Scenario("eks-autoscaling", autoscale_aws.TITLE)
        try:
            return autoscale_aws.run_drill(ctx, sc, phases, plant=plant)
        finally:
            restore_model_nodes(ctx)

    result = rehearse("aws-prod", tmp_path, mutate=mutate or _nothing_planted_in_the_releases,
                      scenarios=(scenario or eks_autoscaling_planted,))
    [sc] = result.scenarios
    assert sc.status != "NOT REHEARSED", sc.problems
    return sc, "\n".join(sc.problems)


def _without_the_ephemeral_storage_tag(groups) -> None:
    """The fix reverted: no `k8s.io/cluster-autoscaler/node-template/resources/ephemeral-storage` tag on the GPU
    groups (gpu_asg.autoscaler_tags before it), so the autoscaler's AWS template node offers none."""
    dropped = 0
    for g in groups:
        kept = [t for t in g.asg["tags"] if t["key"] != autoscale_aws.TEMPLATE_PREFIX + "resources/ephemeral-storage"]
        dropped += len(g.asg["tags"]) - len(kept)
        g.asg["tags"] = kept
    assert dropped == len(groups) == 5, "every GPU group carries the tag"


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_planted_without_the_ephemeral_storage_tag_a_katib_trial_never_scales_a_group(tmp_path):
    """cluster-autoscaler 1.35.2's AWS template node has ephemeral storage only from the tag
    (aws_manager.go buildNodeFromTemplate): without it a pod asking Katib's 500Mi fits no group. Concluded
    from the autoscaler's NotTriggerScaleUp on the trial's pod, not after the drill's hang guard (the
    shipped run above scales the group)."""
    sc, failures = _planted_drill(tmp_path, autoscale_aws.katib_trial_only, plant=_without_the_ephemeral_storage_tag)
    assert sc.status == "FAIL"
    m = re.search(r"scale-up: TrainJob training/rehearsal-autoscale-a \(a Katib trial: asking 500Mi ephemeral-storage, its "
                  r"metrics collector's\) admitted, bound and running on a new node of a GPU group: the autoscaler did not "
                  r"scale up for it: pod didn't trigger scale-up: ([^\n]*)", failures)
    assert m and "Insufficient ephemeral-storage" in m[1], failures
    assert "not within" not in failures, "concluded from the autoscaler's words, not a timeout"
    assert not [d for d in sc.details if re.match(r"  \S+: \S+ scale-up: Scale-up", d)], "no group was scaled up"


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_planted_without_safe_to_evict_the_autoscaler_evicts_a_trainer_from_a_half_used_4_gpu_node(tmp_path):
    """The runtime's pods unannotated, as before the fix: on aws-prod's l4x4 nodes the autoscaler drains a node
    whose trainer uses half its GPUs or less and evicts the running pod (the shipped run above keeps both)."""
    from tests.test_rehearsal_autoscaler import _without_scale_down_protection

    sc, failures = _planted_drill(tmp_path, autoscale_aws.half_used_only, mutate=_without_scale_down_protection)
    assert sc.status == "FAIL"
    assert re.search(r"half-used nodes: after \d+s training pod rehearsal-autoscale-[mfs]-\S+ was evicted from ip-\S+ .*"
                     r"nothing protects a running trainer from scale-down", failures), failures


def _controller_grace_zero(releases) -> None:
    """The controller's part of the grace lost: its Deployment with GRACE_SECONDS=0 (it lets an idle node go at its
    next cycle), the autoscaler's tag unchanged: an idle node would go 2 minutes after its job, not 15."""
    changed = 0
    for rel in releases:
        for o in rel.objects:
            if o.get("kind") == "Deployment" and o["metadata"]["name"] == "gpu-scale-in-protection":
                for e in o["spec"]["template"]["spec"]["containers"][0]["env"]:
                    if e["name"] == "GRACE_SECONDS":
                        e["value"], changed = "0", changed + 1
    assert changed == 1, "the controller's Deployment sets GRACE_SECONDS"


@pytest.mark.rehearsal(stack="aws-prod", group=AWS_DRILLS)
def test_planted_a_controller_that_lets_go_at_once_turns_the_grace_check_red(tmp_path):
    """The real controller run with GRACE_SECONDS=0: it removes the annotation and the protection at its first
    idle cycle, so the node goes after the autoscaler's part alone. The drill measures the hold against the
    stack's promise (aws.scaleDownGraceMinutes less the autoscaler's tag), not against the Deployment it runs."""
    sc, failures = _planted_drill(tmp_path, autoscale_aws.grace_only, mutate=_controller_grace_zero)
    assert sc.status == "FAIL"
    m = re.search(r"scale-down grace: the controller let (ip-\S+) go (\d+)s after the job ended, before its part of the grace "
                  r"\(13s: the stack's 900s less the autoscaler's 120s\)", failures)
    assert m and int(m[2]) <= 3, failures
    assert "the parts do not make the stack's grace: the controller's GRACE_SECONDS 0 + " in failures


def test_a_balanced_scale_up_names_its_pods_under_each_group():
    """--balance-similar-node-groups (the chart's values) logs one executor line per group of a plan: the report
    gives each the pods and plan (cluster-autoscaler 1.35.2's lines from the drill, cut to what the reader uses)."""
    from gpu_platform.rehearsal import autoscale

    klog = """\
I1128 20:45:57.500000   21351 orchestrator.go:100] Pod training/rehearsal-autoscale-m-node-0-0-wxr6v is unschedulable
I1128 20:45:57.500100   21351 orchestrator.go:100] Pod training/rehearsal-autoscale-s-node-0-0-lh5b9 is unschedulable
I1128 20:45:57.525646   21351 orchestrator.go:263] Final scale-up plan: [{l4x4-1b 0->1 (max: 1)} {l4x4-1a 0->1 (max: 1)}]
I1128 20:45:57.525660   21351 executor.go:164] Scale-up: setting group l4x4-1b size to 1
I1128 20:45:57.595810   21351 executor.go:164] Scale-up: setting group l4x4-1a size to 1
I1128 20:47:30.000000   21351 orchestrator.go:100] Pod training/rehearsal-autoscale-b-node-0-0-xphnz is unschedulable
I1128 20:47:32.253000   21351 orchestrator.go:263] Final scale-up plan: [{a10g-1c 0->1 (max: 2)}]
I1128 20:47:32.253027   21351 executor.go:164] Scale-up: setting group a10g-1c size to 1
"""
    ups = autoscale.logged_events(klog, lambda n: None)
    assert [(e.group, e.text.split(" (", 1)[1]) for e in ups] == [
        ("l4x4-1b", "pods training/rehearsal-autoscale-m-node-0-0-wxr6v, training/rehearsal-autoscale-s-node-0-0-lh5b9 "
                    "unschedulable; plan [{l4x4-1b 0->1 (max: 1)} {l4x4-1a 0->1 (max: 1)}])"),
        ("l4x4-1a", "pods training/rehearsal-autoscale-m-node-0-0-wxr6v, training/rehearsal-autoscale-s-node-0-0-lh5b9 "
                    "unschedulable; plan [{l4x4-1b 0->1 (max: 1)} {l4x4-1a 0->1 (max: 1)}])"),
        ("a10g-1c", "pods training/rehearsal-autoscale-b-node-0-0-xphnz unschedulable; plan [{a10g-1c 0->1 (max: 2)}])")]
