"""Every chart, manifest source and image the ML platform installs, pinned in one place.

Bump a version here (and in the pinned-versions table in docs/versions.md); when Kueue or Kubeflow Trainer
move, validate against that release's CRDs (../shared/crds/<project>-<version>/).
"""

from __future__ import annotations

from gpu_platform.data.chart import Chart


# --- GPU enablement -----------------------------------------------------------------------------
NVIDIA_DEVICE_PLUGIN = Chart("nvidia-device-plugin", "0.20.0", "https://nvidia.github.io/k8s-device-plugin")
DCGM_EXPORTER = Chart("dcgm-exporter", "4.8.2", "https://nvidia.github.io/dcgm-exporter/helm-charts")

# --- Job queue ----------------------------------------------------------------------------------
KUEUE = Chart("oci://registry.k8s.io/kueue/charts/kueue", "0.19.2")
KUEUE_CRDS = "kueue-v0.19.2"  # folder in ../shared/crds the rendered objects validate against

# --- Kubeflow -----------------------------------------------------------------------------------
KUBEFLOW_TRAINER = Chart("oci://ghcr.io/kubeflow/charts/kubeflow-trainer", "2.3.0")
TRAINER_CRDS = "kubeflow-trainer-v2.3.0"
KATIB_VERSION = "v0.19.0"
# kustomize remote targets in the form the upstream install docs use (`kubectl apply -k ...?ref=`).
KATIB_STANDALONE = f"github.com/kubeflow/katib.git/manifests/v1beta1/installs/katib-standalone?ref={KATIB_VERSION}"
PIPELINES_VERSION = "2.17.0"
PIPELINES_CLUSTER_SCOPED = f"github.com/kubeflow/pipelines/manifests/kustomize/cluster-scoped-resources?ref={PIPELINES_VERSION}"
PIPELINES_PLATFORM_AGNOSTIC = f"github.com/kubeflow/pipelines/manifests/kustomize/env/platform-agnostic?ref={PIPELINES_VERSION}"

# --- Notebooks ----------------------------------------------------------------------------------
JUPYTERHUB = Chart("jupyterhub", "4.4.0", "https://hub.jupyter.org/helm-chart/")
NOTEBOOK_CPU_IMAGE = ("quay.io/jupyter/scipy-notebook", "python-3.13")
NOTEBOOK_GPU_IMAGE = ("quay.io/jupyter/pytorch-notebook", "cuda12-python-3.13")

# --- Monitoring ---------------------------------------------------------------------------------
KUBE_PROMETHEUS_STACK = Chart("kube-prometheus-stack", "88.5.3", "https://prometheus-community.github.io/helm-charts")

ALL_CHARTS: dict[str, Chart] = {
    "nvidia-device-plugin": NVIDIA_DEVICE_PLUGIN,
    "dcgm-exporter": DCGM_EXPORTER,
    "kueue": KUEUE,
    "kubeflow-trainer": KUBEFLOW_TRAINER,
    "jupyterhub": JUPYTERHUB,
    "kube-prometheus-stack": KUBE_PROMETHEUS_STACK,
}
# What the program applies: local overlays shipped in this package (paths relative to the package; the
# program names them relative to its folder, components/paths.py) whose only resource is the pinned
# remote target above, with patches (see each kustomization.yaml).
KUSTOMIZE_OVERLAYS: dict[str, str] = {
    "katib-standalone": "components/platform/kustomize/katib",
    "pipelines-cluster-scoped": "components/platform/kustomize/pipelines-cluster-scoped",
    "pipelines-platform-agnostic": "components/platform/kustomize/pipelines",
}
# The name each install's kustomize Directory ends with (`<Kubeflow component's name>-<this>`): the policy pack
# leaves their workloads' images to the pinned release (policies/security_rules.py PINNED_INSTALL_PARENTS).
KUSTOMIZE_DIRECTORY_NAMES: dict[str, str] = {
    "katib-standalone": "katib",
    "pipelines-cluster-scoped": "pipelines-cluster-scoped",
    "pipelines-platform-agnostic": "pipelines",
}
KUSTOMIZE_SOURCES: dict[str, str] = {
    "katib-standalone": KATIB_STANDALONE,
    "pipelines-cluster-scoped": PIPELINES_CLUSTER_SCOPED,
    "pipelines-platform-agnostic": PIPELINES_PLATFORM_AGNOSTIC,
}
