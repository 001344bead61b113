"""The EKS autoscaling drill: the plan's GPU Auto Scaling groups go from zero to a node and back on the
rehearsal's control plane, driven by the REAL cluster-autoscaler (built from its tagged source with
`-tags aws`, rehearsal/components.lock.toml: `cluster-autoscaler-aws`) against moto's EC2 and Auto Scaling
APIs (moto's server, `python -m moto.server`, a separate process).

The world is the plan's, not typed here: the VPC and the subnets the groups use (CIDR, zone), each GPU
group's launch template (its user data, root volume, metadata options, tag specifications) and its Auto
Scaling group (sizes, subnets, mixed-instances policy, lifecycle hook, suspended processes, scale-in
protection, and every tag: auto-discovery and the node-template label/taint/resources tags the autoscaler
builds its template node from) are created in moto from the plan's resources. The autoscaler runs with
the arguments the pinned chart renders for the stack (auto-discovery by ASG tags), the chart's
ServiceAccount and roles plus the program's extra rules, that ServiceAccount's token, and the chart's
environment (AWS_REGION); what the drill changes (the addresses, the clock, the fake credentials) is
listed in the report.

The stack's job-aware scale-in protection controller runs beside it in the shipped drill (`ProtectionProcess`:
`python -m gpu_platform.controllers.scale_in_protection.controller` with its planned Deployment's environment,
its grace and cycle on the drill's clock, seconds where the stack has minutes, moto's endpoint, and a token of
its ServiceAccount through SERVICE_ACCOUNT_DIR): the scale-down check measures both parts of the grace, the
controller's hold (annotation and instance protection) and then the autoscaler's unneeded time. moto 5.2 answers
SetInstanceProtection and reports ProtectedFromScaleIn in DescribeAutoScalingGroups and
DescribeAutoScalingInstances; as in AWS, TerminateInstanceInAutoScalingGroup ignores the protection.

`AsgBridge` plays EC2 and EKS: an instance moto launched "boots" and its kubelet registers the Node its
launch template's nodeadm NodeConfig describes (the EC2 private DNS name, the node labels and taints of
the NodeConfig, the zone of the instance, the providerID `aws:///<zone>/<instance id>` the AWS cloud
provider sets, the allocatable of the node model); an instance that is gone or terminated loses its Node
(the cloud controller's node lifecycle). Any disagreement between the group's node-template tags, the
launch template's NodeConfig, the instance type moto describes and the rehearsal's node model fails the
drill.

Where moto and AWS differ in what the drill touches (found while writing it, each stated in the report):
- moto launches the instances of a mixed-instances group with an empty InstanceType (and not as Spot):
  the drill takes the node's instance type from the group's override, as EC2 would launch it;
- moto resolves no `resolve:ssm:` image parameter (the instance keeps the parameter as its ImageId) and
  enforces no lifecycle hook: TerminateInstanceInAutoScalingGroup terminates at once (no Terminating:Wait
  for the node termination handler, which is not rehearsed);
- moto records no scaling activities (DescribeScalingActivities is empty: a group is always available).
cluster-autoscaler 1.35.2 builds its Auto Scaling and EC2 clients with a legacy endpoint resolver
(cloudprovider/aws/aws_manager.go), which answers the real AWS endpoint and so overrides the SDK's
AWS_ENDPOINT_URL variables; only its instance-type listing (aws_util.go GenerateEC2InstanceTypes) honours
them. The drill therefore points the clients at moto with the cloud config's `[ServiceOverride]` sections
(k8s.io/cloud-provider-aws config, read by aws_sdk_provider.go) and sets the endpoint variables too.
"""

from __future__ import annotations

import base64
import copy
import email
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from gpu_platform.components.aws.scale_down import parse_go_duration
from gpu_platform.components.capacity import parse_quantity
from gpu_platform.components.cluster import POOL_LABEL
from gpu_platform.controllers.scale_in_protection.controller import SCALE_DOWN_DISABLED
from gpu_platform.rehearsal.autoscale import (KATIB_EPHEMERAL_STORAGE, AutoscalerProcess, AutoscalerRelease, Drill, Timing,
                                              _admitted, _back_to_zero, _cluster_ca_pem, _pool_of_pods, _scale_from_zero,
                                              _workload, autoscaler_release, gpu_notebook_from_zero)
from gpu_platform.rehearsal import pki
from gpu_platform.rehearsal.controlplane import KWOK_ANNOTATION
from gpu_platform.rehearsal.nodes import GPU_RESOURCE, GROUP_LABEL, resources
from gpu_platform.rehearsal.processes import ProcessGroup, free_port

TITLE = ("autoscaled EKS GPU groups from zero and back: the real cluster-autoscaler (aws) against moto's EC2 and "
         "Auto Scaling APIs")
AUTOSCALER = "cluster-autoscaler-aws"  # the binary (rehearsal/components.lock.toml)
ASG = "aws:autoscaling/group:Group"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
SUBNET = "aws:ec2/subnet:Subnet"
VPC = "aws:ec2/vpc:Vpc"
PROVIDER_ID_PREFIX = "aws:///"
DISCOVERY_TAG = "k8s.io/cluster-autoscaler/enabled"
TEMPLATE_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
UNNEEDED_TIME_TAG = TEMPLATE_PREFIX + "autoscaling-options/scaledownunneededtime"
# What moto does differently from AWS in what the drill touches, and what the drill does about it (the report's).
MOTO_GAPS = ("moto and AWS: every Auto Scaling and EC2 call the autoscaler made was answered (none missing, nothing of "
             "moto patched); moto launches a mixed-instances group's instances with an empty InstanceType and on demand "
             "(the node takes the group's override type), resolves no resolve:ssm: image, enforces no lifecycle hook "
             "(TerminateInstanceInAutoScalingGroup terminates at once: aws-node-termination-handler's drain is not "
             "rehearsed) and records no scaling activities (a group is always available); EKS's managed system node "
             "group (its own Auto Scaling group, tagged for discovery by EKS) is not created: the system nodes carry no "
             "providerID and are not autoscaled here")
# Fake credentials: moto accepts any; nothing here can reach AWS.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "AKIAREHEARSAL0000000", "AWS_SECRET_ACCESS_KEY": "rehearsal-not-a-secret"}


# --- the plan's groups ----------------------------------------------------------------------------------


@dataclass
class PlannedGroup:
    """One Auto Scaling group of the plan with its launch template, as the provider would create them."""

    name: str
    pool: str
    zone: str
    asg: dict  # the ASG resource's inputs (Pulumi's names)
    launch_template: dict  # its launch template's inputs
    launch_template_name: str  # the launch template resource's name (moto's name for it)
    subnets: list[dict]  # {name, cidr, zone} of each subnet the group uses

    @property
    def tags(self) -> dict[str, str]:
        return {t["key"]: str(t["value"]) for t in self.asg.get("tags") or []}

    @property
    def instance_types(self) -> list[str]:
        lt = ((self.asg.get("mixedInstancesPolicy") or {}).get("launchTemplate") or {})
        return [o["instanceType"] for o in lt.get("overrides") or [] if o.get("instanceType")]

    def template_node(self) -> dict:
        """What cluster-autoscaler 1.35.2 reads from the group's tags for its template node
        (cloudprovider/aws/aws_manager.go extractLabelsFromAsg, extractTaintsFromAsg, extractAllocatableResourcesFromAsg)."""
        labels, taints, res = {}, [], {}
        for key, value in self.tags.items():
            if key.startswith(TEMPLATE_PREFIX + "label/"):
                labels[key[len(TEMPLATE_PREFIX + "label/"):]] = value
            elif key.startswith(TEMPLATE_PREFIX + "taint/") and re.fullmatch(r".*:(NoSchedule|NoExecute|PreferNoSchedule)", value):
                v, effect = value.split(":", 1)
                taints.append({"key": key[len(TEMPLATE_PREFIX + "taint/"):], "value": v, "effect": effect})
            elif key.startswith(TEMPLATE_PREFIX + "resources/"):
                res[key[len(TEMPLATE_PREFIX + "resources/"):]] = value
        return {"labels": labels, "taints": taints, "resources": res}


def _name(resource: Any) -> str:
    return resource.urn.rsplit("::", 1)[-1]


def _by_output_id(plan: Any, type_: str) -> dict[str, Any]:
    """The plan's resources of `type_` by the id preview gives them (`<name>-id`)."""
    return {f"{_name(r)}-id": r for r in plan.by_type(type_)}


