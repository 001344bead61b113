"""Issue 33 item 7: an existing VPC had fewer guarantees than a new one. Its subnets' zones are not known by
name, so notebooks were not held anywhere (a home made in subnet 3's zone could never start a GPU profile
whose pool has groups in subnets 1 and 2 only), and no S3 gateway endpoint was made while the bill said
checkpoints bypass the NAT. Now every node of an existing VPC carries its subnet (gpu-platform.io/subnet),
notebooks are held by it as by zone names in a new VPC, and aws.s3GatewayEndpoint is required: `create`
adds the endpoint on the private subnets' route tables, `existing` says the VPC has one."""

from __future__ import annotations

import copy

import pytest

from gpu_platform.components.cluster import SUBNET_LABEL
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
from tests.conftest import stack_config

SUBNETS = ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2", "subnet-0aaaaaaaaaaaaaaa3"]


def _config(**aws):
    c = stack_config("aws-prod")
    a = {k: v for k, v in c["gpu-platform:aws"].items() if k not in ("vpcCidr", "availabilityZones")}
    a.update(vpcId="vpc-0123456789abcdef0", privateSubnetIds=list(SUBNETS), **aws)
    c["gpu-platform:aws"] = a
    return c


@pytest.fixture(scope="module")
def plan():
    return run_program(stack_input_from_mapping("aws-prod", _config(s3GatewayEndpoint="create")))


def test_the_s3_endpoint_key_is_required_with_an_existing_vpc_and_refused_without_one():
    raw = {k.split(":", 1)[1]: v for k, v in _config().items() if k.startswith("gpu-platform:")}
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "aws-prod")
    assert "aws.s3GatewayEndpoint" in str(err.value) and "create" in str(err.value) and "existing" in str(err.value)
    new_vpc = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
    new_vpc["aws"] = {**new_vpc["aws"], "s3GatewayEndpoint": "create"}
    with pytest.raises(ConfigError, match="aws.s3GatewayEndpoint"):
        parse_config(new_vpc, "aws-prod")


def test_create_makes_the_gateway_endpoint_on_the_private_subnets_route_tables(plan):
    (ep,) = plan.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    i = ep.plain_inputs
    assert i["vpcId"] == "vpc-0123456789abcdef0" and i["vpcEndpointType"] == "Gateway"
    assert i["serviceName"] == "com.amazonaws.us-east-1.s3" and len(i["routeTableIds"]) == 3
    existing = run_program(stack_input_from_mapping("aws-prod", _config(s3GatewayEndpoint="existing")))
    assert not existing.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")


def test_notebooks_are_held_to_the_subnets_every_gpu_pool_reaches(plan):
    """aws-prod's l4x4 pool (maxNodes 2) has groups in subnets 1 and 2 only."""
    (hub,) = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.plain_inputs.get("name") == "jupyterhub"]
    assert hub.plain_inputs["values"]["singleuser"]["extraNodeAffinity"]["required"] == [
        {"matchExpressions": [{"key": SUBNET_LABEL, "operator": "In", "values": ["subnet1", "subnet2"]}]}]


def test_every_node_group_labels_its_nodes_with_its_subnet(plan):
    for ng in plan.by_type("aws:eks/nodeGroup:NodeGroup"):
        zone = ng.plain_inputs["tags"]["node-group-zone"]
        assert ng.plain_inputs["labels"][SUBNET_LABEL] == zone
    for asg in plan.by_type("aws:autoscaling/group:Group"):
        tags = {t["key"]: t["value"] for t in asg.plain_inputs["tags"]}
        # the autoscaler scales a group from zero for a pod held to its subnet only if its template says so
        assert tags[f"k8s.io/cluster-autoscaler/node-template/label/{SUBNET_LABEL}"] == tags["gpu-pool-zone"]


def test_fit_places_every_notebook_profile_in_an_existing_vpc(plan):
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.fit.render import render_plan
    from tests.fit_support import CHART_DIRS, need_charts

    need_charts()
    raw = {k.split(":", 1)[1]: v for k, v in _config(s3GatewayEndpoint="create").items() if k.startswith("gpu-platform:")}
    cfg = parse_config(raw, "aws-prod")
    model = cluster_model(cfg, plan)
    assert {g.zone for g in model.node_groups} == {"subnet1", "subnet2", "subnet3"}
    releases = [r for r in render_plan(copy.deepcopy(plan), CHART_DIRS, kubernetes_version=cfg.kubernetes_version) if r.rendered]
    report = check_fit(model, releases)
    assert not [p for p in report.problems if "jupyter-<user>" in p.object], report.problems
    placed = {pl.zone for pl in report.placements if pl.object.startswith("Pod/jupyterhub/jupyter-<user>")}
    assert placed and placed <= {"subnet1", "subnet2"}
