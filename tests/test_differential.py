"""The differential check of cluster fit (gpu_platform/rehearsal/differential.py): fit's answers vs the
real control plane's on the same questions. The first tests need no component; the last runs a small
fixed set (one shipped stack, 10 generated ones) on the control plane built by `make rehearsal-build`;
`make differential N=200` runs the big one (docs/rehearsal.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.rehearsal import binaries
from gpu_platform.rehearsal.differential import POOL_LABEL, Case, _probe, agree, generated_cases, run, summary
from tests.conftest import ROOT
from tests.fit_support import CHART_DIRS, need_charts

HAVE_CACHE = binaries.bin_dir().is_dir()


def test_generated_stacks_are_fixed_by_the_seed_and_vary_what_fit_models():
    a, b = generated_cases(25, seed=11), generated_cases(25, seed=11)
    assert [c.config for c in a] == [c.config for c in b] and len(a) == 25
    assert [c.config for c in generated_cases(25, seed=12)] != [c.config for c in a]
    pools = [p for c in a for p in c.config["gpu-platform:gpuPools"]]
    assert len({p["instanceType"] for p in pools}) >= 4
    assert {p["maxNodes"] for p in pools} >= {1, 2, 3} and 0 in {p["minNodes"] for p in pools}
    quotas = [q for c in a for q in (c.config["gpu-platform:platform"].get("gpuQuota") or {}).values()]
    assert 0 in quotas and max(quotas) > 0
    assert {c.base for c in a} >= {"aws-prod", "gcp-prod", "linode-dev"}
    assert any(c.job_pool for c in a) and any(c.job_pool is None for c in a) and max(c.job_gpus for c in a) > 1


def test_probe_job_asks_for_its_gpus_on_its_pool():
    example = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
               "metadata": {"name": "x", "namespace": "training", "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
               "spec": {"trainer": {"resourcesPerNode": {"requests": {"cpu": "2"}}}}}
    job = _probe(example, 3, "a10g")
    assert job["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "3"
    assert job["metadata"]["labels"] == example["metadata"]["labels"] and example["spec"]["trainer"]["resourcesPerNode"].get("limits") is None
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert pod["name"] == "node" and pod["template"]["spec"]["template"]["spec"]["nodeSelector"] == {POOL_LABEL: "a10g"}


def test_answers_agree_only_on_the_same_outcome_flavor_and_group():
    runs = {"outcome": "runs", "flavor": "a10g", "groups": ["a10g"]}
    assert agree(runs, dict(runs))[0]
    assert agree({**runs, "groups": ["a10g", "l4x4"]}, runs)[0]  # the scheduler chose one of fit's groups
    assert agree(runs, {**runs, "flavor": "l4x4", "groups": ["l4x4"]}) == (False, "flavor: fit a10g, Kueue l4x4")
    assert not agree(runs, {**runs, "groups": ["system"]})[0]
    assert not agree(runs, {"outcome": "not-admitted", "reason": "insufficient quota"})[0]
    assert agree({"outcome": "not-admitted"}, {"outcome": "not-admitted", "reason": "x"})[0]
    policy = {"outcome": "refused", "reason": "ValidatingAdmissionPolicy 'gpu-jobs-fit-their-pool' denied request"}
    assert agree({"outcome": "refused", "reason": "another wording"}, policy)[0]
    assert not agree({"outcome": "unschedulable"}, policy)[0]
    assert not agree({"outcome": "not-admitted"}, policy)[0]


@pytest.mark.rehearsal
@pytest.mark.skipif(not HAVE_CACHE, reason=f"no component cache at {binaries.bin_dir()}: build it with `{binaries.BUILD_COMMAND}`")
def test_fit_and_the_real_control_plane_agree_on_a_small_fixed_set(tmp_path):
    """The differential (rehearsal/differential.py) runs its own control plane per cloud, re-dressed per
    generated stack: it installs only the controllers and the program's objects, not a shipped stack."""
    need_charts()
    cases = [Case("linode-dev", "linode-dev", None)] + generated_cases(10)
    (tmp_path / "differential-logs" / "linode-from-a-run-before").mkdir(parents=True)
    record = run(cases, tmp_path / "differential.json", CHART_DIRS, ROOT, echo=lambda s: None)
    text = summary(record, 0, 10)
    compared = [s for s in record["stacks"] if "questions" in s]
    assert len(compared) == 11, text
    assert sum(len(s["questions"]) for s in compared) >= 33, text
    assert all(not c["controllerProblems"] for c in record["controlPlanes"]), record["controlPlanes"]
    assert record["disagreements"] == [], text
    assert (tmp_path / "differential.json").exists()
    # Each control plane's logs beside the record, named in it (not left in /tmp, a folder a run); a run before's
    # replaced, as its record is.
    assert not (tmp_path / "differential-logs" / "linode-from-a-run-before").exists()
    assert [Path(c["logs"]).parent for c in record["controlPlanes"]] == [tmp_path / "differential-logs"] * len(
        record["controlPlanes"]) and all((Path(c["logs"]) / "kube-apiserver.log").is_file()
                                         for c in record["controlPlanes"]), record["controlPlanes"]
