"""A CPU-only job is never admitted to a GPU flavor (platform review #3).

Before: the one ClusterQueue listed the `system` flavor (system nodes, GPU quota 0) first, then the GPU
pools. Kueue v0.19.2 (pkg/scheduler/flavorassigner findFlavorForPodSets / shouldTryNextFlavor) goes on
to the next flavor whenever one has no unused quota, so the CPU job after the system quota was used up
got a GPU flavor: a CPU job on a GPU node, and on autoscaled pools a GPU node scaled up for it. Now CPU
work has its own ClusterQueue (`cpu-work`, the system flavor alone, behind LocalQueue `cpu-queue`) and the
GPU ClusterQueue has only GPU flavors, behind `gpu-queue` and `default` (an unlabelled GPU job is queued,
issue #22 item 1); the ValidatingAdmissionPolicy `work-in-its-queue` refuses CPU-only work headed for
`default` or `gpu-queue` and GPU work naming `cpu-queue`, saying which queue to use. Policies are
evaluated with cel-python as the API server evaluates them; fit's Kueue model (fit/kueue.assign with
usage) shows the overflow; the rehearsal shows it on the real Kueue.
"""

from __future__ import annotations

import copy
from typing import Optional

import pytest

from gpu_platform.components.cluster import TRAINING_NAMESPACE
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE
from gpu_platform.components.platform.queue import (
    CLUSTER_QUEUE, CPU_CLUSTER_QUEUE, CPU_LOCAL_QUEUE, DEFAULT_LOCAL_QUEUE, LOCAL_QUEUE, QUEUE_NAME_LABEL, QUEUE_ROUTING_POLICY,
    SYSTEM_FLAVOR, render_cpu_cluster_queue, render_policy_binding, render_queue_routing_policy, system_quota,
)
from gpu_platform.components.cluster import SystemPoolSpec
from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.kueue import assign
from tests.test_queue_admission import JOB_CONTROLLER, USER, batch_job, pod, policy_refusal, trainjob
from tests.test_rehearsal import needs_components

STACKS = ["aws-prod", "gcp-prod", "linode-dev", "linode-ha"]
KUEUE_TYPE = "kubernetes:kueue.x-k8s.io/v1beta2:"


def refusal(obj: dict, user: str = USER) -> Optional[str]:
    """None when `work-in-its-queue` admits `obj`, else its message."""
    return policy_refusal(render_queue_routing_policy()["spec"], obj, user)


def labelled(obj: dict, queue: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"].setdefault("labels", {})[QUEUE_NAME_LABEL] = queue
    return obj


def experiment(gpus: int, queue: Optional[str] = None, own: Optional[str] = CPU_LOCAL_QUEUE) -> dict:
    """A Katib Experiment whose trial Job asks for `gpus`, its trials labelled `queue`, the Experiment
    itself labelled `own` (the suggestion pod's queue)."""
    trial = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": [
        {"name": "training", "image": "x", "resources": {"requests": {"cpu": "2"},
                                                         **({"limits": {"nvidia.com/gpu": gpus}} if gpus else {})}}]}}}}
    if queue:
        trial["metadata"] = {"labels": {QUEUE_NAME_LABEL: queue}}
    meta: dict = {"name": "e", "namespace": "training"}
    if own:
        meta["labels"] = {QUEUE_NAME_LABEL: own}
    return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": meta,
            "spec": {"trialTemplate": {"primaryContainerName": "training", "trialSpec": trial}}}


def test_an_experiment_without_the_cpu_queue_label_is_refused_at_submission() -> None:
    """Its suggestion pod (CPU only) copies the Experiment's labels; without cpu-queue it would be
    defaulted to `default` (the GPU pools) and refused, and the experiment would make no trials."""
    for own in (None, LOCAL_QUEUE, DEFAULT_LOCAL_QUEUE):
        for gpus in (0, 1):
            said = refusal(experiment(gpus, CPU_LOCAL_QUEUE if gpus == 0 else None, own=own))
            assert said and "suggestion pod" in said and f"{QUEUE_NAME_LABEL}: {CPU_LOCAL_QUEUE}" in said, (own, gpus, said)
    assert refusal(experiment(1, None, own=CPU_LOCAL_QUEUE)) is None
    assert refusal(experiment(0, CPU_LOCAL_QUEUE, own=CPU_LOCAL_QUEUE)) is None


