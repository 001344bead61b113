"""The `aws` section of the stack config and the rules only AWS has.

Everything that can be known offline is checked here, before a resource is registered: capacity
types EC2 offers, GPU instance types (and their alternatives) the catalog knows, regions and zones,
the choice between an existing VPC and a new one, node-group sizes.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field, PrivateAttr, model_validator

from gpu_platform.config.base import (SYSTEM_POOL_DEFAULTS, Cidr, ConfigIssue, Model, SystemPool, pool_issue_capacity,
                                    system_pool_key, validate_system_pool)
from gpu_platform.config.kubernetes_version import version_issues

if TYPE_CHECKING:
    from gpu_platform.config.stack import StackConfig
    from gpu_platform.costs.catalog import Catalog, InstanceType

REGION_PATTERN = r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$"
ARN_PRINCIPAL = r"^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[\w+=,.@/-]+$"
# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
# An ASG holds at most 50 tags; the fixed ones (owner, pool, autoscaler, NTH, ...) use about 20.
MAX_POOL_LABELS = 25
MAX_ALTERNATIVES = 10
# The system managed node group's most nodes (add-ons only; a bigger one means work landed on the wrong pool).
MAX_SYSTEM_NODES = 20


class ScaleInController(Model):
    """The job-aware scale-in protection controller (gpu_platform/components/aws/protection.py)."""

    # Off: no controller; cluster-autoscaler alone removes idle GPU nodes after scaleDownGraceMinutes,
    # and nothing marks busy nodes (see docs/quickstart-aws.md, "Scale-in protection"). Unset: on once
    # `image` is given, off until then (a new stack plans on its first run; the verdict says it is off).
    enabled: Optional[bool] = None
    # Its image by digest, as published by .github/workflows/controller-image.yml on a release tag:
    # ghcr.io/<owner>/gpu-platform-scale-in@sha256:<64 hex>. Required when enabled.
    image: Optional[str] = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+(:[\w][\w.-]{0,127})?@sha256:[0-9a-f]{64}$")

    @property
    def on(self) -> bool:
        """Whether the controller is deployed: `enabled` when set, else whether an image is given."""
        return self.image is not None if self.enabled is None else self.enabled

    @property
    def off_until_an_image(self) -> bool:
        """Off only because no image digest was given (not chosen with `enabled: false`)."""
        return self.enabled is None and self.image is None


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
    # True: the Kubernetes API is reachable only from inside the VPC. False: also publicly, from
    # adminCidrs only (no adminCidrs = private only).
    endpoint_private_only: bool = False
    # IAM roles/users made cluster admins through EKS access entries (the deployer always is).
    admin_principal_arns: list[str] = Field(default_factory=list)
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


def instance_types_of(cfg: "StackConfig", pool_index: int) -> list[str]:
    """The pool's instance types in launch-template override order: main type first."""
    pool = cfg.gpu_pools[pool_index]
    extra = cfg.aws.pool(pool.name).instance_types if cfg.aws else []
    return [pool.instance_type] + [t for t in extra if t != pool.instance_type]


def on_demand_split(cfg: "StackConfig", pool_index: int) -> tuple[int, int]:
    """(OnDemandBaseCapacity, OnDemandPercentageAboveBaseCapacity) for the pool's ASG."""
    pool = cfg.gpu_pools[pool_index]
    extra = cfg.aws.pool(pool.name) if cfg.aws else AwsPool()
    if pool.capacity == "on-demand":
        return extra.on_demand_base_capacity, 100
    pct = extra.on_demand_percentage_above_base
    return extra.on_demand_base_capacity, 0 if pct is None else pct


# AWS tags: keys of at most 128 characters, values of at most 256 (EC2 and Auto Scaling tag restrictions).
# Pool labels become cluster-autoscaler node-template tags (gpu_platform/components/aws/gpu_asg.autoscaler_tags).
AWS_TAG_KEY_MAX, AWS_TAG_VALUE_MAX = 128, 256
AUTOSCALER_LABEL_TAG = "k8s.io/cluster-autoscaler/node-template/label/"


