"""The policy pack, run by the real pulumi_policy analyzer process over gRPC (gpu_platform.preflight.analyzer).

Each policy gets a resource set built with the real provider SDK classes under preflight's mocks that
violates it (the report names the policy at its enforcement level) and a compliant variant that
passes. One pack process serves the whole module; only the failure tests start their own.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Optional

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s
import pulumi_linode as linode
import pytest

from gpu_platform.preflight.analyzer import (
    PACK_DIR,
    Analyzer,
    PolicyConfigError,
    PolicyPackError,
    PolicyReport,
    analyze_plan,
    load_policy_config,
)
from gpu_platform.preflight.runner import Plan, load_stack, run_program, stack_input_from_mapping
from gpu_platform.project import Project
from tests.conftest import ROOT
from tests.conftest import stack_config

ADMIN = "203.0.113.0/24"


def approval(days: int = 30, **changes: str) -> dict[str, str]:
    """A valid exception (gpu_platform/policies/locks.py): who, why, until a date `days` from today."""
    import datetime as dt

    until = (dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=days)).isoformat()
    return {"reason": "capacity planning for the Q1 training run", "approver": "jane@example.com",
            "until": until, **changes}
LABELS = {"owner": "ml-platform", "cost-center": "research", "environment": "test"}
ALL_POLICIES = {
    "gpu-interruptible-capacity": "mandatory",
    "gpu-pools-scale-to-zero": "mandatory",
    "gpu-count-ceiling": "mandatory",
    "monthly-cost-ceiling": "mandatory",
    "budget-alerts-required": "mandatory",
    "no-public-admin-access": "mandatory",
    "aws-imdsv2-encrypted-volumes": "mandatory",
    "linode-disk-encryption": "mandatory",
    "gke-node-hardening": "mandatory",
    "images-by-digest": "mandatory",
    "cost-allocation-tags": "advisory",
    "idle-floor-budget-share": "advisory",
}


@pytest.fixture(scope="module")
def analyzer():
    with Analyzer() as a:
        yield a


def plan_of(program: Callable[[], None], cloud: str = "gcp") -> Plan:
    return run_program(stack_input_from_mapping("policy-test", {"gpu-platform:cloud": cloud}), program=program)


def merged(base: dict[str, Any], *changes: Optional[dict[str, Any]]) -> dict[str, Any]:
    """base with each of `changes` applied; a None value deletes the key; nested dicts merge."""
    if len(changes) != 1:
        for change in changes:
            base = merged(base, change)
        return base
    out = dict(base)
    for k, v in (changes[0] or {}).items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merged(out[k], v)
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------------------------
# Compliant resource sets, one per cloud, with knobs to break them
# ---------------------------------------------------------------------------------------------


def gke(cluster: Optional[dict] = None, pool: Optional[dict] = None, budget: bool = True,
        extra: Optional[Callable[[], None]] = None) -> Callable[[], None]:
    def program() -> None:
        c = gcp.container.Cluster("gke", **merged(dict(
            location="us-central1", remove_default_node_pool=True, initial_node_count=1,
            private_cluster_config={"enable_private_nodes": True, "master_ipv4_cidr_block": "172.16.0.0/28"},
            master_authorized_networks_config={"cidr_blocks": [{"cidr_block": ADMIN, "display_name": "admins"}]},
            workload_identity_config={"workload_pool": "my-ml-project.svc.id.goog"},
            resource_labels=LABELS), cluster))
        gcp.container.NodePool("gke-a100", **merged(dict(
            cluster=c.id, location="us-central1", node_locations=["us-central1-a", "us-central1-b"],
            autoscaling={"total_min_node_count": 0, "total_max_node_count": 8, "location_policy": "ANY"},
            node_config={
                "machine_type": "a2-highgpu-1g", "preemptible": True,
                "guest_accelerators": [{"type": "nvidia-tesla-a100", "count": 1}],
                "resource_labels": {**LABELS, "gpu-pool": "a100", "on-demand-approved": "false"},
                "workload_metadata_config": {"mode": "GKE_METADATA"},
                "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
            }), pool))
        if budget:
            gcp.billing.Budget("budget", billing_account="012345-6789AB-CDEF01",
                               amount={"specified_amount": {"currency_code": "USD", "units": "5000"}},
                               threshold_rules=[{"threshold_percent": 0.5}, {"threshold_percent": 1.0}])
        if extra:
            extra()
    return program


def eks(lt: Optional[dict] = None, asg: Optional[dict] = None, cluster: Optional[dict] = None,
        budget: str = "budget", extra: Optional[Callable[[], None]] = None,
        single_type: bool = False) -> Callable[[], None]:
    """single_type: the ASG uses the launch template directly (no mixed-instances policy: on-demand)."""
    tags = {**LABELS, "gpu-pool": "g5", "on-demand-approved": "false"}

    def program() -> None:
        aws.eks.Cluster("eks", **merged(dict(
            role_arn="arn:aws:iam::123456789012:role/eks",
            vpc_config={"subnet_ids": ["subnet-1", "subnet-2"], "endpoint_public_access": True,
                        "endpoint_private_access": True, "public_access_cidrs": [ADMIN]},
            tags=LABELS), cluster))
        template = aws.ec2.LaunchTemplate("gpu-lt", **merged(dict(
            instance_type="g5.xlarge",
            metadata_options={"http_tokens": "required", "http_put_response_hop_limit": 2},
            block_device_mappings=[{"device_name": "/dev/xvda",
                                    "ebs": {"encrypted": "true", "volume_size": 200, "volume_type": "gp3"}}],
            tags=LABELS), lt))
        aws.autoscaling.Group("gpu-asg", **merged(dict(
            min_size=0, max_size=4, vpc_zone_identifiers=["subnet-1", "subnet-2"], capacity_rebalance=True,
            mixed_instances_policy={
                "instances_distribution": {"on_demand_base_capacity": 0, "on_demand_percentage_above_base_capacity": 0,
                                           "spot_allocation_strategy": "price-capacity-optimized"},
                "launch_template": {"launch_template_specification": {"launch_template_id": template.id,
                                                                      "version": "$Latest"},
                                    "overrides": [{"instance_type": "g5.xlarge"}, {"instance_type": "g6.xlarge"}]}},
            tags=[{"key": k, "value": v, "propagate_at_launch": True} for k, v in tags.items()]),
            {"mixed_instances_policy": None, "launch_template": {"id": template.id, "version": "$Latest"}}
            if single_type else None, asg))
        if budget == "budget":
            aws.budgets.Budget("budget", budget_type="COST", limit_amount="5000", limit_unit="USD", time_unit="MONTHLY",
                               notifications=[{"comparison_operator": "GREATER_THAN", "threshold": 100,
                                               "threshold_type": "PERCENTAGE", "notification_type": "FORECASTED",
                                               "subscriber_email_addresses": ["ops@example.com"]}], tags=LABELS)
        elif budget == "alarm":
            topic = aws.sns.Topic("billing", tags=LABELS)
            aws.cloudwatch.MetricAlarm("billing-100", namespace="AWS/Billing", metric_name="EstimatedCharges",
                                       statistic="Maximum", period=21600, evaluation_periods=1, threshold=5000,
                                       comparison_operator="GreaterThanOrEqualToThreshold",
                                       dimensions={"Currency": "USD"}, alarm_actions=[topic.arn], tags=LABELS)
        if extra:
            extra()
    return program


def kubeadm(instance: Optional[dict] = None, firewall: Optional[dict] = None, spend_rule: bool = True,
            extra: Optional[Callable[[], None]] = None) -> Callable[[], None]:
    def program() -> None:
        linode.Firewall("nodes-fw", **merged(dict(
            label="gpu-test-nodes", inbound_policy="DROP", outbound_policy="ACCEPT",
            inbounds=[{"label": "vpc-tcp", "action": "ACCEPT", "protocol": "TCP", "ipv4s": ["10.0.0.0/24"]},
                      {"label": "admin-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": "6443",
                       "ipv4s": [ADMIN]},
                      {"label": "admin-ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22", "ipv4s": [ADMIN]}],
            tags=[f"{k}:{v}" for k, v in LABELS.items()]), firewall))
        linode.Instance("cp-0", label="gpu-test-cp-0", region="us-east", type="g6-standard-4",
                        disk_encryption="enabled", tags=[f"{k}:{v}" for k, v in LABELS.items()])
        linode.Instance("rtx-0", **merged(dict(
            label="gpu-test-rtx-0", region="us-east", type="g1-gpu-rtx6000-1", disk_encryption="enabled",
            tags=[f"{k}:{v}" for k, v in {**LABELS, "gpu-pool": "rtx", "on-demand-approved": "true",
                                          "on-demand-approver": "jane@example.com",
                                          "on-demand-reason": "Linode has no spot market"}.items()]),
            instance))
        if spend_rule:
            k8s.apiextensions.CustomResource(
                "spend-rule", api_version="monitoring.coreos.com/v1", kind="PrometheusRule",
                metadata={"name": "gpu-spend-run-rate", "namespace": "monitoring"},
                spec={"groups": [{"name": "gpu-spend-run-rate", "rules": [
                    {"alert": "GpuSpendRunRateOver100Percent", "expr": "gpu_platform:gpu_spend_usd_per_hour * 730 > 1500"}]}]})
        if extra:
            extra()
    return program


def assert_violates(report: PolicyReport, policy: str, level: str, *fragments: str) -> None:
    result = report.result(policy)
    assert result.status == level, report.render()
    text = "\n".join(m.message for m in result.messages)
    for fragment in fragments:
        assert fragment in text, report.render()


def assert_only(report: PolicyReport, *expected: str) -> None:
    """Exactly these policies report (every other one passes)."""
    failing = {r.name for r in report.results if r.status != "pass"}
    assert failing == set(expected), report.render()


# ---------------------------------------------------------------------------------------------
# The pack as the CLI sees it
# ---------------------------------------------------------------------------------------------


def test_pack_declares_every_policy_with_level_description_and_knob_schema(analyzer):
    info = {p.name: p for p in analyzer.info.policies}
    assert set(info) == set(ALL_POLICIES)
    levels = {0: "advisory", 1: "mandatory"}
    for name, level in ALL_POLICIES.items():
        assert levels[info[name].enforcementLevel] == level, name
        assert len(info[name].description) > 30, name
    knobs = {name: set(p.configSchema.properties.keys()) for name, p in info.items()}
    # every mandatory policy takes an `exception` {reason, approver, until} (gpu_platform/policies/locks.py)
    assert all("exception" in knobs[n] for n, level in ALL_POLICIES.items() if level == "mandatory")
    assert knobs["gpu-count-ceiling"] == {"maxGpus", "exception"}
    assert knobs["monthly-cost-ceiling"] == {"maxMonthlyUsd", "minOverrideRatio", "maxBudgetOverrun", "maxBudgetHeadroom",
                                             "chartStorageGib", "chartLoadBalancers", "exception"}
    assert knobs["gpu-pools-scale-to-zero"] == {"exemptPools", "exception"}
    assert knobs["no-public-admin-access"] == {"sshPorts", "kubeApiPorts", "minPrefixV4", "minPrefixV6",
                                               "maxUnionPrefixV4", "maxUnionPrefixV6", "exception"}
    assert knobs["cost-allocation-tags"] == {"requiredKeys"}


@pytest.mark.parametrize("program,cloud", [(gke(), "gcp"), (eks(), "aws"), (kubeadm(), "linode")],
                         ids=["gke", "eks", "kubeadm"])
def test_compliant_resource_sets_pass_every_policy(analyzer, program, cloud):
    report = analyzer.analyze(plan_of(program, cloud))
    assert_only(report)
    assert report.mandatory_violations == 0
    assert "gpu-count-ceiling" in report.render() and "pass" in report.render()


# ---------------------------------------------------------------------------------------------
# Cost policies
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("program,cloud,pool", [
    (gke(pool={"node_config": {"preemptible": False}}), "gcp", "a100"),
    (eks(asg={"mixed_instances_policy": {"instances_distribution": {"on_demand_percentage_above_base_capacity": 50}}}),
     "aws", "g5"),
    (eks(single_type=True), "aws", "g5"),
    (kubeadm(instance={"tags": [f"{k}:{v}" for k, v in {**LABELS, "gpu-pool": "rtx"}.items()]}), "linode", "rtx"),
], ids=["gke-on-demand", "eks-half-on-demand", "eks-launch-template-on-demand", "linode-unapproved"])
def test_unapproved_on_demand_gpu_pool_is_mandatory_violation(analyzer, program, cloud, pool):
    report = analyzer.analyze(plan_of(program, cloud))
    assert_violates(report, "gpu-interruptible-capacity", "mandatory", f"GPU pool '{pool}'")
    assert_only(report, "gpu-interruptible-capacity")


APPROVAL = {"on-demand-approved": "true", "on-demand-approver": "jane_example_com",
            "on-demand-reason": "h100_capacity_for_the_q4_launch"}


def test_on_demand_pool_approved_by_label_with_approver_and_reason_passes(analyzer):
    program = gke(pool={"node_config": {"preemptible": False, "resource_labels": APPROVAL}})
    report = analyzer.analyze(plan_of(program))
    assert_only(report)
    assert any("approver: jane_example_com" in a for a in report.approvals), report.render()


def test_on_demand_approval_without_approver_or_reason_is_mandatory_violation(analyzer):
    """`approvedOnDemand: true` used to be enough: an approval now names who and why."""
    program = gke(pool={"node_config": {"preemptible": False, "resource_labels": {"on-demand-approved": "true"}}})
    assert_violates(analyzer.analyze(plan_of(program)), "gpu-interruptible-capacity", "mandatory",
                    "without on-demand-approver and on-demand-reason")


@pytest.mark.parametrize("program,cloud,fragment", [
    (gke(pool={"autoscaling": {"total_min_node_count": 2}}), "gcp", "keeps at least 2 node(s)"),
    (gke(pool={"autoscaling": None, "node_count": 1}), "gcp", "fixed size of 2 nodes"),
    (eks(asg={"min_size": 1}), "aws", "keeps at least 1 node(s)"),
], ids=["gke-min-2", "gke-fixed", "asg-min-1"])
def test_gpu_pool_that_cannot_scale_to_zero_is_mandatory_violation(analyzer, program, cloud, fragment):
    report = analyzer.analyze(plan_of(program, cloud))
    assert_violates(report, "gpu-pools-scale-to-zero", "mandatory", fragment)


def test_exempt_pool_knob_allows_a_warm_floor_with_reason_and_approver(analyzer):
    plan = plan_of(eks(asg={"min_size": 1}), "aws")
    import datetime as dt

    until = (dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=30)).isoformat()
    exempt = {"pool": "g5", "reason": "keeps one node warm for the demo", "approver": "jane@example.com", "until": until}
    report = analyzer.analyze(plan, {"gpu-pools-scale-to-zero": {"exemptPools": [exempt]}})
    assert report.result("gpu-pools-scale-to-zero").status == "pass"
    assert any("exempts pool g5 (reason: keeps one node warm for the demo; approver: jane@example.com" in a
               for a in report.approvals), report.render()


def test_an_unexplained_exemption_exempts_nothing(analyzer):
    plan = plan_of(eks(asg={"min_size": 1}), "aws")
    assert_violates(analyzer.analyze(plan, {"gpu-pools-scale-to-zero": {"exemptPools": ["g5"]}}),
                    "gpu-pools-scale-to-zero", "mandatory", "has no reason, approver and until that hold")


def test_gpu_ceiling_counts_max_nodes_times_gpus_per_node(analyzer):
    # a2-highgpu-8g carries 8 A100s (catalog): 9 nodes = 72 GPUs, over the default ceiling of 64.
    program = gke(pool={"node_config": {"machine_type": "a2-highgpu-8g", "guest_accelerators": [
        {"type": "nvidia-tesla-a100", "count": 8}]}, "autoscaling": {"total_max_node_count": 9}})
    plan = plan_of(program)
    cost = {"maxMonthlyUsd": 10_000_000, "exception": approval()}
    report = analyzer.analyze(plan, {"monthly-cost-ceiling": cost})
    assert_violates(report, "gpu-count-ceiling", "mandatory", "72 GPUs", "a100: 9 x 8")
    assert_only(report, "gpu-count-ceiling")
    raised = analyzer.analyze(plan, {"gpu-count-ceiling": {"maxGpus": 72, "exception": approval()},
                                     "monthly-cost-ceiling": cost})
    assert_only(raised)


def test_gke_per_zone_autoscaling_limits_multiply_by_zones(analyzer):
    # maxNodeCount is per zone: 2 zones x 5 nodes x 8 GPUs = 80 GPUs.
    program = gke(pool={"node_config": {"machine_type": "a2-highgpu-8g", "guest_accelerators": [
        {"type": "nvidia-tesla-a100", "count": 8}]}, "autoscaling": {
            "total_min_node_count": None, "total_max_node_count": None, "min_node_count": 0, "max_node_count": 5}})
    report = analyzer.analyze(plan_of(program), {"monthly-cost-ceiling": {"maxMonthlyUsd": 10_000_000,
                                                                         "exception": approval()}})
    assert_violates(report, "gpu-count-ceiling", "mandatory", "80 GPUs")


def test_monthly_cost_ceiling_reads_the_estimator(analyzer):
    # Ten on-demand p4d.24xlarge (approved) at ~$22/h: about $160k a month, over the $50k default.
    program = eks(single_type=True, asg={"max_size": 10, "tags": [{"key": k, "value": v, "propagate_at_launch": True} for k, v in
                                                {**LABELS, "gpu-pool": "p4d", "on-demand-approved": "true",
                                                 "on-demand-approver": "jane@example.com",
                                                 "on-demand-reason": "reserved capacity"}.items()]},
                  lt={"instance_type": "p4d.24xlarge"})
    report = analyzer.analyze(plan_of(program, "aws"))
    assert_violates(report, "monthly-cost-ceiling", "mandatory", "gpu pool p4d (p4d.24xlarge, on-demand)",
                    "$50,000 (maxMonthlyUsd)")
    assert_only(report, "monthly-cost-ceiling", "gpu-count-ceiling")


def test_monthly_cost_ceiling_knob(analyzer):
    plan = plan_of(gke())  # 8 preemptible a2-highgpu-1g: about $11k a month at full capacity
    assert_violates(analyzer.analyze(plan, {"monthly-cost-ceiling": {"maxMonthlyUsd": 5000}}),
                    "monthly-cost-ceiling", "mandatory", "over the ceiling of $5,000")
    assert_only(analyzer.analyze(plan, {"monthly-cost-ceiling": {"maxMonthlyUsd": 20000}}))


@pytest.mark.parametrize("program,cloud,fragment", [
    (gke(budget=False), "gcp", "on gcp but no budget alert"),
    (eks(budget="none"), "aws", "on aws but no budget alert"),
    (kubeadm(spend_rule=False), "linode", "gpu-spend-run-rate"),
], ids=["gcp", "aws", "linode"])
def test_gpu_stack_without_budget_alerts_is_mandatory_violation(analyzer, program, cloud, fragment):
    report = analyzer.analyze(plan_of(program, cloud))
    assert_violates(report, "budget-alerts-required", "mandatory", fragment)
    assert_only(report, "budget-alerts-required")


def test_aws_billing_alarm_counts_as_budget_alert(analyzer):
    assert_only(analyzer.analyze(plan_of(eks(budget="alarm"), "aws")))


# ---------------------------------------------------------------------------------------------
# Security policies
# ---------------------------------------------------------------------------------------------


def _world_rules() -> list[tuple[Callable[[], None], str, str]]:
    return [
        (kubeadm(firewall={"inbounds": [{"label": "ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22",
                                         "ipv4s": ["0.0.0.0/0"]}]}), "linode", "SSH (port 22) to 0.0.0.0/0"),
        (kubeadm(firewall={"inbounds": [{"label": "api", "action": "ACCEPT", "protocol": "TCP", "ports": "443,6000-7000",
                                         "ipv6s": ["::/0"]}]}), "linode", "the Kubernetes API (port 6443) to ::/0"),
        (kubeadm(firewall={"inbound_policy": "ACCEPT", "inbounds": None}), "linode", "inboundPolicy is ACCEPT"),
        (eks(extra=lambda: aws.ec2.SecurityGroup("bastion", ingress=[
            {"protocol": "tcp", "from_port": 22, "to_port": 22, "cidr_blocks": ["0.0.0.0/0"]}], tags=LABELS)),
         "aws", "SSH (port 22) to 0.0.0.0/0"),
        (eks(extra=lambda: aws.ec2.SecurityGroupRule("all-v6", type="ingress", security_group_id="sg-1",
                                                     protocol="-1", from_port=0, to_port=0, ipv6_cidr_blocks=["::/0"])),
         "aws", "SSH (port 22), the Kubernetes API (port 443), the Kubernetes API (port 6443) to ::/0"),
        (eks(extra=lambda: aws.vpc.SecurityGroupIngressRule("api", security_group_id="sg-1", ip_protocol="tcp",
                                                            from_port=6443, to_port=6443, cidr_ipv4="0.0.0.0/0")),
         "aws", "the Kubernetes API (port 6443)"),
        (eks(cluster={"vpc_config": {"public_access_cidrs": None}}), "aws", "no publicAccessCidrs"),
        (eks(cluster={"vpc_config": {"public_access_cidrs": [ADMIN, "0.0.0.0/0"]}}), "aws", "open to 0.0.0.0/0"),
        (gke(cluster={"master_authorized_networks_config": None}), "gcp", "no masterAuthorizedNetworksConfig"),
        (gke(cluster={"master_authorized_networks_config": {"cidr_blocks": [{"cidr_block": "0.0.0.0/0"}]}}), "gcp",
         "authorizes 0.0.0.0/0"),
        (gke(extra=lambda: gcp.compute.Firewall("ssh", network="vpc", source_ranges=["0.0.0.0/0"],
                                                allows=[{"protocol": "tcp", "ports": ["22"]}])), "gcp",
         "SSH (port 22) to 0.0.0.0/0"),
    ]


@pytest.mark.parametrize("program,cloud,fragment", _world_rules(), ids=[
    "linode-ssh", "linode-api-v6-range", "linode-accept-policy", "aws-sg", "aws-sg-rule-all-v6", "aws-vpc-rule",
    "eks-no-cidrs", "eks-world-cidr", "gke-no-authorized-networks", "gke-world-network", "gcp-firewall-ssh"])
def test_ssh_or_kube_api_open_to_the_world_is_mandatory_violation(analyzer, program, cloud, fragment):
    report = analyzer.analyze(plan_of(program, cloud))
    assert_violates(report, "no-public-admin-access", "mandatory", fragment)


def test_world_open_non_admin_port_and_private_endpoint_pass(analyzer):
    web = eks(extra=lambda: aws.ec2.SecurityGroup("web", ingress=[
        {"protocol": "tcp", "from_port": 80, "to_port": 80, "cidr_blocks": ["0.0.0.0/0"]}], tags=LABELS))
    assert_only(analyzer.analyze(plan_of(web, "aws")))
    private = eks(cluster={"vpc_config": {"endpoint_public_access": False, "public_access_cidrs": None}})
    assert_only(analyzer.analyze(plan_of(private, "aws")))


def test_ssh_ports_knob(analyzer):
    program = eks(extra=lambda: aws.ec2.SecurityGroup("alt-ssh", ingress=[
        {"protocol": "tcp", "from_port": 2222, "to_port": 2222, "cidr_blocks": ["0.0.0.0/0"]}], tags=LABELS))
    plan = plan_of(program, "aws")
    assert analyzer.analyze(plan).result("no-public-admin-access").status == "pass"
    assert_violates(analyzer.analyze(plan, {"no-public-admin-access": {"sshPorts": [22, 2222]}}),
                    "no-public-admin-access", "mandatory", "SSH (port 2222)")


@pytest.mark.parametrize("lt,fragment", [
    ({"metadata_options": {"http_tokens": "optional"}}, "IMDSv1"),
    ({"metadata_options": None}, "httpTokens: required"),
    ({"block_device_mappings": [{"device_name": "/dev/xvda", "ebs": {"volume_size": 200}}]}, "/dev/xvda is not encrypted"),
    ({"block_device_mappings": None}, "no block device mapping"),
], ids=["imds-optional", "imds-default", "unencrypted", "no-root-volume"])
def test_launch_template_without_imdsv2_or_encryption_is_mandatory_violation(analyzer, lt, fragment):
    report = analyzer.analyze(plan_of(eks(lt=lt), "aws"))
    assert_violates(report, "aws-imdsv2-encrypted-volumes", "mandatory", fragment)
    assert_only(report, "aws-imdsv2-encrypted-volumes")


def test_linode_disk_encryption_disabled_is_mandatory_violation(analyzer):
    report = analyzer.analyze(plan_of(kubeadm(instance={"disk_encryption": "disabled"}), "linode"))
    assert_violates(report, "linode-disk-encryption", "mandatory", "diskEncryption is disabled")
    assert_only(report, "linode-disk-encryption")


def test_secret_inputs_reach_the_pack_as_the_cli_sends_them(analyzer):
    # The CLI marshals secrets as secret-signature objects (KeepSecrets); the pack unwraps them.
    def program() -> None:
        kubeadm(instance={"disk_encryption": pulumi.Output.secret("disabled")})()

    plan = plan_of(program, "linode")
    gpu = plan.one("linode:index/instance:Instance", "rtx")
    assert gpu.wire_inputs["diskEncryption"]["4dabf18193072939515e22adb298388d"] == "1b47061264138c4ac30d75fd1eb44270"
    assert_violates(analyzer.analyze(plan), "linode-disk-encryption", "mandatory", "diskEncryption is disabled")


@pytest.mark.parametrize("cluster,pool,fragment", [
    (None, {"node_config": {"workload_metadata_config": None}}, "GKE metadata server"),
    (None, {"node_config": {"shielded_instance_config": {"enable_secure_boot": False}}}, "Secure Boot"),
    ({"private_cluster_config": None}, None, "public IP addresses"),
    ({"workload_identity_config": None}, None, "no Workload Identity"),
], ids=["metadata", "secure-boot", "public-nodes", "no-workload-identity"])
def test_gke_node_without_hardening_is_mandatory_violation(analyzer, cluster, pool, fragment):
    report = analyzer.analyze(plan_of(gke(cluster=cluster, pool=pool)))
    assert_violates(report, "gke-node-hardening", "mandatory", fragment)


def test_gke_private_nodes_on_the_pool_alone_pass(analyzer):
    program = gke(cluster={"private_cluster_config": None}, pool={"network_config": {"enable_private_nodes": True}})
    assert analyzer.analyze(plan_of(program)).result("gke-node-hardening").status == "pass"


# ---------------------------------------------------------------------------------------------
# Hygiene
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("program,cloud,fragment", [
    (kubeadm(instance={"tags": ["owner:ml-platform", "gpu-pool:rtx", "on-demand-approved:true",
                                "on-demand-approver:jane@example.com", "on-demand-reason:no spot on Linode"]}), "linode",
     "lack cost-center, environment"),
    (eks(asg={"tags": [{"key": k, "value": v, "propagate_at_launch": k != "owner"}
                       for k, v in {**LABELS, "gpu-pool": "g5"}.items()]}), "aws", "launch (tags) lack owner"),
    (gke(pool={"node_config": {"resource_labels": {"environment": None}}}), "gcp", "lack environment"),
], ids=["linode-tags", "asg-not-propagated", "gke-labels"])
def test_billable_resource_without_cost_tags_is_advisory(analyzer, program, cloud, fragment):
    report = analyzer.analyze(plan_of(program, cloud))
    assert_violates(report, "cost-allocation-tags", "advisory", fragment)
    assert report.mandatory_violations == 0


def test_aws_provider_default_tags_count_and_cost_center_spellings_match(analyzer):
    def program() -> None:
        prov = aws.Provider("aws", region="us-east-1", default_tags={"tags": {"owner": "ml", "environment": "t"}})
        aws.eks.Cluster("eks", role_arn="arn", vpc_config={"subnet_ids": ["s"], "public_access_cidrs": [ADMIN]},
                        tags={"costCenter": "research"}, opts=pulumi.ResourceOptions(provider=prov))
    assert analyzer.analyze(plan_of(program, "aws")).result("cost-allocation-tags").status == "pass"


# ---------------------------------------------------------------------------------------------
# Policy config (stacks/policy.<stack>.yaml) and the CLI's reconciliation rules
# ---------------------------------------------------------------------------------------------


def test_all_and_per_policy_levels_apply_like_the_cli(analyzer):
    """Levels reconcile like the CLI's ("all" first, then per policy); lowering a mandatory policy takes
    an exception (tests/test_policy_exceptions.py), raising an advisory one does not."""
    plan = plan_of(eks(asg={"min_size": 1}), "aws")
    report = analyzer.analyze(plan, {"all": "advisory"})
    # "all" reaches every mandatory policy: each stays mandatory and reports the attempt.
    assert_violates(report, "gpu-pools-scale-to-zero", "mandatory", "keeps at least 1 node(s)")
    refused = {r.name for r in report.results for m in r.messages if "sets it to advisory" in m.message}
    assert refused == {n for n, level in ALL_POLICIES.items() if level == "mandatory"}, report.render()
    locked = [m for r in report.results for m in r.messages if "is a locked security policy" in m.message]
    assert len(locked) == 5, report.render()  # images-by-digest is the fifth (gpu_platform/policies/enforcement.yaml)
    report = analyzer.analyze(plan, {"all": "advisory", "gpu-pools-scale-to-zero": {"enforcementLevel": "mandatory"}})
    assert report.result("gpu-pools-scale-to-zero").status == "mandatory"
    report = analyzer.analyze(plan, {"cost-allocation-tags": "mandatory", "idle-floor-budget-share": "disabled"})
    assert report.result("cost-allocation-tags").enforcement_level == "mandatory"
    assert report.result("idle-floor-budget-share").status == "disabled"


@pytest.mark.parametrize("config", [
    {"linode-disk-encryption": "disabled"}, {"all": "advisory"}, {"all": "disabled"},
    {"linode-disk-encryption": {"enforcementLevel": "advisory"}},
], ids=["disabled", "all-advisory", "all-disabled", "advisory"])
def test_a_stack_policy_config_cannot_downgrade_a_locked_security_policy(analyzer, config):
    plan = plan_of(kubeadm(instance={"disk_encryption": "disabled"}), "linode")
    report = analyzer.analyze(plan, config)
    result = report.result("linode-disk-encryption")
    assert result.enforcement_level == "mandatory"
    assert_violates(report, "linode-disk-encryption", "mandatory", "diskEncryption is disabled",
                    "is a locked security policy")


def test_a_locked_policy_settings_cannot_be_loosened(analyzer):
    program = eks(cluster={"vpc_config": {"public_access_cidrs": ["198.18.0.0/15"]}})
    plan = plan_of(program, "aws")
    assert_violates(analyzer.analyze(plan), "no-public-admin-access", "mandatory", "shorter than /16")
    report = analyzer.analyze(plan, {"no-public-admin-access": {"minPrefixV4": 8, "kubeApiPorts": []}})
    assert_violates(report, "no-public-admin-access", "mandatory", "loosens kubeApiPorts ([443, 6443] -> []), minPrefixV4 (16 -> 8)",
                    "shorter than /16")


def _pack_with_enforcement(tmp_path: Path, enforcement_text: str) -> tuple[Path, Path]:
    """The project's policies in a pack whose locks read `enforcement_text` (both sides of the lock)."""
    rules = tmp_path / "enforcement.yaml"
    rules.write_text(enforcement_text)
    pack = _test_pack(tmp_path / "locked-pack",
        "from pathlib import Path\n"
        "from pulumi_policy import PolicyPack\n"
        "from gpu_platform.policies import locks, security_rules\n"
        f"locks.install(security_rules.POLICIES, Path({str(rules)!r}))\n"
        "PolicyPack('locked-pack', security_rules.POLICIES)\n")
    return pack, rules


