"""The catalog a stack's instance types are sized and priced from.

The price catalog (gpu_platform/costs/catalog) with the stack's priceOverrides, or, on a cluster the stack does not
create (cloud kubernetes), the price catalog plus the stack's own node types (kubernetes.nodeTypes). Reads the stack
config by its attributes (cloud, kubernetes, catalog_overrides): the model's `stack_catalog()` calls this, so it
imports no module that imports the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_platform.costs.catalog import Catalog


def stack_catalog(cfg: Any) -> "Catalog":
    """The price catalog with the stack's priceOverrides; on cloud kubernetes, the price catalog plus the stack's own
    node types (kubernetes.nodeTypes, priced by their usdPerHour only, dated today: the stack file is their source)."""
    from gpu_platform.config.kubernetes import node_type_instances
    from gpu_platform.costs.catalog import OWN_NODES, load_catalog
    from gpu_platform.data.versions_calendar import today

    if cfg.cloud == OWN_NODES:
        base = load_catalog()
        section = getattr(cfg, "kubernetes", None)
        own = node_type_instances(section, base, today().isoformat()) if section is not None else {}
        return base.with_instances(OWN_NODES, own)
    return load_catalog(cfg.catalog_overrides() or None)
