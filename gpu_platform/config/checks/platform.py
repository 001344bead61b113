"""Cross-key rules of the `platform` section: a gpuQuota naming a pool that does not exist, e-mail
alerts without an SMTP relay, billing channels per cloud."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.config.base import ConfigIssue

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig


def check_stack(cfg: "StackConfig") -> list[ConfigIssue]:
    """Platform rules that need other keys of the stack config."""
    p = cfg.platform
    issues: list[ConfigIssue] = []
    pools = {pool.name for pool in cfg.gpu_pools}
    for pool_name, quota in p.gpu_quota.items():
        if pool_name not in pools:
            issues.append(ConfigIssue(f"platform.gpuQuota.{pool_name}", quota,
                                      f"a key naming one of gpuPools: {', '.join(sorted(pools))}"))
        elif quota < 0:
            issues.append(ConfigIssue(f"platform.gpuQuota.{pool_name}", quota, "a number of GPUs >= 0"))
    return issues


# Where each cloud's budget and billing alerts go without any SMTP relay (the cloud sends them).
CLOUD_BILLING_CHANNELS = {
    "aws": "AWS Budgets and CloudWatch billing alarms mail them through SNS",
    "gcp": "the GCP billing budget mails them through Cloud Monitoring e-mail channels",
    "linode": "Linode has no billing-alert API: the GPU spend run-rate rule in Prometheus is the only budget alert",
    "kubernetes": "on an existing cluster the GPU spend run-rate rule in Prometheus (with node prices) is the only "
                  "budget alert",
}


def reserved_alert_address_warnings(cfg: "StackConfig") -> list[str]:
    """An alert address in a name reserved for documentation (RFC 2606: the .example top-level domain and
    example.com, example.net, example.org) receives no mail: the budget and platform alerts sent there reach no
    one. A warning, the same for each of those names (the shipped stacks' example.com is a placeholder); .test,
    .invalid and .localhost are refused (config.approvals.email_problem)."""
    from gpu_platform.config.approvals import documentation_mail_domain

    out = []
    for i, address in enumerate(cfg.alert_emails):
        name = documentation_mail_domain(address)
        if name:
            out.append(f"alertEmails[{i}] {address}: {name} is reserved for documentation (RFC 2606) and receives no "
                       "mail, so the budget and platform alerts sent there reach no one; give your team's address")
    return out


def platform_warnings(cfg: "StackConfig") -> list[str]:
    """alertEmails without an SMTP relay is not a config error: on GCP and AWS the cloud's own budget and billing
    alerts do not need one. What is lost is mail from Alertmanager (idle GPUs, GPU spend run-rate, platform
    alerts), which this warning says, naming the key that restores it. On Linode and cloud kubernetes that mail is
    the only budget alert, and the policy pack's budget-alerts-required fails the stack (a mandatory guardrail,
    which a stack may lower only with a recorded exception, unlike a config error)."""
    p = cfg.platform
    if not (p.monitoring and cfg.alert_emails and p.alert_smtp is None):
        return []
    # On Linode and cloud kubernetes that is the only budget alert: the policy pack's budget-alerts-required fails
    # the stack (policies/cost_rules.py); this warning still says it where the pack does not run (--no-policies).
    pack = (" (the policy pack's budget-alerts-required fails such a stack)"
            if cfg.cloud in ("linode", "kubernetes") else "")
    return [f"platform.alertSmtp is not set: Alertmanager's alerts (idle GPUs, GPU spend run-rate, platform "
            f"health) reach no one; {CLOUD_BILLING_CHANNELS[cfg.cloud]}{pack}. Set platform.alertSmtp "
            "{smarthost: host:port, from: address} to mail them to alertEmails."]
