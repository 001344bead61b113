"""Every GPU pod goes through the queue or is refused (issue 22 items 1 and 3), continued: the gaps a
review of the first round found, each checked with the real ValidatingAdmissionPolicy evaluated by a
real CEL implementation (cel-python; tests/test_queue_admission.py's evaluators) and against the
rendered Kueue chart.

- Pipelines' run pods execute in `kubeflow`: GPU steps are queued there (pod integration), Pipelines'
  own pods are not held by Kueue.
- A bare GPU pod naming a Job it does not belong to (a forged ownerReference) is refused.
- The fit policy counts limits-only CPU/memory, init containers, JobSets, queued plain pods and Katib
  Experiments.
- A TrainJob whose runtimePatches Kueue v0.19.2 would break is refused with the runtime to use.
"""

from __future__ import annotations

from typing import Any, Optional

import celpy
import pytest
import yaml

from gpu_platform.components.cluster import POOL_LABEL
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE, KUEUE_NAMESPACE
from gpu_platform.components.platform.kubeflow import (
    CHECKPOINTED_RUNTIME, KUEUE_DROPPED_POD_PATCH_FIELDS, KUEUE_PATCH_POLICY, render_kubeflow_namespace,
    render_kueue_patch_policy,
)
from gpu_platform.components.platform.queue import (
    INTEGRATIONS, LOCAL_QUEUE, QUEUE_NAME_LABEL, kueue_manager_config, kueue_values, render_fit_policy,
    render_local_queue,
)
from tests.test_platform_charts import render
from tests.test_rehearsal import needs_components
from tests.test_queue_admission import (
    CEL_FUNCTIONS, JOB_CONTROLLER, JOB_OWNER, NAMESPACES, USER, WORKFLOW_OWNER, admit, batch_job, fit_refusal, pod,
    trainjob,
)


def _selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels, as the API server matches."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values or op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels or op == "DoesNotExist" and key in labels:
            return False
    return True


def _kueue_pod_webhooks() -> list[dict]:
    objs = render("kueue", versions.KUEUE.version, kueue_values(10, 3), "kueue", KUEUE_NAMESPACE)
    return [h for o in objs if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
            for h in o["webhooks"] if h["name"] in ("mpod.kb.io", "vpod.kb.io")]


# --- item 1: Pipelines' GPU steps are queued -----------------------------------------------------------------


def test_pipelines_namespace_is_managed_by_kueue_and_a_labelled_gpu_step_is_admitted() -> None:
    """Before: `kubeflow` had no queue label: Kueue's webhooks and the ClusterQueue ignored it, so every
    GPU pipeline step was refused by the queue policy (no way to run one)."""
    ns_labels = render_kubeflow_namespace()["metadata"]["labels"]
    assert _selects(kueue_manager_config()["managedJobsNamespaceSelector"], ns_labels)
    hooks = _kueue_pod_webhooks()
    assert {h["name"] for h in hooks} == {"mpod.kb.io", "vpod.kb.io"}
    assert all(h["failurePolicy"] == "Fail" and _selects(h["namespaceSelector"], ns_labels) for h in hooks)
    step = pod(KUBEFLOW_NAMESPACE, labels={QUEUE_NAME_LABEL: LOCAL_QUEUE}, owner=WORKFLOW_OWNER)
    assert admit(step, user="system:serviceaccount:kubeflow:argo") is None
    unlabelled = admit(pod(KUBEFLOW_NAMESPACE, owner=WORKFLOW_OWNER), user="system:serviceaccount:kubeflow:argo")
    assert unlabelled and "kfp.kubernetes.add_pod_label" in unlabelled and LOCAL_QUEUE in unlabelled


def test_pipelines_gets_the_labelled_queue_but_no_default_queue() -> None:
    """A `default` LocalQueue in `kubeflow` would make Kueue's pod webhook label every pod there, the
    Pipelines API server and MySQL included, and hold them gated for GPU-pool quota."""
    lq = render_local_queue(KUBEFLOW_NAMESPACE)
    assert (lq["metadata"]["name"], lq["metadata"]["namespace"]) == (LOCAL_QUEUE, KUBEFLOW_NAMESPACE)
    from gpu_platform.components.platform.queue import DEFAULT_QUEUE_NAMESPACE_LABEL
    for ns in (KUBEFLOW_NAMESPACE, JUPYTERHUB_NAMESPACE):
        assert DEFAULT_QUEUE_NAMESPACE_LABEL not in NAMESPACES[ns]["metadata"]["labels"], ns
    assert kueue_manager_config()["manageJobsWithoutQueueName"] is False


