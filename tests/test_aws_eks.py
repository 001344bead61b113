"""EKS cluster parts of issue 12 and issue 10 under preflight's mocks: versions and support type, the VPC CNI's
own identity and NetworkPolicy enforcement, IMDS hop limit, admin access entries vs the deployer, and billing
alarms once per account."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_platform.components.aws.billing import stack_cost_filter
from gpu_platform.components.aws.eks import (
    IMDS_HOP_LIMIT,
    NODE_POLICIES,
    VPC_CNI_CONFIGURATION,
    admin_principals,
    principal_key,
    secure_launch_template_args,
)
from gpu_platform.config.checks.aws import termination_handler_warnings
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import config_warnings, parse_config
from gpu_platform.preflight.mocks.aws import ACCOUNT, DEPLOYER_ROLE
from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
from tests.conftest import plan_stack, stack_config

ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ENTRY = "aws:eks/accessEntry:AccessEntry"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
BUDGET = "aws:budgets/budget:Budget"


@pytest.fixture(scope="module")
def plan():
    return plan_stack("aws-prod")


def raw(**changes: Any) -> dict[str, Any]:
    out = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
    out.update(changes)
    return out


def with_aws(**changes: Any) -> dict[str, Any]:
    out = raw()
    out["aws"] = {**out["aws"], **changes}
    return out


def plan_with(**aws_changes: Any):
    config = stack_config("aws-prod")
    config["gpu-platform:aws"] = {**config["gpu-platform:aws"], **aws_changes}
    return run_program(stack_input_from_mapping("aws-prod", config))


# ---------------------------------------------------------------------------------------------
# kubernetesVersion on EKS (calendar rows; tests run on 2026-11-23, tests/conftest.py)
# ---------------------------------------------------------------------------------------------


def version_warnings(cfg) -> list[str]:
    """The stack's warnings less the one a minor NTH's maintainers have not tested gets (issue 33 item 11,
    test_aws_spot_handling.py); the scale-in controller is on with an image built at `pulumi up`, so no warning
    about it (issue 33 item 2); nor the placeholder alert address's (example.com is reserved,
    tests/test_config_hostile_values.py)."""
    warnings = config_warnings(cfg)
    return [w for w in warnings if w not in termination_handler_warnings(cfg) and not w.startswith("alertEmails[")]


def test_shipped_version_is_inside_standard_support_and_the_cluster_asks_for_standard(plan):
    cfg = parse_config(raw(), "aws-prod")
    assert cfg.kubernetes_version == "1.35" and version_warnings(cfg) == []
    c = plan.one("aws:eks/cluster:Cluster").inputs
    assert c["version"] == "1.35" and c["upgradePolicy"] == {"supportType": "STANDARD"}


def test_version_past_standard_support_is_refused_naming_key_end_date_and_choices():
    # the case: 1.33 left EKS standard support on 2026-07-29 and STANDARD is refused by AWS for it
    with pytest.raises(ConfigError) as err:
        parse_config(raw(kubernetesVersion="1.33"), "aws-prod")
    message = str(err.value)
    assert "stacks/Pulumi.aws-prod.yaml" in message and 'gpu-platform:kubernetesVersion: "1.33"' in message
    assert "2026-07-29" in message and "1.34, 1.35, 1.36" in message and "aws.supportType: EXTENDED" in message
    assert "$0.50 per cluster-hour" in message


def test_extended_support_chosen_explicitly_is_accepted_warned_and_sent_to_eks():
    cfg = parse_config({**with_aws(supportType="EXTENDED"), "kubernetesVersion": "1.33"}, "aws-prod")
    [warning] = version_warnings(cfg)
    assert "extended support" in warning and "2027-07-29" in warning and "$0.50" in warning
    config = stack_config("aws-prod")
    config["gpu-platform:kubernetesVersion"] = "1.33"
    config["gpu-platform:aws"] = {**config["gpu-platform:aws"], "supportType": "EXTENDED"}
    c = run_program(stack_input_from_mapping("aws-prod", config)).one("aws:eks/cluster:Cluster").inputs
    assert c["upgradePolicy"] == {"supportType": "EXTENDED"} and c["version"] == "1.33"


def test_version_within_60_days_warns_with_the_date():
    cfg = parse_config(raw(kubernetesVersion="1.34"), "aws-prod")
    [warning] = version_warnings(cfg)
    assert "2026-12-02" in warning and "in 9 day(s)" in warning and "1.35 or 1.36" in warning
    assert "aws.supportType: STANDARD" in warning


def test_version_past_extended_support_is_refused(monkeypatch):
    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-12-01")  # 1.31's extended support ended on 2026-11-26
    with pytest.raises(ConfigError) as err:
        parse_config({**with_aws(supportType="EXTENDED"), "kubernetesVersion": "1.31"}, "aws-prod")
    assert "2026-11-26" in str(err.value) and "new clusters are refused" in str(err.value)


def test_unset_version_is_the_newest_in_eks_standard_support_with_pinned_addons(monkeypatch):
    """An unset kubernetesVersion takes the newest minor in EKS standard support that has recorded add-on
    versions (gpu_platform/data/eks_addon_versions.py), not one the add-on check would refuse (issue 33
    item 6): 1.36 since it has a row; 1.35 when 1.36's row is missing."""
    from gpu_platform.data.eks_addon_versions import ROWS

    unset = {k: v for k, v in raw().items() if k != "kubernetesVersion"}
    cfg = parse_config(unset, "aws-prod")
    assert cfg.kubernetes_version == "1.36" and not cfg.kubernetes_version_pinned
    # a stack outside the repository without the key plans end to end on that version
    config = {k: v for k, v in stack_config("aws-prod").items() if k != "gpu-platform:kubernetesVersion"}
    plan = run_program(stack_input_from_mapping("eks-unpinned", config))
    assert plan.one("aws:eks/cluster:Cluster").inputs["version"] == "1.36"
    monkeypatch.delitem(ROWS, "1.36")
    assert parse_config(unset, "aws-prod").kubernetes_version == "1.35"