def _check_label_tags(cfg: "StackConfig") -> list[ConfigIssue]:
    issues = []
    for i, pool in enumerate(cfg.gpu_pools):
        for key, value in pool.labels.items():
            if len(AUTOSCALER_LABEL_TAG + key) > AWS_TAG_KEY_MAX:
                issues.append(ConfigIssue(f"gpuPools[{i}].labels", key,
                                          f"label keys of at most {AWS_TAG_KEY_MAX - len(AUTOSCALER_LABEL_TAG)} characters "
                                          f"on AWS (each becomes the ASG tag {AUTOSCALER_LABEL_TAG}<key>, and AWS tag "
                                          f"keys hold at most {AWS_TAG_KEY_MAX})"))
            if len(value) > AWS_TAG_VALUE_MAX:
                issues.append(ConfigIssue(f"gpuPools[{i}].labels.{key}", value,
                                          f"at most {AWS_TAG_VALUE_MAX} characters (an AWS tag value)"))
    return issues


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    section: AwsSection = cfg.aws  # type: ignore[assignment]
    issues = pool_issue_capacity(cfg, ("spot", "on-demand"), "EC2 has Spot and On-Demand capacity; 'preemptible' is GCP's term, use spot")
    issues += _check_network(section)
    issues += _check_pools(cfg, section, catalog)
    issues += _check_system_pool(section, catalog)
    issues += _check_label_tags(cfg)
    if section.scale_in_controller.enabled is True and section.scale_in_controller.image is None:
        issues.append(ConfigIssue("aws.scaleInController.image", None,
                                  "the controller image by digest, ghcr.io/<owner>/gpu-platform-scale-in@sha256:<64 hex> "
                                  "(published by .github/workflows/controller-image.yml on a v* tag; docs/quickstart-aws.md: "
                                  "'Scale-in protection controller image'), or aws.scaleInController.enabled: false"))
    issues += version_issues(cfg)
    for i, arn in enumerate(section.admin_principal_arns):
        if not re.fullmatch(ARN_PRINCIPAL, arn):
            issues.append(ConfigIssue(f"aws.adminPrincipalArns[{i}]", arn, "an IAM role or user ARN: arn:aws:iam::123456789012:role/name"))
    if section.log_retention_days not in LOG_RETENTION_DAYS:
        issues.append(ConfigIssue("aws.logRetentionDays", section.log_retention_days,
                                  f"a CloudWatch Logs retention: {', '.join(map(str, LOG_RETENTION_DAYS))}"))
    return issues


def _check_network(section: AwsSection) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    if section.vpc_id is not None:
        if len(section.private_subnet_ids) < 2:
            issues.append(ConfigIssue("aws.privateSubnetIds", section.private_subnet_ids,
                                      "at least two private subnet IDs (subnet-...) in different zones when vpcId is given (EKS needs two zones)"))
        for key, value in (("aws.vpcCidr", section.vpc_cidr), ("aws.availabilityZones", section.availability_zones or None)):
            if value is not None:
                issues.append(ConfigIssue(key, value, "only for a new VPC; with vpcId the existing subnets decide (remove it, or remove vpcId)"))
    else:
        if section.private_subnet_ids:
            issues.append(ConfigIssue("aws.privateSubnetIds", section.private_subnet_ids,
                                      "only with vpcId (an existing VPC); for a new VPC give vpcCidr and availabilityZones"))
        zones = section.availability_zones
        if len(zones) == 1:  # none: the region's first zones at deploy time (network.default_zones)
            issues.append(ConfigIssue("aws.availabilityZones", zones,
                                      f"at least two zones of {section.region} for a new VPC, e.g. [{section.region}a, {section.region}b] "
                                      "(or none: the region's first three)"))
        if len(zones) > 6:
            issues.append(ConfigIssue("aws.availabilityZones", zones, "at most six zones"))
        for i, zone in enumerate(zones):
            if not re.fullmatch(rf"^{re.escape(section.region)}[a-z]$", zone):
                issues.append(ConfigIssue(f"aws.availabilityZones[{i}]", zone,
                                          f"a zone of region {section.region} ({section.region}a, {section.region}b, ...)"))
            elif zones.index(zone) != i:
                issues.append(ConfigIssue(f"aws.availabilityZones[{i}]", zone, "each zone once"))
        net = ipaddress.ip_network(section.effective_vpc_cidr)
        if net.version != 4 or not net.is_private or not 16 <= net.prefixlen <= 22:
            issues.append(ConfigIssue("aws.vpcCidr", section.effective_vpc_cidr,
                                      "a private IPv4 range (RFC 1918) from /16 to /22, e.g. 10.40.0.0/16"))
    for i, subnet in enumerate(section.private_subnet_ids):
        if not re.fullmatch(r"^subnet-[0-9a-f]{8,17}$", subnet):
            issues.append(ConfigIssue(f"aws.privateSubnetIds[{i}]", subnet, "a subnet ID: subnet- and 8 or 17 hex digits"))
    return issues


