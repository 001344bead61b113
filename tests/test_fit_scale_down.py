"""Cluster fit's scale-down check judges each node a queued job's pod may run on as cluster-autoscaler does
(issue 37 round 3 item 1): on a GPU node the autoscaler's utilisation is the GPUs' alone, and a node above the
threshold the stack's autoscaler runs with is never a scale-down candidate (cluster-autoscaler 1.36.1
simulator/utilization/info.go `Calculate`, core/scaledown/eligibility/eligibility.go
`isNodeAtOrBelowUtilizationThreshold`). A 1-GPU job on 1-GPU nodes needs no annotation; one GPU of eight does."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from gpu_platform.preflight.fit import scale_down as S
from gpu_platform.preflight.fit.checks import check_fit
from tests.test_fit_checks import GPU_TAINT, checks_of, gpu_group, group, model, rel

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"


def autoscaler_deployment(*flags: str) -> dict:
    """The Deployment the pinned cluster-autoscaler chart renders (its container's command, as on EKS)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "ca"}}, "template": {
                "metadata": {"labels": {"app": "ca"}},
                "spec": {"containers": [{
                    "name": "aws-cluster-autoscaler", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.2",
                    "command": ["./cluster-autoscaler", "--cloud-provider=aws", "--scale-down-unneeded-time=10m", *flags],
                    "resources": {"requests": {"cpu": "100m", "memory": "300Mi"}}}]}}}}


def queue(pool: str, gpus: int) -> list[dict]:
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": pool},
              "spec": {"nodeLabels": {"gpu-platform.io/pool": pool}, "tolerations": [GPU_TAINT]}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu-training"},
          "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
              {"name": pool, "resources": [{"name": "cpu", "nominalQuota": 64}, {"name": "memory", "nominalQuota": "512Gi"},
                                           {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "default", "namespace": "training"},
          "spec": {"clusterQueue": "gpu-training"}}
    return [flavor, cq, lq]


def job(gpus: int, annotated: bool = False) -> dict:
    """The reviewer's job: a batch/v1 Job in the LocalQueue `default`, asking `gpus` GPUs."""
    meta = {"annotations": {SAFE_TO_EVICT: "false"}} if annotated else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "job1", "namespace": "training", "labels": {"kueue.x-k8s.io/queue-name": "default"}},
            "spec": {"template": {"metadata": meta, "spec": {"restartPolicy": "Never", "containers": [{
                "name": "train", "image": "trainer",
                "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": str(gpus)},
                              "limits": {"memory": "8Gi", "nvidia.com/gpu": str(gpus)}}}]}}}}


def fit(node_gpus: int, job_gpus: int, *flags: str, autoscaler: bool = True, kept: str = "", annotated: bool = False,
        who: str = "cluster-autoscaler"):
    m = model(group("system", lo=1, hi=3), gpu_group("pool", cpu=30000, mem_gib=200, gpus=node_gpus, hi=4))
    m.autoscaler, m.busy_gpu_nodes_kept = who, kept
    releases = [rel("kueue", queue("pool", 4 * node_gpus)), rel("example", [job(job_gpus, annotated)], source="example")]
    if autoscaler:
        releases.append(rel("cluster-autoscaler", [autoscaler_deployment(*flags)]))
    return check_fit(m, releases)


def test_a_job_that_fills_its_one_gpu_node_is_not_flagged():
    """g6e.xlarge / g5.2xlarge: 1 GPU a node; the job's pod asks for it: the node's utilisation is 1 > 0.5."""
    report = fit(1, 1)
    assert not checks_of(report, "scale-down"), checks_of(report, "scale-down")
    assert report.ok, report.problems
    assert any("never scale-down candidates" in n for n in report.notes), report.notes
    assert any("GPU nodes 0.5" in n and "kube-system/cluster-autoscaler" in n for n in report.notes), report.notes


def test_one_gpu_of_eight_is_flagged_with_the_node_and_threshold():
    [p] = checks_of(fit(8, 1), "scale-down")
    assert p.object == "Job/training/job1"
    assert "1 of 8 GPUs (12%)" in p.reason and "0.5 threshold" in p.reason, p.reason
    assert SAFE_TO_EVICT in p.fix


def test_a_node_exactly_at_the_threshold_is_a_candidate():
    """eligibility.go says "not underutilized" only when utilisation > threshold: 2 of 4 GPUs (0.5) is removable."""
    assert checks_of(fit(4, 2), "scale-down")
    assert not checks_of(fit(4, 3), "scale-down")


def test_the_threshold_is_read_from_the_rendered_autoscaler():
    assert not checks_of(fit(4, 2, "--scale-down-gpu-utilization-threshold=0.4"), "scale-down")
    # Go's flag forms: -name=value and --name value; the CPU threshold does not apply to GPU nodes.
    assert not checks_of(fit(4, 2, "-scale-down-gpu-utilization-threshold", "0.3"), "scale-down")
    assert checks_of(fit(4, 2, "--scale-down-utilization-threshold=0.1"), "scale-down")
    # Raised to 1: even a full node is a candidate (utilisation 1 is "at or below").
    [p] = checks_of(fit(1, 1, "--scale-down-gpu-utilization-threshold=1.0"), "scale-down")
    assert "1 of 1 GPUs (100%), at or below the 1 threshold" in p.reason


