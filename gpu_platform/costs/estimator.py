"""What a stack costs per month: the whole bill, line by line, each line with its assumption.

Input is a plain `StackShape` (no Pulumi, no components import): the cloud, region, GPU pools with min/max
nodes and the instance types a pool may launch, the control plane and system nodes, boot disks, the
storage the platform creates (PVC sizes from the rendered charts), the checkpoint bucket, NAT traffic,
load balancers and the extended-support fee. `StackShape.from_config(cfg)` reads the lead's StackConfig
by duck typing; preflight fills in what needs the program (disk sizes, PVCs, the version calendar).

Model (730 hours a month):
- idle floor    = everything that runs with no job: control plane, system nodes at their minimum, GPU pools
                  at minNodes, their boot disks, PVCs, the bucket, NAT hours, load balancers, fees;
- full capacity = the same with every pool at maxNodes all month (and its boot disks), NAT data included;
- a GPU pool that may launch several instance types is priced at the DEAREST of them (the autoscaler may
  pick any); Linode bills hourly up to a monthly cap per instance, so a node-month is min(rate x 730, cap);
- what the model leaves out is listed in `Estimate.not_modelled` (and printed as its own line).
Prices are the catalog's reference-region prices; a stack elsewhere gets a warning, not a different number.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from gpu_platform.costs.catalog import HOURS_PER_MONTH, Catalog, InstanceType, Price, a_cloud, load_catalog, refresh_command

# Storage the platform's PVCs land on, per cloud (the default StorageClass each cluster sets up):
# EKS: gp3 (gpu_platform/components/aws/eks.py STORAGE_CLASS); GKE: standard-rwo = pd-balanced; Linode: Block Storage (CSI).
PVC_STORAGE = {"aws": "ebs-gp3", "gcp": "pd-balanced", "linode": "block-storage"}
BOOT_DISK_STORAGE = {"aws": "ebs-gp3", "gcp": "pd-balanced"}  # Linode: the plan includes its disk
BUCKET_STORAGE = {"aws": "s3-standard", "gcp": "gcs-standard", "linode": "object-storage"}
NAT_DATA = {"aws": "nat-gateway-data", "gcp": "cloud-nat-data"}
# The public IPv4 addresses a NAT uses, per address-hour: an AWS NAT gateway's Elastic IP, a Cloud NAT's
# external IP (AUTO_ONLY allocates one per 1,008 VMs at the default 64 ports per VM: one here).
NAT_IP = {"aws": "public-ipv4", "gcp": "cloud-nat-ip"}
# Cloud Storage keeps a deleted object (a checkpoint version the lifecycle rule removes) as soft-deleted,
# billed at its storage class's rate, for the bucket's soft-delete retention: 7 days unless the bucket sets
# another (Cloud Storage "Soft delete": the default retention of new buckets since 2024-03-01,
# https://cloud.google.com/storage/docs/soft-delete).
GCS_DEFAULT_SOFT_DELETE_DAYS = 7.0
GCS_SOFT_DELETE_SOURCE = ("Cloud Storage soft delete (https://cloud.google.com/storage/docs/soft-delete): deleted objects "
                          "stay billable at their storage class's rate for the retention, 7 days by default")
# What no line below prices, whatever the stack (kept short and concrete; docs/cost-model.md explains each).
ALWAYS_NOT_MODELLED = (
    "internet egress and cross-zone traffic",
    "load-balancer traffic charges (AWS LCUs, GCP forwarding-rule data)",
    "disk and bucket operations, snapshots, IOPS/throughput above the gp3/pd-balanced baseline",
    "logs and metrics shipped to the cloud (CloudWatch, Cloud Logging/Monitoring)",
    "container registry storage and pulls of images the program does not build (your training images)",
    "taxes, support plans, committed-use or savings-plan discounts",
)
class EstimateError(ValueError):
    """The shape names something the catalog cannot price."""


class RegionPriceRefused(EstimateError):
    """The stack's region has no price for instance types it uses (catalog.RegionalPriceMissing, one or more): the
    bill is refused rather than priced at another region's rate. `missing` lists every one; `type`, `capacity`,
    `region` name the first. `fix()` is what to write or run, line by line (the bill prints it)."""

    def __init__(self, missing: Any, catalog: Optional[Catalog] = None):
        items = list(missing) if isinstance(missing, (list, tuple)) else [missing]
        self.missing = items
        first = items[0]
        self.type, self.capacity, self.region, self.cloud = first.name, first.capacity, first.region, first.cloud
        self._catalog = catalog
        if len(items) == 1:
            super().__init__(str(first))
            return
        region, cloud = first.region, first.cloud
        snippet = ", ".join(f"{m.name}: {{{_yaml_key(m.capacity)}: <USD per node-hour>}}" for m in items)
        commands = "; ".join(dict.fromkeys(refresh_command(cloud, m.capacity, region) for m in self.recordable))
        absent = ", ".join(m.name for m in items if m.offered is False)
        super().__init__(
            "; ".join(m.gap() for m in items) + f" (gpu_platform/costs/catalog/{cloud}.yaml), and {region}'s prices "
            f"may differ" + (f"; {region} may not offer {absent} at all (no {region} zone lists them in the recorded "
                             "offerings: choose a region that offers them)" if absent else "")
            + f". Give the prices you pay there as priceOverrides: {{{snippet}}}"
            + (f", or record {region}'s published prices in the catalog ({commands}; docs/cost-model.md, "
               "\"Recording a region's prices\")" if commands else ""))

    @property
    def recordable(self) -> list[Any]:
        """The missing prices a refresh could record: not those of a type the region does not offer (recorded
        offering data), whose price lookup would come back empty."""
        return [m for m in self.missing if m.offered is not False]

    @property
    def types(self) -> list[str]:
        return [m.name for m in self.missing]

    def overrides_yaml(self) -> str:
        """The stack-file lines that price every missing type: a placeholder each (a price is the stack's to
        give: left as is, the config check refuses it naming the key), the reference price beside it."""
        width = max(len(f"{m.name}: {{{_yaml_key(m.capacity)}: REPLACE}}") for m in self.missing)
        lines = ["  gpu-platform:priceOverrides:"]
        for m in self.missing:
            entry = f"{m.name}: {{{_yaml_key(m.capacity)}: REPLACE}}"
            ref = ""
            t = self._catalog.instance(m.cloud, m.name) if self._catalog is not None else None
            p = t.price(m.capacity) if t is not None else None
            if p is not None and m.reference:
                ref = f"; {m.reference}'s is {p.usd_per_hour:g} ({p.date})"
            lines.append(f"    {entry.ljust(width)}  # {m.capacity} USD per node-hour you pay in {m.region}{ref}")
        return "\n".join(lines)

    def refresh_lines(self) -> list[str]:
        """How to record the region's published prices instead: getting the file, then the refresh command."""
        region, cloud = self.region, self.cloud
        out: list[str] = []
        for capacity in dict.fromkeys(m.capacity for m in self.recordable):
            names = [m.name for m in self.recordable if m.capacity == capacity]
            if cloud == "aws" and capacity == "on-demand":
                out.append(f"curl -o ec2-{region}.json https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/"
                           f"current/{region}/index.json")
            elif cloud == "aws":
                out.append(f"aws ec2 describe-spot-price-history --region {region} --instance-types {' '.join(names)} "
                           f"--product-descriptions Linux/UNIX --start-time {_week_ago()}T00:00:00Z --output json "
                           f"> spot-{region}.json")
            elif cloud == "gcp":
                out.append(f"# prices-{region}.csv: '# observed-no-later-than: YYYY-MM-DD', then machine,region,hour,hour_spot "
                           f"with a row per type ({', '.join(names)}): On-Demand and Spot USD/h of the whole machine")
            out.append(refresh_command(cloud, capacity, region))
        return list(dict.fromkeys(out))

    def fix(self) -> list[str]:
        """The bill's lines after the refusal: both ways out, ready to paste."""
        return ([f"fix, either: give the prices you pay in {self.region} in the stack file (merged into its "
                 "gpu-platform:priceOverrides if it has one; REPLACE each placeholder):"]
                # at the stack file's own indentation once the bill's two spaces are added: paste the lines as they are
                + [line[2:] for line in self.overrides_yaml().splitlines()]
                + ([f"or record {self.region}'s published prices in the catalog (docs/cost-model.md, "
                    "\"Recording a region's prices\"):"] + ["    " + line for line in self.refresh_lines()]
                   if self.recordable else [])
                + [f"not offered in {self.region} as far as recorded data says ({', '.join(m.name for m in group)}): "
                   f"no price can be recorded there; choose a region that offers {'it' if len(group) == 1 else 'them'} "
                   "(the catalog prices it in the regions named above), or give the price you pay if it is offered now"
                   for group in [[m for m in self.missing if m.offered is False]] if group])


