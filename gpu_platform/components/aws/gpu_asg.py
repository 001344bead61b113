"""One GPU Auto Scaling Group per pool: launch template + mixed-instances ASG.

Rendering (nodeadm NodeConfig, the MIME user data, the CloudWatch agent script, the ASG tags) is
pure and tested directly; `GpuNodeGroup` only wires resources.

- AMI: the EKS-optimized AL2023 NVIDIA AMI (driver and container toolkit preinstalled), as
  `resolve:ssm:<public parameter>`: EC2 resolves it at each launch, so nodes of an ephemeral
  scale-from-zero pool always boot the current patched AMI for the cluster's Kubernetes version,
  the plan shows exactly which parameter is used, and the deployer needs no ssm:GetParameter.
- Nodes join with nodeadm (NodeConfig), carrying the pool's labels and the nvidia.com/gpu taint.
- Spot with price-capacity-optimized allocation over several instance types, no capacity
  rebalancing and AZRebalance suspended (see CAPACITY_REBALANCE), a termination lifecycle hook (completed by the node termination handler after draining, which
  renews it with heartbeats meanwhile), new instances protected from scale-in when the protection
  controller runs (it drops the protection once a node is idle).
- Tags the cluster-autoscaler reads to scale a pool up from zero (labels, taint, GPU count, the
  accelerator label) and the group's own scale-down-unneeded-time (gpu_platform/components/aws/scale_down.py).
- The accelerator label `k8s.amazonaws.com/accelerator` on the node from its first registration:
  cluster-autoscaler's AWS provider treats a node with that label as a GPU node that is not ready
  until its GPUs are allocatable, so it does not launch more nodes for the same pending pod while
  the device plugin starts ("Special note on GPU instances", cluster-autoscaler's AWS README).
- IMDSv2 with a hop limit of 1: pods on the pod network cannot reach the node's instance role;
  nodeadm, kubelet, the CloudWatch agent and host-network add-ons (VPC CNI) run in the host's
  network namespace, one hop away. Pods use IRSA.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi
import yaml
from pulumi_aws import autoscaling, ec2

from gpu_platform.config.base import approval_tags
from gpu_platform.config.names import asg_name
from gpu_platform.data import aws_versions as versions
from gpu_platform.components.aws.eks import secure_launch_template_args
from gpu_platform.components.aws.scale_down import UNNEEDED_TIME_TAG
from gpu_platform.components.cluster import GpuPoolSpec, Taint, toolkit_isolation_command

MIME_BOUNDARY = "==GPU-PLATFORM-BOUNDARY=="
NTH_MANAGED_TAG = "aws-node-termination-handler/managed"
LIFECYCLE_HOOK = "nth-drain-on-terminate"
# No capacity rebalancing on GPU groups: with it, every EC2 rebalance recommendation (an elevated
# risk, most of which never become an interruption) makes the group launch a replacement and then
# terminate the busy node through the lifecycle hook, so a training job is drained, evicted and
# restarted from its last checkpoint for nothing (the work since that checkpoint lost). Instead the node is drained
# only on the Spot interruption notice (two minutes: the trainer gets SIGTERM and checkpoints at its
# current step) or when the group itself terminates it. The termination handler's rules follow
# (nth.event_rules: interruption warnings in, rebalance recommendations out).
CAPACITY_REBALANCE = False
# AZRebalance terminates instances to even out zones after a scale-in or a zone outage: on a GPU group
# that is a busy training node killed without any Spot event. cluster-autoscaler's AWS README ("Common
# Notes and Gotchas") names suspending it; the autoscaler balances zones at scale-up instead.
SUSPENDED_PROCESSES = ("AZRebalance",)
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# Every AWS GPU model of the catalog (gpu_platform/costs/catalog/aws.yaml gpuModel; a test keeps them covered)
# -> the name cluster-autoscaler's AWS provider lists for it (availableGPUTypes in
# cloudprovider/aws/aws_cloud_provider.go, tag cluster-autoscaler-1.36.1). The autoscaler needs only
# the label's presence; the value names the GPU in its metrics and GPU limits. H100 is not in its
# list and gets the same pattern.
ACCELERATOR_VALUES = {
    "NVIDIA A10G": "nvidia-a10g",
    "NVIDIA L4": "nvidia-l4",
    "NVIDIA L40S": "nvidia-l40s",
    "NVIDIA V100 16GB": "nvidia-tesla-v100",
    "NVIDIA V100 32GB": "nvidia-tesla-v100",
    "NVIDIA A100 40GB": "nvidia-tesla-a100",
    "NVIDIA H100 80GB": "nvidia-h100",
}
# Pods on the pod network are two hops from IMDS; the host (nodeadm, kubelet, agents) one.
GPU_IMDS_HOP_LIMIT = 1
CW_AGENT_CONFIG_PATH = "/opt/aws/amazon-cloudwatch-agent/etc/gpu-platform.json"
GPU_UTIL_METRIC = "nvidia_smi_utilization_gpu"
GPU_METRIC_NAMESPACE = "CWAgent"


def accelerator_value(gpu_model: str) -> str:
    """The `k8s.amazonaws.com/accelerator` value for a catalog GPU model."""
    if gpu_model in ACCELERATOR_VALUES:
        return ACCELERATOR_VALUES[gpu_model]
    raise ValueError(f"no accelerator label value for GPU model {gpu_model!r}; add it to "
                     f"gpu_platform/components/aws/gpu_asg.ACCELERATOR_VALUES ({', '.join(sorted(ACCELERATOR_VALUES))})")


def node_labels(spec: GpuPoolSpec, extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """Every label a GPU node of this pool registers with (also the autoscaler's template labels); `extra`:
    the group's own (its subnet in an existing VPC, cluster.SUBNET_LABEL)."""
    return {**spec.node_labels, **(extra or {}), ACCELERATOR_LABEL: accelerator_value(spec.gpu_model)}


def gpu_launch_template_args(root_volume_gib: int, tags: Mapping[str, str]) -> dict:
    """The shared hardened launch-template settings with the GPU nodes' IMDS hop limit of 1."""
    args = secure_launch_template_args(root_volume_gib, tags)
    args["metadata_options"] = {**args["metadata_options"], "http_put_response_hop_limit": GPU_IMDS_HOP_LIMIT}
    return args


def render_nodeadm_config(cluster_name: str, endpoint: str, ca_data: str, service_cidr: str,
                          labels: Mapping[str, str], taints: Sequence[Taint]) -> str:
    """The nodeadm NodeConfig (AL2023) that joins a node to the cluster with labels and taints."""
    doc = {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {"name": cluster_name, "apiServerEndpoint": endpoint, "certificateAuthority": ca_data,
                        "cidr": service_cidr},
            "kubelet": {
                "config": {"registerWithTaints": [t.as_k8s() for t in taints]},
                "flags": ["--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))],
            },
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def render_cloudwatch_agent_config(metrics_interval: int = 60) -> dict:
    """CloudWatch agent: per-GPU utilisation from nvidia-smi, also aggregated per Auto Scaling group
    (the dimension the idle-GPU alarm watches)."""
    return {
        "agent": {"metrics_collection_interval": metrics_interval, "run_as_user": "root"},
        "metrics": {
            "namespace": GPU_METRIC_NAMESPACE,
            "append_dimensions": {"AutoScalingGroupName": "${aws:AutoScalingGroupName}", "InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["AutoScalingGroupName"]],
            "metrics_collected": {"nvidia_gpu": {
                "measurement": ["utilization_gpu", "utilization_memory", "memory_used", "memory_total"],
                "metrics_collection_interval": metrics_interval,
            }},
        },
    }


def render_cloudwatch_agent_script() -> str:
    """Shell part of the user data (run by cloud-init): install and start the CloudWatch agent."""
    config = json.dumps(render_cloudwatch_agent_config(), indent=2)
    return f"""#!/bin/bash
# GPU utilisation metrics for the idle-GPU alarms (CloudWatch agent, nvidia_gpu plugin).
set -euo pipefail
dnf install -y {versions.CLOUDWATCH_AGENT_PACKAGE}
install -d -m 0755 "$(dirname {CW_AGENT_CONFIG_PATH})"
cat > {CW_AGENT_CONFIG_PATH} <<'JSON'
{config}
JSON
/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c file:{CW_AGENT_CONFIG_PATH}
"""


def render_gpu_node_script() -> str:
    """Shell part of the user data (cloud-init): the AMI's NVIDIA container toolkit hands a pod only the
    GPUs the device plugin allocated it (components/cluster.py DEVICE_LIST_STRATEGY; the toolkit's
    defaults honour an unprivileged pod's own NVIDIA_VISIBLE_DEVICES=all), then the CloudWatch agent."""
    return ("#!/bin/bash\nset -euo pipefail\n"
            "# A pod sees only the GPUs it was allocated (components/cluster.py DEVICE_LIST_STRATEGY).\n"
            f"{toolkit_isolation_command()}\n"
            + render_cloudwatch_agent_script().split("\n", 1)[1])


def render_user_data(nodeadm_config: str, shell_script: str) -> str:
    """MIME multipart user data: nodeadm reads the application/node.eks.aws part, cloud-init runs the script."""
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n'
        "\n"
        f"--{MIME_BOUNDARY}\n"
        "Content-Type: application/node.eks.aws\n"
        "\n"
        f"{nodeadm_config}"
        "\n"
        f"--{MIME_BOUNDARY}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n'
        "\n"
        f"{shell_script}"
        "\n"
        f"--{MIME_BOUNDARY}--\n"
    )


# nodeadm's kubelet defaults on the AL2023 EKS AMIs (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go
# @ e48b98ad: kubeReserved ephemeral-storage "1Gi", evictionHard nodefs.available "10%").
NODEADM_KUBE_RESERVED_EPHEMERAL_GIB = 1
NODEADM_NODEFS_EVICTION_PERCENT = 10
# The root filesystem is a little smaller than its volume (partition table, XFS metadata): one GiB of margin.
ROOT_FILESYSTEM_MARGIN_GIB = 1


def template_ephemeral_storage_gib(root_volume_gib: int) -> int:
    """The ephemeral storage a GPU node of the group can give pods (its Node Allocatable), in GiB, rounded
    down: the root volume less the filesystem's margin, nodeadm's kubeReserved and the nodefs eviction share."""
    fs = root_volume_gib - ROOT_FILESYSTEM_MARGIN_GIB
    return max(0, fs - NODEADM_KUBE_RESERVED_EPHEMERAL_GIB - -(-fs * NODEADM_NODEFS_EVICTION_PERCENT // 100))


def autoscaler_tags(cluster_name: str, spec: GpuPoolSpec, unneeded_time: str,
                    extra_labels: Optional[Mapping[str, str]] = None,
                    root_volume_gib: Optional[int] = None) -> dict[str, str]:
    """Auto-discovery plus the node-template tags that let cluster-autoscaler scale from zero (it
    cannot read labels, taints, GPUs or disk from a node that does not exist yet), and the group's
    scale-down-unneeded-time (a Go duration, see gpu_platform/components/aws/scale_down.py).
    Ephemeral storage: cluster-autoscaler 1.35's AWS template node has none unless this tag gives it
    (cloudprovider/aws aws_manager.go), so a pod asking any (Katib's metrics collector asks 500Mi) never
    scaled a group from zero."""
    prefix = "k8s.io/cluster-autoscaler/node-template"
    tags = {"k8s.io/cluster-autoscaler/enabled": "true", f"k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
    tags.update({f"{prefix}/label/{k}": v for k, v in node_labels(spec, extra_labels).items()})
    tags.update({f"{prefix}/taint/{t.key}": f"{t.value}:{t.effect}" for t in spec.taints})
    tags[UNNEEDED_TIME_TAG] = unneeded_time
    tags[f"{prefix}/resources/nvidia.com/gpu"] = str(spec.gpus_per_node)
    if root_volume_gib is not None:
        tags[f"{prefix}/resources/ephemeral-storage"] = f"{template_ephemeral_storage_gib(root_volume_gib)}Gi"
    return tags


def pool_tags(spec: GpuPoolSpec, approved_on_demand: bool, zone: Optional[str] = None) -> dict[str, str]:
    """What the policy pack and cost reports read on a GPU group (the pool's groups share `gpu-pool`)."""
    return {"gpu-pool": spec.name, "capacity": spec.capacity, **({"gpu-pool-zone": zone} if zone else {}),
            **approval_tags(approved_on_demand, "aws")}  # with approver and reason (policy pack)


def asg_tag_list(common: Mapping[str, str], cluster_name: str, spec: GpuPoolSpec, approved_on_demand: bool,
                 unneeded_time: str, zone: Optional[str] = None,
                 extra_labels: Optional[Mapping[str, str]] = None,
                 root_volume_gib: Optional[int] = None) -> list[dict]:
    """All ASG tags. Owner/pool tags and the NTH/cluster-ownership tags propagate to instances;
    autoscaler tags stay on the group."""
    propagated = {**common, **pool_tags(spec, approved_on_demand, zone), "Name": f"{asg_name(cluster_name, spec.name, zone)}",
                  f"kubernetes.io/cluster/{cluster_name}": "owned", NTH_MANAGED_TAG: "true"}
    out = [{"key": k, "value": v, "propagate_at_launch": True} for k, v in propagated.items()]
    out += [{"key": k, "value": v, "propagate_at_launch": False}
            for k, v in autoscaler_tags(cluster_name, spec, unneeded_time, extra_labels, root_volume_gib).items()]
    if len(out) > 50:
        raise ValueError(f"{len(out)} tags on {asg_name(cluster_name, spec.name, zone)}; an ASG holds at most 50")
    return out


@dataclass
class GpuNodeGroupArgs:
    cluster_name: str
    kubernetes_version: str
    spec: GpuPoolSpec
    instance_types: Sequence[str]
    on_demand_base: int
    on_demand_pct_above_base: int
    approved_on_demand: bool
    root_volume_gib: int
    subnet_ids: Sequence[pulumi.Input[str]]
    security_group_id: pulumi.Input[str]
    instance_profile_arn: pulumi.Input[str]
    endpoint: pulumi.Input[str]
    ca_data: pulumi.Input[str]
    service_cidr: pulumi.Input[str]
    tags: Mapping[str, str]
    # The group's cluster-autoscaler scale-down-unneeded-time (scale_down.ScaleDownTiming.unneeded_tag_value()).
    scale_down_unneeded_time: str
    # New instances protected from scale-in: only with the protection controller, which releases them.
    protect_from_scale_in: bool
    # Termination lifecycle hook timeout; NTH's heartbeats renew it while it drains (nth.TerminationTiming).
    lifecycle_hook_timeout_seconds: int
    depends_on: Optional[Sequence[pulumi.Resource]] = None
    # The group's zone (its subnet_ids are that zone's) and its share of the pool's size (zonal_groups).
    zone: Optional[str] = None
    min_size: Optional[int] = None
    max_size: Optional[int] = None
    # Labels of this group's nodes beyond the pool's (its subnet in an existing VPC: cluster.SUBNET_LABEL).
    extra_node_labels: Mapping[str, str] = field(default_factory=dict)


class GpuNodeGroup(pulumi.ComponentResource):
    """Outputs: asg_name, asg_arn."""

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:GpuNodeGroup", name, None, opts)
        spec = args.spec
        group = asg_name(args.cluster_name, spec.name, args.zone)
        instance_tags = {**args.tags, **pool_tags(spec, args.approved_on_demand, args.zone), "Name": group}
        script = render_gpu_node_script()
        user_data = pulumi.Output.all(args.endpoint, args.ca_data, args.service_cidr).apply(
            lambda a: base64.b64encode(render_user_data(
                render_nodeadm_config(args.cluster_name, a[0], a[1], a[2], node_labels(spec, args.extra_node_labels),
                                      spec.taints), script
            ).encode()).decode())

        lt = ec2.LaunchTemplate(
            f"{name}-launch-template",
            description=f"GPU pool {spec.name} of {args.cluster_name}" + (f", zone {args.zone}" if args.zone else ""),
            image_id=f"resolve:ssm:{versions.gpu_ami_parameter(args.kubernetes_version)}",
            iam_instance_profile={"arn": args.instance_profile_arn},
            vpc_security_group_ids=[args.security_group_id],
            user_data=user_data,
            **gpu_launch_template_args(args.root_volume_gib, instance_tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        asg = autoscaling.Group(
            f"{name}-asg",
            name=group,
            min_size=spec.min_nodes if args.min_size is None else args.min_size,
            max_size=spec.max_nodes if args.max_size is None else args.max_size,
            vpc_zone_identifiers=list(args.subnet_ids),
            capacity_rebalance=CAPACITY_REBALANCE,
            suspended_processes=list(SUSPENDED_PROCESSES),
            protect_from_scale_in=args.protect_from_scale_in,
            health_check_type="EC2",
            health_check_grace_period=300,
            default_instance_warmup=300,
            mixed_instances_policy={
                "instances_distribution": {
                    "on_demand_base_capacity": args.on_demand_base,
                    "on_demand_percentage_above_base_capacity": args.on_demand_pct_above_base,
                    "on_demand_allocation_strategy": "lowest-price",
                    "spot_allocation_strategy": "price-capacity-optimized",
                },
                "launch_template": {
                    "launch_template_specification": {"launch_template_id": lt.id, "version": "$Latest"},
                    "overrides": [{"instance_type": t} for t in args.instance_types],
                },
            },
            initial_lifecycle_hooks=[{
                "name": LIFECYCLE_HOOK,
                "lifecycle_transition": "autoscaling:EC2_INSTANCE_TERMINATING",
                "default_result": "CONTINUE",
                "heartbeat_timeout": args.lifecycle_hook_timeout_seconds,
            }],
            enabled_metrics=["GroupDesiredCapacity", "GroupInServiceInstances", "GroupPendingInstances",
                             "GroupTerminatingInstances", "GroupTotalInstances"],
            tags=asg_tag_list(args.tags, args.cluster_name, spec, args.approved_on_demand, args.scale_down_unneeded_time,
                              args.zone, args.extra_node_labels, args.root_volume_gib),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on or []),
                                        # The cluster-autoscaler owns the desired size.
                                        ignore_changes=["desiredCapacity"]),
        )
        self.asg_name = asg.name
        self.asg_arn = asg.arn
        self.register_outputs({"asgName": asg.name, "asgArn": asg.arn, "launchTemplateId": lt.id})
