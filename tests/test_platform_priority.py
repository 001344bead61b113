"""The platform's controllers outrank user pods on the system nodes (platform review #4).

Before: no pod of the platform named a PriorityClass, so every pod ran at priority 0. The system
nodes also run what Kueue does not count (CPU notebooks, unqueued pipeline steps): once users filled
them, a Kueue replica or the Prometheus operator rescheduled after a drain waited as Pending next to
user pods, with Kueue's fail-closed webhooks (no submission in the queue's namespaces) or the alerts
down. Now a PriorityClass `gpu-platform-controllers` is set through each pinned chart's documented value
(Kueue controllerManager.manager.priorityClassName; kube-prometheus-stack prometheusOperator,
prometheus.prometheusSpec, alertmanager.alertmanagerSpec, grafana, kube-state-metrics), so the scheduler
preempts user pods to place them. Checked on the REAL pinned charts' rendered objects."""

from __future__ import annotations

import kubernetes_validate
import pytest

from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    KUEUE_NAMESPACE, MONITORING_NAMESPACE, PLATFORM_PRIORITY, PLATFORM_PRIORITY_CLASS, render_priority_class,
)
from gpu_platform.components.platform.monitoring import RELEASE, kube_prometheus_stack_values
from gpu_platform.components.platform.queue import kueue_values
from tests.test_platform_charts import render

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


def _pod_priority(obj: dict) -> object:
    if obj["kind"] in ("Prometheus", "Alertmanager"):  # the operator makes their StatefulSets from the spec
        return obj["spec"].get("priorityClassName")
    return obj["spec"]["template"]["spec"].get("priorityClassName")


def test_the_priority_class_outranks_user_pods_and_is_no_default() -> None:
    pc = render_priority_class()
    kubernetes_validate.validate(pc, "1.33", strict=True)
    assert pc["metadata"]["name"] == PLATFORM_PRIORITY_CLASS and pc["value"] == PLATFORM_PRIORITY
    assert 0 < pc["value"] < 1_000_000_000  # above user pods (0); values above 1e9 are reserved for system-*
    assert pc["globalDefault"] is False and pc["preemptionPolicy"] == "PreemptLowerPriority"


def test_kueue_runs_at_the_platform_priority() -> None:
    objs = render("kueue", versions.KUEUE.version, kueue_values(), "kueue", KUEUE_NAMESPACE)
    [manager] = [o for o in objs if o["kind"] == "Deployment" and "controller-manager" in o["metadata"]["name"]]
    assert _pod_priority(manager) == PLATFORM_PRIORITY_CLASS


def test_the_monitoring_controllers_run_at_the_platform_priority_and_node_exporter_does_not() -> None:
    objs = render("kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK.version,
                  kube_prometheus_stack_values("standard", ["ops@example.com"], None), RELEASE, MONITORING_NAMESPACE)
    pods = {(o["kind"], o["metadata"]["name"]): _pod_priority(o) for o in objs
            if o["kind"] in WORKLOADS + ("Prometheus", "Alertmanager")}
    wanted = [k for k in pods if k[0] != "DaemonSet"]
    assert {k[0] for k in wanted} >= {"Deployment", "Prometheus", "Alertmanager"}
    assert len([k for k in wanted if k[0] == "Deployment"]) >= 3  # operator, grafana, kube-state-metrics
    for key in wanted:
        assert pods[key] == PLATFORM_PRIORITY_CLASS, key
    # node-exporter runs on GPU nodes too: a higher priority there could preempt a training pod
    daemonsets = [k for k in pods if k[0] == "DaemonSet"]
    assert daemonsets and all(pods[k] != PLATFORM_PRIORITY_CLASS for k in daemonsets)


@pytest.mark.parametrize("stack", ["linode-dev", "aws-prod"])
def test_the_plan_creates_the_class_before_the_releases_that_name_it(stack: str) -> None:
    from tests.fit_support import stack_plan

    plan = stack_plan(stack)
    [pc] = [r for r in plan.resources if r.type == "kubernetes:scheduling.k8s.io/v1:PriorityClass"]
    assert pc.inputs["metadata"]["name"] == PLATFORM_PRIORITY_CLASS
    releases = {r.name: r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    for part in ("kueue", "kube-prometheus-stack", "jupyterhub"):
        [rel] = [r for n, r in releases.items() if n.endswith(f"-{part}")]
        assert pc.urn in rel.dependencies, part
    # The Trainer/JobSet priority patches wait for the class too (before: KubeflowArgs had no priority_class,
    # so they raced it, and with the queue off so did the hub and proxy).
    patches = [r for r in plan.resources if r.type == "kubernetes:apps/v1:DeploymentPatch"]
    assert patches and all(pc.urn in r.dependencies for r in patches), [r.name for r in patches]


# --- What a user's job or notebook depends on (platform review: the Katib controller) ------------------
# Before: Katib's controller (whose fail-closed pod webhook covers every pod in `training`), its DB
# manager and MySQL, the Trainer and JobSet controllers (fail-closed TrainJob/JobSet webhooks),
# Pipelines' servers and JupyterHub's hub and proxy all ran at priority 0, and Katib's controller
# BestEffort: evicted or Pending (full system nodes, a drain), no pod in `training` could be created,
# the replacement after a spot preemption included.

def _release(rels, suffix: str):
    [rel] = [r for r in rels if r.name == suffix or r.name.endswith(f"-{suffix}")]
    return rel


def _workloads(rel) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in rel.objects if o["kind"] in ("Deployment", "StatefulSet")}


