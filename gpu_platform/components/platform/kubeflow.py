"""Kubeflow: Trainer v2 (Helm, with its default ClusterTrainingRuntimes, plus the platform's own
`torch-checkpointed` runtime), Katib standalone for hyperparameter search, and Kubeflow Pipelines standalone.

Why the platform's own runtime: what a preemptible job needs (the checkpoint bucket's ServiceAccount
and a termination grace period long enough to write a checkpoint) must not live in a TrainJob's
`runtimePatches`. Kueue v0.19.2 is built against Trainer v2.2.1 types (its go.mod) and, on admission,
rewrites the TrainJob with them (pkg/controller/jobs/trainjob: RunWithPodSetsInfo updates the whole
object to add its own `kueue` runtime patch); `terminationGracePeriodSeconds` in a pod-spec patch is
new in Trainer v2.3.0, so it is dropped, the TrainJob's JobSet template changes and JobSet's webhook
refuses the update forever (found by the rehearsal, docs/rehearsal.md). In the runtime's JobSet
template the fields are plain pod-spec fields that every version keeps.

Katib and Pipelines ship as kustomizations at pinned upstream tags; the program applies local
overlays of them (gpu_platform/components/platform/kustomize/*: the pinned remote target plus `$patch: delete`
patches) with the Kubernetes provider at `pulumi up` (never at test time; under preflight's mocks
they are registered components, not expanded; preflight renders the overlays from the pre-built
upstream YAML). The overlays drop:
- the `kubeflow` Namespace from both installs: one owner, this program, with Pod Security baseline
  (as Pipelines' upstream namespace), without Katib's metrics-collector label (render_kubeflow_namespace);
- Pipelines' v1 cache webhook (cache deployer + cache server) on every cloud: its deployer asks for a
  `kubernetes.io/kubelet-serving` certificate, which EKS does not sign, so it never completes there;
  v2 pipelines cache through the API server without it.
Order: the `kubeflow` Namespace, then Pipelines' cluster-scoped resources (CRDs) before its env, and
Katib after the namespace.

Priority: what a user's job depends on runs at the platform's PriorityClass (common.PLATFORM_PRIORITY_CLASS),
so on full system nodes the scheduler preempts user pods for it rather than leaving it Pending (a drain,
a lost node). Katib's controller serves a fail-closed pod webhook over every pod in `training` (TrainJob,
Job and trial pods, the replacement after a spot preemption too); the Trainer's and JobSet's webhooks
fail closed for TrainJobs and JobSets. Katib and Pipelines get it from their overlays' patches
(KATIB_PLATFORM_DEPLOYMENTS, PIPELINES_PLATFORM_DEPLOYMENTS); the Trainer chart 2.3.0 and its JobSet
subchart have no priorityClassName value, so their two Deployments get it from a server-side-apply
patch after the release (render_priority_patch; Helm's three-way merge on upgrade keeps a field its
manifests never set). Preflight folds such patches into the rendered chart (preflight/fit/render.py).

Resource needs (upstream defaults): Trainer + JobSet controllers ~0.2 CPU / 0.5 GiB; Katib
(controller, DB manager, MySQL 10 GiB PVC, UI) ~1 CPU / 2 GiB; Pipelines (API server, Argo, MySQL
20 GiB PVC, SeaweedFS 20 GiB PVC, UI, cache, metadata) ~2.5 CPU / 6 GiB. All run on CPU nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.kustomize import v2 as kustomize

from gpu_platform.components.cluster import (
    CHECKPOINT_CA_CONFIGMAP, CHECKPOINT_CA_DIR, CHECKPOINT_CA_KEY, TRAINING_SERVICE_ACCOUNT, ClusterHandle,
    not_evicted_by_scale_down,
)
from gpu_platform.config.kubernetes import Autoscaler
from gpu_platform.components.helm import local_kustomize
from gpu_platform.components.paths import PACKAGE_DIR, program_relative
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE, NOTEBOOK_POD_LABELS, PLATFORM_PRIORITY_CLASS, TRAINER_NAMESPACE,
    apply_object, helm_release, k8s_opts, MANAGED_BY, render_namespace,
)
from gpu_platform.components.platform.gpu import gpu_driver_env
from gpu_platform.components.platform.queue import (
    QUEUE_NAMESPACE_LABEL, QUEUE_NAMESPACE_SELECTOR, QUEUE_NAMESPACE_VALUE,
    render_admission_policy, render_policy_binding,
)
from gpu_platform.components.platform.training import CHECKPOINT_GRACE_SECONDS

# The ClusterTrainingRuntimes the chart's installer applies (runtimes.defaultEnabled).
DEFAULT_RUNTIMES = ("torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed",
                    "torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b",
                    "xgboost-distributed")

# The platform's runtime for preemptible, checkpointing jobs (examples/training/trainjob-checkpointed.yaml).
CHECKPOINTED_RUNTIME = "torch-checkpointed"
# Its defaults are the chart's torch-distributed runtime's (kubeflow-trainer 2.3.0,
# files/runtimes/torch-distributed.yaml); tests/test_platform_validate.py keeps them equal.
TORCH_RUNTIME_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
TRAINER_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"

# The release name of the Trainer chart; its Deployments are named after it (and JobSet's subchart's not).
TRAINER_RELEASE = "kubeflow-trainer"
# Deployments that run at the platform's PriorityClass (see the module docstring). The overlays'
# kustomization.yaml patches name the same (tests/test_platform_priority.py keeps them equal).
TRAINER_PLATFORM_DEPLOYMENTS = (f"{TRAINER_RELEASE}-controller-manager", "jobset-controller")
KATIB_PLATFORM_DEPLOYMENTS = ("katib-controller", "katib-db-manager", "katib-mysql")
PIPELINES_PLATFORM_DEPLOYMENTS = ("ml-pipeline", "mysql", "workflow-controller", "ml-pipeline-persistenceagent",
                                  "ml-pipeline-scheduledworkflow", "metadata-grpc-deployment", "seaweedfs")
# Katib's controller: upstream sets no resources (BestEffort, evicted first under node pressure). Sized
# as the Trainer chart suggests for its controller manager (kubeflow-trainer 2.3.0 values.yaml
# manager.resources: 100m / 300Mi), with the memory limit trainer_values gives the Trainer.
KATIB_CONTROLLER_RESOURCES = {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}}


# The exit code of a training program that wrote a checkpoint after SIGTERM (examples/training/ckpt_train):
# EX_TEMPFAIL of sysexits.h, "try again later". Not 143 (128 + SIGTERM): a process that ignores the
# signal's meaning and is just killed by it exits 143 too, without a checkpoint.
CHECKPOINT_EXIT_CODE = 75
# The rule of the runtime's JobSet failurePolicy that restarts a disrupted job without counting it.
DISRUPTION_RULE = "RestartAfterDisruption"
# Restarts of the whole JobSet for real failures (a child Job out of its backoffLimit), on top of the
# Job's own pod retries (JOB_BACKOFF_LIMIT). Disruptions never count against either.
JOBSET_MAX_RESTARTS = 1
JOB_BACKOFF_LIMIT = 3


def render_pod_failure_policy(container: str = "node") -> dict[str, Any]:
    """The replicated Job's podFailurePolicy (batch/v1): a pod that failed because it was disrupted
    (condition DisruptionTarget: preemption, eviction, drain, its node deleted or shut down) or
    that exited CHECKPOINT_EXIT_CODE (it saved a checkpoint on SIGTERM) fails the Job with reason
    PodFailurePolicy at once, which the JobSet's DISRUPTION_RULE restarts without counting; any other
    failure counts against the Job's backoffLimit as usual. FailJob rather than Ignore: in a
    multi-node job every node must restart together from the checkpoint (torchrun's peers of a lost
    node cannot go on), and the JobSet restart recreates them all."""
    return {"rules": [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": container, "operator": "In",
                                              "values": [CHECKPOINT_EXIT_CODE]}},
    ]}


def render_jobset_failure_policy() -> dict[str, Any]:
    """The JobSet's failurePolicy (jobset.x-k8s.io/v1alpha2, JobSet v0.12.0): a child Job failed by its
    podFailurePolicy (a disruption or a checkpointed stop) restarts the JobSet and is not counted
    (RestartJobSetAndIgnoreMaxRestarts: status.restarts grows, restartsCountTowardsMax does not); any
    other Job failure restarts it at most JOBSET_MAX_RESTARTS times, then the JobSet (and the
    TrainJob) fails. So spot preemptions, however many, never use up a job's retries."""
    return {"maxRestarts": JOBSET_MAX_RESTARTS, "rules": [
        {"name": DISRUPTION_RULE, "action": "RestartJobSetAndIgnoreMaxRestarts",
         "onJobFailureReasons": ["PodFailurePolicy"]},
    ]}


