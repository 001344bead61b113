"""Linode stack rules: bad combinations are rejected before anything is registered, naming the key."""

from __future__ import annotations

import copy
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.runner import stack_input_from_mapping
from tests.conftest import stack_config


def _linode(**changes) -> dict:
    cfg = copy.deepcopy(stack_config("linode-dev"))
    cfg["gpu-platform:linode"].update(changes)
    return cfg


def _reject(cfg: dict, stack: str = "linode-dev") -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping(stack, cfg).raw, stack)
    message = str(err.value)
    assert f"stacks/Pulumi.{stack}.yaml" in message
    return message


@pytest.mark.parametrize("pool,key,allowed", [
    ({"instanceType": "g1-gpu-rtx6000-1"}, "linode.systemPool.instanceType", "non-GPU Linode plan"),
    ({"instanceType": "g6-nonexistent"}, "linode.systemPool.instanceType", "g6-standard-4"),
    ({"minNodes": 0, "maxNodes": 0}, "linode.systemPool.minNodes", "greater than or equal to 1"),
    ({"minNodes": 21, "maxNodes": 21}, "linode.systemPool.maxNodes", "at most 20"),
    ({"instanceType": "g6-standard-4", "size": 2}, "linode.systemPool.size", "unknown key"),
    # Fixed-size kubeadm pool: no autoscaler grows it.
    ({"minNodes": 1, "maxNodes": 3}, "linode.systemPool.minNodes", "equal to linode.systemPool.maxNodes (3)"),
    # The shape of this week's (unreleased) Linode key is not carried over.
    ({"type": "g6-standard-4", "count": 1}, "linode.systemPool.type", "unknown key"),
])
def test_bad_system_pool_is_rejected_naming_the_key(pool, key, allowed):
    message = _reject(_linode(systemPool=pool))
    assert key in message and allowed in message, message


def test_shipped_linode_stacks_have_a_system_pool():
    for stack in ("linode-dev", "linode-ha"):
        cfg = parse_config(stack_input_from_mapping(stack, stack_config(stack)).raw, stack)
        pool = cfg.linode.system_pool
        assert pool.min_nodes == pool.max_nodes >= 1 and pool.instance_type == "g6-standard-4"


def test_system_pool_new_shape_parses_and_defaults_to_two_fixed_nodes():
    from gpu_platform.config.stack import config_warnings
    from gpu_platform.config.linode import LinodeSection

    cfg = parse_config(stack_input_from_mapping("linode-dev", _linode(
        systemPool={"instanceType": "g6-standard-8", "minNodes": 2, "maxNodes": 2})).raw, "linode-dev")
    assert cfg.linode.system_pool.model_dump() == {"instance_type": "g6-standard-8", "min_nodes": 2, "max_nodes": 2}
    assert not [w for w in config_warnings(cfg) if "systemPool" in w]
    assert LinodeSection.model_validate({"region": "us-ord"}).system_pool.model_dump() == {
        "instance_type": "g6-standard-4", "min_nodes": 2, "max_nodes": 2}


# --- regions: the dated capability table ---------------------------------------------------------


@pytest.mark.parametrize("region,capability", [
    ("us-east", "VPCs"),            # RTX 6000 regions have no VPCs (linode_regions.yaml)
    ("us-iad", "GPU Linodes"),
    ("ap-west", "VPCs"),
])
def test_region_without_a_needed_capability_is_rejected_naming_it(region, capability):
    message = _reject(_linode(region=region))
    assert "linode.region" in message and f"a region with {capability}" in message, message
    assert "us-ord" in message  # the regions that have everything are listed


def test_unknown_region_is_rejected_with_the_known_ones():
    message = _reject(_linode(region="mars-1"))
    assert "a Linode core region" in message and "us-ord" in message


def test_nodebalancer_needed_only_for_ha(monkeypatch):
    from gpu_platform.config import linode as linode_config

    section = linode_config.LinodeSection.model_validate({"region": "us-ord", "controlPlane": {"count": 3}})
    assert "NodeBalancers" in linode_config.required_capabilities(section)
    section = linode_config.LinodeSection.model_validate({"region": "us-ord", "diskEncryption": False})
    assert "NodeBalancers" not in linode_config.required_capabilities(section)
    assert "Disk Encryption" not in linode_config.required_capabilities(section)


def test_region_table_is_dated_and_sourced():
    import yaml

    from gpu_platform.config.linode import REGIONS_FILE, region_capabilities

    doc = yaml.safe_load(REGIONS_FILE.read_text())
    assert doc["source"].startswith("https://api.linode.com/") and doc["retrieved"] == "2026-11-23"
    table = region_capabilities()
    assert {"Metadata", "VPCs", "Block Storage Encryption", "GPU Linodes"} <= table["us-ord"]


