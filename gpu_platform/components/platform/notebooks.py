"""Notebooks that keep their work: JupyterHub with a persistent volume per user, a CPU profile and a
GPU profile per GPU pool (tolerating its taint, asking for one GPU), and idle culling so a forgotten
GPU notebook stops costing money.

Secure defaults: the hub is reachable only inside the cluster (ClusterIP; `kubectl port-forward` or
an Ingress you add), sign-up needs an admin's approval (NativeAuthenticator), network policies on.

Login (JupyterHub 5): `Authenticator.allow_all` defaults to False there and NativeAuthenticator does
not set it, so nobody could log in. NativeAuthenticator itself refuses users an admin has not
approved (and users listed in `admin_users` are approved when they sign up), so `allow_all: true`
lets exactly the approved users in. First admin: right after the deploy, the admin signs up under
the name in `platform.notebookAdminUsers` (through `kubectl port-forward`, the hub has no public
address) and logs in; everyone else signs up and waits for that admin's approval at /hub/authorize.

Cloud metadata: the chart's `blockWithIptables` init container needs NET_ADMIN and privilege, which
the namespace's Pod Security level (baseline) refuses, so every spawn would fail. The chart's own
NetworkPolicies block 169.254.169.254 instead (egressAllowRules.cloudMetadataServer: false for user
pods, the hub and the proxy), on every cloud: notebooks need no cloud identity, not even on GKE.

GPU notebooks are queued: the GPU profiles label their pods with the queue name, Kueue's pod
integration (the namespace carries the queue label) holds each pod until the ClusterQueue has a GPU
of that pool for it, so notebooks and training jobs share one GPU quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi

from gpu_platform.components.cluster import TRAINING_NAMESPACE, ClusterHandle, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    JUPYTERHUB_NAMESPACE, MANAGED_BY, PLATFORM_PRIORITY_CLASS, apply_object, helm_release, k8s_opts, render_namespace,
)
from gpu_platform.components.platform.kubeflow import ARTIFACT_STORE, ARTIFACT_STORE_S3_PORT
from gpu_platform.components.platform.queue import (
    CPU_CLUSTER_QUEUE, CPU_LOCAL_QUEUE, LOCAL_QUEUE, QUEUE_NAME_LABEL, QUEUE_NAMESPACE_LABEL, QUEUE_NAMESPACE_VALUE,
    JobQueue, render_admission_policy, render_local_queue, render_policy_binding,
)

GPU_RESOURCE = "nvidia.com/gpu"
# The identity of every notebook pod: it may submit and watch the training namespace's job kinds
# (TrainJobs, Katib experiments, batch Jobs) and nothing else in the cluster (render_submitter_role).
NOTEBOOK_SERVICE_ACCOUNT = "notebook-user"
SUBMITTER_ROLE = "job-submitter"
RUNTIME_READER = "gpu-platform-training-runtime-reader"
# Kubeflow Pipelines' workflow pods run as this ServiceAccount in `kubeflow`: a pipeline step that
# needs a GPU submits a TrainJob to `training` (GPU pods in `kubeflow` are refused, docs/first-training-job.md).
PIPELINE_RUNNER = ("kubeflow", "pipeline-runner")
# Where a notebook reaches Kubeflow Pipelines' API (standalone install, no auth in front of it).
PIPELINES_API = "http://ml-pipeline.kubeflow.svc.cluster.local:8888"

_READ = ["get", "list", "watch"]
_SUBMIT = ["create", "delete", "get", "list", "watch", "patch", "update"]

# The zone label every node carries (set by the cloud on EKS and GKE nodes).
ZONE_LABEL = "topology.kubernetes.io/zone"


def render_notebook_service_account() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": NOTEBOOK_SERVICE_ACCOUNT, "namespace": JUPYTERHUB_NAMESPACE, "labels": dict(MANAGED_BY)},
        "automountServiceAccountToken": True,
    }


def render_submitter_role(namespace: str = TRAINING_NAMESPACE) -> dict[str, Any]:
    """What a notebook (or a pipeline step) may do in the training namespace: submit, watch and delete
    TrainJobs, Katib experiments and batch Jobs; read what they create (trials, workloads, pods, logs,
    events); resume a Workload Kueue deactivated (patch, limited to that by WORKLOAD_REACTIVATION_POLICY).
    No Secrets, no ConfigMaps writes, no RBAC, nothing outside `training`."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": SUBMITTER_ROLE, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "rules": [
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": _SUBMIT},
            {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"], "verbs": _READ},
            {"apiGroups": ["kubeflow.org"], "resources": ["experiments"], "verbs": _SUBMIT},
            {"apiGroups": ["kubeflow.org"], "resources": ["trials", "suggestions"], "verbs": _READ},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _SUBMIT},
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": _READ},
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": _READ},
            # Resume a deactivated job: spec.active false -> true and nothing else (WORKLOAD_REACTIVATION_POLICY).
            {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": _READ},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        ],
    }


def render_submitter_binding(namespace: str = TRAINING_NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": SUBMITTER_ROLE, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SUBMITTER_ROLE},
        "subjects": [
            {"kind": "ServiceAccount", "name": NOTEBOOK_SERVICE_ACCOUNT, "namespace": JUPYTERHUB_NAMESPACE},
            {"kind": "ServiceAccount", "name": PIPELINE_RUNNER[1], "namespace": PIPELINE_RUNNER[0]},
        ],
    }


# Kueue deactivates a Workload (spec.active: false) whose job was evicted for PodsReadyTimeout more than
# waitForPodsReady.requeuingStrategy.backoffLimitCount times; its count only grows while the Workload
# exists, so a multi-day Spot job can exhaust it over many slow recoveries. Setting spec.active back
# to true resumes it, and Kueue cleared the count when it deactivated it (v0.19.2
# pkg/controller/core/workload_controller.go: an inactive Workload's status.requeueState is set to nil).
# The submitters may patch Workloads for that, and for nothing else: this policy refuses any other
# change they make to one (the queue, the pod sets, the priority, the labels Kueue reads).
WORKLOAD_REACTIVATION_POLICY = "workloads-only-resumed-by-submitters"
# The spec fields of Kueue v0.19.2's Workload (kueue.x-k8s.io/v1beta2; a v1beta1 request is converted,
# matchPolicy Equivalent) besides `active`; tests/test_workload_resume.py keeps this equal to the pinned CRD.
WORKLOAD_SPEC_FIELDS = ("maximumExecutionTimeSeconds", "podSets", "preemptionGates", "priority",
                        "priorityClassRef", "queueName")
WORKLOAD_METADATA_FIELDS = ("labels", "annotations", "finalizers", "ownerReferences")
RESUME_COMMAND = "kubectl -n training patch workload <name> --type merge -p '{\"spec\":{\"active\":true}}'"


def submitter_users() -> list[str]:
    """The user names the API server gives the submitter binding's ServiceAccounts."""
    return [f"system:serviceaccount:{s['namespace']}:{s['name']}" for s in render_submitter_binding()["subjects"]]


def _kept(obj: str, field: str) -> str:
    return (f"(has(object.{obj}.{field}) == has(oldObject.{obj}.{field}) && "
            f"(!has(object.{obj}.{field}) || object.{obj}.{field} == oldObject.{obj}.{field}))")


def render_workload_reactivation_policy() -> dict[str, Any]:
    """Refuses a Workload update by a job submitter (notebook-user, pipeline-runner) unless it sets
    spec.active from false to true and changes no other spec field, label, annotation, finalizer or
    owner reference. Other identities (Kueue, administrators) are not matched."""
    kept = " && ".join([_kept("spec", f) for f in WORKLOAD_SPEC_FIELDS]
                       + [_kept("metadata", f) for f in WORKLOAD_METADATA_FIELDS])
    return render_admission_policy(WORKLOAD_REACTIVATION_POLICY, {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["kueue.x-k8s.io"], "apiVersions": ["v1beta2"],
                                                "operations": ["UPDATE"], "resources": ["workloads"]}]},
        "matchConditions": [{"name": "by-a-job-submitter",
                             "expression": f"request.userInfo.username in {submitter_users()!r}"}],
        "variables": [
            {"name": "resumes", "expression": ("has(oldObject.spec.active) && oldObject.spec.active == false && "
                                               "has(object.spec.active) && object.spec.active == true")},
            {"name": "keepsTheRest", "expression": kept}],
        "validations": [{
            "expression": "variables.resumes && variables.keepsTheRest",
            "message": ("a job submitter may change a Workload only to resume it after Kueue deactivated it: "
                        f"`{RESUME_COMMAND}` (spec.active false -> true, nothing else)"),
            "reason": "Forbidden"}],
    })


