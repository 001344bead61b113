"""Every GPU pod goes through the Kueue queue or is refused (issue 22 item 1), jobs that can never
become Ready stop after `platform.maxRequeues` re-admissions, Kueue survives a node drain.

The admission policy's CEL is evaluated by a real CEL implementation (cel-python), the way the API
server evaluates a ValidatingAdmissionPolicy: every matchCondition true -> every validation must hold,
else the request is refused with that validation's message."""

from __future__ import annotations

import functools
from typing import Any, Optional

import celpy
import pytest
import yaml

from gpu_platform.components.cluster import POOL_LABEL
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE, KUEUE_NAMESPACE
from gpu_platform.components.platform.kubeflow import render_kubeflow_namespace
from gpu_platform.components.platform.notebooks import render_notebooks_namespace
from gpu_platform.components.platform.queue import (
    DEFAULT_LOCAL_QUEUE, FIT_POLICY, QUEUE_NAME_LABEL, PoolCapacity, kueue_manager_config, kueue_values,
    render_fit_policy, render_gpu_admission_binding, render_gpu_admission_policy, render_local_queue,
    render_policy_binding,
)
from gpu_platform.components.platform.training import render_training_namespace
from gpu_platform.preflight.fit.admission_policy import cel_functions
from tests.test_platform_charts import render

NAMESPACES = {
    "training": render_training_namespace(),
    JUPYTERHUB_NAMESPACE: render_notebooks_namespace(),
    KUBEFLOW_NAMESPACE: render_kubeflow_namespace(),
    "default": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {}}},
}


def pod(namespace: str, gpus: Optional[int] = 1, labels: Optional[dict[str, str]] = None,
        owner: Optional[dict[str, Any]] = None, init: bool = False) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "1"}}
    container = {"name": "c", "image": "busybox", "resources": resources}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    spec["initContainers" if init else "containers"] = ([container] if not init else [container])
    meta: dict[str, Any] = {"name": "p", "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


JOB_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "trial-1", "uid": "u", "controller": True}
WORKFLOW_OWNER = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "name": "run", "uid": "u",
                  "controller": True}


USER = "alice"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def admit(obj: dict[str, Any], user: str = USER) -> Optional[str]:
    """None when admitted, else the refusal message (as the API server evaluates the policy), for a
    request by `user`."""
    policy = render_gpu_admission_policy("cluster")["spec"]
    env = celpy.Environment()
    activation = {"object": celpy.json_to_cel(obj),
                  "namespaceObject": celpy.json_to_cel(NAMESPACES[obj["metadata"]["namespace"]]),
                  "request": celpy.json_to_cel({"kind": {"kind": "Pod"}, "userInfo": {"username": user}})}

    def ev(expr: str) -> Any:
        return env.program(compiled(expr)).evaluate(activation)

    if not all(ev(c["expression"]) for c in policy["matchConditions"]):
        return None
    for v in policy["validations"]:
        if not ev(v["expression"]):
            return str(ev(v["messageExpression"])) if "messageExpression" in v else v["message"]
    return None


def test_a_gpu_pod_outside_the_queue_namespaces_is_refused_with_how_to_submit() -> None:
    """Before: a pipeline step asking for a GPU in `kubeflow` (or any pod in `default`) took a GPU
    that Kueue counted as free."""
    for ns in ("default",):
        message = admit(pod(ns, owner=WORKFLOW_OWNER))
        assert message and "not queued" in message and "TrainJob" in message and "training" in message, message
        assert ns in message


def test_a_gpu_pod_in_a_queue_namespace_without_a_queue_is_refused() -> None:
    message = admit(pod(JUPYTERHUB_NAMESPACE))
    assert message and QUEUE_NAME_LABEL in message
    # a Job's pod in jupyterhub: no `default` LocalQueue there, so its Job may be unqueued
    assert admit(pod(JUPYTERHUB_NAMESPACE, owner=JOB_OWNER))
    # a GPU init container counts too
    assert admit(pod("default", init=True))