def render_checkpointed_runtime(grace_seconds: int = CHECKPOINT_GRACE_SECONDS, *, cloud: str,
                                checkpoint_ca: bool = False,
                                autoscaler: Autoscaler = "cluster-autoscaler") -> dict[str, Any]:
    """torch-distributed plus what a job that survives preemption needs, in the JobSet's pod template:
    the env `cloud`'s GPU driver install needs for CUDA to be found (gpu.gpu_driver_env: on GKE
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64, without which torch silently runs on the CPU),
    the training ServiceAccount (bound to the checkpoint bucket by Workload Identity / IRSA; Linode
    reads keys from a Secret), `grace_seconds` to write a checkpoint after SIGTERM (GKE Spot's graceful
    node shutdown gives up to 120 s where the stack enables it, an AWS Spot interruption 2 min), and a
    non-root, RuntimeDefault-seccomp pod (UID 10001, the example image's user), annotated so that
    `autoscaler` (cluster-autoscaler on the clouds; cloud kubernetes: kubernetes.autoscaler) never removes its node
    while it runs (cluster.not_evicted_by_scale_down; none for `none`). Disruptions are not
    failures (render_pod_failure_policy, render_jobset_failure_policy); podFailurePolicy needs
    restartPolicy Never (JobSet's webhook would default OnFailure, which the Job API refuses with a
    podFailurePolicy), so a crash is a failed pod, retried by the Job up to JOB_BACKOFF_LIMIT.
    `checkpoint_ca`: the store has a private CA (ConfigMap training/checkpoint-ca): mounted read-only at
    CHECKPOINT_CA_DIR, where the store's AWS_CA_BUNDLE (ConfigMap checkpoint-store) points."""
    if grace_seconds < 0:
        raise ValueError(f"checkpoint grace period {grace_seconds}s: must be at least 0")
    container: dict[str, Any] = {"name": "node", "image": TORCH_RUNTIME_IMAGE, "env": gpu_driver_env(cloud)}
    volumes: dict[str, Any] = {}
    if checkpoint_ca:
        container["volumeMounts"] = [{"name": CHECKPOINT_CA_CONFIGMAP, "mountPath": CHECKPOINT_CA_DIR, "readOnly": True}]
        volumes = {"volumes": [{"name": CHECKPOINT_CA_CONFIGMAP, "configMap": {
            "name": CHECKPOINT_CA_CONFIGMAP, "items": [{"key": CHECKPOINT_CA_KEY, "path": CHECKPOINT_CA_KEY}]}}]}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": CHECKPOINTED_RUNTIME,
                     "labels": {"trainer.kubeflow.org/framework": "torch", **MANAGED_BY}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {
                "failurePolicy": render_jobset_failure_policy(),
                "replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {TRAINER_ANCESTOR_LABEL: "trainer"}},
                        "spec": {
                            "backoffLimit": JOB_BACKOFF_LIMIT,
                            "podFailurePolicy": render_pod_failure_policy("node"),
                            # Scale-down never evicts a running trainer (cluster.SCALE_DOWN_PROTECTION).
                            "template": {"metadata": {"annotations": not_evicted_by_scale_down(autoscaler)}, "spec": {
                                "restartPolicy": "Never",
                                "serviceAccountName": TRAINING_SERVICE_ACCOUNT,
                                "terminationGracePeriodSeconds": grace_seconds,
                                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                                    "seccompProfile": {"type": "RuntimeDefault"}},
                                "containers": [container],
                                **volumes,
                            }},
                        },
                    },
                }],
            }},
        },
    }


