"""The cluster-fit node model (gpu_platform/preflight/fit/nodes.py): node groups, labels, taints and allocatable read
from what the program registers, and the control plane's reach into the nodes per cloud."""

from __future__ import annotations

import base64

import pytest
import yaml

from gpu_platform.components import capacity
from gpu_platform.components.cluster import GPU_TAINT, POOL_LABEL
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.nodes import ModelError, cluster_model
from gpu_platform.preflight.runner import Plan, PlannedResource, load_stack
from tests.fit_support import stack_plan


def _model(stack: str):
    return cluster_model(parse_config(load_stack(stack).raw, stack), stack_plan(stack))


def test_linode_groups_come_from_the_kubeadm_configs_in_the_user_data():
    from gpu_platform.components.linode.render import ROLE_LABEL, SYSTEM_ROLE

    m = _model("linode-dev")
    assert not m.extended_resource_toleration
    cp, system, gpu = (m.group(n) for n in ("control-plane", "system", "ada"))
    assert cp.role == "control-plane" and cp.taints == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert cp.labels["node-role.kubernetes.io/control-plane"] == ""
    assert system.role == "system" and system.taints == [] and system.labels[ROLE_LABEL] == SYSTEM_ROLE
    assert gpu.role == "gpu" and gpu.taints == [GPU_TAINT.as_k8s()] and gpu.labels[POOL_LABEL] == "ada"
    assert gpu.labels["node.kubernetes.io/instance-type"] == "g2-gpu-rtx4000a1-m"
    assert gpu.allocatable == capacity.allocatable("linode", "g2-gpu-rtx4000a1-m")
    assert (gpu.min_nodes, gpu.max_nodes) == (0, 1), "autoscaled: from the node-group provider's pool definition"
    # the node firewall accepts every TCP port from the VPC subnet
    assert m.control_plane_ports is None


def test_gke_groups_with_gke_labels_gpu_taint_and_firewall_reach():
    from gpu_platform.components.gcp.network import CONTROL_PLANE_TO_NODE_PORTS

    m = _model("gcp-prod")
    assert m.extended_resource_toleration
    system, a100 = m.group("system"), m.group("a100")
    assert system.taints == [] and system.labels["cloud.google.com/gke-nodepool"] == "system"
    assert a100.labels["cloud.google.com/gke-accelerator"] == "nvidia-tesla-a100"
    assert a100.labels[POOL_LABEL] == "a100" and GPU_TAINT.as_k8s() in a100.taints
    assert a100.labels.get("cloud.google.com/gke-preemptible") == "true" or a100.labels.get("cloud.google.com/gke-spot") == "true"
    assert a100.allocatable == capacity.allocatable("gcp", "a2-highgpu-1g")
    assert m.control_plane_ports == frozenset({443, 10250} | {int(p) for p in CONTROL_PLANE_TO_NODE_PORTS})


def test_eks_managed_system_group_and_mixed_gpu_groups():
    m = _model("aws-prod")
    system = next(g for g in m.node_groups if g.role == "system")
    itype = system.instance_type
    assert system.allocatable == capacity.allocatable("aws", itype, managed_node_group=True)
    assert system.labels["eks.amazonaws.com/capacityType"] == "ON_DEMAND"
    for g in (g for g in m.node_groups if g.role == "gpu"):
        types = g.instance_type.split("|")
        per = [capacity.allocatable("aws", t) for t in types]
        assert g.allocatable.cpu_millis == min(a.cpu_millis for a in per)
        assert g.allocatable.memory_bytes == min(a.memory_bytes for a in per)
        assert GPU_TAINT.as_k8s() in g.taints and g.labels[POOL_LABEL] == g.name
        assert g.min_nodes == 0
    assert m.control_plane_ports is None


def test_eks_zonal_groups_notes_name_their_zone():
    """`preflight -v` lists one line per node group; EKS has one group per pool and zone, whose lines were
    the same line three times."""
    m = _model("aws-prod")
    lines = [n for n in m.notes if n.split(":", 1)[0] in {g.key for g in m.node_groups}]
    assert len(lines) == len(m.node_groups) == len(set(lines)), lines
    for g in m.node_groups:
        zone = g.labels["topology.kubernetes.io/zone"]
        assert any(line.startswith(f"{g.name}/{zone}: ") for line in lines), (g.name, zone, lines)


