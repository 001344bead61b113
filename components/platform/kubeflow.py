"""Kubeflow: Trainer v2 (Helm, with its default ClusterTrainingRuntimes), Katib standalone for
hyperparameter search, and Kubeflow Pipelines standalone.

Katib and Pipelines ship as kustomizations at pinned upstream tags; they are applied by the
Kubernetes provider at `pulumi up` (never at test time; under preflight's mocks they are registered
components, not expanded). Order, as the upstream docs require: Pipelines' cluster-scoped resources
(CRDs, the `kubeflow` namespace) before its platform-agnostic env; Katib after that namespace exists.

Resource needs (upstream defaults): Trainer + JobSet controllers ~0.2 CPU / 0.5 GiB; Katib
(controller, DB manager, MySQL 10 GiB PVC, UI) ~1 CPU / 2 GiB; Pipelines (API server, Argo, MySQL
20 GiB PVC, SeaweedFS 20 GiB PVC, UI, cache, metadata) ~2.5 CPU / 6 GiB. All run on CPU nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes.kustomize import v2 as kustomize

from components.cluster import ClusterHandle
from components.platform import versions
from components.platform.common import (
    TRAINER_NAMESPACE, apply_object, helm_release, k8s_opts, render_namespace,
)

# The ClusterTrainingRuntimes the chart's installer applies (runtimes.defaultEnabled).
DEFAULT_RUNTIMES = ("torch-distributed", "deepspeed-distributed", "mlx-distributed", "jax-distributed",
                    "torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b",
                    "xgboost-distributed")


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
        self.pipelines_cluster = kustomize.Directory(
            f"{name}-pipelines-cluster-scoped", directory=versions.PIPELINES_CLUSTER_SCOPED,
            opts=k8s_opts(cluster, self))
        self.pipelines = kustomize.Directory(
            f"{name}-pipelines", directory=versions.PIPELINES_PLATFORM_AGNOSTIC,
            opts=k8s_opts(cluster, self, [self.pipelines_cluster]))
        # Katib and Pipelines both ship the `kubeflow` Namespace: apply Katib second, so its copy
        # is a server-side-apply update of the existing namespace rather than a racing create.
        self.katib = kustomize.Directory(
            f"{name}-katib", directory=versions.KATIB_STANDALONE,
            opts=k8s_opts(cluster, self, [self.pipelines]))
        self.register_outputs({"trainerNamespace": TRAINER_NAMESPACE, "runtimes": list(DEFAULT_RUNTIMES)})