def planned_groups(plan: Any) -> list[PlannedGroup]:
    """Every autoscaler-discovered Auto Scaling group of the plan with its launch template and subnets; a
    reference the plan does not resolve is a ValueError naming it."""
    if plan is None:
        return []
    templates = _by_output_id(plan, LAUNCH_TEMPLATE)
    subnets = _by_output_id(plan, SUBNET)
    out = []
    for r in plan.by_type(ASG):
        asg = r.plain_inputs or {}
        tags = {t["key"]: str(t["value"]) for t in asg.get("tags") or []}
        if tags.get(DISCOVERY_TAG) != "true":
            continue
        spec = (((asg.get("mixedInstancesPolicy") or {}).get("launchTemplate") or {}).get("launchTemplateSpecification") or {})
        lt = templates.get(str(spec.get("launchTemplateId")))
        if lt is None:
            raise ValueError(f"Auto Scaling group {asg.get('name')}: its launch template {spec.get('launchTemplateId')!r} is "
                             "not a launch template of the plan")
        used = []
        for sid in asg.get("vpcZoneIdentifiers") or []:
            sub = subnets.get(str(sid))
            if sub is None:
                raise ValueError(f"Auto Scaling group {asg.get('name')}: subnet {sid!r} is not a subnet of the plan")
            used.append({"name": _name(sub), "cidr": sub.plain_inputs["cidrBlock"], "zone": sub.plain_inputs["availabilityZone"]})
        out.append(PlannedGroup(str(asg["name"]), tags.get("gpu-pool", str(asg["name"])),
                                tags.get("gpu-pool-zone", used[0]["zone"] if used else ""), asg, lt.plain_inputs or {},
                                _name(lt), used))
    return out


def vpc_cidr(plan: Any) -> str:
    vpcs = plan.by_type(VPC)
    return str(vpcs[0].plain_inputs["cidrBlock"]) if vpcs else "10.0.0.0/16"


def nodeadm_registration(user_data_b64: str) -> dict:
    """What the instance's kubelet registers with, from its launch template's user data (the MIME part
    application/node.eks.aws: nodeadm's NodeConfig): node labels and registerWithTaints."""
    msg = email.message_from_string(base64.b64decode(user_data_b64).decode())
    parts = [p for p in msg.walk() if p.get_content_type() == "application/node.eks.aws"]
    if not parts:
        raise ValueError("the launch template's user data has no application/node.eks.aws part (nodeadm NodeConfig)")
    doc = yaml.safe_load(parts[0].get_payload())
    kubelet = (doc.get("spec") or {}).get("kubelet") or {}
    labels: dict[str, str] = {}
    for flag in kubelet.get("flags") or []:
        if str(flag).startswith("--node-labels="):
            labels.update(kv.split("=", 1) for kv in str(flag).split("=", 1)[1].split(",") if kv)
    return {"labels": labels, "taints": list((kubelet.get("config") or {}).get("registerWithTaints") or [])}


def tag_disagreements(group: PlannedGroup, model_group: Any, gpus_of_type: Optional[int]) -> list[str]:
    """Where the group's node-template tags, its NodeConfig, the instance type and the node model differ on
    what scheduling decides."""
    tmpl = group.template_node()
    reg = nodeadm_registration(group.launch_template["userData"])
    problems = []
    wrong = {k: v for k, v in reg["labels"].items() if tmpl["labels"].get(k) != v}
    if wrong:
        problems.append(f"the kubelet registers labels {wrong} the node-template tags do not have")
    missing = {k: v for k, v in tmpl["labels"].items() if reg["labels"].get(k) != v}
    if missing:
        problems.append(f"the node-template tags promise labels {missing} the kubelet does not register")
    key = lambda t: (t.get("key"), t.get("value") or "", t.get("effect"))  # noqa: E731
    if sorted(map(key, reg["taints"])) != sorted(map(key, tmpl["taints"])):
        problems.append(f"the kubelet registers taints {reg['taints']}, the node-template tags say {tmpl['taints']}")
    tag_gpus = int(parse_quantity(tmpl["resources"].get(GPU_RESOURCE, gpus_of_type or 0)))
    if gpus_of_type is not None and tag_gpus != gpus_of_type:
        problems.append(f"the node-template tags say {tag_gpus} {GPU_RESOURCE}, the instance type has {gpus_of_type}")
    if model_group is not None:
        if tag_gpus != model_group.allocatable.gpus:
            problems.append(f"the node-template tags say {tag_gpus} {GPU_RESOURCE}, the node model {model_group.allocatable.gpus}")
        if sorted(map(key, tmpl["taints"])) != sorted(map(key, model_group.taints)):
            problems.append(f"the node-template taints {tmpl['taints']} are not the node model's {model_group.taints}")
        lacking = {k: v for k, v in model_group.labels.items() if tmpl["labels"].get(k) != v
                   and k not in ("topology.kubernetes.io/zone", "kubernetes.io/os", "kubernetes.io/arch",
                                 "node.kubernetes.io/instance-type")}
        if lacking:
            problems.append(f"the node-template tags lack the node model's labels {lacking}")
    return [f"{group.name}: {p}" for p in problems]


def cloud_config(url: str, region: str) -> tuple[str, list[str]]:
    """The autoscaler's --cloud-config: each AWS service it calls pointed at moto (k8s.io/cloud-provider-aws
    CloudConfig [ServiceOverride], gcfg); the change for the report."""
    lines = ["[Global]"]
    for i, service in enumerate(("autoscaling", "ec2", "eks"), 1):
        lines += [f'[ServiceOverride "{i}"]', f"Service = {service}", f"Region = {region}", f"URL = {url}",
                  f"SigningRegion = {region}"]
    return "\n".join(lines) + "\n", [f"cloud-config: (none) -> [ServiceOverride] autoscaling, ec2 and eks at {url} "
                                     "(the SDK's AWS_ENDPOINT_URL variables are overridden by the autoscaler's legacy "
                                     "endpoint resolvers; set too, for its instance-type listing)"]


# --- moto: the plan's groups created in it, and the world outside the cluster --------------------------------


def _ec2_launch_template_data(lt: dict) -> dict:
    """The plan's launch template inputs (Pulumi's names) as EC2's LaunchTemplateData. The instance profile
    and security group are left out: moto has neither the plan's role nor its security group (the drill
    checks scheduling, not IAM or networking)."""
    def ebs(e: dict) -> dict:
        out = {}
        for k, api in (("volumeSize", "VolumeSize"), ("volumeType", "VolumeType"), ("iops", "Iops"), ("throughput", "Throughput")):
            if e.get(k) is not None:
                out[api] = int(e[k]) if k != "volumeType" else e[k]
        for k, api in (("encrypted", "Encrypted"), ("deleteOnTermination", "DeleteOnTermination")):
            if e.get(k) is not None:
                out[api] = str(e[k]).lower() == "true"
        return out

    data: dict[str, Any] = {"ImageId": lt["imageId"], "UserData": lt["userData"]}
    data["BlockDeviceMappings"] = [{"DeviceName": b["deviceName"], "Ebs": ebs(b.get("ebs") or {})}
                                   for b in lt.get("blockDeviceMappings") or []]
    md = lt.get("metadataOptions") or {}
    data["MetadataOptions"] = {api: (int(md[k]) if k == "httpPutResponseHopLimit" else md[k])
                               for k, api in (("httpEndpoint", "HttpEndpoint"), ("httpTokens", "HttpTokens"),
                                              ("httpPutResponseHopLimit", "HttpPutResponseHopLimit"),
                                              ("instanceMetadataTags", "InstanceMetadataTags")) if md.get(k) is not None}
    data["TagSpecifications"] = [{"ResourceType": t["resourceType"], "Tags": [{"Key": k, "Value": v} for k, v in (t.get("tags") or {}).items()]}
                                 for t in lt.get("tagSpecifications") or []]
    return data


