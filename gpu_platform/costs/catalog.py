"""The price catalog: dated, sourced instance prices per cloud, read from `gpu_platform/costs/catalog/<cloud>.yaml`.

Every price is data with a source (URL or document name) and a date (ISO); `validate_document`
refuses a catalog file with a price lacking either. Nothing here imports Pulumi.

Overrides replace prices for one stack (negotiated discounts, or the seed-era price set):
    load_catalog({"gcp/a2-highgpu-1g": {"onDemand": 2.5, "spot": 0.9, "preemptible": 0.9}})
A bare number gets the source "stack config override"; a mapping {usdPerHour, source, date}
(as in `gpu_platform/costs/catalog/seed-era-2022.yaml`) keeps its own source and date.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from gpu_platform.private_files import open_private_folder, read_private_json, user_cache_home, write_private
from gpu_platform.project import python_m

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
CLOUDS = ("linode", "gcp", "aws")
# The cloud of a stack on a cluster it does not create (gpu_platform/config/kubernetes.py): its instance types are
# the stack's own node types, priced (or not) by the stack file, never by a catalog file.
OWN_NODES = "kubernetes"
# How messages name a cloud, with its article: "an AWS stack", "not a GCP GPU type".
CLOUD_TITLES = {"linode": "Linode", "gcp": "GCP", "aws": "AWS", OWN_NODES: "Kubernetes"}


def a_cloud(cloud: str) -> str:
    """'an AWS', 'a GCP', 'a Linode' (an unknown cloud as written)."""
    title = CLOUD_TITLES.get(cloud, cloud)
    return f"{'an' if title[:1].upper() in 'AEIOU' else 'a'} {title}"
CAPACITIES = ("on-demand", "spot", "preemptible")
HOURS_PER_MONTH = 730.0
OVERRIDE_SOURCE = "stack config override"

# capacity name -> (dataclass attribute, YAML key)
_CAPACITY_FIELDS = {"on-demand": ("on_demand", "onDemand"), "spot": ("spot", "spot"),
                    "preemptible": ("preemptible", "preemptible")}
_YAML_TO_ATTR = {yaml_key: attr for attr, yaml_key in _CAPACITY_FIELDS.values()}
_ATTR_TO_CAPACITY = {attr: cap for cap, (attr, _) in _CAPACITY_FIELDS.items()}
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class CatalogError(ValueError):
    """A catalog file or an override set that breaks the catalog's rules."""


# How far a price has been checked. "recorded": computed by `python -m gpu_platform.costs refresh` from a recorded file in
# the repository; "verified": the source states this number; "secondary": a third-party catalog states it;
# "derived": arithmetic on sourced numbers (the source says how); "unverified": kept from an earlier edit,
# no dated source states it (an undated page that does is named in the source); "estimate": a rule of thumb.
PRICE_STATUSES = ("recorded", "verified", "secondary", "derived", "unverified", "estimate")
# What a price is per: an hour of an instance or service, a GiB stored for a month, a GB processed.
PRICE_UNITS = ("hour", "GiB-month", "GB")


@dataclass(frozen=True)
class Price:
    usd_per_hour: float  # USD per `unit` (an hour unless unit says otherwise)
    source: str  # URL or document name
    date: str  # ISO date the figure was read or published
    low: Optional[float] = None  # spread of the observations behind a market (spot) price
    high: Optional[float] = None
    observed: Optional[str] = None  # when the observations were made: "YYYY-MM-DD" or "YYYY-MM-DD..YYYY-MM-DD"
    samples: Optional[int] = None  # how many observations (e.g. availability zones)
    status: Optional[str] = None  # one of PRICE_STATUSES; None = not stated
    unit: str = "hour"

    @property
    def spread(self) -> Optional[str]:
        if self.low is None or self.high is None:
            return None
        return f"${self.low:g}-{self.high:g}" + (f" over {self.samples} samples" if self.samples else "") + \
            (f", observed {self.observed}" if self.observed else "")


