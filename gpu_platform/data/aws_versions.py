"""Every version the AWS cluster pins: Helm charts, images, the AMI channel, the controller's wheels.

The one place to bump them; the pinned-versions table in docs/versions.md lists the same values (a test keeps
them in agreement).
"""

from __future__ import annotations

from gpu_platform.data.chart import Chart
from gpu_platform.data.eks_addon_versions import ADDONS as _EKS_ADDONS

# aws-node-termination-handler, queue-processor mode (Helm chart from ECR Public, OCI).
# https://github.com/aws/aws-node-termination-handler/tree/main/config/helm/aws-node-termination-handler
NTH_CHART = "oci://public.ecr.aws/aws-ec2/helm/aws-node-termination-handler"
NTH_CHART_VERSION = "0.27.6"  # appVersion 1.25.6
# v1.25.6 (2026-04-02) is the newest NTH release (aws/aws-node-termination-handler tags, snapshot of
# 2026-07-21), so there is no newer image to override the chart's with. Its README compatibility table
# lists Kubernetes 1.29-1.32 only; the maintainers confirmed 1.33 in issue #1167 (2025-08-13); no
# statement for 1.34+ (aws/containers-roadmap#2756, open). Recorded here, shown in docs/versions.md.
NTH_APP_VERSION = "v1.25.6"
NTH_TESTED_KUBERNETES = ("1.29", "1.30", "1.31", "1.32", "1.33")
NTH = Chart(NTH_CHART, NTH_CHART_VERSION)

# cluster-autoscaler (chart from the kubernetes/autoscaler repository). The image tag must match the
# cluster's Kubernetes minor version, so the chart's default image is overridden per version.
CLUSTER_AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
CLUSTER_AUTOSCALER_CHART = "cluster-autoscaler"
CLUSTER_AUTOSCALER_CHART_VERSION = "9.47.0"
CLUSTER_AUTOSCALER = Chart(CLUSTER_AUTOSCALER_CHART, CLUSTER_AUTOSCALER_CHART_VERSION, CLUSTER_AUTOSCALER_REPO)
CLUSTER_AUTOSCALER_IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler"
# Newest patch release per minor: tags cluster-autoscaler-<version> of github.com/kubernetes/autoscaler
# (1.36.1, 1.35.2, 1.34.5, 1.33.6 and 1.32.7 tagged 2026-07-22; 1.31.5 earlier), read 2026-11-23 from the
# repository snapshot of 2026-08-22. Images: registry.k8s.io/autoscaling/cluster-autoscaler:v<version>.
# Every release here reads the per-ASG `autoscaling-options/scaledownunneededtime` tag
# (cloudprovider/aws/aws_manager.go) and the `k8s.amazonaws.com/accelerator` GPU label.
CLUSTER_AUTOSCALER_IMAGE_TAGS = {
    "1.31": "v1.31.5",
    "1.32": "v1.32.7",
    "1.33": "v1.33.6",
    "1.34": "v1.34.5",
    "1.35": "v1.35.2",
    "1.36": "v1.36.1",
}

# What each minor's cluster-autoscaler image lists and watches beyond the ClusterRole of the pinned chart
# (CLUSTER_AUTOSCALER_CHART_VERSION 9.47.0, templates/clusterrole.yaml, which has no rule for
# resource.k8s.io and no value to add rules). From 1.35 the autoscaler always handles Dynamic Resource
# Allocation (config/flags/flags.go: --enable-dynamic-resource-allocation "locked to true"; a false value
# is fatal) and so always lists and watches resourceclaims, resourceslices and deviceclasses
# (simulator/dynamicresources/provider/provider.go), and main.go's buildAutoscaler waits for every informer
# to sync before its first loop: with the chart's ClusterRole alone it waits for ever, Running, scaling
# nothing (kubernetes/autoscaler#9244; the chart on master gained the rule in #9487; #10278 backports it
# to the 1.35 example manifest). Read from tags cluster-autoscaler-1.35.2 and cluster-autoscaler-1.36.1
# (../shared/sources/cluster-autoscaler) on 2026-11-28, and shown by the rehearsal's real 1.35.2 (the
# linode-autoscaling scenario: with the chart's rules alone the API server refuses list/watch of exactly
# these three and it never syncs; with these it syncs, refused nothing). 1.34 and older handle DRA only
# when the flag is set, which the program never does (upstream's issue puts the change at 1.35; their
# source is not here): nothing to add.
CLUSTER_AUTOSCALER_DRA_RULES = (
    {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses", "resourceclaims", "resourceslices"],
     "verbs": ["get", "list", "watch"]},
)
CLUSTER_AUTOSCALER_EXTRA_RULES: dict[str, tuple[dict, ...]] = {
    "1.31": (), "1.32": (), "1.33": (), "1.34": (),
    "1.35": CLUSTER_AUTOSCALER_DRA_RULES,
    "1.36": CLUSTER_AUTOSCALER_DRA_RULES,
}

# EKS-optimized Amazon Linux 2023 NVIDIA AMI (driver + container toolkit preinstalled), resolved at
# launch from its public SSM parameter for the cluster's Kubernetes version.
GPU_AMI_SSM_PARAMETER = "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
# EKS managed node group AMI type for the (non-GPU) system nodes.
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"

# EKS managed add-ons. Versions: pinned per Kubernetes minor in gpu_platform/data/eks_addon_versions.py
# (dated, sourced; vpc-cni moves one minor per Kubernetes minor), so they move with kubernetesVersion (eks.py).
EKS_ADDONS = _EKS_ADDONS

# The scale-in protection controller's image is built from gpu_platform/controllers/scale_in_protection/Dockerfile
# (base image and wheels pinned there) by .github/workflows/controller-image.yml and published to
# ghcr.io/<owner>/gpu-platform-scale-in on release tags; stacks deploy it by digest
# (aws.scaleInController.image).
CONTROLLER_IMAGE_NAME = "gpu-platform-scale-in"

# CloudWatch agent on GPU nodes (nvidia_gpu metrics for the idle-GPU alarms): the
# amazon-cloudwatch-agent RPM of the AMI's Amazon Linux 2023 release (AL2023 repositories are
# locked to the AMI's release version, so the package version follows the AMI).
CLOUDWATCH_AGENT_PACKAGE = "amazon-cloudwatch-agent"


def gpu_ami_parameter(kubernetes_version: str) -> str:
    return GPU_AMI_SSM_PARAMETER.format(k8s=kubernetes_version)


def cluster_autoscaler_image_tag(kubernetes_version: str) -> str:
    return CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version]


def cluster_autoscaler_extra_rules(kubernetes_version: str) -> list[dict]:
    """The RBAC rules the autoscaler image of this minor needs beyond the pinned chart's ClusterRole."""
    return [dict(r) for r in CLUSTER_AUTOSCALER_EXTRA_RULES[kubernetes_version]]

