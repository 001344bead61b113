"""What a stack costs per month: the idle floor, full capacity, and $ per GPU-hour at full use.

Input is a plain `StackShape` (no Pulumi, no components import): the cloud, region, GPU pools with
min/max nodes, Linode's control-plane nodes, the system nodes and the price overrides.
`StackShape.from_config(cfg)` reads the lead's StackConfig by duck typing.

Model (730 hours a month):
- idle floor   = fixed parts (control plane nodes/fees, system nodes, NAT, load balancers)
                 + every GPU pool at minNodes, all month;
- full capacity = fixed parts + every GPU pool at maxNodes, all month;
- $/GPU-hour at full use = full capacity / (GPUs at maxNodes x 730).
Linode instances are billed hourly up to their monthly cap, so a Linode node-month costs
min(rate x 730, cap). Prices are the catalog's reference-region prices; a stack elsewhere gets a
warning, not a different number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from costs.catalog import HOURS_PER_MONTH, Catalog, InstanceType, Price, load_catalog


class EstimateError(ValueError):
    """The shape names something the catalog cannot price."""


@dataclass(frozen=True)
class PoolShape:
    name: str
    instance_type: str
    capacity: str  # on-demand | spot | preemptible
    min_nodes: int
    max_nodes: int


@dataclass(frozen=True)
class NodeGroup:
    """Non-GPU nodes that run all month (GKE/EKS system pool, Linode control plane)."""

    role: str
    instance_type: str
    count: int  # nodes at the idle floor
    capacity: str = "on-demand"
    max_count: Optional[int] = None  # nodes at full capacity (an autoscaled system pool); None = count

    @property
    def full_count(self) -> int:
        return self.count if self.max_count is None else max(self.max_count, self.count)


# Cloud defaults for the parts a stack file does not spell out. Overridable per StackShape.
DEFAULT_SYSTEM_NODES: dict[str, tuple[NodeGroup, ...]] = {
    "linode": (),  # kubeadm: platform pods run on the control-plane nodes, counted separately
    "gcp": (NodeGroup("system", "e2-standard-4", 1),),
    "aws": (NodeGroup("system", "m6i.large", 2),),
}


@dataclass(frozen=True)
class StackShape:
    cloud: str
    region: Optional[str]
    gpu_pools: tuple[PoolShape, ...]
    control_plane_type: Optional[str] = None  # Linode kubeadm control plane plan
    control_plane_count: int = 0
    system_nodes: Optional[tuple[NodeGroup, ...]] = None  # None = the cloud's default
    load_balancers: Optional[int] = None  # None = cloud default (Linode: a NodeBalancer for an HA control plane)
    nat_gateways: Optional[int] = None  # None = cloud default (GCP: 1 Cloud NAT, AWS: 1 NAT gateway)
    managed_control_plane: bool = True  # GKE/EKS cluster fee; False for bare VMs (e.g. the seed's AWS fleet)
    price_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    name: str = ""

    @classmethod
    def from_config(cls, cfg: Any) -> "StackShape":
        """Duck-typed read of components.config.StackConfig (or anything with the same attributes)."""
        cloud = cfg.cloud
        pools = tuple(PoolShape(p.name, p.instance_type, p.capacity, int(p.min_nodes), int(p.max_nodes))
                      for p in cfg.gpu_pools)
        section = getattr(cfg, cloud, None)
        region = getattr(section, "region", None)
        cp_type, cp_count = None, 0
        if cloud == "linode" and section is not None:
            cp = getattr(section, "control_plane", None)
            if cp is not None:
                cp_type, cp_count = cp.type, int(cp.count)
        system = _system_nodes_from(section)
        name = getattr(cfg, "name_prefix", "") or ""
        return cls(cloud=cloud, region=region, gpu_pools=pools, control_plane_type=cp_type,
                   control_plane_count=cp_count, system_nodes=system,
                   price_overrides=_overrides_from(cfg), name=str(name))


def _system_nodes_from(section: Any) -> Optional[tuple[NodeGroup, ...]]:
    """The system pool a cloud section describes: GCP `system_pool` (machine_type, min_nodes, max_nodes),
    AWS `system_nodes` (instance_type, min, max); anything else: the cloud default."""
    if section is None:
        return None
    sp = getattr(section, "system_pool", None) or getattr(section, "system_nodes", None)
    if sp is None:
        return None
    itype = getattr(sp, "machine_type", None) or getattr(sp, "instance_type", None)
    lo = next((v for v in (getattr(sp, a, None) for a in ("min_nodes", "min", "node_count", "count"))
               if isinstance(v, int)), None)
    hi = next((v for v in (getattr(sp, a, None) for a in ("max_nodes", "max")) if isinstance(v, int)), None)
    if not isinstance(itype, str) or lo is None:
        return None
    return (NodeGroup("system", itype, lo, max_count=hi),)


def _overrides_from(cfg: Any) -> dict[str, dict[str, Any]]:
    fn = getattr(cfg, "catalog_overrides", None)
    if callable(fn):
        return dict(fn() or {})
    raw = getattr(cfg, "price_overrides", None) or {}
    out: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        k = key if "/" in key else f"{cfg.cloud}/{key}"
        if hasattr(value, "model_dump"):
            value = value.model_dump(by_alias=True, exclude_none=True)
        elif not isinstance(value, Mapping):
            value = {yk: getattr(value, attr) for attr, yk in
                     (("on_demand", "onDemand"), ("spot", "spot"), ("preemptible", "preemptible"))
                     if getattr(value, attr, None) is not None}
        out[k] = dict(value)
    return out


@dataclass(frozen=True)
class CostLine:
    name: str  # e.g. "gpu pool a100 (a2-highgpu-1g, spot)"
    kind: str  # gpu-pool | control-plane | system | fixed
    resource: str  # instance type or fixed-cost key
    capacity: Optional[str]
    idle_quantity: float
    quantity: float  # at full capacity
    unit_usd_per_hour: float
    idle_monthly_usd: float
    monthly_usd: float  # at full capacity
    gpus_per_unit: int
    source: str
    date: str


@dataclass(frozen=True)
class Estimate:
    name: str
    cloud: str
    region: Optional[str]
    lines: tuple[CostLine, ...]
    idle_monthly_usd: float
    full_monthly_usd: float
    idle_gpus: int
    full_gpus: int
    warnings: tuple[str, ...] = ()

    @property
    def fixed_monthly_usd(self) -> float:
        """Everything but GPU pools (control plane, system nodes, fees, NAT, load balancers), at full capacity."""
        return sum(line.monthly_usd for line in self.lines if line.kind != "gpu-pool")

    @property
    def gpu_monthly_full_usd(self) -> float:
        return sum(line.monthly_usd for line in self.lines if line.kind == "gpu-pool")

    @property
    def usd_per_gpu_hour(self) -> Optional[float]:
        """Full-capacity monthly cost over GPU-hours at full use (fixed parts included)."""
        if self.full_gpus == 0:
            return None
        return self.full_monthly_usd / (self.full_gpus * HOURS_PER_MONTH)

    @property
    def gpu_only_usd_per_gpu_hour(self) -> Optional[float]:
        if self.full_gpus == 0:
            return None
        return self.gpu_monthly_full_usd / (self.full_gpus * HOURS_PER_MONTH)

    def monthly_at_utilisation(self, utilisation: float) -> float:
        """Monthly cost when the GPU pools are busy `utilisation` (0..1) of the time, assuming the
        autoscaler runs max(min, utilisation x max) nodes on average. Pools with min == max (Linode,
        fixed pools) cost the same at any utilisation."""
        u = min(max(utilisation, 0.0), 1.0)
        total = 0.0
        for line in self.lines:
            if line.kind != "gpu-pool":  # system pool / NAT grow with load between idle and full
                total += line.idle_monthly_usd + u * (line.monthly_usd - line.idle_monthly_usd)
                continue
            nodes = max(line.idle_quantity, u * line.quantity)
            per_node_full = line.monthly_usd / line.quantity if line.quantity else 0.0
            total += nodes * per_node_full
        return total

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "cloud": self.cloud, "region": self.region,
            "idleMonthlyUsd": round(self.idle_monthly_usd, 2), "fullMonthlyUsd": round(self.full_monthly_usd, 2),
            "idleGpus": self.idle_gpus, "fullGpus": self.full_gpus,
            "usdPerGpuHourAtFullUse": None if self.usd_per_gpu_hour is None else round(self.usd_per_gpu_hour, 4),
            "hoursPerMonth": HOURS_PER_MONTH,
            "lines": [{
                "name": ln.name, "kind": ln.kind, "resource": ln.resource, "capacity": ln.capacity,
                "idleQuantity": ln.idle_quantity, "quantity": ln.quantity,
                "unitUsdPerHour": round(ln.unit_usd_per_hour, 6),
                "idleMonthlyUsd": round(ln.idle_monthly_usd, 2), "monthlyUsd": round(ln.monthly_usd, 2),
                "gpusPerUnit": ln.gpus_per_unit, "source": ln.source, "date": ln.date,
            } for ln in self.lines],
            "warnings": list(self.warnings),
        }


def _node_month(t: InstanceType, p: Price) -> float:
    cost = p.usd_per_hour * HOURS_PER_MONTH
    if t.monthly_cap_usd is not None:
        cost = min(cost, t.monthly_cap_usd)
    return cost


def _lookup(catalog: Catalog, cloud: str, name: str, what: str) -> InstanceType:
    t = catalog.instance(cloud, name)
    if t is None:
        known = ", ".join(sorted(x.name for x in catalog.instances(cloud)))
        raise EstimateError(f"{what}: {name!r} is not a {cloud} instance type in the price catalog; known: {known}")
    return t


def _node_line(catalog: Catalog, cloud: str, kind: str, label: str, itype: str, capacity: str,
               idle_n: float, full_n: float) -> CostLine:
    t = _lookup(catalog, cloud, itype, label)
    p = t.price(capacity)
    if p is None:
        offered = [c for c in ("on-demand", "spot", "preemptible") if t.price(c) is not None]
        raise EstimateError(f"{label}: {itype} has no {capacity} price on {cloud}; priced capacities: {', '.join(offered)}")
    per_node = _node_month(t, p)
    return CostLine(name=label, kind=kind, resource=itype, capacity=capacity, idle_quantity=idle_n, quantity=full_n,
                    unit_usd_per_hour=p.usd_per_hour, idle_monthly_usd=per_node * idle_n,
                    monthly_usd=per_node * full_n, gpus_per_unit=t.gpus, source=p.source, date=p.date)


def _fixed_line(catalog: Catalog, cloud: str, key: str, label: str, qty: float, per_hour: Optional[float] = None) -> CostLine:
    fixed = catalog.fixed_costs(cloud)
    if key not in fixed:
        raise EstimateError(f"{label}: the catalog has no fixed cost {key!r} for {cloud}")
    p = fixed[key]
    rate = p.usd_per_hour if per_hour is None else per_hour
    monthly = rate * HOURS_PER_MONTH * qty
    return CostLine(name=label, kind="fixed", resource=key, capacity=None, idle_quantity=qty, quantity=qty,
                    unit_usd_per_hour=rate, idle_monthly_usd=monthly, monthly_usd=monthly, gpus_per_unit=0,
                    source=p.source, date=p.date)


def estimate(stack_cfg_like: Any, catalog: Optional[Catalog] = None) -> Estimate:
    """The monthly cost estimate of a stack. Accepts a StackShape or anything StackShape.from_config reads."""
    shape = stack_cfg_like if isinstance(stack_cfg_like, StackShape) else StackShape.from_config(stack_cfg_like)
    if shape.cloud not in ("linode", "gcp", "aws"):
        raise EstimateError(f"cloud must be linode, gcp or aws, not {shape.cloud!r}")
    cat = catalog if catalog is not None else load_catalog(dict(shape.price_overrides) or None)
    cloud = shape.cloud
    lines: list[CostLine] = []
    warnings: list[str] = []

    idle_gpus = full_gpus = 0
    for pool in shape.gpu_pools:
        if pool.min_nodes > pool.max_nodes:
            raise EstimateError(f"gpu pool {pool.name}: minNodes {pool.min_nodes} > maxNodes {pool.max_nodes}")
        line = _node_line(cat, cloud, "gpu-pool", f"gpu pool {pool.name} ({pool.instance_type}, {pool.capacity})",
                          pool.instance_type, pool.capacity, pool.min_nodes, pool.max_nodes)
        t = cat.instance(cloud, pool.instance_type)
        if t is not None and not t.is_gpu:
            warnings.append(f"gpu pool {pool.name}: {pool.instance_type} has no GPU")
        if t is not None and shape.region and t.regions is not None and shape.region not in t.regions:
            warnings.append(f"gpu pool {pool.name}: the catalog does not list {pool.instance_type} in {shape.region}")
        lines.append(line)
        idle_gpus += line.gpus_per_unit * pool.min_nodes
        full_gpus += line.gpus_per_unit * pool.max_nodes

    if cloud == "linode" and shape.control_plane_count:
        cp = shape.control_plane_type or "g6-standard-4"
        lines.append(_node_line(cat, cloud, "control-plane", f"control plane ({cp} x{shape.control_plane_count})", cp,
                                "on-demand", shape.control_plane_count, shape.control_plane_count))

    system = DEFAULT_SYSTEM_NODES[cloud] if shape.system_nodes is None else shape.system_nodes
    for g in system:
        if g.full_count:
            n = f"x{g.count}" if g.full_count == g.count else f"x{g.count}..{g.full_count}"
            lines.append(_node_line(cat, cloud, "system", f"{g.role} nodes ({g.instance_type} {n})",
                                    g.instance_type, g.capacity, g.count, g.full_count))

    if cloud == "linode":
        lbs = shape.load_balancers if shape.load_balancers is not None else (1 if shape.control_plane_count > 1 else 0)
        if lbs:
            lines.append(_fixed_line(cat, cloud, "nodebalancer", f"NodeBalancer x{lbs}", lbs))
    elif cloud == "gcp":
        if shape.managed_control_plane:
            lines.append(_fixed_line(cat, cloud, "gke-control-plane-fee", "GKE cluster management fee", 1))
        nats = 1 if shape.nat_gateways is None else shape.nat_gateways
        if nats:
            fixed = cat.fixed_costs(cloud)
            per_vm, cap = fixed["cloud-nat-per-vm"].usd_per_hour, fixed["cloud-nat-gateway-max"].usd_per_hour
            idle_vms = sum(g.count for g in system) + sum(p.min_nodes for p in shape.gpu_pools)
            full_vms = sum(g.full_count for g in system) + sum(p.max_nodes for p in shape.gpu_pools)
            idle_rate, full_rate = min(idle_vms * per_vm, cap), min(full_vms * per_vm, cap)
            p = fixed["cloud-nat-per-vm"]
            lines.append(CostLine(
                name=f"Cloud NAT x{nats} ({idle_vms}-{full_vms} VMs x ${per_vm}/h, at most ${cap}/h)", kind="fixed",
                resource="cloud-nat-per-vm", capacity=None, idle_quantity=nats, quantity=nats,
                unit_usd_per_hour=full_rate, idle_monthly_usd=idle_rate * HOURS_PER_MONTH * nats,
                monthly_usd=full_rate * HOURS_PER_MONTH * nats, gpus_per_unit=0, source=p.source, date=p.date))
        if shape.load_balancers:
            warnings.append("load balancers on GCP are not priced by this model")
    elif cloud == "aws":
        if shape.managed_control_plane:
            lines.append(_fixed_line(cat, cloud, "eks-control-plane-fee", "EKS control plane fee", 1))
        nats = 1 if shape.nat_gateways is None else shape.nat_gateways
        if nats:
            lines.append(_fixed_line(cat, cloud, "nat-gateway", f"NAT gateway x{nats}", nats))
        if shape.load_balancers:
            lines.append(_fixed_line(cat, cloud, "network-load-balancer", f"Network Load Balancer x{shape.load_balancers}",
                                     shape.load_balancers))

    ref = cat.reference_region(cloud)
    if shape.region and ref and shape.region != ref:
        warnings.append(f"prices are the catalog's {ref} reference prices; {shape.region} may differ")

    idle = sum(line.idle_monthly_usd for line in lines)
    # A line's idle cost counts its idle quantity; a fixed line is the same idle or busy except NAT.
    full = sum(line.monthly_usd for line in lines)
    return Estimate(name=shape.name or f"{cloud}-stack", cloud=cloud, region=shape.region, lines=tuple(lines),
                    idle_monthly_usd=idle, full_monthly_usd=full, idle_gpus=idle_gpus, full_gpus=full_gpus,
                    warnings=tuple(warnings))


__all__ = ["CostLine", "DEFAULT_SYSTEM_NODES", "Estimate", "EstimateError", "NodeGroup", "PoolShape", "StackShape",
           "estimate", "gpus_per_node", "nodes_for_gpus"]