class Moto:
    """moto's server as a process, with boto3 clients of the region."""

    NAME = "moto-server"

    def __init__(self, procs: ProcessGroup, region: str):
        import boto3

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.region = region
        self.proc = procs.start(self.NAME, [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)])
        kw = dict(endpoint_url=self.url, region_name=region, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                  aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])
        self.ec2 = boto3.client("ec2", **kw)
        self.autoscaling = boto3.client("autoscaling", **kw)

    def ready(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.alive:
            try:
                self.ec2.describe_vpcs()
                return True
            except Exception:  # noqa: BLE001 (botocore's connection errors: not up yet)
                time.sleep(0.3)
        return False

    def create(self, groups: list[PlannedGroup], cidr: str, unneeded_time: str) -> list[str]:
        """The VPC, subnets, launch templates and Auto Scaling groups of `groups`; each group's
        scale-down-unneeded-time tag set to the drill's clock. Returns what the drill changed."""
        vpc = self.ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
        subnet_ids: dict[str, str] = {}
        for g in groups:
            for s in g.subnets:
                if s["name"] not in subnet_ids:
                    subnet_ids[s["name"]] = self.ec2.create_subnet(VpcId=vpc, CidrBlock=s["cidr"],
                                                                   AvailabilityZone=s["zone"])["Subnet"]["SubnetId"]
        changes = []
        for g in groups:
            lt_id = self.ec2.create_launch_template(LaunchTemplateName=g.launch_template_name,
                                                    LaunchTemplateData=_ec2_launch_template_data(g.launch_template))["LaunchTemplate"]["LaunchTemplateId"]
            a = g.asg
            mip = a["mixedInstancesPolicy"]
            dist = mip.get("instancesDistribution") or {}
            tags = []
            for t in a.get("tags") or []:
                value = str(t["value"])
                if t["key"] == UNNEEDED_TIME_TAG and value != unneeded_time:
                    changes.append(f"{g.name} tag {UNNEEDED_TIME_TAG}: {value} -> {unneeded_time}")
                    value = unneeded_time
                tags.append({"Key": t["key"], "Value": value, "PropagateAtLaunch": bool(t.get("propagateAtLaunch")),
                             "ResourceId": g.name, "ResourceType": "auto-scaling-group"})
            args: dict[str, Any] = dict(
                AutoScalingGroupName=g.name, MinSize=int(a["minSize"]), MaxSize=int(a["maxSize"]),
                VPCZoneIdentifier=",".join(subnet_ids[s["name"]] for s in g.subnets),
                MixedInstancesPolicy={
                    "InstancesDistribution": {api: (int(dist[k]) if "Capacity" in api else dist[k]) for k, api in (
                        ("onDemandBaseCapacity", "OnDemandBaseCapacity"),
                        ("onDemandPercentageAboveBaseCapacity", "OnDemandPercentageAboveBaseCapacity"),
                        ("onDemandAllocationStrategy", "OnDemandAllocationStrategy"),
                        ("spotAllocationStrategy", "SpotAllocationStrategy")) if dist.get(k) is not None},
                    "LaunchTemplate": {"LaunchTemplateSpecification": {"LaunchTemplateId": lt_id,
                                                                       "Version": mip["launchTemplate"]["launchTemplateSpecification"].get("version", "$Default")},
                                       "Overrides": [{"InstanceType": t} for t in g.instance_types]}},
                Tags=tags)
            for k, api in (("protectFromScaleIn", "NewInstancesProtectedFromScaleIn"), ("capacityRebalance", "CapacityRebalance"),
                           ("healthCheckType", "HealthCheckType"), ("healthCheckGracePeriod", "HealthCheckGracePeriod"),
                           ("defaultInstanceWarmup", "DefaultInstanceWarmup")):
                if a.get(k) is not None:
                    args[api] = int(a[k]) if isinstance(a[k], float) else a[k]
            hooks = [{"LifecycleHookName": h["name"], "LifecycleTransition": h["lifecycleTransition"],
                      "DefaultResult": h.get("defaultResult", "ABANDON"), "HeartbeatTimeout": int(h.get("heartbeatTimeout", 3600))}
                     for h in a.get("initialLifecycleHooks") or []]
            if hooks:
                args["LifecycleHookSpecificationList"] = hooks
            self.autoscaling.create_auto_scaling_group(**args)
            if a.get("suspendedProcesses"):
                self.autoscaling.suspend_processes(AutoScalingGroupName=g.name, ScalingProcesses=list(a["suspendedProcesses"]))
        return changes

    def groups(self, names: list[str]) -> dict[str, dict]:
        return {g["AutoScalingGroupName"]: g for g in
                self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=names)["AutoScalingGroups"]}

    def instances(self, ids: list[str]) -> dict[str, dict]:
        if not ids:
            return {}
        return {i["InstanceId"]: i for r in self.ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]}

    def gpus_of_type(self, instance_type: str) -> Optional[int]:
        info = self.ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
        gpus = ((info[0].get("GpuInfo") or {}).get("Gpus") or []) if info else []
        return sum(int(g.get("Count", 0)) for g in gpus) if info else None


class AsgBridge:
    """Instances moto launched become KWOK nodes (and go away with them)."""

    def __init__(self, drill: "AwsDrill"):
        self.d = drill
        self.seen: dict[str, float] = {}
        self.joined: dict[str, tuple[str, str]] = {}  # instance id -> (node name, group)
        self.terminated: dict[str, str] = {}  # instance id -> its group, once moto says it is gone
        self.never_join: dict[str, str] = {}  # instance id -> its group: launched, its kubelet never registers
        self.refuse_next = False  # the next instance moto launches never registers (its boot fails)
        self.booting = True  # False: new instances stay booting (held while the autoscaler restarts)
        self.problems: list[str] = []

    def step(self) -> None:
        d = self.d
        now = time.monotonic()
        groups = d.moto.groups(list(d.groups))
        live: set[str] = set()
        for name, g in groups.items():
            for inst in g.get("Instances") or []:
                iid = inst["InstanceId"]
                if inst.get("LifecycleState", "").startswith("Terminat"):
                    continue
                live.add(iid)
                if iid not in self.seen:
                    self.seen[iid] = now
                    if self.refuse_next:
                        self.refuse_next = False
                        self.never_join[iid] = name
                if (iid not in self.joined and iid not in self.never_join and self.booting
                        and now - self.seen[iid] >= d.timing.boot_seconds):
                    self.joined[iid] = (self._register(d.groups[name], inst), name)
        running = {i for i, x in d.moto.instances(sorted(live)).items() if x["State"]["Name"] in ("pending", "running")}
        for iid, (_, group) in self.joined.items():
            if iid not in running and iid not in self.terminated:
                self.terminated[iid] = group
        for node in d.client.list("v1", "Node"):
            pid = (node.get("spec") or {}).get("providerID") or ""
            if pid.startswith(PROVIDER_ID_PREFIX) and pid.rsplit("/", 1)[-1] not in running:
                d.client.delete("v1", "Node", node["metadata"]["name"])  # the cloud controller: the instance is gone

    def _register(self, group: PlannedGroup, inst: dict) -> str:
        d = self.d
        iid, zone = inst["InstanceId"], inst["AvailabilityZone"]
        ec2 = d.moto.instances([iid])[iid]
        name = ec2.get("PrivateDnsName") or iid
        reg = nodeadm_registration(group.launch_template["userData"])
        # moto leaves a mixed-instances group's instance type empty: EC2 launches the (single) override.
        itype = ec2.get("InstanceType") or (group.instance_types[0] if group.instance_types else "")
        model = d.model_group(group.pool, zone)
        res = resources(model) if model is not None else {}
        root = next((b.get("ebs") or {} for b in group.launch_template.get("blockDeviceMappings") or []), {})
        if root.get("volumeSize"):
            res["ephemeral-storage"] = f"{int(root['volumeSize'])}Gi"
        tmpl = group.template_node()
        tag_gpus = tmpl["resources"].get(GPU_RESOURCE)
        if tag_gpus is not None and parse_quantity(res.get(GPU_RESOURCE, 0)) != parse_quantity(tag_gpus):
            self.problems.append(f"{name}: the kubelet reports {res.get(GPU_RESOURCE)} {GPU_RESOURCE}, the group's "
                                 f"node-template tag says {tag_gpus}")
        labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": itype,
                  "topology.kubernetes.io/region": zone[:-1], "topology.kubernetes.io/zone": zone,
                  **reg["labels"], "kubernetes.io/hostname": name, GROUP_LABEL: group.pool}
        d.client.create({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
                         "spec": {"taints": reg["taints"], "providerID": f"{PROVIDER_ID_PREFIX}{zone}/{iid}"}})
        d.client.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                        "status": {"allocatable": res, "capacity": res}}, subresource="status")
        return name


# --- the job-aware scale-in protection controller, as its Deployment in the plan runs it ----------------------

