"""The `kubernetesVersion` rule, per cloud, from the dated version calendar (gpu_platform/data/versions_calendar.py).

- A stack may use a minor inside the cloud's standard support today.
- Within WARN_DAYS of the end of standard support preflight (and `pulumi up`) print a warning with the date.
- Past the end of standard support the stack is refused, unless it chooses the cloud's extended support
  explicitly (`aws.supportType: EXTENDED`, `gcp.releaseChannel: EXTENDED`); the error names the key, the end
  date and the choices. kubeadm (Linode) has no extended support: past upstream end of life it is refused.
- Unset, the version is the newest minor in standard support for the cloud (GKE: the release channel picks).
Pure: no Pulumi.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from gpu_platform.config.base import ConfigIssue
from gpu_platform.data.versions_calendar import WARN_DAYS, Calendar, DateLike, as_date, load_calendar

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig

KEY = "kubernetesVersion"
# How a stack opts into paid extended support, per cloud: (key as written in the stack file, value).
EXTENDED_OPT_IN = {"aws": ("aws.supportType", "EXTENDED"), "gcp": ("gcp.releaseChannel", "EXTENDED")}
CLOUD_NAMES = {"aws": "EKS", "gcp": "GKE", "linode": "upstream Kubernetes (kubeadm)",
               "kubernetes": "upstream Kubernetes"}


def extended_chosen(cfg: "StackConfig") -> bool:
    """Whether the stack explicitly chose the cloud's extended support."""
    if cfg.cloud == "aws" and cfg.aws is not None:
        return cfg.aws.support_type == "EXTENDED"
    if cfg.cloud == "gcp" and cfg.gcp is not None:
        return cfg.gcp.release_channel == "EXTENDED"
    return False


def version_issues(cfg: "StackConfig", on: DateLike = None, calendar: Optional[Calendar] = None) -> list[ConfigIssue]:
    """Errors for cfg.kubernetes_version on cfg.cloud on the day `on` (today by default)."""
    cal = calendar or load_calendar()
    day = as_date(on)
    cloud, minor = cfg.cloud, cfg.kubernetes_version
    name = CLOUD_NAMES[cloud]
    extended = extended_chosen(cfg)
    standard = cal.allowed_minors(cloud, day)
    choices = f"a minor in {name} standard support on {day.isoformat()}: {', '.join(standard) or 'none'}"
    row = cal.row(cloud, minor)
    if row is None:
        return [ConfigIssue(KEY, minor, f"{choices} (the version calendar, gpu_platform/costs/catalog/kubernetes-versions.yaml, "
                                        f"has no {name} row for {minor})")]
    state = row.status(day)
    if state == "standard":
        return []
    if state == "unreleased":
        return [ConfigIssue(KEY, minor, f"{choices} ({minor} is available for new {name} clusters from "
                                        f"{row.available.isoformat()})")]
    opt_in = EXTENDED_OPT_IN.get(cloud)
    if state == "extended":
        if extended:
            return []
        fee = cal.fees(cloud)
        price = f" at +${fee.extra_usd_per_hour:.2f} per cluster-hour" if fee else ""
        return [ConfigIssue(KEY, minor, f"{choices}; {minor} left standard support on {row.end_of_standard.isoformat()} "
                                        f"(extended support until {row.end_of_extended.isoformat()}{price}: set "
                                        f"{opt_in[0]}: {opt_in[1]} to choose it)")]  # type: ignore[index,union-attr]
    # unsupported
    ended = row.end_of_extended or row.end_of_standard
    with_ext = ""
    if opt_in is not None:
        also = [m for m in cal.allowed_minors(cloud, day, extended=True) if m not in standard]
        with_ext = f"; with {opt_in[0]}: {opt_in[1]} also {', '.join(also)}" if also else ""
    return [ConfigIssue(KEY, minor, f"{choices}{with_ext} ({minor} reached the end of {name} support on "
                                    f"{ended.isoformat()}; new clusters are refused)")]


def version_warnings(cfg: "StackConfig", on: DateLike = None, calendar: Optional[Calendar] = None) -> list[str]:
    """Warnings for a valid version: close to the end of standard support, or running in paid extended support."""
    cal = calendar or load_calendar()
    day = as_date(on)
    cloud, minor = cfg.cloud, cfg.kubernetes_version
    row = cal.row(cloud, minor)
    if row is None:
        return []
    name = CLOUD_NAMES[cloud]
    state = row.status(day)
    out: list[str] = []
    channel = getattr(cfg.gcp, "release_channel", None) if cloud == "gcp" else None
    if channel in ("RAPID", "STABLE") and getattr(cfg, "kubernetes_version_pinned", True):
        # The calendar holds Regular-channel availability; a minor enters Stable later and leaves Rapid earlier.
        out.append(f"{KEY} {minor} is checked against GKE's Regular channel (available there from "
                   f"{row.available.isoformat()}); gcp.releaseChannel is {channel}: if GKE refuses the version, "
                   "check the channel's available versions (`gcloud container get-server-config`) or unset the key")
    newer = [m for m in cal.allowed_minors(cloud, day) if _key(m) > _key(minor)]
    upgrade = f"upgrade to {' or '.join(newer)}" if newer else "upgrade when a newer minor is released"
    if state == "standard":
        days = row.days_to_end_of_standard(day)
        if days > WARN_DAYS:
            return out
        after = {"aws": "then EKS " + ("bills extended support" if extended_chosen(cfg)
                                       else "upgrades the control plane automatically (aws.supportType: STANDARD)"),
                 "gcp": "then GKE upgrades the cluster automatically" + (
                     "" if extended_chosen(cfg) else " (unless gcp.releaseChannel: EXTENDED)"),
                 "linode": "then upstream publishes no more patches",
                 "kubernetes": "then upstream publishes no more patches (your cluster's provider may support it "
                               "longer)"}[cloud]
        return out + [f"{KEY} {minor} leaves {name} standard support on {row.end_of_standard.isoformat()} "
                      f"(in {days} day(s)); {after}. Plan to {upgrade}."]
    if state == "extended":
        fee = cal.fees(cloud)
        price = f" (+${fee.extra_usd_per_hour:.2f} per cluster-hour)" if fee else ""
        return out + [f"{KEY} {minor} is in paid {name} extended support{price} until "
                      f"{row.end_of_extended.isoformat()}; {upgrade}."]  # type: ignore[union-attr]
    return out


def _key(minor: str) -> tuple[int, ...]:
    return tuple(int(x) for x in minor.split("."))


def extended_support_fee_per_hour(cfg: "StackConfig", on: DateLike = None) -> float:
    """What the stack's cluster pays per hour for extended support on the day (0 outside it)."""
    return load_calendar().extended_support_fee_per_hour(cfg.cloud, cfg.kubernetes_version, on)
