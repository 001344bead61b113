"""Every version the Linode cluster installs, pinned in one place (listed in docs/versions.md)."""

from gpu_platform.components.helm import Chart
from gpu_platform.components.platform.versions import NVIDIA_DEVICE_PLUGIN

# kubeadm/kubelet/kubectl from pkgs.k8s.io, one patch release per minor. Which minors a stack may
# use on a given day comes from the dated calendar (gpu_platform/costs/catalog/kubernetes-versions.yaml, upstream
# rows); every minor it allows must have a pin here (tests/test_linode_versions.py checks it).
# Source: the latest patch per release branch as tracked by endoflife.date (products/kubernetes.md,
# commit a70eca337600e7d721dc48112c271f98661d208b of 2026-08-22, from the kubernetes/kubernetes tags
# and https://kubernetes.io/releases/patch-releases/), retrieved 2026-11-23.
KUBERNETES_PATCHES_RETRIEVED = "2026-11-23"
KUBERNETES_PATCH = {
    "1.31": "1.31.14",
    "1.32": "1.32.13",
    "1.33": "1.33.13",
    "1.34": "1.34.11",
    "1.35": "1.35.8",
    "1.36": "1.36.4",
}
# Debian revision of the pkgs.k8s.io packages (https://pkgs.k8s.io/core:/stable:/v<minor>/deb/: every
# release of the current build pipeline is published as <patch>-1.1).
KUBERNETES_DEB_REVISION = "1.1"

# NVIDIA server driver branch: Ubuntu's signed, precompiled kernel modules
# (linux-modules-nvidia-<branch>-server-<kernel release>, source linux-restricted-modules) plus the
# no-DKMS userspace. 580 is the current -server branch on noble; 570-server is now a transitional
# package to it (packages.ubuntu.com, source nvidia-graphics-drivers-580-server, retrieved 2026-11-23).
NVIDIA_DRIVER_BRANCH = "580"
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