# The drill's clock for the controller: seconds where the stack has minutes (the rule Timing.flags follows for the
# autoscaler's chart-rendered minutes: a 13-minute grace is 13 s here), its cycle at least a second.
STACK_SECONDS_PER_DRILL_SECOND = 60
PROTECTION_MODULE = "gpu_platform.controllers.scale_in_protection.controller"


def drill_seconds(stack_seconds: float, floor: float = 0.0) -> float:
    return max(floor, stack_seconds / STACK_SECONDS_PER_DRILL_SECOND)


@dataclass
class PlannedProtection:
    """The scale-in protection controller's Deployment as the plan deploys it (components/aws/protection.py)."""

    deployment: dict
    source: str

    @property
    def env(self) -> dict[str, str]:
        container = self.deployment["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: str(e["value"]) for e in container.get("env") or [] if "value" in e}

    @property
    def namespace(self) -> str:
        return self.deployment["metadata"].get("namespace") or "default"

    @property
    def service_account(self) -> str:
        return self.deployment["spec"]["template"]["spec"].get("serviceAccountName") or "default"

    def seconds(self, key: str) -> float:
        try:
            return float(self.env[key])
        except (KeyError, ValueError):
            raise ValueError(f"{self.source}: environment variable {key} is {self.env.get(key)!r}, not a number of "
                             "seconds") from None


def planned_protection(releases: list[Any]) -> Optional[PlannedProtection]:
    """The controller's Deployment among the installed releases (None: the stack runs no controller,
    aws.scaleInController off)."""
    from gpu_platform.components.aws.protection import NAME

    for rel in releases:
        for o in rel.objects if rel.rendered else []:
            if o.get("kind") == "Deployment" and (o.get("metadata") or {}).get("name") == NAME:
                return PlannedProtection(o, f"the plan's Deployment {o['metadata'].get('namespace')}/{NAME} "
                                            f"(release {rel.name})")
    return None


class ProtectionProcess:
    """`python -m gpu_platform.controllers.scale_in_protection.controller` (the image runs the same file) with its
    Deployment's environment, the drill's clock on its grace and cycle, moto's endpoint for its Auto Scaling
    client, and the Kubernetes API with a token of its ServiceAccount (bound by the program's ClusterRole)."""

    def __init__(self, planned: PlannedProtection, client: Any, server_ca: bytes, work: Path, moto_url: str,
                 procs: ProcessGroup):
        import gpu_platform

        self.planned, self.client, self.procs = planned, client, procs
        self.sa_dir = work / "scale-in-protection-serviceaccount"
        pki.write(self.sa_dir / "ca.crt", server_ca)
        env = planned.env
        self.grace = drill_seconds(planned.seconds("GRACE_SECONDS"))
        self.interval = drill_seconds(planned.seconds("INTERVAL_SECONDS"), floor=1.0)
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), **env,
                    "GRACE_SECONDS": f"{self.grace:g}", "INTERVAL_SECONDS": f"{self.interval:g}",
                    **CREDENTIALS, "AWS_ENDPOINT_URL": moto_url, "AWS_ENDPOINT_URL_AUTO_SCALING": moto_url,
                    "AWS_EC2_METADATA_DISABLED": "true", "KUBERNETES_SERVICE_HOST": client.host,
                    "KUBERNETES_SERVICE_PORT": str(client.port), "SERVICE_ACCOUNT_DIR": str(self.sa_dir),
                    "PYTHONUNBUFFERED": "1"}
        self.cwd = Path(gpu_platform.__file__).resolve().parent.parent  # this checkout's controller
        self.changes = [f"GRACE_SECONDS {env.get('GRACE_SECONDS')} -> {self.grace:g}",
                        f"INTERVAL_SECONDS {env.get('INTERVAL_SECONDS')} -> {self.interval:g}",
                        "fake credentials, AWS_ENDPOINT_URL(_AUTO_SCALING) moto", "the Kubernetes API at "
                        f"{client.host}:{client.port} with a token of {planned.namespace}/{planned.service_account} "
                        "(SERVICE_ACCOUNT_DIR)"]
        self.proc = None

    def start(self) -> None:
        pki.write(self.sa_dir / "token", self.client.token(self.planned.namespace, self.planned.service_account).encode(),
                  private=True)
        self.proc = self.procs.start("gpu-scale-in-protection", [sys.executable, "-m", PROTECTION_MODULE], env=self.env,
                                     cwd=self.cwd)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive

    def text(self) -> str:
        return self.proc.log.read_text(errors="replace") if self.proc is not None and self.proc.log.exists() else ""


# --- the drill ----------------------------------------------------------------------------------------------