def render_runtime_reader() -> dict[str, Any]:
    """The Trainer SDK lists ClusterTrainingRuntimes (cluster-scoped) to pick a runtime: read only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": RUNTIME_READER, "labels": dict(MANAGED_BY)},
        "rules": [{"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"], "verbs": _READ}],
    }


def render_runtime_reader_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": RUNTIME_READER, "labels": dict(MANAGED_BY)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUNTIME_READER},
        "subjects": [{"kind": "ServiceAccount", "name": NOTEBOOK_SERVICE_ACCOUNT, "namespace": JUPYTERHUB_NAMESPACE},
                     {"kind": "ServiceAccount", "name": PIPELINE_RUNNER[1], "namespace": PIPELINE_RUNNER[0]}],
    }


def render_notebooks_namespace() -> dict[str, Any]:
    """baseline Pod Security; labelled for the queue (inert while the queue is off)."""
    return render_namespace(JUPYTERHUB_NAMESPACE, "baseline", {QUEUE_NAMESPACE_LABEL: QUEUE_NAMESPACE_VALUE})


def cpu_profile(queue_name: Optional[str] = None) -> dict[str, Any]:
    """The CPU notebook; with a queue (CPU_LOCAL_QUEUE), Kueue admits it against the system flavor's
    quota and places it on the system nodes, so the quota counts it (platform review #4)."""
    image, tag = versions.NOTEBOOK_CPU_IMAGE
    profile = {
        "display_name": "CPU notebook (up to 2 vCPU, 8 GiB)",
        "slug": "cpu",
        "description": "Data exploration and small experiments; no GPU is billed.",
        "default": True,
        "kubespawner_override": {
            "image": f"{image}:{tag}",
            "cpu_guarantee": 0.5, "cpu_limit": 2,
            "mem_guarantee": "2G", "mem_limit": "8G",
        },
    }
    if queue_name:
        profile["kubespawner_override"]["extra_labels"] = {QUEUE_NAME_LABEL: queue_name}
    return profile


def gpu_profile(pool: GpuPoolSpec, queue_name: Optional[str] = None) -> dict[str, Any]:
    """One GPU of `pool`: the pod lands on the pool's nodes and tolerates their taints; with a queue,
    Kueue admits it against the pool's GPU quota first."""
    image, tag = versions.NOTEBOOK_GPU_IMAGE
    profile = {
        "display_name": f"GPU notebook: 1x {pool.gpu_model} ({pool.name} pool)",
        "slug": f"gpu-{pool.name}",
        "description": "Billed per hour while running; stopped automatically when idle.",
        "kubespawner_override": {
            "image": f"{image}:{tag}",
            "cpu_guarantee": 1, "cpu_limit": 4,
            "mem_guarantee": "8G", "mem_limit": "24G",
            "extra_resource_guarantees": {GPU_RESOURCE: "1"},
            "extra_resource_limits": {GPU_RESOURCE: "1"},
            "node_selector": dict(pool.node_selector),
            "tolerations": pool.tolerations(),
        },
    }
    if queue_name:
        profile["kubespawner_override"]["extra_labels"] = {QUEUE_NAME_LABEL: queue_name}
    return profile


# Every pod of the chart is kept from the cloud metadata server by the chart's NetworkPolicies.
NO_METADATA = {"enabled": True, "egressAllowRules": {"cloudMetadataServer": False}}
# The platform services a notebook calls, by the labels and ports their upstream manifests give their pods:
# Kubeflow Pipelines' API server (pipelines 2.17.0 platform-agnostic, Service ml-pipeline selects app=ml-pipeline,
# port 8888: kfp.Client() at PIPELINES_API) and Katib's DB manager (katib-standalone v0.19.0, Service
# katib-db-manager selects katib.kubeflow.org/component=db-manager, port 6789: the Katib SDK's
# get_trial_metrics default address katib-db-manager.kubeflow:6789), and Pipelines' artifact store (SeaweedFS's S3
# API, Service seaweedfs port 9000 -> container port 8333, where a run's artifacts are: kubeflow.ARTIFACT_STORE,
# whose ingress the platform opens to notebooks with kubeflow.render_artifact_store_policy). Nothing else of
# `kubeflow`: its MySQLs admit their servers only (kubeflow.render_database_policies).
NOTEBOOK_SERVICES = (
    ("kubeflow", {"app": "ml-pipeline"}, 8888),
    ("kubeflow", {"katib.kubeflow.org/component": "db-manager"}, 6789),
    ("kubeflow", dict(ARTIFACT_STORE), ARTIFACT_STORE_S3_PORT),
)


def notebook_service_rules() -> list[dict[str, Any]]:
    """Egress rules to each of NOTEBOOK_SERVICES by namespace and pod labels. Not ipBlock: Cilium (Linode) and
    GKE Dataplane V2 never apply ipBlock/CIDR rules to traffic to a pod (Cilium v1.20.0
    Documentation/security/policy/layer3.rst "IP/CIDR based"), so `privateIPs` alone left kfp.Client() hanging.
    Inert where Kubeflow is off (no such pods)."""
    return [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                     "podSelector": {"matchLabels": dict(labels)}}],
             "ports": [{"port": port, "protocol": "TCP"}]} for ns, labels, port in NOTEBOOK_SERVICES]