def _test_pack(pack: Path, program: str) -> Path:
    """A policy pack folder whose __main__.py is `program`, importing this checkout's gpu_platform."""
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text("runtime: python\nversion: 0.0.1\n")
    (pack / "__main__.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + program)
    return pack


def test_an_exception_in_enforcement_yaml_allows_a_downgrade_with_its_reason(tmp_path):
    from gpu_platform.preflight.analyzer import load_enforcement

    plan = plan_of(kubeadm(instance={"disk_encryption": "disabled"}), "linode")
    pack, rules = _pack_with_enforcement(tmp_path, (
        "locked: [linode-disk-encryption]\n"
        "exceptions:\n"
        f"  - {{stack: {plan.stack}, policy: linode-disk-encryption, level: advisory,\n"
        "     reason: benchmark nodes without data, approver: security-lead@example.com,\n"
        f"     until: '{approval()['until']}'}}\n"))
    with Analyzer(pack, enforcement=load_enforcement(rules)) as a:
        report = a.analyze(plan, {"linode-disk-encryption": "advisory"})
    assert_violates(report, "linode-disk-encryption", "advisory", "diskEncryption is disabled")
    assert report.mandatory_violations == 0
    assert any("by exception (reason: benchmark nodes without data; approver: security-lead@example.com; until" in a
               for a in report.approvals), report.render()


@pytest.mark.parametrize("config,fragment", [
    ({"no-public-admin-access": "disabled"}, "no-public-admin-access is a locked"),
    ({"gpu-count-ceiling": {"maxGpus": 100000}}, "gpu-count-ceiling is a mandatory guardrail"),
    ({"budget-alerts-required": "advisory"}, "budget-alerts-required is a mandatory guardrail"),
    ({"monthly-cost-ceiling": {"minOverrideRatio": 0, "exception": approval(reason="tbd tbd tbd tbd")}},
     "reason: a real reason, not a placeholder"),
], ids=["locked", "ceiling", "level", "placeholder-reason"])
def test_the_pack_itself_refuses_a_downgrade_as_the_cli_would_send_it(monkeypatch, config, fragment):
    """Without preflight's own check (as under `pulumi preview --policy-pack-config`), the pack's
    Configure refuses to weaken a mandatory policy without a valid exception, so the preview fails."""
    import gpu_platform.preflight.analyzer as analyzer_module

    monkeypatch.setattr(analyzer_module, "enforce_locks", lambda *args: ({}, []))
    with Analyzer() as a:
        with pytest.raises(PolicyPackError, match=f"FAILED_PRECONDITION: .*{fragment}"):
            a.analyze(plan_of(gke()), config)
        a.analyze(plan_of(gke()), {"gpu-count-ceiling": {"maxGpus": 100000, "exception": approval()}})


@pytest.mark.parametrize("config,fragment", [
    ({"gpu-count-limit": {"maxGpus": 8}}, "unknown policy 'gpu-count-limit'"),
    ({"gpu-count-ceiling": {"maxGPUs": 8}}, "unknown setting(s) maxGPUs (did you mean maxGpus?); settings: exception, maxGpus"),
    ({"gpu-count-ceiling": {"maxGpus": "eight"}}, "gpu-count-ceiling.maxGpus: 'eight' is not of type 'integer'"),
    ({"gpu-count-ceiling": "strict"}, "'strict' is not an enforcement level"),
], ids=["unknown-policy", "unknown-knob", "bad-type", "bad-level"])
def test_bad_policy_config_is_rejected_with_the_key(analyzer, config, fragment):
    with pytest.raises(PolicyConfigError) as err:
        analyzer.analyze(plan_of(gke()), config)
    assert fragment in str(err.value)


def test_policy_config_file_per_stack(tmp_path):
    # A project whose stack files (and so its policy configs) live in stacks/, like this repository's.
    (tmp_path / "Pulumi.yaml").write_text("name: other\nruntime: python\nstackConfigDir: stacks\n")
    (tmp_path / "stacks").mkdir()
    project = Project.load(tmp_path)
    assert load_policy_config("gcp-prod", project=project) is None
    (tmp_path / "stacks" / "policy.gcp-prod.yaml").write_text(
        "gpu-count-ceiling:\n  maxGpus: 16\ncost-allocation-tags: mandatory\n")
    assert load_policy_config("gcp-prod", project=project) == {"gpu-count-ceiling": {"maxGpus": 16},
                                                             "cost-allocation-tags": "mandatory"}
    (tmp_path / "stacks" / "policy.bad.yaml").write_text("- not a mapping\n")
    with pytest.raises(PolicyConfigError, match="policy.bad.yaml"):
        load_policy_config("bad", project=project)
    (tmp_path / "strict.yaml").write_text("all: blocking\n")
    with pytest.raises(PolicyConfigError, match="'blocking' is not an enforcement level"):
        load_policy_config("gcp-prod", tmp_path / "strict.yaml")  # preflight --policy-config PATH
    with pytest.raises(PolicyConfigError, match="does not exist"):
        load_policy_config("gcp-prod", tmp_path / "missing.yaml")


def test_shipped_policy_config_files_are_valid(analyzer):
    for path in sorted((ROOT / "stacks").glob("policy.*.yaml")):
        stack = path.name[len("policy."):-len(".yaml")]
        assert (ROOT / "stacks" / f"Pulumi.{stack}.yaml").exists(), f"{path.name} has no stack file"
        analyzer.configure(load_policy_config(stack), where=path.name)


# ---------------------------------------------------------------------------------------------
# Every shipped stack passes every mandatory policy
# ---------------------------------------------------------------------------------------------


SHIPPED = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_stack_passes_every_mandatory_policy(stack):
    plan = run_program(load_stack(stack))
    report = analyze_plan(plan, load_policy_config(stack))  # its own pack process, with the stack's config
    assert report.mandatory_violations == 0, report.render()
    assert {r.name for r in report.results} == set(ALL_POLICIES)
    assert report.resources_analyzed == len(plan.resources) + 1  # + the root Stack resource


# ---------------------------------------------------------------------------------------------
# Starting the pack: loud failures, logs surfaced
# ---------------------------------------------------------------------------------------------


def _copy_pack(tmp_path: Path) -> Path:
    pack = tmp_path / "pack"
    shutil.copytree(PACK_DIR, pack, ignore=shutil.ignore_patterns("__pycache__"))
    return pack


def test_pack_that_cannot_load_fails_loudly_with_its_stderr(tmp_path):
    pack = _copy_pack(tmp_path)
    main = pack / "__main__.py"
    main.write_text("import policies_module_that_does_not_exist\n" + main.read_text())
    with pytest.raises(PolicyPackError) as err:
        analyze_plan(plan_of(gke()), pack_dir=pack)
    assert "failed to start" in str(err.value)
    assert "policies_module_that_does_not_exist" in str(err.value)


def test_pack_without_manifest_fails_loudly(tmp_path):
    pack = _copy_pack(tmp_path)
    (pack / "PulumiPolicy.yaml").unlink()
    with pytest.raises(PolicyPackError, match="failed to load Pulumi policy project"):
        Analyzer(pack).start()


def test_pack_logs_are_surfaced_in_the_report(tmp_path):
    pack = tmp_path / "logging-pack"
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text("runtime: python\nversion: 9.9.9\n")
    (pack / "__main__.py").write_text(
        "import pulumi\n"
        "from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy\n"
        "def validate(args, report_violation):\n"
        "    pulumi.log.warn('pack saw ' + args.resource_type)\n"
        "PolicyPack('logging-pack', [ResourceValidationPolicy('log-everything', 'Logs each resource.', validate,\n"
        "                                                      EnforcementLevel.ADVISORY)])\n")
    plan = plan_of(kubeadm(), "linode")
    with Analyzer(pack) as a:
        report = a.analyze(plan)
    assert report.version == "9.9.9"  # PulumiPolicy.yaml's version wins, as in the CLI
    assert report.result("log-everything").status == "pass"
    assert any("pack saw linode:index/instance:Instance" in line for line in report.logs), report.logs
    assert "pack log: warning: pack saw linode:index/firewall:Firewall" in report.render()


# ---------------------------------------------------------------------------------------------
# Bypasses that must not pass (issue 13)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("program,cloud,fragment", [
    (eks(cluster={"vpc_config": {"public_access_cidrs": ["0.0.0.0/1", "128.0.0.0/1"]}}), "aws", "100.00%"),
    (gke(cluster={"master_authorized_networks_config": {"cidr_blocks": [
        {"cidr_block": "0.0.0.0/1"}, {"cidr_block": "128.0.0.0/1"}]}}), "gcp", "shorter than /16"),
    (kubeadm(firewall={"inbounds": [{"label": "api", "action": "ACCEPT", "protocol": "TCP", "ports": "6443",
                                     "ipv6s": ["::/1", "8000::/1"]}]}), "linode", "shorter than /32"),
    (kubeadm(firewall={"inbounds": [{"label": "ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22",
                                     "ipv4s": [f"{i}.0.0.0/16" for i in range(1, 40)]}]}), "linode",
     "at most one /12 allowed"),
], ids=["eks-split-v4", "gke-split-v4", "linode-split-v6", "linode-many-16s"])
def test_split_or_wide_cidr_sets_are_measured_by_the_address_space_they_open(analyzer, program, cloud, fragment):
    assert_violates(analyzer.analyze(plan_of(program, cloud)), "no-public-admin-access", "mandatory", fragment)