# Per release, the workloads a job, a trial, a pipeline run or a notebook cannot do without (written out
# here, not taken from the code, so dropping one there fails): Trainer and JobSet controllers (their
# webhooks fail closed); Katib's controller (pod webhook over `training`), DB manager and MySQL (a
# trial's metrics collector reports there); Pipelines' API server and MySQL, Argo's workflow controller,
# persistence agent, scheduled-workflow controller, ML Metadata and the artifact store; the hub and proxy.
DEPENDED_ON = {
    "kubeflow-trainer": ("kubeflow-trainer-controller-manager", "jobset-controller"),
    "kubeflow-katib": ("katib-controller", "katib-db-manager", "katib-mysql"),
    "kubeflow-pipelines": ("ml-pipeline", "mysql", "workflow-controller", "ml-pipeline-persistenceagent",
                           "ml-pipeline-scheduledworkflow", "metadata-grpc-deployment", "seaweedfs"),
    "jupyterhub": ("hub", "proxy"),
}


def test_the_code_names_the_same_controllers() -> None:
    from gpu_platform.components.platform.kubeflow import (
        KATIB_PLATFORM_DEPLOYMENTS, PIPELINES_PLATFORM_DEPLOYMENTS, TRAINER_PLATFORM_DEPLOYMENTS,
    )
    assert set(TRAINER_PLATFORM_DEPLOYMENTS) == set(DEPENDED_ON["kubeflow-trainer"])
    assert set(KATIB_PLATFORM_DEPLOYMENTS) == set(DEPENDED_ON["kubeflow-katib"])
    assert set(PIPELINES_PLATFORM_DEPLOYMENTS) == set(DEPENDED_ON["kubeflow-pipelines"])
    # the overlay's patch gives Katib's controller the resources the code documents
    from gpu_platform.components.platform.kubeflow import KATIB_CONTROLLER_RESOURCES
    from tests.test_platform_charts import overlay

    [controller] = [o for o in overlay("katib-standalone") if o["metadata"]["name"] == "katib-controller"
                    and o["kind"] == "Deployment"]
    assert controller["spec"]["template"]["spec"]["containers"][0]["resources"] == KATIB_CONTROLLER_RESOURCES


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha", "gcp-prod", "aws-prod"])
def test_every_controller_a_job_or_notebook_depends_on_runs_at_the_platform_priority(stack: str) -> None:
    """On the stack's REAL rendered releases (preflight's render: charts, overlays with their patches,
    and the program's DeploymentPatches folded in), each named controller exists and names the class."""
    from tests.fit_support import need_charts, rendered

    need_charts()
    rels = rendered(stack)
    for release, names in DEPENDED_ON.items():
        workloads = _workloads(_release(rels, release))
        missing = sorted(set(names) - set(workloads))
        assert not missing, (release, missing, sorted(workloads))  # a name the release does not render
        for name in names:
            assert _pod_priority(workloads[name]) == PLATFORM_PRIORITY_CLASS, (stack, release, name)
    # Not what users only look at: the UIs stay at 0 (they gate no job).
    assert _pod_priority(_workloads(_release(rels, "kubeflow-katib"))["katib-ui"]) is None
    assert _pod_priority(_workloads(_release(rels, "kubeflow-pipelines"))["ml-pipeline-ui"]) is None


@pytest.mark.parametrize("stack", ["linode-dev", "aws-prod"])
def test_the_katib_controller_whose_webhook_gates_training_is_not_best_effort(stack: str) -> None:
    from tests.fit_support import need_charts, rendered
    from tests.test_platform_charts import ns_labels, selector_matches
    from gpu_platform.components.platform.training import render_training_namespace

    need_charts()
    katib = _release(rendered(stack), "kubeflow-katib")
    hook = next(w for o in katib.objects if o["kind"] == "MutatingWebhookConfiguration"
                for w in o["webhooks"] if w["name"] == "mutator.pod.katib.kubeflow.org")
    # why it matters: the webhook fails closed over every pod in `training`
    assert hook.get("failurePolicy", "Fail") == "Fail"
    assert selector_matches(hook["namespaceSelector"], ns_labels(render_training_namespace()))
    controller = _workloads(katib)["katib-controller"]
    [container] = controller["spec"]["template"]["spec"]["containers"]
    requests = (container.get("resources") or {}).get("requests") or {}
    assert requests.get("cpu") and requests.get("memory"), container.get("resources")  # Burstable, not BestEffort
    # one replica: no PodDisruptionBudget (minAvailable 1 on a single replica would block every drain)
    assert controller["spec"].get("replicas", 1) == 1
    assert not [o for o in katib.objects if o["kind"] == "PodDisruptionBudget"]


