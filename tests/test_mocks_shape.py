"""The preflight mocks answer in the shapes the real APIs use for the attributes the program reads
(docs/mocks.md lists them and where each shape comes from)."""

from __future__ import annotations

import ipaddress

from gpu_platform.preflight.mocks import gcp


def test_gke_private_endpoint_comes_from_the_master_block_and_is_the_endpoint_when_private():
    inputs = {"privateClusterConfig": {"masterIpv4CidrBlock": "172.16.8.0/28", "enablePrivateEndpoint": True}}
    out = gcp.RESOURCES["gcp:container/cluster:Cluster"](inputs, "c")
    private = out["privateClusterConfig"]["privateEndpoint"]
    assert ipaddress.ip_address(private) in ipaddress.ip_network("172.16.8.0/28")
    assert out["endpoint"] == private
    public = gcp.RESOURCES["gcp:container/cluster:Cluster"]({"privateClusterConfig": {"masterIpv4CidrBlock": "172.16.8.0/28"}}, "c")
    assert public["endpoint"] == public["privateClusterConfig"]["publicEndpoint"] != private