def test_a_narrow_public_range_and_private_ranges_pass(analyzer):
    program = eks(cluster={"vpc_config": {"public_access_cidrs": ["198.51.100.0/24", "81.2.0.0/16"]}})
    assert analyzer.analyze(plan_of(program, "aws")).result("no-public-admin-access").status == "pass"


@pytest.mark.parametrize("ranges", [["192.168.0.0/16"], ["192.168.128.0/17"], ["192.168.200.7/32"]],
                         ids=["rfc1918-192-168", "linode-private-17", "one-private-address"])
def test_a_linode_firewall_open_to_linodes_shared_private_network_is_a_violation(analyzer, ranges):
    """192.168.128.0/17 holds every Linode customer's private addresses in the region: not "private"."""
    program = kubeadm(firewall={"inbounds": [{"label": "admin-ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22",
                                              "ipv4s": ranges}]})
    assert_violates(analyzer.analyze(plan_of(program, "linode")), "no-public-admin-access", "mandatory",
                    "shared by every customer", ranges[0])


def test_the_nodebalancer_backend_range_and_the_vpc_may_reach_the_linode_api(analyzer):
    program = kubeadm(firewall={"inbounds": [
        {"label": "nodebalancer-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": "6443",
         "ipv4s": ["192.168.255.0/24"]},
        {"label": "vpc-tcp", "action": "ACCEPT", "protocol": "TCP", "ipv4s": ["10.0.0.0/24", "10.244.0.0/16"]},
        {"label": "admin-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": "6443", "ipv4s": [ADMIN]}]})
    assert analyzer.analyze(plan_of(program, "linode")).result("no-public-admin-access").status == "pass"