# --- the policy ------------------------------------------------------------------------------------------------


def _cpu_trainjob() -> dict:
    tj = trainjob("2")
    tj["spec"]["trainer"]["resourcesPerNode"]["requests"].pop("nvidia.com/gpu")
    return tj


def test_unlabelled_gpu_work_is_queued_in_default_and_gpu_work_naming_the_cpu_queue_is_refused() -> None:
    # the main path needs no label: LocalQueue default is the GPU queue (issue #22 item 1)
    for obj in (batch_job("2"), trainjob("2"), experiment(1), labelled(batch_job("2"), DEFAULT_LOCAL_QUEUE),
                labelled(batch_job("2"), LOCAL_QUEUE), labelled(trainjob("2"), LOCAL_QUEUE), experiment(1, LOCAL_QUEUE),
                labelled(pod(JUPYTERHUB_NAMESPACE), LOCAL_QUEUE), labelled(pod(KUBEFLOW_NAMESPACE), LOCAL_QUEUE)):
        assert refusal(obj) is None, obj["kind"]
    for obj in (labelled(batch_job("2"), CPU_LOCAL_QUEUE), labelled(trainjob("2"), CPU_LOCAL_QUEUE),
                experiment(1, CPU_LOCAL_QUEUE), labelled(pod("training"), CPU_LOCAL_QUEUE)):
        said = refusal(obj)
        assert said and f"{QUEUE_NAME_LABEL}: {LOCAL_QUEUE}" in said and "system nodes" in said, (obj["kind"], said)
        assert f"Drop the label {QUEUE_NAME_LABEL}" in said
    assert "trialTemplate.trialSpec.metadata.labels" in refusal(experiment(1, CPU_LOCAL_QUEUE))


def test_cpu_only_work_headed_for_a_gpu_queue_is_refused_saying_to_label_it_cpu_queue() -> None:
    # without a label in training (LocalQueue default, the GPU pools) or naming gpu-queue
    for obj in (batch_job("2", gpus=0), _cpu_trainjob(), experiment(0), pod("training", gpus=None),
                labelled(batch_job("2", gpus=0), LOCAL_QUEUE), labelled(_cpu_trainjob(), LOCAL_QUEUE),
                experiment(0, LOCAL_QUEUE), labelled(pod(KUBEFLOW_NAMESPACE, gpus=None), LOCAL_QUEUE),
                labelled(batch_job("2", gpus=0), DEFAULT_LOCAL_QUEUE)):
        said = refusal(obj)
        assert said and "asks for no GPU" in said and f"{QUEUE_NAME_LABEL}: {CPU_LOCAL_QUEUE}" in said, (obj["kind"], said)
    # CPU-only work in cpu-queue, or with no queue where there is no `default` (a CPU step in kubeflow)
    for obj in (labelled(batch_job("2", gpus=0), CPU_LOCAL_QUEUE), labelled(_cpu_trainjob(), CPU_LOCAL_QUEUE),
                experiment(0, CPU_LOCAL_QUEUE), labelled(pod("training", gpus=None), CPU_LOCAL_QUEUE),
                labelled(pod(JUPYTERHUB_NAMESPACE, gpus=None), CPU_LOCAL_QUEUE), pod(JUPYTERHUB_NAMESPACE, gpus=None),
                pod(KUBEFLOW_NAMESPACE, gpus=None)):
        assert refusal(obj) is None, obj["kind"]


