"""The `aws` section: malformed sections are rejected offline with a message naming the key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_platform.config.derived import instance_types_of, on_demand_split
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from tests.conftest import stack_config


def raw_config() -> dict[str, Any]:
    """aws-prod's gpu-platform keys, bare (as parse_config takes them)."""
    return {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}


def test_shipped_stack_is_valid():
    cfg = parse_config(raw_config(), "aws-prod")
    assert cfg.cloud == "aws" and cfg.aws.region == "us-east-1"
    assert all(p.capacity == "spot" and p.min_nodes == 0 for p in cfg.gpu_pools)
    # One GPU model and one shape per pool: no catalog type matches g5.xlarge, so no alternatives (issue 12).
    assert instance_types_of(cfg, 0) == ["g5.xlarge"]
    assert cfg.aws.support_type == "STANDARD" and cfg.aws.account_billing is True
    assert on_demand_split(cfg, 0) == (0, 0)


def test_aws_region_in_stack_matches_the_section():
    raw = stack_config("aws-prod")
    assert raw["aws:region"] == raw["gpu-platform:aws"]["region"]
    assert "0.0.0.0/0" not in raw["gpu-platform:adminCidrs"]


def test_existing_vpc_is_accepted():
    raw = raw_config()
    aws = raw["aws"]
    for k in ("vpcCidr", "availabilityZones", "natGateways"):
        aws.pop(k)
    aws.update(vpcId="vpc-0a1b2c3d4e5f60718", privateSubnetIds=["subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"],
               s3GatewayEndpoint="existing")  # required with vpcId (issue 33 item 7, tests/test_aws_existing_vpc.py)
    cfg = parse_config(raw, "aws-prod")
    assert not cfg.aws.new_vpc


def test_on_demand_pool_is_all_on_demand():
    raw = raw_config()
    raw["gpuPools"][0].update(capacity="on-demand", approvedOnDemand=True)
    cfg = parse_config(raw, "aws-prod")
    assert on_demand_split(cfg, 0) == (0, 100)


def _set(path: str, value: Any):
    def mutate(raw: dict[str, Any]) -> None:
        node: Any = raw
        parts = path.split(".")
        for p in parts[:-1]:
            node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
        last = parts[-1]
        if value is _DELETE:
            node.pop(last)
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return mutate


_DELETE = object()


def _both(*mutations):
    def mutate(raw):
        for m in mutations:
            m(raw)
    return mutate


