"""A stack file with several mistakes gets them all in one run: the type checks (pydantic) and the checks
that need a typed config (catalog, zones, pool sizes) are not reported in stages."""

from __future__ import annotations

import pytest

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from tests.conftest import stack_config


def raw(stack: str) -> dict:
    return {k.split(":", 1)[1]: v for k, v in stack_config(stack).items() if k.startswith("gpu-platform:")}


def test_four_mistakes_of_different_kinds_are_reported_together():
    config = raw("gcp-prod")
    config["monthlyBudgetUsd"] = -5                              # a type/range error
    config["gpuPools"][0]["instanceType"] = "a2-nonexistent"     # not in the catalog
    config["gcp"]["zones"] = ["europe-west4-a"]                   # not a zone of the region
    config["gcp"]["systemPool"]["minNodes"] = 7                  # above maxNodes
    with pytest.raises(ConfigError) as err:
        parse_config(config, "gcp-prod")
    keys = {i.key for i in err.value.issues}
    assert {"monthlyBudgetUsd", "gpuPools[0].instanceType", "gcp.zones[0]", "gcp.systemPool.minNodes"} <= keys, keys


def test_a_refused_required_value_does_not_hide_the_others():
    config = raw("aws-prod")
    config["owner"] = 42                                          # wrong type, required key
    config["gpuPools"][0]["minNodes"] = 9                         # above maxNodes
    with pytest.raises(ConfigError) as err:
        parse_config(config, "aws-prod")
    keys = {i.key for i in err.value.issues}
    assert "owner" in keys and "gpuPools[0].minNodes" in keys, keys


def test_a_wrong_cloud_stops_there():
    config = raw("gcp-prod")
    config["cloud"] = "azure"
    with pytest.raises(ConfigError) as err:
        parse_config(config, "gcp-prod")
    assert [i.key for i in err.value.issues][0] == "cloud"