def _price_plan(override: dict) -> tuple[Plan, dict[str, str]]:
    cfg = stack_config("gcp-prod")
    cfg["gpu-platform:priceOverrides"] = override
    si = stack_input_from_mapping("gcp-prod", cfg)
    return run_program(si), si.config


def test_a_price_override_far_below_the_catalog_is_a_violation():
    """$0.0001/h for an A100 would take a $22.9k/month stack under a $15k ceiling."""
    plan, config = _price_plan({"a2-highgpu-1g": {"preemptible": 0.0001}})
    with Analyzer(stack="gcp-prod", stack_config=config) as a:
        report = a.analyze(plan, {"monthly-cost-ceiling": {"maxMonthlyUsd": 15000}})
    assert_violates(report, "monthly-cost-ceiling", "mandatory",
                    "priceOverrides.a2-highgpu-1g.preemptible = $0.0001/hour is below 50%")


def test_infinity_in_price_overrides_never_reaches_the_pack_as_a_price():
    """Config validation refuses it first; a pack handed one anyway (the CLI path) reports it instead of
    serializing Infinity into protobuf."""
    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config

    with pytest.raises(ConfigError, match="finite number"):
        parse_config({**{k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items()
                         if k.startswith("gpu-platform:")}, "priceOverrides": {"a2-highgpu-1g": {"spot": float("inf")}}},
                     "gcp-prod")
    plan, config = _price_plan({})
    config["gpu-platform:priceOverrides"] = '{"a2-highgpu-1g": {"spot": Infinity}}'
    with Analyzer(stack="gcp-prod", stack_config=config) as a:
        report = a.analyze(plan)
    assert report.result("monthly-cost-ceiling").status != "pass"


