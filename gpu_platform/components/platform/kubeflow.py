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

Resource needs (upstream defaults): Trainer + JobSet controllers ~0.2 CPU / 0.5 GiB; Katib
(controller, DB manager, MySQL 10 GiB PVC, UI) ~1 CPU / 2 GiB; Pipelines (API server, Argo, MySQL
20 GiB PVC, SeaweedFS 20 GiB PVC, UI, cache, metadata) ~2.5 CPU / 6 GiB. All run on CPU nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.kustomize import v2 as kustomize

from gpu_platform.components.cluster import TRAINING_SERVICE_ACCOUNT, ClusterHandle
from gpu_platform.components.paths import program_relative
from gpu_platform.components.platform import versions
from gpu_platform.components.platform.common import (
    KUBEFLOW_NAMESPACE, TRAINER_NAMESPACE, apply_object, helm_release, k8s_opts,
    MANAGED_BY, render_namespace,
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


def render_checkpointed_runtime(grace_seconds: int = CHECKPOINT_GRACE_SECONDS) -> dict[str, Any]:
    """torch-distributed plus what a job that survives preemption needs, in the JobSet's pod template:
    the training ServiceAccount (bound to the checkpoint bucket by Workload Identity / IRSA; Linode
    reads keys from a Secret), `grace_seconds` to write a checkpoint after SIGTERM (GKE Spot's graceful
    node shutdown gives up to 120 s where the stack enables it, an AWS Spot interruption 2 min), and a
    non-root, RuntimeDefault-seccomp pod (UID 10001, the example image's user). Disruptions are not
    failures (render_pod_failure_policy, render_jobset_failure_policy); podFailurePolicy needs
    restartPolicy Never (JobSet's webhook would default OnFailure, which the Job API refuses with a
    podFailurePolicy), so a crash is a failed pod, retried by the Job up to JOB_BACKOFF_LIMIT."""
    if grace_seconds < 0:
        raise ValueError(f"checkpoint grace period {grace_seconds}s: must be at least 0")
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
                            "template": {"spec": {
                                "restartPolicy": "Never",
                                "serviceAccountName": TRAINING_SERVICE_ACCOUNT,
                                "terminationGracePeriodSeconds": grace_seconds,
                                "securityContext": {"runAsNonRoot": True, "runAsUser": 10001,
                                                    "seccompProfile": {"type": "RuntimeDefault"}},
                                "containers": [{"name": "node", "image": TORCH_RUNTIME_IMAGE}],
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


def render_kubeflow_namespace() -> dict[str, Any]:
    """The namespace Pipelines and Katib share, owned here (both upstream installs ship one):
    Pipelines' Pod Security level (baseline). Not Katib's metrics-collector label, which Katib's copy
    carries: its pod webhook (failurePolicy Fail) would then intercept every pod created here,
    Pipelines' and Katib's own included, and refuse them until Katib serves. Trials run in `training`,
    which carries the label."""
    return render_namespace(KUBEFLOW_NAMESPACE, "baseline")


@dataclass
class KubeflowArgs:
    cluster: ClusterHandle


class Kubeflow(pulumi.ComponentResource):
    def __init__(self, name: str, args: KubeflowArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:Kubeflow", name, None, opts)
        cluster = args.cluster
        ns = apply_object(f"{name}-trainer-namespace", render_namespace(TRAINER_NAMESPACE, "baseline"),
                          k8s_opts(cluster, self))
        self.trainer = helm_release(f"{name}-trainer", "kubeflow-trainer", versions.KUBEFLOW_TRAINER,
                                    TRAINER_NAMESPACE, trainer_values(), k8s_opts(cluster, self, [ns]))
        # After the release: its CRDs and its validating webhook for runtimes.
        self.checkpointed_runtime = apply_object(f"{name}-checkpointed-runtime", render_checkpointed_runtime(),
                                                 k8s_opts(cluster, self, [self.trainer]))
        self.kubeflow_namespace = apply_object(f"{name}-namespace", render_kubeflow_namespace(),
                                               k8s_opts(cluster, self))
        overlays = {key: program_relative(path) for key, path in versions.KUSTOMIZE_OVERLAYS.items()}
        self.pipelines_cluster = kustomize.Directory(
            f"{name}-pipelines-cluster-scoped", directory=overlays["pipelines-cluster-scoped"],
            opts=k8s_opts(cluster, self, [self.kubeflow_namespace]))
        self.pipelines = kustomize.Directory(
            f"{name}-pipelines", directory=overlays["pipelines-platform-agnostic"],
            opts=k8s_opts(cluster, self, [self.kubeflow_namespace, self.pipelines_cluster]))
        self.katib = kustomize.Directory(
            f"{name}-katib", directory=overlays["katib-standalone"],
            opts=k8s_opts(cluster, self, [self.kubeflow_namespace]))
        self.register_outputs({"trainerNamespace": TRAINER_NAMESPACE, "runtimes": [*DEFAULT_RUNTIMES, CHECKPOINTED_RUNTIME]})
