"""Every version the Linode cluster installs, pinned in one place (listed in docs/versions.md)."""

from typing import Optional

from gpu_platform.data.chart import Chart
from gpu_platform.data.platform_versions import NVIDIA_DEVICE_PLUGIN
from gpu_platform.data.versions_calendar import load_calendar

# kubeadm/kubelet/kubectl from pkgs.k8s.io, one patch release per minor. Which minors a stack may
# use on a given day comes from the dated calendar (gpu_platform/costs/catalog/kubernetes-versions.yaml, upstream
# rows); every minor it allows must have a pin here (tests/test_linode_config.py checks it).
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
# CNI charts, one pin per CNI minor. The cluster gets the newest pin whose row in the calendar's CNI
# compatibility table (gpu_platform/costs/catalog/kubernetes-versions.yaml, `cni:`) lists the stack's
# Kubernetes minor, so a `kubernetesVersion` change moves the CNI with it; none listed: a config error.
CNI_CHARTS: dict[str, tuple[Chart, ...]] = {
    "cilium": (Chart("cilium", "1.18.2", "https://helm.cilium.io"),
               Chart("cilium", "1.19.6", "https://helm.cilium.io"),
               Chart("cilium", "1.20.0", "https://helm.cilium.io")),
    "calico": (Chart("tigera-operator", "v3.30.3", "https://docs.tigera.io/calico/charts"),),
}
CILIUM_CHART = CNI_CHARTS["cilium"][-1]
CALICO_CHART = CNI_CHARTS["calico"][-1]
LINODE_CCM_CHART = Chart("ccm-linode", "v0.7.1", "https://linode.github.io/linode-cloud-controller-manager/")
LINODE_CSI_CHART = Chart("linode-blockstorage-csi-driver", "v1.0.6",
                         "https://linode.github.io/linode-blockstorage-csi-driver/")
# The node-upgrade Jobs' image (upgrade.py): the CNI agent's, already on every node, by the digest its
# chart pins (values.yaml image.digest of ../shared/charts/cilium-<version>.tgz); it has sh and nsenter
# (the chart's own mount-cgroup init container runs nsenter in it).
NODE_TOOLS_IMAGES = {
    "1.18.2": "quay.io/cilium/cilium:v1.18.2@sha256:858f807ea4e20e85e3ea3240a762e1f4b29f1cb5bbd0463b8aa77e7b097c0667",
    "1.19.6": "quay.io/cilium/cilium:v1.19.6@sha256:0df5b2750b64c49843aba1d649e9eaf61467cb0645ad3171db6f6962c095ac92",
    "1.20.0": "quay.io/cilium/cilium:v1.20.0@sha256:383968cd5e8873f7976fa76aa6196045643558f4cc9518a207b9335cb24a0e93",
}
# Same chart and version the platform layer installs on other clouds (one pin, in platform/versions.py).
NVIDIA_DEVICE_PLUGIN_CHART = NVIDIA_DEVICE_PLUGIN


def kubernetes_package_version(minor: str) -> str:
    """The apt version string of kubeadm/kubelet/kubectl for a Kubernetes minor (e.g. 1.33.6-1.1)."""
    return f"{KUBERNETES_PATCH[minor]}-{KUBERNETES_DEB_REVISION}"


def cni_minor(chart: Chart) -> str:
    """The CNI minor of a chart version: 1.19.6 -> 1.19, v3.30.3 -> 3.30."""
    return ".".join(chart.version.lstrip("v").split(".")[:2])


def cni_chart(cni: str, kubernetes_minor: str, also: Optional[str] = None) -> Optional[Chart]:
    """The newest pinned chart of `cni` whose compatibility row lists `kubernetes_minor` (None: no such pin).
    `also`: a minor it must list too (the one the cluster runs during an upgrade: the CNI moves first)."""
    calendar = load_calendar()
    wanted = {kubernetes_minor} | ({also} if also else set())
    fits = [c for c in CNI_CHARTS[cni] if wanted <= set(calendar.cni_kubernetes(cni, cni_minor(c)))]
    return max(fits, key=lambda c: tuple(int(x) for x in c.version.lstrip("v").split("."))) if fits else None