def _yaml_key(capacity: str) -> str:
    return {"on-demand": "onDemand"}.get(capacity, capacity)


def _week_ago() -> str:
    return (_dt.date.today() - _dt.timedelta(days=7)).isoformat()


@dataclass(frozen=True)
class PoolShape:
    name: str
    instance_type: str
    capacity: str  # on-demand | spot | preemptible
    min_nodes: int
    max_nodes: int
    alternatives: tuple[str, ...] = ()  # other types the pool may launch (AWS instanceTypes); priced at the dearest
    boot_disk_gib: Optional[int] = None  # per node; None = not known (listed as not modelled)

    @property
    def allowed_types(self) -> tuple[str, ...]:
        return (self.instance_type,) + tuple(t for t in self.alternatives if t != self.instance_type)


@dataclass(frozen=True)
class NodeGroup:
    """Non-GPU nodes that run all month (GKE/EKS system pool, Linode control plane)."""

    role: str
    instance_type: str
    count: int  # nodes at the idle floor
    capacity: str = "on-demand"
    max_count: Optional[int] = None  # nodes at full capacity (an autoscaled system pool); None = count
    boot_disk_gib: Optional[int] = None
    idle_basis: str = ""  # why the idle floor is `count` when that is not simply the configured minimum

    @property
    def full_count(self) -> int:
        return self.count if self.max_count is None else max(self.max_count, self.count)


