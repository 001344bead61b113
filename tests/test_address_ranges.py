"""Address ranges a real cluster or cloud would refuse or that open more than they say. IPv6 ranges that hold IPv4 addresses (IPv4-mapped ::ffff:0:0/96, NAT64 64:ff9b::/96): the attacker
review opened the Linode API firewall to every IPv4 address with `adminCidrs: ["::ffff:0.0.0.0/96"]`, a
/96 to the policy's eyes."""

from __future__ import annotations

import pytest

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.policies.props import is_world, too_open
from tests.conftest import stack_config


@pytest.mark.parametrize("cidr", ["::ffff:0.0.0.0/96", "64:ff9b::/96"])
def test_the_policy_judges_them_as_the_ipv4_range_they_hold(cidr):
    assert is_world(cidr) and too_open([cidr])


def test_a_narrow_embedded_range_is_as_narrow_as_its_ipv4_range():
    assert not too_open(["::ffff:203.0.113.0/120"]) and too_open(["::ffff:11.0.0.0/104"])  # /24 ok, /8 not


@pytest.mark.parametrize("cidr", ["::ffff:0.0.0.0/96", "64:ff9b::/96", "::ffff:203.0.113.0/120", "64:ff9b:1::/48"])
def test_the_config_refuses_them_naming_the_key(cidr):
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("linode-dev").items() if k.startswith("gpu-platform:")}
    raw["adminCidrs"] = [cidr]
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "linode-dev")
    assert "adminCidrs" in str(err.value)


# --- Linode pod and Service ranges the cluster can run in (same review: a /30 of each planned fine) -------


def _linode(**section):
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("linode-dev").items() if k.startswith("gpu-platform:")}
    raw["linode"] = {**raw["linode"], **section}
    return raw


@pytest.mark.parametrize("key, value, words", [
    ("podCidr", "10.244.0.0/30", "Cilium gives each node a /24"),
    ("podCidr", "10.244.0.0/24", "Cilium gives each node a /24"),  # one node's block for the whole cluster
    ("serviceCidr", "10.96.0.0/30", "10th address"),
    ("serviceCidr", "10.96.0.0/25", "at least 256 addresses"),
])
def test_a_pod_or_service_range_too_small_for_the_cluster_is_refused(key, value, words):
    with pytest.raises(ConfigError) as err:
        parse_config(_linode(**{key: value}), "linode-dev")
    assert f"linode.{key}" in str(err.value) and words in str(err.value)


def test_ranges_that_hold_the_cluster_pass():
    parse_config(_linode(podCidr="10.244.0.0/20", serviceCidr="10.96.0.0/24"), "linode-dev")


# --- IPv6 transition prefixes (issue 37: a Teredo 2001::/32 admin range opened the API port) ---------------


@pytest.mark.parametrize("cidr", ["2001::/32", "2001:0:cb00:7100::/64", "2002::/16"])
def test_the_policy_judges_teredo_and_wide_6to4_ranges_as_the_whole_ipv4_internet(cidr):
    assert is_world(cidr) and too_open([cidr])


def test_a_6to4_site_is_as_narrow_as_the_ipv4_host_it_stands_for():
    assert not too_open(["2002:cb00:7100::/40"])  # 203.0.113.0/24's sites
    assert too_open(["2002:0b00::/24"])  # 11.0.0.0/8's