def test_what_a_queued_owner_makes_and_what_the_spec_does_not_show_is_not_judged() -> None:
    # a TrainJob's JobSet (Kueue does not default its queue: its owner is managed) and a Job's pods
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {
        "name": "t", "namespace": "training", "ownerReferences": [
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "t", "uid": "u", "controller": True}]},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {"containers": [
            {"name": "n", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}]}}
    assert refusal(jobset) is None
    job_pod = pod("training", owner={"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True})
    assert refusal(job_pod, user=JOB_CONTROLLER) is None
    # a TrainJob that takes its resources from the runtime names gpu-queue: its GPUs are not in its spec
    runtime_only = labelled(trainjob("2"), LOCAL_QUEUE)
    del runtime_only["spec"]["trainer"]["resourcesPerNode"]
    assert refusal(runtime_only) is None


def test_the_policy_binding_denies_and_fails_closed() -> None:
    policy = render_queue_routing_policy()
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = render_policy_binding(QUEUE_ROUTING_POLICY)
    assert binding["spec"] == {"policyName": QUEUE_ROUTING_POLICY, "validationActions": ["Deny"]}


def test_the_queue_objects_are_valid_kueue_and_kubernetes() -> None:
    import kubernetes_validate

    from tests.test_platform_validate import validate_cr

    validate_cr(render_cpu_cluster_queue(system_quota("gcp", SystemPoolSpec("e2-standard-4", 1, 3))))
    for obj in (render_queue_routing_policy(), render_policy_binding(QUEUE_ROUTING_POLICY)):
        kubernetes_validate.validate(obj, "1.33", strict=True)


# --- the plans --------------------------------------------------------------------------------------------------


def _plan_queues(stack: str) -> tuple[dict, dict, dict]:
    from tests.fit_support import stack_plan

    plan = stack_plan(stack)
    cqs = {r.inputs["metadata"]["name"]: r.inputs for r in plan.resources if r.type == KUEUE_TYPE + "ClusterQueue"}
    lqs = {(r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r.inputs["spec"]["clusterQueue"]
           for r in plan.resources if r.type == KUEUE_TYPE + "LocalQueue"}
    policies = {r.inputs["metadata"]["name"] for r in plan.resources
                if r.type.endswith("ValidatingAdmissionPolicy")}
    default = next(r for r in plan.resources if r.type == KUEUE_TYPE + "LocalQueue"
                   and r.inputs["metadata"]["name"] == DEFAULT_LOCAL_QUEUE)
    return cqs, lqs, {"policies": policies, "default_options": default.options}


@pytest.mark.parametrize("stack", STACKS)
def test_no_cluster_queue_offers_cpu_work_a_gpu_flavor(stack: str) -> None:
    """LocalQueue cpu-queue -> the CPU queue (system flavor only); default and every gpu-queue -> the GPU
    queue, which has no system flavor; no cohort joins them (borrowing GPU-flavor quota is the same overflow)."""
    cqs, lqs, extra = _plan_queues(stack)
    assert lqs[("training", DEFAULT_LOCAL_QUEUE)] == CLUSTER_QUEUE
    assert lqs[("training", CPU_LOCAL_QUEUE)] == CPU_CLUSTER_QUEUE
    assert [f["name"] for rg in cqs[CPU_CLUSTER_QUEUE]["spec"]["resourceGroups"] for f in rg["flavors"]] == [SYSTEM_FLAVOR]
    gpu_queues = {cq for (ns, name), cq in lqs.items() if name == LOCAL_QUEUE}
    assert gpu_queues == {CLUSTER_QUEUE}
    gpu_flavors = [f["name"] for rg in cqs[CLUSTER_QUEUE]["spec"]["resourceGroups"] for f in rg["flavors"]]
    assert gpu_flavors and SYSTEM_FLAVOR not in gpu_flavors
    assert not any(cq["spec"].get("cohort") or cq["spec"].get("cohortName") for cq in cqs.values())
    assert QUEUE_ROUTING_POLICY in extra["policies"]
    # spec.clusterQueue is immutable: a stack whose `default` pointed at cpu-work is replaced, not patched
    assert "spec.clusterQueue" in extra["default_options"]["replaceOnChanges"]
    assert extra["default_options"]["deleteBeforeReplace"] is True


# --- fit's model of Kueue ---------------------------------------------------------------------------------------


def one_cluster_queue(releases) -> None:
    """The queues of before (platform review #3): the system flavor first in the GPU ClusterQueue, every
    LocalQueue pointing at it."""
    objs = [o for rel in releases for o in rel.objects]
    cpu = next(o for o in objs if o.get("kind") == "ClusterQueue" and o["metadata"]["name"] == CPU_CLUSTER_QUEUE)
    gpu = next(o for o in objs if o.get("kind") == "ClusterQueue" and o["metadata"]["name"] == CLUSTER_QUEUE)
    gpu["spec"]["resourceGroups"][0]["flavors"][:0] = cpu["spec"]["resourceGroups"][0]["flavors"]
    for rel in releases:
        rel.objects = [o for o in rel.objects if o is not cpu and not (
            o.get("kind") in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            and o["metadata"]["name"] == QUEUE_ROUTING_POLICY)]
        for o in rel.objects:
            if o.get("kind") == "LocalQueue":
                o["spec"]["clusterQueue"] = CLUSTER_QUEUE


def _cq_and_flavors(releases):
    objs = [o for rel in releases for o in rel.objects]
    flavors = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ResourceFlavor"}
    cqs = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ClusterQueue"}
    return cqs, flavors


CPU_JOB = [("main", {}, {"cpu": 250, "memory": 64 * 1024 ** 2})]


def test_fit_models_kueue_moving_a_cpu_job_on_when_the_system_flavor_is_full() -> None:
    """fit.kueue.assign with the system flavor's quota in use: before, the CPU job went on to the GPU
    flavor; now it waits (insufficient unused quota in flavor system)."""
    from tests.test_fit_stacks import _stack

    _, releases = _stack("linode-dev")
    before = copy.deepcopy(releases)
    one_cluster_queue(before)
    for rels, cq_name in ((before, CLUSTER_QUEUE), (releases, CPU_CLUSTER_QUEUE)):
        cqs, flavors = _cq_and_flavors(rels)
        system = cqs[cq_name]["spec"]["resourceGroups"][0]["flavors"][0]
        assert system["name"] == SYSTEM_FLAVOR
        assert assign(CPU_JOB, cqs[cq_name], flavors).flavor_of("main") == SYSTEM_FLAVOR  # empty: the system nodes
        full = {(SYSTEM_FLAVOR, "cpu"): 10 ** 9}
        verdict = assign(CPU_JOB, cqs[cq_name], flavors, usage=full)
        if rels is before:
            assert verdict.admitted and verdict.flavor_of("main") == "ada"  # the GPU pool
        else:
            assert not verdict.admitted and "insufficient unused quota for cpu in flavor system" in verdict.reason


@pytest.mark.parametrize("stack", ["linode-dev", "aws-prod"])
def test_preflight_reports_a_cluster_queue_that_lets_cpu_work_overflow_to_gpu_nodes(stack: str) -> None:
    from tests.fit_support import need_charts
    from tests.test_fit_stacks import _problems, _stack

    need_charts()
    model, releases = _stack(stack)
    assert not _problems(check_fit(model, copy.deepcopy(releases)), "queue-fit", reason="next CPU-only job")
    one_cluster_queue(releases)
    [problem] = _problems(check_fit(model, releases), "queue-fit", reason="next CPU-only job")
    assert "flavor system (system nodes)" in problem.reason and "GPU nodes" in problem.reason
    assert "own ClusterQueue" in problem.fix


# --- the real Kueue ---------------------------------------------------------------------------------------------


@needs_components
@pytest.mark.rehearsal(stack="linode-dev")
def test_rehearsal_a_cpu_job_after_the_system_quota_waits_and_never_gets_a_gpu_flavor(tmp_path) -> None:
    """The real Kueue: the system flavor's CPU quota filled, the next CPU-only Job (cpu-queue) stays pending
    with Kueue's `insufficient unused quota`; with the queues of before it is admitted to the GPU flavor.
    An unlabelled CPU-only Job is refused by the routing policy, naming cpu-queue."""
    from gpu_platform.rehearsal.scenarios import cpu_job_placement
    from tests.test_rehearsal import _failures, _rehearse

    result = _rehearse("linode-dev", tmp_path / "fixed", scenarios=(cpu_job_placement,))
    [sc] = result.scenarios
    assert sc.status == "PASS", _failures(result)
    said = " ".join(sc.details)
    assert "quota used up" in said and "stays pending" in said and "insufficient unused quota" in said, said
    # without the label it would be queued in `default`, the GPU queue: refused, naming cpu-queue
    assert "CPU-only Job without kueue.x-k8s.io/queue-name: refused, naming kueue.x-k8s.io/queue-name: cpu-queue" in said, said

    before = _rehearse("linode-dev", tmp_path / "before", mutate=one_cluster_queue, scenarios=(cpu_job_placement,))
    [sc] = before.scenarios
    assert sc.status == "FAIL", sc.details
    said = " ".join(sc.problems)
    assert "admitted the next CPU-only Job to flavor(s) ada" in said and "GPU node" in said, said


def _default_to_the_cpu_queue(releases) -> None:
    """This branch's first layout: LocalQueue default -> cpu-work (an unlabelled GPU job never admitted)."""
    for rel in releases:
        for o in rel.objects:
            if o.get("kind") == "LocalQueue" and o["metadata"]["name"] == DEFAULT_LOCAL_QUEUE:
                o["spec"]["clusterQueue"] = CPU_CLUSTER_QUEUE


@pytest.mark.parametrize("stack", ["linode-dev", "gcp-prod"])
def test_preflight_reports_a_default_queue_where_an_unlabelled_gpu_job_waits_for_ever(stack: str) -> None:
    from tests.fit_support import need_charts
    from tests.test_fit_stacks import _problems, _stack

    need_charts()
    model, releases = _stack(stack)
    assert not _problems(check_fit(model, copy.deepcopy(releases)), "queue-fit", reason="admits no 1-GPU pod")
    _default_to_the_cpu_queue(releases)
    [problem] = _problems(check_fit(model, releases), "queue-fit", reason="admits no 1-GPU pod")
    assert "LocalQueue training/default" in problem.reason and "ClusterQueue cpu-work" in problem.reason
    assert "gpu-training" in problem.fix


def _job_file_overrides() -> dict[str, list[dict]]:
    """Objects a `--job` file might carry that would change what fit believes of the platform, each as the cluster
    would not take it from the file's author: Kueue's configuration (Kueue reads its own chart's ConfigMap), the
    platform namespace relabelled out of Kueue, a second CRD for TrainJob (refused: the kind is served), the
    platform's LocalQueue pointed elsewhere (its clusterQueue is immutable)."""
    from gpu_platform.preflight.fit.checks import KUEUE_CONFIG_KEY

    meta = {"namespace": TRAINING_NAMESPACE}
    return {
        "kueue-configuration": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kueue", **meta},
                                 "data": {KUEUE_CONFIG_KEY: "apiVersion: config.kueue.x-k8s.io/v1beta2\n"
                                          "kind: Configuration\nmanagedJobsNamespaceSelector: "
                                          "{matchLabels: {no-such-label: x}}\n"}}],
        "namespace-relabelled": [{"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": TRAINING_NAMESPACE, "labels": {"gpu-platform.io/queue": "off"}}}],
        "second-trainjob-crd": [{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                                 "metadata": {"name": "xtrainjobs.trainer.kubeflow.org"},
                                 "spec": {"group": "trainer.kubeflow.org", "scope": "Namespaced",
                                          "names": {"kind": "TrainJob", "plural": "xtrainjobs"}}}],
        "local-queue-redirected": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                                    "metadata": {"name": DEFAULT_LOCAL_QUEUE, **meta},
                                    "spec": {"clusterQueue": "gpu-training"}}],
    }


