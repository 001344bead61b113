"""The `aws` section of the stack config: its keys, their types and limits.

The rules that read the rest of the stack (capacity types EC2 offers, GPU instance types and their
alternatives in the catalog, regions and zones, an existing VPC or a new one, node-group sizes) are in
checks/aws.py, which imports this section, never the reverse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field, PrivateAttr, model_validator

from gpu_platform.config.base import IMAGE_BY_DIGEST, SYSTEM_POOL_DEFAULTS, Cidr, Model, SystemPool, validate_system_pool

if TYPE_CHECKING:
    from gpu_platform.costs.catalog import InstanceType

REGION_PATTERN = r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"
# IAM names are ASCII letters, digits and +=,.@_- (IAM API reference, Role/User: RoleName, UserName); a path adds
# '/'. Not \w: in Python's re that is any Unicode letter, which IAM refuses.
ARN_PRINCIPAL = r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9_+=,.@/-]+$"
# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
# An ASG holds at most 50 tags; the fixed ones (owner, pool, autoscaler, NTH, ...) use about 20.
MAX_POOL_LABELS = 25
MAX_ALTERNATIVES = 10
# The EKS API endpoint's publicAccessCidrs (adminCidrs here) takes at most 40 ranges: the EKS quota "Public
# endpoint access CIDR ranges per cluster", 40, not adjustable (AWS General Reference, "Amazon Elastic
# Kubernetes Service endpoints and quotas", https://docs.aws.amazon.com/general/latest/gr/eks.html#limits_eks;
# EKS User Guide, service-quotas, quota code L-93A74D60; "Configure network access to cluster API server
# endpoint": "There is a maximum number of CIDR blocks that you can specify"). botocore's eks model
# (VpcConfigRequest.publicAccessCidrs, a StringList) states no maximum, so the API refuses it only at deploy.
EKS_PUBLIC_ACCESS_CIDRS_MAX = 40
# The system managed node group's most nodes (add-ons only; a bigger one means work landed on the wrong pool).
MAX_SYSTEM_NODES = 20


class ScaleInController(Model):
    """The job-aware scale-in protection controller (gpu_platform/components/aws/protection.py)."""

    # On by default. Off: no controller; cluster-autoscaler alone removes idle GPU nodes after
    # scaleDownGraceMinutes, and nothing marks busy nodes (see docs/quickstart-aws.md, "Scale-in protection").
    enabled: bool = True
    # A published image by digest (ghcr.io/<owner>/gpu-platform-scale-in@sha256:<64 hex>, as
    # .github/workflows/controller-image.yml publishes it on a release tag): deployed as given, nothing built.
    # Unset: `pulumi up` builds the image from gpu_platform/controllers/scale_in_protection/Dockerfile and
    # pushes it to an ECR repository of the stack (components/aws/registry.py); the Deployment takes its digest.
    image: Optional[str] = Field(default=None, pattern=IMAGE_BY_DIGEST)

    @property
    def on(self) -> bool:
        """Whether the controller is deployed."""
        return self.enabled

    @property
    def built(self) -> bool:
        """Whether `pulumi up` builds the controller's image (deployed, and no published digest given)."""
        return self.enabled and self.image is None


class AwsPool(Model):
    """AWS-only settings of one GPU pool (keyed by the pool's name in `gpuPools`)."""

    # Tried in addition to gpuPools[].instanceType (which stays first): more Spot capacity pools.
    instance_types: list[str] = Field(default_factory=list)
    # On-Demand nodes the pool keeps before any Spot (0 = all Spot for a spot pool).
    on_demand_base_capacity: int = Field(default=0, ge=0, le=1000)
    # Share of On-Demand above the base; default: 0 for spot pools, 100 for on-demand pools.
    on_demand_percentage_above_base: Optional[int] = Field(default=None, ge=0, le=100)
    # Root volume: training images (CUDA, frameworks) are large; image pulls need room.
    root_volume_gib: int = Field(default=200, ge=50, le=16384, alias="rootVolumeGiB")