def trainer_values() -> dict[str, Any]:
    """Values of the kubeflow-trainer chart: CRDs, JobSet, and the default training runtimes."""
    return {
        "crds": {"enabled": True},
        "jobset": {"install": True},
        "runtimes": {"defaultEnabled": True},
        "manager": {
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        },
        "webhook": {"failurePolicy": "Fail"},
        "dataCache": {"enabled": False},
    }


def render_priority_patch(deployment: str, namespace: str = TRAINER_NAMESPACE) -> dict[str, Any]:
    """A server-side-apply patch (apps/v1 DeploymentPatch) putting a chart's Deployment, which its chart
    gives no priorityClassName value, at the platform's PriorityClass. Only the one field: the chart
    keeps owning the rest."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment, "namespace": namespace},
        "spec": {"template": {"spec": {"priorityClassName": PLATFORM_PRIORITY_CLASS}}},
    }


# Who may open a connection to the databases and the artifact store of Pipelines and Katib, by the labels the
# pinned manifests give their pods (pipelines 2.17.0 platform-agnostic, katib-standalone v0.19.0; ../shared/charts/
# kustomize). Both MySQLs let root in from any address (Pipelines: MYSQL_ALLOW_EMPTY_PASSWORD, no password;
# Katib: the password `test` of its Secret katib-mysql-secrets, which the manifest ships), and upstream installs no
# NetworkPolicy for them: a notebook or a training pod on a CNI with upstream semantics (z2jh's privateIPs
# ipBlock, training-egress's 0.0.0.0/0) reached both. Only the servers whose pods carry the database's
# settings (DBCONFIG_* / MYSQL_HOST env) are let in.
PIPELINES_MYSQL = {"app": "mysql", "application-crd-id": "kubeflow-pipelines"}
KATIB_MYSQL = {"katib.kubeflow.org/component": "mysql"}
MYSQL_PORT = 3306
MYSQL_CLIENTS: dict[str, tuple[tuple[str, dict[str, str]], ...]] = {
    "pipelines-mysql-clients": (
        ("the Pipelines API server (Deployment ml-pipeline: DBCONFIG_*)", {"app": "ml-pipeline"}),
        ("ML Metadata (Deployment metadata-grpc-deployment: MYSQL_HOST, --mysql_config_host)",
         {"component": "metadata-grpc-server"}),
        # The overlay drops the v1 cache server (kustomize/pipelines/kustomization.yaml); a later overlay that
        # restores it (it reads DBCONFIG_* too) keeps its database.
        ("the v1 cache server (Deployment cache-server: DBCONFIG_*)", {"app": "cache-server"}),
    ),
    "katib-mysql-clients": (
        ("Katib's DB manager (Deployment katib-db-manager: DB_NAME mysql, DB_PASSWORD)",
         {"katib.kubeflow.org/component": "db-manager"}),
    ),
}
# Pipelines' artifact store: SeaweedFS's S3 API (Service seaweedfs port 9000 -> container port 8333; ml-pipeline's
# OBJECTSTORECONFIG_HOST seaweedfs.kubeflow, OBJECTSTORECONFIG_PORT 9000). Upstream's NetworkPolicy `seaweedfs`
# admits pods of `kubeflow`, of namespaces labelled app.kubernetes.io/part-of=kubeflow-profile and of istio-system
# only: a notebook in `jupyterhub` could not read a run's artifacts.
ARTIFACT_STORE = {"app": "seaweedfs"}
ARTIFACT_STORE_S3_PORT = 8333


def render_database_policies() -> list[dict[str, Any]]:
    """One ingress NetworkPolicy per MySQL of `kubeflow`: port 3306 from the servers of MYSQL_CLIENTS only, so
    nothing else (a notebook, a training pod, a pipeline step, a Katib trial) reaches a passwordless root. Kept
    closed on every CNI that enforces NetworkPolicies: the ingress side is selected by pod labels, which Cilium
    and upstream CNIs apply alike (preflight's flow check declares these flows `denied`)."""
    out = []
    for name, selector in (("pipelines-mysql-clients", PIPELINES_MYSQL), ("katib-mysql-clients", KATIB_MYSQL)):
        out.append({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": KUBEFLOW_NAMESPACE, "labels": dict(MANAGED_BY)},
            "spec": {
                "podSelector": {"matchLabels": dict(selector)},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [{"podSelector": {"matchLabels": dict(labels)}} for _w, labels in MYSQL_CLIENTS[name]],
                             "ports": [{"port": MYSQL_PORT, "protocol": "TCP"}]}],
            },
        })
    return out