# Notebooks additionally reach private addresses: the Kubernetes API server (a private IP on every
# cloud: EKS's ENIs, GKE's private endpoint, Linode's control-plane nodes, which Cilium's
# policy-cidr-match-mode `nodes` lets an ipBlock select, addons.py) -- z2jh's `privateIPs` rule (10/8,
# 172.16/12, 192.168/16), off for user pods by default -- and the platform's services by pod selector
# (notebook_service_rules). The metadata server stays blocked (a link-local address, its own rule).
NOTEBOOK_EGRESS = {"enabled": True, "egressAllowRules": {"cloudMetadataServer": False, "privateIPs": True},
                   "egress": notebook_service_rules()}
# The hub and the proxy run at the platform's PriorityClass, notebooks at 0: every spawn and every
# request to a notebook goes through them, so on full system nodes the scheduler preempts a user pod
# (a CPU notebook, an unqueued pipeline step) to place them. Through z2jh's `extraPodSpec` (merged
# into each pod spec): its `scheduling.podPriority` would give the hub, the proxy and every user pod
# one shared class (z2jh 4.4.0 templates/hub/deployment.yaml, proxy/deployment.yaml), so it stays off.
PLATFORM_POD_SPEC = {"priorityClassName": PLATFORM_PRIORITY_CLASS}


