"""Billing guardrails: an AWS Budget for this stack's own spend (actual and forecast notifications), CloudWatch
alarms on the account's estimated charges at every quarter of the monthly budget (account-wide: created by the
one stack per account that sets `aws.accountBilling: true`), and idle-GPU alarms.

The stack budget counts only costs tagged with the stack's `cluster` tag (every resource the stack creates
carries it), so two stacks in one account each watch their own spend. AWS Budgets see a tag only after it is
activated as a cost allocation tag (Billing console, Cost allocation tags, `cluster`; up to 24 hours).

AWS publishes `AWS/Billing EstimatedCharges` only in us-east-1 (and only after "Receive Billing
Alerts" is enabled in the account's billing preferences), so the billing alarms and their SNS topic
live there, through a us-east-1 provider. Alerts go to an SNS topic encrypted with a customer-managed
KMS key whose policy lets CloudWatch and Budgets publish (the AWS-managed SNS key does not).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_aws as aws
from pulumi_aws import budgets, cloudwatch, kms, sns

from gpu_platform.components.aws.gpu_asg import GPU_METRIC_NAMESPACE, GPU_UTIL_METRIC
from gpu_platform.components.aws.iam import partition
from gpu_platform.components.cluster import CLUSTER_LABEL

BILLING_REGION = "us-east-1"
STACK_TAG_KEY = CLUSTER_LABEL  # the tag every resource of the stack carries (components/cluster.common_labels)
BILLING_PERCENTS = (25, 50, 75, 100)
FORECAST_PERCENT = 100
IDLE_PERIOD_SECONDS = 300


def billing_thresholds(monthly_budget_usd: float) -> list[tuple[int, float]]:
    """(percent, USD) for each billing alarm."""
    return [(p, round(monthly_budget_usd * p / 100, 2)) for p in BILLING_PERCENTS]


def budget_notifications(topic_arn: pulumi.Input[str]) -> list[dict]:
    actual = [{"comparison_operator": "GREATER_THAN", "notification_type": "ACTUAL", "threshold": float(p),
               "threshold_type": "PERCENTAGE", "subscriber_sns_topic_arns": [topic_arn]} for p in BILLING_PERCENTS]
    forecast = [{"comparison_operator": "GREATER_THAN", "notification_type": "FORECASTED", "threshold": float(FORECAST_PERCENT),
                 "threshold_type": "PERCENTAGE", "subscriber_sns_topic_arns": [topic_arn]}]
    return actual + forecast


def stack_cost_filter(tag_value: str) -> list[dict]:
    """Budget cost filter: only costs carrying the stack's cost allocation tag (user:<key>$<value>)."""
    return [{"name": "TagKeyValue", "values": [f"user:{STACK_TAG_KEY}${tag_value}"]}]


def alerts_key_policy(account_id: str, part: str) -> dict:
    """The account administers the key; CloudWatch alarms and Budgets may use it to publish."""
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "AccountAdmin", "Effect": "Allow", "Principal": {"AWS": f"arn:{part}:iam::{account_id}:root"},
         "Action": "kms:*", "Resource": "*"},
        {"Sid": "AlarmAndBudgetPublishers", "Effect": "Allow",
         "Principal": {"Service": ["cloudwatch.amazonaws.com", "budgets.amazonaws.com"]},
         "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*",
         "Condition": {"StringEquals": {"aws:SourceAccount": account_id}}},
    ]}


def topic_policy(topic_arn: str, account_id: str) -> dict:
    return {"Version": "2012-10-17", "Statement": [
        {"Sid": "AccountOwner", "Effect": "Allow", "Principal": {"AWS": "*"},
         "Action": ["SNS:GetTopicAttributes", "SNS:SetTopicAttributes", "SNS:Subscribe", "SNS:Publish",
                    "SNS:ListSubscriptionsByTopic", "SNS:DeleteTopic"],
         "Resource": topic_arn, "Condition": {"StringEquals": {"AWS:SourceOwner": account_id}}},
        {"Sid": "AlarmAndBudgetPublishers", "Effect": "Allow",
         "Principal": {"Service": ["cloudwatch.amazonaws.com", "budgets.amazonaws.com"]},
         "Action": "SNS:Publish", "Resource": topic_arn,
         "Condition": {"StringEquals": {"aws:SourceAccount": account_id}}},
    ]}


def idle_evaluation_periods(idle_minutes: int) -> int:
    return max(1, math.ceil(idle_minutes * 60 / IDLE_PERIOD_SECONDS))


@dataclass
class AlertTopicArgs:
    topic_name: str
    region: str
    emails: Sequence[str]
    tags: Mapping[str, str]