@pytest.mark.parametrize("override", ["kueue-configuration", "namespace-relabelled", "second-trainjob-crd",
                                      "local-queue-redirected"])
def test_a_job_file_adds_objects_but_does_not_change_what_the_platform_defines(override: str) -> None:
    """Fit judged a job file's objects as if they replaced the platform's: a ConfigMap under Kueue's configuration key
    made the file's unlabelled GPU Job look outside Kueue, and so did relabelling the namespace; a second TrainJob CRD
    hid the TrainJob from the admission policies; a redirected LocalQueue hid the queue problem (reviews of
    2026-11-30). The Job's and the TrainJob's problems are the same with the override as without it."""
    from gpu_platform.preflight.fit.render import RenderedRelease
    from tests.fit_support import need_charts
    from tests.test_fit_stacks import _stack

    need_charts()
    model, releases = _stack("linode-dev")
    _default_to_the_cpu_queue(releases)
    ours = {f"Job/{TRAINING_NAMESPACE}/j", f"TrainJob/{TRAINING_NAMESPACE}/t"}

    def problems_of(objects):
        job_file = RenderedRelease("job", "job", "file:job.yaml", "example", None, None, TRAINING_NAMESPACE, objects)
        report = check_fit(model, [*releases, job_file])
        return sorted((p.object, p.check, p.reason) for p in report.problems if p.object in ours), report.notes

    alone, _ = problems_of([batch_job("2"), trainjob("2")])
    assert {o for o, _, _ in alone} == ours and any(check == "queue-fit" for _, check, _ in alone), alone
    overridden, notes = problems_of([batch_job("2"), trainjob("2"), *_job_file_overrides()[override]])
    assert overridden == alone
    if override != "kueue-configuration":
        assert any("a job file adds objects, it does not change the platform's" in n for n in notes), notes