@dataclass(frozen=True)
class InstanceType:
    cloud: str
    name: str
    gpus: int
    gpu_model: Optional[str]
    gpu_memory_gib: Optional[int]
    vcpus: int
    memory_gib: float
    accelerator: Optional[str]  # GCP accelerator type; None elsewhere
    on_demand: Optional[Price]  # None only for a stack's own node type without a price (cloud kubernetes)
    spot: Optional[Price]  # GCP Spot VM / AWS Spot (typical) price
    preemptible: Optional[Price]  # GCP preemptible (legacy) price; None elsewhere
    regions: Optional[tuple[str, ...]]  # regions where offered; None = unknown (no check)
    zones: Optional[tuple[str, ...]]  # GCP zones offering the accelerator; None = unknown
    # Linode bills hourly up to a monthly cap per instance; None = no cap (GCP, AWS).
    monthly_cap_usd: Optional[float] = None
    # What a node's kubelet offers pods, as the stack file states it for its own node types (cloud kubernetes:
    # {"cpu", "memory", "pods"} quantities, copied from `kubectl get node`); None: computed per cloud
    # (gpu_platform/components/capacity.py).
    allocatable: Optional[Mapping[str, Any]] = None
    # Prices of other regions than the catalog's reference region: region -> capacity -> Price (each sourced
    # and dated, like the reference prices; `regionalPrices` in the catalog file).
    regional: Mapping[str, Mapping[str, Price]] = field(default_factory=dict)
    # Capacities whose price a stack's priceOverrides set: they hold in every region.
    overridden: frozenset[str] = frozenset()
    # Linode's monthly cap in a region priced otherwise than the default (`regionalPrices.<region>.monthlyCapUsd`).
    regional_caps: Mapping[str, float] = field(default_factory=dict)
    # Where `regions` comes from, with its date (the catalog file's regionsSource); None when not stated.
    regions_source: Optional[str] = None

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    def price(self, capacity: str) -> Optional[Price]:
        """The price for a capacity type ("on-demand" | "spot" | "preemptible"); None if not offered."""
        if capacity not in _CAPACITY_FIELDS:
            raise ValueError(f"capacity must be one of {', '.join(CAPACITIES)}, not {capacity!r}")
        return getattr(self, _CAPACITY_FIELDS[capacity][0])

    def priced_somewhere(self, capacity: str) -> bool:
        """Whether any region has a price for `capacity` (the reference, a `regionalPrices` entry, or an override):
        AWS Spot of p3dn/p4d/p5 is priced in some regions but not in the reference us-east-1."""
        return (self.price(capacity) is not None or capacity in self.overridden
                or any(capacity in prices for prices in self.regional.values()))

    def monthly_cost(self, capacity: str, hours: float = HOURS_PER_MONTH) -> Optional[float]:
        """What one instance running `hours` in a month is billed (Linode's monthly cap applied)."""
        p = self.price(capacity)
        if p is None:
            return None
        cost = p.usd_per_hour * hours
        if self.monthly_cap_usd is not None:
            cost = min(cost, self.monthly_cap_usd)
        return cost


# AWS offering data: the recorded SkyPilot rows, one per availability zone that describe-instance-type-offerings
# lists for the type (recorded/skypilot-aws-vms-v9.csv's header says how they were made).
AWS_OFFERINGS_FILE = CATALOG_DIR / "recorded" / "skypilot-aws-vms-v9.csv"


@lru_cache(maxsize=1)
def recorded_aws_offerings() -> dict[str, frozenset[str]]:
    """type -> the regions whose (non-Local) zones the recorded SkyPilot AWS rows list it in; {} without the file."""
    import csv
    import io

    try:
        text = AWS_OFFERINGS_FILE.read_text(encoding="utf-8")
    except OSError:
        return {}
    rows = csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#"))))
    out: dict[str, set[str]] = {}
    for row in rows:
        if row.get("Region") and str(row.get("AvailabilityZone", "")).count("-") == 1:  # not a Local Zone
            out.setdefault(row["InstanceType"], set()).add(row["Region"])
    return {t: frozenset(r) for t, r in out.items()}


def not_offered_there(entry: Mapping[str, Any], region: str) -> bool:
    """Whether a catalog entry's recorded offering data (its `regions`) leaves `region` out. A price recorded there is
    not the type's: GCP's machine prices cover regions without the GPU and then sum its host alone (a2-highgpu-1g
    Spot in europe-west2: $0.39576 against $4.39 On-Demand), so the catalog keeps no price there, `costs refresh`
    writes none, and a stack there is refused until priceOverrides gives the price it pays. An entry without
    `regions` (no offering data) leaves no region out."""
    regions = entry.get("regions")
    return regions is not None and region not in regions


def offered_in(t: "InstanceType", region: str) -> tuple[Optional[bool], str]:
    """Whether `region` offers the type, as far as recorded data says (None: no data), and which data."""
    if t.regions is not None:
        return region in t.regions, t.regions_source or f"gpu_platform/costs/catalog/{t.cloud}.yaml regions"
    if t.cloud == "aws":
        regions = recorded_aws_offerings().get(t.name)
        if regions:
            return region in regions, (f"the recorded offerings ({AWS_OFFERINGS_FILE.relative_to(CATALOG_DIR.parent.parent.parent)}, "
                                       "one row per availability zone that offers the type)")
    return None, ""


