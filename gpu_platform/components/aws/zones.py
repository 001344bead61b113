"""How a node pool is split over zones on EKS: one Auto Scaling group (or managed node group) per zone."""

from __future__ import annotations

from typing import Sequence


def zonal_groups(min_nodes: int, max_nodes: int, zones: Sequence[str]) -> list[tuple[str, int, int]]:
    """(zone, minSize, maxSize) of a pool's groups, one per zone, whose sizes add up to the pool's.

    Why one group per zone: cluster-autoscaler plans a new node of a multi-zone group as if it were
    in one zone, so a pod bound to a zonal EBS volume (a notebook's home, the hub database) may wait
    forever or get a node in the wrong zone; its AWS README prescribes "an ASG-per-AZ while enabling
    --balance-similar-node-groups" (cloudprovider/aws/README.md, Common Notes and Gotchas), which
    the autoscaler here runs with (autoscaler.py). The split keeps the pool's totals exact (quota,
    cost and policy see the same numbers): the first zones get the remainder, and a zone whose
    share of maxNodes is 0 gets no group (a pool with fewer maxNodes than zones lives in its first
    maxNodes zones)."""
    if not zones:
        raise ValueError("a node pool needs at least one zone")
    n = len(zones)
    out = []
    for i, zone in enumerate(zones):
        hi = max_nodes // n + (1 if i < max_nodes % n else 0)
        lo = min_nodes // n + (1 if i < min_nodes % n else 0)
        if hi > 0:
            out.append((zone, min(lo, hi), hi))
    return out
