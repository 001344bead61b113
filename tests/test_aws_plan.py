"""The aws-prod stack run offline under preflight's mocks: what the plan would create."""

from __future__ import annotations

import base64
import copy
import email
import json

import pulumi
import pytest
import yaml

from gpu_platform.data import aws_versions as versions
from gpu_platform.preflight.runner import REDACTED, SECRET_SIG, SIG_KEY, run_program, stack_input_from_mapping
from tests.conftest import plan_config, plan_stack, stack_config

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
OWNER_TAGS = {"owner": "ml-platform", "cost-center": "research", "environment": "prod"}
# Billable (or billing-relevant) resource types that take tags.
TAGGED = ["aws:eks/cluster:Cluster", "aws:eks/nodeGroup:NodeGroup", LT, "aws:ec2/natGateway:NatGateway", "aws:ec2/eip:Eip",
          "aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:s3/bucket:Bucket", "aws:sqs/queue:Queue", "aws:kms/key:Key",
          "aws:cloudwatch/logGroup:LogGroup", "aws:sns/topic:Topic", ALARM, "aws:budgets/budget:Budget", "aws:eks/addon:Addon"]


@pytest.fixture(scope="module")
def plan():
    return plan_stack("aws-prod")


def region_of(plan, res) -> str:
    provider = next(r for r in plan.resources if res.provider and res.provider.startswith(r.urn + "::"))
    return provider.inputs["region"]


def test_gpu_launch_template_is_hardened_and_uses_the_ssm_ami(plan):
    lt = plan.one(LT, "gpu-a10g-us-east-1a").inputs
    assert lt["imageId"] == "resolve:ssm:/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
    # hop limit 1 on GPU nodes: pods cannot reach the node's instance credentials (issue 12)
    assert lt["metadataOptions"]["httpTokens"] == "required" and lt["metadataOptions"]["httpPutResponseHopLimit"] == 1
    (root,) = lt["blockDeviceMappings"]
    assert root["ebs"] == {"volumeType": "gp3", "volumeSize": 200, "encrypted": "true", "deleteOnTermination": "true"}
    assert plan.one(LT, "gpu-l4x4-us-east-1a").inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 300
    for any_lt in plan.by_type(LT):  # the system nodes' template too
        assert any_lt.inputs["metadataOptions"]["httpTokens"] == "required"
        assert all(b["ebs"]["encrypted"] == "true" for b in any_lt.inputs["blockDeviceMappings"])


def test_gpu_user_data_joins_the_cluster_with_pool_labels(plan):
    lt = plan.one(LT, "gpu-a10g-us-east-1a").inputs
    msg = email.message_from_string(base64.b64decode(lt["userData"]).decode())
    nodeconfig = yaml.safe_load(next(p.get_payload() for p in msg.get_payload() if p.get_content_type() == "application/node.eks.aws"))
    cluster = nodeconfig["spec"]["cluster"]
    assert cluster["name"] == "gpu-prod" and cluster["apiServerEndpoint"].startswith("https://")
    assert cluster["cidr"] == "172.20.0.0/16" and base64.b64decode(cluster["certificateAuthority"]).startswith(b"-----BEGIN")
    assert "gpu-platform.io/pool=a10g" in nodeconfig["spec"]["kubelet"]["flags"][0]


