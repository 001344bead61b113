"""Values the components derive from the whole stack: a pool's instance types and on-demand split on
AWS, deletion protection and the zones of each GPU pool on GKE. Pure functions of the config."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from gpu_platform.config.aws import AwsPool
from gpu_platform.config.catalog import stack_catalog  # noqa: F401 (re-exported: the components import it from here)
from gpu_platform.config.gcp import PRODUCTION_ENVIRONMENTS, GcpSection, pool_zones

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog


def instance_types_of(cfg: "StackConfig", pool_index: int) -> list[str]:
    """The pool's instance types in launch-template override order: main type first."""
    pool = cfg.gpu_pools[pool_index]
    extra = cfg.aws.pool(pool.name).instance_types if cfg.aws else []
    return [pool.instance_type] + [t for t in extra if t != pool.instance_type]


def on_demand_split(cfg: "StackConfig", pool_index: int) -> tuple[int, int]:
    """(OnDemandBaseCapacity, OnDemandPercentageAboveBaseCapacity) for the pool's ASG."""
    pool = cfg.gpu_pools[pool_index]
    extra = cfg.aws.pool(pool.name) if cfg.aws else AwsPool()
    if pool.capacity == "on-demand":
        return extra.on_demand_base_capacity, 100
    pct = extra.on_demand_percentage_above_base
    return extra.on_demand_base_capacity, 0 if pct is None else pct


def gke_node_minor_floor(cfg: "StackConfig") -> Optional[str]:
    """The oldest Kubernetes minor the stack's GKE nodes can run: kubernetesVersion when pinned (GKE's
    minimum), else the oldest minor the release channel can still run today (the version calendar:
    Rapid/Regular/Stable upgrade a cluster at the end of standard support, Extended keeps it to the end of
    extended support). Before issue 33 item 9 an unpinned stack planned no Spot shutdown grace at all."""
    from gpu_platform.data.versions_calendar import oldest_running_minor

    if cfg.kubernetes_version_pinned:
        return cfg.kubernetes_version
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    return oldest_running_minor("gcp", extended=section.release_channel == "EXTENDED")


def effective_deletion_protection(cfg: "StackConfig") -> bool:
    """deletionProtection as configured; unset, it is on for prod/production environments."""
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    if section.deletion_protection is not None:
        return section.deletion_protection
    return cfg.environment in PRODUCTION_ENVIRONMENTS


def gpu_pool_zone_map(cfg: "StackConfig", catalog: "Catalog") -> dict[str, list[str]]:
    """Pool name -> the zones its nodes run in (see pool_zones)."""
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    return {p.name: pool_zones(section, catalog.instance("gcp", p.instance_type)) for p in cfg.gpu_pools}

