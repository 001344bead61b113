"""Spot interruption handling: aws-node-termination-handler in queue-processor mode.

EventBridge sends spot interruption warnings, rebalance recommendations, ASG terminate lifecycle
actions, instance state changes and scheduled health events to an SQS queue (SSE); the handler
cordons and drains the node before it goes (training pods get SIGTERM and write a checkpoint, the
queue requeues their jobs), then completes the lifecycle action.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import cloudwatch, iam, sqs

from components.aws import versions
from components.aws.gpu_asg import NTH_MANAGED_TAG
from components.aws.iam import irsa_role, policy, statement

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-node-termination-handler"

# role -> EventBridge event pattern (the five rules the handler's documentation lists).
EVENT_RULES: dict[str, dict] = {
    "asg-terminate": {"source": ["aws.autoscaling"], "detail-type": ["EC2 Instance-terminate Lifecycle Action"]},
    "spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "state-change": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
    "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"],
                         "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}},
}


def queue_policy(queue_arn: str, rule_arns: Sequence[str]) -> dict:
    """Only these EventBridge rules may send to the queue."""
    return policy({
        "Sid": "EventBridgeRules",
        "Effect": "Allow",
        "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": list(rule_arns)}},
    })


def handler_policy(queue_arn: str, asg_arns: Sequence[str]) -> dict:
    """Least privilege: read/delete on its queue, complete lifecycle actions on the GPU groups only,
    and the read-only describes (which IAM cannot scope to a resource)."""
    return policy(
        statement(["sqs:ReceiveMessage", "sqs:DeleteMessage"], [queue_arn], sid="Queue"),
        statement(["autoscaling:CompleteLifecycleAction"], list(asg_arns), sid="LifecycleOnGpuGroups"),
        statement(["autoscaling:DescribeAutoScalingInstances", "autoscaling:DescribeTags", "ec2:DescribeInstances"], "*",
                  sid="Describe"),
    )


def helm_values(queue_url: str, region: str, role_arn: str) -> dict:
    return {
        "enableSqsTerminationDraining": True,
        "queueURL": queue_url,
        "awsRegion": region,
        "checkTagBeforeDraining": True,
        "managedTag": NTH_MANAGED_TAG,
        "deleteSqsMsgIfNodeNotFound": True,
        "taintNode": True,
        "emitKubernetesEvents": True,
        "podTerminationGracePeriod": -1,  # the pod's own grace period: time to write a checkpoint
        "nodeTerminationGracePeriod": 120,
        "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT, "annotations": {"eks.amazonaws.com/role-arn": role_arn}},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "nodeSelector": {"gpu-platform.io/role": "system"},
    }


@dataclass
class NodeTerminationHandlerArgs:
    cluster_name: str
    region: str
    asg_arns: Sequence[pulumi.Input[str]]
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer_url: pulumi.Input[str]
    k8s_provider: k8s.Provider
    tags: Mapping[str, str]


class NodeTerminationHandler(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeTerminationHandlerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:NodeTerminationHandler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        queue = sqs.Queue(f"{name}-queue", message_retention_seconds=300, sqs_managed_sse_enabled=True, tags=tags, opts=child)
        rules = []
        for role, pattern in EVENT_RULES.items():
            rule = cloudwatch.EventRule(f"{name}-{role}", description=f"{args.cluster_name}: {role} -> node termination handler",
                                        event_pattern=json.dumps(pattern), tags=tags, opts=child)
            cloudwatch.EventTarget(f"{name}-{role}-target", rule=rule.name, arn=queue.arn, opts=child)
            rules.append(rule)
        sqs.QueuePolicy(f"{name}-queue-policy", queue_url=queue.url,
                        policy=pulumi.Output.all(queue.arn, *[r.arn for r in rules]).apply(
                            lambda a: json.dumps(queue_policy(a[0], a[1:]))), opts=child)

        role = irsa_role(f"{name}-role", args.oidc_provider_arn, args.oidc_issuer_url, NAMESPACE, SERVICE_ACCOUNT, tags, child)
        iam.RolePolicy(f"{name}-role-policy", role=role.id,
                       policy=pulumi.Output.all(queue.arn, *args.asg_arns).apply(lambda a: json.dumps(handler_policy(a[0], a[1:]))),
                       opts=child)
        values = pulumi.Output.all(queue.url, role.arn).apply(lambda a: helm_values(a[0], args.region, a[1]))
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="aws-node-termination-handler",
            chart=versions.NTH_CHART,
            version=versions.NTH_CHART_VERSION,
            namespace=NAMESPACE,
            values=values,
            atomic=True,
            opts=pulumi.ResourceOptions(parent=self, provider=args.k8s_provider),
        )
        self.queue_url = queue.url
        self.register_outputs({"queueUrl": queue.url, "queueArn": queue.arn})