class RegionalPriceMissing(ValueError):
    """A stack's region has no price for an instance type it uses (at the capacity it uses). `offered`: whether the
    region offers the type at all, as recorded offering data says (None: no data); where it does not, recording a
    price there is a dead end, so the message says to pick another region instead."""

    def __init__(self, cloud: str, name: str, capacity: str, region: str, reference: Optional[str], known: list[str],
                 offered: Optional[bool] = None, offering_source: str = ""):
        self.cloud, self.name, self.capacity, self.region = cloud, name, capacity, region
        self.reference, self.known, self.offered = reference, list(known), offered
        key = _CAPACITY_FIELDS[capacity][1]
        if offered is False:
            super().__init__(
                f"{self.gap()} (gpu_platform/costs/catalog/{cloud}.yaml), and {region} may not offer {name} at all: "
                f"{offering_source} list it in no {region} zone. Choose a region that offers it, or, if it is offered "
                f"there now, give the price you pay as priceOverrides.{name}.{key} (USD per node-hour)")
            return
        maybe = "" if offered else f" ({name} may not be offered in {region} at all: the catalog has no offering data for it)"
        super().__init__(
            f"{self.gap()} (gpu_platform/costs/catalog/{cloud}.yaml), and {region}'s price may differ{maybe}. "
            f"Give the price you pay there as priceOverrides.{name}.{key} (USD per node-hour), or record {region}'s "
            f"published price in the catalog ({refresh_command(cloud, capacity, region)}; docs/cost-model.md, "
            "\"Recording a region's prices\")")

    def gap(self) -> str:
        """What is missing, and where the catalog has the type's price instead, in one clause."""
        places = ", ".join([*(r for r in [self.reference] if r), *self.known])
        return (f"no {self.capacity} price for {self.name} in {self.region}: the catalog prices "
                f"{CLOUD_TITLES.get(self.cloud, self.cloud)} {self.name} only in {places or 'no region'}")


def refresh_command(cloud: str, capacity: str, region: str, data_file: Optional[str] = None) -> str:
    """The `costs refresh` command that records `region`'s `capacity` prices of `cloud` from a saved file
    (docs/cost-model.md, "Recording a region's prices", says how to get the file)."""
    run = f"{python_m('gpu_platform.costs')} refresh"
    if cloud == "linode":
        return f"{run} --linode"
    if cloud == "gcp":
        return f"{run} --gcp-machine-prices {data_file or f'prices-{region}.csv'} --region {region}"
    if capacity == "on-demand":
        return f"{run} --aws-price-list {data_file or f'ec2-{region}.json'} --region {region}"
    return f"{run} --aws-spot-history {data_file or f'spot-{region}.json'} --region {region}"