# ---------------------------------------------------------------------------------------------
# VPC CNI: own IRSA role, NetworkPolicy enforcement; node roles without the CNI policy; IMDS hop limit
# ---------------------------------------------------------------------------------------------


def test_node_roles_carry_no_cni_policy_and_the_cni_has_its_own_irsa_role(plan):
    assert "AmazonEKS_CNI_Policy" not in NODE_POLICIES
    node_attachments = [a.inputs["policyArn"] for a in plan.by_type(ATTACH) if "node-role" in a.name]
    assert node_attachments and not [p for p in node_attachments if p.endswith("AmazonEKS_CNI_Policy")]
    (cni_attach,) = [a for a in plan.by_type(ATTACH) if a.inputs["policyArn"].endswith("/AmazonEKS_CNI_Policy")]
    assert "vpc-cni" in cni_attach.name
    role = plan.one(ROLE, "vpc-cni-role")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (stmt,) = trust["Statement"]
    assert stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert "system:serviceaccount:kube-system:aws-node" in stmt["Condition"]["StringEquals"].values()
    addon = next(a.inputs for a in plan.by_type(ADDON) if a.inputs["addonName"] == "vpc-cni")
    assert addon["serviceAccountRoleArn"] == role.outputs["arn"]


def test_vpc_cni_enforces_network_policies(plan):
    addon = next(a.inputs for a in plan.by_type(ADDON) if a.inputs["addonName"] == "vpc-cni")
    assert json.loads(addon["configurationValues"]) == {"enableNetworkPolicy": "true"} == VPC_CNI_CONFIGURATION


def test_system_nodes_answer_imds_to_the_host_only(plan):
    assert IMDS_HOP_LIMIT == 1 and secure_launch_template_args(50, {})["metadata_options"]["http_put_response_hop_limit"] == 1
    lt = plan.one("aws:ec2/launchTemplate:LaunchTemplate", "system").inputs
    assert lt["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required", "httpPutResponseHopLimit": 1,
                                     "instanceMetadataTags": "disabled"}


def test_system_node_group_follows_the_control_plane_version(plan):
    """Without `version` the provider never upgrades the group: after a control-plane upgrade the
    system nodes would stay a minor behind (EKS NodeGroup docs: drift detection only when set)."""
    cluster = plan.one("aws:eks/cluster:Cluster")
    groups = plan.by_type("aws:eks/nodeGroup:NodeGroup")
    assert len(groups) == 3 and {g.inputs["version"] for g in groups} == {cluster.inputs["version"]} == {"1.35"}


# ---------------------------------------------------------------------------------------------
# Admin access entries: one per listed principal, whoever deploys (issue 33 item 3)
# ---------------------------------------------------------------------------------------------

OPS = f"arn:aws:iam::{ACCOUNT}:role/ops"
DEPLOY = f"arn:aws:iam::{ACCOUNT}:role/{DEPLOYER_ROLE}"