def test_queued_gpu_pods_and_cpu_pods_are_admitted() -> None:
    assert admit(pod(JUPYTERHUB_NAMESPACE, labels={QUEUE_NAME_LABEL: "gpu-queue"})) is None  # GPU notebook
    assert admit(pod("training", labels={QUEUE_NAME_LABEL: DEFAULT_LOCAL_QUEUE})) is None  # defaulted by Kueue
    # a TrainJob's / Katib trial's / Job's pod, made by the job controller
    assert admit(pod("training", owner=JOB_OWNER), user=JOB_CONTROLLER) is None
    assert admit(pod(KUBEFLOW_NAMESPACE, gpus=None)) is None  # no GPU: not this policy's business
    assert admit(pod("default", gpus=None)) is None


def test_on_a_shared_cluster_the_policy_judges_only_the_queue_namespaces() -> None:
    """cloud kubernetes (scope queue-namespaces): the API server matches the policy only in namespaces with the
    queue label, so another team's GPU pod in `default` is not judged; inside them the validations are the same."""
    from gpu_platform.components.platform.queue import QUEUE_NAMESPACE_SELECTOR

    shared = render_gpu_admission_policy("queue-namespaces")["spec"]
    assert shared["matchConstraints"]["namespaceSelector"] == QUEUE_NAMESPACE_SELECTOR
    own = render_gpu_admission_policy("cluster")["spec"]
    assert "namespaceSelector" not in own["matchConstraints"]
    assert shared["validations"] == own["validations"] and shared["matchConditions"] == own["matchConditions"]
    with pytest.raises(ValueError, match="cluster, queue-namespaces"):
        render_gpu_admission_policy("everywhere")  # type: ignore[arg-type]


def test_the_binding_denies_and_the_policy_fails_closed() -> None:
    binding = render_gpu_admission_binding()
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["policyName"] == render_gpu_admission_policy("cluster")["metadata"]["name"]
    assert render_gpu_admission_policy("cluster")["spec"]["failurePolicy"] == "Fail"


