"""A node model that cannot be built is one clear error (preflight prints it and exits 2), never a traceback."""

from __future__ import annotations

import pytest

from gpu_platform.preflight.fit import nodes
from gpu_platform.preflight.runner import Plan, PlannedResource


class _Cfg:
    cloud = "aws"
    kubernetes_version = "1.33"
    gpu_pools = ()


def test_an_instance_type_without_allocatable_data_is_a_model_error_naming_it(monkeypatch):
    from gpu_platform.components import capacity

    ng = PlannedResource(urn="urn:ng", type="aws:eks/nodeGroup:NodeGroup", name="system", parent=None, custom=True,
                         provider=None, dependencies=[], wire_inputs={"instanceTypes": ["m6i.large"],
                                                                      "scalingConfig": {"minSize": 1, "maxSize": 2}})
    monkeypatch.delitem(capacity.EKS_ENI, "m6i.large")
    with pytest.raises(nodes.ModelError, match=r"^cluster fit node model: aws/m6i.large: no ENI data"):
        nodes.cluster_model(_Cfg(), Plan("t", [ng], {}))


def test_a_plan_without_node_groups_is_a_model_error():
    with pytest.raises(nodes.ModelError, match="registers no node group"):
        nodes.cluster_model(_Cfg(), Plan("t", [], {}))


def test_gke_pool_sizes_per_zone_when_not_total():
    class Cfg:
        cloud = "gcp"
        kubernetes_version = "1.33"
        gpu_pools = ()

    def res(type_, name, inputs):
        return PlannedResource(urn=f"urn:{name}", type=type_, name=name, parent=None, custom=True, provider=None,
                               dependencies=[], wire_inputs=inputs)

    cluster = res("gcp:container/cluster:Cluster", "c", {"privateClusterConfig": {"enablePrivateNodes": False}})
    fixed = res("gcp:container/nodePool:NodePool", "a", {"name": "a", "nodeCount": 2, "nodeLocations": ["z1", "z2", "z3"],
                                                          "nodeConfig": {"machineType": "e2-standard-4"}})
    per_zone = res("gcp:container/nodePool:NodePool", "b", {"name": "b", "nodeLocations": ["z1", "z2"],
                                                             "autoscaling": {"minNodeCount": 0, "maxNodeCount": 4},
                                                             "nodeConfig": {"machineType": "e2-standard-4"}})
    m = nodes.cluster_model(Cfg(), Plan("t", [cluster, fixed, per_zone], {}))
    # One group per zone of the pool's nodeLocations (issue 33 item 5), each with the per-zone size.
    assert sorted((g.zone, g.min_nodes, g.max_nodes) for g in m.node_groups if g.name == "a") == [
        ("z1", 2, 2), ("z2", 2, 2), ("z3", 2, 2)]
    assert sorted((g.zone, g.min_nodes, g.max_nodes) for g in m.node_groups if g.name == "b") == [
        ("z1", 0, 4), ("z2", 0, 4)]