@pytest.mark.parametrize("admin, creator, same", [
    (f"arn:aws:iam::{ACCOUNT}:role/ops", f"arn:aws:sts::{ACCOUNT}:assumed-role/ops/session-1", True),
    (f"arn:aws:iam::{ACCOUNT}:role/teams/ops", f"arn:aws:sts::{ACCOUNT}:assumed-role/ops/ci", True),  # STS drops the path
    (f"arn:aws:iam::{ACCOUNT}:user/alice", f"arn:aws:iam::{ACCOUNT}:user/alice", True),
    (f"arn:aws:iam::{ACCOUNT}:role/ops", f"arn:aws:iam::{ACCOUNT}:user/ops", False),  # a user is not a role
    (f"arn:aws:iam::{ACCOUNT}:role/ops", "arn:aws:sts::210987654321:assumed-role/ops/s", False),  # other account
    (f"arn:aws:iam::{ACCOUNT}:role/ops", f"arn:aws:sts::{ACCOUNT}:assumed-role/ops-admin/s", False),
])
def test_creator_matching(admin, creator, same):
    kept, skipped = admin_principals([admin], creator)
    assert (skipped == [admin]) is same and (kept == [admin]) is not same
    assert principal_key(creator) is not None
    assert admin_principals([admin]) == ([admin], [])  # no creator named: every listed principal


def _admins(plan) -> list[str]:
    return sorted(e.inputs["principalArn"] for e in plan.by_type(ENTRY) if e.inputs.get("type") == "STANDARD")


def test_access_entries_do_not_depend_on_who_runs_pulumi_up(monkeypatch):
    """Before: the entries were adminPrincipalArns minus the current caller. The first deployer's run
    made one for the second; the second's run deleted its own and tried to create the first's, which
    EKS already had (its creator entry): ResourceInUseException. Now both get one, whoever deploys."""
    from gpu_platform.preflight.mocks import aws as aws_mocks

    first = plan_with(adminPrincipalArns=[DEPLOY, OPS])
    monkeypatch.setattr(aws_mocks, "DEPLOYER_ARN", f"arn:aws:sts::{ACCOUNT}:assumed-role/ops/second-deployer")
    second = plan_with(adminPrincipalArns=[DEPLOY, OPS])
    assert _admins(first) == _admins(second) == sorted([DEPLOY, OPS])
    assocs = first.by_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert sorted(a.inputs["principalArn"] for a in assocs) == sorted([DEPLOY, OPS])
    assert all(a.inputs["policyArn"].endswith("/AmazonEKSClusterAdminPolicy") for a in assocs)


def test_the_cluster_gives_its_creator_nothing_implicit_and_is_never_replaced_for_it(plan):
    """EKS's implicit creator entry is what made the entries depend on the caller. The field forces a new
    cluster in the provider (terraform-provider-aws: ForceNew), so a cluster created with true keeps it."""
    cluster = plan.one("aws:eks/cluster:Cluster")
    assert cluster.inputs["accessConfig"] == {"authenticationMode": "API", "bootstrapClusterCreatorAdminPermissions": False}
    assert "accessConfig.bootstrapClusterCreatorAdminPermissions" in cluster.options.get("ignoreChanges", [])


def test_the_kubernetes_provider_waits_for_the_admins_access(plan):
    """The deployer reaches the API only through its own access entry now: the provider (and every
    Kubernetes object) comes after the policy associations."""
    (provider,) = [r for r in plan.resources if r.type == "pulumi:providers:kubernetes" and r.name.endswith("-eks-k8s")]
    assocs = {a.urn for a in plan.by_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")}
    assert assocs and assocs <= set(provider.dependencies)


def test_a_cluster_created_by_an_earlier_release_skips_its_creators_entry():
    """aws.clusterCreatorArn: EKS made that principal's admin entry when it created the cluster (bootstrap
    true); a second one would fail with ResourceInUseException."""
    plan = plan_with(adminPrincipalArns=[DEPLOY, OPS], clusterCreatorArn=DEPLOY)
    assert _admins(plan) == [OPS]


def test_no_admin_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError) as err:
        parse_config(with_aws(adminPrincipalArns=[]), "aws-prod")
    assert "aws.adminPrincipalArns" in str(err.value) and "pulumi up" in str(err.value)
    parse_config(with_aws(adminPrincipalArns=[], clusterCreatorArn=OPS), "aws-prod")  # an earlier release's cluster
    with pytest.raises(ConfigError, match="aws.clusterCreatorArn"):
        parse_config(with_aws(clusterCreatorArn="ops"), "aws-prod")


# ---------------------------------------------------------------------------------------------
# Billing: the stack's own budget always; account-wide alarms on one stack per account
# ---------------------------------------------------------------------------------------------


def test_stack_budget_counts_only_the_stacks_tagged_costs(plan):
    budget = plan.one(BUDGET).inputs
    assert budget["costFilters"] == [{"name": "TagKeyValue", "values": ["user:cluster$gpu-prod"]}]
    assert stack_cost_filter("gpu-prod") == [{"name": "TagKeyValue", "values": ["user:cluster$gpu-prod"]}]
    # every resource of the stack carries that tag (the EKS cluster as an example)
    assert plan.one("aws:eks/cluster:Cluster").inputs["tags"]["cluster"] == "gpu-prod"