def test_the_shipped_stack_creates_the_pipelines_local_queue() -> None:
    from tests.conftest import plan_stack

    plan = plan_stack("aws-prod")
    queues = [r.inputs for r in plan.resources if r.type == "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"]
    where = {(q["metadata"]["namespace"], q["metadata"]["name"]) for q in queues}
    assert (KUBEFLOW_NAMESPACE, LOCAL_QUEUE) in where, where
    assert (KUBEFLOW_NAMESPACE, "default") not in where and (JUPYTERHUB_NAMESPACE, "default") not in where


# --- item 2: Kueue's pod webhook in the hub namespace -----------------------------------------------------------


def test_kueue_pod_webhooks_cover_only_the_queue_namespaces() -> None:
    """Kueue v0.19.2 has no pod selector (v1beta2 Configuration dropped podOptions; the chart renders no
    objectSelector): its fail-closed pod webhooks cover whole namespaces. Only the three the queue needs;
    never Kueue's own, kube-system, the Trainer's or monitoring."""
    hooks = _kueue_pod_webhooks()
    covered = {ns for ns, o in NAMESPACES.items() if all(_selects(h["namespaceSelector"], o["metadata"]["labels"]) for h in hooks)}
    assert covered == {"training", JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE}
    for other in (KUEUE_NAMESPACE, "kube-system", "kubeflow-system", "monitoring"):
        assert not any(_selects(h["namespaceSelector"], {"kubernetes.io/metadata.name": other}) for h in hooks), other


# --- item 3: Katib trials are queued ----------------------------------------------------------------------------


def test_every_katib_trial_kind_the_platform_installs_is_one_kueue_queues() -> None:
    """Katib creates a trial as the kind its trial template names (katib-config trialResources). Each
    kind whose CRD the platform installs must be a Kueue integration (defaulted to the `default`
    LocalQueue of `training`); the others (training-operator v1 kinds) cannot be created at all."""
    from tests.fit_support import CHART_DIRS, need_charts

    need_charts()
    path = next(d / "kustomize" / "katib-v0.19.0-katib-standalone.yaml" for d in CHART_DIRS
                if (d / "kustomize" / "katib-v0.19.0-katib-standalone.yaml").exists())
    docs = list(yaml.safe_load_all(path.read_text()))
    config = next(d for d in docs if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == "katib-config")
    kinds = yaml.safe_load(config["data"]["katib-config.yaml"])["init"]["controller"]["trialResources"]
    trainer = render("kubeflow-trainer", versions.KUBEFLOW_TRAINER.version, {"crds": {"enabled": True}, "jobset": {"install": True}},
                     "kubeflow-trainer", "kubeflow-system")
    installed = {(o["spec"]["group"], o["spec"]["names"]["kind"]) for o in trainer if o["kind"] == "CustomResourceDefinition"}
    installed.add(("batch", "Job"))
    integration_kinds = {"batch/job": ("batch", "Job"), "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "TrainJob"),
                         "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "JobSet")}
    queued = {integration_kinds[i] for i in INTEGRATIONS if i in integration_kinds}
    for k in kinds:
        kind, _version, group = k.split(".", 2)
        if (group, kind) in installed:
            assert (group, kind) in queued, f"Katib trials of {k} would not be queued"
    assert {("batch", "Job"), ("trainer.kubeflow.org", "TrainJob")} <= {tuple(k.split(".", 2)[i] for i in (2, 0)) for k in kinds}
    # and the trial Job's pods, made by the job controller in `training`, pass the queue policy
    assert admit(pod("training", owner=JOB_OWNER), user=JOB_CONTROLLER) is None


# --- item 5: forged ownerReferences -------------------------------------------------------------------------------


def test_a_bare_gpu_pod_with_a_forged_job_owner_is_refused() -> None:
    """Before: a pod naming any (even nonexistent) batch Job as controller was admitted in `training`,
    while Kueue's pod webhook skips pods whose owner is a kind Kueue manages: it ran unqueued."""
    for owner in (JOB_OWNER, {**JOB_OWNER, "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"},
                  {**JOB_OWNER, "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}):
        message = admit(pod("training", owner=owner), user=USER)
        assert message and "job controller" in message, owner
        # the queue-name label does not help: Kueue's pod webhook skips a pod with such an owner
        assert admit(pod("training", owner=owner, labels={QUEUE_NAME_LABEL: "default"}), user=USER), owner
        assert admit(pod(JUPYTERHUB_NAMESPACE, owner=owner, labels={QUEUE_NAME_LABEL: LOCAL_QUEUE}), user=USER), owner
    # the job controller's pods are admitted only where every Job is queued
    assert admit(pod("training", owner=JOB_OWNER), user="system:kube-controller-manager") is None
    assert admit(pod(JUPYTERHUB_NAMESPACE, owner=JOB_OWNER), user=JOB_CONTROLLER)


# --- item 4: the fit policy covers every kind and how a GPU or CPU may be asked for ----------------------------


def _pod_spec(cpu_requests=None, cpu_limits=None, gpus=1, init=False, pool=None) -> dict[str, Any]:
    res: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if cpu_requests:
        res["requests"] = {"cpu": cpu_requests}
    if cpu_limits:
        res["limits"]["cpu"] = cpu_limits
    c = {"name": "t", "image": "x", "resources": res}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}], "initContainers": [c]} if init else {"containers": [c]}
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    return spec