# Cloud defaults for the parts a stack file does not spell out. Overridable per StackShape.
DEFAULT_SYSTEM_NODES: dict[str, tuple[NodeGroup, ...]] = {
    "linode": (),  # kubeadm: platform pods run on the control-plane nodes, counted separately
    "gcp": (NodeGroup("system", "e2-standard-4", 1),),
    "aws": (NodeGroup("system", "m6i.large", 2),),
    "kubernetes": (),  # a cluster the stack does not create: its kubernetes.systemPool, always given
}
# A cluster the stack does not create (cloud kubernetes) bills what its owner pays: the stack prices its node
# types (kubernetes.nodeTypes.<type>.usdPerHour) and nothing else, so everything else is named, never priced.
OWN_CLUSTER_NOT_MODELLED = (
    "the cluster's control plane, network, load balancers and anything else it runs besides the node groups "
    "(your cluster's own bill)",
    "node disks, beyond what your node price includes",
)


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
    # --- the rest of the bill (None = not known: listed as not modelled, never guessed) -----------
    pvc_gib: Optional[tuple[tuple[str, float], ...]] = None  # (what, GiB) per PVC the platform creates
    pvc_basis: str = ""  # where the PVC sizes come from (rendered charts, or a fallback)
    checkpoint_gib: Optional[float] = None  # live checkpoints in the bucket on average
    checkpoint_gib_per_day: Optional[float] = None  # written per day at full capacity (costs.checkpointGibPerDay)
    checkpoint_retention_days: Optional[int] = None  # how long the bucket keeps deleted/overwritten versions
    nat_gib_per_month: Optional[float] = None  # traffic through the NAT (image pulls, datasets, pip)
    public_ipv4: Optional[int] = None  # public IPv4 addresses the NAT(s) use; None = one per NAT gateway
    kms_keys: Optional[int] = None  # customer-managed KMS keys the stack creates; None = not known (not modelled)
    # The checkpoint bucket's soft-delete retention (GCS); None = GCS's default (GCS_DEFAULT_SOFT_DELETE_DAYS).
    soft_delete_days: Optional[float] = None
    extended_support_usd_per_hour: Optional[float] = None  # extra control-plane fee; 0 = standard support
    extended_support_basis: str = ""
    extra_not_modelled: tuple[str, ...] = ()  # stack-specific items the caller knows are left out
    expected_utilization: Optional[float] = None  # 0..1, for the budget comparison

    @classmethod
    def from_config(cls, cfg: Any) -> "StackShape":
        """Duck-typed read of gpu_platform.config.model.StackConfig (or anything with the same attributes)."""
        cloud = cfg.cloud
        section = getattr(cfg, cloud, None)
        pools = []
        for p in cfg.gpu_pools:
            extra = _aws_pool(section, p.name)
            pools.append(PoolShape(p.name, p.instance_type, p.capacity, int(p.min_nodes), int(p.max_nodes),
                                   alternatives=tuple(getattr(extra, "instance_types", None) or ()),
                                   boot_disk_gib=getattr(extra, "root_volume_gib", None)))
        region = getattr(section, "region", None)
        cp_type, cp_count = None, 0
        if cloud == "linode" and section is not None:
            cp = getattr(section, "control_plane", None)
            if cp is not None:
                cp_type, cp_count = cp.type, int(cp.count)
        system = _system_nodes_from(section)
        name = getattr(cfg, "name_prefix", "") or ""
        costs = getattr(cfg, "costs", None)
        return cls(cloud=cloud, region=region, gpu_pools=tuple(pools), control_plane_type=cp_type,
                   control_plane_count=cp_count, system_nodes=system,
                   price_overrides=_overrides_from(cfg), name=str(name),
                   checkpoint_gib=_num(costs, "checkpoint_gib"), nat_gib_per_month=_num(costs, "nat_gib_per_month"),
                   checkpoint_gib_per_day=_num(costs, "checkpoint_gib_per_day"),
                   checkpoint_retention_days=getattr(section, "checkpoint_retention_days", None),
                   expected_utilization=_num(costs, "expected_utilization"))


def _num(obj: Any, attr: str) -> Optional[float]:
    v = getattr(obj, attr, None) if obj is not None else None
    return None if v is None or isinstance(v, bool) else float(v)


def _aws_pool(section: Any, name: str) -> Any:
    pools = getattr(section, "pools", None)
    if isinstance(pools, Mapping):
        return pools.get(name)
    return None