def test_gpu_asg_spot_mixed_instances_and_scale_from_zero(plan):
    asg = plan.one(ASG, "gpu-a10g-us-east-1a").inputs
    # a10g (0..8) over three zones: 3 + 3 + 2 (config/names.zonal_groups)
    assert asg["name"] == "gpu-prod-gpu-a10g-us-east-1a" and asg["minSize"] == 0 and asg["maxSize"] == 3
    dist = asg["mixedInstancesPolicy"]["instancesDistribution"]
    assert dist["spotAllocationStrategy"] == "price-capacity-optimized"
    assert dist["onDemandBaseCapacity"] == 0 and dist["onDemandPercentageAboveBaseCapacity"] == 0
    types = [o["instanceType"] for o in asg["mixedInstancesPolicy"]["launchTemplate"]["overrides"]]
    assert types == ["g5.xlarge"]  # aws-prod: no alternative of the same GPU model and shape (cc2424b)
    # aws-prod runs the protection controller (its image built at `pulumi up`), which releases idle nodes
    assert asg["capacityRebalance"] is False and asg["protectFromScaleIn"] is True
    # AZRebalance would terminate a busy training node to even out zones (autoscaler AWS README)
    assert asg["suspendedProcesses"] == ["AZRebalance"]
    (hook,) = asg["initialLifecycleHooks"]
    assert hook["lifecycleTransition"] == "autoscaling:EC2_INSTANCE_TERMINATING" and hook["defaultResult"] == "CONTINUE"
    assert hook["heartbeatTimeout"] == 300  # renewed by NTH's heartbeats while it drains
    tags = {t["key"]: t["value"] for t in asg["tags"]}
    p = "k8s.io/cluster-autoscaler/node-template"
    assert tags[f"{p}/label/gpu-platform.io/pool"] == "a10g"
    assert tags[f"{p}/taint/nvidia.com/gpu"] == "present:NoSchedule"
    assert tags[f"{p}/resources/nvidia.com/gpu"] == "1"
    assert tags[f"{p}/label/k8s.amazonaws.com/accelerator"] == "nvidia-a10g"
    # with the controller the autoscaler's own count is the last 2 of the 15 minutes (scale_down.py)
    assert tags[f"{p}/autoscaling-options/scaledownunneededtime"] == "2m0s"
    assert plan.one(ASG, "gpu-l4x4-us-east-1a").inputs["tags"][-2:] == [
        {"key": f"{p}/resources/nvidia.com/gpu", "value": "4", "propagateAtLaunch": False},
        # the template node's ephemeral storage (300 GiB root volume): a Katib trial scales the group from zero
        {"key": f"{p}/resources/ephemeral-storage", "value": "268Gi", "propagateAtLaunch": False}]
    assert tags["k8s.io/cluster-autoscaler/enabled"] == "true" and tags["k8s.io/cluster-autoscaler/gpu-prod"] == "owned"
    assert tags["gpu-pool"] == "a10g" and tags["capacity"] == "spot" and tags["on-demand-approved"] == "false"
    assert {k: tags[k] for k in OWNER_TAGS} == OWNER_TAGS


