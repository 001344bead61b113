"""Stacks on which the differential check (gpu_platform/rehearsal/differential.py, docs/rehearsal.md)
found cluster fit and the real control plane disagreeing, kept as plain fit tests (no control plane):
each asserts what the real API server, Kueue and scheduler answered, which fit now answers too."""

from __future__ import annotations

import copy

import pytest

from gpu_platform.rehearsal.differential import Case, prepare
from tests.conftest import ROOT, stack_config
from tests.fit_support import CHART_DIRS, need_charts


def _answers(base: str, pools: list[dict], quota: dict, job_gpus: int, job_pool=None) -> dict[str, dict]:
    need_charts()
    config = stack_config(base)
    template = config["gpu-platform:gpuPools"][0]
    config["gpu-platform:gpuPools"] = [{**copy.deepcopy(template), **p} for p in pools]
    if base == "aws-prod":
        config["gpu-platform:aws"].pop("pools", None)
    if quota:
        config["gpu-platform:platform"]["gpuQuota"] = quota
    prep = prepare(Case("case", base, config, job_gpus, job_pool), CHART_DIRS, ROOT)
    assert prep.error is None, prep.error
    return {q["id"]: q["fit"] for q in prep.questions}


def test_a_job_no_single_node_holds_is_refused_by_the_fit_policy_not_left_pending():
    """Differential 2026-11-24 (seed 7, gen-004): aws-prod with pools r0 (g5.2xlarge, quota 0) and p1
    (g6.xlarge, 2 nodes); a 3-GPU TrainJob naming no pool. Fit said Kueue leaves it pending (no flavor
    has 3 GPUs of quota); the API server refuses it first: the platform's ValidatingAdmissionPolicy
    gpu-jobs-fit-their-pool (no node has 3 GPUs). Fit now evaluates the policies of the releases."""
    got = _answers("aws-prod", [{"name": "r0", "instanceType": "g5.2xlarge", "minNodes": 1, "maxNodes": 1},
                                {"name": "p1", "instanceType": "g6.xlarge", "minNodes": 2, "maxNodes": 2}],
                   {"r0": 0}, job_gpus=3)
    assert got["diff-job-3gpu"]["outcome"] == "refused"
    assert "gpu-jobs-fit-their-pool" in got["diff-job-3gpu"]["reason"] and "Room per pod" in got["diff-job-3gpu"]["reason"]
    assert got["resnet-checkpointed"] == {"outcome": "runs", "flavor": "p1", "groups": ["p1"]}  # r0 has no quota


def test_a_pinned_job_that_fits_its_pool_is_not_refused():
    got = _answers("aws-prod", [{"name": "a10g", "instanceType": "g5.xlarge", "minNodes": 0, "maxNodes": 2},
                                {"name": "l4x4", "instanceType": "g6.12xlarge", "minNodes": 0, "maxNodes": 1}],
                   {}, job_gpus=3, job_pool="l4x4")
    assert got["diff-job-3gpu-l4x4"] == {"outcome": "runs", "flavor": "l4x4", "groups": ["l4x4"]}


@pytest.mark.parametrize("gpus,outcome", [(1, "runs"), (2, "refused")])
def test_linode_single_gpu_pool_job_sizes(gpus, outcome):
    got = _answers("linode-dev", [{"name": "ada", "instanceType": "g2-gpu-rtx4000a1-m", "minNodes": 0, "maxNodes": 1}],
                   {}, job_gpus=gpus)
    assert got[f"diff-job-{gpus}gpu"]["outcome"] == outcome