def _system_nodes_from(section: Any) -> Optional[tuple[NodeGroup, ...]]:
    """The system pool a cloud section describes: `system_pool` (instance_type, min_nodes, max_nodes), the
    one shape every cloud's config has; without one: the cloud default."""
    if section is None:
        return None
    sp = getattr(section, "system_pool", None)
    if sp is None:
        return None
    itype = getattr(sp, "instance_type", None)
    lo, hi = getattr(sp, "min_nodes", None), getattr(sp, "max_nodes", None)
    if not isinstance(itype, str) or not isinstance(lo, int):
        return None
    return (NodeGroup("system", itype, lo, max_count=hi if isinstance(hi, int) else None),)


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
    kind: str  # gpu-pool | control-plane | system | fixed | disk | storage | network-data | support
    resource: str  # instance type or fixed-cost key
    capacity: Optional[str]
    idle_quantity: float
    quantity: float  # at full capacity
    unit_usd_per_hour: float  # USD per unit of the price (an hour unless `unit` says otherwise)
    idle_monthly_usd: float
    monthly_usd: float  # at full capacity
    gpus_per_unit: int
    source: str
    date: str
    assumption: str = ""  # what the line assumes, in words
    scales_with: str = "fixed"  # gpu (nodes follow GPU demand) | system (between idle and full) | fixed
    unit: str = "hour"
    status: Optional[str] = None  # the price's verification status (gpu_platform.costs.catalog.PRICE_STATUSES)
    # Whose price this is: the region it was recorded for ("eu-west-1"), the catalog's reference region
    # ("us-east-1 (reference)"), "priceOverrides", or None (a stack's own node prices, a computed fee).
    priced_in: Optional[str] = None


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
    not_modelled: tuple[str, ...] = ()
    gpu_models: tuple[str, ...] = ()  # GPU models of the pools (as priced)
    capacities: tuple[str, ...] = ()
    expected_utilization: Optional[float] = None
    # What has no price (cloud kubernetes without node prices): then there is no bill, only this list; the
    # totals are 0 and mean nothing, and every report says so instead of printing them (`priced`).
    unpriced: tuple[str, ...] = ()

    @property
    def priced(self) -> bool:
        return not self.unpriced

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

    def price_dates(self) -> list[str]:
        return sorted({ln.date for ln in self.lines})

    def monthly_at_utilisation(self, utilisation: float, overhead: float = 1.0) -> float:
        """Monthly cost when the GPU pools are busy `utilisation` (0..1) of the time, assuming the
        autoscaler runs max(min, utilisation x overhead x max) nodes on average. `overhead` >= 1 is the
        billed/busy ratio of a real autoscaler (boot and scale-down delays, preemption rework), e.g. from
        the simulator; 1 = a perfect autoscaler. Pools with min == max cost the same at any utilisation."""
        u = min(max(utilisation, 0.0), 1.0)
        g = min(u * max(overhead, 1.0), 1.0)
        total = 0.0
        for line in self.lines:
            if line.scales_with == "gpu":
                qty = max(line.idle_quantity, g * line.quantity)
                per = line.monthly_usd / line.quantity if line.quantity else 0.0
                total += qty * per
            elif line.scales_with == "system":  # system pool / NAT grow with load between idle and full
                total += line.idle_monthly_usd + g * (line.monthly_usd - line.idle_monthly_usd)
            else:
                total += line.monthly_usd
        return total

    def utilisation_at_budget(self, budget: float, overhead: float = 1.0) -> Optional[float]:
        """The GPU utilisation (0..1) at which the month costs `budget`; 0.0 if the idle floor already
        exceeds it, None if even full capacity stays under it."""
        if self.monthly_at_utilisation(0.0, overhead) >= budget:
            return 0.0
        if self.monthly_at_utilisation(1.0, overhead) <= budget:
            return None
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if self.monthly_at_utilisation(mid, overhead) < budget:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    def as_dict(self) -> dict[str, Any]:
        priced = self.priced
        return {
            "name": self.name, "cloud": self.cloud, "region": self.region, "priced": priced,
            "unpriced": list(self.unpriced),
            "idleMonthlyUsd": round(self.idle_monthly_usd, 2) if priced else None,
            "fullMonthlyUsd": round(self.full_monthly_usd, 2) if priced else None,
            "idleGpus": self.idle_gpus, "fullGpus": self.full_gpus, "gpuModels": list(self.gpu_models),
            "capacities": list(self.capacities),
            "usdPerGpuHourAtFullUse": None if self.usd_per_gpu_hour is None or not priced else round(self.usd_per_gpu_hour, 4),
            "hoursPerMonth": HOURS_PER_MONTH,
            "lines": [{
                "name": ln.name, "kind": ln.kind, "resource": ln.resource, "capacity": ln.capacity,
                "idleQuantity": ln.idle_quantity, "quantity": ln.quantity,
                "unitUsd": round(ln.unit_usd_per_hour, 6), "unit": ln.unit,
                "unitUsdPerHour": round(ln.unit_usd_per_hour, 6) if ln.unit == "hour" else None,
                "idleMonthlyUsd": round(ln.idle_monthly_usd, 2), "monthlyUsd": round(ln.monthly_usd, 2),
                "gpusPerUnit": ln.gpus_per_unit, "assumption": ln.assumption, "scalesWith": ln.scales_with,
                "source": ln.source, "date": ln.date, "priceStatus": ln.status, "pricedIn": ln.priced_in,
            } for ln in self.lines],
            "notModelled": list(self.not_modelled),
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
        raise EstimateError(f"{what}: {name!r} is not {a_cloud(cloud)} instance type in the price catalog; known: {known}")
    return t


def _price_of(t: InstanceType, capacity: str, cloud: str, label: str) -> Price:
    p = t.price(capacity)
    if p is None:
        offered = [c for c in ("on-demand", "spot", "preemptible") if t.price(c) is not None]
        raise EstimateError(f"{label}: {t.name} has no {capacity} price on {cloud} in the catalog (priced capacities: "
                            f"{', '.join(offered)}); a price is added only from recorded data (python -m gpu_platform.costs refresh)")
    return p


def _in_region(catalog: Catalog, cloud: str, itype: str, capacity: str, region: Optional[str],
               label: str) -> tuple[InstanceType, str]:
    from gpu_platform.costs.catalog import RegionalPriceMissing

    t = _lookup(catalog, cloud, itype, label)
    if not t.priced_somewhere(capacity):
        _price_of(t, capacity, cloud, label)  # the capacity is not priced anywhere: that error, not a region's
    try:
        return catalog.in_region(cloud, itype, capacity, region)
    except RegionalPriceMissing as exc:
        raise RegionPriceRefused(exc) from None


def _node_line(catalog: Catalog, cloud: str, kind: str, label: str, itype: str, capacity: str,
               idle_n: float, full_n: float, assumption: str = "", scales_with: str = "fixed",
               region: Optional[str] = None, how: Optional[list[str]] = None) -> CostLine:
    t, priced = _in_region(catalog, cloud, itype, capacity, region, label)
    if how is not None:
        how.append(priced)
    p = _price_of(t, capacity, cloud, label)
    per_node = _node_month(t, p)
    spread = f"; observed {p.spread}" if p.spread else ""
    return CostLine(name=label, kind=kind, resource=itype, capacity=capacity, idle_quantity=idle_n, quantity=full_n,
                    unit_usd_per_hour=p.usd_per_hour, idle_monthly_usd=per_node * idle_n,
                    monthly_usd=per_node * full_n, gpus_per_unit=t.gpus, source=p.source, date=p.date,
                    assumption=(assumption + spread).lstrip("; "), scales_with=scales_with, status=p.status,
                    priced_in=_priced_in(catalog, cloud, priced, region))


def _priced_in(catalog: Catalog, cloud: str, how: str, region: Optional[str]) -> Optional[str]:
    """Whose price an instance line carries (catalog.Catalog.in_region's `how`), in words for the bill."""
    ref = catalog.reference_region(cloud)
    if how == "override":
        return "priceOverrides"
    if how == "regional":
        return region
    if ref is None:
        return None
    if how == "default":
        return f"{ref} (reference; the default price holds in {region})"
    return f"{ref} (reference)"


def _fixed_price(catalog: Catalog, cloud: str, key: str, label: str) -> Price:
    fixed = catalog.fixed_costs(cloud)
    if key not in fixed:
        raise EstimateError(f"{label}: the catalog has no fixed cost {key!r} for {cloud}")
    return fixed[key]


def _fixed_line(catalog: Catalog, cloud: str, key: str, label: str, qty: float, per_hour: Optional[float] = None,
                assumption: str = "") -> CostLine:
    p = _fixed_price(catalog, cloud, key, label)
    rate = p.usd_per_hour if per_hour is None else per_hour
    monthly = rate * HOURS_PER_MONTH * qty
    return CostLine(name=label, kind="fixed", resource=key, capacity=None, idle_quantity=qty, quantity=qty,
                    unit_usd_per_hour=rate, idle_monthly_usd=monthly, monthly_usd=monthly, gpus_per_unit=0,
                    source=p.source, date=p.date, assumption=assumption, status=p.status,
                    priced_in=_reference_of(catalog, cloud))


def _reference_of(catalog: Catalog, cloud: str) -> Optional[str]:
    """Fixed costs, disks, storage and traffic are the catalog's reference region's prices."""
    ref = catalog.reference_region(cloud)
    return f"{ref} (reference)" if ref else None


def _volume_line(catalog: Catalog, cloud: str, key: str, kind: str, label: str, idle_gib: float, full_gib: float,
                 assumption: str, scales_with: str) -> CostLine:
    """A line priced per GiB-month (disks, buckets) or per GB (traffic)."""
    p = _fixed_price(catalog, cloud, key, label)
    if p.unit == "hour":
        raise EstimateError(f"{label}: catalog fixed cost {key!r} is per hour, expected per GiB-month or GB")
    return CostLine(name=label, kind=kind, resource=key, capacity=None, idle_quantity=idle_gib, quantity=full_gib,
                    unit_usd_per_hour=p.usd_per_hour, idle_monthly_usd=p.usd_per_hour * idle_gib,
                    monthly_usd=p.usd_per_hour * full_gib, gpus_per_unit=0, source=p.source, date=p.date,
                    assumption=assumption, scales_with=scales_with, unit=p.unit, status=p.status,
                    priced_in=_reference_of(catalog, cloud))


def dearest_type(catalog: Catalog, cloud: str, pool: PoolShape, region: Optional[str] = None) -> tuple[str, list[str]]:
    """(the pool's dearest allowed type for its capacity, the allowed types with no price for it), priced in
    `region` (RegionPriceRefused when an allowed type offered at the capacity has no price there)."""
    best, best_rate, unpriced = None, -1.0, []
    for name in pool.allowed_types:
        t = _lookup(catalog, cloud, name, f"gpu pool {pool.name}")
        if t.priced_somewhere(pool.capacity):
            t, _ = _in_region(catalog, cloud, name, pool.capacity, region, f"gpu pool {pool.name}")
        p = t.price(pool.capacity)
        if p is None:
            unpriced.append(name)
            continue
        if p.usd_per_hour > best_rate:
            best, best_rate = name, p.usd_per_hour
    if best is None:
        _price_of(_lookup(catalog, cloud, pool.instance_type, f"gpu pool {pool.name}"), pool.capacity, cloud,
                  f"gpu pool {pool.name}")
    return best or pool.instance_type, unpriced


def _missing_regional_prices(cat: Catalog, cloud: str, shape: "StackShape", region: Optional[str]) -> list[Any]:
    """Every (instance type, capacity) the stack uses that has no price in its region (catalog.RegionalPriceMissing
    each, in the order of the bill), so that one refusal names them all."""
    from gpu_platform.costs.catalog import RegionalPriceMissing

    wanted: list[tuple[str, str]] = []
    for pool in shape.gpu_pools:
        for name in pool.allowed_types:
            t = cat.instance(cloud, name)
            if t is not None and t.priced_somewhere(pool.capacity):
                wanted.append((name, pool.capacity))
    if cloud == "linode" and shape.control_plane_count:
        wanted.append((shape.control_plane_type or "g6-standard-4", "on-demand"))
    system = DEFAULT_SYSTEM_NODES[cloud] if shape.system_nodes is None else shape.system_nodes
    wanted += [(g.instance_type, g.capacity) for g in system if g.full_count]
    out = []
    for name, capacity in dict.fromkeys(wanted):
        if cat.instance(cloud, name) is None:
            continue  # EstimateError from _lookup, with the known types
        try:
            cat.in_region(cloud, name, capacity, region)
        except RegionalPriceMissing as exc:
            out.append(exc)
    return out


def estimate(stack_cfg_like: Any, catalog: Optional[Catalog] = None) -> Estimate:
    """The monthly cost estimate of a stack. Accepts a StackShape or anything StackShape.from_config reads."""
    shape = stack_cfg_like if isinstance(stack_cfg_like, StackShape) else StackShape.from_config(stack_cfg_like)
    if catalog is None and shape.cloud == "kubernetes" and callable(getattr(stack_cfg_like, "stack_catalog", None)):
        catalog = stack_cfg_like.stack_catalog()  # a StackConfig knows its own node types
    if shape.cloud not in ("linode", "gcp", "aws", "kubernetes"):
        raise EstimateError(f"cloud must be linode, gcp, aws or kubernetes, not {shape.cloud!r}")
    if shape.cloud == "kubernetes" and catalog is None:
        raise EstimateError("a kubernetes stack is sized and priced by its own node types: pass the stack's catalog "
                            "(gpu_platform.config.derived.stack_catalog)")
    cat = catalog if catalog is not None else load_catalog(dict(shape.price_overrides) or None)
    cloud = shape.cloud
    if cloud == "kubernetes":
        unpriced = own_nodes_unpriced(shape, cat)
        if unpriced:
            return _unpriced_estimate(shape, cat, unpriced)
    lines: list[CostLine] = []
    warnings: list[str] = []
    not_modelled: list[str] = []
    gpu_models: list[str] = []

    idle_gpus = full_gpus = 0
    region = shape.region
    missing = _missing_regional_prices(cat, cloud, shape, region)
    if missing:
        raise RegionPriceRefused(missing, cat)
    how: list[str] = []  # how each instance line was priced for the region (catalog.Catalog.in_region)
    for pool in shape.gpu_pools:
        if pool.min_nodes > pool.max_nodes:
            raise EstimateError(f"gpu pool {pool.name}: minNodes {pool.min_nodes} > maxNodes {pool.max_nodes}")
        itype, unpriced = dearest_type(cat, cloud, pool, region)
        others = [t for t in pool.allowed_types if t != itype]
        why = (f"{pool.min_nodes}..{pool.max_nodes} nodes; priced at the dearest type the pool may launch "
               f"({', '.join(pool.allowed_types)})" if others else f"{pool.min_nodes}..{pool.max_nodes} nodes")
        if cloud == "linode":
            why += "; its disk is included in the Linode plan"
        elif cloud == "kubernetes":
            why += f"; your price per node-hour (kubernetes.nodeTypes.{itype}.usdPerHour)"
        if unpriced:
            warnings.append(f"gpu pool {pool.name}: no {pool.capacity} price for {', '.join(unpriced)}; "
                            f"priced at {itype}")
        line = _node_line(cat, cloud, "gpu-pool", f"gpu pool {pool.name} ({itype}, {pool.capacity})",
                          itype, pool.capacity, pool.min_nodes, pool.max_nodes, assumption=why, scales_with="gpu",
                          region=region, how=how)
        t = cat.instance(cloud, itype)
        if t is not None and not t.is_gpu:
            warnings.append(f"gpu pool {pool.name}: {itype} has no GPU")
        if t is not None and shape.region and t.regions is not None and shape.region not in t.regions:
            warnings.append(f"gpu pool {pool.name}: the catalog does not list {itype} in {shape.region}")
        if t is not None and t.gpu_model and t.gpu_model not in gpu_models:
            gpu_models.append(t.gpu_model)
        lines.append(line)
        idle_gpus += line.gpus_per_unit * pool.min_nodes
        full_gpus += line.gpus_per_unit * pool.max_nodes

    if cloud == "linode" and shape.control_plane_count:
        cp = shape.control_plane_type or "g6-standard-4"
        lines.append(_node_line(cat, cloud, "control-plane", f"control plane ({cp} x{shape.control_plane_count})", cp,
                                "on-demand", shape.control_plane_count, shape.control_plane_count,
                                assumption="kubeadm control-plane Linodes, always on", region=region, how=how))

    system = DEFAULT_SYSTEM_NODES[cloud] if shape.system_nodes is None else shape.system_nodes
    for g in system:
        if g.full_count:
            n = f"x{g.count}" if g.full_count == g.count else f"x{g.count}..{g.full_count}"
            lines.append(_node_line(cat, cloud, "system", f"{g.role} nodes ({g.instance_type} {n})",
                                    g.instance_type, g.capacity, g.count, g.full_count,
                                    assumption=f"{g.count} at idle, {g.full_count} at full capacity"
                                    + (f" ({g.idle_basis})" if g.idle_basis else ""),
                                    scales_with="system" if g.full_count != g.count else "fixed", region=region, how=how))

    # --- boot disks (Linode plans include theirs) ---------------------------------------------------
    if cloud in BOOT_DISK_STORAGE:
        key = BOOT_DISK_STORAGE[cloud]
        for pool in shape.gpu_pools:
            if pool.boot_disk_gib is None:
                not_modelled.append(f"boot disks of gpu pool {pool.name} (size not given)")
                continue
            lines.append(_volume_line(cat, cloud, key, "disk", f"boot disks gpu pool {pool.name} ({key})",
                                      pool.min_nodes * pool.boot_disk_gib, pool.max_nodes * pool.boot_disk_gib,
                                      f"{pool.boot_disk_gib} GiB per node, {pool.min_nodes}..{pool.max_nodes} nodes, "
                                      "billed while the node exists", "gpu"))
        for g in system:
            if not g.full_count:
                continue
            if g.boot_disk_gib is None:
                not_modelled.append(f"boot disks of the {g.role} nodes (size not given)")
                continue
            lines.append(_volume_line(cat, cloud, key, "disk", f"boot disks {g.role} nodes ({key})",
                                      g.count * g.boot_disk_gib, g.full_count * g.boot_disk_gib,
                                      f"{g.boot_disk_gib} GiB per node, {g.count}..{g.full_count} nodes",
                                      "system" if g.full_count != g.count else "fixed"))

    # --- storage the platform creates ---------------------------------------------------------------
    if cloud == "kubernetes":
        not_modelled += _own_cluster_storage(shape)
    elif shape.pvc_gib is None:
        not_modelled.append("persistent volumes of the platform (sizes not given)")
    elif shape.pvc_gib:
        total = sum(g for _, g in shape.pvc_gib)
        parts = ", ".join(f"{n} {g:g}" for n, g in shape.pvc_gib)
        lines.append(_volume_line(cat, cloud, PVC_STORAGE[cloud], "storage", f"persistent volumes ({PVC_STORAGE[cloud]})",
                                  total, total, f"{total:g} GiB requested ({parts}) GiB; {shape.pvc_basis}".rstrip("; "),
                                  "fixed"))
    if cloud == "kubernetes":
        pass  # _own_cluster_storage named the checkpoint store
    elif shape.checkpoint_gib is None:
        not_modelled.append("checkpoint bucket (expected size not given: costs.checkpointGib)")
    else:
        live, full, idle = shape.checkpoint_gib, shape.checkpoint_gib, shape.checkpoint_gib
        basis = f"{live:g} GiB of live checkpoints (costs.checkpointGib)"
        if shape.checkpoint_gib_per_day and shape.checkpoint_retention_days:
            # every deleted/overwritten version stays for the retention period: written/day x days on top
            kept = shape.checkpoint_gib_per_day * shape.checkpoint_retention_days
            full = live + kept
            idle = live + kept * 0.25
            basis += (f" + {shape.checkpoint_gib_per_day:g} GiB/day written (costs.checkpointGibPerDay) x "
                      f"{shape.checkpoint_retention_days} days the bucket keeps old versions (checkpointRetentionDays) "
                      "at full capacity, a quarter of that at idle")
        if full > 0:
            lines.append(_volume_line(cat, cloud, BUCKET_STORAGE[cloud], "storage", f"checkpoint bucket ({BUCKET_STORAGE[cloud]})",
                                      idle, full, basis, "system" if full > idle else "fixed"))
        soft = GCS_DEFAULT_SOFT_DELETE_DAYS if shape.soft_delete_days is None else shape.soft_delete_days
        if cloud == "gcp" and soft > 0 and shape.checkpoint_gib_per_day and shape.checkpoint_retention_days:
            # In steady state the lifecycle rule deletes as much a day as jobs write: each deleted version
            # stays soft-deleted (billed) for the retention.
            gb = shape.checkpoint_gib_per_day * soft
            lines.append(_volume_line(cat, cloud, BUCKET_STORAGE[cloud], "storage",
                                      f"checkpoint bucket, soft-deleted versions ({BUCKET_STORAGE[cloud]})", gb * 0.25, gb,
                                      f"{shape.checkpoint_gib_per_day:g} GiB/day that the lifecycle rule deletes (as much as "
                                      f"is written, costs.checkpointGibPerDay) x {soft:g} days of soft-delete retention "
                                      f"at full capacity, a quarter of that at idle; {GCS_SOFT_DELETE_SOURCE}", "system"))

    # --- network and fees ----------------------------------------------------------------------------
    if cloud == "linode":
        lbs = shape.load_balancers if shape.load_balancers is not None else (1 if shape.control_plane_count > 1 else 0)
        if lbs:
            lines.append(_fixed_line(cat, cloud, "nodebalancer", f"NodeBalancer x{lbs}", lbs,
                                     assumption="in front of the HA control plane's API servers"))
    elif cloud == "gcp":
        if shape.managed_control_plane:
            lines.append(_fixed_line(cat, cloud, "gke-control-plane-fee", "GKE cluster management fee", 1,
                                     assumption="one regional cluster; the free-tier credit is not applied"))
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
                monthly_usd=full_rate * HOURS_PER_MONTH * nats, gpus_per_unit=0, source=p.source, date=p.date,
                assumption="every node reaches the internet through Cloud NAT (private nodes)", scales_with="system",
                status=p.status, priced_in=_reference_of(cat, cloud)))
            ips = nats if shape.public_ipv4 is None else shape.public_ipv4
            if ips:
                lines.append(_fixed_line(cat, cloud, NAT_IP[cloud], f"Cloud NAT external IPv4 x{ips}", ips,
                                         assumption="the external IP addresses the NAT uses (AUTO_ONLY: one per 1,008 VMs "
                                                    "at 64 ports each), all month"))
        if shape.load_balancers:
            not_modelled.append(f"{shape.load_balancers} GCP load balancer(s)")
    elif cloud == "aws":
        if shape.managed_control_plane:
            lines.append(_fixed_line(cat, cloud, "eks-control-plane-fee", "EKS control plane fee", 1,
                                     assumption="one cluster, standard support rate"))
        nats = 1 if shape.nat_gateways is None else shape.nat_gateways
        if nats:
            lines.append(_fixed_line(cat, cloud, "nat-gateway", f"NAT gateway x{nats}", nats,
                                     assumption="hours of the gateway(s), all month"))
        ips = nats if shape.public_ipv4 is None else shape.public_ipv4
        if ips:
            lines.append(_fixed_line(cat, cloud, NAT_IP[cloud], f"public IPv4 addresses x{ips}", ips,
                                     assumption="the NAT gateways' Elastic IPs (one each), all month"))
        if shape.kms_keys is None:
            not_modelled.append("KMS keys (how many the stack creates not given)")
        elif shape.kms_keys:
            lines.append(_fixed_line(cat, cloud, "kms-key", f"KMS keys x{shape.kms_keys}", shape.kms_keys,
                                     assumption="customer-managed keys the stack creates (EKS secrets, the alert topic), "
                                                "yearly rotation on: $3/month each from the third year"))
        if shape.load_balancers:
            lines.append(_fixed_line(cat, cloud, "network-load-balancer", f"Network Load Balancer x{shape.load_balancers}",
                                     shape.load_balancers, assumption="hours only"))
    if cloud in NAT_DATA and (shape.nat_gateways is None or shape.nat_gateways):
        if shape.nat_gib_per_month is None:
            not_modelled.append("NAT data processing (traffic not given: costs.natGibPerMonth)")
        elif shape.nat_gib_per_month > 0:
            gb = shape.nat_gib_per_month
            lines.append(_volume_line(cat, cloud, NAT_DATA[cloud], "network-data", "NAT data processing", gb * 0.25, gb,
                                      f"{gb:g} GB/month at full capacity (costs.natGibPerMonth), a quarter of it at idle; "
                                      "checkpoints bypass the NAT (S3 gateway endpoint / Private Google Access)",
                                      "system"))
    if shape.managed_control_plane and cloud in ("aws", "gcp"):
        fee = shape.extended_support_usd_per_hour
        if fee is None:
            not_modelled.append("extended-support fee (support status of the Kubernetes version not given)")
        else:  # a zero line too: the bill says why no extended-support fee is charged
            lines.append(CostLine(name="extended support fee", kind="support", resource="extended-support",
                                  capacity=None, idle_quantity=1, quantity=1, unit_usd_per_hour=fee,
                                  idle_monthly_usd=fee * HOURS_PER_MONTH, monthly_usd=fee * HOURS_PER_MONTH,
                                  gpus_per_unit=0, source=shape.extended_support_basis or "version calendar",
                                  date=_dt.date.today().isoformat(),
                                  assumption=("the Kubernetes minor is past standard support: "
                                              if fee > 0 else "none: ") + (shape.extended_support_basis or "")))

    ref = cat.reference_region(cloud)
    if shape.region and ref and shape.region != ref:
        if "default" in how:
            warnings.append(f"prices are the catalog's {ref} reference prices; {shape.region} may differ "
                            f"({cat.default_price_rule(cloud)})")
        else:
            warnings.append(f"instance prices are {shape.region}'s (the catalog's regional prices or priceOverrides); "
                            f"disks, storage, network and fees are the catalog's {ref} prices and may differ")

    if cloud == "kubernetes":
        not_modelled += OWN_CLUSTER_NOT_MODELLED
    # A bill adds up in cents: each line is rounded to the cent and the totals are the sums of the rounded
    # lines, so cost.json, the policy pack's message and a --base diff's per-line deltas agree to the cent.
    lines = [replace(line, idle_monthly_usd=_cents(line.idle_monthly_usd), monthly_usd=_cents(line.monthly_usd))
             for line in lines]
    idle = _cents(sum(line.idle_monthly_usd for line in lines))
    full = _cents(sum(line.monthly_usd for line in lines))
    return Estimate(name=shape.name or f"{cloud}-stack", cloud=cloud, region=shape.region, lines=tuple(lines),
                    idle_monthly_usd=idle, full_monthly_usd=full, idle_gpus=idle_gpus, full_gpus=full_gpus,
                    warnings=tuple(warnings),
                    not_modelled=tuple(not_modelled) + tuple(shape.extra_not_modelled)
                    + (ALWAYS_NOT_MODELLED if cloud != "kubernetes" else ()),
                    gpu_models=tuple(gpu_models), capacities=tuple(dict.fromkeys(p.capacity for p in shape.gpu_pools)),
                    expected_utilization=shape.expected_utilization)


