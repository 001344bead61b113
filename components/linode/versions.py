"""Every version the Linode cluster installs, pinned in one place (listed in the README)."""

from components.helm import Chart
from components.platform.versions import NVIDIA_DEVICE_PLUGIN

# kubeadm/kubelet/kubectl from pkgs.k8s.io, one patch release per supported minor.
KUBERNETES_PATCH = {
    "1.31": "1.31.14",
    "1.32": "1.32.10",
    "1.33": "1.33.6",
    "1.34": "1.34.2",
}
# Debian revision of the pkgs.k8s.io packages.
KUBERNETES_DEB_REVISION = "1.1"

# NVIDIA server driver branch (Ubuntu's signed, precompiled-capable -server packages) and the
# container toolkit that wires it into containerd.
NVIDIA_DRIVER_BRANCH = "570"
NVIDIA_CONTAINER_TOOLKIT = "1.17.8-1"

# Helm charts installed through the cluster's Kubernetes provider.
CILIUM_CHART = Chart("cilium", "1.18.2", "https://helm.cilium.io")
CALICO_CHART = Chart("tigera-operator", "v3.30.3", "https://docs.tigera.io/calico/charts")
LINODE_CCM_CHART = Chart("ccm-linode", "v0.7.1", "https://linode.github.io/linode-cloud-controller-manager/")
LINODE_CSI_CHART = Chart("linode-blockstorage-csi-driver", "v1.0.6",
                         "https://linode.github.io/linode-blockstorage-csi-driver/")
# Same chart and version the platform layer installs on other clouds (one pin, in platform/versions.py).
NVIDIA_DEVICE_PLUGIN_CHART = NVIDIA_DEVICE_PLUGIN


def kubernetes_package_version(minor: str) -> str:
    """The apt version string of kubeadm/kubelet/kubectl for a Kubernetes minor (e.g. 1.33.6-1.1)."""
    return f"{KUBERNETES_PATCH[minor]}-{KUBERNETES_DEB_REVISION}"