def test_a_job_files_configmap_or_runtime_does_not_replace_the_platforms_training_runtime() -> None:
    """Only the Trainer chart's hook Job applies the runtimes in its installer ConfigMap: a job file's ConfigMap holding
    a ClusterTrainingRuntime `torch-distributed` replaced the platform's in fit (attacker review, 2026-11-30), and so
    would the file's own copy of it (the platform's is there already). The TrainJob's problems do not change."""
    import yaml

    from gpu_platform.preflight.fit.render import RenderedRelease
    from tests.fit_support import need_charts
    from tests.test_fit_stacks import _stack

    need_charts()
    model, releases = _stack("linode-dev")
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch-distributed"}, "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {
                   "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                       "nodeSelector": {"gpu-platform.io/pool": "nowhere"},  # a runtime no node could run
                       "containers": [{"name": "node", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}}]}}}}
    installer = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x-runtimes-installer",
                                                                        "namespace": TRAINING_NAMESPACE},
                 "data": {"torch.yaml": yaml.safe_dump(runtime)}}

    def problems_of(objects):
        job_file = RenderedRelease("job", "job", "file:job.yaml", "example", None, None, TRAINING_NAMESPACE, objects)
        return sorted((p.object, p.check, p.reason) for p in check_fit(model, [*releases, job_file]).problems
                      if p.object == f"TrainJob/{TRAINING_NAMESPACE}/t")

    alone = problems_of([trainjob("2")])
    assert problems_of([trainjob("2"), installer]) == alone
    assert problems_of([trainjob("2"), runtime]) == alone