class AwsDrill(Drill):
    """The Linode drill's clock, jobs and autoscaler handling (autoscale.Drill) with moto's world in place of
    the node-group provider and the fake Linode API."""

    def __init__(self, ctx: Any, sc: Any, groups: list[PlannedGroup], work: Path, log_dir: Path, timing: Timing,
                 extra_rbac: bool = True):
        cluster = next((g.tags.get("cluster") for g in groups if g.tags.get("cluster")), "cluster")
        minor = str(getattr(getattr(ctx, "cfg", None), "kubernetes_version", "") or "")
        super().__init__(ctx, sc, {"cluster": cluster, "kubernetesMinor": minor,
                                   "pools": [{"name": p} for p in dict.fromkeys(g.pool for g in groups)]},
                         work, log_dir, timing, extra_rbac)
        self.groups = {g.name: g for g in groups}
        self.moto: Optional[Moto] = None
        self.bridge: Optional[AsgBridge] = None  # type: ignore[assignment]
        self.procs: Optional[ProcessGroup] = None
        self.protection: Optional[ProtectionProcess] = None  # the scale-in protection controller, once started

    # --- what autoscale.Drill asks of its world ---

    def model_group(self, pool: str, zone: str) -> Any:
        return next((g for g in self.ctx.model.node_groups if g.name == pool
                     and g.labels.get("topology.kubernetes.io/zone") in (zone, None)), None)

    def pool_nodes(self, pool: str) -> list[dict]:
        return [n for n in self.client.list("v1", "Node") if (n["metadata"].get("labels") or {}).get(GROUP_LABEL) == pool
                and ((n.get("spec") or {}).get("providerID") or "").startswith(PROVIDER_ID_PREFIX)]

    def pool_instances(self, pool: str) -> list[dict]:
        """The pool's instances moto holds in its groups (not terminating), each with its group."""
        names = [n for n, g in self.groups.items() if g.pool == pool]
        return [{**i, "group": n} for n, g in self.moto.groups(names).items() for i in g.get("Instances") or []
                if not i.get("LifecycleState", "").startswith("Terminat")]

    def group_of_node(self, name: str) -> Optional[str]:
        return next((g for n, g in (self.bridge.joined.values() if self.bridge else []) if n == name), None)

    def pool_of_groups(self, pool: str) -> list[str]:
        return [n for n, g in self.groups.items() if g.pool == pool]

    def _run_world(self) -> None:
        while not self._stop.is_set():
            try:
                self.bridge.step()
            except Exception as exc:  # noqa: BLE001 (the API server's or moto's: reported; the next step tries again)
                self.world_errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.5)

    # --- set-up and tear-down ---

    def run(self, phases) -> None:  # type: ignore[override]
        sc, client, t = self.sc, self.client, self.timing
        job = self.example_job(AUTOSCALER)
        if job is None:
            return
        try:
            import boto3  # noqa: F401
            import flask  # noqa: F401  (moto's server mode)
            import moto  # noqa: F401
        except ImportError as exc:
            sc.status = "NOT REHEARSED"
            sc.problems.append(f"moto's server cannot run: {exc} (moto, flask and boto3: requirements-dev.txt)")
        if sc.status != "PASS":
            return
        try:
            release = self.release = autoscaler_release(self.ctx, self.planned, self.extra_rbac)
            if not release.installed:
                raise ValueError("the plan has no cluster-autoscaler release to run")
        except (OSError, ValueError) as exc:
            sc.fail(f"the autoscaler's release: {exc}")
            return
        region = next((str(e.get("value")) for e in release.container().get("env") or [] if e.get("name") == "AWS_REGION"),
                      None) or next(iter(self.groups.values())).zone[:-1]
        procs = self.procs = ProcessGroup(self.log_dir)
        try:
            self.moto = Moto(procs, region)
            if not self.moto.ready():
                sc.fail(f"moto's server did not answer within 60s: {self.moto.proc.tail()}")
                return
            tag_changes = self.moto.create(list(self.groups.values()), vpc_cidr(self.ctx.plan), f"{t.grace_seconds}s")
            for g in self.groups.values():
                model = self.model_group(g.pool, g.zone)
                gpus = self.moto.gpus_of_type(g.instance_types[0]) if g.instance_types else None
                for p in tag_disagreements(g, model, gpus):
                    sc.fail(p)
            env = {**CREDENTIALS, "AWS_REGION": region, "AWS_ENDPOINT_URL": self.moto.url,
                   "AWS_ENDPOINT_URL_AUTOSCALING": self.moto.url, "AWS_ENDPOINT_URL_EC2": self.moto.url,
                   "AWS_ENDPOINT_URL_EKS": self.moto.url, "AWS_EC2_METADATA_DISABLED": "true"}
            self.autoscaler = AutoscalerProcess(release, client, self.ctx_server(), self.ctx_ca_file(), self.work, self.work, 0,
                                                t, procs, binary=AUTOSCALER, config=cloud_config(self.moto.url, region),
                                                extra_env=env)
            self.autoscaler.changes += tag_changes + [f"environment: fake credentials, AWS_ENDPOINT_URL(_AUTOSCALING, _EC2, _EKS) "
                                                      f"{self.moto.url}, AWS_EC2_METADATA_DISABLED=true"]
            self.bridge = AsgBridge(self)
            sc.details.append(f"autoscaler: {release.source}; run with {len(self.autoscaler.argv) - 1} arguments, changed: "
                              + "; ".join(self.autoscaler.changes))
            sc.details.append("groups created in moto from the plan: " + "; ".join(
                f"{g.name} ({g.pool}, {g.zone}, {'/'.join(g.instance_types)} x {int(g.asg['minSize'])}-{int(g.asg['maxSize'])}, "
                f"template tags {sorted(k[len(TEMPLATE_PREFIX):] for k in g.tags if k.startswith(TEMPLATE_PREFIX))})"
                for g in self.groups.values()))
            sc.details.append(f"drill clock: scale-down unneeded time {t.grace_seconds}s, boot {t.boot_seconds:.0f}s, scan every "
                              f"{t.scan_interval_seconds}s")
            sc.details.append(MOTO_GAPS)
            # The groups at their minimum (zero): the rehearsal made the pools' nodes at maxNodes (node model).
            for pool in self.pools:
                for n in client.list("v1", "Node", selector=f"{GROUP_LABEL}={pool}"):
                    client.delete("v1", "Node", n["metadata"]["name"])
            self._world = threading.Thread(target=self._run_world, name="autoscale-aws-world", daemon=True)
            self._world.start()
            with self.kueue_at_stack_timing():
                phases(self, job)
        finally:
            self._stop.set()
            if self._world is not None:
                self._world.join(30)
            try:
                if self.autoscaler is not None:
                    self.check_refusals()
                    self.report_events()
            finally:
                procs.stop_all()
                self._cleanup_aws()
            sc.problems.extend(self.bridge.problems if self.bridge is not None else [])
            sc.problems.extend(f"the instance bridge: {e}" for e in self.world_errors[:3])
            if sc.problems and sc.status == "PASS":
                sc.status = "FAIL"
            sc.details.append(f"autoscaler and moto logs: {self.log_dir}")

    def _cleanup_aws(self) -> None:
        for pool in self.pools:
            for n in self.pool_nodes(pool):
                self.client.delete("v1", "Node", n["metadata"]["name"])
        self._cleanup(next(iter(self.pools)))

    INSTANCES_IN = "moto"

    def shown_instances(self, instances: list[dict]) -> list:
        return [(i["InstanceId"], i["group"], i["AvailabilityZone"]) for i in instances]

    def shown_nodes(self, nodes: list[dict]) -> list:
        return [(n["metadata"]["name"], n["metadata"]["labels"].get("topology.kubernetes.io/zone"), n["spec"].get("providerID"))
                for n in nodes]

    def scaled_groups(self, pool: str) -> str:
        return f"{pool}'s groups"

    def new_node_problems(self, inst: dict, node: dict, ups: list) -> list[str]:
        """The node is in its instance's zone with its providerID, and the instance in the group the autoscaler scaled."""
        problems = []
        want = f"{PROVIDER_ID_PREFIX}{inst['AvailabilityZone']}/{inst['InstanceId']}"
        zone = node["metadata"]["labels"].get("topology.kubernetes.io/zone")
        if node["spec"].get("providerID") != want or zone != inst["AvailabilityZone"]:
            problems.append(f"node {node['metadata']['name']} has providerID {node['spec'].get('providerID')} and zone "
                            f"{zone}; its instance is {want}")
        if ups and ups[0].group != inst["group"]:
            problems.append(f"the autoscaler scaled {ups[0].group}, moto launched the instance in {inst['group']}")
        return problems

    def instance_deleted(self, inst: dict) -> tuple[str, Optional[str]]:
        """(what the autoscaler and moto show of the scaled-down instance, the failure if it was not terminated):
        the autoscaler's TerminateInstanceInAutoScalingGroup, moto's instance state and its group's desired capacity."""
        terminated = self.autoscaler_said(rf"Terminated instance {re.escape(inst['InstanceId'])} in autoscaling group: [^\n]*")
        state = self.moto.instances([inst["InstanceId"]]).get(inst["InstanceId"], {}).get("State", {}).get("Name")
        desired = self.moto.groups([inst["group"]])[inst["group"]]["DesiredCapacity"]
        said = (f"{terminated[-1] if terminated else 'no TerminateInstanceInAutoScalingGroup logged'}; moto: instance "
                f"{inst['InstanceId']} {state}, {inst['group']} desired capacity {desired}")
        if not terminated:
            return said, ("the node went, but the autoscaler logged no scale-down through TerminateInstanceInAutoScalingGroup "
                          "(something else removed it)")
        if state != "terminated" or desired != 0:
            return said, f"moto's instance {inst['InstanceId']} is {state} and {inst['group']} wants {desired} instance(s)"
        return said, None

    def pool_groups(self, pool: str) -> dict[str, dict]:
        """Per Auto Scaling group of `pool`: moto's desired capacity, its live instances and the nodes registered."""
        nodes = self.pool_nodes(pool)
        out = {}
        for name, g in self.moto.groups(self.pool_of_groups(pool)).items():
            live = [i["InstanceId"] for i in g.get("Instances") or [] if not i.get("LifecycleState", "").startswith("Terminat")]
            out[name] = {"desired": int(g["DesiredCapacity"]), "instances": live,
                         "nodes": [n["metadata"]["name"] for n in nodes
                                   if (n["spec"].get("providerID") or "").rsplit("/", 1)[-1] in live]}
        return out

    def stray_instances(self) -> list[str]:
        """EC2 instances moto runs that no Auto Scaling group holds: what a lost scale-up would leak."""
        held = {i["InstanceId"] for g in self.moto.groups(list(self.groups)).values() for i in g.get("Instances") or []}
        running = [i["InstanceId"] for r in self.moto.ec2.describe_instances(Filters=[
            {"Name": "instance-state-name", "Values": ["pending", "running"]}])["Reservations"] for i in r["Instances"]]
        return sorted(set(running) - held)


    # --- the scale-in protection controller ---

    def start_protection(self) -> bool:
        """The stack's job-aware scale-in protection controller (components/aws/protection.py), as its planned
        Deployment runs it, started before the first scale-up (it guards a node from its first job). A stack
        without it (aws.scaleInController off) leaves the whole grace to the autoscaler."""
        sc = self.sc
        planned = planned_protection(self.ctx.releases)
        if planned is None:
            sc.details.append("scale-in protection controller: the plan deploys none (aws.scaleInController off): the "
                              "autoscaler's unneeded time is the whole grace")
            return True
        try:
            self.protection = ProtectionProcess(planned, self.client, _cluster_ca_pem(self.client), self.work, self.moto.url,
                                                self.procs)
        except ValueError as exc:
            sc.fail(f"scale-in protection controller: {exc}")
            return False
        managed = {g for g in planned.env.get("ASG_NAMES", "").split(",") if g}
        unmanaged = sorted(set(self.groups) - managed)
        if unmanaged:
            sc.fail(f"scale-in protection controller: ASG_NAMES of {planned.source} lacks the autoscaled group(s) "
                    f"{unmanaged}: their busy nodes are never guarded")
        self.protection.start()
        started = time.monotonic()
        while time.monotonic() - started < 30 and self.protection.alive and "managing [" not in self.protection.text():
            time.sleep(0.3)
        if not self.protection.alive or "managing [" not in self.protection.text():
            sc.fail(f"scale-in protection controller: did not start within 30s: {self.protection.proc.tail(8)}")
            return False
        sc.details.append(f"scale-in protection controller: {planned.source} run as `python -m {PROTECTION_MODULE}` "
                          f"(the image's controller.py), changed: {'; '.join(self.protection.changes)}")
        return True

    def whole_grace(self) -> float:
        if self.protection is None:
            return float(self.timing.grace_seconds)
        return self.grace_split(next(iter(self.groups)))[3] + self.timing.grace_seconds

    def guarded(self, inst: dict, name: str) -> tuple[bool, bool]:
        """(node `name` annotated scale-down-disabled, instance `inst` protected from scale-in in moto); a node or
        instance that is gone is neither."""
        node = self.client.get("v1", "Node", name)
        annotated = ((node or {}).get("metadata") or {}).get("annotations", {}).get(SCALE_DOWN_DISABLED) == "true"
        found = self.moto.autoscaling.describe_auto_scaling_instances(InstanceIds=[inst["InstanceId"]])["AutoScalingInstances"]
        return annotated, bool(found and found[0].get("ProtectedFromScaleIn"))

    def grace_split(self, group: str) -> tuple[float, float, float, float]:
        """The stack's scale-down grace and its parts, in the stack's seconds: (aws.scaleDownGraceMinutes, the
        controller's planned GRACE_SECONDS, the group's planned scaledownunneededtime tag) and the controller's
        part on the drill's clock (the promise less the autoscaler's part, seconds where the stack has minutes)."""
        aws = getattr(getattr(self.ctx, "cfg", None), "aws", None)
        tag = parse_go_duration(self.groups[group].tags.get(UNNEEDED_TIME_TAG, "0s"))
        promise = float(aws.scale_down_grace_minutes * 60) if aws is not None else tag
        planned = self.protection.planned.seconds("GRACE_SECONDS") if self.protection is not None else 0.0
        return promise, planned, tag, drill_seconds(promise - tag)