def own_nodes_unpriced(shape: StackShape, catalog: Catalog) -> list[str]:
    """The node groups of a kubernetes stack without a price for their capacity: (group, type, capacity) in words.
    Prices are all or none (the config refuses a mix); EstimateError for a mix handed in another way (a hand-made
    node-groups ConfigMap the policy pack reads)."""
    groups = [(f"gpu pool {p.name}", p.instance_type, p.capacity) for p in shape.gpu_pools]
    groups += [(f"{g.role} nodes", g.instance_type, g.capacity) for g in (shape.system_nodes or ()) if g.full_count]
    missing, priced = [], []
    for what, itype, capacity in groups:
        t = _lookup(catalog, "kubernetes", itype, what)
        (priced if t.price(capacity) is not None else missing).append(f"{what} ({itype}, {capacity})")
    if missing and priced:
        raise EstimateError(f"node groups {', '.join(missing)} have no price while {', '.join(priced)} have one: a price "
                            "for every node group or for none")
    return missing


def _own_cluster_storage(shape: StackShape) -> list[str]:
    out = []
    if shape.pvc_gib:
        total = sum(g for _, g in shape.pvc_gib)
        out.append(f"persistent volumes of the platform ({total:g} GiB requested on the cluster's StorageClass; "
                   "its cost is your cluster's)")
    else:
        out.append("persistent volumes of the platform (on the cluster's StorageClass; its cost is your cluster's)")
    out.append("the checkpoint store (kubernetes.checkpointStore: yours, not priced)")
    return out