def test_an_installer_configmap_that_does_not_parse_holds_no_runtime() -> None:
    """A runtimes-installer ConfigMap's text that does not parse, nests 50,000 levels deep or holds a date out of range
    holds no runtime: no traceback, and no crash (libyaml's parser, which this read before, segfaults on the deep one)."""
    import subprocess
    import sys

    script = """
from gpu_platform.preflight.fit.pods import _installer_payloads
texts = ["kind: TrainingRuntime\\nspec: [", "kind: TrainingRuntime\\nspec: " + "[" * 50_000 + "]" * 50_000,
         "kind: TrainingRuntime\\nwhen: 2026-13-45"]
print([_installer_payloads({"data": {"f.yaml": t}}) for t in texts])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "[[], [], []]", done.stdout


def test_text_under_kueues_configuration_key_that_does_not_parse_is_no_configuration() -> None:
    """Text that does not parse, nests 50,000 levels deep or holds a date out of range is no Kueue configuration: no
    traceback, and no crash (libyaml's parser, tried on 2026-11-30, segfaulted on the deep one)."""
    import subprocess
    import sys

    script = """
from gpu_platform.preflight.fit.checks import _kueue_configuration
texts = ["apiVersion: [", "[" * 50_000 + "]" * 50_000, "when: 2026-13-45", "\\ud800: x"]
print([_kueue_configuration(t) for t in texts])
print(_kueue_configuration("apiVersion: config.kueue.x-k8s.io/v1beta2\\nkind: Configuration\\n")["kind"])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["[None,", "None,", "None,", "None]", "Configuration"], done.stdout


def _zero_gpu(obj: dict, value) -> dict:
    """`obj` (a Job or a TrainJob asking for one GPU) with its GPU limit set to `value`."""
    obj = copy.deepcopy(obj)
    if obj["kind"] == "TrainJob":
        obj["spec"]["trainer"]["resourcesPerNode"]["requests"]["nvidia.com/gpu"] = value
    else:
        obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = value
    return obj


def test_a_zero_gpu_limit_is_cpu_work_not_a_way_onto_a_gpu_node() -> None:
    """Platform review (round 2) #2: `nvidia.com/gpu: "0"` counted as a GPU ask, so such a Job was queued on a
    GPU flavor with its toleration and, on Linode and EKS (the NVIDIA toolkit honours the image's
    NVIDIA_VISIBLE_DEVICES=all for unprivileged containers), saw every GPU of the node uncounted."""
    for value in ("0", 0, "0m"):
        for obj in (_zero_gpu(batch_job("2"), value), _zero_gpu(trainjob("2"), value)):
            for queue in (None, LOCAL_QUEUE, DEFAULT_LOCAL_QUEUE):
                said = refusal(labelled(obj, queue) if queue else obj)
                assert said and "asks for no GPU" in said, (obj["kind"], value, queue, said)
            assert refusal(labelled(obj, CPU_LOCAL_QUEUE)) is None, (obj["kind"], value)
    # one GPU, or a Katib placeholder the trial's Job fills in, is still GPU work
    for value in ("1", 1, "${trialParameters.gpus}"):
        assert refusal(_zero_gpu(batch_job("2"), value)) is None, value
        said = refusal(labelled(_zero_gpu(batch_job("2"), value), CPU_LOCAL_QUEUE))
        assert said and "asks for a GPU" in said, value


def _in(obj: dict, namespace: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = namespace
    return obj


def test_a_gpu_job_where_the_job_controllers_pods_are_refused_is_refused_at_submission() -> None:
    """Platform review: a GPU Job labelled gpu-queue in `kubeflow` (a pipeline step's `pipeline-runner` may
    create Jobs there) was admitted by Kueue while gpu-pods-through-the-queue refused every pod the job
    controller made for it (it trusts those only where every Job is queued): the Job held its GPU quota
    until waitForPodsReady evicted it, three times. Now refused when created, naming the namespace."""
    for namespace in (KUBEFLOW_NAMESPACE, JUPYTERHUB_NAMESPACE):
        for obj in (labelled(batch_job("2"), LOCAL_QUEUE), labelled(trainjob("2"), LOCAL_QUEUE)):
            said = refusal(_in(obj, namespace))
            assert said and said.startswith(f"a GPU {obj['kind']} in namespace {namespace} would never start"), said
            assert f"namespace {TRAINING_NAMESPACE}" in said and "waitForPodsReady" in said
        exp = _in(experiment(1, LOCAL_QUEUE), namespace)
        assert refusal(exp) and "would never start" in refusal(exp)
        # what does run there: a GPU pod the queue gates (a pipeline step, a notebook), CPU-only jobs
        assert refusal(labelled(pod(namespace), LOCAL_QUEUE)) is None
        assert refusal(_in(labelled(batch_job("2", gpus=0), CPU_LOCAL_QUEUE), namespace)) is None
    # in training the same jobs run (the job controller's pods are trusted there)
    assert refusal(labelled(batch_job("2"), LOCAL_QUEUE)) is None and refusal(labelled(trainjob("2"), LOCAL_QUEUE)) is None


def test_preflight_refuses_the_reviewers_kubeflow_gpu_job(tmp_path, capsys) -> None:
    """End to end (fit evaluates the rendered policies for --job): exit 3 naming the policy and the namespace."""
    import yaml

    from tests.fit_support import need_charts
    from tests.test_hostile_input import run_main

    need_charts()
    job = tmp_path / "kf-gpu-job.yaml"
    job.write_text(yaml.safe_dump(_in(labelled(batch_job("2"), LOCAL_QUEUE), KUBEFLOW_NAMESPACE)))
    code, text, _ = run_main(["gcp-prod", "--no-policies", "--out", str(tmp_path / "out"), "--job", str(job)], capsys)
    assert code == 3, text
    assert QUEUE_ROUTING_POLICY in text and f"in namespace {KUBEFLOW_NAMESPACE} would never start" in text, text