# --- the phases ------------------------------------------------------------------------------------------

NOT_SAFE_TO_EVICT = "pod annotated as not safe to evict present"  # simulator/drainability/rules/notsafetoevict


def _bound_pool(d: AwsDrill, ns: str, name: str) -> Optional[str]:
    """The pool whose new node runs every pod of the TrainJob (admitted by Kueue), else None."""
    if not _admitted(_workload(d.client, ns, name)):
        return None
    return _pool_of_pods(d, d.pods_of(ns, name))


def _pinned(job: dict, pool: str) -> dict:
    """The TrainJob pinned to `pool` as docs/first-training-job.md pins one (runtimePatches' nodeSelector):
    Kueue then assigns only that pool's flavor, and the fit policy lets a multi-GPU job in."""
    out = copy.deepcopy(job)
    out["spec"]["runtimePatches"] = [{"manager": "gpu-platform.io/rehearsal", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {POOL_LABEL: pool}}}}}}]}}}}]
    return out


def katib_trial_from_zero(d: AwsDrill, job: dict) -> Optional[tuple[tuple[str, str], str, dict, dict]]:
    """A Katib trial's pod (the TrainJob with what Katib's metrics collector sidecar asks, 500Mi of ephemeral
    storage, on top of the trainer's requests) pending, admitted by Kueue: the autoscaler scales a GPU group
    from zero (its template node offers ephemeral storage only through the node-template tag), it binds and
    runs. Returns (its TrainJob, the pool, the instance, the node), or None with the failure."""
    started = time.monotonic()
    ups_before = 0
    ref = d.submit(job, "rehearsal-autoscale-a", extra_requests={"ephemeral-storage": KATIB_EPHEMERAL_STORAGE})
    if ref is None:
        return None
    pool = _scale_from_zero(d, f"scale-up: TrainJob {ref[0]}/{ref[1]} (a Katib trial: asking {KATIB_EPHEMERAL_STORAGE} "
                               "ephemeral-storage, its metrics collector's) admitted, bound and running on a new node of a "
                               "GPU group", ref[0], [f"{ref[1]}-"], lambda: _bound_pool(d, *ref))
    if pool is None:
        return None
    got = d.one_new_node("scale-up", pool, ups_before, started,
                        f"TrainJob (the example {job['metadata'].get('name')} as a Katib trial, with {KATIB_EPHEMERAL_STORAGE} "
                        "ephemeral-storage) admitted, bound and running")
    return (ref, pool, *got) if got is not None else None


def job_ends_node_goes(d: AwsDrill, ref: tuple[str, str], pool: str, inst: dict, name: str) -> bool:
    """The job ends; the idle node goes after the stack's whole grace, in its two parts when the stack runs the
    scale-in protection controller (components/aws/scale_down.py): the controller keeps the node annotated
    scale-down-disabled and its instance protected from scale-in for its part, then lets go; the autoscaler
    then counts its own unneeded time (the group's scaledownunneededtime tag) and removes the node, its instance
    terminated through TerminateInstanceInAutoScalingGroup. Without the controller the autoscaler's part is all."""
    sc, t, guard = d.sc, d.timing, d.protection
    promise, planned, tag, part = d.grace_split(inst["group"])
    total = part + t.grace_seconds if guard is not None else t.grace_seconds
    if guard is not None:
        if planned + tag != promise:
            sc.fail(f"scale-down grace: the parts do not make the stack's grace: the controller's GRACE_SECONDS {planned:g} "
                    f"+ {inst['group']}'s scaledownunneededtime {tag:g}s is {planned + tag:g}s, aws.scaleDownGraceMinutes "
                    f"{promise / 60:g} is {promise:g}s")
        # While the job runs the controller holds the node (a cycle or two after it bound, if it just did).
        deadline = time.monotonic() + 3 * guard.interval + 5
        while d.guarded(inst, name) != (True, True) and time.monotonic() < deadline:
            time.sleep(0.5)
        held = d.guarded(inst, name)
        if held != (True, True):
            sc.fail(f"scale-down grace: while TrainJob {ref[1]} runs on {name} the controller does not hold it: annotated "
                    f"{SCALE_DOWN_DISABLED}: {held[0]}, instance {inst['InstanceId']} protected from scale-in: {held[1]} "
                    f"({guard.proc.tail(3) if guard.proc else ''})")
    if not d.end(*ref):
        return False
    ended = time.monotonic()
    let_go: dict[str, float] = {}  # annotation / protection -> seconds after the job ended that the controller let go

    def gone() -> bool:
        if guard is not None and len(let_go) < 2:
            now = time.monotonic() - ended
            for what, on in zip(("annotation", "protection"), d.guarded(inst, name)):
                if not on:
                    let_go.setdefault(what, now)
        return not d.pool_instances(pool) and not d.pool_nodes(pool)

    extra = part + 3 * guard.interval if guard is not None else 0
    if not d.until(f"scale-down: idle node {name} of {inst['group']} removed and instance {inst['InstanceId']} terminated",
                   gone, timeout=t.grace_seconds + 120 + extra):
        if guard is not None and len(let_go) < 2:
            sc.fail(f"scale-down grace: the controller never let {name} go ({time.monotonic() - ended:.0f}s after the job "
                    f"ended; its part is {part:g}s): still " + " and ".join(
                        w for w in (f"annotated {SCALE_DOWN_DISABLED}", f"{inst['InstanceId']} protected from scale-in")
                        if ("annotation" if w.startswith("annotated") else "protection") not in let_go))
        return False
    gone_after = time.monotonic() - ended
    downs = [e for e in d.events() if e.kind == "scale-down" and e.group == inst["group"]]
    terminated, problem = d.instance_deleted(inst)
    sc.details.append(f"scale-down: {downs[-1].text if downs else 'none logged'}, {gone_after:.0f}s after the job ended (grace "
                      f"{total:.0f}s); {terminated}")
    if guard is not None:
        released = max(let_go.values())
        sc.details.append(
            f"scale-down grace: {total:g}s on the drill's clock, the stack's {promise:g}s in two parts: the scale-in protection "
            f"controller kept {name} annotated {SCALE_DOWN_DISABLED} and {inst['InstanceId']} protected from scale-in for "
            f"{released:.0f}s after the job ended (its part {part:g}s, GRACE_SECONDS {planned:g} in the plan, run with "
            f"{guard.grace:g}; annotation removed after {let_go['annotation']:.0f}s, protection after "
            f"{let_go['protection']:.0f}s), then the autoscaler removed the node {gone_after - released:.0f}s later (its part "
            f"{t.grace_seconds}s: scaledownunneededtime {tag:g}s in the plan)")
        if released < part - 1:
            sc.fail(f"scale-down grace: the controller let {name} go {released:.0f}s after the job ended, before its part "
                    f"of the grace ({part:g}s: the stack's {promise:g}s less the autoscaler's {tag:g}s)")
        elif released > part + 2 * guard.interval + 5:
            sc.fail(f"scale-down grace: the controller held {name} {released:.0f}s after the job ended, past its part of "
                    f"the grace ({part:g}s): the idle node outlives the stack's grace")
        if gone_after - released < t.grace_seconds - 1:
            sc.fail(f"scale-down grace: the autoscaler removed {name} {gone_after - released:.0f}s after the controller let "
                    f"go, before its part of the grace ({t.grace_seconds}s)")
    if gone_after < total - 1:
        sc.fail(f"scale-down: the idle node went {gone_after:.0f}s after the job ended, before the grace of {total:.0f}s")
    if not downs and not problem:
        problem = ("the node went, but the autoscaler logged no scale-down through TerminateInstanceInAutoScalingGroup "
                   "(something else removed it)")
    if problem:
        sc.fail(f"scale-down: {problem}")
    return True