# ---------------------------------------------------------------------------------------------
# Reachability from synthetic plans
# ---------------------------------------------------------------------------------------------


def _res(type_, name, inputs):
    return PlannedResource(urn=f"urn:{name}", type=type_, name=name, parent=None, custom=True, provider=None,
                           dependencies=[], wire_inputs=inputs)


def _gke_plan(firewalls, private=True):
    cluster = _res("gcp:container/cluster:Cluster", "c", {"privateClusterConfig": {
        "enablePrivateNodes": private, "masterIpv4CidrBlock": "172.16.0.16/28"}})
    pool = _res("gcp:container/nodePool:NodePool", "p", {"name": "system", "autoscaling": {
        "totalMinNodeCount": 1, "totalMaxNodeCount": 2}, "nodeConfig": {"machineType": "e2-standard-4", "tags": ["n"]}})
    return Plan("t", [cluster, pool] + [_res("gcp:compute/firewall:Firewall", f"f{i}", f) for i, f in enumerate(firewalls)], {})


class _Cfg:
    cloud = "gcp"
    kubernetes_version = "1.33"
    gpu_pools = ()


def test_gke_ports_only_from_rules_whose_source_is_the_master_cidr_and_that_target_the_nodes():
    rules = [
        {"sourceRanges": ["172.16.0.0/16"], "targetTags": ["n"], "allows": [{"protocol": "tcp", "ports": ["8000-8002"]}]},
        {"sourceRanges": ["10.0.0.0/8"], "allows": [{"protocol": "tcp", "ports": ["7000"]}]},
        {"sourceRanges": ["172.16.0.16/28"], "targetTags": ["other"], "allows": [{"protocol": "tcp", "ports": ["7001"]}]},
        {"sourceRanges": ["172.16.0.16/28"], "disabled": True, "allows": [{"protocol": "tcp", "ports": ["7002"]}]},
        {"sourceRanges": ["172.16.0.16/28"], "direction": "EGRESS", "allows": [{"protocol": "tcp", "ports": ["7003"]}]},
        {"sourceRanges": ["172.16.0.16/28"], "allows": [{"protocol": "udp", "ports": ["7004"]}]},
    ]
    m = cluster_model(_Cfg(), _gke_plan(rules))
    assert m.control_plane_ports == frozenset({443, 10250, 8000, 8001, 8002})
    everything = [{"sourceRanges": ["172.16.0.16/28"], "allows": [{"protocol": "all"}]}]
    assert cluster_model(_Cfg(), _gke_plan(everything)).control_plane_ports is None
    assert cluster_model(_Cfg(), _gke_plan([], private=False)).control_plane_ports is None


def test_unreadable_node_config_is_a_model_error():
    class Cfg(_Cfg):
        cloud = "linode"

        class linode:  # noqa: N801
            subnet_cidr = "10.0.0.0/24"

    bad = _res("linode:index/instance:Instance", "n", {"type": "g6-standard-4", "metadatas": [
        {"userData": base64.b64encode(yaml.safe_dump({"write_files": []}).encode()).decode()}]})
    with pytest.raises(ModelError, match="no readable kubeadm configuration"):
        cluster_model(Cfg(), Plan("t", [bad], {}))


def test_eks_gpu_launch_template_without_the_cluster_security_group_is_unreachable():
    from gpu_platform.preflight.fit import nodes

    cluster = _res("aws:eks/cluster:Cluster", "c", {})
    cluster.outputs = {"vpcConfig": {"clusterSecurityGroupId": "sg-cluster"}}
    good = _res("aws:ec2/launchTemplate:LaunchTemplate", "lt", {"vpcSecurityGroupIds": ["sg-cluster", "sg-x"]})
    system = _res("aws:ec2/launchTemplate:LaunchTemplate", "sys", {})
    assert nodes._eks_ports(Plan("t", [cluster, good, system], {}), []) is None
    bad = _res("aws:ec2/launchTemplate:LaunchTemplate", "lt2", {"vpcSecurityGroupIds": ["sg-x"]})
    notes: list[str] = []
    assert nodes._eks_ports(Plan("t", [cluster, good, bad], {}), notes) == frozenset()
    assert "without the cluster security group sg-cluster" in notes[0]