def test_training_has_a_default_local_queue_and_kueue_manages_it() -> None:
    """Before: the only LocalQueue was `gpu-queue`, so an unlabelled TrainJob or Katib trial in
    `training` was ignored by Kueue (manageJobsWithoutQueueName false) and ran unqueued."""
    lq = render_local_queue(name=DEFAULT_LOCAL_QUEUE)
    assert lq["metadata"] == {**lq["metadata"], "name": "default", "namespace": "training"}
    selector = kueue_manager_config()["managedJobsNamespaceSelector"]["matchLabels"]
    for ns in ("training", JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE):
        labels = NAMESPACES[ns]["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in selector.items()), ns


def test_a_job_that_never_becomes_ready_stops_after_max_requeues() -> None:
    """Before: requeuingStrategy had no backoffLimitCount: re-admitted (and a GPU node scaled up) forever."""
    conf = kueue_manager_config(3, max_requeues=2, boot_minutes=8.0)
    assert conf["waitForPodsReady"]["requeuingStrategy"]["backoffLimitCount"] == 2
    assert conf["waitForPodsReady"]["timeout"] == "11m"  # the node's boot, then 3 (tests/test_retries.py)
    with pytest.raises(ValueError):
        kueue_manager_config(3, max_requeues=-1)


def test_max_requeues_is_a_platform_key_with_a_small_default(tmp_path) -> None:
    from gpu_platform.config.platform import PlatformSection

    assert PlatformSection().max_requeues == 3
    assert PlatformSection.model_validate({"maxRequeues": 5}).max_requeues == 5
    with pytest.raises(ValueError, match="max_requeues|maxRequeues"):
        PlatformSection.model_validate({"maxRequeues": -1})


def test_kueue_runs_two_replicas_with_a_disruption_budget() -> None:
    """Before: one replica, PDB off: a drain of its node stopped every submission (webhooks fail closed)."""
    objs = render("kueue", versions.KUEUE.version, kueue_values(10, 3), "kueue", KUEUE_NAMESPACE)
    deploy = next(o for o in objs if o["kind"] == "Deployment" and "controller-manager" in o["metadata"]["name"])
    assert deploy["spec"]["replicas"] == 2
    pdb = next(o for o in objs if o["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert all(pdb["spec"]["selector"]["matchLabels"].get(k) == v
               for k, v in deploy["spec"]["template"]["metadata"]["labels"].items()
               if k in pdb["spec"]["selector"]["matchLabels"])
    config = next(o for o in objs if o["kind"] == "ConfigMap" and "manager-config" in o["metadata"]["name"])
    conf = yaml.safe_load(next(iter(config["data"].values())))
    assert conf["waitForPodsReady"]["requeuingStrategy"]["backoffLimitCount"] == 3
    assert conf["leaderElection"]["leaderElect"] is True


def test_no_gpu_notebook_profile_for_a_pool_without_quota() -> None:
    """Before: a pool with platform.gpuQuota 0 still got a GPU profile whose notebook waited forever."""
    from gpu_platform.components.cluster import POOL_LABEL, GpuPoolSpec
    from gpu_platform.components.platform.notebooks import jupyterhub_values

    pools = [GpuPoolSpec("a10g", "g5.xlarge", "A10G", 1, 0, 2, "spot", {POOL_LABEL: "a10g"}),
             GpuPoolSpec("l4x4", "g6.12xlarge", "L4", 4, 0, 1, "spot", {POOL_LABEL: "l4x4"})]
    slugs = [p["slug"] for p in jupyterhub_values(pools, "gp3", queue_name="gpu-queue",
                                                  gpu_quota={"a10g": 0, "l4x4": 4})["singleuser"]["profileList"]]
    assert slugs == ["cpu", "gpu-l4x4"]
    # without a queue nothing limits the pools: every pool is offered
    assert len(jupyterhub_values(pools, "gp3")["singleuser"]["profileList"]) == 3


# --- per-flavor fit: a GPU job is only admitted where it fits --------------------------------------

# aws-prod's pools after kubelet reservations, daemons and headroom (queue.pool_capacities)
CAPS = {"a10g": PoolCapacity(3_320, 12 * 1024**3, 1), "l4x4": PoolCapacity(44_000, 170 * 1024**3, 4)}


@functools.lru_cache(maxsize=None)
def compiled(expr: str) -> Any:
    """An expression's parse tree once per session: parsing is most of an evaluation, and these tests
    evaluate the same few expressions a thousand times."""
    return celpy.Environment().compile(expr)


CEL_FUNCTIONS = cel_functions()  # the evaluator preflight's fit uses (gpu_platform/preflight/fit/admission_policy.py)


def policy_refusal(policy: dict, obj: dict, user: str = USER) -> Optional[str]:
    """None when the ValidatingAdmissionPolicy spec `policy` admits `obj`, else its message (matchConditions,
    variables in order, then validations, as the API server evaluates one)."""
    env = celpy.Environment()
    act = {"object": celpy.json_to_cel(obj),
           "namespaceObject": celpy.json_to_cel(NAMESPACES[obj["metadata"]["namespace"]]),
           "request": celpy.json_to_cel({"kind": {"kind": obj["kind"]}, "userInfo": {"username": user}})}

    def ev(expr: str):
        return env.program(compiled(expr), functions=CEL_FUNCTIONS).evaluate(act)

    # matchConditions first, without `variables` (the API server declares none there)
    if not all(ev(c["expression"]) for c in policy.get("matchConditions") or []):
        return None
    variables: dict = {}
    for v in policy.get("variables") or []:
        act["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(v["name"])] = ev(v["expression"])
    act["variables"] = celpy.celtypes.MapType(variables)
    for v in policy["validations"]:
        if not ev(v["expression"]):
            # the API server prefers messageExpression, and falls back to message
            return str(ev(v["messageExpression"])) if "messageExpression" in v else v["message"]
    return None


def fit_refusal(obj: dict, user: str = USER, caps=None, system=None) -> Optional[str]:
    """None when the fit policy admits `obj`, else its message."""
    return policy_refusal(render_fit_policy(caps or CAPS, system)["spec"], obj, user)


def batch_job(cpu, gpus=1, pool=None):
    spec = {"containers": [{"name": "t", "image": "x", "resources": {
        "requests": {"cpu": cpu, "memory": "8Gi"}, "limits": {"nvidia.com/gpu": gpus} if gpus else {}}}]}
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "training"},
            "spec": {"template": {"spec": spec}}}


def trainjob(cpu, pool=None):
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
          "metadata": {"name": "t", "namespace": "training"},
          "spec": {"runtimeRef": {"name": "torch-distributed"},
                   "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": cpu, "nvidia.com/gpu": "1"}}}}}
    if pool:
        tj["spec"]["runtimePatches"] = [{"manager": "user", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {POOL_LABEL: pool}}}}}}]}}}}]
    return tj