def _multi_gpu_pool(d: AwsDrill) -> Optional[tuple[str, int]]:
    """The first pool whose nodes have 4 or more GPUs and whose groups may hold two nodes: (pool, GPUs per node)."""
    for pool in d.pools:
        groups = [g for g in d.groups.values() if g.pool == pool]
        gpus = min(int(parse_quantity(g.template_node()["resources"].get(GPU_RESOURCE, 0))) for g in groups)
        if gpus >= 4 and sum(int(g.asg["maxSize"]) for g in groups) >= 2:
            return pool, gpus
    return None


def half_used_nodes_kept(d: AwsDrill, job: dict) -> bool:
    """Two nodes of a multi-GPU pool whose training pods use at most half their GPUs, each with room for the
    other's pod: the autoscaler's simulation could move either pod, so only what protects a running trainer
    (the runtime's safe-to-evict "false") keeps its node (cluster-autoscaler FAQ, "What types of pods can
    prevent CA from removing a node?"). Kept: concluded when the autoscaler says so for both nodes
    ("cannot be removed: pod annotated as not safe to evict present"); evicted: a training pod gone or its
    node removed. aws-prod's l4x4 (g6.12xlarge, 4 GPUs, a group in each of two zones)."""
    sc, t = d.sc, d.timing
    found = _multi_gpu_pool(d)
    if found is None:
        sc.details.append("half-used nodes: no pool of nodes with 4 or more GPUs and room for two: not drilled")
        return True
    pool, gpus = found
    half = gpus // 2
    pinned = _pinned(job, pool)
    refs: dict[str, tuple[str, str]] = {}
    share = {"m": half, "f": gpus - half, "s": 1}
    for key, n in share.items():
        ref = d.submit(pinned, f"rehearsal-autoscale-{key}", gpus=n)
        if ref is None:
            return False
        refs[key] = ref
    ns = refs["m"][0]
    if _scale_from_zero(d, f"half-used nodes: TrainJobs of {half}, {gpus - half} and 1 GPU(s) pinned to {pool} running on "
                           f"new nodes of {pool}", ns, [f"{r[1]}-" for r in refs.values()],
                        lambda: pool if all(_bound_pool(d, *r) == pool for r in refs.values()) else None) is None:
        return False
    where = {k: d.pods_of(*r)[0]["spec"]["nodeName"] for k, r in refs.items()}
    if len(set(where.values())) != 2:
        sc.fail(f"half-used nodes: the jobs landed on {sorted(set(where.values()))}: not the two nodes the phase needs")
        return False
    # End a job whose node holds another: the two left run on two nodes, each at or below half its GPUs.
    gone = next(k for k in ("f", "m") if any(where[o] == where[k] for o in refs if o != k))
    kept = [k for k in refs if k != gone]
    mark = len(d.autoscaler.text())
    if not d.end(*refs[gone]):
        return False
    watched = {p["metadata"]["uid"]: (p["metadata"]["name"], p["spec"]["nodeName"]) for k in kept for p in d.pods_of(*refs[k])}
    busy = sorted({node for _, node in watched.values()})
    sc.details.append(f"half-used nodes: {', '.join(f'{where[k]} runs TrainJob {refs[k][1]}' for k in kept)} "
                      f"({' and '.join(str(share[k]) for k in kept)} of {gpus} GPUs): both at or below the "
                      "autoscaler's 0.5 utilisation threshold (eligibility.go), each with room for the other's pod")
    started = time.monotonic()
    evicted, blocked = "", {}
    while time.monotonic() - started < t.busy_watch_seconds + t.grace_seconds:
        running = {p["metadata"]["uid"] for k in kept for p in d.pods_of(*refs[k]) if not p["metadata"].get("deletionTimestamp")}
        nodes = {n["metadata"]["name"] for n in d.pool_nodes(pool)}
        evicted = next((f"after {time.monotonic() - started:.0f}s training pod {name} was evicted from {node}"
                        + ("" if node in nodes else f" and {node} removed")
                        for uid, (name, node) in watched.items() if uid not in running or node not in nodes), "")
        if evicted:
            break
        text = d.autoscaler.text()[mark:]
        blocked = {n: m[-1] for n in busy if (m := re.findall(rf"Node {re.escape(n)} cannot be removed: ([^\n]*)", text))}
        if len(blocked) == len(busy) and all(NOT_SAFE_TO_EVICT in why for why in blocked.values()):
            break
        time.sleep(1)
    if evicted:
        said = d.autoscaler_said(rf"Scale-down: removing node (?:{'|'.join(map(re.escape, busy))})[^\n]*")
        sc.fail(f"half-used nodes: {evicted} (the autoscaler: {said[-1] if said else 'nothing logged'}): nothing protects a "
                "running trainer from scale-down")
        return False
    reasons = "; ".join(f"Node {n} cannot be removed: {why}" for n, why in blocked.items()) or "none logged"
    sc.details.append(f"half-used nodes: {busy} and their training pods kept ({time.monotonic() - started:.0f}s after the "
                      f"{share[gone]}-GPU TrainJob {refs[gone][1]} ended, grace {t.grace_seconds}s); the autoscaler's reasons: {reasons}")
    for k in kept:
        if not d.end(*refs[k]):
            return False
    return _back_to_zero(d, f"half-used nodes: {pool} back at zero after the jobs ended", [pool])