def _unpriced_estimate(shape: StackShape, catalog: Catalog, unpriced: list[str]) -> Estimate:
    """No bill: the GPUs are known, the prices are not. The totals are 0 and `priced` False, and the reports say
    'not estimated' instead of a number."""
    idle_gpus = full_gpus = 0
    models: list[str] = []
    for p in shape.gpu_pools:
        t = _lookup(catalog, "kubernetes", p.instance_type, f"gpu pool {p.name}")
        idle_gpus += t.gpus * p.min_nodes
        full_gpus += t.gpus * p.max_nodes
        if t.gpu_model and t.gpu_model not in models:
            models.append(t.gpu_model)
    return Estimate(name=shape.name or "kubernetes-stack", cloud="kubernetes", region=shape.region, lines=(),
                    idle_monthly_usd=0.0, full_monthly_usd=0.0, idle_gpus=idle_gpus, full_gpus=full_gpus,
                    not_modelled=tuple(_own_cluster_storage(shape)) + tuple(shape.extra_not_modelled) + OWN_CLUSTER_NOT_MODELLED,
                    gpu_models=tuple(models), capacities=tuple(dict.fromkeys(p.capacity for p in shape.gpu_pools)),
                    expected_utilization=shape.expected_utilization, unpriced=tuple(unpriced))
