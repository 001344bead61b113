"""A notebook can submit a TrainJob, a Katib experiment and a pipeline (issue 22 item 2): notebook
pods run as a ServiceAccount whose token is mounted, RBAC lets it submit exactly the training
namespace's job kinds, and the chart's NetworkPolicy lets it reach the API server and Pipelines' API.
Before: no ServiceAccount, no RBAC, and z2jh's `privateIPs` egress off for user pods.

The hub's KubeSpawner settings and the NetworkPolicy come from the REAL pinned z2jh chart; RBAC is
evaluated with the rules of Kubernetes' RBAC authorizer (a rule grants a request when its apiGroups,
resources and verbs all contain the request's, or "*")."""

from __future__ import annotations

import base64

import kubernetes_validate
import pytest
import yaml

from gpu_platform.components.cluster import POOL_LABEL, TRAINING_NAMESPACE, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE
from gpu_platform.components.platform.notebooks import (
    NOTEBOOK_SERVICE_ACCOUNT, PIPELINES_API, jupyterhub_values, render_notebook_service_account,
    render_runtime_reader, render_runtime_reader_binding, render_submitter_binding, render_submitter_role,
)
from tests.test_platform_charts import egress_allows, render

POOLS = [GpuPoolSpec("a10g", "g5.xlarge", "A10G", 1, 0, 2, "spot", {POOL_LABEL: "a10g"})]
NOTEBOOK_SA = {"kind": "ServiceAccount", "name": NOTEBOOK_SERVICE_ACCOUNT, "namespace": JUPYTERHUB_NAMESPACE}


def hub_objects():
    return render("jupyterhub", versions.JUPYTERHUB.version, jupyterhub_values(POOLS, "gp3", queue_name="gpu-queue"),
                  "jupyterhub", JUPYTERHUB_NAMESPACE)


def allowed(group: str, resource: str, verb: str, namespace: str | None, subject=NOTEBOOK_SA) -> bool:
    """Kubernetes RBAC: some binding of `subject` (RoleBinding in `namespace`, or ClusterRoleBinding)
    refers to a role with a rule matching the request."""
    roles = {("Role", render_submitter_role()["metadata"]["name"], TRAINING_NAMESPACE): render_submitter_role(),
             ("ClusterRole", render_runtime_reader()["metadata"]["name"], None): render_runtime_reader()}
    for b in (render_submitter_binding(), render_runtime_reader_binding()):
        if not any(all(s.get(k) == subject[k] for k in subject) for s in b["subjects"]):
            continue
        bns = b["metadata"].get("namespace")
        if b["kind"] == "RoleBinding" and bns != namespace:
            continue
        ref = b["roleRef"]
        role = roles[(ref["kind"], ref["name"], bns if ref["kind"] == "Role" else None)]
        for r in role["rules"]:
            if ((group in r["apiGroups"] or "*" in r["apiGroups"]) and (resource in r["resources"] or "*" in r["resources"])
                    and (verb in r["verbs"] or "*" in r["verbs"])):
                return True
    return False


@pytest.mark.parametrize("group,resource", [("trainer.kubeflow.org", "trainjobs"), ("kubeflow.org", "experiments"),
                                            ("batch", "jobs")])
def test_a_notebook_may_submit_and_watch_the_training_job_kinds(group: str, resource: str) -> None:
    for verb in ("create", "get", "list", "watch", "delete"):
        assert allowed(group, resource, verb, TRAINING_NAMESPACE), (resource, verb)
    assert not allowed(group, resource, "create", JUPYTERHUB_NAMESPACE)
    assert not allowed(group, resource, "create", "kube-system")
    assert allowed("", "pods/log", "get", TRAINING_NAMESPACE)
    assert allowed("trainer.kubeflow.org", "clustertrainingruntimes", "list", None)


@pytest.mark.parametrize("group,resource,verb", [("", "secrets", "get"), ("", "pods", "create"),
                                                 ("rbac.authorization.k8s.io", "rolebindings", "create"),
                                                 ("", "configmaps", "update"), ("kueue.x-k8s.io", "workloads", "update"),
                                                 ("trainer.kubeflow.org", "clustertrainingruntimes", "create")])
def test_the_notebook_account_is_limited_to_submitting_jobs(group: str, resource: str, verb: str) -> None:
    assert not allowed(group, resource, verb, TRAINING_NAMESPACE)
    assert not allowed(group, resource, verb, None)


def test_pipeline_steps_may_submit_trainjobs_to_training() -> None:
    runner = {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}
    assert allowed("trainer.kubeflow.org", "trainjobs", "create", TRAINING_NAMESPACE, subject=runner)


def test_user_pods_run_as_the_account_with_its_token() -> None:
    secret = next(o for o in hub_objects() if o["kind"] == "Secret" and o["metadata"]["name"] == "hub")
    data = secret.get("stringData") or {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    singleuser = yaml.safe_load(data["values.yaml"])["singleuser"]
    assert singleuser["serviceAccountName"] == NOTEBOOK_SERVICE_ACCOUNT
    # KubeSpawner mounts the token when a service account is set, unless told not to
    assert "automountServiceAccountToken" not in singleuser
    assert render_notebook_service_account()["automountServiceAccountToken"] is True
    assert singleuser["extraEnv"]["KF_PIPELINES_ENDPOINT"] == PIPELINES_API


@pytest.mark.parametrize("ip,port", [("10.40.0.10", 443), ("172.20.0.1", 443), ("10.100.3.7", 8888),
                                     ("192.168.0.5", 6443)])
def test_notebooks_reach_the_api_server_and_in_cluster_services(ip: str, port: int) -> None:
    policy = next(o for o in hub_objects() if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "singleuser")
    assert egress_allows(policy, ip, port)
    assert not egress_allows(policy, "169.254.169.254", 80)


def test_rbac_objects_are_valid_kubernetes() -> None:
    for obj in (render_notebook_service_account(), render_submitter_role(), render_submitter_binding(),
                render_runtime_reader(), render_runtime_reader_binding()):
        kubernetes_validate.validate(obj, "1.33", strict=True)