def _pack_with(tmp_path, extra_policy: str, track_all: bool = True, extra_first: bool = False):
    policies = "EXTRA + cost_rules.POLICIES" if extra_first else "cost_rules.POLICIES + EXTRA"
    pack = _test_pack(tmp_path / "pack",
        "from pulumi_policy import EnforcementLevel, PolicyPack, ResourceValidationPolicy\n"
        "from gpu_platform.policies import cost_rules, running\n"
        + extra_policy +
        f"PolicyPack('test-pack', running.track({policies}))\n")
    return pack


def test_a_hung_rule_fails_the_run_naming_it_and_the_pack_is_stopped(tmp_path):
    pack = _pack_with(tmp_path, (
        "def spin(args, report_violation):\n"
        "    while True:\n"
        "        pass\n"
        "EXTRA = [ResourceValidationPolicy('spin-forever', 'A rule stuck in a loop.', spin, EnforcementLevel.MANDATORY)]\n"),
        extra_first=True)  # the first rule the pack runs: the cost rules before it took over 3 s in a loaded make test
    from gpu_platform.preflight.analyzer import PolicyTimeout

    a = Analyzer(pack, call_timeout=3)
    a.start()
    pid = a._proc.pid
    with pytest.raises(PolicyTimeout, match="policy spin-forever did not finish Analyze"):
        a.analyze(plan_of(gke()))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped: no orphan


