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


def test_an_unknown_key_comes_with_the_field_and_cross_section_mistakes():
    """The adopter's stack: a misspelt key, a typo in an instance type, two pools with minNodes > maxNodes.
    All four come in the first run, not the unknown key alone and the rest after it is fixed."""
    config = raw("aws-prod")
    config["aws"]["natGateway"] = config["aws"].pop("natGateways")  # did you mean natGateways?
    config["gpuPools"][0]["instanceType"] = "g5.xlarg"
    config["gpuPools"][0]["minNodes"] = 9
    config["gpuPools"][1]["minNodes"] = 5
    config["monthly_budget_usd"] = config.pop("monthlyBudgetUsd")     # another spelling, still read as the budget
    with pytest.raises(ConfigError) as err:
        parse_config(config, "aws-prod")
    issues = {i.key: i.allowed for i in err.value.issues}
    assert "did you mean natGateways?" in issues.pop("aws.natGateway")
    assert "did you mean monthlyBudgetUsd?" in issues.pop("monthly_budget_usd")
    assert "g5.xlarge" in issues["gpuPools[0].instanceType"]  # the allowed types
    assert "g5.xlarg is not an AWS GPU type in the catalog" in issues["gpuPools[0].instanceType"]  # not "a aws"
    assert {"gpuPools[0].instanceType", "gpuPools[0].minNodes", "gpuPools[1].minNodes"} == set(issues), issues


def test_an_unknown_key_without_a_guess_does_not_hide_the_others():
    config = raw("gcp-prod")
    config["gcp"]["nodeImage"] = "cos"                                  # no known key is close
    config["gpuPools"][0]["minNodes"] = 12
    with pytest.raises(ConfigError) as err:
        parse_config(config, "gcp-prod")
    keys = {i.key for i in err.value.issues}
    assert {"gcp.nodeImage", "gpuPools[0].minNodes"} <= keys, keys


def test_every_pool_outside_the_gcp_region_is_named_with_the_regions_offering_them_all():
    # europe-north1: no L4 and no A100 40GB there (gcp.yaml regions: Cyclenerd machinetyperegion.csv, 2026-08-17)
    config = raw("gcp-prod")
    config["gcp"]["region"] = "europe-north1"
    config["gcp"]["zones"] = ["europe-north1-a", "europe-north1-b"]
    config["gpuPools"] = [{"name": "l4", "instanceType": "g2-standard-8", "capacity": "spot", "minNodes": 0, "maxNodes": 4},
                          {"name": "a100", "instanceType": "a2-highgpu-1g", "capacity": "spot", "minNodes": 0, "maxNodes": 2}]
    with pytest.raises(ConfigError) as err:
        parse_config(config, "gcp-prod")
    issues = {i.key: i.allowed for i in err.value.issues}
    assert "europe-north1" in issues["gpuPools[0].instanceType"] and "europe-north1" in issues["gpuPools[1].instanceType"]
    region = issues["gcp.region"]
    assert "a2-highgpu-1g and g2-standard-8" in region
    common = region.split(": ", 1)[1].split(", ")
    assert common == ["asia-northeast1", "asia-northeast3", "asia-southeast1", "europe-west4", "us-central1", "us-east1",
                      "us-west1", "us-west4"], region
    assert "me-west1" not in common and "europe-west1" not in common  # A100 only / L4 only


def test_a_misspelt_structured_key_as_the_cli_passes_it_is_read_as_the_right_key():
    """Under `pulumi up` structures arrive as JSON text; a misspelt gpuPools is still checked as gpuPools."""
    import json

    config = {k: json.dumps(v) if isinstance(v, (list, dict)) else str(v) for k, v in raw("aws-prod").items()}
    pools = json.loads(config.pop("gpuPools"))
    pools[0]["minNodes"] = 9
    config["gpu_pools"] = json.dumps(pools)
    with pytest.raises(ConfigError) as err:
        parse_config(config, "aws-prod")
    assert {i.key for i in err.value.issues} == {"gpu_pools", "gpuPools[0].minNodes"}, err.value


def test_an_on_demand_approval_with_a_filler_reason_is_one_problem_on_its_own_key():
    """Adopter review F8: `approvedOnDemand: {reason: "foo bar baz qux quux", approver: bob@corp.com}` reported 2
    problems, one of them pydantic's union noise `approvedOnDemand.bool: {...} -> Input should be a valid
    boolean`. The map is an approval: only its reason is wrong, under approvedOnDemand.reason; a scalar that is
    no boolean is judged as a boolean, without the approval's fields."""
    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config
    from tests.test_gcp_config import base

    raw = base()
    raw["gpuPools"][0].update(capacity="on-demand",
                              approvedOnDemand={"reason": "foo bar baz qux quux", "approver": "bob@corp.com"})
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "host3")
    keys = [i.key for i in err.value.issues]
    assert keys == ["gpuPools[0].approvedOnDemand.reason"], str(err.value)
    assert "valid boolean" not in str(err.value) and "must be a real reason" in str(err.value)
    raw["gpuPools"][0]["approvedOnDemand"] = "yes please"
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "host3")
    assert [i.key for i in err.value.issues] == ["gpuPools[0].approvedOnDemand"], str(err.value)
    assert "OnDemandApproval" not in str(err.value)


def test_a_linode_stack_without_registry_and_provider_token_expiry_hears_of_both_at_once(tmp_path):
    """Adopter review (issue 37, round 3), D: an autoscaled Linode pool with neither linode.imageRegistry (nor
    linode.nodeGroups.image) nor linode.nodeGroups.apiTokenExpires got only the registry error; the missing expiry
    came in the next run, after the registry was given. docs/configuration.md: all of a file's problems in one run."""
    import yaml

    from tests.cli_support import preflight_in_process
    from tests.conftest import ROOT

    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.linode-dev.yaml").read_text())
    section = doc["config"]["gpu-platform:linode"]
    del section["imageRegistry"], section["nodeGroups"]
    stack_file = tmp_path / "Pulumi.linode-dev.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    run = preflight_in_process("--stack-file", str(stack_file), "--no-policies", "--out", str(tmp_path / "out"),
                               env={"NO_COLOR": "1", "GPU_PLATFORM_TODAY": "2026-11-29"})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "linode.imageRegistry" in run.stderr and "linode.nodeGroups.apiTokenExpires" in run.stderr, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