def test_four_billing_alarms_in_us_east_1_and_the_budget(plan):
    billing = [a for a in plan.by_type(ALARM) if a.inputs.get("namespace") == "AWS/Billing"]
    assert sorted(a.inputs["threshold"] for a in billing) == [1250, 2500, 3750, 5000]
    for a in billing:
        assert a.inputs["metricName"] == "EstimatedCharges" and a.inputs["dimensions"] == {"Currency": "USD"}
        assert a.inputs["region"] == "us-east-1" and region_of(plan, a) == "us-east-1"
        assert a.inputs["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert a.inputs["alarmActions"] == ["arn:aws:sns:us-east-1:123456789012:gpu-prod-billing-alerts"]
    budget = plan.one("aws:budgets/budget:Budget").inputs
    assert budget["limitAmount"] == "5000.00" and budget["timeUnit"] == "MONTHLY" and budget["limitUnit"] == "USD"
    kinds = sorted((n["notificationType"], n["threshold"]) for n in budget["notifications"])
    assert kinds == [("ACTUAL", 25), ("ACTUAL", 50), ("ACTUAL", 75), ("ACTUAL", 100), ("FORECASTED", 100)]
    topic = plan.one("aws:sns/topic:Topic", "billing").inputs
    assert topic["kmsMasterKeyId"].startswith("arn:aws:kms:us-east-1:")
    subs = [s.inputs for s in plan.by_type("aws:sns/topicSubscription:TopicSubscription")]
    assert {(s["protocol"], s["endpoint"]) for s in subs} == {("email", "ml-platform-alerts@example.com")}


def test_idle_gpu_alarm_per_group(plan):
    idle = [a.inputs for a in plan.by_type(ALARM) if a.inputs.get("namespace") == "CWAgent"]
    assert {a["dimensions"]["AutoScalingGroupName"] for a in idle} == {
        "gpu-prod-gpu-a10g-us-east-1a", "gpu-prod-gpu-a10g-us-east-1b", "gpu-prod-gpu-a10g-us-east-1c",
        "gpu-prod-gpu-l4x4-us-east-1a", "gpu-prod-gpu-l4x4-us-east-1b"}
    for a in idle:
        assert a["metricName"] == "nvidia_smi_utilization_gpu" and a["threshold"] == 10
        assert a["period"] * a["evaluationPeriods"] == 120 * 60 and a["comparisonOperator"] == "LessThanThreshold"


def test_spot_interruption_queue_four_rules_and_heartbeats(plan):
    queue = plan.one("aws:sqs/queue:Queue")
    assert queue.inputs["sqsManagedSseEnabled"] is True
    rules = plan.by_type("aws:cloudwatch/eventRule:EventRule")
    assert len(rules) == 4  # no capacity rebalancing: the interruption warning, never the recommendation (issue 22)
    targets = plan.by_type("aws:cloudwatch/eventTarget:EventTarget")
    assert len(targets) == 4 and {t.inputs["arn"] for t in targets} == {queue.outputs["arn"]}
    patterns = [json.loads(r.inputs["eventPattern"])["detail-type"][0] for r in rules]
    assert "EC2 Spot Instance Interruption Warning" in patterns and "EC2 Instance Rebalance Recommendation" not in patterns
    nth = plan.one("kubernetes:helm.sh/v3:Release", "nth")
    assert (nth.inputs["chart"], nth.inputs["version"]) == (versions.NTH_CHART, versions.NTH_CHART_VERSION)
    assert nth.inputs["values"]["queueURL"] == queue.outputs["url"]
    v = nth.inputs["values"]
    assert (v["heartbeatInterval"], v["heartbeatUntil"], v["nodeTerminationGracePeriod"]) == (60, 720, 660)
    policy = json.loads(plan.one("aws:iam/rolePolicy:RolePolicy", "nth").inputs["policy"])
    complete = next(s for s in policy["Statement"] if "autoscaling:CompleteLifecycleAction" in s["Action"])
    assert len(complete["Resource"]) == 5 and all("autoScalingGroupName/gpu-prod-gpu-" in r for r in complete["Resource"])


def test_eks_control_plane(plan):
    c = plan.one("aws:eks/cluster:Cluster").inputs
    assert c["accessConfig"]["authenticationMode"] == "API"
    assert c["vpcConfig"]["endpointPublicAccess"] is True and c["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert c["encryptionConfig"]["resources"] == ["secrets"] and c["encryptionConfig"]["provider"]["keyArn"].startswith("arn:aws:kms:")
    assert set(c["enabledClusterLogTypes"]) == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    assert len(c["vpcConfig"]["subnetIds"]) == 3
    addons = {a.inputs["addonName"] for a in plan.by_type("aws:eks/addon:Addon")}
    assert addons == set(versions.EKS_ADDONS)
    groups = {r.name: r.inputs for r in plan.by_type("aws:eks/nodeGroup:NodeGroup")}
    assert all(ng["capacityType"] == "ON_DEMAND" and ng["instanceTypes"] == ["m6i.large"] for ng in groups.values())
    # aws.systemPool {minNodes: 2, maxNodes: 6} split over the three zones, one managed node group each (two
    # nodes a zone at most: room for CPU notebooks in the zones they may run in, issue 33 item 4)
    assert {n.rsplit("-", 1)[1]: (g["scalingConfig"]["minSize"], g["scalingConfig"]["maxSize"])
            for n, g in groups.items()} == {"1a": (1, 2), "1b": (1, 2), "1c": (0, 2)}
    entry = plan.one("aws:eks/accessEntry:AccessEntry", "gpu-node").inputs
    assert entry["type"] == "EC2_LINUX"


def test_each_system_node_group_is_one_zone_so_the_platforms_zonal_volumes_keep_a_node(plan):
    # The hub database, Katib/Pipelines MySQL, Prometheus and CPU notebooks' homes are zonal EBS volumes on
    # the system nodes; a group spanning zones lets a replaced node land where none of them can follow.
    zone_of_subnet = {f"{r.name}-id": r.inputs["availabilityZone"] for r in plan.by_type("aws:ec2/subnet:Subnet")}
    zones = []
    for group in plan.by_type("aws:eks/nodeGroup:NodeGroup"):
        (subnet,) = group.inputs["subnetIds"]  # the mock's id of a subnet is its resource name + "-id"
        assert zone_of_subnet[subnet] == group.inputs["tags"]["node-group-zone"], group.name
        zones.append(zone_of_subnet[subnet])
    assert sorted(zones) == ["us-east-1a", "us-east-1b", "us-east-1c"]


def test_storage_class_checkpoint_bucket_and_trainer_role(plan):
    sc = plan.one("kubernetes:storage.k8s.io/v1:StorageClass").inputs
    assert sc["metadata"]["name"] == "gp3" and sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["parameters"]["encrypted"] == "true" and sc["provisioner"] == "ebs.csi.aws.com"
    assert plan.one("aws:s3/bucketVersioning:BucketVersioning").inputs["versioningConfiguration"]["status"] == "Enabled"
    block = plan.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
    assert all(block[k] for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"))
    sse = plan.one("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration").inputs
    assert sse["rules"][0]["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
    rules = plan.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs["rules"]
    assert rules[0]["noncurrentVersionExpiration"]["noncurrentDays"] == 30
    trust = json.loads(plan.one("aws:iam/role:Role", "trainer").inputs["assumeRolePolicy"])
    cond = trust["Statement"][0]["Condition"]["StringEquals"]
    assert "system:serviceaccount:training:trainer" in cond.values()


def test_the_controller_runs_as_shipped_and_the_autoscaler_default(plan):
    # Issue 33 item 2: aws-prod ships the scale-in protection it documents; its image is built at `pulumi up`
    # (tests/test_built_images.py). It was off until someone published a digest.
    assert [d for d in plan.by_type("kubernetes:apps/v1:Deployment") if "scale-in-protection" in d.urn]
    ca = plan.one("kubernetes:helm.sh/v3:Release", "autoscaler").inputs
    assert ca["version"] == versions.CLUSTER_AUTOSCALER_CHART_VERSION
    assert ca["values"]["extraArgs"]["scale-down-unneeded-time"] == "10m"  # untagged groups (system nodes)


def test_billable_resources_carry_owner_tags(plan):
    seen = 0
    for token in TAGGED:
        for r in plan.by_type(token):
            seen += 1
            tags = r.inputs.get("tags") or {}
            assert {k: tags.get(k) for k in OWNER_TAGS} == OWNER_TAGS, f"{r.name} ({token}) lacks owner tags: {tags}"
    assert seen > 30


def test_children_are_named_after_their_component(plan):
    components = {r.urn: r for r in plan.resources if r.type.startswith("gpu-platform:aws:")}
    checked = 0
    for r in plan.resources:
        parent = components.get(r.parent or "")
        if parent is not None:
            assert r.name.startswith(parent.name + "-"), f"{r.name} under {parent.name}"
            checked += 1
    assert checked > 100


def test_kubeconfig_stays_secret(plan):
    provider = plan.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == REDACTED
    assert "get-token" in provider.plain_inputs["kubeconfig"]
    assert provider.inputs["enableServerSideApply"] in (True, "true")


def test_existing_vpc_and_private_endpoint():
    config = stack_config("aws-prod")
    aws = config["gpu-platform:aws"]
    for k in ("vpcCidr", "availabilityZones", "natGateways"):
        aws.pop(k)
    aws.update(vpcId="vpc-0a1b2c3d4e5f60718", privateSubnetIds=["subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"],
               endpointPrivateOnly=True, s3GatewayEndpoint="existing")
    plan = plan_config(config, stack="aws-prod")
    assert plan.by_type("aws:ec2/vpc:Vpc") == [] and plan.by_type("aws:ec2/natGateway:NatGateway") == []
    vpc = plan.one("aws:eks/cluster:Cluster").inputs["vpcConfig"]
    assert vpc["subnetIds"] == ["subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"]
    assert vpc["endpointPublicAccess"] is False and "publicAccessCidrs" not in vpc
    # one group per pool and subnet (an EC2 subnet is one zone), named by the subnet's position
    assert plan.one(ASG, "a10g-subnet1").inputs["vpcZoneIdentifiers"] == [vpc["subnetIds"][0]]
    assert plan.one(ASG, "a10g-subnet2").inputs["vpcZoneIdentifiers"] == [vpc["subnetIds"][1]]


def test_cluster_handle_contract():
    from gpu_platform.components.aws import create_cluster
    from gpu_platform.config.stack import parse_config
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
    cfg = parse_config(copy.deepcopy(raw), "aws-prod")
    seen: dict = {}

    def program():
        handle = create_cluster(cfg)
        seen["handle"] = handle
        handle.checkpoint.url.apply(lambda u: seen.setdefault("url", u))
        handle.checkpoint.service_account_annotations["eks.amazonaws.com/role-arn"].apply(lambda a: seen.setdefault("role", a))
        pulumi.Output.all(handle.kubeconfig).apply(lambda k: seen.setdefault("kubeconfig", k[0]))
        pulumi.export("kubeconfig", handle.kubeconfig)

    result = run_program(stack_input_from_mapping("aws-prod", stack_config("aws-prod")), program=program, preview=False)
    h = seen["handle"]
    assert h.cloud == "aws" and h.default_storage_class == "gp3" and h.gpu_device_plugin_installed is False
    assert [p.name for p in h.gpu_pools] == ["a10g", "l4x4"] and [p.gpus_per_node for p in h.gpu_pools] == [1, 4]
    assert h.gpu_pools[0].node_labels["gpu-platform.io/capacity"] == "spot"
    assert dict(h.checkpoint.env) == {"AWS_REGION": "us-east-1"}
    assert seen["url"].startswith("s3://gpu-prod-checkpoints-")
    assert seen["role"].startswith("arn:aws:iam::123456789012:role/")
    assert "aws" in yaml.safe_load(seen["kubeconfig"])["users"][0]["user"]["exec"]["command"]
    assert len(h.ready) >= 4
    assert result.outputs["kubeconfig"].get(SIG_KEY) == SECRET_SIG  # exported as a secret


def test_checkpoints_and_image_layers_reach_s3_without_the_nat_gateway(plan):
    """Before: no S3 gateway endpoint, so checkpoint traffic and ECR layer pulls went through the NAT
    gateway at $0.045/GB (issue 22)."""
    endpoint = plan.one("aws:ec2/vpcEndpoint:VpcEndpoint").inputs
    assert endpoint["serviceName"] == "com.amazonaws.us-east-1.s3" and endpoint["vpcEndpointType"] == "Gateway"
    private_rts = [r for r in plan.by_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    # the mocks give each resource the id "<name>-id"; the public route table (IGW) needs no endpoint
    assert len(private_rts) == 3 and sorted(endpoint["routeTableIds"]) == sorted(f"{r.name}-id" for r in private_rts)


def test_one_gpu_group_per_pool_and_zone_whose_sizes_add_up_to_the_pool(plan):
    """Before: each GPU group spanned three zones, and cluster-autoscaler plans a multi-zone group's
    new node as if it were in one zone: a notebook whose EBS home is in zone b could wait forever or
    get a node in zone a. Now one group per zone (its AWS README: ASG-per-AZ with
    --balance-similar-node-groups, which the autoscaler runs with); totals stay the pool's (issue 22)."""
    groups = [g.inputs for g in plan.by_type(ASG)]
    by_pool: dict[str, list[dict]] = {}
    for g in groups:
        by_pool.setdefault({t["key"]: t["value"] for t in g["tags"]}["gpu-pool"], []).append(g)
    assert {p: (sum(g["minSize"] for g in gs), sum(g["maxSize"] for g in gs)) for p, gs in by_pool.items()} == {
        "a10g": (0, 8), "l4x4": (0, 2)}
    subnets = {g["name"]: g["vpcZoneIdentifiers"] for g in groups}
    assert all(len(s) == 1 for s in subnets.values())  # one zone each
    assert subnets["gpu-prod-gpu-a10g-us-east-1b"] == ["gpu-prod-network-private-us-east-1b-id"]
    # same labels and instance types in every zone: the autoscaler balances them as similar groups
    autoscaler = plan.one("kubernetes:helm.sh/v3:Release", "autoscaler").inputs["values"]
    assert autoscaler["extraArgs"]["balance-similar-node-groups"] is True