def render_artifact_store_policy() -> dict[str, Any]:
    """Notebook servers (namespace jupyterhub) to the artifact store's S3 port, on top of upstream's `seaweedfs`
    policy (NetworkPolicies add up): a notebook reads and writes a run's artifacts where kfp.Client() put them.
    The notebooks' egress names the same pods and port (notebooks.NOTEBOOK_SERVICES)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "seaweedfs-from-notebooks", "namespace": KUBEFLOW_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {
            "podSelector": {"matchLabels": dict(ARTIFACT_STORE)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": JUPYTERHUB_NAMESPACE}},
                                   "podSelector": {"matchLabels": dict(NOTEBOOK_POD_LABELS)}}],
                         "ports": [{"port": ARTIFACT_STORE_S3_PORT, "protocol": "TCP"}]}],
        },
    }


def render_kubeflow_namespace() -> dict[str, Any]:
    """The namespace Pipelines and Katib share, owned here (both upstream installs ship one):
    Pipelines' Pod Security level (baseline). Not Katib's metrics-collector label, which Katib's copy
    carries: its pod webhook (failurePolicy Fail) would then intercept every pod created here,
    Pipelines' and Katib's own included, and refuse them until Katib serves. Trials run in `training`,
    which carries the label.

    The queue's label: Pipelines' run pods execute here, so a GPU step is a pod Kueue's pod integration
    queues (it carries the queue-name label, kfp.kubernetes.add_pod_label, and waits gated for the
    ClusterQueue's GPU quota). Its LocalQueue is `gpu-queue` (queue.JobQueue); no `default` one: Kueue would
    label every unlabelled pod of the namespace with it, Pipelines' own servers included, and hold them
    for GPU-pool quota; without one, pods without the label pass Kueue's webhook untouched."""
    return render_namespace(KUBEFLOW_NAMESPACE, "baseline", {QUEUE_NAMESPACE_LABEL: QUEUE_NAMESPACE_VALUE})


# Pod-spec fields of a TrainJob's runtimePatches that Kueue v0.19.2 drops when it admits the TrainJob
# (it rewrites the object with Trainer v2.2.1 types; these are new in v2.3.0): the JobSet update that
# follows is refused and the job never starts (see the module docstring). preflight's
# fit/pods.py KUEUE_DROPPED_POD_PATCH_FIELDS names the same (a test keeps them equal).
KUEUE_DROPPED_POD_PATCH_FIELDS = ("terminationGracePeriodSeconds",)
KUEUE_PATCH_POLICY = "trainjob-patches-kueue-keeps"


def _patch_has(field: str) -> str:
    ps = "p.trainingRuntimeSpec.template.spec"
    pod = "r.template.spec.template.spec"
    return (f"object.spec.runtimePatches.exists(p, has(p.trainingRuntimeSpec) && has(p.trainingRuntimeSpec.template) && "
            f"has({ps}) && has({ps}.replicatedJobs) && {ps}.replicatedJobs.exists(r, has(r.template) && "
            f"has(r.template.spec) && has(r.template.spec.template) && has({pod}) && has({pod}.{field})))")


def render_kueue_patch_policy(grace_seconds: int = CHECKPOINT_GRACE_SECONDS) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy refusing, in the queue's namespaces, a TrainJob whose runtimePatches
    set a pod-spec field Kueue v0.19.2 drops on admission (terminationGracePeriodSeconds): such a job
    would be queued, admitted and then never get a pod. The message names the platform's
    `torch-checkpointed` runtime, whose pod template carries the checkpoint grace period."""
    validations = [{
        "expression": f"!has(object.spec.runtimePatches) || !({_patch_has(f)})",
        "message": (f"this TrainJob sets {f} in runtimePatches: Kueue (built against Trainer v2.2.1) drops it when "
                    f"it admits the job, and the job then never starts. Use runtimeRef {{kind: ClusterTrainingRuntime, "
                    f"name: {CHECKPOINTED_RUNTIME}}} instead: its pod template carries a {grace_seconds} s "
                    f"grace period (see examples/training/trainjob-checkpointed.yaml)"),
        "reason": "Invalid",
    } for f in KUEUE_DROPPED_POD_PATCH_FIELDS]
    return render_admission_policy(KUEUE_PATCH_POLICY, {
        "matchConstraints": {
            "namespaceSelector": QUEUE_NAMESPACE_SELECTOR,
            "resourceRules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                               "operations": ["CREATE"], "resources": ["trainjobs"]}]},
        "validations": validations,
    })


def _deployment_patch(name: str, patch: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    return k8s.apps.v1.DeploymentPatch(name, metadata=patch["metadata"], spec=patch["spec"], opts=opts)


# The kustomize installs whose upstream manifests hold PersistentVolumeClaims without a class (Katib's MySQL;
# Pipelines' MySQL and SeaweedFS artifact store): tests/test_kubeflow_storage.py keeps this the list that renders any.
OVERLAYS_WITH_CLAIMS = ("katib-standalone", "pipelines-platform-agnostic")


@dataclass
class KubeflowArgs:
    cluster: ClusterHandle
    # Kueue queues the training namespace's TrainJobs: refuse those it would break (render_kueue_patch_policy).
    queued: bool = False
    # The platform's PriorityClass (common.render_priority_class): the priority patches wait for it.
    priority_class: Optional[pulumi.Resource] = None


class Kubeflow(pulumi.ComponentResource):
    def __init__(self, name: str, args: KubeflowArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:Kubeflow", name, None, opts)
        cluster = self._cluster = args.cluster
        self._name = name
        ns = apply_object(f"{name}-trainer-namespace", render_namespace(TRAINER_NAMESPACE, "baseline"),
                          k8s_opts(cluster, self))
        self.trainer = helm_release(f"{name}-trainer", TRAINER_RELEASE, versions.KUBEFLOW_TRAINER,
                                    TRAINER_NAMESPACE, trainer_values(), k8s_opts(cluster, self, [ns]))
        # The chart has no value for it: patch its controllers' pods to the platform's priority.
        self._priority = [args.priority_class] if args.priority_class is not None else []
        self.priority_patches = [
            _deployment_patch(f"{name}-{dep}-priority", render_priority_patch(dep),
                              k8s_opts(cluster, self, [self.trainer, *self._priority]))
            for dep in TRAINER_PLATFORM_DEPLOYMENTS]
        # After the release: its CRDs and its validating webhook for runtimes.
        self.checkpointed_runtime = apply_object(f"{name}-checkpointed-runtime", render_checkpointed_runtime(
            cloud=cluster.cloud, checkpoint_ca=cluster.checkpoint.ca_bundle is not None, autoscaler=cluster.autoscaler),
                                                 k8s_opts(cluster, self, [self.trainer]))
        self.kubeflow_namespace = apply_object(f"{name}-namespace", render_kubeflow_namespace(),
                                               k8s_opts(cluster, self))
        self.patch_policy = self.patch_binding = None
        if args.queued:
            self.patch_policy = apply_object(f"{name}-kueue-patch-policy", render_kueue_patch_policy(),
                                             k8s_opts(cluster, self, [self.trainer]))
            self.patch_binding = apply_object(f"{name}-kueue-patch-binding", render_policy_binding(KUEUE_PATCH_POLICY),
                                              k8s_opts(cluster, self, [self.patch_policy]))
        self.pipelines_cluster = self.pipelines = self.katib = None
        self.register_outputs({"trainerNamespace": TRAINER_NAMESPACE, "runtimes": [*DEFAULT_RUNTIMES, CHECKPOINTED_RUNTIME]})

    def install_apps(self, after: Sequence[pulumi.Resource] = ()) -> None:
        """Pipelines and Katib, in `kubeflow`, after `after`: Kueue when the queue is on (its pod webhook
        fails closed and covers `kubeflow`, so their pods wait for it to serve; Kueue itself waits for
        the Trainer above, hence a second step the platform calls once Kueue exists)."""
        cluster, name = self._cluster, self._name
        # The air-gapped option ($GPU_PLATFORM_LOCAL_CHARTS): the same overlays on the pinned targets' built YAML;
        # the installs with databases get their claims on the cluster's class (claims_on).
        overlays = {key: local_kustomize(PACKAGE_DIR / path, cluster.default_storage_class if key in OVERLAYS_WITH_CLAIMS
                                         else None) or program_relative(path)
                    for key, path in versions.KUSTOMIZE_OVERLAYS.items()}
        dirname = {key: f"{name}-{suffix}" for key, suffix in versions.KUSTOMIZE_DIRECTORY_NAMES.items()}
        self.pipelines_cluster = kustomize.Directory(
            dirname["pipelines-cluster-scoped"], directory=overlays["pipelines-cluster-scoped"],
            opts=k8s_opts(cluster, self, [self.kubeflow_namespace]))
        self.pipelines = kustomize.Directory(
            dirname["pipelines-platform-agnostic"], directory=overlays["pipelines-platform-agnostic"],
            opts=k8s_opts(cluster, self, [self.kubeflow_namespace, self.pipelines_cluster, *self._priority, *after]))
        self.katib = kustomize.Directory(
            dirname["katib-standalone"], directory=overlays["katib-standalone"],
            opts=k8s_opts(cluster, self, [self.kubeflow_namespace, *self._priority, *after]))
        # Before the databases start: who may reach them, and the notebooks' way to the artifact store.
        self.network_policies = [
            apply_object(f"{name}-{p['metadata']['name']}", p, k8s_opts(cluster, self, [self.kubeflow_namespace]))
            for p in [*render_database_policies(), render_artifact_store_policy()]]