def test_a_gpu_job_larger_than_a_pool_is_refused_unless_it_names_a_pool_it_fits() -> None:
    """Before: the LimitRange max was the largest pool's node share, so on aws-prod a job asking 8 CPU
    and 1 GPU was admitted to a10g (about 3.3 CPU for jobs a node) and never scheduled (issue 22)."""
    message = fit_refusal(batch_job("8"))
    assert message and "a10g" in message and POOL_LABEL in message and "l4x4: 44 CPU" in message
    assert fit_refusal(batch_job("8", pool="l4x4")) is None  # pinned where it fits: admitted only there
    assert fit_refusal(batch_job("8", pool="a10g"))  # pinned where it never fits
    assert fit_refusal(batch_job("3")) is None  # fits every pool
    assert fit_refusal(batch_job("3200m")) is None and fit_refusal(batch_job(8)) is not None  # quantities, numbers
    assert fit_refusal(batch_job("8", gpus=0)) is None  # not GPU work: not this policy's business


def test_the_same_holds_for_trainjobs() -> None:
    assert fit_refusal(trainjob("8"))
    assert fit_refusal(trainjob("8", pool="l4x4")) is None
    assert fit_refusal(trainjob("2")) is None


def test_the_fit_policy_is_bound_and_scoped_to_the_queue_namespaces() -> None:
    policy = render_fit_policy(CAPS)
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == kueue_manager_config()["managedJobsNamespaceSelector"]
    assert render_policy_binding(FIT_POLICY)["spec"] == {"policyName": FIT_POLICY, "validationActions": ["Deny"]}


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha", "gcp-prod", "aws-prod"])
def test_the_example_trainjob_passes_both_policies_of_every_shipped_stack(stack: str) -> None:
    """The documented example is neither refused for bypassing the queue nor for its size."""
    import yaml as _yaml

    from gpu_platform.components.platform.training import render_training_namespace
    from tests.conftest import ROOT, plan_stack

    plan = plan_stack(stack)
    vap = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
    fit_spec = plan.one(vap, "fit-policy").inputs["spec"]
    example = _yaml.safe_load((ROOT / "examples" / "training" / "trainjob-checkpointed.yaml").read_text())
    env = celpy.Environment()
    act = {"object": celpy.json_to_cel(example),
           "request": celpy.json_to_cel({"kind": {"kind": "TrainJob"}, "userInfo": {"username": USER}}),
           "namespaceObject": celpy.json_to_cel(render_training_namespace())}
    fns = CEL_FUNCTIONS
    assert all(env.program(compiled(c["expression"]), functions=fns).evaluate(act) for c in fit_spec["matchConditions"])
    variables: dict = {}
    for v in fit_spec["variables"]:
        act["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(v["name"])] = env.program(compiled(v["expression"]), functions=fns).evaluate(act)
    act["variables"] = celpy.celtypes.MapType(variables)
    assert variables["asksForGpu"]
    failed = [v["message"] for v in fit_spec["validations"]
              if not env.program(compiled(v["expression"]), functions=fns).evaluate(act)]
    assert not failed, failed


def test_a_job_asking_more_gpus_than_a_pools_node_is_refused_unless_pinned_where_they_fit() -> None:
    """The rehearsal found Kueue admitting a TrainJob one GPU larger than any node (the flavor's quota is the
    pool's total): its pod never schedules and holds the quota. GPUs count like CPU and memory."""
    assert fit_refusal(batch_job("2", gpus=2))  # fits l4x4's nodes only, names no pool
    assert fit_refusal(batch_job("2", gpus=2, pool="l4x4")) is None
    message = fit_refusal(batch_job("2", gpus=5, pool="l4x4"))  # no node anywhere has 5
    assert message and "l4x4: 44 CPU, 170 GiB, 4 GPU" in message
    big = trainjob("2")
    big["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "5"}}
    assert fit_refusal(big)


def _pod_job(containers: list[dict], init: Optional[list[dict]] = None, pool=None) -> dict:
    spec: dict = {"containers": containers}
    if init:
        spec["initContainers"] = init
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "training"},
            "spec": {"template": {"spec": spec}}}


