"""The control plane's public address and the nodes' addresses come from the provider's named attributes
(`ip_address`, `private_ip_address`), never from a position in `ipv4s`: a set that holds the private
192.168.128.0/17 address too, in hash order (gpu_platform/preflight/mocks/linode.py cites the recorded
API answers and the provider source)."""

from __future__ import annotations

import ipaddress

import pytest
import yaml

from gpu_platform.preflight.mocks import linode as linode_mock
from gpu_platform.preflight.runner import load_stack, run_program
from tests.conftest import plan_config, plan_stack, stack_config

INSTANCE = "linode:index/instance:Instance"
FIREWALL = "linode:index/firewall:Firewall"
COMMAND = "command:local:Command"
PRIVATE = ipaddress.ip_network("192.168.128.0/17")


def _public(ip: str) -> bool:
    return ipaddress.ip_address(ip) not in PRIVATE


@pytest.fixture(params=["private-first", "public-first"])
def order(request, monkeypatch):
    monkeypatch.setattr(linode_mock, "IPV4_ORDER", request.param)
    return request.param


def test_the_mock_instance_has_a_public_and_a_private_ipv4_like_the_api():
    out = linode_mock.RESOURCES[INSTANCE]({"privateIp": True}, "n")
    assert sorted(map(_public, out["ipv4s"])) == [False, True]
    assert out["ipAddress"] in out["ipv4s"] and _public(out["ipAddress"])
    assert out["privateIpAddress"] in out["ipv4s"] and not _public(out["privateIpAddress"])
    # In hash order, both orders occur across names (as a set's order does).
    firsts = {_public(linode_mock.RESOURCES[INSTANCE]({"privateIp": True}, f"n{i}")["ipv4s"][0]) for i in range(16)}
    assert firsts == {True, False}


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_the_program_targets_public_addresses_whatever_the_ipv4_order(stack, order):
    plan = run_program(load_stack(stack))  # the program itself, under this test's order of the mock's addresses
    instances = plan.by_type(INSTANCE)
    assert all(len(i.outputs["ipv4s"]) == 2 for i in instances)
    kubeconfig = yaml.safe_load(plan.outputs["kubeconfig"]["value"])
    host = kubeconfig["clusters"][0]["cluster"]["server"].removeprefix("https://").rsplit(":", 1)[0]
    assert _public(host), host
    wait = next(r for r in plan.by_type(COMMAND) if r.name.endswith("wait-for-api"))
    assert wait.plain_inputs["environment"]["API_HOST"] == host
    if stack == "linode-ha":
        # The API NodeBalancer's firewall admits each node's public /32 (the address it calls from).
        lb = next(r for r in plan.by_type(FIREWALL) if r.plain_inputs["label"].endswith("-api-lb"))
        admitted = set(lb.plain_inputs["inbounds"][0]["ipv4s"])
        for node in instances:
            assert f"{node.outputs['ipAddress']}/32" in admitted, node.plain_inputs["label"]
            assert f"{node.outputs['privateIpAddress']}/32" not in admitted
        backends = [r for r in plan.by_type("linode:index/nodeBalancerNode:NodeBalancerNode")]
        assert backends and all(not _public(b.plain_inputs["address"].rsplit(":", 1)[0]) for b in backends)
    else:
        cp0 = next(i for i in instances if i.plain_inputs["label"].endswith("-cp-0"))
        assert host == cp0.outputs["ipAddress"]


def test_a_reserved_api_ip_does_not_replace_cp0_when_the_provider_reads_back_the_private_address():
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:linode"]["reservedApiIp"] = True
    plan = plan_config(cfg)
    reserved = plan.one("linode:index/reservedIp:ReservedIp").outputs["address"]
    cp0 = next(r for r in plan.by_type(INSTANCE) if r.plain_inputs["label"].endswith("-cp-0"))
    # The state holds [reserved, private] for an input of [reserved]: ipv4 is ForceNew in the provider.
    assert cp0.plain_inputs["ipv4s"] == [reserved] and set(cp0.outputs["ipv4s"]) > {reserved}
    assert "ipv4s" in cp0.options.get("ignoreChanges", [])
    others = [r for r in plan.by_type(INSTANCE) if r is not cp0]
    assert all("ipv4s" not in r.options.get("ignoreChanges", []) for r in others)


def test_public_ipv4_picks_the_public_address_from_either_order():
    from gpu_platform.components.linode.cluster import public_ipv4

    assert public_ipv4(["192.168.140.7", "198.18.4.5"]) == public_ipv4(["198.18.4.5", "192.168.140.7"]) == "198.18.4.5"
    with pytest.raises(ValueError, match="no public IPv4"):
        public_ipv4(["192.168.140.7"])


def test_the_ha_stack_has_two_system_nodes():
    """One system node would carry Kueue's webhooks and every controller: losing it stops admission."""
    labels = sorted(i.plain_inputs["label"] for i in plan_stack("linode-ha").by_type(INSTANCE)
                    if "-system-" in i.plain_inputs["label"])
    assert [label.rsplit("-", 2)[1:] for label in labels] == [["system", "0"], ["system", "1"]], labels
