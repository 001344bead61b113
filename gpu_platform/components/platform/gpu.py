"""GPU enablement: the NVIDIA device plugin where the cloud does not run one, and the DCGM exporter.

Both run only on GPU nodes (required node affinity on the pools' selectors) and tolerate exactly
the GPU pools' taints, so nothing else lands on a GPU node by accident.

DCGM on GKE: GKE has no NVIDIA container runtime; it mounts the driver (installed under
/home/kubernetes/bin/nvidia) and the /dev/nvidia* devices only into containers that request a GPU.
The exporter requests none (it must not hold a GPU), so it mounts the driver itself and runs
privileged to see the devices, as Google's DCGM exporter manifest for GKE does
(GoogleCloudPlatform/prometheus-engine examples/nvidia-dcgm/exporter.yaml, referenced by
cloud.google.com/stackdriver/docs/managed-prometheus/exporters/nvidia-dcgm): hostPath
/home/kubernetes/bin/nvidia at /usr/local/nvidia, LD_LIBRARY_PATH=/usr/local/nvidia/lib64, and
DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE=device-name because GKE's device plugin names GPUs nvidia0..N
(not UUIDs) in the kubelet's pod-resources API, which is how the exporter finds the pod holding a GPU.
On Linode and EKS the NVIDIA container toolkit injects the driver; the chart's defaults apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi

from gpu_platform.components.cluster import DEVICE_LIST_STRATEGY, ClusterHandle, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    GPU_NAMESPACE, apply_object, helm_release, k8s_opts, pool_node_affinity, render_namespace, unique_tolerations,
)

DCGM_RELEASE = "dcgm-exporter"
DCGM_METRICS_PORT = 9400
# Labels of the DCGM exporter's Service (the chart's selector labels), for the ServiceMonitor.
DCGM_SERVICE_LABELS = {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": DCGM_RELEASE}
GKE_DRIVER_HOST_PATH = "/home/kubernetes/bin/nvidia"
GKE_DRIVER_MOUNT = "/usr/local/nvidia"
# The chart's own extraVolumeMounts default (its counters file); a list value replaces it, so keep it.
_CHART_COUNTERS_MOUNT = {"name": "exporter-metrics-volume", "mountPath": "/etc/dcgm-exporter/default-counters.csv",
                         "subPath": "default-counters.csv"}


# The environment a GPU container needs for the cloud's driver install to reach CUDA:
# - GKE: no NVIDIA container runtime; GKE's device plugin (GoogleCloudPlatform/container-engine-accelerators
#   cmd/nvidia_gpu: "-host-path ... -container-path /usr/local/nvidia/lib64") mounts the host's driver
#   libraries at /usr/local/nvidia in containers that request a GPU, and nothing puts that folder on
#   the loader's path: an image without LD_LIBRARY_PATH (python:*-slim + PyPI torch, the example's)
#   finds no libcuda.so.1 and torch silently sees no GPU.
# - Linode, EKS: the NVIDIA container toolkit's hook injects the driver libraries into the loader's
#   path, for the capabilities NVIDIA_DRIVER_CAPABILITIES names; unset it means "utility,compute"
#   (nvidia-container-toolkit internal/config/image/capabilities.go DefaultDriverCapabilities), but an
#   image may set it narrower ("utility": nvidia-smi without CUDA), so it is set explicitly.
GPU_DRIVER_ENV = {
    "gcp": (("LD_LIBRARY_PATH", f"{GKE_DRIVER_MOUNT}/lib64"),),
    "linode": (("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),),
    "aws": (("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),),
    # A cluster the stack does not create: its GPU nodes are expected to run the NVIDIA container toolkit (the GPU
    # operator or a host install, docs/quickstart-kubernetes.md), which injects the driver as on Linode and EKS.
    "kubernetes": (("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),),
}


def gpu_driver_env(cloud: str) -> list[dict[str, str]]:
    """The container env (Kubernetes EnvVar list) that lets a CUDA program in any image reach the
    driver `cloud` installs (GPU_DRIVER_ENV). A pod's env replaces the image's variable of the same
    name, so an image that needs more on LD_LIBRARY_PATH sets it in its TrainJob's env (Trainer upserts
    the TrainJob's env over the runtime's by name)."""
    if cloud not in GPU_DRIVER_ENV:
        raise ValueError(f"cloud {cloud!r}: no GPU driver environment known (known: {', '.join(sorted(GPU_DRIVER_ENV))})")
    return [{"name": n, "value": v} for n, v in GPU_DRIVER_ENV[cloud]]


def _require_pools(pools: Sequence[GpuPoolSpec]) -> None:
    if not pools:
        raise ValueError("GPU enablement needs at least one GPU pool")


def device_plugin_values(pools: Sequence[GpuPoolSpec]) -> dict[str, Any]:
    """Values of the nvidia-device-plugin chart: on GPU pool nodes only, tolerating their taints."""
    _require_pools(pools)
    return {
        "affinity": pool_node_affinity(pools),
        "tolerations": unique_tolerations(pools),
        "gfd": {"enabled": False},
        "nfd": {"enabled": False},
        "priorityClassName": "system-node-critical",
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        # Allocations as volume mounts, which the nodes' toolkit alone trusts (EKS: gpu_asg.render_gpu_node_script).
        "deviceListStrategy": DEVICE_LIST_STRATEGY,
    }


def dcgm_exporter_values(pools: Sequence[GpuPoolSpec], cloud: str = "linode") -> dict[str, Any]:
    """Values of the dcgm-exporter chart. The ServiceMonitor is the monitoring part's (it needs the
    Prometheus Operator CRDs); the exporter maps each GPU to the pod holding it (pod/namespace labels).
    On GKE it mounts the host's driver (module docstring)."""
    _require_pools(pools)
    values: dict[str, Any] = {
        "affinity": pool_node_affinity(pools),
        "tolerations": unique_tolerations(pools),
        "serviceMonitor": {"enabled": False},
        "service": {"enable": True, "port": DCGM_METRICS_PORT},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}},
    }
    if cloud == "gcp":
        values.update({
            "extraHostVolumes": [{"name": "nvidia-install-dir-host", "hostPath": GKE_DRIVER_HOST_PATH}],
            "extraVolumeMounts": [_CHART_COUNTERS_MOUNT, {"name": "nvidia-install-dir-host",
                                                          "mountPath": GKE_DRIVER_MOUNT, "readOnly": True}],
            "extraEnv": [{"name": "LD_LIBRARY_PATH", "value": f"{GKE_DRIVER_MOUNT}/lib64"},
                         {"name": "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "value": "device-name"}],
            # privileged (devices are not mounted without a GPU request); a privileged container
            # cannot also set allowPrivilegeEscalation: false (the chart's default), and needs no
            # added capability.
            "securityContext": {"privileged": True, "allowPrivilegeEscalation": True, "capabilities": None,
                                "runAsNonRoot": False, "runAsUser": 0},
        })
    return values


@dataclass
class GpuEnablementArgs:
    cluster: ClusterHandle


class GpuEnablement(pulumi.ComponentResource):
    """Device plugin (only if the cluster has none) + DCGM exporter, in the gpu-system namespace."""

    def __init__(self, name: str, args: GpuEnablementArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:GpuEnablement", name, None, opts)
        cluster = args.cluster
        ns = apply_object(f"{name}-namespace", render_namespace(GPU_NAMESPACE, "privileged"), k8s_opts(cluster, self))
        self.namespace = GPU_NAMESPACE
        self.device_plugin = None
        if not cluster.gpu_device_plugin_installed:
            self.device_plugin = helm_release(
                f"{name}-device-plugin", "nvidia-device-plugin", versions.NVIDIA_DEVICE_PLUGIN, GPU_NAMESPACE,
                device_plugin_values(cluster.gpu_pools), k8s_opts(cluster, self, [ns]))
        self.dcgm_exporter = helm_release(
            f"{name}-dcgm-exporter", DCGM_RELEASE, versions.DCGM_EXPORTER, GPU_NAMESPACE,
            dcgm_exporter_values(cluster.gpu_pools, cluster.cloud),
            k8s_opts(cluster, self, [ns] + ([self.device_plugin] if self.device_plugin else [])))
        self.ready = [r for r in (self.device_plugin, self.dcgm_exporter) if r is not None]
        self.register_outputs({"namespace": GPU_NAMESPACE,
                               "devicePluginInstalledHere": self.device_plugin is not None})