def _check_pools(cfg: "StackConfig", section: AwsSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    names = [p.name for p in cfg.gpu_pools]
    for key in section.pools:
        if key not in names:
            issues.append(ConfigIssue(f"aws.pools.{key}", key, f"the name of a pool in gpuPools: {', '.join(names)}"))
    for i, pool in enumerate(cfg.gpu_pools):
        extra = section.pool(pool.name)
        main = catalog.instance("aws", pool.instance_type)
        if main is not None and main.regions is not None and section.region not in main.regions:
            issues.append(ConfigIssue("aws.region", section.region,
                                      f"a region offering {pool.instance_type} (gpuPools[{i}]): {', '.join(main.regions)}"))
        if len(pool.labels) > MAX_POOL_LABELS:
            issues.append(ConfigIssue(f"gpuPools[{i}].labels", len(pool.labels),
                                      f"at most {MAX_POOL_LABELS} labels on AWS (each becomes an autoscaler tag; an ASG holds 50 tags)"))
        base = f"aws.pools.{pool.name}"
        if len(extra.instance_types) > MAX_ALTERNATIVES:
            issues.append(ConfigIssue(f"{base}.instanceTypes", extra.instance_types, f"at most {MAX_ALTERNATIVES} alternatives"))
        seen = {pool.instance_type}
        for j, name in enumerate(extra.instance_types):
            key = f"{base}.instanceTypes[{j}]"
            if name in seen:
                issues.append(ConfigIssue(key, name, f"each type once, and not the pool's own instanceType ({pool.instance_type})"))
                continue
            seen.add(name)
            alt = catalog.instance("aws", name)
            if alt is None or not alt.is_gpu:
                known = ", ".join(sorted(t.name for t in catalog.gpu_instances("aws")))
                issues.append(ConfigIssue(key, name, f"an AWS GPU instance type in the catalog: {known}"))
                continue
            if main is None or not main.is_gpu:
                continue  # the main type's own error is reported by gpu_platform.config.stack
            differs = shape_differences(main, alt)
            if differs:
                issues.append(ConfigIssue(key, name, (
                    f"a type with the shape of {pool.instance_type} ({describe_shape(main)}); {name} has "
                    f"{describe_shape(alt)} (differs in {', '.join(differs)}). One GPU model and one CPU/memory shape "
                    "per pool: the cluster-autoscaler plans every node of a group as the first type, and the "
                    "accelerator label is per GPU model; put other types in their own gpuPools entry")))
            elif alt.regions is not None and section.region not in alt.regions:
                issues.append(ConfigIssue(key, name, f"a type offered in {section.region} (catalog: {', '.join(alt.regions)})"))
        if extra.on_demand_base_capacity > pool.max_nodes:
            issues.append(ConfigIssue(f"{base}.onDemandBaseCapacity", extra.on_demand_base_capacity, f"at most maxNodes ({pool.max_nodes})"))
        pct = extra.on_demand_percentage_above_base
        if pool.capacity == "on-demand" and pct is not None and pct != 100:
            issues.append(ConfigIssue(f"{base}.onDemandPercentageAboveBase", pct,
                                      f"100 or unset for an on-demand pool (gpuPools[{i}].capacity); use capacity: spot for a Spot share"))
    return issues


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


def _check_system_pool(section: AwsSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    pool = section.system_pool
    key = lambda k: system_pool_key("aws", section, k)  # noqa: E731 - the spelling the stack file uses
    itype = catalog.instance("aws", pool.instance_type)
    if itype is None or itype.is_gpu:
        plain = ", ".join(sorted(t.name for t in catalog.instances("aws") if not t.is_gpu))
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type,
                                  f"a non-GPU AWS instance type in the catalog (system nodes run add-ons, not training): {plain}"))
    elif itype.vcpus < 2 or itype.memory_gib < 4:
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type, "a type with at least 2 vCPUs and 4 GiB"))
    if pool.min_nodes > pool.max_nodes:
        issues.append(ConfigIssue(key("minNodes"), pool.min_nodes, f"at most {key('maxNodes')} ({pool.max_nodes})"))
    if pool.max_nodes > MAX_SYSTEM_NODES:
        issues.append(ConfigIssue(key("maxNodes"), pool.max_nodes,
                                  f"at most {MAX_SYSTEM_NODES} (the system node group runs add-ons only; GPU work has gpuPools)"))
    return issues


def scale_in_warnings(cfg: "StackConfig") -> list[str]:
    """The verdict says when the scale-in controller is off for want of an image digest."""
    section = getattr(cfg, "aws", None)
    if cfg.cloud != "aws" or section is None or not section.scale_in_controller.off_until_an_image:
        return []
    return ["aws.scaleInController is off until an image digest is given (aws.scaleInController.image, "
            "published by .github/workflows/controller-image.yml on a v* tag): until then the autoscaler alone "
            "removes idle GPU nodes after aws.scaleDownGraceMinutes, busy or not (docs/quickstart-aws.md)"]