def test_account_billing_alarms_only_where_accountbilling_is_true(plan):
    billing = [a for a in plan.by_type(ALARM) if a.inputs.get("namespace") == "AWS/Billing"]
    assert len(billing) == 4  # aws-prod: accountBilling: true
    second = plan_with(accountBilling=False)
    assert not [a for a in second.by_type(ALARM) if a.inputs.get("namespace") == "AWS/Billing"]
    (budget,) = second.by_type(BUDGET)  # the stack keeps its own budget (and the policy pack its guardrail)
    assert budget.inputs["notifications"] and budget.inputs["costFilters"][0]["name"] == "TagKeyValue"


def test_a_stack_that_does_not_say_it_owns_the_account_creates_no_account_alarms():
    """Before: accountBilling defaulted to true, so every AWS stack repeated the account-wide alarms (issue 22)."""
    config = stack_config("aws-prod")
    config["gpu-platform:aws"] = {k: v for k, v in config["gpu-platform:aws"].items() if k != "accountBilling"}
    plan = run_program(stack_input_from_mapping("aws-prod", config))
    assert not [a for a in plan.by_type(ALARM) if a.inputs.get("namespace") == "AWS/Billing"]
    assert len(plan.by_type(BUDGET)) == 1


def test_account_billing_must_be_a_boolean():
    with pytest.raises(ConfigError) as err:
        parse_config(with_aws(accountBilling="sometimes"), "aws-prod")
    assert "gpu-platform:aws.accountBilling" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config(with_aws(supportType="LONG"), "aws-prod")
    assert "gpu-platform:aws.supportType" in str(err.value) and "EXTENDED" in str(err.value)


# ---------------------------------------------------------------------------------------------
# A new VPC without availabilityZones (issue 16: the program asks the region)
# ---------------------------------------------------------------------------------------------


def test_new_vpc_without_zones_spans_the_regions_first_three():
    config = stack_config("aws-prod")
    aws_section = dict(config["gpu-platform:aws"])
    aws_section.pop("availabilityZones")
    config["gpu-platform:aws"] = aws_section
    parse_config({k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpu-platform:")}, "aws-prod")
    plan = run_program(stack_input_from_mapping("aws-prod", config))
    subnets = [r.inputs for r in plan.by_type("aws:ec2/subnet:Subnet") if "private" in r.name]
    assert sorted(s["availabilityZone"] for s in subnets) == ["us-east-1a", "us-east-1b", "us-east-1c"]


def test_one_zone_is_still_refused_with_the_key():
    with pytest.raises(ConfigError, match=r"aws\.availabilityZones.*at least two zones"):
        parse_config(with_aws(availabilityZones=["us-east-1a"]), "aws-prod")


def test_managed_addons_carry_the_versions_pinned_for_the_kubernetes_minor():
    """Before: each add-on asked EKS for its default version at every deploy (issue 22's fix), so a deploy
    moved an add-on whenever AWS changed its default and vpc-cni could jump minors (issue 33 item 6). Now
    each carries the version pinned for the stack's minor, and moves only with kubernetesVersion."""
    from gpu_platform.data.eks_addon_versions import ROWS

    addons = {a.inputs["addonName"]: a.inputs.get("addonVersion") for a in plan_stack("aws-prod").by_type(ADDON)}
    assert addons == ROWS["1.35"].versions
    assert addons["vpc-cni"] == "v1.21.1-eksbuild.1" and addons["kube-proxy"].startswith("v1.35.")
    config = stack_config("aws-prod")
    config["gpu-platform:kubernetesVersion"] = "1.34"
    moved = {a.inputs["addonName"]: a.inputs.get("addonVersion")
             for a in run_program(stack_input_from_mapping("aws-prod", config)).by_type(ADDON)}
    assert moved == ROWS["1.34"].versions and moved["kube-proxy"].startswith("v1.34.")


def test_the_versions_guide_says_what_the_code_does():
    """Before: docs/kubernetes-versions.md said the system node group is not pinned (the code pins it to
    the cluster's version) and said nothing of the add-ons (issue 22)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "kubernetes-versions.md").read_text()
    aws = text.split("## AWS (EKS)")[1].split("## Linode")[0]
    assert "does not pin" not in aws
    # The command appears only where the guide says how to patch the AMI between minors, not for the version.
    version_part = aws.split("**Patching the system nodes between minors.**")[0]
    assert "update-nodegroup-version" not in version_part
    assert "system managed node groups (one per zone) follow it" in aws and "managed add-ons" in aws
    eks_source = (Path(__file__).resolve().parents[1] / "gpu_platform" / "components" / "aws" / "eks.py").read_text()
    assert "version=cluster.version" in eks_source and "get_addon_version_output" not in eks_source
    assert "eks_addon_versions.addon_versions(args.kubernetes_version)" in eks_source