def _cents(usd: float) -> float:
    return round(usd + 0.0, 2) + 0.0


def extended_support(cloud: str, minor: Optional[str], today: _dt.date) -> tuple[Optional[float], str]:
    """(the extended-support fee per cluster-hour of `minor` on `today`, where the number comes from), from the
    version calendar (gpu_platform/data/versions_calendar.py); preflight's bill and the policy pack's cost
    ceiling both price it here."""
    from gpu_platform.data.versions_calendar import load_calendar

    cal = load_calendar()
    status = cal.status(cloud, minor, today)
    fee = cal.extended_support_fee_per_hour(cloud, minor, today)
    fees = cal.fees(cloud)
    src = f"{fees.source} (retrieved {fees.retrieved})" if fees else "gpu_platform/costs/catalog/kubernetes-versions.yaml"
    return fee, f"{minor} is in {status} support on {today.isoformat()}; {src}"


def catalog_age(dates: list[str], today: Optional[_dt.date] = None) -> tuple[int, str]:
    """(age in days of the OLDEST of the price dates, that date): how stale the estimate's prices can be."""
    day = today or _dt.date.today()
    oldest = min(dates)
    return (day - _dt.date.fromisoformat(oldest)).days, oldest


__all__ = ["ALWAYS_NOT_MODELLED", "CostLine", "DEFAULT_SYSTEM_NODES", "Estimate", "EstimateError", "NodeGroup",
           "OWN_CLUSTER_NOT_MODELLED", "PoolShape", "RegionPriceRefused", "StackShape", "catalog_age", "dearest_type",
           "estimate", "extended_support", "own_nodes_unpriced"]
