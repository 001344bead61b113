"""Every version the AWS cluster pins: Helm charts, images, the AMI channel, the controller's wheels.

The one place to bump them; the README's pinned-versions table lists the same values (a test keeps
them in agreement).
"""

from __future__ import annotations

# aws-node-termination-handler, queue-processor mode (Helm chart from ECR Public, OCI).
# https://github.com/aws/aws-node-termination-handler/tree/main/config/helm/aws-node-termination-handler
NTH_CHART = "oci://public.ecr.aws/aws-ec2/helm/aws-node-termination-handler"
NTH_CHART_VERSION = "0.27.6"  # appVersion 1.25.6

# cluster-autoscaler (chart from the kubernetes/autoscaler repository). The image tag must match the
# cluster's Kubernetes minor version, so the chart's default image is overridden per version.
CLUSTER_AUTOSCALER_REPO = "https://kubernetes.github.io/autoscaler"
CLUSTER_AUTOSCALER_CHART = "cluster-autoscaler"
CLUSTER_AUTOSCALER_CHART_VERSION = "9.47.0"
CLUSTER_AUTOSCALER_IMAGE = "registry.k8s.io/autoscaling/cluster-autoscaler"
CLUSTER_AUTOSCALER_IMAGE_TAGS = {
    "1.31": "v1.31.0",
    "1.32": "v1.32.3",
    "1.33": "v1.33.1",
    "1.34": "v1.34.0",
}

# EKS-optimized Amazon Linux 2023 NVIDIA AMI (driver + container toolkit preinstalled), resolved at
# launch from its public SSM parameter for the cluster's Kubernetes version.
GPU_AMI_SSM_PARAMETER = "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
# EKS managed node group AMI type for the (non-GPU) system nodes.
SYSTEM_AMI_TYPE = "AL2023_x86_64_STANDARD"

# EKS managed add-ons. Versions: EKS's default for the control-plane version when the add-on is
# created; the provider then holds that version until it is set here deliberately.
EKS_ADDONS = ("vpc-cni", "kube-proxy", "coredns", "aws-ebs-csi-driver")

# The scale-in protection controller runs this public image; its only dependencies (boto3 and what
# boto3 needs) are installed by an init container from PyPI with pip --require-hashes, pinned below.
CONTROLLER_IMAGE = "python:3.12.8-slim-bookworm"
CONTROLLER_WHEELS = {
    # name: (version, sha256 of the py3-none-any wheel)
    "boto3": ("1.44.5", "70c3e0409794b29ec1900bcaff0695b73234a2d32ffaed35045b94caa26212a5"),
    "botocore": ("1.44.5", "8f16a56d1dff125dd65322ae021efa7ba5195a6db5102b96862566055b748921"),
    "s3transfer": ("0.19.3", "24eb7535804306355e31c952a90022bf5b2f9d760f9a11062c7493a217c08553"),
    "jmespath": ("1.1.0", "a5663118de4908c91729bea0acadca56526eb2698e83de10cd116ae0f4e97c64"),
    "python-dateutil": ("2.9.0.post0", "a8b2bc7bffae282281c8140a97d3aa9c14da0b136dfe83f850eea9a5f7470427"),
    "six": ("1.17.0", "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"),
    "urllib3": ("2.8.0", "0cf3cae568d36aa9576b28dfb35f11328f1cb974ca7647d9475ebb86c75ac6e3"),
}

# CloudWatch agent on GPU nodes (nvidia_gpu metrics for the idle-GPU alarms): the
# amazon-cloudwatch-agent RPM of the AMI's Amazon Linux 2023 release (AL2023 repositories are
# locked to the AMI's release version, so the package version follows the AMI).
CLOUDWATCH_AGENT_PACKAGE = "amazon-cloudwatch-agent"


def gpu_ami_parameter(kubernetes_version: str) -> str:
    return GPU_AMI_SSM_PARAMETER.format(k8s=kubernetes_version)


def cluster_autoscaler_image_tag(kubernetes_version: str) -> str:
    return CLUSTER_AUTOSCALER_IMAGE_TAGS[kubernetes_version]


def controller_requirements() -> str:
    """requirements.txt for the controller's init container: every wheel pinned by version and hash."""
    return "".join(f"{name}=={ver} --hash=sha256:{sha}\n" for name, (ver, sha) in CONTROLLER_WHEELS.items())