# (id, mutation of the valid aws-prod config, key the message must name, text it must contain)
MALFORMED = [
    ("preemptible-is-gcp", _set("gpuPools.0.capacity", "preemptible"), "gpuPools[0].capacity", "GCP's term"),
    ("region-pattern", _set("aws.region", "us-east"), "aws.region", "us-east"),
    ("region-without-gpu", _set("aws.region", "sa-east-1"), "aws.region", "a region offering g5.xlarge"),
    ("unknown-key", _set("aws.clusterVersion", "1.33"), "aws.clusterVersion", "unknown key"),
    ("one-zone", _set("aws.availabilityZones", ["us-east-1a"]), "aws.availabilityZones", "at least two zones"),
    ("zone-of-other-region", _set("aws.availabilityZones", ["us-east-1a", "us-west-2b"]), "aws.availabilityZones[1]",
     "a zone of region us-east-1"),
    ("duplicate-zone", _set("aws.availabilityZones", ["us-east-1a", "us-east-1a"]), "aws.availabilityZones[1]", "each zone once"),
    ("vpc-without-subnets", _set("aws.vpcId", "vpc-0a1b2c3d4e5f60718"), "aws.privateSubnetIds", "at least two private subnet"),
    ("vpc-with-new-vpc-keys", _both(_set("aws.vpcId", "vpc-0a1b2c3d4e5f60718"),
                                    _set("aws.privateSubnetIds", ["subnet-0a1b2c3d", "subnet-0e1f2a3b"])),
     "aws.availabilityZones", "only for a new VPC"),
    ("subnets-without-vpc", _set("aws.privateSubnetIds", ["subnet-0a1b2c3d", "subnet-0e1f2a3b"]), "aws.privateSubnetIds", "only with vpcId"),
    ("bad-subnet-id", _both(_set("aws.vpcId", "vpc-0a1b2c3d4e5f60718"), _set("aws.vpcCidr", _DELETE),
                            _set("aws.availabilityZones", _DELETE), _set("aws.privateSubnetIds", ["subnet-0a1b2c3d", "sn-1"])),
     "aws.privateSubnetIds[1]", "a subnet ID"),
    ("bad-vpc-id", _set("aws.vpcId", "vpc-xyz"), "aws.vpcId", "vpc-"),
    ("public-vpc-cidr", _set("aws.vpcCidr", "8.8.0.0/16"), "aws.vpcCidr", "RFC 1918"),
    ("tiny-vpc-cidr", _set("aws.vpcCidr", "10.40.0.0/26"), "aws.vpcCidr", "/16 to /22"),
    ("alternative-not-gpu", _set("aws.pools.a10g.instanceTypes", ["m6i.large"]), "aws.pools.a10g.instanceTypes[0]",
     "an AWS GPU instance type in the catalog"),
    ("alternative-unknown", _set("aws.pools.a10g.instanceTypes", ["g9.mega"]), "aws.pools.a10g.instanceTypes[0]", "g5.xlarge"),
    ("alternative-gpu-count", _set("aws.pools.a10g.instanceTypes", ["g5.12xlarge"]), "aws.pools.a10g.instanceTypes[0]",
     "differs in GPU count, vCPUs, memory"),
    ("alternative-other-gpu-model", _set("aws.pools.a10g.instanceTypes", ["g6.xlarge"]), "aws.pools.a10g.instanceTypes[0]",
     "g6.xlarge has 1 x NVIDIA L4, 4 vCPUs, 16 GiB (differs in GPU model)"),
    ("alternative-names-main-shape", _set("aws.pools.a10g.instanceTypes", ["g6.xlarge"]), "aws.pools.a10g.instanceTypes[0]",
     "the shape of g5.xlarge (1 x NVIDIA A10G, 4 vCPUs, 16 GiB)"),
    ("alternative-repeats-main", _set("aws.pools.l4x4.instanceTypes", ["g6.12xlarge"]),
     "aws.pools.l4x4.instanceTypes[0]", "not the pool's own instanceType"),
    ("alternative-bigger-shape", _set("aws.pools.a10g.instanceTypes", ["g5.2xlarge"]),
     "aws.pools.a10g.instanceTypes[0]", "differs in vCPUs, memory"),
    ("alternative-smaller-shape", _both(_set("gpuPools.0.instanceType", "g5.2xlarge"), _set("aws.pools.a10g.instanceTypes", ["g5.xlarge"])),
     "aws.pools.a10g.instanceTypes[0]", "the shape of g5.2xlarge"),
    ("pool-extras-for-unknown-pool", _set("aws.pools.h100", {"rootVolumeGiB": 500}), "aws.pools.h100", "a pool in gpuPools"),
    ("root-volume-too-small", _set("aws.pools.a10g.rootVolumeGiB", 8), "aws.pools.a10g.rootVolumeGiB", "greater than or equal to 50"),
    ("on-demand-base-above-max", _set("aws.pools.a10g.onDemandBaseCapacity", 9), "aws.pools.a10g.onDemandBaseCapacity",
     "at most maxNodes (8)"),
    ("on-demand-pool-with-spot-share", _both(_set("gpuPools.0.capacity", "on-demand"),
                                             _set("aws.pools.a10g.onDemandPercentageAboveBase", 20)),
     "aws.pools.a10g.onDemandPercentageAboveBase", "100 or unset"),
    ("percentage-over-100", _set("aws.pools.a10g.onDemandPercentageAboveBase", 150), "aws.pools.a10g.onDemandPercentageAboveBase",
     "less than or equal to 100"),
    ("system-pool-gpu", _set("aws.systemPool.instanceType", "g5.xlarge"), "aws.systemPool.instanceType", "non-GPU"),
    ("system-pool-min-above-max", _set("aws.systemPool", {"instanceType": "m6i.large", "minNodes": 4, "maxNodes": 3}),
     "aws.systemPool.minNodes", "at most aws.systemPool.maxNodes"),
    ("system-pool-too-big", _set("aws.systemPool.maxNodes", 21), "aws.systemPool.maxNodes", "at most 20"),
    # Last release's spelling: errors name the keys the stack file has.
    ("system-pool-old-key-gpu", _both(_set("aws.systemPool", _DELETE), _set("aws.systemNodes", {"instanceType": "g5.xlarge"})),
     "aws.systemNodes.instanceType", "non-GPU"),
    ("system-pool-old-key-min-above-max", _both(_set("aws.systemPool", _DELETE), _set("aws.systemNodes", {"min": 4, "max": 3})),
     "aws.systemNodes.min", "at most aws.systemNodes.max (3)"),
    ("system-pool-old-key-zero", _both(_set("aws.systemPool", _DELETE), _set("aws.systemNodes", {"min": 0})),
     "aws.systemNodes.min", "greater than or equal to 1"),
    ("system-pool-old-and-new-key", _set("aws.systemNodes", {"instanceType": "m6i.large", "min": 2, "max": 3}),
     "aws.systemNodes", "only one of aws.systemPool and aws.systemNodes"),
    ("grace-zero", _set("aws.scaleDownGraceMinutes", 0), "aws.scaleDownGraceMinutes", "greater than or equal to 1"),
    ("log-retention", _set("aws.logRetentionDays", 45), "aws.logRetentionDays", "a CloudWatch Logs retention"),
    ("admin-arn", _set("aws.adminPrincipalArns", ["arn:aws:iam::123:role/x"]), "aws.adminPrincipalArns[0]", "an IAM role or user ARN"),
    # IAM names are ASCII (RoleName: letters, digits and _+=,.@-); \w in Python's re took any Unicode letter.
    ("admin-arn-non-ascii-name", _set("aws.adminPrincipalArns", ["arn:aws:iam::123456789012:role/équipe"]),
     "aws.adminPrincipalArns[0]", "an IAM role or user ARN"),
    ("nat-mode", _set("aws.natGateways", "none"), "aws.natGateways", "single"),
    ("min-above-max", _set("gpuPools.0.minNodes", 9), "gpuPools[0].minNodes", "at most maxNodes"),
    ("aws-section-missing", _set("aws", _DELETE), "aws", "required when cloud is aws"),
    # EKS refuses a 41st publicAccessCidrs range (quota 'Public endpoint access CIDR ranges per cluster': 40).
    ("public-access-cidrs-41", _set("adminCidrs", [f"198.51.{i}.0/24" for i in range(41)]), "adminCidrs",
     "at most 40 ranges on AWS"),
]


