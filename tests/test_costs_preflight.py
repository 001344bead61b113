"""Preflight's cost section: the whole bill from the config, the plan and the rendered charts, for every
shipped stack, with the budget comparison and the catalog age; cost.json holds every line."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.costs import CostReport, gib, load_balancer_services, stack_shape, storage_requests
from tests.conftest import plan_stack, stack_config

ROOT = Path(__file__).resolve().parent.parent
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
TODAY = dt.date(2026, 11, 23)


def _cfg(stack: str):
    raw = stack_config(stack)
    return parse_config({k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpu-platform:")}, stack)


def test_storage_quantities():
    assert gib("10Gi") == 10 and gib("500Mi") == pytest.approx(500 / 1024) and gib("1Ti") == 1024
    assert gib("20G") == pytest.approx(20e9 / 2**30) and gib("lots") is None


def test_pvcs_statefulset_claims_and_load_balancers_from_rendered_objects():
    rel = NS(name="monitoring", objects=[
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "m"},
         "spec": {"resources": {"requests": {"storage": "8Gi"}}}},
        {"kind": "StatefulSet", "metadata": {"name": "prometheus", "namespace": "m"},
         "spec": {"replicas": 2, "volumeClaimTemplates": [
             {"metadata": {"name": "db"}, "spec": {"resources": {"requests": {"storage": "50Gi"}}}}]}},
        {"kind": "Service", "metadata": {"name": "proxy-public", "namespace": "m"}, "spec": {"type": "LoadBalancer"}},
        {"kind": "Service", "metadata": {"name": "hub", "namespace": "m"}, "spec": {"type": "ClusterIP"}},
    ])
    assert storage_requests([rel]) == [("monitoring: PVC m/data", 8.0), ("monitoring: StatefulSet m/prometheus x2 db", 100.0)]
    assert load_balancer_services([rel]) == ["monitoring: m/proxy-public"]


def test_volumes_the_prometheus_operator_creates_are_billed_per_replica_and_shard():
    # kube-prometheus-stack renders no PVC for Prometheus: the operator makes the StatefulSet and its claim
    # from the resource's storage.volumeClaimTemplate, so the claim exists only in the custom resource.
    def resource(kind, spec):
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": kind, "metadata": {"name": "k", "namespace": "m"},
                "spec": {"storage": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "50Gi"}}}}},
                         **spec}}
    rel = NS(name="kps", objects=[resource("Prometheus", {}), resource("Prometheus", {"replicas": 2, "shards": 2}),
                                  resource("Alertmanager", {"replicas": 0}),
                                  {**resource("Prometheus", {}), "apiVersion": "example.com/v1"}])
    assert storage_requests([rel]) == [("kps: Prometheus m/k x1 (its operator's StatefulSet)", 50.0),
                                       ("kps: Prometheus m/k x4 (its operator's StatefulSet)", 200.0)]


@pytest.mark.parametrize("stack", STACKS)
def test_every_shipped_stack_gets_the_whole_bill_budget_and_catalog_age(stack, tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_PLATFORM_NO_CHART", raising=False)  # the chart is drawn, as a user's run draws it
    cfg = _cfg(stack)
    plan = plan_stack(stack)
    rep = CostReport(cfg, tmp_path, plan, today=TODAY)
    pvc = NS(name="charts", objects=[{"kind": "PersistentVolumeClaim", "metadata": {"name": "x", "namespace": "n"},
                                      "spec": {"resources": {"requests": {"storage": "20Gi"}}}}])
    text = rep.report([pvc])
    est = rep.estimate
    assert "the whole bill:" in text and "not modelled" in text
    assert f"budget (monthlyBudgetUsd): ${cfg.monthly_budget_usd:,.2f}" in text and "GPU utilisation" in text
    assert "catalog age: prices dated" in text
    kinds = {ln.kind for ln in est.lines}
    assert "gpu-pool" in kinds
    if cfg.cloud == "kubernetes":  # an existing cluster's storage and bucket are its owner's: named, never priced
        assert "storage" not in kinds and any(n.startswith("persistent volumes of the platform (20 GiB requested")
                                              for n in est.not_modelled)
    else:
        assert "storage" in kinds  # the PVC and the checkpoint bucket
    if cfg.cloud in ("aws", "gcp"):
        assert "disk" in kinds and "network-data" in kinds and "support" in kinds
    if stack == "linode-ha":
        assert any(ln.resource == "nodebalancer" for ln in est.lines)
    doc = json.loads((tmp_path / "cost.json").read_text())
    assert [ln["name"] for ln in doc["lines"]] == [ln.name for ln in est.lines]
    assert doc["budget"]["monthlyBudgetUsd"] == cfg.monthly_budget_usd and "ageDays" in doc["catalogAge"]
    assert rep.finish().endswith("cost.png")
    assert (tmp_path / "cost.png").stat().st_size > 5000


def test_aws_boot_disks_come_from_the_pools_and_the_system_launch_template():
    cfg = _cfg("aws-prod")
    shape = stack_shape(cfg, plan_stack("aws-prod"), [], TODAY)
    assert {p.name: p.boot_disk_gib for p in shape.gpu_pools} == {p.name: cfg.aws.pool(p.name).root_volume_gib
                                                                   for p in cfg.gpu_pools}
    assert shape.system_nodes[0].boot_disk_gib == 50
    assert shape.extended_support_usd_per_hour is not None and "support on 2026-11-23" in shape.extended_support_basis


def test_preflight_prints_the_bill_with_the_charts_storage_and_writes_every_line(tmp_path, capsys, monkeypatch):
    """The real `python -m gpu_platform.preflight gcp-prod`: the PVC line comes from the rendered charts (Katib and
    Pipelines MySQL, SeaweedFS, the hub database), and cost.json holds each printed line."""
    from gpu_platform.preflight.__main__ import main

    monkeypatch.delenv("GPU_PLATFORM_NO_CHART", raising=False)

    code = main(["gcp-prod", "--no-policies", "--quiet", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "the whole bill:" in out and "persistent volumes (pd-balanced)" in out and "kubeflow/katib-mysql" in out
    assert "budget (monthlyBudgetUsd): $5,000.00" in out and "the budget is reached at" in out
    assert "catalog age: prices dated" in out
    doc = json.loads((tmp_path / "gcp-prod" / "cost.json").read_text())
    for ln in doc["lines"]:
        assert ln["name"] in out
    assert (tmp_path / "gcp-prod" / "cost.png").stat().st_size > 5000


def test_with_no_chart_asked_preflight_writes_the_bill_draws_no_chart_and_leaves_no_earlier_one(tmp_path, capsys,
                                                                                                 monkeypatch):
    """GPU_PLATFORM_NO_CHART (the base branch's preflight in CI, which nobody looks at): the same bill and cost.json,
    no cost.png, no chart process, and a cost.png an earlier run left in the folder is removed (it is not this
    run's bill)."""
    from gpu_platform.preflight.__main__ import main

    monkeypatch.delenv("GPU_PLATFORM_NO_CHART", raising=False)
    assert main(["gcp-prod", "--no-policies", "--quiet", "--out", str(tmp_path)]) == 0
    drawn = capsys.readouterr().out
    assert (tmp_path / "gcp-prod" / "cost.png").is_file()
    bill = json.loads((tmp_path / "gcp-prod" / "cost.json").read_text())

    from gpu_platform.preflight import costs

    def no_process(*args, **kwargs):
        raise AssertionError(f"a chart process was started: {args}")

    monkeypatch.setenv("GPU_PLATFORM_NO_CHART", "1")
    monkeypatch.setattr(costs, "subprocess", NS(Popen=no_process, PIPE=-1))
    assert main(["gcp-prod", "--no-policies", "-v", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "gcp-prod" / "cost.png").exists()
    assert json.loads((tmp_path / "gcp-prod" / "cost.json").read_text()) == bill
    assert "(GPU_PLATFORM_NO_CHART is set: no chart)" in out and "the whole bill:" in out
    assert drawn.split("the whole bill:", 1)[1].split("\n\n", 1)[0] in out


def test_costs_keys_are_validated_with_the_key_named():
    from gpu_platform.config.base import ConfigError

    raw = {k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items() if k.startswith("gpu-platform:")}
    cfg = parse_config(dict(raw, costs={"expectedUtilization": 0.5, "checkpointGib": 2000, "natGibPerMonth": 0}), "gcp-prod")
    assert (cfg.costs.expected_utilization, cfg.costs.checkpoint_gib, cfg.costs.nat_gib_per_month) == (0.5, 2000, 0)
    with pytest.raises(ConfigError) as err:
        parse_config(dict(raw, costs={"expectedUtilization": 1.5}), "gcp-prod")
    assert "costs.expectedUtilization" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config(dict(raw, costs={"bucketGib": 5}), "gcp-prod")
    assert "bucketGib" in str(err.value) and "checkpointGib" in str(err.value)  # the allowed keys are listed


def _regional_gcp_prod():
    """gcp-prod with its system pool regional again (every zone of gcp.zones: the layout before 0.3.0)."""
    from tests.conftest import plan_config

    raw = stack_config("gcp-prod")
    gcp = json.loads(raw["gpu-platform:gcp"]) if isinstance(raw["gpu-platform:gcp"], str) else dict(raw["gpu-platform:gcp"])
    gcp["systemPool"] = {k: v for k, v in gcp["systemPool"].items() if k != "zones"}
    raw = {**raw, "gpu-platform:gcp": gcp}
    cfg = parse_config({k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpu-platform:")}, "gcp-prod")
    return cfg, plan_config(raw, "gcp-prod")


def test_gke_system_pool_idles_at_one_node_per_zone_not_at_its_minimum():
    # initial_node_count is per zone on a regional pool (pulumi_gcp NodePool docstring), and the platform's
    # zonal disks then pin a node in each zone: gcp-prod's minimum of 1 was billed as its idle floor.
    cfg, plan = _regional_gcp_prod()
    assert cfg.gcp.system_pool.min_nodes == 1 and not cfg.gcp.system_pool.zones
    (system,) = stack_shape(cfg, plan, today=TODAY).system_nodes
    assert (system.count, system.full_count) == (3, 3)
    assert "1 per zone in 3 zones" in system.idle_basis


def test_gcp_prods_zonal_system_pool_idles_at_one_node_and_the_platform_needs_no_more():
    """issue 37 item 8: gcp-prod idled at $400 a month (one system node in each of three zones). Its system
    pool is zonal now: one node at idle, and preflight's packing of the rendered platform says its own
    pods fit there (a floor the packing raised would be billed: the next test)."""
    from gpu_platform.costs.estimator import estimate

    cfg = _cfg("gcp-prod")
    plan = plan_stack("gcp-prod")
    assert cfg.gcp.system_pool.zones == ["us-central1-a"]
    pool = next(r for r in plan.by_type("gcp:container/nodePool:NodePool") if r.name.endswith("-system"))
    assert pool.plain_inputs["nodeLocations"] == ["us-central1-a"]
    gpu = next(r for r in plan.by_type("gcp:container/nodePool:NodePool") if r.name.endswith("-gpu-a100"))
    assert len(gpu.plain_inputs["nodeLocations"]) == 3  # the GPU pool keeps every zone (Spot capacity)
    (system,) = stack_shape(cfg, plan, today=TODAY, idle={"system": 1, "a100": 0}).system_nodes
    assert (system.count, system.full_count) == (1, 3)
    assert estimate(stack_shape(cfg, plan, today=TODAY, idle={"system": 1})).idle_monthly_usd < 200


def test_the_idle_floor_counts_the_system_nodes_the_platforms_pods_need():
    cfg = _cfg("gcp-prod")
    (system,) = stack_shape(cfg, plan_stack("gcp-prod"), today=TODAY, idle={"system": 2, "a100": 0}).system_nodes
    assert (system.count, system.full_count) == (2, 3)
    assert "the platform's own pods need 2 system node(s) with no job running" in system.idle_basis
