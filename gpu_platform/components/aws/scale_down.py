"""How long an idle GPU node lives: the protection controller's grace and cluster-autoscaler's
scale-down-unneeded-time, composed so that together they make the stack's grace period once.

The two clocks run one after the other, not side by side: while the controller holds a node
(busy, or idle within its grace) the node carries `cluster-autoscaler.kubernetes.io/scale-down-disabled`,
and cluster-autoscaler does not even start counting it as unneeded; the autoscaler's own
unneeded-time starts when the controller lets go. Setting both to the grace period (as this
project once did) keeps an idle node about twice the grace period. So the GPU groups get a short
unneeded-time of their own (the per-ASG tag
`k8s.io/cluster-autoscaler/node-template/autoscaling-options/scaledownunneededtime`, documented in
the autoscaler's AWS README and read in cloudprovider/aws/aws_manager.go of the tags
cluster-autoscaler-1.33.6 and -1.36.1) and the controller keeps the rest of the grace period.

Pure: no Pulumi, no AWS. Used by gpu_asg (the tag), protection (the controller's GRACE_SECONDS) and
the tests that play both loops against each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The autoscaler's share of the grace on GPU groups: long enough for a few scans (10 s each by
# default) to confirm the node is empty, and to absorb a pod bound just after the controller let go.
AUTOSCALER_GPU_UNNEEDED_SECONDS = 120
CONTROLLER_INTERVAL_SECONDS = 30
AUTOSCALER_SCAN_INTERVAL_SECONDS = 10  # cluster-autoscaler's --scan-interval default (not overridden here)
UNNEEDED_TIME_TAG = "k8s.io/cluster-autoscaler/node-template/autoscaling-options/scaledownunneededtime"


@dataclass(frozen=True)
class ScaleDownTiming:
    grace_seconds: int  # what the stack promises: an idle GPU node goes after this long
    controller_grace_seconds: int  # the controller keeps an idle node protected and annotated this long
    autoscaler_unneeded_seconds: int  # then cluster-autoscaler waits this long (per-ASG tag)
    controller_interval_seconds: int = CONTROLLER_INTERVAL_SECONDS
    scan_interval_seconds: int = AUTOSCALER_SCAN_INTERVAL_SECONDS

    @property
    def slack_seconds(self) -> int:
        """The most an idle node can outlive grace_seconds: the controller notices idleness at its next
        cycle, and the autoscaler starts and ends its count at scans."""
        return self.controller_interval_seconds + 2 * self.scan_interval_seconds

    def unneeded_tag_value(self) -> str:
        """A Go duration (time.ParseDuration), as the autoscaler's README writes it: 2m0s."""
        minutes, seconds = divmod(self.autoscaler_unneeded_seconds, 60)
        return f"{minutes}m{seconds}s"


def scale_down_timing(grace_seconds: int, controller_enabled: bool = True,
                      controller_interval_seconds: int = CONTROLLER_INTERVAL_SECONDS) -> ScaleDownTiming:
    """Split the grace period between the controller and the autoscaler so they add up to it.

    Without the controller the autoscaler's unneeded-time is the whole grace period."""
    if grace_seconds < 60:
        raise ValueError(f"grace period {grace_seconds}s: at least 60 s")
    if not controller_enabled:
        return ScaleDownTiming(grace_seconds, 0, grace_seconds, controller_interval_seconds)
    unneeded = min(AUTOSCALER_GPU_UNNEEDED_SECONDS, grace_seconds)
    return ScaleDownTiming(grace_seconds, grace_seconds - unneeded, unneeded, controller_interval_seconds)


def parse_go_duration(value: str) -> float:
    """The subset of Go's time.ParseDuration the tag uses (h, m, s), to read the rendered tag back."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", value)
    if not value or parts is None:
        raise ValueError(f"not a Go duration: {value!r}")
    h, m, s = parts.groups()
    return int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)