def test_an_unreadable_threshold_is_a_render_problem_not_a_traceback():
    report = fit(1, 1, "--scale-down-gpu-utilization-threshold=half")
    [p] = checks_of(report, "render")
    assert "not a number" in p.reason and "kube-system/cluster-autoscaler" in p.reason


def test_an_autoscaler_the_stack_does_not_deploy_clears_only_a_full_node():
    """GKE's own autoscaler (OPTIMIZE_UTILIZATION): its threshold is not published, so only a pod asking for all
    its node's GPUs is taken to keep it."""
    assert not checks_of(fit(1, 1, autoscaler=False), "scale-down")
    [p] = checks_of(fit(4, 3, autoscaler=False), "scale-down")
    assert "3 of 4 GPUs" in p.reason and "not known" in p.reason


def test_an_annotated_job_or_the_eks_controller_keeps_a_half_used_node():
    assert not checks_of(fit(8, 1, annotated=True), "scale-down")
    kept = "the scale-in protection controller annotates every busy GPU node scale-down-disabled"
    report = fit(8, 1, kept=kept)
    assert not checks_of(report, "scale-down"), report.problems
    assert any("Job/training/job1" in n and "1 of 8 GPUs" in n and kept in n for n in report.notes), report.notes


def test_karpenter_consolidates_whatever_the_utilisation():
    [p] = checks_of(fit(1, 1, autoscaler=False, who="karpenter"), "scale-down")
    assert "karpenter.sh/do-not-disrupt" in p.reason and "consolidate" in p.reason


def test_a_fixed_size_group_is_not_judged():
    m = model(group("system", lo=1, hi=1), dataclasses.replace(gpu_group("pool", cpu=30000, mem_gib=200, gpus=8), min_nodes=2, max_nodes=2))
    report = check_fit(m, [rel("kueue", queue("pool", 16)), rel("example", [job(1)], source="example"),
                           rel("cluster-autoscaler", [autoscaler_deployment()])])
    assert not checks_of(report, "scale-down")


def test_flag_value_reads_go_flag_forms():
    words = ["./cluster-autoscaler", "--a=1", "-b=2", "--c", "3", "--a=4"]
    assert [S.flag_value(words, k) for k in "abcd"] == ["4", "2", "3", None]


def test_the_reviewers_stack_one_gpu_pools_and_a_one_gpu_job(tmp_path):
    """The adopter's shape (issue 37 round 3): an EKS stack whose GPU pools are g6e.xlarge and g5.2xlarge (1 GPU a
    node), rendered with the pinned cluster-autoscaler chart, and `--job` a batch/v1 Job asking 1 GPU. Its pods fill
    every node they may run on: no scale-down finding, whatever else the platform asks of the Job (its admission
    policy wants the annotation on every training pod in `training`, and says so)."""
    import yaml

    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.fit.render import render_plan
    from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
    from tests.conftest import stack_config
    from tests.fit_support import CHART_DIRS, need_charts

    need_charts()
    config = stack_config("aws-prod")
    config["gpu-platform:gpuPools"] = [
        {"name": "l40s", "instanceType": "g6e.xlarge", "capacity": "spot", "minNodes": 0, "maxNodes": 4},
        {"name": "a10g", "instanceType": "g5.2xlarge", "capacity": "spot", "minNodes": 0, "maxNodes": 4}]
    config["gpu-platform:aws"]["pools"] = {}
    config["gpu-platform:aws"]["scaleInController"] = {"enabled": False}  # the autoscaler's own judgement alone
    stack = stack_input_from_mapping("adopter", config)
    cfg, plan = parse_config(stack.raw, "adopter"), run_program(stack)
    (tmp_path / "job1.yaml").write_text(yaml.safe_dump(job(1)))
    releases = [r for r in render_plan(plan, CHART_DIRS, kubernetes_version=cfg.kubernetes_version,
                                       example=tmp_path / "job1.yaml") if r.rendered]
    report = check_fit(cluster_model(cfg, plan), releases)
    assert not checks_of(report, "scale-down"), checks_of(report, "scale-down")
    assert any("scale-down: cluster-autoscaler's utilisation thresholds: GPU nodes 0.5" in n for n in report.notes)
    assert any("1 queued job pod set(s) ask for more of every node" in n for n in report.notes), report.notes
    # The same Job asking 1 GPU on g6.12xlarge nodes (4 GPUs) leaves them candidates: named.
    config["gpu-platform:gpuPools"] = [
        {"name": "l4x4", "instanceType": "g6.12xlarge", "capacity": "spot", "minNodes": 0, "maxNodes": 2}]
    stack = stack_input_from_mapping("adopter", config)
    cfg, plan = parse_config(stack.raw, "adopter"), run_program(stack)
    releases = [r for r in render_plan(plan, CHART_DIRS, kubernetes_version=cfg.kubernetes_version,
                                       example=tmp_path / "job1.yaml") if r.rendered]
    [p] = checks_of(check_fit(cluster_model(cfg, plan), releases), "scale-down")
    assert "1 of 4 GPUs (25%), at or below the 0.5 threshold" in p.reason, p.reason