def test_the_hub_and_proxy_outrank_notebooks_which_stay_at_zero() -> None:
    """z2jh 4.4.0's extraPodSpec on the hub and the proxy, podPriority off: user pods get no class."""
    from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE
    from gpu_platform.components.platform.notebooks import jupyterhub_values
    from tests.test_platform_charts import POOLS

    values = jupyterhub_values(POOLS, "standard")
    objs = render("jupyterhub", versions.JUPYTERHUB.version, values, "jupyterhub", JUPYTERHUB_NAMESPACE)
    workloads = {o["metadata"]["name"]: o for o in objs if o["kind"] in WORKLOADS}
    assert _pod_priority(workloads["hub"]) == PLATFORM_PRIORITY_CLASS
    assert _pod_priority(workloads["proxy"]) == PLATFORM_PRIORITY_CLASS
    assert not [o for o in objs if o["kind"] == "PriorityClass"]  # the chart's shared class stays off
    assert "priorityClassName" not in str(values["singleuser"])


def test_the_trainer_priority_patches_name_the_chart_s_deployments_and_wait_for_the_release() -> None:
    from gpu_platform.components.platform.kubeflow import (
        TRAINER_PLATFORM_DEPLOYMENTS, TRAINER_RELEASE, render_priority_patch, trainer_values,
    )
    from gpu_platform.components.platform.common import TRAINER_NAMESPACE
    from tests.fit_support import stack_plan

    objs = render("kubeflow-trainer", versions.KUBEFLOW_TRAINER.version, trainer_values(), TRAINER_RELEASE,
                  TRAINER_NAMESPACE)
    deployments = {o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"}
    assert set(TRAINER_PLATFORM_DEPLOYMENTS) == deployments  # every controller of the chart, none missed
    # the chart itself cannot set it (no value): hence the patch
    assert all(_pod_priority(o) is None for o in objs if o["kind"] == "Deployment")
    from gpu_platform.preflight.fit.render import RenderedRelease, apply_patch_resources

    rel = RenderedRelease(TRAINER_RELEASE, "t", "urn:t", "helm", "c", "v", TRAINER_NAMESPACE, objs)
    apply_patch_resources([rel], [(f"p-{n}", render_priority_patch(n)) for n in TRAINER_PLATFORM_DEPLOYMENTS])
    for o in rel.objects:
        if o["kind"] == "Deployment":  # the patched object is still a valid Deployment, now at the class
            kubernetes_validate.validate(o, "1.33", strict=True)
            assert _pod_priority(o) == PLATFORM_PRIORITY_CLASS
    plan = stack_plan("linode-dev")
    [release] = [r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release" and r.name.endswith("-trainer")]
    patches = [r for r in plan.resources if r.type == "kubernetes:apps/v1:DeploymentPatch"]
    assert sorted(r.plain_inputs["metadata"]["name"] for r in patches) == sorted(TRAINER_PLATFORM_DEPLOYMENTS)
    assert all(release.urn in r.dependencies for r in patches)


def test_preflight_folds_a_patch_into_the_rendered_object_and_refuses_one_naming_nothing() -> None:
    from gpu_platform.preflight.fit.errors import ChartError
    from gpu_platform.preflight.fit.render import RenderedRelease, apply_patch_resources

    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "c", "labels": {"a": "b"}},
           "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}}}
    rel = RenderedRelease("r", "r", "urn:r", "helm", "chart", "1.0.0", "ns", [dep], frozenset(), texts=["kind: Deployment"])
    patch = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "c", "namespace": "ns"},
             "spec": {"template": {"spec": {"priorityClassName": "p"}}}}
    apply_patch_resources([rel], [("the-patch", patch)])
    [out] = rel.objects
    assert out["spec"]["template"]["spec"] == {"containers": [{"name": "m", "image": "x"}], "priorityClassName": "p"}
    assert out["metadata"] == {"name": "c", "labels": {"a": "b"}} and out["spec"]["replicas"] == 1
    assert rel.texts == [None]  # the rendered file shows the patched object, not the chart's text
    other_ns = {**patch, "metadata": {"name": "c", "namespace": "elsewhere"}}
    with pytest.raises(ChartError, match="the-patch.*elsewhere/c"):
        apply_patch_resources([rel], [("the-patch", other_ns)])