def test_a_pack_missing_a_shipped_policy_fails_loudly(tmp_path):
    from gpu_platform.preflight.analyzer import PolicyPackIncomplete, load_enforcement

    pack = _pack_with(tmp_path, "EXTRA = []\n")
    with pytest.raises(PolicyPackIncomplete, match="policies the project ships: .*no-public-admin-access"):
        Analyzer(pack, enforcement=load_enforcement()).start()


def test_the_shipped_list_is_the_pack_the_project_builds(analyzer):
    from gpu_platform.preflight.analyzer import load_enforcement

    enforcement = load_enforcement()
    assert sorted(enforcement.shipped) == sorted(p.name for p in analyzer.info.policies)
    from gpu_platform.policies import security_rules

    assert sorted(enforcement.locked) == sorted(p.name for p in security_rules.POLICIES)


# --- cost-allocation tags on every taggable type, from the provider schemas ------------------------


def test_the_taggable_types_are_what_the_installed_sdks_say():
    """gpu_platform/policies/taggable.json is regenerated from the SDKs (their schemas' inputs), not kept by
    hand: a provider upgrade that adds a taggable type fails here until `python -m
    gpu_platform.policies.taggable` is run."""
    from gpu_platform.policies import taggable

    assert taggable.taggable() == taggable.from_sdks()
    found = taggable.taggable()
    assert len(found) > 500
    for token, field in {"aws:ecr/repository:Repository": "tags", "aws:sns/topic:Topic": "tags",
                         "aws:ec2/launchTemplate:LaunchTemplate": "tags", "gcp:compute/router:Router": None,
                         "gcp:monitoring/notificationChannel:NotificationChannel": "userLabels",
                         "gcp:container/cluster:Cluster": "resourceLabels", "linode:index/instance:Instance": "tags"}.items():
        assert found.get(token) == field, token