@pytest.mark.parametrize("mutate,key,text", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_aws_section_names_the_key(mutate, key, text):
    raw = copy.deepcopy(raw_config())
    mutate(raw)
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "aws-prod")
    message = str(err.value)
    assert "stacks/Pulumi.aws-prod.yaml" in message
    assert f"gpu-platform:{key}:" in message, message
    assert text in message, message


# --- one system-pool shape on every cloud; last release's systemNodes{instanceType,min,max} still read ----


def test_system_pool_new_shape_and_defaults():
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(raw_config(), "aws-prod")
    assert (cfg.aws.system_pool.instance_type, cfg.aws.system_pool.min_nodes, cfg.aws.system_pool.max_nodes) == (
        "m6i.large", 2, 6)
    assert not [w for w in config_warnings(cfg) if "system" in w]
    raw = raw_config()
    raw["aws"].pop("systemPool")
    assert parse_config(raw, "aws-prod").aws.system_pool == cfg.aws.system_pool  # defaults: m6i.large 2..6
    raw["aws"]["systemPool"] = {"maxNodes": 5}
    assert parse_config(raw, "aws-prod").aws.system_pool.model_dump() == {
        "instance_type": "m6i.large", "min_nodes": 2, "max_nodes": 5}


def test_deprecated_system_nodes_is_read_with_a_warning_and_gives_the_same_pool():
    from gpu_platform.config.stack import config_warnings

    raw = raw_config()
    raw["aws"]["systemPool"] = {"instanceType": "m7i.large", "minNodes": 3, "maxNodes": 6}
    new = parse_config(raw, "aws-prod")
    raw["aws"].pop("systemPool")
    raw["aws"]["systemNodes"] = {"instanceType": "m7i.large", "min": 3, "max": 6}
    old = parse_config(raw, "aws-prod")
    assert old.aws.system_pool == new.aws.system_pool
    [warning] = [w for w in config_warnings(old) if "system" in w]
    assert "gpu-platform:aws.systemNodes{instanceType,min,max} is deprecated" in warning
    assert "gpu-platform:aws.systemPool{instanceType,minNodes,maxNodes}" in warning
    assert not [w for w in config_warnings(new) if "system" in w]


def test_forty_admin_ranges_fit_the_eks_endpoint_and_a_private_endpoint_takes_more():
    raw = raw_config()
    raw["adminCidrs"] = [f"198.51.{i}.0/24" for i in range(40)]
    cfg = parse_config(raw, "aws-prod")
    assert len(cfg.admin_cidrs) == 40
    # Private only: adminCidrs do not become publicAccessCidrs, so the endpoint's limit does not apply.
    raw["adminCidrs"] = [f"198.51.{i}.0/24" for i in range(41)]
    raw["aws"]["endpointPrivateOnly"] = True
    assert len(parse_config(raw, "aws-prod").admin_cidrs) == 41


def test_the_region_table_is_what_the_pinned_botocore_and_moto_say():
    """gpu_platform/config/aws_regions.yaml is botocore's partition data (EKS regions) and moto's recorded zones;
    a botocore or moto upgrade that changes them fails here until `python -m gpu_platform.config.aws_regions`."""
    import yaml

    from gpu_platform.config.aws_regions import REGIONS_FILE, aws_regions, recording

    doc = yaml.safe_load(REGIONS_FILE.read_text())
    assert recording(doc["retrieved"]) == doc
    assert {"us-east-1", "eu-west-1", "us-gov-west-1", "cn-north-1"} <= set(aws_regions())
    assert aws_regions()["us-east-1"].last_letter == "f"
