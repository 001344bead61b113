"""Rules every cloud's check shares: pool capacities the cloud offers, deprecated system-pool keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from gpu_platform.config.base import NAMESPACE, ConfigIssue

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog


def pool_issue_capacity(cfg: "StackConfig", allowed: tuple[str, ...], why: str) -> list[ConfigIssue]:
    """Shared by the cloud checks: every pool's capacity must be one the cloud offers."""
    return [
        ConfigIssue(f"gpuPools[{i}].capacity", p.capacity, f"one of {', '.join(allowed)} ({why})")
        for i, p in enumerate(cfg.gpu_pools)
        if p.capacity not in allowed
    ]


def pool_region_issues(cfg: "StackConfig", catalog: "Catalog", region_key: str, region: str,
                       not_in_region: list[tuple[int, str, tuple[str, ...]]],
                       assert_hint: Optional[Callable[[str], str]] = None) -> list[ConfigIssue]:
    """Every pool whose type the stack's region lacks ((pool index, type, the type's regions) each), and,
    on the region key, the regions that offer all the pools' types together: one stack is one region, so
    a region offering only some of them is no way out."""
    if not not_in_region:
        return []
    offered = {p.instance_type: set(t.regions) for p in cfg.gpu_pools
               if (t := catalog.instance(cfg.cloud, p.instance_type)) is not None and t.is_gpu and t.regions is not None}
    types = sorted(offered)
    common = sorted(set.intersection(*offered.values())) if offered else []
    named = ", ".join(types[:-1]) + f" and {types[-1]}" if len(types) > 1 else types[0]
    issues = [ConfigIssue(region_key, region, f"a region offering {named} (every gpuPools type): "
                                              f"{', '.join(common) or 'none; change or drop a pool type'}")]
    issues += [ConfigIssue(f"gpuPools[{i}].instanceType", itype,
                           f"a type offered in {region_key} ({region}); {itype} is offered in: {', '.join(regions)}"
                           + (assert_hint(itype) if assert_hint else ""))
               for i, itype, regions in not_in_region]
    return issues


def system_pool_warnings(cfg: "StackConfig") -> list[str]:
    """One warning per deprecated system-pool key the stack file uses, naming the key that replaces it."""
    renamed = getattr(cfg.cloud_section, "_system_pool_renamed", None) or ()
    return [f"{NAMESPACE}:{old} is deprecated and will be refused in the next release: write {NAMESPACE}:{new} "
            f"(one system-pool shape on every cloud: systemPool {{instanceType, minNodes, maxNodes}}, as in gpuPools)"
            for old, new in renamed]