class AlertTopic(pulumi.ComponentResource):
    """An SSE-KMS SNS topic CloudWatch and Budgets can publish to, with the alert e-mails subscribed."""

    def __init__(self, name: str, args: AlertTopicArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:AlertTopic", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        part = partition(args.region)
        key = kms.Key(f"{name}-key", description=f"SNS topic {args.topic_name}", enable_key_rotation=True,
                      deletion_window_in_days=30, policy=account.apply(lambda a: json.dumps(alerts_key_policy(a, part))),
                      region=args.region, tags=dict(args.tags), opts=child)
        topic = sns.Topic(f"{name}-topic", name=args.topic_name, kms_master_key_id=key.arn, region=args.region,
                          tags=dict(args.tags), opts=child)
        sns.TopicPolicy(f"{name}-topic-policy", arn=topic.arn,
                        policy=pulumi.Output.all(topic.arn, account).apply(lambda a: json.dumps(topic_policy(a[0], a[1]))),
                        opts=child)
        for i, email in enumerate(args.emails):
            sns.TopicSubscription(f"{name}-email-{i}", topic=topic.arn, protocol="email", endpoint=email, opts=child)
        self.topic_arn: pulumi.Output[str] = topic.arn
        self.register_outputs({"topicArn": topic.arn})


@dataclass
class BillingAlertsArgs:
    name_prefix: str
    monthly_budget_usd: float
    emails: Sequence[str]
    tags: Mapping[str, str]
    stack_tag_value: str  # value of the stack's `cluster` tag: what the budget counts
    account_alarms: bool = True  # aws.accountBilling: the account-wide EstimatedCharges alarms


class BillingAlerts(pulumi.ComponentResource):
    """A monthly cost Budget for the stack's tagged spend (actual at 25/50/75/100 %, forecast at 100 %) and, with
    account_alarms, four EstimatedCharges alarms for the whole account; all to one SNS topic in us-east-1."""

    def __init__(self, name: str, args: BillingAlertsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:BillingAlerts", name, None, opts)
        provider = aws.Provider(f"{name}-{BILLING_REGION}", region=BILLING_REGION, opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, providers={"aws": provider})
        tags = dict(args.tags)
        topic = AlertTopic(f"{name}-alerts", AlertTopicArgs(f"{args.name_prefix}-billing-alerts", BILLING_REGION, args.emails, tags),
                           opts=child)
        self.alarms = []
        # EstimatedCharges has no per-stack dimension: these alarms watch the account, so only one stack makes them.
        for pct, usd in billing_thresholds(args.monthly_budget_usd) if args.account_alarms else ():
            self.alarms.append(cloudwatch.MetricAlarm(
                f"{name}-estimated-charges-{pct}pct",
                alarm_description=f"{args.name_prefix}: estimated charges this month reached {pct} % of the "
                                  f"{args.monthly_budget_usd:g} USD budget ({usd:g} USD)",
                namespace="AWS/Billing", metric_name="EstimatedCharges", dimensions={"Currency": "USD"},
                statistic="Maximum", period=21600, evaluation_periods=1, threshold=usd,
                comparison_operator="GreaterThanOrEqualToThreshold", treat_missing_data="notBreaching",
                alarm_actions=[topic.topic_arn], region=BILLING_REGION, tags=tags, opts=child))
        self.budget = budgets.Budget(
            f"{name}-budget", name=f"{args.name_prefix}-monthly", budget_type="COST", limit_amount=f"{args.monthly_budget_usd:.2f}",
            limit_unit="USD", time_unit="MONTHLY", cost_filters=stack_cost_filter(args.stack_tag_value),
            notifications=budget_notifications(topic.topic_arn), tags=tags, opts=child)
        self.register_outputs({"topicArn": topic.topic_arn})


@dataclass
class IdleGpuAlarmsArgs:
    name_prefix: str
    region: str
    asg_names: Mapping[str, pulumi.Input[str]]  # "<pool>-<zone>" -> ASG name (one group per pool and zone)
    idle_minutes: int
    util_percent: int
    emails: Sequence[str]
    tags: Mapping[str, str]


class IdleGpuAlarms(pulumi.ComponentResource):
    """One alarm per GPU group: average GPU utilisation (CloudWatch agent, nvidia_gpu) below the
    threshold for idleGpuMinutes. A group at zero nodes sends no data and stays quiet."""

    def __init__(self, name: str, args: IdleGpuAlarmsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:IdleGpuAlarms", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        topic = AlertTopic(f"{name}-alerts", AlertTopicArgs(f"{args.name_prefix}-idle-gpu-alerts", args.region, args.emails, tags),
                           opts=child)
        for pool, group in args.asg_names.items():
            cloudwatch.MetricAlarm(
                f"{name}-{pool}",
                alarm_description=f"{args.name_prefix}: GPUs of group {pool} averaged under {args.util_percent} % "
                                  f"for {args.idle_minutes} minutes; scale the pool in or stop the idle jobs",
                namespace=GPU_METRIC_NAMESPACE, metric_name=GPU_UTIL_METRIC, dimensions={"AutoScalingGroupName": group},
                statistic="Average", period=IDLE_PERIOD_SECONDS, evaluation_periods=idle_evaluation_periods(args.idle_minutes),
                threshold=float(args.util_percent), comparison_operator="LessThanThreshold", treat_missing_data="notBreaching",
                alarm_actions=[topic.topic_arn], ok_actions=[topic.topic_arn], tags=tags, opts=child)
        self.register_outputs({"topicArn": topic.topic_arn})
