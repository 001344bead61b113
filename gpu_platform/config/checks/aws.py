"""The rules only AWS has that read the whole stack, offline, before a resource is registered.

Capacity types EC2 offers, GPU instance types (and their alternatives) the catalog knows, regions and
zones, the choice between an existing VPC and a new one, node-group sizes, the scale-in controller.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from gpu_platform.config.aws_regions import aws_regions, zone_issue
from gpu_platform.config.aws import (ARN_PRINCIPAL, AUTOSCALER_LABEL_TAG, AWS_TAG_KEY_MAX, AWS_TAG_VALUE_MAX,
                                     EKS_PUBLIC_ACCESS_CIDRS_MAX, LOG_RETENTION_DAYS,
                                     MAX_ALTERNATIVES, MAX_POOL_LABELS, MAX_SYSTEM_NODES, AwsSection, describe_shape,
                                     shape_differences)
from gpu_platform.config.base import RFC1918_TEXT, ConfigIssue, is_rfc1918, system_pool_key
from gpu_platform.config.checks.pools import pool_issue_capacity, pool_region_issues
from gpu_platform.config.kubernetes_version import version_issues

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog


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
    known = aws_regions()
    if section.region not in known:
        # botocore's partition data, recorded: a made-up region is named here, not by a failed API call at deploy.
        issues.append(ConfigIssue("aws.region", section.region,
                                  "an AWS region where EKS runs (botocore's partition data, recorded in "
                                  f"gpu_platform/config/aws_regions.yaml): {', '.join(sorted(known))}"))
    issues += _check_network(section)
    issues += _check_pools(cfg, section, catalog)
    issues += _check_system_pool(section, catalog)
    issues += _check_label_tags(cfg)
    issues += version_issues(cfg)
    for i, arn in enumerate(section.admin_principal_arns):
        if not re.fullmatch(ARN_PRINCIPAL, arn):
            issues.append(ConfigIssue(f"aws.adminPrincipalArns[{i}]", arn, "an IAM role or user ARN: arn:aws:iam::123456789012:role/name"))
    if section.cluster_creator_arn is not None and not re.fullmatch(ARN_PRINCIPAL, section.cluster_creator_arn):
        issues.append(ConfigIssue("aws.clusterCreatorArn", section.cluster_creator_arn,
                                  "the IAM role or user ARN that created the cluster: arn:aws:iam::123456789012:role/name"))
    if not section.admin_principal_arns and section.cluster_creator_arn is None:
        issues.append(ConfigIssue("aws.adminPrincipalArns", [],
                                  "at least one IAM role or user ARN (arn:aws:iam::123456789012:role/name), the principal "
                                  "that runs `pulumi up` among them: each gets an EKS access entry with cluster admin, and "
                                  "EKS gives the cluster's creator none of its own (bootstrapClusterCreatorAdminPermissions "
                                  "false), so with none nobody could reach the Kubernetes API, the deployer included "
                                  "(a cluster created by an earlier release: aws.clusterCreatorArn)"))
    if not section.endpoint_private_only and len(cfg.admin_cidrs) > EKS_PUBLIC_ACCESS_CIDRS_MAX:
        issues.append(ConfigIssue("adminCidrs", f"{len(cfg.admin_cidrs)} ranges",
                                  f"at most {EKS_PUBLIC_ACCESS_CIDRS_MAX} ranges on AWS: they become the EKS API endpoint's "
                                  f"publicAccessCidrs, which takes at most {EKS_PUBLIC_ACCESS_CIDRS_MAX} (EKS quota 'Public "
                                  "endpoint access CIDR ranges per cluster', not adjustable); merge neighbouring ranges, "
                                  "or set aws.endpointPrivateOnly: true and reach the API from inside the VPC"))
    if section.log_retention_days not in LOG_RETENTION_DAYS:
        issues.append(ConfigIssue("aws.logRetentionDays", section.log_retention_days,
                                  f"a CloudWatch Logs retention: {', '.join(map(str, LOG_RETENTION_DAYS))}"))
    return issues


def _check_pools(cfg: "StackConfig", section: AwsSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    not_in_region: list[tuple[int, str, tuple[str, ...]]] = []
    names = [p.name for p in cfg.gpu_pools]
    for key in section.pools:
        if key not in names:
            issues.append(ConfigIssue(f"aws.pools.{key}", key, f"the name of a pool in gpuPools: {', '.join(names)}"))
    for i, pool in enumerate(cfg.gpu_pools):
        extra = section.pool(pool.name)
        main = catalog.instance("aws", pool.instance_type)
        if (main is not None and main.is_gpu and main.regions is not None and section.region not in main.regions
                and section.region in aws_regions()):  # an unknown region is reported once, by check_stack
            not_in_region.append((i, pool.instance_type, main.regions))
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
    return pool_region_issues(cfg, catalog, "aws.region", section.region, not_in_region) + issues


def termination_handler_warnings(cfg: "StackConfig") -> list[str]:
    """aws-node-termination-handler's maintainers test it up to NTH_TESTED_KUBERNETES; the newest release
    is the pinned one, so a stack on a later minor runs it untested (the decision and its sources:
    docs/versions.md, "aws-node-termination-handler on Kubernetes 1.34+")."""
    from gpu_platform.data import aws_versions as versions

    if cfg.cloud != "aws" or cfg.kubernetes_version in versions.NTH_TESTED_KUBERNETES:
        return []
    return [f"kubernetesVersion {cfg.kubernetes_version}: aws-node-termination-handler {versions.NTH_APP_VERSION}, the "
            f"newest release, is tested by its maintainers on Kubernetes {', '.join(versions.NTH_TESTED_KUBERNETES)} "
            "only; it calls only GA APIs none of which 1.34-1.36 removes, so the platform keeps it (docs/versions.md, "
            "\"aws-node-termination-handler on Kubernetes 1.34+\"); watch a Spot interruption drain the node once"]


def _check_network(section: AwsSection) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    if section.vpc_id is not None:
        if len(section.private_subnet_ids) < 2:
            issues.append(ConfigIssue("aws.privateSubnetIds", section.private_subnet_ids,
                                      "at least two private subnet IDs (subnet-...) in different zones when vpcId is given (EKS needs two zones)"))
        for key, value in (("aws.vpcCidr", section.vpc_cidr), ("aws.availabilityZones", section.availability_zones or None)):
            if value is not None:
                issues.append(ConfigIssue(key, value, "only for a new VPC; with vpcId the existing subnets decide (remove it, or remove vpcId)"))
        if section.s3_gateway_endpoint is None:
            issues.append(ConfigIssue("aws.s3GatewayEndpoint", None,
                                      "create (the stack adds an S3 gateway endpoint on the route tables of "
                                      "aws.privateSubnetIds) or existing (the VPC has one on them): without it every "
                                      "checkpoint and image layer goes through the VPC's NAT, billed per GB, which a new "
                                      "VPC avoids (its S3 gateway endpoint) and the cost estimate assumes"))
    else:
        if section.private_subnet_ids:
            issues.append(ConfigIssue("aws.privateSubnetIds", section.private_subnet_ids,
                                      "only with vpcId (an existing VPC); for a new VPC give vpcCidr and availabilityZones"))
        if section.s3_gateway_endpoint is not None:
            issues.append(ConfigIssue("aws.s3GatewayEndpoint", section.s3_gateway_endpoint,
                                      "only with vpcId (an existing VPC); a new VPC always gets its S3 gateway endpoint"))
        zones = section.availability_zones
        if len(zones) == 1:  # none: the region's first zones at deploy time (network.default_zones)
            issues.append(ConfigIssue("aws.availabilityZones", zones,
                                      f"at least two zones of {section.region} for a new VPC, e.g. [{section.region}a, {section.region}b] "
                                      "(or none: the region's first three)"))
        if len(zones) > 6:
            issues.append(ConfigIssue("aws.availabilityZones", zones, "at most six zones"))
        for i, zone in enumerate(zones):
            wrong = zone_issue(section.region, zone)
            if wrong:
                issues.append(ConfigIssue(f"aws.availabilityZones[{i}]", zone, wrong))
            elif zones.index(zone) != i:
                issues.append(ConfigIssue(f"aws.availabilityZones[{i}]", zone, "each zone once"))
        net = ipaddress.ip_network(section.effective_vpc_cidr)
        # AWS accepts /16 to /28 from any range but a few, and recommends RFC 1918 (VPC User Guide, "VPC CIDR
        # blocks"). This stack's VPC has one CIDR, which holds the nodes and (VPC CNI) every pod: a public range
        # would hide that part of the internet from the cluster, 100.64.0.0/10 is meant for secondary blocks,
        # and loopback, link-local (the instance metadata and DNS addresses), benchmarking or reserved ranges
        # break the nodes. Python's is_private admits all of those but the public ones; RFC 1918 only.
        if not is_rfc1918(net) or not 16 <= net.prefixlen <= 22:
            issues.append(ConfigIssue("aws.vpcCidr", section.effective_vpc_cidr,
                                      f"an RFC 1918 IPv4 range ({RFC1918_TEXT}) from /16 to /22, e.g. 10.40.0.0/16"))
    for i, subnet in enumerate(section.private_subnet_ids):
        if not re.fullmatch(r"^subnet-[0-9a-f]{8,17}$", subnet):
            issues.append(ConfigIssue(f"aws.privateSubnetIds[{i}]", subnet, "a subnet ID: subnet- and 8 or 17 hex digits"))
    return issues


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
