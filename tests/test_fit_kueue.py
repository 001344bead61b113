"""Cluster fit's model of Kueue's flavor assignment (gpu_platform/preflight/fit/kueue.py) against what
Kueue v0.19.2 does (pkg/scheduler/flavorassigner): flavors tried in the ClusterQueue's order, the pod's
nodeSelector/affinity checked against each flavor's own nodeLabels, taints, quota. Each case was a
disagreement between fit and the rehearsal's real Kueue (docs/rehearsal.md, the differential check)."""

from __future__ import annotations

import copy

from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.kueue import assign, flavor_mismatch
from gpu_platform.preflight.fit.nodes import cluster_model
from gpu_platform.preflight.fit.render import render_plan
from gpu_platform.preflight.runner import load_stack, run_program, stack_input_from_mapping
from tests.conftest import stack_config
from tests.fit_support import CHART_DIRS, need_charts, rendered, stack_plan

GPU = "nvidia.com/gpu"


def _fit(stack: str, config: dict | None = None):
    need_charts()
    if config is None:
        cfg = parse_config(load_stack(stack).raw, stack)
        plan, releases = stack_plan(stack), rendered(stack)
    else:
        stack_input = stack_input_from_mapping(stack, config)
        cfg = parse_config(stack_input.raw, stack)
        plan = run_program(stack_input)
        releases = render_plan(plan, CHART_DIRS, kubernetes_version=cfg.kubernetes_version)
    return check_fit(cluster_model(cfg, plan), [copy.deepcopy(r) for r in releases if r.rendered])


def _group(report, needle: str) -> set[str]:
    return {p.group for p in report.placements if needle in p.object}


def _flavor(pool: str, taint: bool = True) -> dict:
    spec = {"nodeLabels": {"gpu-platform.io/pool": pool}}
    if taint:
        spec["nodeTaints"] = [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
        spec["tolerations"] = [{"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    return {"metadata": {"name": pool}, "spec": spec}


def _cq(*flavors: tuple[str, int]) -> dict:
    return {"metadata": {"name": "q"}, "spec": {"resourceGroups": [{
        "coveredResources": ["cpu", "memory", GPU],
        "flavors": [{"name": n, "resources": [{"name": "cpu", "nominalQuota": "64"}, {"name": "memory", "nominalQuota": "256Gi"},
                                              {"name": GPU, "nominalQuota": g}]} for n, g in flavors]}]}}


def test_a_pod_selecting_the_second_flavor_is_assigned_to_it():
    """Kueue keeps a flavor only if the pod's selector, cut to that flavor's label keys, matches it."""
    flavors = {"a10g": _flavor("a10g"), "l4x4": _flavor("l4x4")}
    spec = {"nodeSelector": {"gpu-platform.io/pool": "l4x4"}}
    got = assign([("main", spec, {"cpu": 1000, GPU: 1})], _cq(("a10g", 8), ("l4x4", 8)), flavors)
    assert got.admitted and got.flavor_of("main") == "l4x4"
    assert flavor_mismatch(spec, flavors["a10g"]) == "flavor a10g doesn't match node affinity"
    # A selector key no flavor carries is ignored by Kueue (the scheduler judges it later).
    got = assign([("main", {"nodeSelector": {"other": "x"}}, {GPU: 1})], _cq(("a10g", 8), ("l4x4", 8)), flavors)
    assert got.flavor_of("main") == "a10g"


def test_zero_quota_moves_on_to_the_next_flavor_or_leaves_the_job_pending():
    flavors = {"a10g": _flavor("a10g"), "l4x4": _flavor("l4x4")}
    got = assign([("main", {}, {GPU: 1})], _cq(("a10g", 0), ("l4x4", 8)), flavors)
    assert got.flavor_of("main") == "l4x4"
    pinned = {"nodeSelector": {"gpu-platform.io/pool": "a10g"}}
    got = assign([("main", pinned, {GPU: 1})], _cq(("a10g", 0), ("l4x4", 8)), flavors)
    assert not got.admitted
    assert "insufficient quota for nvidia.com/gpu in flavor a10g" in got.reason
    assert "flavor l4x4 doesn't match node affinity" in got.reason


def test_required_affinity_terms_and_untolerated_flavor_taints():
    flavors = {"a10g": _flavor("a10g"), "l4x4": _flavor("l4x4")}
    aff = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-platform.io/pool", "operator": "NotIn", "values": ["a10g"]}]}]}}}}
    assert assign([("main", aff, {GPU: 1})], _cq(("a10g", 8), ("l4x4", 8)), flavors).flavor_of("main") == "l4x4"
    # A flavor with a taint and no toleration of its own: only a pod that tolerates it may use it.
    bare = {"metadata": {"name": "a10g"}, "spec": {"nodeLabels": {"gpu-platform.io/pool": "a10g"},
                                                   "nodeTaints": [{"key": GPU, "value": "present", "effect": "NoSchedule"}]}}
    got = assign([("main", {}, {GPU: 1})], _cq(("a10g", 8)), {"a10g": bare})
    assert not got.admitted and "untolerated taint" in got.reason
    # A requested resource the queue does not cover: never admitted.
    got = assign([("main", {}, {"ephemeral-storage": 1})], _cq(("a10g", 8)), flavors)
    assert not got.admitted and "unavailable in ClusterQueue" in got.reason


def test_aws_prod_l4x4_notebook_profile_lands_on_l4x4():
    """The rehearsal's real Kueue put the gpu-l4x4 profile on flavor l4x4; fit used to lay the first
    flavor's labels over the pod's selector and place it on a10g."""
    report = _fit("aws-prod")
    assert _group(report, "(profile gpu-l4x4)") == {"l4x4"}
    assert _group(report, "(profile gpu-a10g)") == {"a10g"}
    assert report.queue["Pod/jupyterhub/jupyter-<user> (profile gpu-l4x4)"]["flavors"]["main"][GPU] == "l4x4"


def test_aws_prod_zero_quota_flavor_admits_nothing():
    """The issue's case: gpuQuota {a10g: 0} on aws-prod. Fit used to place the TrainJob on the zero-quota
    a10g flavor (the first one); Kueue skips it for l4x4. (The stack no longer offers the gpu-a10g
    notebook profile then: notebooks.offered_pools.)"""
    config = stack_config("aws-prod")
    config.setdefault("gpu-platform:platform", {})["gpuQuota"] = {"a10g": 0}
    report = _fit("aws-prod", config)
    assert report.queue["TrainJob/training/resnet-checkpointed"]["flavors"]["node"][GPU] == "l4x4"
    assert _group(report, "TrainJob/training/resnet-checkpointed") == {"l4x4"}
    assert not _group(report, "(profile gpu-a10g)")
