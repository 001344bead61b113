"""Mock outputs of pulumi-aws resources and invokes for the offline plan.

Values look like what AWS returns (ARNs, IDs, URLs, a real-looking CA) so the program's rendering
(kubeconfig, nodeadm user data, IAM documents) runs end to end. Account 123456789012 is the AWS
documentation account; nothing here is read from a real account.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"
CLUSTER_SERVICE_CIDR = "172.20.0.0/16"


def _region(inputs: dict[str, Any]) -> str:
    return inputs.get("region") or DEFAULT_REGION


def _suffix(name: str, n: int = 8) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:n]


def _physical(inputs: dict[str, Any], name: str) -> str:
    """The provider's auto-naming: given name, or name/prefix plus a random-looking suffix."""
    if inputs.get("name"):
        return inputs["name"]
    if inputs.get("namePrefix"):
        return inputs["namePrefix"] + _suffix(name)
    return f"{name}-{_suffix(name, 7)}"


def _fake_ca() -> str:
    pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUpreflightpreflightpreflightMAoGCCqGSM49BAMC\n-----END CERTIFICATE-----\n"
    return base64.b64encode(pem.encode()).decode()


def _eks_cluster(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    cname = _physical(inputs, name)
    region = _region(inputs)
    oidc_id = _suffix(cname, 32).upper()
    vpc = dict(inputs.get("vpcConfig") or {})
    vpc.update({"clusterSecurityGroupId": f"sg-{_suffix(cname, 17)}", "vpcId": f"vpc-{_suffix(cname + 'vpc', 17)}"})
    return {
        "name": cname,
        "arn": f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{cname}",
        "endpoint": f"https://{oidc_id}.gr7.{region}.eks.amazonaws.com",
        "certificateAuthority": {"data": _fake_ca()},
        "identities": [{"oidcs": [{"issuer": f"https://oidc.eks.{region}.amazonaws.com/id/{oidc_id}"}]}],
        "kubernetesNetworkConfig": {"serviceIpv4Cidr": CLUSTER_SERVICE_CIDR, "ipFamily": "ipv4"},
        "vpcConfig": vpc,
        "status": "ACTIVE",
    }


def _iam(kind: str):
    def fn(inputs: dict[str, Any], name: str) -> dict[str, Any]:
        pname = _physical(inputs, name)
        return {"name": pname, "arn": f"arn:aws:iam::{ACCOUNT}:{kind}/{pname}", "uniqueId": "AROA" + _suffix(name, 16).upper()}
    return fn


def _oidc(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    host = str(inputs.get("url", "oidc.example")).removeprefix("https://")
    return {"arn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{host}"}


def _kms_key(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    key_id = f"{_suffix(name, 8)}-{_suffix(name + '1', 4)}-{_suffix(name + '2', 4)}-{_suffix(name + '3', 4)}-{_suffix(name + '4', 12)}"
    return {"keyId": key_id, "arn": f"arn:aws:kms:{_region(inputs)}:{ACCOUNT}:key/{key_id}"}


def _launch_template(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    lt_id = f"lt-{_suffix(name, 17)}"
    return {"latestVersion": 1, "defaultVersion": 1, "arn": f"arn:aws:ec2:{_region(inputs)}:{ACCOUNT}:launch-template/{lt_id}",
            "name": _physical(inputs, name)}


def _asg(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    pname = _physical(inputs, name)
    return {"name": pname, "arn": f"arn:aws:autoscaling:{_region(inputs)}:{ACCOUNT}:autoScalingGroup:"
                                  f"{_suffix(name, 8)}-0000-4000-8000-{_suffix(name, 12)}:autoScalingGroupName/{pname}"}


def _sqs(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    pname, region = _physical(inputs, name), _region(inputs)
    return {"name": pname, "arn": f"arn:aws:sqs:{region}:{ACCOUNT}:{pname}", "url": f"https://sqs.{region}.amazonaws.com/{ACCOUNT}/{pname}"}


def _event_rule(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    pname = _physical(inputs, name)
    return {"name": pname, "arn": f"arn:aws:events:{_region(inputs)}:{ACCOUNT}:rule/{pname}"}


def _sns_topic(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    pname = _physical(inputs, name)
    return {"name": pname, "arn": f"arn:aws:sns:{_region(inputs)}:{ACCOUNT}:{pname}"}


def _bucket(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    bname = inputs.get("bucket") or (inputs.get("bucketPrefix", name + "-") + "2026" + _suffix(name, 10))
    return {"bucket": bname, "arn": f"arn:aws:s3:::{bname}", "bucketRegionalDomainName": f"{bname}.s3.amazonaws.com"}


def _log_group(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    pname = _physical(inputs, name)
    return {"name": pname, "arn": f"arn:aws:logs:{_region(inputs)}:{ACCOUNT}:log-group:{pname}"}


def _node_group(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    ng = inputs.get("nodeGroupName") or f"{name}-{_suffix(name)}"
    return {"nodeGroupName": ng, "arn": f"arn:aws:eks:{_region(inputs)}:{ACCOUNT}:nodegroup/{inputs.get('clusterName')}/{ng}/x",
            "resources": [{"autoscalingGroups": [{"name": f"eks-{ng}-{_suffix(name)}"}]}], "status": "ACTIVE"}


def _stack_region(inputs: dict[str, Any]) -> str:
    """The resource's region: its own input, else the stack's aws.region (the program's explicit provider)."""
    import pulumi

    return inputs.get("region") or (pulumi.Config("gpu-platform").get_object("aws") or {}).get("region") or DEFAULT_REGION


def _ecr_repository(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    """ECR CreateRepository: registryId is the account, repositoryUrl <account>.dkr.ecr.<region>.amazonaws.com/<name>
    (terraform-provider-aws internal/service/ecr/repository.go sets both from the API's Repository)."""
    rname, region = inputs.get("name") or name, _stack_region(inputs)
    return {"name": rname, "registryId": ACCOUNT, "arn": f"arn:aws:ecr:{region}:{ACCOUNT}:repository/{rname}",
            "repositoryUrl": f"{ACCOUNT}.dkr.ecr.{region}.amazonaws.com/{rname}"}


RESOURCES = {
    "aws:ecr/repository:Repository": _ecr_repository,
    "aws:eks/cluster:Cluster": _eks_cluster,
    "aws:eks/nodeGroup:NodeGroup": _node_group,
    "aws:iam/role:Role": _iam("role"),
    "aws:iam/instanceProfile:InstanceProfile": _iam("instance-profile"),
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": _oidc,
    "aws:kms/key:Key": _kms_key,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:autoscaling/group:Group": _asg,
    "aws:sqs/queue:Queue": _sqs,
    "aws:cloudwatch/eventRule:EventRule": _event_rule,
    "aws:sns/topic:Topic": _sns_topic,
    "aws:s3/bucket:Bucket": _bucket,
    "aws:cloudwatch/logGroup:LogGroup": _log_group,
}


# Who runs `pulumi up` under preflight: a CI/deploy role, as sts:GetCallerIdentity reports an assumed role.
DEPLOYER_ROLE = "preflight-deployer"
DEPLOYER_ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/{DEPLOYER_ROLE}/preflight"


def _caller_identity(args: dict[str, Any]) -> dict[str, Any]:
    return {"accountId": ACCOUNT, "arn": DEPLOYER_ARN, "userId": "AROAPREFLIGHT0000000:preflight", "id": ACCOUNT}


def _availability_zones(args: dict[str, Any]) -> dict[str, Any]:
    """The zones of the stack's region as EC2 lists them (us-east-1 has six; the program takes three)."""
    import pulumi

    region = (pulumi.Config("gpu-platform").get_object("aws") or {}).get("region", "us-east-1")
    names = [f"{region}{letter}" for letter in "abcdef"]
    return {"names": names, "zoneIds": [f"{region[:2]}{region.split('-')[1][0]}{region[-1]}-az{i + 1}" for i in range(6)],
            "state": "available", "id": region, "groupNames": [region] * 6}


def _addon_version(args: dict[str, Any]) -> dict[str, Any]:
    """EKS's default add-on version for a Kubernetes minor: unknown offline, so a value that names what
    it stands for (the plan shows which add-on and minor the deploy will resolve)."""
    addon, minor = args.get("addonName"), args.get("kubernetesVersion")
    return {"addonName": addon, "kubernetesVersion": minor, "version": f"eks-default:{addon}@{minor}",
            "id": f"{addon}-{minor}", "mostRecent": bool(args.get("mostRecent"))}


def _ecr_authorization_token(args: dict[str, Any]) -> dict[str, Any]:
    """ecr:GetAuthorizationToken as terraform-provider-aws's data source returns it
    (internal/service/ecr/authorization_token_data_source.go): the token is base64 of user:password, the user
    AWS, the proxy endpoint https://<registry>.dkr.ecr.<region>.amazonaws.com, valid 12 hours."""
    from gpu_platform.preflight.mocks import sensitive

    registry = args.get("registryId") or ACCOUNT
    password = sensitive("preflight-ecr-token-" + _suffix(registry, 24))
    region = _stack_region(args)
    return {"authorizationToken": sensitive(base64.b64encode(f"AWS:{password}".encode()).decode()),
            "userName": "AWS", "password": password, "expiresAt": "2026-01-01T12:00:00Z",
            "proxyEndpoint": f"https://{registry}.dkr.ecr.{region}.amazonaws.com", "registryId": registry, "id": region}


def _route_table(args: dict[str, Any]) -> dict[str, Any]:
    """The route table a subnet is explicitly associated with: one per subnet, named after it."""
    subnet = str(args.get("subnetId") or "subnet-unknown")
    rtb = f"rtb-{_suffix(subnet, 17)}"
    return {"id": rtb, "routeTableId": rtb, "subnetId": subnet, "vpcId": "vpc-preflight", "ownerId": ACCOUNT,
            "arn": f"arn:aws:ec2:us-east-1:{ACCOUNT}:route-table/{rtb}", "associations": [], "routes": [], "tags": {}}


INVOKES = {
    "aws:ecr/getAuthorizationToken:getAuthorizationToken": _ecr_authorization_token,
    "aws:ec2/getRouteTable:getRouteTable": _route_table,
    "aws:eks/getAddonVersion:getAddonVersion": _addon_version,
    "aws:index/getCallerIdentity:getCallerIdentity": _caller_identity,
    "aws:index/getAvailabilityZones:getAvailabilityZones": _availability_zones,
}