def test_ssh_keys_without_admin_cidrs_are_rejected():
    cfg = _linode(sshAuthorizedKeys=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 ops@example.com"])
    cfg["gpu-platform:adminCidrs"] = []
    message = _reject(cfg)
    assert "linode.sshAuthorizedKeys" in message and "adminCidrs" in message


def test_every_minor_the_calendar_allows_on_linode_has_a_pinned_release():
    from gpu_platform.data import linode_versions as versions
    from gpu_platform.data.versions_calendar import allowed_minors

    allowed = allowed_minors("linode")
    assert allowed and set(allowed) <= set(versions.KUBERNETES_PATCH)
    for minor in allowed:
        assert re.fullmatch(rf"{re.escape(minor)}\.\d+", versions.KUBERNETES_PATCH[minor])
    assert "1.35" in versions.KUBERNETES_PATCH


def test_the_vpc_address_plan_is_checked_before_any_resource():
    """Four GPU pools do not fit the default /24 and a pool over 50 nodes has no room in its block:
    config errors naming the key, not a ValueError half-way through the program."""
    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config
    from tests.conftest import stack_config

    raw = {k.split(":", 1)[1]: v for k, v in stack_config("linode-dev").items() if k.startswith("gpu-platform:")}
    pool = raw["gpuPools"][0]
    raw["gpuPools"] = [{**pool, "name": f"p{i}"} for i in range(4)]
    with pytest.raises(ConfigError, match=r"linode\.subnetCidr.*at least 300 host addresses for 4 GPU pools"):
        parse_config(raw, "linode-dev")
    raw["gpuPools"] = [{**pool, "minNodes": 51, "maxNodes": 51}]
    with pytest.raises(ConfigError, match=r"gpuPools\[0\]\.maxNodes.*at most 50 nodes"):
        parse_config(raw, "linode-dev")
    raw["gpuPools"] = [{**pool, "name": f"p{i}"} for i in range(3)]
    parse_config(raw, "linode-dev")  # three pools fit a /24


def test_an_rtx6000_pool_is_refused_saying_which_gpu_plans_and_regions_work_instead():
    """RTX 6000 plans exist only in regions without VPCs (recorded region data): the refusal names the
    plans and regions that do work, instead of pointing at regions that cannot host the cluster."""
    for region in ("us-east", "us-ord"):
        cfg = _linode(region=region)
        cfg["gpu-platform:gpuPools"][0]["instanceType"] = "g1-gpu-rtx6000-1"
        message = _reject(cfg)
        assert "gpuPools[0].instanceType" in message and "VPCs are missing" in message, message
        assert re.search(r"g2-gpu-rtx4000a1-m \(in [a-z-]+", message), message


# --- cloud-init and compressed user data (issue 32 item 8) -------------------------------------------------


def _private_image(**linode):
    from gpu_platform.config.stack import parse_config
    from tests.conftest import stack_config

    raw = {k.split(":", 1)[1]: v for k, v in stack_config("linode-ha").items() if k.startswith("gpu-platform:")}
    raw["linode"].update(image="private/12345678", **linode)
    return parse_config(raw, "linode-ha")


@pytest.mark.parametrize("declared,fragment", [(None, "set with a private image"), ("24.3", "24.4 or later"),
                                               ("23.4.4", "canonical/cloud-init#5751")])
def test_a_private_image_must_declare_a_cloud_init_that_reads_compressed_user_data(declared, fragment):
    """cloud-init before 24.4 decoded Linode's base64 user data to text (DataSourceAkamai.py at 24.3.1:
    `b64decode(...).decode()`), so a gzip-compressed document raised UnicodeDecodeError and the node never
    booted. A private image's cloud-init cannot be read offline: the stack declares it."""
    from gpu_platform.config.base import ConfigError

    with pytest.raises(ConfigError) as err:
        _private_image(**({} if declared is None else {"imageCloudInit": declared}))
    assert "linode.imageCloudInit" in str(err.value) and fragment in str(err.value), str(err.value)


@pytest.mark.parametrize("declared", ["24.4", "25.1.2"])
def test_a_private_image_with_a_recent_cloud_init_is_accepted(declared):
    assert _private_image(imageCloudInit=declared).linode.image_cloud_init == declared


def test_documents_that_fit_go_uncompressed_and_only_control_planes_need_gzip():
    """Any cloud-init reads a plain document; compression is used only where Linode's 16 KiB limit forces it
    (the control planes', which is why an old cloud-init is refused rather than worked around)."""
    import base64

    from gpu_platform.components.linode.render import USER_DATA_LIMIT_BYTES, decode_user_data
    from tests.conftest import plan_stack

    for stack in ("linode-dev", "linode-ha"):
        for r in plan_stack(stack).by_type("linode:index/instance:Instance"):
            raw = base64.b64decode(r.plain_inputs["metadatas"][0]["userData"])
            doc = decode_user_data(r.plain_inputs["metadatas"][0]["userData"])
            control_plane = "-cp-" in r.plain_inputs["label"]
            assert (raw[:2] == b"\x1f\x8b") is control_plane, r.plain_inputs["label"]
            assert (len(doc.encode()) > USER_DATA_LIMIT_BYTES) is control_plane, r.plain_inputs["label"]
            if not control_plane:
                assert raw.decode() == doc


# --- the node groups' join deadline against the pools' boot (issue 35 review) ------------------------------


def _with_join_deadline(tmp_path, minutes: int):
    """linode-dev's stack file as a user edits it: `joinDeadlineMinutes` written under `nodeGroups:`."""
    from tests.conftest import ROOT

    lines = (ROOT / "stacks" / "Pulumi.linode-dev.yaml").read_text().splitlines()
    at = lines.index("    nodeGroups:") + 1
    lines.insert(at, f"      joinDeadlineMinutes: {minutes}")
    path = tmp_path / "Pulumi.linode-dev.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _front_half(path):
    """What `python -m gpu_platform.preflight --stack-file` and the program read before any resource."""
    from gpu_platform.preflight.runner import load_stack_file

    si = load_stack_file(path)
    return parse_config(si.raw, si.stack, source=str(path), secret_keys=si.bare_secret_keys), si


@pytest.mark.parametrize("minutes", [15, 16, 23])
def test_a_join_deadline_the_pools_boot_cannot_meet_is_refused_naming_the_key_file_pool_and_boot(tmp_path, minutes):
    """Before: 15 to 180 was accepted, although an autoscaled Linode pool boots in 16 minutes: with 15 (or 16)
    the autoscaler deleted every node before it could register and the pool never scaled up; a few minutes more
    gave up on every node a little slower than the assumed boot."""
    from gpu_platform.preflight.runner import ProgramError, load_stack_file, run_program

    path = _with_join_deadline(tmp_path, minutes)
    with pytest.raises(ConfigError) as err:
        _front_half(path)
    text = str(err.value)
    assert f"invalid configuration in {path} " in text
    assert f"gpu-platform:linode.nodeGroups.joinDeadlineMinutes: {minutes} -> at least 24 minutes (at most 180)" in text
    assert "gpuPools[0] (ada, minNodes 0 < maxNodes 1) boots in 16 minutes" in text, text
    assert len(err.value.issues) == 1
    # The program refuses it too, before it registers anything.
    with pytest.raises(ProgramError, match=r"linode\.nodeGroups\.joinDeadlineMinutes"):
        run_program(load_stack_file(path))


def test_the_shortest_join_deadline_allowed_leaves_half_a_boot_and_fixed_pools_need_none(tmp_path):
    cfg, _ = _front_half(_with_join_deadline(tmp_path, 24))
    assert cfg.linode.node_groups.join_deadline_minutes == 24
    # linode-ha's pools are fixed: no autoscaler, no deadline to check.
    raw = stack_config("linode-ha")
    raw["gpu-platform:linode"].setdefault("nodeGroups", {})["joinDeadlineMinutes"] = 5
    assert parse_config(stack_input_from_mapping("linode-ha", raw).raw, "linode-ha").linode.node_groups.join_deadline_minutes == 5


def test_the_default_join_deadline_passes_its_own_rule():
    """The default is what the shipped stacks run with: it must pass for them (1.5 x 16 = 24 <= 30)."""
    from gpu_platform.config.linode import LinodeNodeGroups
    from gpu_platform.costs.node_boot import min_join_deadline_minutes, node_boot_minutes

    assert LinodeNodeGroups().join_deadline_minutes >= min_join_deadline_minutes(node_boot_minutes("linode"))
    assert parse_config(stack_input_from_mapping("linode-dev", stack_config("linode-dev")).raw, "linode-dev")


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(minutes=st.integers(min_value=1, max_value=180), max_nodes=st.integers(min_value=1, max_value=3))
def test_an_autoscaled_pool_gets_a_join_deadline_past_its_boot_or_a_config_error(minutes, max_nodes):
    """Property: with an autoscaled pool, a deadline is accepted exactly when it is at least 1.5 times the
    pool's boot; a refused one names the key and the pool."""
    from gpu_platform.costs.node_boot import node_boot_minutes

    raw = stack_config("linode-dev")
    raw["gpu-platform:gpuPools"][0]["maxNodes"] = max_nodes
    raw["gpu-platform:linode"]["nodeGroups"]["joinDeadlineMinutes"] = minutes
    boot = node_boot_minutes("linode")
    try:
        cfg = parse_config(stack_input_from_mapping("linode-dev", raw).raw, "linode-dev")
    except ConfigError as err:
        assert minutes < 1.5 * boot, str(err)
        assert [i.key for i in err.issues] == ["linode.nodeGroups.joinDeadlineMinutes"], str(err)
        assert f"gpuPools[0] (ada, minNodes 0 < maxNodes {max_nodes}) boots in {boot:g} minutes" in str(err)
    else:
        assert cfg.linode.node_groups.join_deadline_minutes >= 1.5 * boot > boot