class Catalog:
    """All instance types and fixed costs of the three clouds."""

    def __init__(self, instances: Mapping[str, Mapping[str, InstanceType]],
                 fixed: Mapping[str, Mapping[str, Price]], meta: Mapping[str, Mapping[str, Any]] | None = None):
        self._instances = {c: dict(v) for c, v in instances.items()}
        self._fixed = {c: dict(v) for c, v in fixed.items()}
        self._meta = {c: dict(v) for c, v in (meta or {}).items()}

    def instance(self, cloud: str, name: str) -> Optional[InstanceType]:
        return self._instances.get(cloud, {}).get(name)

    def instances(self, cloud: str) -> list[InstanceType]:
        return list(self._instances.get(cloud, {}).values())

    def gpu_instances(self, cloud: str) -> list[InstanceType]:
        return [t for t in self.instances(cloud) if t.is_gpu]

    def fixed_costs(self, cloud: str) -> dict[str, Price]:
        return dict(self._fixed.get(cloud, {}))

    def with_instances(self, cloud: str, instances: Mapping[str, InstanceType]) -> "Catalog":
        """This catalog plus `instances` as `cloud`'s types (replacing any it had): a stack's own node types."""
        merged = {c: dict(v) for c, v in self._instances.items()}
        merged[cloud] = dict(instances)
        return Catalog(merged, self._fixed, self._meta)

    def gpu_only_price(self, cloud: str, accelerator: str, capacity: str) -> Optional[Price]:
        """The GPU-only price of an accelerator (GCP prices A2 machines as host + GPUs), if the catalog has it."""
        key = _CAPACITY_FIELDS[capacity][1]
        v = ((self._meta.get(cloud, {}).get("gpuOnlyPrices") or {}).get(accelerator) or {}).get(key)
        return _price(v) if v else None

    def reference_region(self, cloud: str) -> Optional[str]:
        """The region the catalog's prices are quoted for (us-east, us-central1, us-east-1)."""
        return self._meta.get(cloud, {}).get("referenceRegion")

    def default_price_rule(self, cloud: str) -> Optional[str]:
        """Where a cloud's reference price also holds outside the reference region (the catalog file's
        `defaultPriceHolds`, with its source), or None: then only recorded regional prices do."""
        return self._meta.get(cloud, {}).get("defaultPriceHolds")

    def in_region(self, cloud: str, name: str, capacity: str, region: Optional[str]) -> tuple[InstanceType, str]:
        """The instance type priced for `region` at `capacity`, and how ("reference", "regional", "override",
        "default"); RegionalPriceMissing when the catalog has no price there. No region (a shape that does not
        say) is the reference region."""
        t = self.instance(cloud, name)
        if t is None:
            raise KeyError(name)
        ref = self.reference_region(cloud)
        if capacity in t.overridden:
            return t, "override"
        if not region or ref is None:  # no reference region: a stack's own node prices (cloud kubernetes)
            return t, "reference"
        if region == ref:
            if t.price(capacity) is None and t.priced_somewhere(capacity):  # priced elsewhere, not here
                raise RegionalPriceMissing(cloud, name, capacity, region, None,
                                           sorted(r for r, ps in t.regional.items() if capacity in ps),
                                           *offered_in(t, region))
            return t, "reference"
        p = (t.regional.get(region) or {}).get(capacity)
        if p is not None:
            changes: dict[str, Any] = {_CAPACITY_FIELDS[capacity][0]: p}
            if capacity == "on-demand" and t.monthly_cap_usd is not None:
                # Linode bills a region priced otherwise up to that region's monthly price (types API
                # region_prices: {hourly, monthly}); without one recorded, the cap moves with the hourly rate.
                cap = t.regional_caps.get(region)
                if cap is None and t.on_demand and t.on_demand.usd_per_hour > 0:
                    cap = t.monthly_cap_usd * p.usd_per_hour / t.on_demand.usd_per_hour
                changes["monthly_cap_usd"] = cap
            return replace(t, **changes), "regional"
        if self.default_price_rule(cloud) and t.price(capacity) is not None and (t.regions is None or region in t.regions):
            return t, "default"
        raise RegionalPriceMissing(cloud, name, capacity, region, ref if t.price(capacity) is not None else None,
                                   sorted(r for r, ps in t.regional.items() if capacity in ps), *offered_in(t, region))

    def all_prices(self) -> list[tuple[str, Price]]:
        """(where, price) for every price in the catalog, for reports and checks."""
        out: list[tuple[str, Price]] = []
        for cloud in self._instances:
            for t in self._instances[cloud].values():
                for cap in CAPACITIES:
                    p = t.price(cap)
                    if p is not None:
                        out.append((f"{cloud}/{t.name}/{cap}", p))
            for name, p in self._fixed.get(cloud, {}).items():
                out.append((f"{cloud}/fixed/{name}", p))
        return out


# ---------------------------------------------------------------------------------------------
# Validation of catalog documents
# ---------------------------------------------------------------------------------------------