def _c(name: str, cpu: str, gpus: int = 0, memory: str = "1Gi", **extra) -> dict:
    res = {"requests": {"cpu": cpu, "memory": memory}}
    if gpus:
        res["limits"] = {"nvidia.com/gpu": gpus}
    return {"name": name, "image": "x", "resources": res, **extra}


def test_a_pod_of_several_containers_is_judged_whole() -> None:
    """Issue 34 item 5. Before: each container was checked alone, so a GPU pod of two 3-CPU containers
    (6 CPU) passed for aws-prod's a10g, whose nodes hand about 3.3 CPU to jobs: Kueue admitted it there
    and it never scheduled. The scheduler and Kueue count the pod: containers summed."""
    two = _pod_job([_c("train", "3", gpus=1), _c("loader", "3")])
    message = fit_refusal(two)
    assert message and "a10g" in message and "containers summed" in message
    assert fit_refusal(_pod_job([_c("train", "3", gpus=1), _c("loader", "3")], pool="l4x4")) is None
    assert fit_refusal(_pod_job([_c("train", "1600m", gpus=1), _c("loader", "1600m")])) is None  # 3.2 CPU fits
    # Memory and GPUs add up the same way: two 1-GPU containers are a 2-GPU pod.
    assert fit_refusal(_pod_job([_c("a", "1", gpus=1, memory="7Gi"), _c("b", "1", memory="7Gi")]))
    assert fit_refusal(_pod_job([_c("a", "1", gpus=1), _c("b", "1", gpus=1)]))


def test_init_containers_count_by_the_largest_and_sidecars_add_up() -> None:
    """Init containers run one after the other before the app containers: the pod needs the largest
    of them or the containers' sum, whichever is more (not their sum); a sidecar (an init container
    with restartPolicy Always) runs beside the app containers and adds to them."""
    inits = [_c("fetch", "3"), _c("unpack", "3")]  # 3 at a time, not 6
    assert fit_refusal(_pod_job([_c("train", "1", gpus=1)], init=inits)) is None
    assert fit_refusal(_pod_job([_c("train", "1", gpus=1)], init=[_c("fetch", "4")]))  # 4 > 3.3
    sidecar = _c("proxy", "2", restartPolicy="Always")
    assert fit_refusal(_pod_job([_c("train", "2", gpus=1)], init=[sidecar]))  # 2 + 2 > 3.3
    assert fit_refusal(_pod_job([_c("train", "1", gpus=1)], init=[_c("side", "1", restartPolicy="Always")])) is None


def test_cpu_only_pods_are_judged_whole_against_the_system_nodes() -> None:
    system = (PoolCapacity(3_000, 10 * 1024**3, 0), PoolCapacity(6_000, 20 * 1024**3, 0))
    job = _pod_job([_c("a", "2"), _c("b", "2")])
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "cpu-queue"}
    message = fit_refusal(job, system=system)
    assert message and "CPU-only pod" in message
    job["spec"]["template"]["spec"]["containers"] = [_c("a", "1"), _c("b", "1500m")]
    assert fit_refusal(job, system=system) is None
