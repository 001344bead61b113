"""Two stacks with the same `environment` in one account (issue 22): with `nameSuffix` their cloud
names and the budget's cost filter are disjoint; without it they would collide (gpu-<environment>)."""

from __future__ import annotations

import pytest

from gpu_platform.components.aws.billing import stack_cost_filter
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.config.names import derived_names
from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
from tests.conftest import stack_config

NAMED = ("name", "bucketPrefix")


def _config(suffix):
    config = stack_config("aws-prod")
    if suffix:
        config["gpu-platform:nameSuffix"] = suffix
    return config


def _names(plan) -> set[str]:
    return {str(r.inputs[k]) for r in plan.resources for k in NAMED
            if r.type.startswith("aws:") and isinstance(r.inputs.get(k), str)}


def test_two_stacks_with_one_environment_get_disjoint_names_and_budgets():
    a = run_program(stack_input_from_mapping("aws-prod", _config("team1")))
    b = run_program(stack_input_from_mapping("aws-prod", _config("team2")))
    assert _names(a) and not _names(a) & _names(b), _names(a) & _names(b)
    budgets = [p.one("aws:budgets/budget:Budget").inputs["costFilters"] for p in (a, b)]
    assert budgets[0] == stack_cost_filter("gpu-prod-team1") and budgets[1] == stack_cost_filter("gpu-prod-team2")
    assert a.one("aws:eks/cluster:Cluster").inputs["tags"]["cluster"] == "gpu-prod-team1"


def test_without_a_suffix_names_stay_as_they_were():
    """Opt-in: an existing stack keeps its names (renaming would replace every resource)."""
    cfg = parse_config({k.split(":", 1)[1]: v for k, v in _config(None).items() if k.startswith("gpu-platform:")},
                       "aws-prod")
    assert cfg.name_prefix == "gpu-prod"
    assert any(n.value == "gpu-prod" for n in derived_names(cfg))


@pytest.mark.parametrize("bad", ["Team", "toolong7", "a-b", ""])
def test_a_bad_suffix_is_a_config_error_naming_the_key(bad):
    raw = {k.split(":", 1)[1]: v for k, v in _config(bad).items() if k.startswith("gpu-platform:")}
    raw["nameSuffix"] = bad
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "aws-prod")
    assert "nameSuffix" in str(err.value)


def test_gcp_refuses_a_suffix_because_gke_clusters_of_one_project_share_workload_identity():
    # A second GKE cluster in the project would map its training/trainer to the same
    # <project>.svc.id.goog member, so it could write this stack's checkpoints.
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items() if k.startswith("gpu-platform:")}
    raw["nameSuffix"] = "team1"
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "gcp-prod")
    assert "nameSuffix" in str(err.value) and "svc.id.goog" in str(err.value) and "own project" in str(err.value)