def test_an_untagged_ecr_repository_is_reported(analyzer):
    """The fixed list this replaced let an untagged ECR repository pass."""
    def program() -> None:
        aws.ecr.Repository("images", image_tag_mutability="IMMUTABLE")

    report = analyzer.analyze(plan_of(program, "aws"), None)
    assert_violates(report, "cost-allocation-tags", "advisory", "images", "lack owner, cost-center, environment")



# ---------------------------------------------------------------------------------------------
# images-by-digest (issue 32 item 2: what runs is the digest the build pushed)
# ---------------------------------------------------------------------------------------------

BY_DIGEST = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu-prod/gpu-platform-scale-in@sha256:" + "ab" * 32


def workloads(deployment_image: str, job_image: str = BY_DIGEST, init_image: str = BY_DIGEST) -> Callable[[], None]:
    def program() -> None:
        labels = {"app": "x"}
        k8s.apps.v1.Deployment("controller", metadata={"name": "controller", "labels": LABELS}, spec={
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "initContainers": [{"name": "init", "image": init_image}],
                "containers": [{"name": "main", "image": deployment_image}]}}})
        k8s.batch.v1.CronJob("nightly", metadata={"name": "nightly", "labels": LABELS}, spec={
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "job", "image": job_image}]}}}}})
    return program


def test_workloads_running_images_by_digest_pass(analyzer):
    assert_only(analyzer.analyze(plan_of(gke(extra=workloads(BY_DIGEST)))))


@pytest.mark.parametrize("images,named", [
    ((BY_DIGEST.split("@")[0] + ":src-0123456789abcdef",), "main: 123456789012.dkr.ecr"),  # a tag, however specific
    ((BY_DIGEST, "python:3.13-slim"), "job: python:3.13-slim"),  # a CronJob's pod template
    ((BY_DIGEST, BY_DIGEST, "busybox@sha256:123"), "init: busybox@sha256:123"),  # an init container, a short digest
], ids=["deployment-tag", "cronjob-tag", "init-short-digest"])
def test_a_workload_image_not_by_digest_is_a_mandatory_violation_naming_the_container(analyzer, images, named):
    report = analyzer.analyze(plan_of(gke(extra=workloads(*images))))
    assert_violates(report, "images-by-digest", "mandatory", "not by digest", named)
    assert_only(report, "images-by-digest")


KATIB_CONTROLLER = "ghcr.io/kubeflow/katib/katib-controller:v0.19.0"  # as Katib's pinned install names it


