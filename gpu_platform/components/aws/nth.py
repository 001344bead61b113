"""Spot interruption handling: aws-node-termination-handler in queue-processor mode.

EventBridge sends ASG terminate lifecycle actions, instance state changes and scheduled health
events to an SQS queue (SSE); the handler cordons and drains the node before it goes (training pods
get SIGTERM and their own termination grace period to write a checkpoint, the queue requeues their
jobs), then completes the lifecycle action.

- The GPU groups do not use capacity rebalancing (gpu_asg.CAPACITY_REBALANCE says why), so the
  Spot-interruption rule is in: NTH cordons and drains the node on the two-minute interruption notice.
  The rebalance-recommendation rule stays out: a recommendation is a risk, not a notice, and NTH
  (queue-processor mode) would cordon and drain every node it names (NTH README, "Queue Processor").
  With capacity rebalancing on, the group handles both, so both rules are left out.
- While it drains NTH renews the lifecycle hook with heartbeats (queue-processor mode only), so the
  hook outlives the trainers' checkpoint grace; its own drain timeout (nodeTerminationGracePeriod)
  covers that grace too. A Spot interruption itself still ends the instance two minutes after the
  warning: no heartbeat extends that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import cloudwatch, iam, sqs

from gpu_platform.data import aws_versions as versions
from gpu_platform.components.aws.gpu_asg import NTH_MANAGED_TAG
from gpu_platform.components.helm import helm_release
from gpu_platform.components.aws.iam import irsa_role, policy, statement

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
# Redundant when the groups rebalance capacity themselves (see the module docstring).
REBALANCED_BY_ASG = ("spot-interruption", "rebalance")
# Never drained on: a rebalance recommendation is not an interruption.
NOT_DRAINED_ON = ("rebalance",)

# NTH's accepted ranges (pkg/config/config.go at v1.25.6) and EC2 Auto Scaling's lifecycle hook limits.
HEARTBEAT_INTERVAL_RANGE = (30, 3600)
HEARTBEAT_UNTIL_RANGE = (60, 172800)
HOOK_TIMEOUT_RANGE = (30, 7200)
GLOBAL_TIMEOUT_SECONDS = 172800  # an instance waits at most 48 h or 100 x the hook timeout
DRAIN_MARGIN_SECONDS = 60  # eviction calls, kubelet's kill after the grace, volume detach
HEARTBEAT_INTERVAL_SECONDS = 60
HOOK_TIMEOUT_SECONDS = 300  # if NTH dies mid-drain, the instance goes on (CONTINUE) after this


def event_rules(capacity_rebalance: bool) -> dict[str, dict]:
    """The EventBridge rules to create: without rebalance recommendations, and without the Spot
    interruption warning too when the group itself rebalances capacity."""
    if not capacity_rebalance:
        return {role: pattern for role, pattern in EVENT_RULES.items() if role not in NOT_DRAINED_ON}
    return {role: pattern for role, pattern in EVENT_RULES.items() if role not in REBALANCED_BY_ASG}


@dataclass(frozen=True)
class TerminationTiming:
    pod_grace_seconds: int  # the longest terminationGracePeriodSeconds a draining pod gets (checkpoint time)
    drain_timeout_seconds: int  # NTH nodeTerminationGracePeriod: its drain gives up after this
    heartbeat_interval_seconds: int  # NTH heartbeatInterval
    heartbeat_until_seconds: int  # NTH heartbeatUntil
    hook_timeout_seconds: int  # the ASG lifecycle hook's heartbeat timeout

    @property
    def longest_wait_seconds(self) -> int:
        """How long a terminating instance can wait for NTH: heartbeats, then one more hook timeout."""
        return self.heartbeat_until_seconds + self.hook_timeout_seconds


def termination_timing(pod_grace_seconds: int) -> TerminationTiming:
    """Heartbeats from the lifecycle event until the drain is over; the drain itself allows the pods'
    grace plus a margin. Checked against NTH's and Auto Scaling's limits."""
    drain = pod_grace_seconds + DRAIN_MARGIN_SECONDS
    timing = TerminationTiming(pod_grace_seconds, drain, HEARTBEAT_INTERVAL_SECONDS,
                               drain + HEARTBEAT_INTERVAL_SECONDS, HOOK_TIMEOUT_SECONDS)
    lo, hi = HEARTBEAT_UNTIL_RANGE
    if not lo <= timing.heartbeat_until_seconds <= hi or \
            timing.longest_wait_seconds > min(GLOBAL_TIMEOUT_SECONDS, 100 * timing.hook_timeout_seconds):
        raise ValueError(f"a drain grace of {pod_grace_seconds}s does not fit the lifecycle hook's limits")
    return timing


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
    """Least privilege: read/delete on its queue, complete and heartbeat lifecycle actions on the GPU
    groups only (heartbeats: RecordLifecycleActionHeartbeat, and DescribeLifecycleHooks to check the
    hook's timeout, pkg/monitor/sqsevent/asg-lifecycle-event.go), and the read-only describes (which
    IAM cannot scope to a resource)."""
    return policy(
        statement(["sqs:ReceiveMessage", "sqs:DeleteMessage"], [queue_arn], sid="Queue"),
        statement(["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"], list(asg_arns),
                  sid="LifecycleOnGpuGroups"),
        statement(["autoscaling:DescribeAutoScalingInstances", "autoscaling:DescribeLifecycleHooks", "autoscaling:DescribeTags",
                   "ec2:DescribeInstances"], "*", sid="Describe"),
    )


def helm_values(queue_url: str, region: str, role_arn: str, timing: TerminationTiming) -> dict:
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
        "nodeTerminationGracePeriod": timing.drain_timeout_seconds,  # the drain's timeout (node.go: drain helper Timeout)
        "heartbeatInterval": timing.heartbeat_interval_seconds,
        "heartbeatUntil": timing.heartbeat_until_seconds,
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
    timing: TerminationTiming
    capacity_rebalance: bool  # the GPU groups rebalance capacity themselves (gpu_asg.CAPACITY_REBALANCE)


class NodeTerminationHandler(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeTerminationHandlerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:NodeTerminationHandler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        queue = sqs.Queue(f"{name}-queue", message_retention_seconds=300, sqs_managed_sse_enabled=True, tags=tags, opts=child)
        rules = []
        for role, pattern in event_rules(args.capacity_rebalance).items():
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
        values = pulumi.Output.all(queue.url, role.arn).apply(lambda a: helm_values(a[0], args.region, a[1], args.timing))
        self.release = helm_release(f"{name}-release", versions.NTH, NAMESPACE, values,
                                    pulumi.ResourceOptions(parent=self, provider=args.k8s_provider),
                                    release_name="aws-node-termination-handler", atomic=True)
        self.queue_url = queue.url
        self.register_outputs({"queueUrl": queue.url, "queueArn": queue.arn})