def _price_problems(where: str, value: Any) -> list[str]:
    if not isinstance(value, Mapping):
        return [f"{where}: a price must be a mapping with usdPerHour, source and date, got {value!r}"]
    problems = []
    usd = value.get("usdPerHour")
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or usd < 0:
        problems.append(f"{where}.usdPerHour: a non-negative number, got {usd!r}")
    src = value.get("source")
    if not isinstance(src, str) or not src.strip():
        problems.append(f"{where}.source: missing (every price needs a URL or document name)")
    date = value.get("date")
    if isinstance(date, _dt.date):
        date = date.isoformat()
    if not isinstance(date, str) or not _ISO_DATE.match(date):
        problems.append(f"{where}.date: missing or not an ISO date (YYYY-MM-DD), got {date!r}")
    else:
        try:
            _dt.date.fromisoformat(date)
        except ValueError:
            problems.append(f"{where}.date: not a real date: {date!r}")
    for key in ("low", "high"):
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            problems.append(f"{where}.{key}: a non-negative number, got {v!r}")
    lo, hi = value.get("low"), value.get("high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and isinstance(usd, (int, float)) \
            and not (lo - 1e-9 <= usd <= hi + 1e-9):
        problems.append(f"{where}: usdPerHour {usd} lies outside its spread {lo}..{hi}")
    obs = value.get("observed")
    if obs is not None and not (isinstance(obs, str) and all(_ISO_DATE.match(x) for x in obs.split(".."))):
        problems.append(f"{where}.observed: 'YYYY-MM-DD' or 'YYYY-MM-DD..YYYY-MM-DD', got {obs!r}")
    if value.get("samples") is not None and (not isinstance(value["samples"], int) or value["samples"] < 1):
        problems.append(f"{where}.samples: a positive integer, got {value['samples']!r}")
    if value.get("status") is not None and value["status"] not in PRICE_STATUSES:
        problems.append(f"{where}.status: one of {', '.join(PRICE_STATUSES)}, got {value['status']!r}")
    if value.get("unit", "hour") not in PRICE_UNITS:
        problems.append(f"{where}.unit: one of {', '.join(PRICE_UNITS)}, got {value.get('unit')!r}")
    extra = set(value) - {"usdPerHour", "source", "date", "low", "high", "observed", "samples", "status", "unit"}
    if extra:
        problems.append(f"{where}: unknown keys {sorted(extra)}")
    return problems


def validate_document(doc: Any, name: str = "catalog") -> list[str]:
    """Problems in one parsed catalog file (empty list = valid): every price has a number, a source
    and an ISO date; instance entries have the fields the loader needs."""
    if not isinstance(doc, Mapping):
        return [f"{name}: top level must be a mapping"]
    problems: list[str] = []
    cloud = doc.get("cloud")
    if cloud not in CLOUDS:
        problems.append(f"{name}.cloud: one of {', '.join(CLOUDS)}, got {cloud!r}")
    instances = doc.get("instances")
    if not isinstance(instances, list) or not instances:
        problems.append(f"{name}.instances: a non-empty list")
        instances = []
    seen: set[str] = set()
    for i, e in enumerate(instances):
        where = f"{name}.instances[{i}]"
        if not isinstance(e, Mapping):
            problems.append(f"{where}: a mapping")
            continue
        n = e.get("name")
        if not isinstance(n, str) or not n:
            problems.append(f"{where}.name: required")
        elif n in seen:
            problems.append(f"{where}.name: duplicate {n!r}")
        else:
            seen.add(n)
            where = f"{name}.instances[{n}]"
        for key in ("gpus", "vcpus"):
            if not isinstance(e.get(key), int) or e.get(key) < 0:
                problems.append(f"{where}.{key}: a non-negative integer, got {e.get(key)!r}")
        if not isinstance(e.get("memoryGib"), (int, float)):
            problems.append(f"{where}.memoryGib: a number, got {e.get('memoryGib')!r}")
        if isinstance(e.get("gpus"), int) and e["gpus"] > 0 and not e.get("gpuModel"):
            problems.append(f"{where}.gpuModel: required for a GPU type")
        if "onDemand" not in e:
            problems.append(f"{where}.onDemand: required")
        for key in ("onDemand", "spot", "preemptible"):
            if key in e and (key == "onDemand" or e[key] is not None):
                problems += _price_problems(f"{where}.{key}", e[key])
        for key in ("regions", "zones"):
            v = e.get(key)
            if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
                problems.append(f"{where}.{key}: a list of names or null")
        regional = e.get("regionalPrices") or {}
        if not isinstance(regional, Mapping):
            problems.append(f"{where}.regionalPrices: a mapping of region -> {{onDemand, spot, preemptible}} prices")
            regional = {}
        for region, prices in regional.items():
            if region == doc.get("referenceRegion"):
                problems.append(f"{where}.regionalPrices.{region}: the reference region's prices are the type's own")
            elif isinstance(e.get("regions"), list) and not_offered_there(e, region):
                problems.append(f"{where}.regionalPrices.{region}: a region of its `regions` (the catalog does not "
                                f"record {region} as offering {n}, so a price there is not the type's; a stack "
                                "there gives the price it pays in priceOverrides)")
            if not isinstance(prices, Mapping) or not prices:
                problems.append(f"{where}.regionalPrices.{region}: a mapping of onDemand/spot/preemptible prices")
                continue
            for cap, p in prices.items():
                if cap == "monthlyCapUsd":
                    if isinstance(p, bool) or not isinstance(p, (int, float)) or p <= 0:
                        problems.append(f"{where}.regionalPrices.{region}.monthlyCapUsd: a positive number, got {p!r}")
                elif cap not in _YAML_TO_ATTR:
                    problems.append(f"{where}.regionalPrices.{region}.{cap}: one of onDemand, spot, preemptible, "
                                    "monthlyCapUsd")
                else:
                    problems += _price_problems(f"{where}.regionalPrices.{region}.{cap}", p)
    for acc, prices in (doc.get("gpuOnlyPrices") or {}).items():
        for cap, p in (prices or {}).items():
            if cap not in _YAML_TO_ATTR:
                problems.append(f"{name}.gpuOnlyPrices.{acc}.{cap}: one of onDemand, spot, preemptible")
            else:
                problems += _price_problems(f"{name}.gpuOnlyPrices.{acc}.{cap}", p)
    fixed = doc.get("fixedCosts") or {}
    if not isinstance(fixed, Mapping):
        problems.append(f"{name}.fixedCosts: a mapping of name -> price")
    else:
        for k, v in fixed.items():
            problems += _price_problems(f"{name}.fixedCosts.{k}", v)
    return problems


def validate_override_set(doc: Any, name: str = "override set") -> list[str]:
    """Problems in an override-set file such as seed-era-2022.yaml (every price sourced and dated)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("overrides"), Mapping):
        return [f"{name}: needs a mapping 'overrides' of '<cloud>/<type>' -> prices"]
    problems: list[str] = []
    for key, prices in doc["overrides"].items():
        if not isinstance(key, str) or key.split("/", 1)[0] not in CLOUDS or "/" not in key:
            problems.append(f"{name}.overrides.{key}: key must be '<cloud>/<type>'")
        if not isinstance(prices, Mapping) or not prices:
            problems.append(f"{name}.overrides.{key}: a mapping of onDemand/spot/preemptible prices")
            continue
        for cap, p in prices.items():
            if cap not in _YAML_TO_ATTR:
                problems.append(f"{name}.overrides.{key}.{cap}: one of onDemand, spot, preemptible")
            else:
                problems += _price_problems(f"{name}.overrides.{key}.{cap}", p)
    return problems


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def _price(v: Mapping[str, Any]) -> Price:
    d = v["date"]
    return Price(float(v["usdPerHour"]), str(v["source"]), d.isoformat() if isinstance(d, _dt.date) else str(d),
                 low=None if v.get("low") is None else float(v["low"]),
                 high=None if v.get("high") is None else float(v["high"]),
                 observed=v.get("observed"), samples=v.get("samples"), status=v.get("status"),
                 unit=str(v.get("unit", "hour")))


def _tuple(v: Any) -> Optional[tuple[str, ...]]:
    return None if v is None else tuple(v)


# libyaml's parser (same safe resolver), ~10x faster than the pure-Python one on the catalogs
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# A catalog file parsed once is kept as JSON in the user's cache, under the hash of its bytes and of the parser, for
# the next process: every preflight and every policy pack it starts read the three clouds' files (850 kB of YAML,
# 0.15 CPU-seconds to parse with libyaml's scanner and PyYAML's Python constructor; the JSON reads in 10 ms). Kept
# only where the JSON reads back as the same document (no dates, no keys other than strings, no NaN). The prices
# decide the policy verdict, so a copy is read only from this user's own files in a folder only this user can write
# to, through a descriptor of that folder (gpu_platform/private_files.py), and only where it names the hash it was
# kept under (a copy renamed to another file's name is refused). The newest PARSED_KEPT copies stay; older ones go
# as new ones are written (only files named as this code names them).
PARSED_FORMAT = "catalog-json-2"
PARSED_KEPT = 12
PARSED_LIMIT = 64 * 1024 * 1024
_PARSED_NAME = re.compile(r"[0-9a-f]{64}\.json")


def parsed_cache_folder() -> Optional[Path]:
    home = user_cache_home()
    return None if home is None else home / "gpu-platform" / "catalog"


def _parsed_key(data: bytes) -> str:
    h = hashlib.sha256(f"{PARSED_FORMAT}\0{yaml.__version__}\0{_YAML_LOADER.__name__}\0".encode())
    h.update(data)
    return h.hexdigest()


def _kept_document(folder: int, key: str) -> Optional[dict[str, Any]]:
    _, kept = read_private_json(f"{key}.json", PARSED_LIMIT, dir_fd=folder)
    if not (isinstance(kept, dict) and kept.get("key") == key and isinstance(kept.get("document"), dict)):
        return None
    try:
        os.utime(f"{key}.json", dir_fd=folder, follow_symlinks=False)  # used now: the last to go
    except OSError:
        pass
    return kept["document"]


def _keep_document(folder: int, key: str, doc: Any) -> None:
    try:
        text = json.dumps(doc, allow_nan=False)
        if json.loads(text) != doc:  # keys other than strings (JSON makes them strings)
            return
    except (TypeError, ValueError, RecursionError):  # a date, NaN: not JSON
        return
    if not write_private(f"{key}.json", f'{{"key": "{key}", "document": {text}}}', dir_fd=folder):
        return
    try:
        with os.scandir(folder) as entries:
            kept = sorted((e.stat(follow_symlinks=False).st_mtime_ns, e.name) for e in entries
                          if _PARSED_NAME.fullmatch(e.name) and e.is_file(follow_symlinks=False))
        for _, old in kept[:-PARSED_KEPT]:
            os.unlink(old, dir_fd=folder)
    except OSError:
        pass


def read_document(path: Path) -> dict[str, Any]:
    """A catalog or override-set file, parsed; one of the package's own (CATALOG_DIR, what every process reads) is
    read back from what a process before kept of it where it can be."""
    data = Path(path).read_bytes()
    ours = Path(path).resolve().parent == CATALOG_DIR.resolve()
    folder = open_private_folder(parsed_cache_folder()) if ours else None
    try:
        key = _parsed_key(data) if folder is not None else ""
        if folder is not None:
            doc = _kept_document(folder, key)
            if doc is not None:
                return doc
        doc = yaml.load(data.decode("utf-8"), Loader=_YAML_LOADER)
        if folder is not None:
            _keep_document(folder, key, doc)
        return doc
    finally:
        if folder is not None:
            os.close(folder)


def parse_document(doc: Mapping[str, Any], name: str = "catalog") -> tuple[dict[str, InstanceType], dict[str, Price]]:
    problems = validate_document(doc, name)
    if problems:
        raise CatalogError("invalid price catalog:\n  " + "\n  ".join(problems))
    cloud = doc["cloud"]
    instances: dict[str, InstanceType] = {}
    for e in doc["instances"]:
        gpus = int(e["gpus"])
        instances[e["name"]] = InstanceType(
            cloud=cloud, name=e["name"], gpus=gpus,
            gpu_model=e.get("gpuModel") if gpus else None,
            gpu_memory_gib=e.get("gpuMemoryGib") if gpus else None,
            vcpus=int(e["vcpus"]), memory_gib=float(e["memoryGib"]),
            accelerator=e.get("accelerator"),
            on_demand=_price(e["onDemand"]),
            spot=_price(e["spot"]) if e.get("spot") else None,
            preemptible=_price(e["preemptible"]) if e.get("preemptible") else None,
            regions=_tuple(e.get("regions")), zones=_tuple(e.get("zones")), regions_source=e.get("regionsSource"),
            monthly_cap_usd=float(e["monthlyCapUsd"]) if e.get("monthlyCapUsd") is not None else None,
            regional={region: {_ATTR_TO_CAPACITY[_YAML_TO_ATTR[k]]: _price(v) for k, v in prices.items()
                               if k in _YAML_TO_ATTR}
                      for region, prices in (e.get("regionalPrices") or {}).items()},
            regional_caps={region: float(prices["monthlyCapUsd"])
                           for region, prices in (e.get("regionalPrices") or {}).items() if "monthlyCapUsd" in prices},
        )
    fixed = {k: _price(v) for k, v in (doc.get("fixedCosts") or {}).items()}
    return instances, fixed


@lru_cache(maxsize=1)
def _base_catalog() -> Catalog:
    instances, fixed, meta = {}, {}, {}
    for cloud in CLOUDS:
        path = CATALOG_DIR / f"{cloud}.yaml"
        doc = read_document(path)
        if doc.get("cloud") != cloud:
            raise CatalogError(f"{path}: cloud must be {cloud!r}")
        instances[cloud], fixed[cloud] = parse_document(doc, path.name)
        meta[cloud] = {k: doc.get(k) for k in ("referenceRegion", "billing", "currency", "gpuOnlyPrices", "defaultPriceHolds")}
    return Catalog(instances, fixed, meta)


def _override_price(key: str, cap_key: str, value: Any, today: str) -> Price:
    if isinstance(value, Mapping):
        problems = _price_problems(f"overrides.{key}.{cap_key}", value)
        if problems:
            raise CatalogError("invalid price override:\n  " + "\n  ".join(problems))
        return _price(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise CatalogError(f"price override {key}.{cap_key}: a positive $/hour, got {value!r}")
    return Price(float(value), OVERRIDE_SOURCE, today)


def apply_overrides(base: Catalog, overrides: Mapping[str, Mapping[str, Any]]) -> Catalog:
    """A new catalog with the given prices replaced. Keys '<cloud>/<type>', values map onDemand /
    spot / preemptible to a $/hour number or a {usdPerHour, source, date} mapping."""
    today = _dt.date.today().isoformat()
    clouds = tuple(dict.fromkeys((*CLOUDS, *base._instances)))
    instances = {c: {t.name: t for t in base.instances(c)} for c in clouds}
    for key, prices in overrides.items():
        cloud, _, name = str(key).partition("/")
        t = instances.get(cloud, {}).get(name)
        if t is None:
            raise CatalogError(f"price override {key!r}: no such instance type in the catalog "
                               f"(keys are '<cloud>/<type>', cloud one of {', '.join(CLOUDS)})")
        changes: dict[str, Price] = {}
        for cap_key, value in (prices or {}).items():
            attr = _YAML_TO_ATTR.get(cap_key) or (_CAPACITY_FIELDS[cap_key][0] if cap_key in _CAPACITY_FIELDS else None)
            if attr is None:
                raise CatalogError(f"price override {key}.{cap_key}: one of onDemand, spot, preemptible")
            if value is None:
                continue
            changes[attr] = _override_price(key, cap_key, value, today)
        cap = t.monthly_cap_usd
        if "on_demand" in changes and cap is not None and t.on_demand is not None and t.on_demand.usd_per_hour > 0:
            # Linode's monthly cap is the plan's price at its hourly rate: a different rate moves the cap with
            # it. Kept as it was, an override of any size was capped back to the list price (a stack overriding
            # $100/h still showed $446 a month and passed its budget).
            changes["monthly_cap_usd"] = cap * changes["on_demand"].usd_per_hour / t.on_demand.usd_per_hour
        overridden = t.overridden | {_ATTR_TO_CAPACITY[a] for a in changes if a in _ATTR_TO_CAPACITY}
        instances[cloud][name] = replace(t, overridden=overridden, **changes)
    return Catalog(instances, {c: base.fixed_costs(c) for c in clouds}, base._meta)


def load_catalog(overrides: dict | None = None) -> Catalog:
    """The catalog from gpu_platform/costs/catalog/*.yaml (cached), with `overrides` applied when given."""
    base = _base_catalog()
    if not overrides:
        return base
    return apply_overrides(base, overrides)


def load_override_set(name_or_path: str | Path) -> dict[str, dict[str, Any]]:
    """An override set file (e.g. "seed-era-2022", a file in gpu_platform/costs/catalog/) as an overrides dict
    for load_catalog."""
    p = Path(name_or_path)
    if not p.suffix:
        p = CATALOG_DIR / f"{name_or_path}.yaml"
    doc = read_document(p)
    problems = validate_override_set(doc, p.name)
    if problems:
        raise CatalogError("invalid override set:\n  " + "\n  ".join(problems))
    return {k: dict(v) for k, v in doc["overrides"].items()}


def catalog_files() -> list[Path]:
    """Every price data file of the catalog (the three clouds and the override sets). The Kubernetes version
    calendar lives beside them but has its own schema (gpu_platform/data/versions_calendar.py validates it)."""
    return sorted(p for p in CATALOG_DIR.glob("*.yaml") if p.name not in NON_PRICE_FILES)


NON_PRICE_FILES = ("kubernetes-versions.yaml", "gpu-speed.yaml")


@dataclass(frozen=True)
class GpuSpeeds:
    """Relative training speed per GPU model (reference GPU = 1.0) with the benchmark it comes from."""

    reference: str
    source: str
    date: str
    speeds: Mapping[str, Optional[float]]  # model -> relative speed; None = not benchmarked

    def speed(self, model: Optional[str]) -> Optional[float]:
        return self.speeds.get(model) if model else None


@lru_cache(maxsize=1)
def load_gpu_speeds() -> GpuSpeeds:
    """gpu_platform/costs/catalog/gpu-speed.yaml: images/s of each model over the reference model's."""
    doc = read_document(CATALOG_DIR / "gpu-speed.yaml")
    bench = doc["benchmark"]
    ref = float(bench[doc["reference"]]["imagesPerSecond"])
    speeds = {m: (None if v is None else round(float(v["imagesPerSecond"]) / ref, 3)) for m, v in bench.items()}
    return GpuSpeeds(str(doc["reference"]), str(doc["source"]), str(doc["date"]), speeds)


__all__ = ["CAPACITIES", "CATALOG_DIR", "CLOUDS", "HOURS_PER_MONTH", "OVERRIDE_SOURCE", "OWN_NODES", "Catalog", "CatalogError",
           "RegionalPriceMissing", "not_offered_there", "refresh_command",
           "GpuSpeeds", "InstanceType", "PRICE_STATUSES", "Price", "apply_overrides", "catalog_files", "load_catalog",
           "load_gpu_speeds", "load_override_set",
           "parse_document", "read_document", "validate_document", "validate_override_set"]
