"""Every instance type the config accepts is priced, or refused as a config error naming the key, or (priced in
other regions than the stack's) refused by the bill naming the type and the region (issue 22 item 6). Before: an
EKS stack with a p4d.24xlarge (or p5.48xlarge) spot pool passed validation, then preflight crashed with a
traceback in the monitoring component's price lookup (the catalog has no us-east-1 spot price for them)."""

from __future__ import annotations

import pytest

from gpu_platform.components.cluster import POOL_LABEL, GpuPoolSpec
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.components.platform.monitoring import pool_hourly_prices
from gpu_platform.costs.catalog import CAPACITIES, load_catalog
from gpu_platform.costs.estimator import RegionPriceRefused, estimate
from tests.conftest import stack_config

BASES = {"linode": "linode-dev", "gcp": "gcp-prod", "aws": "aws-prod"}


def _raw(stack: str) -> dict:
    return {k.split(":", 1)[1]: v for k, v in stack_config(stack).items() if k.startswith("gpu-platform:")}


def cases() -> list[tuple[str, str, str]]:
    catalog = load_catalog()
    return [(cloud, t.name, cap) for cloud in BASES for t in catalog.gpu_instances(cloud) for cap in CAPACITIES]


def stack_with(cloud: str, itype: str, capacity: str) -> dict:
    raw = _raw(BASES[cloud])
    pool = {"name": "walk", "instanceType": itype, "capacity": capacity, "minNodes": 0, "maxNodes": 1}
    raw["gpuPools"] = [pool]
    section = raw.get(cloud) or {}
    section.pop("pools", None)  # per-pool extras of the shipped pools
    raw[cloud] = section
    raw.get("platform", {}).pop("gpuQuota", None)
    return raw


@pytest.mark.parametrize("cloud,itype,capacity", cases(), ids=lambda v: str(v))
def test_every_catalog_type_and_capacity_is_priced_or_refused_naming_the_key(cloud, itype, capacity) -> None:
    try:
        cfg = parse_config(stack_with(cloud, itype, capacity), BASES[cloud])
    except ConfigError as err:
        text = str(err)
        assert "gpuPools[0]" in text or f"{cloud}." in text, text
        return
    pool = cfg.gpu_pools[0]
    spec = GpuPoolSpec(pool.name, pool.instance_type, "GPU", 1, 0, 1, pool.capacity, {POOL_LABEL: pool.name})
    region = cfg.cloud_section.region
    try:
        lines = estimate(cfg).lines
    except RegionPriceRefused as err:  # priced in other regions only: exit 3, naming the type and the region
        assert f"no {capacity} price for {itype} in {region}" in str(err), str(err)
        assert pool.name not in pool_hourly_prices(cloud, [spec], cfg.catalog_overrides() or None, region=region)
        return
    # the monitoring component's lookup (the spend rule) and the cost estimate both price it
    assert pool_hourly_prices(cloud, [spec], cfg.catalog_overrides() or None, region=region)[pool.name] > 0
    assert lines


def test_a_p4d_spot_pool_where_no_spot_price_is_recorded_is_refused_by_the_bill_naming_the_region() -> None:
    """p4d Spot has prices in us-east-1, eu-west-1 and ten other regions, none in ap-southeast-1: the config passes
    (it used to refuse p4d Spot in every region), the bill refuses it there naming the type, the region and
    priceOverrides."""
    raw = stack_with("aws", "p4d.24xlarge", "spot")
    raw["aws"] = {**raw["aws"], "region": "ap-southeast-1",
                  "availabilityZones": ["ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"]}
    cfg = parse_config(raw, "aws-prod")
    with pytest.raises(RegionPriceRefused) as err:
        estimate(cfg)
    text = str(err.value)
    assert "no spot price for p4d.24xlarge in ap-southeast-1" in text and "priceOverrides.p4d.24xlarge.spot" in text


def test_a_price_override_makes_the_same_pool_valid() -> None:
    raw = stack_with("aws", "p5.48xlarge", "spot")
    raw["priceOverrides"] = {"p5.48xlarge": {"spot": 30.0}}
    cfg = parse_config(raw, "aws-prod")
    spec = GpuPoolSpec("walk", "p5.48xlarge", "H100", 8, 0, 1, "spot", {POOL_LABEL: "walk"})
    assert pool_hourly_prices("aws", [spec], cfg.catalog_overrides())["walk"] == 30.0