def auth_config(admin_users: Sequence[str]) -> dict[str, Any]:
    """hub.config: NativeAuthenticator with admin approval (see the module docstring)."""
    if not admin_users:
        raise ValueError("notebooks need at least one admin user (platform.notebookAdminUsers)")
    return {
        # False, JupyterHub's own default, over the chart's `admin_access: true` (deprecated since JupyterHub 2.0:
        # what admins may do is the admin role's scopes; true lets admins into every user's server). Not null:
        # whether a null reaches Helm to delete the key depends on the SDK and the provider (pulumi-kubernetes
        # 4.30's #4293 keeps it, 4.25.0 drops it, so the chart's true stayed), and False means the same everywhere.
        "JupyterHub": {"authenticator_class": "nativeauthenticator.NativeAuthenticator", "admin_access": False},
        "Authenticator": {"admin_users": list(admin_users), "allow_all": True},
        "NativeAuthenticator": {"open_signup": False, "minimum_password_length": 12,
                                "check_common_password": True},
    }


def offered_pools(pools: Sequence[GpuPoolSpec], gpu_quota: Optional[Mapping[str, int]] = None) -> list[GpuPoolSpec]:
    """The pools a GPU profile is offered for: with a queue, only pools whose GPU quota is above 0
    (a notebook on a pool with quota 0 would wait in the queue forever)."""
    if gpu_quota is None:
        return list(pools)
    return [p for p in pools if gpu_quota.get(p.name, 0) > 0]


