"""The `gcp` section: what a user may write, what is rejected offline, and with which message."""

from __future__ import annotations

import copy
import json
from typing import Any, Callable

import pytest

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.config.derived import effective_deletion_protection, gpu_pool_zone_map
from gpu_platform.costs.catalog import load_catalog


def base() -> dict[str, Any]:
    return {
        "cloud": "gcp",
        "environment": "prod",
        "owner": "ml-platform",
        "costCenter": "research",
        "monthlyBudgetUsd": 5000,
        "alertEmails": ["ops@example.com"],
        "adminCidrs": ["203.0.113.0/24"],
        "gpuPools": [{"name": "a100", "instanceType": "a2-highgpu-1g", "capacity": "preemptible",
                      "minNodes": 0, "maxNodes": 8}],
        "gcp": {"project": "my-ml-project", "region": "us-central1",
                "zones": ["us-central1-a", "us-central1-b", "us-central1-c"],
                "billingAccount": "012345-6789AB-CDEF01"},
        "platform": {"alertSmtp": {"smarthost": "smtp.example.com:587", "from": "gpu-alerts@example.com"}},
    }


def with_(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    raw = copy.deepcopy(base())
    change(raw)
    return raw


def gcp(**kv: Any) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw["gcp"].update(kv)


def top(**kv: Any) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw.update(kv)


def pool(**kv: Any) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw["gpuPools"][0].update(kv)


def drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda raw: raw["gcp"].pop(key)


def test_the_documented_example_is_valid_with_secure_defaults():
    cfg = parse_config(base(), "gcp-prod")
    section = cfg.gcp
    assert section.release_channel == "REGULAR"
    assert section.gpu_driver_version == "LATEST"
    assert section.private_endpoint is False
    assert section.system_pool.instance_type == "e2-standard-4"
    assert (section.system_pool.min_nodes, section.system_pool.max_nodes) == (1, 3)
    assert section.master_cidr.endswith("/28")
    assert section.checkpoint_retention_days == 30


def test_every_gcp_key_is_camel_case_in_yaml():
    raw = with_(gcp(networkCidr="10.0.0.0/20", podsCidr="10.4.0.0/14", servicesCidr="10.8.0.0/20",
                    masterCidr="172.16.32.0/28", releaseChannel="STABLE", deletionProtection=False,
                    systemPool={"instanceType": "n2-standard-4", "minNodes": 2, "maxNodes": 4},
                    gpuDriverVersion="DEFAULT", checkpointRetentionDays=7, privateEndpoint=False))
    s = parse_config(raw, "t").gcp
    assert (s.network_cidr, s.pods_cidr, s.services_cidr, s.master_cidr) == (
        "10.0.0.0/20", "10.4.0.0/14", "10.8.0.0/20", "172.16.32.0/28")
    assert s.release_channel == "STABLE" and s.gpu_driver_version == "DEFAULT"
    assert s.system_pool.instance_type == "n2-standard-4" and s.checkpoint_retention_days == 7


@pytest.mark.parametrize("environment,setting,expected", [
    ("prod", None, True),
    ("production", None, True),
    ("dev", None, False),
    ("staging", None, False),
    ("prod", False, False),
    ("dev", True, True),
])
def test_deletion_protection_defaults_on_for_production_only(environment, setting, expected):
    raw = with_(top(environment=environment))
    if setting is not None:
        raw["gcp"]["deletionProtection"] = setting
    assert effective_deletion_protection(parse_config(raw, "t")) is expected


def test_l4_and_h100_pools_with_every_capacity_are_accepted():
    raw = with_(top(gpuPools=[
        {"name": "l4", "instanceType": "g2-standard-8", "capacity": "spot", "minNodes": 0, "maxNodes": 4},
        {"name": "h100", "instanceType": "a3-highgpu-8g", "capacity": "on-demand", "approvedOnDemand": True,
         "minNodes": 0, "maxNodes": 1},
        {"name": "a100", "instanceType": "a2-highgpu-2g", "capacity": "preemptible", "minNodes": 0, "maxNodes": 2},
    ]))
    cfg = parse_config(raw, "t")
    assert [p.capacity for p in cfg.gpu_pools] == ["spot", "on-demand", "preemptible"]


def test_pools_run_only_in_the_zones_offering_their_gpu():
    # A100 80GB (a2-ultragpu) is offered in us-central1-a and -c only (catalog); the A100 40GB in a, b, c.
    raw = with_(top(gpuPools=[
        {"name": "a100", "instanceType": "a2-highgpu-1g", "capacity": "spot", "minNodes": 0, "maxNodes": 2},
        {"name": "a100-80", "instanceType": "a2-ultragpu-1g", "capacity": "spot", "minNodes": 0, "maxNodes": 2},
        {"name": "h100", "instanceType": "a3-highgpu-8g", "capacity": "spot", "minNodes": 0, "maxNodes": 1},
    ]))
    zones = gpu_pool_zone_map(parse_config(raw, "t"), load_catalog())
    assert zones["a100"] == ["us-central1-a", "us-central1-b", "us-central1-c"]
    assert zones["a100-80"] == ["us-central1-a", "us-central1-c"]
    # The catalog does not know where H100s are: no narrowing, no error.
    assert zones["h100"] == ["us-central1-a", "us-central1-b", "us-central1-c"]


MALFORMED = [
    ("project not an ID", gcp(project="My_Project"), "gcp.project"),
    ("region given as a zone", gcp(region="us-central1-a"), "gcp.region"),
    ("zone of another region", gcp(zones=["us-central1-a", "us-east1-b"]), "gcp.zones[1]"),
    ("zone listed twice", gcp(zones=["us-central1-a", "us-central1-a"]), "gcp.zones[1]"),
    ("no zones", gcp(zones=[]), "gcp.zones"),
    ("billing account with prefix", gcp(billingAccount="billingAccounts/012345-6789AB-CDEF01"), "gcp.billingAccount"),
    ("billing account lowercase", gcp(billingAccount="012345-6789ab-cdef01"), "gcp.billingAccount"),
    ("billing account missing", drop("billingAccount"), "gcp.billingAccount"),
    ("unknown key (typo)", gcp(zone="us-central1-a"), "gcp.zone"),
    ("master range not a /28", gcp(masterCidr="172.16.0.0/24"), "gcp.masterCidr"),
    ("pods overlap nodes", gcp(networkCidr="10.16.0.0/20"), "gcp.podsCidr"),
    ("public node range", gcp(networkCidr="8.8.0.0/20"), "gcp.networkCidr"),
    ("pod range too small for the pools", gcp(podsCidr="10.16.0.0/22"), "gcp.podsCidr"),
    ("not a CIDR", gcp(servicesCidr="10.20.0.0/33"), "gcp.servicesCidr"),
    ("release channel", gcp(releaseChannel="FAST"), "gcp.releaseChannel"),
    ("driver version", gcp(gpuDriverVersion="535.129"), "gcp.gpuDriverVersion"),
    ("system pool min > max", gcp(systemPool={"minNodes": 4, "maxNodes": 3}), "gcp.systemPool.minNodes"),
    ("system pool of GPUs", gcp(systemPool={"instanceType": "a2-highgpu-1g"}), "gcp.systemPool.instanceType"),
    ("system pool type not a machine type", gcp(systemPool={"instanceType": "E2 standard"}), "gcp.systemPool.instanceType"),
    ("system pool: old and new key", gcp(systemPool={"machineType": "e2-standard-4", "instanceType": "e2-standard-4"}),
     "gcp.systemPool.machineType"),
    ("system pool: old key of GPUs", gcp(systemPool={"machineType": "a2-highgpu-1g"}), "gcp.systemPool.machineType"),
    ("system pool: old key empty", gcp(systemPool={"machineType": ""}), "gcp.systemPool.machineType"),
    ("system pool of zero nodes", gcp(systemPool={"minNodes": 0}), "gcp.systemPool.minNodes"),
    ("retention 0 days", gcp(checkpointRetentionDays=0), "gcp.checkpointRetentionDays"),
    ("deletion protection not a bool", gcp(deletionProtection="maybe"), "gcp.deletionProtection"),
    ("only a zone without A100s", gcp(zones=["us-central1-d"]), "gpuPools[0].instanceType"),
    ("one zone without A100s", gcp(zones=["us-central1-a", "us-central1-d"]), "gcp.zones[1]"),
    ("region without A100s", gcp(region="us-west2", zones=["us-west2-a"]), "gcp.region"),
    ("private endpoint, public admin range", gcp(privateEndpoint=True), "adminCidrs[0]"),
    ("gcp section missing", lambda raw: raw.pop("gcp"), "gcp"),
    ("pool named like the system pool", pool(name="system"), "gpuPools[0].name"),
    ("a Linode type on GCP", pool(instanceType="g1-gpu-rtx6000-1"), "gpuPools[0].instanceType"),
    ("a type without GPU", pool(instanceType="e2-standard-4"), "gpuPools[0].instanceType"),
    ("unknown capacity", pool(capacity="reserved"), "gpuPools[0].capacity"),
    ("no admin range", top(adminCidrs=[]), "adminCidrs"),
    ("control plane open to the internet", top(adminCidrs=["0.0.0.0/0"]), "adminCidrs[0]"),
    ("more e-mails than a budget notifies", top(alertEmails=[f"a{i}@example.com" for i in range(6)]), "alertEmails"),
]


@pytest.mark.parametrize("change,key", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_gcp_config_is_rejected_naming_the_key(change, key):
    with pytest.raises(ConfigError) as err:
        parse_config(with_(change), "gcp-prod")
    message = str(err.value)
    assert "stacks/Pulumi.gcp-prod.yaml" in message
    assert f"gpu-platform:{key}: " in message, message
    assert any(i.key == key for i in err.value.issues), [i.key for i in err.value.issues]


def test_messages_say_what_is_allowed():
    def message(change):
        with pytest.raises(ConfigError) as err:
            parse_config(with_(change), "gcp-prod")
        return str(err.value)

    assert "us-central1-a" in message(gcp(zones=["us-east1-b"]))  # suggests a zone of the region
    assert "012345-6789AB-CDEF01" in message(gcp(billingAccount="nope"))
    assert "RAPID" in message(gcp(releaseChannel="FAST"))
    # Names the zones that do offer the GPU.
    offered = message(gcp(zones=["us-central1-d"]))
    assert "us-central1-a" in offered and "nvidia-tesla-a100" in offered
    assert "/20 or larger" in message(gcp(podsCidr="10.16.0.0/22"))


# ---------------------------------------------------------------------------------------------
# kubernetesVersion against the version calendar (GKE rows); tests run on 2026-11-23 (tests/conftest.py)
# ---------------------------------------------------------------------------------------------


def test_unpinned_version_lets_the_release_channel_pick():
    cfg = parse_config(base(), "gcp-prod")
    assert cfg.kubernetes_version_pinned is False
    assert cfg.kubernetes_version == "1.36"  # the newest minor in GKE standard support, for rendering and fit checks


def test_version_past_end_of_standard_support_is_refused_naming_key_date_and_choices():
    with pytest.raises(ConfigError) as err:
        parse_config(with_(top(kubernetesVersion="1.34")), "gcp-prod")
    message = str(err.value)
    assert 'gpu-platform:kubernetesVersion: "1.34"' in message
    assert "2026-10-01" in message and "1.35, 1.36" in message
    assert "gcp.releaseChannel: EXTENDED" in message


def test_extended_channel_accepts_a_version_in_extended_support_and_warns_about_the_fee():
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(with_(lambda raw: (raw.update(kubernetesVersion="1.34"), raw["gcp"].update(releaseChannel="EXTENDED"))),
                       "gcp-prod")
    warnings = version_warnings_only(cfg)
    assert len(warnings) == 1 and "extended support" in warnings[0] and "$0.50" in warnings[0]
    assert "2027-09-30" in warnings[0]


def version_warnings_only(cfg):
    """The stack's warnings but the per-pool shutdown-grace ones (the base stack's pool is preemptible, which
    is warned with the grace its pods get: issue 33 item 9, tests/test_gcp_plan.py) and the placeholder alert
    address's (ops@example.com, reserved: tests/test_config_hostile_values.py)."""
    from gpu_platform.config.stack import config_warnings

    return [w for w in config_warnings(cfg) if not w.startswith(("gpuPools[", "alertEmails["))]


def test_version_with_ample_standard_support_has_no_warning():
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(with_(top(kubernetesVersion="1.35")), "gcp-prod")
    assert cfg.kubernetes_version_pinned and version_warnings_only(cfg) == []


def test_version_within_60_days_of_end_of_standard_support_warns_with_the_date(monkeypatch):
    from gpu_platform.config.stack import config_warnings

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2027-03-01")  # 1.35 leaves GKE standard support on 2027-04-11
    cfg = parse_config(with_(top(kubernetesVersion="1.35")), "gcp-prod")
    [warning] = version_warnings_only(cfg)
    assert "2027-04-11" in warning and "41 day(s)" in warning and "1.36" in warning


def test_unknown_minor_is_a_structural_error_listing_the_calendar():
    with pytest.raises(ConfigError) as err:
        parse_config(with_(top(kubernetesVersion="1.29")), "gcp-prod")
    assert "'1.35'" in str(err.value) and "kubernetes-versions.yaml" in str(err.value)


# ---------------------------------------------------------------------------------------------
# Maintenance window and exclusions
# ---------------------------------------------------------------------------------------------


def test_default_maintenance_is_weekends_only():
    m = parse_config(base(), "gcp-prod").gcp.maintenance
    assert (m.days, m.start_hour_utc, m.hours, m.exclusions) == (["SA", "SU"], 0, 24, [])


@pytest.mark.parametrize("maintenance,key,text", [
    ({"days": ["SU"], "hours": 4}, "gcp.maintenance.hours", "at least 12"),
    ({"days": ["SA", "SA"]}, "gcp.maintenance.days[1]", "each day once"),
    ({"days": ["Saturday"]}, "gcp.maintenance.days[0]", "'SA'"),
    ({"hours": 2}, "gcp.maintenance.hours", "greater than or equal to 4"),
    ({"exclusions": [{"name": "x", "start": "2026-12-01", "scope": "NO_MINOR_UPGRADES"}]},
     "gcp.maintenance.exclusions[0].start", "RFC 3339"),
    ({"exclusions": [{"name": "x", "start": "2026-12-01T00:00:00Z", "scope": "NO_UPGRADES"}]},
     "gcp.maintenance.exclusions[0].end", "at most 30 days"),
    ({"exclusions": [{"name": "x", "start": "2026-12-01T00:00:00Z", "end": "2027-02-01T00:00:00Z", "scope": "NO_UPGRADES"}]},
     "gcp.maintenance.exclusions[0].end", "NO_MINOR_OR_NODE_UPGRADES for longer"),
    ({"exclusions": [{"name": "x", "start": "2026-12-01T00:00:00Z", "end": "2026-11-01T00:00:00Z"}]},
     "gcp.maintenance.exclusions[0].end", "after start"),
    ({"exclusions": [{"name": "x", "start": "2026-12-01T00:00:00Z"}, {"name": "x", "start": "2027-01-01T00:00:00Z"}]},
     "gcp.maintenance.exclusions[1].name", "used once"),
])
def test_bad_maintenance_is_refused_naming_the_key(maintenance, key, text):
    with pytest.raises(ConfigError) as err:
        parse_config(with_(gcp(maintenance=maintenance)), "gcp-prod")
    message = str(err.value)
    assert f"gpu-platform:{key}: " in message and text in message, message


def test_pinned_version_on_stable_channel_warns_that_the_calendar_tracks_regular():
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(with_(lambda raw: (raw.update(kubernetesVersion="1.36"), raw["gcp"].update(releaseChannel="STABLE"))),
                       "gcp-prod")
    [warning] = version_warnings_only(cfg)
    assert "Regular channel" in warning and "2026-06-09" in warning and "STABLE" in warning
    assert version_warnings_only(parse_config(with_(gcp(releaseChannel="STABLE")), "gcp-prod")) == []  # unpinned: nothing to warn


# --- one system-pool shape on every cloud; last release's machineType still read, with a warning ---------


def test_system_pool_new_shape_parses_without_warnings():
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(with_(gcp(systemPool={"instanceType": "n2-standard-4", "minNodes": 2, "maxNodes": 5})), "t")
    assert (cfg.gcp.system_pool.instance_type, cfg.gcp.system_pool.min_nodes, cfg.gcp.system_pool.max_nodes) == (
        "n2-standard-4", 2, 5)
    assert not [w for w in config_warnings(cfg) if "systemPool" in w]


def test_deprecated_machine_type_is_read_with_a_warning_and_gives_the_same_pool():
    from gpu_platform.config.stack import config_warnings

    new = parse_config(with_(gcp(systemPool={"instanceType": "n2-standard-4", "minNodes": 2, "maxNodes": 5})), "t")
    old = parse_config(with_(gcp(systemPool={"machineType": "n2-standard-4", "minNodes": 2, "maxNodes": 5})), "t")
    assert old.gcp.system_pool == new.gcp.system_pool
    [warning] = [w for w in config_warnings(old) if "systemPool" in w]
    assert "gpu-platform:gcp.systemPool.machineType is deprecated" in warning
    assert "gpu-platform:gcp.systemPool.instanceType" in warning


def test_old_and_new_system_pool_key_together_is_an_error_naming_both():
    with pytest.raises(ConfigError) as err:
        parse_config(with_(gcp(systemPool={"machineType": "e2-standard-4", "instanceType": "n2-standard-4"})), "t")
    message = str(err.value)
    assert "gpu-platform:gcp.systemPool.machineType:" in message
    assert "gcp.systemPool.instanceType" in message and "Traceback" not in message


def test_a_zonal_system_pool_runs_in_zones_of_the_cluster():
    """issue 37 item 8: gcp.systemPool.zones picks the zones of gcp.zones the system pool runs in (one: a
    zonal pool that idles at the nodes the platform needs); a zone outside gcp.zones, or twice, is refused."""
    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.gcp import system_pool_zones
    from gpu_platform.config.stack import parse_config
    from tests.conftest import stack_config

    raw = {k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items() if k.startswith("gpu-platform:")}
    gcp = json.loads(raw["gcp"]) if isinstance(raw["gcp"], str) else dict(raw["gcp"])

    def with_zones(zones):
        pool = {k: v for k, v in gcp["systemPool"].items() if k != "zones"}
        return parse_config({**raw, "gcp": {**gcp, "systemPool": {**pool, **({"zones": zones} if zones is not None else {})}}},
                            "gcp-prod")

    assert system_pool_zones(with_zones(["us-central1-b"]).gcp) == ["us-central1-b"]
    assert system_pool_zones(with_zones(None).gcp) == ["us-central1-a", "us-central1-b", "us-central1-c"]
    with pytest.raises(ConfigError) as err:
        with_zones(["us-central1-f", "us-central1-a", "us-central1-a"])
    text = str(err.value)
    assert 'gcp.systemPool.zones[0]: "us-central1-f" -> one of gcp.zones (us-central1-a, us-central1-b, us-central1-c)' in text
    assert 'gcp.systemPool.zones[2]: "us-central1-a" -> each zone once' in text


def _ew1(**gcp_extra: Any) -> dict[str, Any]:
    """The adopter's stack: europe-west1 with an L4 pool (g2-standard-8) and its three zones."""
    raw = with_(top(gpuPools=[{"name": "l4", "instanceType": "g2-standard-8", "capacity": "spot",
                               "minNodes": 0, "maxNodes": 6}]))
    raw["gcp"].update(region="europe-west1", zones=["europe-west1-b", "europe-west1-c", "europe-west1-d"],
                      systemPool={"zones": ["europe-west1-b"]}, **gcp_extra)
    return raw


def test_offering_data_is_the_dated_2026_region_list_not_2023s():
    # GCP offers the L4 (g2) in europe-west1 (Cyclenerd machinetyperegion.csv @8bf3293a, 2026-08-17); the 2023
    # zone file the catalog used to read alone listed 8 regions without it, so this stack was refused.
    g2 = load_catalog().instance("gcp", "g2-standard-8")
    assert "europe-west1" in g2.regions and len(g2.regions) == 18
    cfg = parse_config(_ew1(), "ew1")
    # No zone of europe-west1 is recorded (zones: 2023): all of gcp.zones, GKE places the nodes.
    assert gpu_pool_zone_map(cfg, load_catalog())["l4"] == ["europe-west1-b", "europe-west1-c", "europe-west1-d"]


def test_a_region_the_catalog_does_not_list_for_a_type_is_still_refused_with_the_regions_that_do():
    raw = _ew1()
    raw["gpuPools"].append({"name": "a100", "instanceType": "a2-highgpu-1g", "capacity": "spot",
                            "minNodes": 0, "maxNodes": 4})
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "ew1")
    msg = str(err.value)
    assert "gcp.region: \"europe-west1\" -> a region offering a2-highgpu-1g and g2-standard-8" in msg
    assert "gpuPools[1].instanceType" in msg and "gcp.assumeOffered" in msg


def test_assume_offered_lets_a_stack_assert_an_offering_and_preflight_warns():
    from gpu_platform.config.stack import config_warnings

    raw = _ew1(assumeOffered=[{"type": "a2-highgpu-1g", "zones": ["europe-west1-b", "europe-west1-d"]}])
    raw["gpuPools"].append({"name": "a100", "instanceType": "a2-highgpu-1g", "capacity": "spot",
                            "minNodes": 0, "maxNodes": 4})
    cfg = parse_config(raw, "ew1")
    assert gpu_pool_zone_map(cfg, load_catalog())["a100"] == ["europe-west1-b", "europe-west1-d"]
    warnings = [w for w in config_warnings(cfg) if w.startswith("gcp.assumeOffered")]
    assert len(warnings) == 1
    assert "a2-highgpu-1g in europe-west1 (europe-west1-b, europe-west1-d) is asserted by the stack" in warnings[0]


def test_assume_offered_for_what_the_catalog_records_says_it_can_go():
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(_ew1(assumeOffered=[{"type": "g2-standard-8"}]), "ew1")
    assert any("already records g2-standard-8 in europe-west1" in w for w in config_warnings(cfg))


@pytest.mark.parametrize("entry,key,allowed", [
    ({"type": "g9-imaginary-8"}, "gcp.assumeOffered[0].type", "a GCP machine type of the price catalog"),
    ({"type": "a2-highgpu-1g"}, "gcp.assumeOffered[0].type", "the instanceType of a gpuPools entry"),
    ({"type": "g2-standard-8", "zones": ["europe-west1-a"]}, "gcp.assumeOffered[0].zones[0]", "one of gcp.zones"),
    ({"type": "g2-standard-8", "zone": ["europe-west1-b"]}, "gcp.assumeOffered[0].zone", ""),
])
def test_assume_offered_entries_are_checked(entry, key, allowed):
    with pytest.raises(ConfigError) as err:
        parse_config(_ew1(assumeOffered=[entry]), "ew1")
    assert key in str(err.value) and allowed in str(err.value)


def test_every_gcp_types_regions_are_the_recorded_region_file():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "gpu_platform/costs/catalog/recorded/cyclenerd-gcp-machinetyperegion.csv"
    text = path.read_text()
    assert "# observed-no-later-than: 2026-08-17" in text and "8bf3293a35613e7ee333e2365d3cf0a3b8a8f347" in text
    recorded: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and not line.startswith("NAME;"):
            cols = line.split(";")
            recorded.setdefault(cols[0], set()).add(cols[5])
    for t in load_catalog().instances("gcp"):
        assert t.name in recorded, t.name
        assert set(t.regions) == recorded[t.name], t.name
        assert "8bf3293a (2026-08-17)" in (t.regions_source or ""), t.name
        # zones (2023) only of regions the newer list still has
        assert all(z.rsplit("-", 1)[0] in recorded[t.name] for z in t.zones or ()), t.name