class AwsSection(Model):
    region: str = Field(pattern=REGION_PATTERN)
    # Existing network: a VPC and its private subnets (at least two, in different zones, with NAT).
    vpc_id: Optional[str] = Field(default=None, pattern=r"^vpc-[0-9a-f]{8,17}$")
    private_subnet_ids: list[str] = Field(default_factory=list)
    # New network: this CIDR split into private (nodes) and public (NAT, load balancers) subnets.
    vpc_cidr: Optional[Cidr] = None
    availability_zones: list[str] = Field(default_factory=list)
    # One NAT gateway (cheapest) or one per zone (no cross-zone dependency).
    nat_gateways: Literal["single", "per-az"] = "single"
    # Existing VPC only: the S3 gateway endpoint that keeps checkpoint traffic off the NAT. `create`: the
    # stack adds one on the private subnets' route tables; `existing`: the VPC has one on them already.
    s3_gateway_endpoint: Optional[Literal["create", "existing"]] = None
    # True: the Kubernetes API is reachable only from inside the VPC. False: also publicly, from
    # adminCidrs only (no adminCidrs = private only).
    endpoint_private_only: bool = False
    # IAM roles/users made cluster admins through EKS access entries, one each, whoever runs `pulumi up`
    # (the cluster is created with bootstrapClusterCreatorAdminPermissions false: its creator gets nothing
    # implicit). Whoever deploys must be among them: the platform's Kubernetes objects are installed with
    # the deployer's own credentials.
    admin_principal_arns: list[str] = Field(default_factory=list)
    # Only for a cluster created before that (by an earlier release, bootstrapClusterCreatorAdminPermissions
    # true): the principal that created it. EKS made its admin access entry then; the program makes no
    # second one for it (EKS would refuse: ResourceInUseException).
    cluster_creator_arn: Optional[str] = None
    # aws.systemPool {instanceType, minNodes, maxNodes}: the small on-demand managed node group for add-ons.
    # Last release's aws.systemNodes {instanceType, min, max} is read with a deprecation warning.
    system_pool: SystemPool = Field(default_factory=lambda: SystemPool(**SYSTEM_POOL_DEFAULTS["aws"]))
    pools: dict[str, AwsPool] = Field(default_factory=dict)
    # A GPU node without GPU pods keeps its scale-in protection this long before it may go.
    scale_down_grace_minutes: int = Field(default=15, ge=1, le=24 * 60)
    scale_in_controller: ScaleInController = Field(default_factory=ScaleInController)
    # The longest terminationGracePeriodSeconds a GPU pod gets when its node is drained for a scale-in
    # or Spot rebalance (time to write a checkpoint); NTH's drain and lifecycle heartbeats cover it.
    drain_grace_seconds: int = Field(default=600, ge=30, le=7200)
    # Old (non-current) checkpoint versions are deleted after this many days.
    checkpoint_retention_days: int = Field(default=30, ge=1, le=3650)
    log_retention_days: int = 90
    # EKS upgrade policy (upgrade_policy.support_type). STANDARD: the cluster is upgraded automatically when its
    # version leaves standard support (no extended-support fee); EXTENDED: it may stay, billed the extended fee.
    # A kubernetesVersion past the end of standard support is accepted only with EXTENDED.
    support_type: Literal["STANDARD", "EXTENDED"] = "STANDARD"
    # CloudWatch billing alarms on the account's EstimatedCharges watch the whole account: only the one
    # stack per account that says so (true) creates them; every other stack would repeat them. The
    # stack's own AWS Budget (filtered on its `cluster` tag) is created either way.
    account_billing: bool = False

    _system_pool_renamed: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _system_pool_shape(cls, data: Any, handler: Any) -> "AwsSection":
        return validate_system_pool("aws", data, handler)

    def pool(self, name: str) -> AwsPool:
        return self.pools.get(name) or AwsPool()

    @property
    def new_vpc(self) -> bool:
        return self.vpc_id is None

    @property
    def effective_vpc_cidr(self) -> str:
        return self.vpc_cidr or "10.40.0.0/16"


# AWS tags: keys of at most 128 characters, values of at most 256 (EC2 and Auto Scaling tag restrictions).
# Pool labels become cluster-autoscaler node-template tags (gpu_platform/components/aws/gpu_asg.autoscaler_tags).
AWS_TAG_KEY_MAX, AWS_TAG_VALUE_MAX = 128, 256
AUTOSCALER_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/"


def shape_differences(main: "InstanceType", alt: "InstanceType") -> list[str]:
    """What makes `alt` a different node shape from `main` (empty: interchangeable in one ASG)."""
    out = []
    if alt.gpu_model != main.gpu_model:
        out.append("GPU model")
    if alt.gpus != main.gpus:
        out.append("GPU count")
    if alt.vcpus != main.vcpus:
        out.append("vCPUs")
    if alt.memory_gib != main.memory_gib:
        out.append("memory")
    return out


def describe_shape(t: "InstanceType") -> str:
    return f"{t.gpus} x {t.gpu_model}, {t.vcpus} vCPUs, {t.memory_gib:g} GiB"