def home_zones(pools: Sequence[GpuPoolSpec], system_zones: Sequence[str]) -> list[str]:
    """The zones a notebook (and so its home volume) may start in, when that must be narrower than
    everywhere: a home is a zonal disk made where the user's first server ran, usually a CPU notebook on
    a system node or a GPU node, and every later server of that user (every profile) can only run in that
    zone. So homes are kept to the zones where the CPU profile (system nodes) and every offered GPU pool
    all reach: aws-prod's l4x4 pool has two groups, in 1a and 1b, so a home in 1c could never start the
    l4x4 profile; gcp-prod's system pool is in us-central1-a only, so a home a first GPU server made in
    1b could never start the CPU profile. Empty: no restriction needed (every zone a notebook can start
    in is shared), or not known (a pool's or the system nodes' zones unknown), or no zone all share."""
    if not system_zones or not pools or any(not p.zones for p in pools):
        return []
    common = [z for z in system_zones if all(z in p.zones for p in pools)]
    reachable = set(system_zones).union(*(p.zones for p in pools))
    return common if common and set(common) != reachable else []


def jupyterhub_values(pools: Sequence[GpuPoolSpec], storage_class: str, storage_gib: int = 20,
                      idle_cull_minutes: int = 60, admin_users: Sequence[str] = ("admin",),
                      queue_name: Optional[str] = None,
                      gpu_quota: Optional[Mapping[str, int]] = None,
                      system_zones: Sequence[str] = (), start_timeout_seconds: int = 600,
                      cpu_queue_name: Optional[str] = None, zone_label: str = ZONE_LABEL) -> dict[str, Any]:
    if idle_cull_minutes < 1:
        raise ValueError("idle_cull_minutes must be at least 1")
    pools = offered_pools(pools, gpu_quota)
    zones = home_zones(pools, system_zones)
    return {
        "hub": {
            "config": auth_config(admin_users),
            "networkPolicy": NO_METADATA,
            "extraPodSpec": dict(PLATFORM_POD_SPEC),
            # The hub's database on the stack's class, not whatever the cluster's default is (an existing cluster
            # may have none: the claim would stay Pending and the hub never start).
            "db": {"pvc": {"storageClassName": storage_class}},
        },
        "proxy": {"service": {"type": "ClusterIP"},
                  "chp": {"networkPolicy": NO_METADATA, "extraPodSpec": dict(PLATFORM_POD_SPEC)},
                  "traefik": {"networkPolicy": NO_METADATA}},
        "singleuser": {
            "cloudMetadata": {"blockWithIptables": False},
            "storage": {
                "type": "dynamic",
                "capacity": f"{storage_gib}Gi",
                "dynamic": {"storageClass": storage_class, "storageAccessModes": ["ReadWriteOnce"]},
            },
            "profileList": [cpu_profile(cpu_queue_name)] + [gpu_profile(p, queue_name) for p in pools],
            "networkPolicy": NOTEBOOK_EGRESS,
            # The API token of this account is mounted (KubeSpawner mounts it when an account is set):
            # it may submit jobs to `training` and nothing else.
            "serviceAccountName": NOTEBOOK_SERVICE_ACCOUNT,
            "extraEnv": {"TRAINING_NAMESPACE": TRAINING_NAMESPACE, "KF_PIPELINES_ENDPOINT": PIPELINES_API},
            "allowPrivilegeEscalation": False,
            # Queue, node boot from zero and a large GPU image: a shorter wait deletes the pod just before
            # the node it asked for is up (Linode's GPU nodes boot in about 16 minutes).
            "startTimeout": start_timeout_seconds,
            # Every profile: keeps each user's home (a zonal disk) in a zone all GPU profiles reach.
            "extraNodeAffinity": {"required": [{"matchExpressions": [
                {"key": zone_label, "operator": "In", "values": zones}]}] if zones else []},
        },
        "cull": {
            "enabled": True,
            "timeout": idle_cull_minutes * 60,
            "every": min(300, idle_cull_minutes * 30),
            "users": False,
            "adminUsers": True,
            "removeNamedServers": False,
        },
        # No userPlaceholder pods, no image pulling on every node: nothing reserves capacity unasked.
        "scheduling": {"userScheduler": {"enabled": False}, "userPlaceholder": {"enabled": False},
                       "podPriority": {"enabled": False}},
        "prePuller": {"hook": {"enabled": False}, "continuous": {"enabled": False}},
    }


