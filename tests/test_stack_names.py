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


def _budget_counts(cost_filters: list[dict], tags: dict[str, str]) -> bool:
    """What AWS Budgets does with a TagKeyValue cost filter: a cost counts when its resource carries one of
    the filter's `user:<key>$<value>` cost allocation tags."""
    values = [v for f in cost_filters if f["name"] == "TagKeyValue" for v in f["values"]]
    return any(tags.get(v.removeprefix("user:").split("$", 1)[0]) == v.split("$", 1)[1] for v in values)


@pytest.mark.parametrize("suffix", [None, "team1"])
def test_a_team_resource_tagged_with_common_labels_counts_in_the_stack_budget(suffix):
    """A library user's own resource (examples/team-gke labels its bucket with common_labels) is part of the
    stack's spend: the AWS budget filters on the `cluster` tag, which common_labels lacked."""
    from gpu_platform.components.cluster import common_labels

    config = _config(suffix)
    cfg = parse_config(stack_input_from_mapping("aws-prod", config).raw, "aws-prod")
    budget = run_program(stack_input_from_mapping("aws-prod", config)).one("aws:budgets/budget:Budget").inputs
    assert _budget_counts(budget["costFilters"], common_labels(cfg))
    other = parse_config(stack_input_from_mapping("aws-prod", _config("other")).raw, "aws-prod")
    assert not _budget_counts(budget["costFilters"], common_labels(other))  # another stack's spend stays out


def test_the_cluster_label_is_a_valid_gcp_label_value_on_the_longest_stack_name():
    from gpu_platform.components.cluster import CLUSTER_LABEL, common_labels
    from gpu_platform.config.names import GCP_LABEL_VALUE

    config = stack_config("gcp-prod")
    config["gpu-platform:environment"] = "e" * 30  # the longest; GCP stacks take no nameSuffix
    cfg = parse_config(stack_input_from_mapping("gcp-prod", config).raw, "gcp-prod")
    value = common_labels(cfg)[CLUSTER_LABEL]
    assert value == f"gpu-{'e' * 30}" and GCP_LABEL_VALUE.problem(value) is None
    assert GCP_LABEL_VALUE.problem("Gpu-Prod") is not None and GCP_LABEL_VALUE.problem("x" * 64) is not None
