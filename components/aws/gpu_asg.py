"""One GPU Auto Scaling Group per pool: launch template + mixed-instances ASG.

Rendering (nodeadm NodeConfig, the MIME user data, the CloudWatch agent script, the ASG tags) is
pure and tested directly; `GpuNodeGroup` only wires resources.

- AMI: the EKS-optimized AL2023 NVIDIA AMI (driver and container toolkit preinstalled), as
  `resolve:ssm:<public parameter>`: EC2 resolves it at each launch, so nodes of an ephemeral
  scale-from-zero pool always boot the current patched AMI for the cluster's Kubernetes version,
  the plan shows exactly which parameter is used, and the deployer needs no ssm:GetParameter.
- Nodes join with nodeadm (NodeConfig), carrying the pool's labels and the nvidia.com/gpu taint.
- Spot with price-capacity-optimized allocation over several instance types, capacity rebalancing,
  a termination lifecycle hook (completed by the node termination handler after draining), new
  instances protected from scale-in (the protection controller drops it once a node is idle).
- Tags the cluster-autoscaler reads to scale a pool up from zero (labels, taint, GPU count).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import yaml
from pulumi_aws import autoscaling, ec2

from components.aws import versions
from components.aws.eks import secure_launch_template_args
from components.cluster import GPU_TAINT, GpuPoolSpec, Taint

MIME_BOUNDARY = "==GPU-PLATFORM-BOUNDARY=="
NTH_MANAGED_TAG = "aws-node-termination-handler/managed"
LIFECYCLE_HOOK = "nth-drain-on-terminate"
LIFECYCLE_HEARTBEAT_SECONDS = 300
CW_AGENT_CONFIG_PATH = "/opt/aws/amazon-cloudwatch-agent/etc/gpu-platform.json"
GPU_UTIL_METRIC = "nvidia_smi_utilization_gpu"
GPU_METRIC_NAMESPACE = "CWAgent"


def asg_name(cluster_name: str, pool: str) -> str:
    """Deterministic, so alarms and the protection controller can name the group before it exists."""
    return f"{cluster_name}-gpu-{pool}"


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


def autoscaler_tags(cluster_name: str, spec: GpuPoolSpec) -> dict[str, str]:
    """Auto-discovery plus the node-template tags that let cluster-autoscaler scale from zero: it
    cannot read labels, taints or GPUs from a node that does not exist yet."""
    prefix = "k8s.io/cluster-autoscaler/node-template"
    tags = {"k8s.io/cluster-autoscaler/enabled": "true", f"k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
    tags.update({f"{prefix}/label/{k}": v for k, v in spec.node_labels.items()})
    tags.update({f"{prefix}/taint/{t.key}": f"{t.value}:{t.effect}" for t in spec.taints})
    tags[f"{prefix}/resources/nvidia.com/gpu"] = str(spec.gpus_per_node)
    return tags


def pool_tags(spec: GpuPoolSpec, approved_on_demand: bool) -> dict[str, str]:
    """What the policy pack and cost reports read on a GPU group."""
    return {"gpu-pool": spec.name, "capacity": spec.capacity,
            "on-demand-approved": "true" if approved_on_demand else "false"}


def asg_tag_list(common: Mapping[str, str], cluster_name: str, spec: GpuPoolSpec, approved_on_demand: bool) -> list[dict]:
    """All ASG tags. Owner/pool tags and the NTH/cluster-ownership tags propagate to instances;
    autoscaler tags stay on the group."""
    propagated = {**common, **pool_tags(spec, approved_on_demand), "Name": f"{asg_name(cluster_name, spec.name)}",
                  f"kubernetes.io/cluster/{cluster_name}": "owned", NTH_MANAGED_TAG: "true"}
    out = [{"key": k, "value": v, "propagate_at_launch": True} for k, v in propagated.items()]
    out += [{"key": k, "value": v, "propagate_at_launch": False} for k, v in autoscaler_tags(cluster_name, spec).items()]
    if len(out) > 50:
        raise ValueError(f"{len(out)} tags on {asg_name(cluster_name, spec.name)}; an ASG holds at most 50")
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
    depends_on: Optional[Sequence[pulumi.Resource]] = None


class GpuNodeGroup(pulumi.ComponentResource):
    """Outputs: asg_name, asg_arn."""

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:GpuNodeGroup", name, None, opts)
        spec = args.spec
        group = asg_name(args.cluster_name, spec.name)
        instance_tags = {**args.tags, **pool_tags(spec, args.approved_on_demand), "Name": group}
        script = render_cloudwatch_agent_script()
        user_data = pulumi.Output.all(args.endpoint, args.ca_data, args.service_cidr).apply(
            lambda a: base64.b64encode(render_user_data(
                render_nodeadm_config(args.cluster_name, a[0], a[1], a[2], spec.node_labels, spec.taints), script
            ).encode()).decode())

        lt = ec2.LaunchTemplate(
            f"{name}-launch-template",
            description=f"GPU pool {spec.name} of {args.cluster_name}",
            image_id=f"resolve:ssm:{versions.gpu_ami_parameter(args.kubernetes_version)}",
            iam_instance_profile={"arn": args.instance_profile_arn},
            vpc_security_group_ids=[args.security_group_id],
            user_data=user_data,
            **secure_launch_template_args(args.root_volume_gib, instance_tags),
            opts=pulumi.ResourceOptions(parent=self),
        )
        asg = autoscaling.Group(
            f"{name}-asg",
            name=group,
            min_size=spec.min_nodes,
            max_size=spec.max_nodes,
            vpc_zone_identifiers=list(args.subnet_ids),
            capacity_rebalance=True,
            protect_from_scale_in=True,
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
                "heartbeat_timeout": LIFECYCLE_HEARTBEAT_SECONDS,
            }],
            enabled_metrics=["GroupDesiredCapacity", "GroupInServiceInstances", "GroupPendingInstances",
                             "GroupTerminatingInstances", "GroupTotalInstances"],
            tags=asg_tag_list(args.tags, args.cluster_name, spec, args.approved_on_demand),
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on or []),
                                        # The cluster-autoscaler owns the desired size.
                                        ignore_changes=["desiredCapacity"]),
        )
        self.asg_name = asg.name
        self.asg_arn = asg.arn
        self.register_outputs({"asgName": asg.name, "asgArn": asg.arn, "launchTemplateId": lt.id})
