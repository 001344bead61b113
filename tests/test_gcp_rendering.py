"""Pure GKE settings: kubeconfig, node pool settings, names, budget rules (no Pulumi run needed)."""

from __future__ import annotations

import re

import pytest
import yaml

from gpu_platform.components.cluster import GPU_TAINT, GpuPoolSpec, Taint
from gpu_platform.config.names import account_id, bucket_name
from gpu_platform.components.gcp.bucket import lifecycle_rules, workload_identity_member
from gpu_platform.components.gcp.budget import budget_amount, budget_display_name, threshold_rules
from gpu_platform.components.gcp.cluster import context_name, master_authorized_networks, render_kubeconfig
from gpu_platform.components.gcp.nodepool import (
    GkeGpuPool,
    autoscaling,
    capacity_flags,
    gke_taint,
    gpu_node_config,
    gpu_upgrade_settings,
    initial_gpu_nodes_per_zone,
)

SA_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
BUCKET = re.compile(r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")


def a100_pool(capacity: str = "preemptible", approved: bool = False, gpus: int = 1) -> GkeGpuPool:
    spec = GpuPoolSpec(name="a100", instance_type="a2-highgpu-1g", gpu_model="NVIDIA A100 40GB", gpus_per_node=gpus,
                       min_nodes=0, max_nodes=8, capacity=capacity,
                       node_labels={"gpu-platform.io/pool": "a100", "nvidia.com/gpu.present": "true"})
    return GkeGpuPool(spec=spec, accelerator="nvidia-tesla-a100", zones=("us-central1-a",), approved_on_demand=approved)


def test_kubeconfig_uses_the_gke_auth_plugin_and_holds_no_credential():
    ctx = context_name("my-ml-project", "us-central1", "gpu-prod")
    doc = yaml.safe_load(render_kubeconfig(ctx, "198.51.100.10", "Q0EtREFUQQ=="))
    assert doc["current-context"] == ctx == "gke_my-ml-project_us-central1_gpu-prod"
    assert doc["clusters"][0]["cluster"] == {"server": "https://198.51.100.10", "certificate-authority-data": "Q0EtREFUQQ=="}
    user = doc["users"][0]["user"]
    assert set(user) == {"exec"}  # no token, no client key, no password
    assert user["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert user["exec"]["apiVersion"] == "client.authentication.k8s.io/v1beta1"
    assert user["exec"]["provideClusterInfo"] is True
    assert doc["contexts"][0]["context"] == {"cluster": ctx, "user": ctx}


@pytest.mark.parametrize("capacity,spot,preemptible,policy", [
    ("preemptible", False, True, "ANY"),
    ("spot", True, False, "ANY"),
    ("on-demand", False, False, "BALANCED"),
])
def test_capacity_maps_to_gke_flags_and_location_policy(capacity, spot, preemptible, policy):
    assert capacity_flags(capacity) == {"spot": spot, "preemptible": preemptible}
    assert autoscaling(0, 8, capacity) == {"total_min_node_count": 0, "total_max_node_count": 8, "location_policy": policy}


def test_unknown_capacity_is_refused():
    with pytest.raises(ValueError):
        capacity_flags("reserved")


def test_gpu_taint_in_gke_spelling():
    assert gke_taint(GPU_TAINT) == {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
    assert gke_taint(Taint("a", "b", "NoExecute"))["effect"] == "NO_EXECUTE"


def test_gpu_node_config_carries_accelerator_driver_taint_and_policy_labels():
    common = {"owner": "ml-platform", "cost-center": "research", "environment": "prod", "managed-by": "pulumi",
              "app": "gpu-platform"}
    cfg = gpu_node_config(a100_pool(capacity="on-demand", approved=True, gpus=2), "nodes@p.iam.gserviceaccount.com",
                          "gpu-prod-node", common, "DEFAULT")
    assert cfg["guest_accelerators"] == [{"type": "nvidia-tesla-a100", "count": 2,
                                          "gpu_driver_installation_config": {"gpu_driver_version": "DEFAULT"}}]
    assert cfg["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert cfg["resource_labels"] == {**common, "gpu-pool": "a100", "on-demand-approved": "true"}
    assert cfg["labels"]["gpu-platform.io/pool"] == "a100"
    assert cfg["workload_metadata_config"] == {"mode": "GKE_METADATA"}
    assert cfg["shielded_instance_config"] == {"enable_secure_boot": True, "enable_integrity_monitoring": True}
    assert cfg["service_account"] == "nodes@p.iam.gserviceaccount.com"
    assert cfg["spot"] is False and cfg["preemptible"] is False
    for k, v in cfg["resource_labels"].items():
        assert k == k.lower() and v == v.lower()


def test_gpu_pools_upgrade_replacement_first_so_the_pool_never_shrinks():
    # Intended change (issue 12): a replacement node before any drain, one node at a time.
    assert gpu_upgrade_settings() == {"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0}


@pytest.mark.parametrize("min_nodes,zones,per_zone", [(0, 3, 0), (1, 3, 1), (4, 3, 2), (3, 3, 1), (2, 1, 2)])
def test_initial_gpu_nodes_reach_the_total_minimum(min_nodes, zones, per_zone):
    assert initial_gpu_nodes_per_zone(min_nodes, zones) == per_zone


def test_master_authorized_networks_list_exactly_the_admin_ranges():
    got = master_authorized_networks(["203.0.113.0/24", "198.51.100.7/32"])
    assert [b["cidr_block"] for b in got["cidr_blocks"]] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert got["gcp_public_cidrs_access_enabled"] is False


@pytest.mark.parametrize("prefix", ["gpu-prod", "gpu-a-very-long-environment-name-for-tests"])
def test_generated_gcp_names_are_valid_and_stable(prefix):
    for role in ("nodes", "trainer"):
        sa = account_id(prefix, role)
        assert SA_ID.match(sa) and len(sa) <= 30 and sa.endswith(role), sa
        assert account_id(prefix, role) == sa
    name = bucket_name("my-ml-project-with-long-id", prefix)
    assert BUCKET.match(name) and len(name) <= 63, name
    assert bucket_name("my-ml-project-with-long-id", prefix) == name


def test_long_names_that_differ_only_at_the_end_stay_distinct():
    a, b = "gpu-" + "a" * 30 + "-one", "gpu-" + "a" * 30 + "-two"
    assert account_id(a, "nodes") != account_id(b, "nodes")
    assert bucket_name("my-ml-project", a * 2) != bucket_name("my-ml-project", b * 2)


def test_short_names_are_kept_readable():
    assert account_id("gpu-prod", "nodes") == "gpu-prod-nodes"
    assert bucket_name("my-ml-project", "gpu-prod") == "my-ml-project-gpu-prod-checkpoints"


def test_workload_identity_member_is_the_training_service_account():
    assert workload_identity_member("my-ml-project") == "serviceAccount:my-ml-project.svc.id.goog[training/trainer]"


def test_lifecycle_deletes_old_checkpoint_versions_and_abandoned_uploads_never_live_checkpoints():
    rules = lifecycle_rules(14)
    deletes = [r for r in rules if r["action"]["type"] == "Delete"]
    # An age rule on live objects would delete a suspended job's last checkpoint and the final weights.
    assert deletes == [{"action": {"type": "Delete"},
                        "condition": {"days_since_noncurrent_time": 14, "with_state": "ARCHIVED"}}]
    assert any(r["action"]["type"] == "AbortIncompleteMultipartUpload" for r in rules)


def test_budget_thresholds_are_25_50_75_100_actual_and_100_forecast():
    assert [(r["threshold_percent"], r["spend_basis"]) for r in threshold_rules()] == [
        (0.25, "CURRENT_SPEND"), (0.5, "CURRENT_SPEND"), (0.75, "CURRENT_SPEND"), (1.0, "CURRENT_SPEND"),
        (1.0, "FORECASTED_SPEND")]


@pytest.mark.parametrize("usd,units,nanos", [(5000, "5000", 0), (1234.5, "1234", 500_000_000), (0.99, "0", 990_000_000)])
def test_budget_amount_in_units_and_nanos(usd, units, nanos):
    assert budget_amount(usd) == {"specified_amount": {"currency_code": "USD", "units": units, "nanos": nanos}}


def test_budget_display_name_fits_the_api_limit():
    assert len(budget_display_name("gpu-" + "x" * 40, "my-ml-project-with-long-id")) <= 60


def test_the_quota_guide_counts_the_upgrade_surge_node():
    """Before: GKE GPU upgrades surged one node while the quota guidance sized quota to maxNodes exactly,
    so an upgrade of a full pool waited for quota (issue 22)."""
    from pathlib import Path

    surge = gpu_upgrade_settings()["max_surge"]
    text = (Path(__file__).resolve().parents[1] / "docs" / "pools.md").read_text()
    assert surge == 0 or f"`maxNodes` + {surge} nodes' GPUs per pool" in text
