"""Issue 33 item 10: what the stacks pay that the bill left out, and EBS volumes outside the budget.

- The EBS CSI driver tagged the volumes it creates (PVCs: databases, Prometheus, notebook homes) with its
  own keys only, so the stack's AWS Budget, which filters on the `cluster` tag, never counted them.
- AWS charges every public IPv4 address $0.005/h since 2024-02-01, a NAT gateway's Elastic IP included;
  Cloud NAT's external IPs cost the same.
- Each customer-managed KMS key (EKS secrets, the alert topic, the account-billing topic) is $1/month, $1
  more for each of its first two yearly rotations.
- GCS keeps deleted objects (the old checkpoint versions the lifecycle rule deletes) soft-deleted, billed, for
  7 days by default.
- A per-zone NAT (aws.natGateways: per-az) was billed as one gateway; an existing VPC's NAT, which is not the
  stack's, as one too."""

from __future__ import annotations

import json

import pytest

from gpu_platform.components.aws.billing import stack_cost_filter
from gpu_platform.components.aws.eks import ebs_csi_configuration
from gpu_platform.costs.catalog import load_catalog
from gpu_platform.costs.estimator import GCS_DEFAULT_SOFT_DELETE_DAYS, HOURS_PER_MONTH, estimate
from gpu_platform.preflight.costs import stack_shape
from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
from tests.conftest import plan_stack, stack_config
from tests.test_costs_preflight import _cfg


def _lines(est):
    return {line.name: line for line in est.lines}


def _plan_aws(**aws):
    config = stack_config("aws-prod")
    config["gpu-platform:aws"] = {**config["gpu-platform:aws"], **aws}
    return run_program(stack_input_from_mapping("aws-prod", config))


def test_ebs_volumes_the_csi_driver_creates_carry_the_tag_the_budget_filters_on():
    plan = plan_stack("aws-prod")
    addon = plan.one("aws:eks/addon:Addon", "aws-ebs-csi-driver").inputs
    tags = json.loads(addon["configurationValues"])["controller"]["extraVolumeTags"]
    (flt,) = stack_cost_filter("gpu-prod")
    assert flt["values"] == [f"user:cluster${tags['cluster']}"]
    assert tags == plan.one("aws:eks/cluster:Cluster").inputs["tags"]  # the stack's own tags, all of them
    assert ebs_csi_configuration({"cluster": "c"}) == {"controller": {"extraVolumeTags": {"cluster": "c"}}}


def test_aws_bill_has_the_nat_address_and_the_kms_keys():
    plan = plan_stack("aws-prod")
    lines = _lines(estimate(stack_shape(_cfg("aws-prod"), plan)))
    cat = load_catalog()
    ip = lines["public IPv4 addresses x1"]
    assert ip.monthly_usd == pytest.approx(0.005 * HOURS_PER_MONTH) and "vpc/pricing" in ip.source
    keys = len(plan.by_type("aws:kms/key:Key"))
    assert keys >= 2
    kms = lines[f"KMS keys x{keys}"]
    assert kms.monthly_usd == pytest.approx(3.0 * keys, rel=1e-6) and "kms/pricing" in kms.source
    assert cat.fixed_costs("aws")["public-ipv4"].date and cat.fixed_costs("aws")["kms-key"].date


def test_per_zone_nat_gateways_are_billed_each_with_its_address():
    lines = _lines(estimate(stack_shape(_cfg("aws-prod"), _plan_aws(natGateways="per-az"))))
    assert "NAT gateway x3" in lines and "public IPv4 addresses x3" in lines


def test_an_existing_vpcs_nat_is_not_the_stacks():
    plan = _plan_aws(vpcId="vpc-0123456789abcdef0", privateSubnetIds=["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
                     vpcCidr=None, availabilityZones=[], s3GatewayEndpoint="existing")
    names = " ".join(_lines(estimate(stack_shape(_cfg("aws-prod"), plan))))
    assert "NAT gateway" not in names and "public IPv4" not in names


def test_gcp_bill_has_the_nat_address_and_the_soft_deleted_checkpoints():
    cfg = _cfg("gcp-prod")
    shape = stack_shape(cfg, plan_stack("gcp-prod"))
    lines = _lines(estimate(shape))
    assert lines["Cloud NAT external IPv4 x1"].monthly_usd == pytest.approx(0.005 * HOURS_PER_MONTH)
    soft = lines["checkpoint bucket, soft-deleted versions (gcs-standard)"]
    assert soft.quantity == pytest.approx(shape.checkpoint_gib_per_day * GCS_DEFAULT_SOFT_DELETE_DAYS)
    assert "soft-delete" in soft.assumption and soft.monthly_usd > 0


def test_a_library_users_own_resources_are_listed_as_not_modelled(tmp_path):
    """Adopter review (issue 37 brief), item 5: a program that plans resources of its own (examples/team-gke's
    datasets bucket, a planted static address) got them neither priced nor listed: the bill looked complete."""
    import shutil

    from tests.cli_support import preflight_in_process
    from tests.conftest import ROOT
    from tests.fit_support import CHART_DIRS, need_charts

    need_charts()
    project = tmp_path / "team-gke"
    shutil.copytree(ROOT / "examples" / "team-gke", project)
    program = project / "__main__.py"
    text = program.read_text()
    program.write_text(text.replace('pulumi.export("kubeconfig"', 'gcp.compute.Address("egress-ip", region=cfg.gcp.region)\n\n'
                                    'pulumi.export("kubeconfig"', 1))
    run = preflight_in_process("-C", str(project), "dev", "--out", str(tmp_path / "out"),
                               *(a for d in CHART_DIRS for a in ("--charts", str(d))), env={"NO_COLOR": "1"})
    assert run.returncode in (0, 1), run.stdout + run.stderr
    not_modelled = json.loads((tmp_path / "out" / "dev" / "cost.json").read_text())["notModelled"]
    assert "1 planned gcp:storage/bucket:Bucket resource(s) the cost model does not price: datasets" in not_modelled
    assert "1 planned gcp:compute/address:Address resource(s) the cost model does not price: egress-ip" in not_modelled
    # The package's own bucket, cluster and pools are priced (or noted) already: never listed twice.
    assert not any("gpu-prod" in item or "container/" in item for item in not_modelled), not_modelled


@pytest.mark.parametrize("stack", ["aws-prod", "gcp-prod", "linode-dev", "linode-ha", "onprem-dev"])
def test_every_resource_the_shipped_stacks_plan_is_priced_free_or_listed(stack):
    """Each type the program registers is accounted for (gpu_platform/preflight/costs.py); what is not, a new
    component's resource included, shows up under "not modelled". AWS's CloudWatch alarms ($0.10 an alarm-month
    on AWS's price list) are not priced, so they are listed."""
    from gpu_platform.preflight.costs import unpriced_resources
    from tests.conftest import shipped_plan

    listed = unpriced_resources(shipped_plan(stack, "2026-11-23"))
    if stack == "aws-prod":
        assert len(listed) == 1 and listed[0].startswith("9 planned aws:cloudwatch/metricAlarm:MetricAlarm"), listed
    else:
        assert listed == []
