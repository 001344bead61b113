"""Rules every cloud's check shares: pool capacities the cloud offers, deprecated system-pool keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.config.base import NAMESPACE, ConfigIssue

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig


def pool_issue_capacity(cfg: "StackConfig", allowed: tuple[str, ...], why: str) -> list[ConfigIssue]:
    """Shared by the cloud checks: every pool's capacity must be one the cloud offers."""
    return [
        ConfigIssue(f"gpuPools[{i}].capacity", p.capacity, f"one of {', '.join(allowed)} ({why})")
        for i, p in enumerate(cfg.gpu_pools)
        if p.capacity not in allowed
    ]


def system_pool_warnings(cfg: "StackConfig") -> list[str]:
    """One warning per deprecated system-pool key the stack file uses, naming the key that replaces it."""
    renamed = getattr(cfg.cloud_section, "_system_pool_renamed", None) or ()
    return [f"{NAMESPACE}:{old} is deprecated and will be refused in the next release: write {NAMESPACE}:{new} "
            f"(one system-pool shape on every cloud: systemPool {{instanceType, minNodes, maxNodes}}, as in gpuPools)"
            for old, new in renamed]