def upstream_workload(component: Optional[str], through_directory: bool,
                      directory: str = "platform-kubeflow-katib") -> Callable[[], None]:
    """Katib's controller Deployment as the engine registers it from the Directory that expands the install (the
    mocks never expand one, so the child is registered here under the same parents); `component` None: no component."""
    def program() -> None:
        parent = pulumi.ComponentResource(component, "platform-kubeflow") if component else None
        if through_directory:
            parent = k8s.kustomize.v2.Directory(directory, directory="kustomize/katib",
                                                opts=pulumi.ResourceOptions(parent=parent))
        labels = {"app": "katib-controller"}
        k8s.apps.v1.Deployment("platform-kubeflow-katib:kubeflow/katib-controller",
                               metadata={"name": "katib-controller", "namespace": "kubeflow", "labels": LABELS},
                               spec={"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [{"name": "katib-controller", "image": KATIB_CONTROLLER}]}}},
                               opts=pulumi.ResourceOptions(parent=parent))
    return program


def test_the_workloads_of_kubeflows_pinned_installs_run_their_releases_images(analyzer):
    """Found by the real engine (2026-11-29): under `pulumi preview` each object of Kubeflow's kustomize installs is a
    resource the pack judges, and 16 Deployments of Katib and Pipelines name their images by tag, so the locked
    images-by-digest failed every stack with Kubeflow on (the mocks never expand a Directory, so preflight passed).
    They are the pinned releases' own images, as a Helm chart's are."""
    report = analyzer.analyze(plan_of(gke(extra=upstream_workload("gpu-platform:platform:Kubeflow", True))))
    assert_only(report)


@pytest.mark.parametrize("component,through_directory,directory", [
    ("gpu-platform:platform:Kubeflow", False, ""),  # the program's component, but not one of its installs
    ("my-team:apps:Tools", True, "platform-kubeflow-katib"),  # a Directory of someone else's component
    (None, True, "platform-kubeflow-katib"),  # a Directory at the top of a program
    # a Directory added to the component, not one of its pinned installs (review, 2026-11-29: a moving branch passed)
    ("gpu-platform:platform:Kubeflow", True, "platform-kubeflow-model-registry"),
], ids=["kubeflow-without-directory", "other-component", "top-level-directory", "another-directory-of-kubeflow"])
def test_the_same_workload_elsewhere_in_a_program_is_still_judged(analyzer, component, through_directory, directory):
    report = analyzer.analyze(plan_of(gke(extra=upstream_workload(component, through_directory, directory))))
    assert_violates(report, "images-by-digest", "mandatory", f"katib-controller: {KATIB_CONTROLLER}")
    assert_only(report, "images-by-digest")


def deployment_patch(image: Optional[str]) -> Callable[[], None]:
    """A DeploymentPatch of the operator's Deployment, as the program patches Deployments it does not own
    (kubeflow.py `_deployment_patch`): with `image`, it swaps the container's image; without, it sets a request only."""
    def program() -> None:
        container = {"name": "kube-prometheus-stack", "resources": {"requests": {"cpu": "100m"}}}
        if image is not None:
            container["image"] = image
        k8s.apps.v1.DeploymentPatch("operator-patch", metadata={"name": "kube-prometheus-stack-operator",
                                                                 "namespace": "monitoring"},
                                    spec={"template": {"spec": {"containers": [container]}}})
    return program


def test_a_patch_that_sets_an_image_by_tag_is_a_violation_and_one_that_keeps_the_image_is_not(analyzer):
    """Found by review (2026-11-29): a DeploymentPatch swapping a Deployment's image for `:latest` passed the locked
    policy (patch kinds were not judged)."""
    report = analyzer.analyze(plan_of(gke(extra=deployment_patch("quay.io/prometheus-operator/prometheus-operator:latest"))))
    assert_violates(report, "images-by-digest", "mandatory", "kube-prometheus-stack: quay.io/prometheus-operator/")
    assert_only(report, "images-by-digest")
    assert_only(analyzer.analyze(plan_of(gke(extra=deployment_patch(None)))))
    assert_only(analyzer.analyze(plan_of(gke(extra=deployment_patch(BY_DIGEST)))))


@pytest.fixture
def fresh_catalog(monkeypatch):
    """The pack's catalog cache (policies/pools.py), empty before the test and again after it, once the test's own
    load_catalog is taken away."""
    from gpu_platform.policies import pools

    pools._catalog.cache_clear()
    yield pools
    monkeypatch.undo()
    pools._catalog.cache_clear()


def test_the_pack_reads_the_catalog_ahead_and_leaves_a_broken_one_to_the_analysis(monkeypatch, fresh_catalog):
    """The pack reads the price catalog in a thread as it starts (__main__.py), before it serves: the first stack
    analysis, the last step of a preflight, read it itself (half a second of linode-ha's analysis, measured
    2026-11-30). A catalog that does not load is not swallowed: the analysis that needs it raises its error."""
    from gpu_platform.costs import catalog as catalog_module

    pools = fresh_catalog
    pools.read_catalog_ahead()
    assert pools._catalog.cache_info().currsize == 1

    pools._catalog.cache_clear()

    def broken_catalog():
        raise catalog_module.CatalogError("invalid price catalog: x")

    monkeypatch.setattr(catalog_module, "load_catalog", broken_catalog)
    pools.read_catalog_ahead()  # no exception here
    assert pools._catalog.cache_info().currsize == 0
    with pytest.raises(catalog_module.CatalogError, match="invalid price catalog"):
        pools.catalog()


def test_the_pack_program_reads_the_catalog_and_the_stack_settings_before_its_first_call():
    """The pack's program (__main__.py, all but serving) starts a thread that reads the price catalog and the stack's
    settings (the config model imported, the config validated: about half a CPU-second that the first stack
    analysis, the last step of a preflight, paid; review of 2026-11-30). Its modules alone load neither pydantic nor
    the config models: the pack answers its first call without waiting for them."""
    import subprocess
    import sys

    script = """
import json, runpy, sys, threading
import pulumi_policy
pulumi_policy.PolicyPack = lambda **kwargs: None  # everything the pack's program does but serve
from gpu_platform.policies import pools, stack_settings
from gpu_platform.policies import budget_rules, cost_rules, hygiene_rules, locks, running, security_rules
modules_alone = sorted(m for m in sys.modules if m == "pydantic" or m.startswith("gpu_platform.config."))
runpy.run_path("gpu_platform/policies/__main__.py", run_name="__main__")
[ahead] = [t for t in threading.enumerate() if t.name == "read-ahead"]
ahead.join()
settings = stack_settings.stack_settings()
print(json.dumps({"modules_alone": modules_alone, "catalog": pools._catalog.cache_info().currsize,
                  "settings": stack_settings._cached.cache_info().hits, "cloud": settings.cloud,
                  "validated": settings.config is not None}))
"""
    import json

    from gpu_platform.preflight.analyzer import pack_stack_config

    config = pack_stack_config(stack_input_from_mapping("gcp-prod", stack_config("gcp-prod")).config)
    env = {**os.environ, "PULUMI_CONFIG": json.dumps(config)}
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(got["modules_alone"]) <= {"gpu_platform.config.approvals", "gpu_platform.config.linode_network"}, got
    # The call after the thread finished was a hit: the thread had read and validated the settings.
    assert got["catalog"] == 1 and got["settings"] == 1 and got["cloud"] == "gcp" and got["validated"], got


def test_an_analysis_asking_for_the_catalog_while_it_is_read_ahead_waits_for_that_read(monkeypatch, fresh_catalog):
    """The attacker review (2026-11-30): the catalog's cache let two first callers each read every file, so an
    analysis that came while the pack's thread was still reading lost the head start."""
    import threading
    import time

    from gpu_platform.costs import catalog as catalog_module

    pools = fresh_catalog
    reads = []

    def slow_catalog():
        reads.append(1)
        time.sleep(0.3)
        return "the catalog"

    monkeypatch.setattr(catalog_module, "load_catalog", slow_catalog)
    ahead = threading.Thread(target=pools.read_catalog_ahead)
    ahead.start()
    time.sleep(0.05)
    assert pools.catalog() == "the catalog"
    ahead.join()
    assert len(reads) == 1