@dataclass
class NotebooksArgs:
    cluster: ClusterHandle
    storage_gib: int = 20
    idle_cull_minutes: int = 60
    admin_users: Sequence[str] = ("admin",)
    queue: Optional[JobQueue] = None  # GPU notebooks are admitted by it (and the hub installs after Kueue)
    training_namespace: Optional[pulumi.Resource] = None  # the submitter Role is created in it
    # How long KubeSpawner waits for a server: queued, then a GPU node from a pool at zero booted, the image
    # pulled. The platform passes Kueue's own waitForPodsReady timeout (node boot, or a Linode node group's join
    # deadline plus a lag, then podsReadyTimeoutMinutes: queue.pods_ready_timeouts).
    start_timeout_seconds: int = 600
    # The platform's PriorityClass, which the hub and the proxy name (PLATFORM_POD_SPEC): before the release.
    priority_class: Optional[pulumi.Resource] = None


class Notebooks(pulumi.ComponentResource):
    def __init__(self, name: str, args: NotebooksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:Notebooks", name, None, opts)
        cluster = args.cluster
        ns = apply_object(f"{name}-namespace", render_notebooks_namespace(), k8s_opts(cluster, self))
        queue = args.queue
        values = jupyterhub_values(cluster.gpu_pools, cluster.default_storage_class, args.storage_gib,
                                   args.idle_cull_minutes, args.admin_users, LOCAL_QUEUE if queue else None,
                                   queue.gpu_quota if queue else None, cluster.system_zones,
                                   args.start_timeout_seconds,
                                   CPU_LOCAL_QUEUE if queue is not None and queue.cpu_cluster_queue else None,
                                   cluster.zone_label)
        self.local_queue = self.cpu_local_queue = None
        if queue is not None:
            self.local_queue = apply_object(f"{name}-local-queue", render_local_queue(JUPYTERHUB_NAMESPACE),
                                            k8s_opts(cluster, self, [ns, queue.kueue, queue.cluster_queue]))
            if queue.cpu_cluster_queue is not None:
                self.cpu_local_queue = apply_object(
                    f"{name}-cpu-local-queue", render_local_queue(JUPYTERHUB_NAMESPACE, CPU_LOCAL_QUEUE, CPU_CLUSTER_QUEUE),
                    k8s_opts(cluster, self, [ns, queue.kueue, queue.cpu_cluster_queue]))
        in_ns = k8s_opts(cluster, self, [ns])
        self.service_account = apply_object(f"{name}-service-account", render_notebook_service_account(), in_ns)
        # The Role lives in `training` (created by the training component before any platform part).
        self.submitter_role = apply_object(f"{name}-submitter-role", render_submitter_role(), k8s_opts(
            cluster, self, list(args.training_namespace and [args.training_namespace] or [])))
        self.reactivation_policy = apply_object(f"{name}-workload-reactivation-policy",
                                                render_workload_reactivation_policy(), k8s_opts(cluster, self))
        self.reactivation_binding = apply_object(f"{name}-workload-reactivation-binding",
                                                 render_policy_binding(WORKLOAD_REACTIVATION_POLICY),
                                                 k8s_opts(cluster, self, [self.reactivation_policy]))
        self.submitter_binding = apply_object(f"{name}-submitter-binding", render_submitter_binding(),
                                              k8s_opts(cluster, self, [self.submitter_role, self.service_account,
                                                                       self.reactivation_binding]))
        self.runtime_reader = apply_object(f"{name}-runtime-reader", render_runtime_reader(), k8s_opts(cluster, self))
        self.runtime_reader_binding = apply_object(f"{name}-runtime-reader-binding", render_runtime_reader_binding(),
                                                   k8s_opts(cluster, self, [self.runtime_reader, self.service_account]))
        # In a namespace Kueue's webhooks watch: install after Kueue serves (and the notebooks' queues exist).
        queues = [q for q in (self.local_queue, self.cpu_local_queue) if q is not None]
        self.jupyterhub = helm_release(f"{name}-jupyterhub", "jupyterhub", versions.JUPYTERHUB,
                                       JUPYTERHUB_NAMESPACE, values,
                                       k8s_opts(cluster, self, [ns, self.service_account, *queues]
                                                + ([queue.kueue] if queue else [])
                                                + ([args.priority_class] if args.priority_class else [])))
        self.register_outputs({"namespace": JUPYTERHUB_NAMESPACE,
                               "profiles": [p["slug"] for p in values["singleuser"]["profileList"]]})
