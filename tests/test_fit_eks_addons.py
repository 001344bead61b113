"""Issue 33 item 4: CPU notebooks on aws-prod. Notebooks run only in the zones every GPU profile's pool
reaches (aws-prod: us-east-1a and 1b), where the system groups were one node each (systemPool maxNodes 3 over
three zones), and fit did not count EKS's own add-on pods (CoreDNS, EBS CSI, kube-proxy, aws-node) on those
nodes: one CPU notebook fitted, the second waited for ever, and the CPU queue's system quota counted the
add-ons' CPU as free for jobs. Fit now counts the add-ons' pods and fails a stack where fewer than two CPU
notebooks fit where notebooks may run; aws-prod's system pool has room for them."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from gpu_platform.data.eks_addon_pods import addon_objects, system_node_requests
from gpu_platform.preflight.fit.checks import MIN_CPU_NOTEBOOKS, check_fit
from tests.fit_support import need_charts, rendered, stack_plan

CPU_NOTEBOOK = "Pod/jupyterhub/jupyter-<user> (profile cpu)"


@pytest.fixture(scope="module")
def aws_prod():
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.runner import load_stack

    need_charts()
    cfg = parse_config(load_stack("aws-prod").raw, "aws-prod")
    return cluster_model(cfg, stack_plan("aws-prod")), [r for r in rendered("aws-prod") if r.rendered]


def test_the_eks_addons_pods_are_rendered_and_placed(aws_prod):
    model, releases = aws_prod
    addons = {r.chart: r for r in releases if r.source == "addon"}
    assert set(addons) == {"vpc-cni", "kube-proxy", "coredns", "aws-ebs-csi-driver"}
    report = check_fit(model, [copy.deepcopy(r) for r in releases])
    placed = {(pl.object, pl.group) for pl in report.placements}
    # DaemonSets on every node group (GPU nodes too), CoreDNS and the EBS CSI controller on the system nodes only.
    for ds in ("DaemonSet/kube-system/aws-node", "DaemonSet/kube-system/kube-proxy", "DaemonSet/kube-system/ebs-csi-node"):
        assert {g for o, g in placed if o == ds} == {g.name for g in model.node_groups}, ds
    for dep in ("Deployment/kube-system/coredns", "Deployment/kube-system/ebs-csi-controller"):
        assert {g for o, g in placed if o == dep} == {"system"}, dep
    assert not [p for p in report.problems if p.release.startswith("eks-addon-")]


def test_aws_node_carries_the_network_policy_agent_the_program_enables():
    (ds,) = addon_objects("vpc-cni", {"enableNetworkPolicy": "true"})
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["aws-node", "aws-eks-nodeagent"]
    (plain,) = addon_objects("vpc-cni", {})
    assert len(plain["spec"]["template"]["spec"]["containers"]) == 1
    # per node: aws-node 25m + node agent 25m + kube-proxy 100m + ebs-csi-node 10m; once: CoreDNS 2 x 100m,
    # the EBS CSI controller 2 x 4 x 10m
    assert system_node_requests(1)[0] == 25 + 25 + 100 + 10 + 200 + 80


def test_at_least_two_cpu_notebooks_fit_where_notebooks_may_run_on_aws_prod(aws_prod):
    model, releases = aws_prod
    report = check_fit(model, [copy.deepcopy(r) for r in releases])
    assert report.ok, report.problems
    (note,) = [n for n in report.notes if n.startswith("notebooks:") and "profile cpu" in n]
    assert int(note.split()[1]) >= MIN_CPU_NOTEBOOKS, note
    assert "us-east-1c" not in note  # notebooks are held to 1a and 1b


def test_one_system_node_a_zone_fits_one_cpu_notebook_and_fails(aws_prod):
    """The shipped stack before: systemPool maxNodes 3, one node in each zone."""
    model, releases = aws_prod
    small = dataclasses.replace(model, node_groups=[
        dataclasses.replace(g, max_nodes=1) if g.role == "system" else g for g in model.node_groups])
    report = check_fit(small, [copy.deepcopy(r) for r in releases])
    (p,) = [p for p in report.problems if p.object == CPU_NOTEBOOK and p.check == "packing"]
    assert "only 1 such notebook(s) fit at once" in p.reason and "us-east-1a" in p.reason and "systemPool.maxNodes" in p.fix