def _job(spec: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "training"},
            "spec": {"template": {"spec": spec}}}


def test_limits_only_cpu_and_init_containers_count_for_fit() -> None:
    """Before: only containers' requests were read: 8 CPU as a limit only (Kubernetes makes it the
    request) or a GPU init container passed, and Kueue admitted the job to a pool it never fits."""
    assert fit_refusal(_job(_pod_spec(cpu_limits="8")))
    assert fit_refusal(_job(_pod_spec(cpu_limits="8", pool="l4x4"))) is None
    assert fit_refusal(_job(_pod_spec(cpu_requests="2", cpu_limits="8"))) is None  # the request decides
    assert fit_refusal(_job(_pod_spec(cpu_limits="8", init=True)))
    assert fit_refusal(_job(_pod_spec(cpu_limits="2", gpus=2, init=True)))  # 2 GPUs: more than an a10g node
    assert fit_refusal(_job(_pod_spec(cpu_limits="2", init=True))) is None


def test_jobsets_queued_pods_and_katib_experiments_are_checked() -> None:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "s", "namespace": "training"},
              "spec": {"replicatedJobs": [{"name": "a", "template": {"spec": {"template": {"spec": _pod_spec("1")}}}},
                                          {"name": "b", "template": {"spec": {"template": {"spec": _pod_spec("8")}}}}]}}
    assert fit_refusal(jobset)
    jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {POOL_LABEL: "l4x4"}
    assert fit_refusal(jobset) is None
    step = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": KUBEFLOW_NAMESPACE,
                                                           "labels": {QUEUE_NAME_LABEL: LOCAL_QUEUE}},
            "spec": _pod_spec("8")}
    assert fit_refusal(step, user="system:serviceaccount:kubeflow:argo")
    step["spec"]["nodeSelector"] = {POOL_LABEL: "l4x4"}
    assert fit_refusal(step, user="system:serviceaccount:kubeflow:argo") is None
    # a Job's pods are judged with their Job, not again (they carry the admitted flavor's selector)
    assert fit_refusal({**step, "spec": _pod_spec("8")}, user=JOB_CONTROLLER) is None

    def experiment(trial: dict) -> dict:
        return {"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": "e", "namespace": "training"},
                "spec": {"trialTemplate": {"primaryContainerName": "t", "trialSpec": trial}}}

    assert fit_refusal(experiment(batch_job("8")))
    assert fit_refusal(experiment(batch_job("8", pool="l4x4"))) is None
    assert fit_refusal(experiment(trainjob("8")))
    assert fit_refusal(experiment(trainjob("8", pool="l4x4"))) is None
    # a Katib placeholder is no quantity: not judged at submission (the trial's own Job is)
    assert fit_refusal(experiment(batch_job("${trialParameters.cpu}"))) is None
    # a trial template held in a ConfigMap: nothing to check here
    assert fit_refusal({**experiment({}), "spec": {"trialTemplate": {"configMap": {"configMapName": "t"}}}}) is None


def test_the_fit_policy_matches_every_kind_kueue_queues_here() -> None:
    rules = render_fit_policy({"a": __import__("gpu_platform.components.platform.queue", fromlist=["x"]).PoolCapacity(1000, 2**30, 1)})
    matched = {(r["apiGroups"][0], r["resources"][0]) for r in rules["spec"]["matchConstraints"]["resourceRules"]}
    assert {("batch", "jobs"), ("jobset.x-k8s.io", "jobsets"), ("trainer.kubeflow.org", "trainjobs"), ("", "pods"),
            ("kubeflow.org", "experiments")} <= matched
    assert len(INTEGRATIONS) == 4  # a new integration needs its kind here