def never_joins_then_restart(d: AwsDrill, job: dict) -> None:
    """A node that never joins: moto launches the instance, its kubelet never registers. At the join deadline
    (--max-node-provision-time) the autoscaler gives the scale-up up and removes the long-unregistered node
    (static_autoscaler.go removeOldUnregisteredNodes -> AwsNodeGroup.DeleteNodes -> asgCache.DeleteInstances:
    TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity), then scales up again. Its second
    instance is held booting while the autoscaler is killed (SIGKILL) and started again: the restarted one
    counts the booting instance (no other SetDesiredCapacity), the instance joins, the TrainJob binds; moto's
    instances and desired capacities agree with the nodes (nothing leaked, nothing doubled); after the job
    every group is back at zero."""
    sc, t = d.sc, d.timing
    d.bridge.refuse_next = True
    d.bridge.booting = False  # the recovery instance boots only once the restarted autoscaler has looked at it
    try:
        ref = d.submit(job, "rehearsal-autoscale-b")
        if ref is None:
            return
        started = time.monotonic()
        seen: dict[str, Any] = {}

        def recovered() -> bool:
            if not d.bridge.never_join:
                return False
            iid, group = next(iter(d.bridge.never_join.items()))
            pool = d.groups[group].pool
            live = [(i, g) for g, st in d.pool_groups(pool).items() for i in st["instances"]]
            seen.update(lost=iid, group=group, pool=pool, live=live)
            return iid not in {i for i, _ in live} and bool(live)

        if not d.until("never joined: the instance that never registered removed at the join deadline and its pool scaled up again",
                       recovered, timeout=t.join_deadline_seconds + 150):
            return
        lost, group, pool = seen["lost"], seen["group"], seen["pool"]
        state = d.moto.instances([lost]).get(lost, {}).get("State", {}).get("Name")
        timed_out = [e.text for e in d.events() if e.group == group and e.kind in ("scale-up timed out", "unregistered removed")]
        terminated = d.autoscaler_said(rf"Terminated instance {re.escape(lost)} in autoscaling group: [^\n]*")
        sc.details.append(f"never joined: instance {lost} of {group} launched, never registered; at the join deadline "
                          f"({t.join_deadline_seconds}s) the autoscaler: {'; '.join(timed_out) or 'nothing logged'}; "
                          f"{terminated[-1] if terminated else 'no TerminateInstanceInAutoScalingGroup logged'}; moto: {lost} {state}; "
                          f"{pool} scaled up again ({', '.join(f'{i} in {g}' for i, g in seen['live'])}) "
                          f"{time.monotonic() - started:.0f}s after the TrainJob")
        if not terminated or state != "terminated":
            sc.fail(f"never joined: instance {lost} is {state} and the autoscaler logged "
                    f"{'no' if not terminated else 'a'} TerminateInstanceInAutoScalingGroup for it")

        # The autoscaler killed while its second scale-up is in flight (the instance launched, not yet a node).
        before = d.pool_groups(pool)
        in_flight = [i for st in before.values() for i in st["instances"]]
        d.autoscaler.kill()
        if not d.start_autoscaler(f"restart: killed (SIGKILL) while its scale-up ({', '.join(in_flight)}: launched, not yet "
                                  "a node) was in flight, started again"):
            return
        if not d.loops(2):
            sc.fail("restart: the restarted autoscaler stopped running its loop")
        after = d.pool_groups(pool)
        if {g: (st["desired"], st["instances"]) for g, st in after.items()} != {g: (st["desired"], st["instances"]) for g, st in before.items()}:
            sc.fail(f"restart: the restarted autoscaler changed {pool}'s groups while {in_flight} was still booting: "
                    f"{ {g: st['desired'] for g, st in before.items()} } -> { {g: st['desired'] for g, st in after.items()} }")
    finally:
        d.bridge.booting = True
    if not d.until(f"restart: TrainJob {ref[0]}/{ref[1]} bound to {pool} after the restart", lambda: _bound_pool(d, *ref) == pool,
                   timeout=t.join_deadline_seconds + 90):
        return
    d.loops(2)  # settled: what the restarted autoscaler does next is in moto now
    groups, strays = d.pool_groups(pool), d.stray_instances()
    shown = {g: st for g, st in groups.items() if st["desired"] or st["instances"] or st["nodes"]}
    sc.details.append(f"after the restart: {pool}'s groups (desired capacity, instances, nodes): "
                      + "; ".join(f"{g}: {st['desired']}, {st['instances']}, {st['nodes']}" for g, st in shown.items())
                      + f"; EC2 instances outside any group: {strays or 'none'}")
    total = sum(len(st["instances"]) for st in groups.values())
    wrong = [g for g, st in groups.items() if not st["desired"] == len(st["instances"]) == len(st["nodes"])]
    if wrong or total != 1 or strays:
        sc.fail(f"restart: moto and the nodes disagree: {total} instance(s) of {pool} for one pending pod; groups whose "
                f"desired capacity, instances and nodes differ: {wrong or 'none'}; instances outside any group: {strays or 'none'}")
    if not d.end(*ref) or not _back_to_zero(d, "every GPU group back at zero", list(d.pools)):
        return
    left = {g: st["desired"] for g, st in ((g, st) for p in d.pools for g, st in d.pool_groups(p).items()) if st["desired"]}
    running = d.stray_instances() + [i for p in d.pools for st in d.pool_groups(p).values() for i in st["instances"]]
    sc.details.append(f"every GPU group back at zero: desired capacity {left or 0}, instances running in moto: {running or 'none'}")
    if left or running:
        sc.fail(f"back at zero: moto's groups want {left} and run {running}")


def scale_from_zero_and_back(d: AwsDrill, job: dict) -> None:
    """The shipped drill (every aws-prod rehearsal): the chart's RBAC alone (never synced) and the program's
    (synced); a Katib trial's TrainJob (with its metrics collector's ephemeral storage) scales a group from
    zero, binds and runs on a node in the instance's zone, guarded by the stack's scale-in protection controller;
    its busy node outlives the grace; after the job ends the controller keeps the node for its part of the grace,
    lets go, and the autoscaler removes it after its part, its instance terminated through
    TerminateInstanceInAutoScalingGroup."""
    d.chart_rbac_alone()
    if not d.start_autoscaler("sync with the program's RBAC") or not d.start_protection():
        return
    got = katib_trial_from_zero(d, job)
    if got is None:
        return
    ref, pool, inst, node = got
    name = node["metadata"]["name"]
    d.busy_node_kept(ref, pool, [name], name, lambda e: name in e.text)
    job_ends_node_goes(d, ref, pool, inst, name)


def notebook_half_used_never_joins_restart(d: AwsDrill, job: dict) -> None:
    """The extended drill (its own scenario, run by the tests on the shared aws-prod cluster: about six more
    minutes, which would take aws-prod's `--rehearse` past preflight's default --timeout on a loaded
    machine): a GPU notebook's pod scales its pool from zero; two half-used multi-GPU nodes keep their
    trainers; a node that never joins is removed at the join deadline and the pool recovers through a restart
    of the autoscaler mid-scale-up; every group back at zero."""
    if not d.start_autoscaler("sync with the program's RBAC"):
        return
    if not gpu_notebook_from_zero(d):
        return
    if not half_used_nodes_kept(d, job):
        return
    never_joins_then_restart(d, job)


def katib_trial_only(d: AwsDrill, job: dict) -> None:
    """The drill's first scale-up alone (the planted template tests): sync, then a Katib trial from zero."""
    if d.start_autoscaler("sync with the program's RBAC"):
        katib_trial_from_zero(d, job)


def grace_only(d: AwsDrill, job: dict) -> None:
    """The scale-down grace alone (the planted controller tests): sync, the controller, a Katib trial from zero,
    the job ends, the node goes after the grace's two parts."""
    if not d.start_autoscaler("sync with the program's RBAC") or not d.start_protection():
        return
    got = katib_trial_from_zero(d, job)
    if got is not None:
        ref, pool, inst, node = got
        job_ends_node_goes(d, ref, pool, inst, node["metadata"]["name"])


def half_used_only(d: AwsDrill, job: dict) -> None:
    """The half-used multi-GPU phase alone (the planted safe-to-evict test)."""
    if d.start_autoscaler("sync with the program's RBAC"):
        half_used_nodes_kept(d, job)


# --- the entry points ------------------------------------------------------------------------------------


def run_drill(ctx: Any, sc: Any, phases=scale_from_zero_and_back, timing: Optional[Timing] = None,
              extra_rbac: bool = True, plant: Optional[Callable[[list[PlannedGroup]], None]] = None) -> Any:
    """Fills scenario `sc` with `phases` of the drill on `ctx` (an EKS stack's rehearsal). `plant` changes the
    plan's groups before moto gets them (a test's planted defect in what the cloud holds, e.g. a tag)."""
    import tempfile

    t = timing or Timing()
    try:
        groups = planned_groups(getattr(ctx, "plan", None)) if ctx.model.cloud == "aws" else []
    except (KeyError, ValueError) as exc:
        sc.fail(f"the plan's Auto Scaling groups: {exc}")
        return sc
    if plant is not None and groups:
        groups = copy.deepcopy(groups)
        plant(groups)
    if not groups:
        sc.details.append("the stack has no autoscaled EKS GPU group (no Auto Scaling group to drill)")
        return sc
    with tempfile.TemporaryDirectory(prefix="rehearsal-autoscale-aws-") as tmp:
        work = Path(tmp)
        logs = next((Path(c.proc.log).parent for c in ctx.controllers.values() if getattr(c, "proc", None)), None)
        AwsDrill(ctx, sc, groups, work, (logs / sc.name) if logs else work / "logs", t, extra_rbac).run(phases)
    return sc


def eks_autoscaling(ctx: Any, sc: Any, timing: Optional[Timing] = None) -> Any:
    return run_drill(ctx, sc, scale_from_zero_and_back, timing)


EXTENDED_TITLE = ("EKS autoscaling beyond the first scale-up: a GPU notebook from zero, half-used 4-GPU nodes kept, a node "
                  "that never joins, the autoscaler killed mid-scale-up (the real cluster-autoscaler against moto)")


def eks_autoscaling_extended(ctx: Any, sc: Any, timing: Optional[Timing] = None) -> Any:
    return run_drill(ctx, sc, notebook_half_used_never_joins_restart, timing)