# --- item 6: TrainJobs that Kueue would break are refused -----------------------------------------------------


def _patch_refusal(obj: dict) -> Optional[str]:
    policy = render_kueue_patch_policy()["spec"]
    env = celpy.Environment()
    act = {"object": celpy.json_to_cel(obj)}
    for v in policy["validations"]:
        if not env.program(env.compile(v["expression"]), functions=CEL_FUNCTIONS).evaluate(act):
            return v["message"]
    return None


def test_a_trainjob_patching_the_grace_period_is_refused_with_the_runtime_to_use() -> None:
    """Before: only shipped jobs were flagged (preflight); a user's TrainJob with this patch was queued,
    admitted, rewritten by Kueue without the field, and never got a pod."""
    tj = trainjob("2")
    tj["spec"]["runtimePatches"] = [{"manager": "user", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 60}}}}}]}}}}]
    message = _patch_refusal(tj)
    assert message and CHECKPOINTED_RUNTIME in message and "60 s" in message and "terminationGracePeriodSeconds" in message
    assert _patch_refusal(trainjob("2", pool="a10g")) is None  # a nodeSelector patch is kept by Kueue
    assert _patch_refusal(trainjob("2")) is None
    policy = render_kueue_patch_policy()
    assert policy["metadata"]["name"] == KUEUE_PATCH_POLICY
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == kueue_manager_config()["managedJobsNamespaceSelector"]


def test_the_policy_and_preflight_name_the_same_dropped_fields() -> None:
    from gpu_platform.preflight.fit.pods import KUEUE_DROPPED_POD_PATCH_FIELDS as PREFLIGHT_FIELDS

    assert KUEUE_DROPPED_POD_PATCH_FIELDS == PREFLIGHT_FIELDS


def test_the_patch_policy_is_created_only_with_the_queue() -> None:
    from tests.conftest import plan_stack

    vap = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
    names = {r.inputs["metadata"]["name"] for r in plan_stack("aws-prod").resources if r.type == vap}
    assert KUEUE_PATCH_POLICY in names, names


# --- on the rehearsal's real API server and Kueue (docs/rehearsal.md) ------------------------------------------


@needs_components
@pytest.mark.rehearsal(stack="linode-dev")
def test_rehearsal_refuses_bypasses_queues_pipeline_steps_and_exercises_kueues_inadmissibility(tmp_path) -> None:
    """The policies as the real kube-apiserver evaluates them, with Kueue's webhooks and controller:
    forged owner, unlabelled pipeline step and the grace-period patch refused; a labelled pipeline step
    queued as a Workload; a job within every node but beyond the quota left inadmissible by Kueue,
    with Kueue's reason (before: the only over-large probe was refused by the fit policy, so Kueue's
    inadmissibility was no longer exercised)."""
    from gpu_platform.rehearsal.scenarios import inadmissible, queue_bypass
    from tests.test_rehearsal import _failures, _rehearse

    result = _rehearse("linode-dev", tmp_path, scenarios=(inadmissible, queue_bypass))
    by_name = {s.name: s for s in result.scenarios}
    assert by_name["inadmissible"].status == "PASS", _failures(result)
    assert by_name["queue-bypass"].status == "PASS", _failures(result)
    details = " ".join(by_name["inadmissible"].details)
    assert "rehearsal-too-big" in details and "refused at admission" in details
    assert "rehearsal-over-quota" in details and "insufficient quota" in details and "maximum capacity" in details
    bypass = " ".join(by_name["queue-bypass"].details)
    assert "forged Job owner: refused" in bypass and "gpu-pods-through-the-queue" in bypass
    assert "GPU Job owned by a queued Job: refused" in bypass and "jobs-owned-only-by-their-controllers" in bypass
    assert "admission gate removed by hand: refused" in bypass
    assert "Job with a zero GPU limit in the GPU queue: refused" in bypass and "work-in-its-queue" in bypass
    assert "unlabelled GPU step in kubeflow: refused" in bypass
    assert "CPU step tolerating the GPU taint in kubeflow: refused" in bypass and "gpu-nodes-only-for-gpu-pods" in bypass
    assert "labelled GPU step in kubeflow: queued as Workload" in bypass
    assert "grace-period runtime patch: refused" in bypass and "torch-checkpointed" in bypass
