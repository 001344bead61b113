"""Refresh AWS and GCP prices of the catalog from recorded price data (no network, no credentials).

    python -m gpu_platform.costs refresh --aws-spot gpu_platform/costs/catalog/recorded/skypilot-aws-vms-us-east-1.csv
    python -m gpu_platform.costs refresh --aws-spot-history FILE.json     # `aws ec2 describe-spot-price-history` output
    python -m gpu_platform.costs refresh --aws-price-list FILE.json       # the public EC2 price list (offer file) for a region
    python -m gpu_platform.costs refresh --gcp-skus FILE.json             # Cloud Billing Catalog API services/6F81-5844-456A/skus
    python -m gpu_platform.costs refresh --aws-spot F.csv --all-regions   # every region of a recorded SkyPilot catalog excerpt
    python -m gpu_platform.costs refresh --gcp-machine-prices F.csv --all-regions   # recorded per-region GCP machine prices

Readers turn each documented response shape into plain observations; `apply_aws` / `apply_gcp` write them
into gpu_platform/costs/catalog/<cloud>.yaml with the file as the source, today's date, and for market prices (AWS Spot)
the spread and date range of the observations. The catalog value of a Spot price is the MEDIAN over the
availability zones (and times) observed: an ASG with capacity-optimized allocation may land in any of them.
Only prices change; types missing from the data keep their row and are reported.

Response shapes (documented by the clouds):
- describe-spot-price-history: {"SpotPriceHistory": [{"AvailabilityZone", "InstanceType", "ProductDescription",
  "SpotPrice": "0.4177", "Timestamp": "2026-11-20T08:00:00+00:00"}, ...]}
  (https://docs.aws.amazon.com/cli/latest/reference/ec2/describe-spot-price-history.html)
- EC2 offer file: {"products": {sku: {"attributes": {"instanceType", "regionCode", "operatingSystem",
  "tenancy", "preInstalledSw", "capacitystatus"}}}, "terms": {"OnDemand": {sku: {code: {"priceDimensions":
  {code: {"unit": "Hrs", "pricePerUnit": {"USD": "1.0060000000"}}}}}}}}
  (https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/reading-an-offer.html)
- Cloud Billing skus: {"skus": [{"description", "category": {"resourceGroup", "usageType"}, "serviceRegions",
  "pricingInfo": [{"effectiveTime", "pricingExpression": {"usageUnit", "tieredRates": [{"unitPrice":
  {"units": "1", "nanos": 632265000}}]}}]}]} (https://cloud.google.com/billing/v1/how-tos/catalog-api)
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional


from gpu_platform.costs.catalog import CATALOG_DIR, not_offered_there, read_document, validate_document
from gpu_platform.costs.refresh import RefreshResult, _replace


REPO_ROOT = CATALOG_DIR.parents[2]


@dataclass(frozen=True)
class Observations:
    """Price observations of one instance type: the catalog value is their median."""

    instance_type: str
    prices: tuple[float, ...]
    first: str  # ISO date of the earliest observation
    last: str
    source: str
    # The capture date is not stated, only bounds (a recorded catalog snapshot): first..last is when it can have
    # been made, and the price is dated by `first`, the oldest it can be, so the catalog-age check counts the
    # most it can be behind the market, not the day the file was read.
    capture_unknown: bool = False

    @property
    def date(self) -> str:
        return self.first if self.capture_unknown else self.last

    @property
    def median(self) -> float:
        return round(statistics.median(self.prices), 6)

    @property
    def observed(self) -> str:
        return self.first if self.first == self.last else f"{self.first}..{self.last}"


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _skip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def _header_date(text: str) -> Optional[str]:
    """The 'read YYYY-MM-DD' date a recorded file's comment header states."""
    import re

    m = re.search(r"read (\d{4}-\d{2}-\d{2})", "\n".join(line for line in text.splitlines() if line.startswith("#")))
    return m.group(1) if m else None


def _observed_not_before(text: str) -> Optional[str]:
    """The 'observed-no-earlier-than: YYYY-MM-DD' a recorded file's header states (evidence of the earliest its
    capture can be, when the capture date itself is not stated)."""
    import re

    m = re.search(r"observed-no-earlier-than: (\d{4}-\d{2}-\d{2})", text)
    return m.group(1) if m else None


def _observed_date(text: str) -> Optional[str]:
    """The 'observed-no-later-than: YYYY-MM-DD' a recorded file's header states (when the capture date itself
    is unknown, the latest date the observations can be from)."""
    import re

    m = re.search(r"observed-no-later-than: (\d{4}-\d{2}-\d{2})", text)
    return m.group(1) if m else None


# An availability zone ID of a region's own zones ("use1-az1", "euw1-az3"); Local Zones ("use1-atl2-az1") and
# Wavelength zones carry a location between the region and the zone number. A node group in the region's subnets
# never lands in them, and their prices differ: they are not read.
_REGION_AZ_ID = re.compile(r"^[a-z]+[0-9]+-az[0-9]+$")


def _regional_zone(row: Mapping[str, Any]) -> bool:
    az = str(row.get("AvailabilityZone") or "")
    return not az or bool(_REGION_AZ_ID.match(az))


def skypilot_regions(path: Path) -> list[str]:
    """The regions a recorded SkyPilot catalog excerpt has rows for, sorted."""
    text = Path(path).read_text(encoding="utf-8")
    return sorted({row["Region"] for row in csv.DictReader(io.StringIO(_skip_comments(text))) if row.get("Region")})


def read_skypilot_vms_csv(path: Path, region: str) -> dict[str, Observations]:
    """Spot prices per type from a recorded SkyPilot catalog (catalogs/v7 or v9 aws/vms.csv): one row per
    availability zone; rows without a SpotPrice, and rows of Local Zones, are skipped. Their date is the
    header's 'observed-no-later-than' date if it states one, else the 'read' date."""
    text = Path(path).read_text(encoding="utf-8")
    date = _observed_date(text) or _header_date(text) or _dt.date.fromtimestamp(Path(path).stat().st_mtime).isoformat()
    by_type: dict[str, list[float]] = {}
    for row in csv.DictReader(io.StringIO(_skip_comments(text))):
        if row.get("Region") != region or not row.get("SpotPrice") or not _regional_zone(row):
            continue
        by_type.setdefault(row["InstanceType"], []).append(float(row["SpotPrice"]))
    src = f"{_rel(path)} (SkyPilot catalog rows, {region}, one per availability zone)"
    earliest = _observed_not_before(text)
    first, unknown = (earliest, True) if earliest and earliest < date else (date, False)
    return {t: Observations(t, tuple(sorted(p)), first, date, src, capture_unknown=unknown) for t, p in by_type.items()}


def read_skypilot_on_demand(path: Path, region: str) -> dict[str, float]:
    text = Path(path).read_text(encoding="utf-8")
    out: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO(_skip_comments(text))):
        if row.get("Region") == region and row.get("Price") and _regional_zone(row):
            out[row["InstanceType"]] = float(row["Price"])
    return out


def read_spot_price_history(doc: Mapping[str, Any], region: str, source: str,
                            product: str = "Linux/UNIX") -> dict[str, Observations]:
    """Spot prices per type from `aws ec2 describe-spot-price-history` output (one region's AZs, any
    time window): every sample counts, so the spread covers zones and time."""
    by_type: dict[str, list[tuple[float, str]]] = {}
    for e in doc.get("SpotPriceHistory") or []:
        if e.get("ProductDescription") != product or not str(e.get("AvailabilityZone", "")).startswith(region):
            continue
        by_type.setdefault(e["InstanceType"], []).append((float(e["SpotPrice"]), str(e["Timestamp"])[:10]))
    out = {}
    for t, samples in by_type.items():
        dates = sorted(d for _, d in samples)
        out[t] = Observations(t, tuple(sorted(p for p, _ in samples)), dates[0], dates[-1], source)
    return out


def read_ec2_price_list(doc: Mapping[str, Any], region: str) -> dict[str, float]:
    """On-Demand $/hour per type from an EC2 offer file: Linux, shared tenancy, no pre-installed software,
    capacitystatus Used (the rows AWS's own pricing page shows)."""
    skus = {}
    for sku, p in (doc.get("products") or {}).items():
        a = p.get("attributes") or {}
        if (a.get("regionCode") == region and a.get("operatingSystem") == "Linux" and a.get("tenancy") == "Shared"
                and a.get("preInstalledSw", "NA") == "NA" and a.get("capacitystatus", "Used") == "Used"
                and a.get("instanceType")):
            skus[sku] = a["instanceType"]
    out: dict[str, float] = {}
    for sku, terms in ((doc.get("terms") or {}).get("OnDemand") or {}).items():
        if sku not in skus:
            continue
        for term in terms.values():
            for dim in (term.get("priceDimensions") or {}).values():
                if dim.get("unit") == "Hrs":
                    out[skus[sku]] = float(dim["pricePerUnit"]["USD"])
    return out


def _write(path: Path, doc: Mapping[str, Any]) -> None:
    text = path.read_text(encoding="utf-8")
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    problems = validate_document(doc, path.name)
    if problems:
        raise ValueError("refreshed catalog would be invalid:\n  " + "\n  ".join(problems))
    _replace(path, header, doc)


def _prices_of(doc: Mapping[str, Any], inst: dict[str, Any], region: Optional[str]) -> dict[str, Any]:
    """Where a refresh for `region` writes an instance type's prices: the type itself for the catalog's
    reference region, else its `regionalPrices[region]` (another region's prices never replace the reference
    region's: a refresh with `--region eu-west-1` used to overwrite us-east-1's)."""
    if not region or region == doc.get("referenceRegion"):
        return inst
    return inst.setdefault("regionalPrices", {}).setdefault(region, {})


def _unoffered(inst: dict[str, Any], region: str, res: RefreshResult, skipped: dict[str, list[str]]) -> bool:
    """Whether `region` is one the catalog does not record as offering the type (catalog.not_offered_there): then no
    price is written there, one recorded before is removed, and `skipped` collects the region for one note per type."""
    if not not_offered_there(inst, region):
        return False
    old = (inst.get("regionalPrices") or {}).pop(region, None)
    if old is not None:
        res.changed.append(f"{inst['name']} {region}: regional prices removed (the catalog does not record {region} "
                           "as offering it)")
    if "regionalPrices" in inst and not inst["regionalPrices"]:
        inst.pop("regionalPrices")
    skipped.setdefault(inst["name"], []).append(region)
    return True


def _unoffered_notes(skipped: Mapping[str, list[str]], source: str) -> list[str]:
    return [f"{name}: not written in {', '.join(regions)}: the catalog does not record "
            f"{'it' if len(regions) == 1 else 'them'} as offering {name} (its `regions`), and a price there is not the "
            f"machine's (docs/cost-model.md, \"Regions\"); {source} has {'a row' if len(regions) == 1 else 'rows'} there"
            for name, regions in skipped.items()]


def apply_aws(spot: Mapping[str, Observations] | None = None, on_demand: Mapping[str, float] | None = None,
              on_demand_source: str = "", catalog_path: Path | None = None, today: Optional[str] = None,
              write: bool = True, drop_untraced_spot: bool = False, region: Optional[str] = None,
              on_demand_date: Optional[str] = None, on_demand_observed: Optional[str] = None) -> RefreshResult:
    """Rewrite aws.yaml: Spot prices (median, spread, date range) from `spot`; On-Demand prices from
    `on_demand`, for `region` (default: the reference region; another region's go to `regionalPrices`).
    With `drop_untraced_spot`, a reference Spot price of a type absent from `spot` is removed (set to null)
    unless it already traces to recorded data: the catalog then holds no Spot price it cannot trace.
    `on_demand_date` is the date the On-Demand prices are from (a recorded file's date); default: today;
    `on_demand_observed` their capture window when only bounds are known (skypilot_file_window)."""
    path = catalog_path or CATALOG_DIR / "aws.yaml"
    doc = read_document(path)
    res = _apply_aws_doc(doc, spot, on_demand, on_demand_source, today, drop_untraced_spot, region, on_demand_date,
                         on_demand_observed=on_demand_observed)
    if write and (res.changed or res.notes):
        _write(path, doc)
    elif not write:
        problems = validate_document(doc, path.name)
        if problems:
            raise ValueError("refreshed catalog would be invalid:\n  " + "\n  ".join(problems))
    return res


def _apply_aws_doc(doc: dict[str, Any], spot: Mapping[str, Observations] | None, on_demand: Mapping[str, float] | None,
                   on_demand_source: str, today: Optional[str], drop_untraced_spot: bool, region: Optional[str],
                   on_demand_date: Optional[str], file_dated: bool = False,
                   on_demand_observed: Optional[str] = None) -> RefreshResult:
    """apply_aws on a loaded aws.yaml document (changed in place). `file_dated`: every price is dated by the recorded
    file alone (its sources name no refresh day), so that re-running on the same file writes the same catalog."""
    today = today or _dt.date.today().isoformat()
    refreshed = ("(refreshed by python -m gpu_platform.costs refresh)" if file_dated
                 else f"(refreshed by python -m gpu_platform.costs refresh on {today})")
    on_demand_date = on_demand_date or today
    res = RefreshResult()
    spot = spot or {}
    on_demand = on_demand or {}
    skipped: dict[str, list[str]] = {}
    for inst in doc["instances"]:
        name = inst["name"]
        if region and region != doc.get("referenceRegion") and (name in spot or name in on_demand) \
                and _unoffered(inst, region, res, skipped):
            continue
        target = _prices_of(doc, inst, region)
        if name in spot:
            o = spot[name]
            # `date` is when the observations were made (not when they were copied): the catalog-age check
            # must see how old a market price really is.
            made = (f"made between {o.first} and {o.last} (the capture date is not stated; dated by the earliest)"
                    if o.capture_unknown else f"made no later than {o.last}")
            new = {"usdPerHour": o.median, "source": f"{o.source}; median of {len(o.prices)} observations, {made} "
                   f"{refreshed}", "date": o.date,
                   "low": min(o.prices), "high": max(o.prices),
                   "observed": o.observed, "samples": len(o.prices), "status": "recorded"}
            old = target.get("spot") or {}
            if any(old.get(k) != new[k] for k in ("usdPerHour", "low", "high", "date", "observed")
                   + (("source",) if file_dated else ())):
                res.changed.append(f"{name}: spot {old.get('usdPerHour')} -> {new['usdPerHour']} $/h "
                                   f"(range {new['low']}-{new['high']}, {new['samples']} samples)")
                target["spot"] = new
            else:
                res.unchanged.append(name)
        elif drop_untraced_spot and target is inst and inst.get("spot") and inst["spot"].get("status") != "recorded":
            res.changed.append(f"{name}: spot {inst['spot']['usdPerHour']} removed (no recorded observation)")
            inst["spot"] = None
        elif int(inst.get("gpus") or 0) > 0 and spot:
            res.missing_from_response.append(name)
        if name in on_demand:
            price = on_demand[name]
            old = target.get("onDemand") or {}
            made = (f"; made between {on_demand_observed.replace('..', ' and ')} (the capture date is not stated; "
                    "dated by the earliest)" if on_demand_observed else "")
            source = f"{on_demand_source}{made} (refreshed by python -m gpu_platform.costs refresh)"
            if old.get("usdPerHour") is None or abs(float(old["usdPerHour"]) - price) > 1e-9 \
                    or (file_dated and (old.get("date"), old.get("source"), old.get("observed"))
                        != (on_demand_date, source, on_demand_observed)):
                res.changed.append(f"{name}: on-demand {old.get('usdPerHour')} -> {price} $/h")
                target["onDemand"] = {"usdPerHour": price, "source": source, "date": on_demand_date,
                                      **({"observed": on_demand_observed} if on_demand_observed else {}),
                                      "status": "recorded"}
            elif old.get("status") not in ("recorded", "verified"):
                target["onDemand"] = dict(old, status="recorded",
                                          source=f"{old['source']}; matches {on_demand_source} ({today})")
                res.notes.append(f"{name}: on-demand {price} confirmed by {on_demand_source}")
        if target is not inst and not target:
            inst["regionalPrices"].pop(region)
            if not inst["regionalPrices"]:
                inst.pop("regionalPrices")
    res.notes += _unoffered_notes(skipped, on_demand_source or "the response")
    return res


# ---------------------------------------------------------------------------------------------
# GCP: Cloud Billing Catalog API
# ---------------------------------------------------------------------------------------------

# Which SKU descriptions price which part of a machine (Compute Engine service 6F81-5844-456A).
# Preemptible and Spot VMs share the "Preemptible" usage type SKUs.
_GCP_PARTS = {
    "a2-core": ("A2 Instance Core", "CPU"),
    "a2-ram": ("A2 Instance Ram", "RAM"),
    "gpu-a100": ("Nvidia Tesla A100 GPU", "GPU"),
}


def _unit_price(sku: Mapping[str, Any]) -> tuple[float, str]:
    info = (sku.get("pricingInfo") or [{}])[0]
    rates = info.get("pricingExpression", {}).get("tieredRates") or []
    rate = rates[-1]["unitPrice"] if rates else {"units": "0", "nanos": 0}
    return int(rate.get("units") or 0) + int(rate.get("nanos") or 0) / 1e9, str(info.get("effectiveTime", ""))[:10]


def read_gcp_skus(doc: Mapping[str, Any], region: str) -> dict[tuple[str, str], tuple[float, str]]:
    """{(part, "OnDemand"|"Preemptible"): ($/unit-hour, effective date)} for the parts in _GCP_PARTS
    offered in `region` (the part names: a2-core per vCPU-hour, a2-ram per GiB-hour, gpu-a100 per GPU-hour)."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    for sku in doc.get("skus") or []:
        if region not in (sku.get("serviceRegions") or []):
            continue
        cat = sku.get("category") or {}
        usage = cat.get("usageType")
        if usage not in ("OnDemand", "Preemptible"):
            continue
        desc = str(sku.get("description", ""))
        for part, (needle, group) in _GCP_PARTS.items():
            if needle in desc and cat.get("resourceGroup") == group and "Commit" not in desc:
                out[(part, usage)] = _unit_price(sku)
    return out


def gcp_a2_prices(parts: Mapping[tuple[str, str], tuple[float, str]], vcpus: int, memory_gib: float,
                  gpus: int) -> dict[str, float]:
    """Machine $/hour of an A2 type from its parts: vCPU x core + GiB x ram + GPUs x A100, per usage type."""
    out = {}
    for usage in ("OnDemand", "Preemptible"):
        keys = [("a2-core", usage), ("a2-ram", usage), ("gpu-a100", usage)]
        if all(k in parts for k in keys):
            out[usage] = round(vcpus * parts[keys[0]][0] + memory_gib * parts[keys[1]][0] + gpus * parts[keys[2]][0], 6)
    return out


def apply_gcp(parts: Mapping[tuple[str, str], tuple[float, str]], source: str, catalog_path: Path | None = None,
              today: Optional[str] = None, write: bool = True, region: Optional[str] = None) -> RefreshResult:
    """Rewrite the A100 (a2-highgpu-*) machine prices of gcp.yaml from their parts. Spot = preemptible
    (one SKU set). The A100 GPU-only prices go to the file's top-level `gpuOnlyPrices` for reports."""
    path = catalog_path or CATALOG_DIR / "gcp.yaml"
    doc = read_document(path)
    today = today or _dt.date.today().isoformat()
    res = RefreshResult()
    skipped: dict[str, list[str]] = {}
    for inst in doc["instances"]:
        if not str(inst["name"]).startswith("a2-highgpu-"):
            continue
        prices = gcp_a2_prices(parts, int(inst["vcpus"]), float(inst["memoryGib"]), int(inst["gpus"]))
        if not prices:
            res.missing_from_response.append(inst["name"])
            continue
        if region and region != doc.get("referenceRegion") and _unoffered(inst, region, res, skipped):
            continue
        target = _prices_of(doc, inst, region)
        for usage, keys in (("OnDemand", ("onDemand",)), ("Preemptible", ("spot", "preemptible"))):
            if usage not in prices:
                continue
            for key in keys:
                old = target.get(key) or {}
                if old.get("usdPerHour") is not None and abs(float(old["usdPerHour"]) - prices[usage]) <= 1e-6:
                    res.unchanged.append(f"{inst['name']} {key}")
                    continue
                res.changed.append(f"{inst['name']}: {key} {old.get('usdPerHour')} -> {prices[usage]} $/h")
                target[key] = {"usdPerHour": prices[usage], "date": today, "status": "recorded",
                             "source": f"{source}: {inst['vcpus']} vCPU x A2 core + {inst['memoryGib']} GiB x A2 ram + "
                                       f"{inst['gpus']} x A100 ({usage} SKUs; refreshed by python -m gpu_platform.costs refresh)"}
    gpu = {}
    for usage, key in (() if region and region != doc.get("referenceRegion") else
                       (("OnDemand", "onDemand"), ("Preemptible", "preemptible"))):
        if ("gpu-a100", usage) in parts:
            rate, eff = parts[("gpu-a100", usage)]
            gpu[key] = {"usdPerHour": round(rate, 6), "source": f"{source} (A100 GPU SKU, {usage}, effective {eff})",
                        "date": today, "status": "recorded"}
    res.notes += _unoffered_notes(skipped, source)
    if gpu:
        old = (doc.get("gpuOnlyPrices") or {}).get("nvidia-tesla-a100") or {}
        for key, new in gpu.items():
            if (old.get(key) or {}).get("usdPerHour") != new["usdPerHour"]:
                res.changed.append(f"A100 GPU-only {key}: {(old.get(key) or {}).get('usdPerHour')} -> {new['usdPerHour']} $/h")
                doc.setdefault("gpuOnlyPrices", {}).setdefault("nvidia-tesla-a100", {})[key] = new
    if write and res.changed:
        _write(path, doc)
    return res


# ---------------------------------------------------------------------------------------------
# GCP: per-region machine prices (a recorded excerpt of a catalog generated from the Cloud Billing Catalog API)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachinePrices:
    """Per-region prices of the machine types in a recorded file: region -> machine -> (On-Demand $/h, Spot $/h)."""

    prices: Mapping[str, Mapping[str, tuple[float, Optional[float]]]]
    date: str  # when the prices were generated or read (the file's 'observed-no-later-than'), or the lower bound
    # of the capture window when the header states one ('observed-no-earlier-than'), as `observed` then says
    source: str
    # Whether a price is the whole machine's, GPUs included. A SkyPilot GCP row prices an A2/A3/G2 machine's host
    # only (its GPUs are separate accelerator rows), so a file of that format never prices a GPU type.
    includes_gpus: bool = True
    basis: str = "machine incl. GPUs, generated {date} from the Cloud Billing Catalog API"
    observed: Optional[str] = None  # "first..last" when only bounds of the capture date are known


def read_gcp_machine_prices(path: Path) -> MachinePrices:
    """Per-region GCP machine prices from a recorded file, in one of two shapes:
    - `machine,region,hour,hour_spot` (cyclenerd-gcp-pricing-*.csv): the machine's On-Demand price including its
      GPUs, and its Spot price;
    - SkyPilot's catalogs/v9/gcp/vms.csv rows (InstanceType,...,Region,AvailabilityZone,Price,SpotPrice): one row
      per zone; a region's price is its zones' (the same in every zone), its Spot price their median. Rows with an
      accelerator are not read, and the result prices no GPU machine (a host row is not the machine's price).
    The header must state when the prices were generated or read ('observed-no-later-than: YYYY-MM-DD')."""
    text = Path(path).read_text(encoding="utf-8")
    date, observed = _file_window(text, _observed_date(text))
    if not date:
        raise ValueError(f"{_rel(path)}: the header must say when its prices were generated "
                         "('# observed-no-later-than: YYYY-MM-DD')")
    reader = csv.DictReader(io.StringIO(_skip_comments(text)))
    skypilot = "InstanceType" in (reader.fieldnames or [])
    rows: dict[tuple[str, str], list[tuple[float, Optional[float]]]] = {}
    for i, row in enumerate(reader, start=1):
        if skypilot and row.get("AcceleratorName"):
            continue
        machine, region = (row.get("InstanceType"), row.get("Region")) if skypilot else (row.get("machine"), row.get("region"))
        hour_key, spot_key = ("Price", "SpotPrice") if skypilot else ("hour", "hour_spot")
        try:
            hour = float(row[hour_key])
            spot = float(row[spot_key]) if row.get(spot_key) else None
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{_rel(path)}: data row {i}: needs a machine, a region and {hour_key}/{spot_key} "
                             f"numbers, got {dict(row)!r}") from None
        if not machine or not region:
            raise ValueError(f"{_rel(path)}: data row {i}: no machine or region in {dict(row)!r}")
        if hour <= 0 or (spot is not None and not 0 < spot <= hour):
            raise ValueError(f"{_rel(path)}: {machine} in {region}: an On-Demand price above 0 and a Spot price "
                             f"above 0 and not above it, got {hour} and {spot}")
        rows.setdefault((region, machine), []).append((hour, spot))
    out: dict[str, dict[str, tuple[float, Optional[float]]]] = {}
    for (region, machine), obs in rows.items():
        hours = {h for h, _ in obs}
        if len(hours) > 1:
            raise ValueError(f"{_rel(path)}: {machine} in {region}: the zones disagree on the On-Demand price "
                             f"({sorted(hours)}); GCP prices a machine per region")
        spots = [sp for _, sp in obs if sp is not None]
        out.setdefault(region, {})[machine] = (obs[0][0], statistics.median(spots) if spots else None)
    if skypilot:
        return MachinePrices(out, date, _rel(path), includes_gpus=False,
                             basis=("SkyPilot catalog rows from the Cloud Billing Catalog API, " +
                                    ("made between {first} and {last} (the capture date is not stated; dated by "
                                     "the earliest)" if observed else "read {date}")), observed=observed)
    return MachinePrices(out, date, _rel(path), observed=observed)


def apply_gcp_machines(data: MachinePrices, regions: Iterable[str], catalog_path: Path | None = None,
                       today: Optional[str] = None, write: bool = True, file_dated: bool = False) -> RefreshResult:
    """Write each region's machine prices into gcp.yaml: `regionalPrices.<region>` (the type's own prices for the
    reference region). Spot and preemptible get the Spot price (GCP bills preemptible VMs at Spot prices)."""
    path = catalog_path or CATALOG_DIR / "gcp.yaml"
    doc = read_document(path)
    today = today or _dt.date.today().isoformat()
    res = RefreshResult()
    by_name = {inst["name"]: inst for inst in doc["instances"]}
    skipped: dict[str, list[str]] = {}
    for region in regions:
        for machine, (hour, spot) in sorted((data.prices.get(region) or {}).items()):
            inst = by_name.get(machine)
            if inst is None:
                res.not_in_catalog.append(f"{machine} ({region})")
                continue
            if int(inst.get("gpus") or 0) > 0 and not data.includes_gpus:
                res.notes.append(f"{machine} ({region}): {data.source} prices its host only, not the GPUs; not written")
                continue
            if region != doc.get("referenceRegion") and _unoffered(inst, region, res, skipped):
                continue
            target = _prices_of(doc, inst, region)
            first, _, last = (data.observed or "").partition("..")
            src = (f"{data.source} ({region}, {data.basis.format(date=data.date, first=first, last=last)}; refreshed by python -m "
                   f"gpu_platform.costs refresh" + (")" if file_dated else f" on {today})"))
            new = {"onDemand": hour, **({"spot": spot, "preemptible": spot} if spot is not None else {})}
            for key, usd in new.items():
                old = target.get(key) or {}
                if old.get("usdPerHour") is not None and abs(float(old["usdPerHour"]) - usd) <= 1e-9 \
                        and old.get("date") == data.date and old.get("observed") == data.observed \
                        and (not file_dated or old.get("source") == src):
                    res.unchanged.append(f"{machine} {region} {key}")
                    continue
                res.changed.append(f"{machine} {region}: {key} {old.get('usdPerHour')} -> {usd} $/h")
                target[key] = {"usdPerHour": usd, "source": src, "date": data.date,
                               **({"observed": data.observed} if data.observed else {}), "status": "recorded"}
    res.notes += _unoffered_notes(skipped, data.source)
    problems = validate_document(doc, path.name)
    if problems:
        raise ValueError("refreshed catalog would be invalid:\n  " + "\n  ".join(problems))
    if write and res.changed:
        _write(path, doc)
    return res


def _file_window(text: str, latest: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """(date, observed) of every price a recorded file gives: when its header bounds the capture from below
    ('observed-no-earlier-than') as well as above (`latest`), the price is dated by the lower bound, the oldest it
    can be, and `observed` is the window; else it is dated `latest` and has no window."""
    earliest = _observed_not_before(text)
    if latest and earliest and earliest < latest:
        return earliest, f"{earliest}..{latest}"
    return latest, None


def skypilot_file_window(path: Path) -> tuple[str, Optional[str]]:
    """(date, observed) a recorded SkyPilot excerpt's prices carry, On-Demand and Spot alike: the lower bound of its
    capture window and the window when its header states one ('observed-no-earlier-than'), else its
    'observed-no-later-than' or 'read YYYY-MM-DD' date and no window."""
    text = Path(path).read_text(encoding="utf-8")
    date, observed = _file_window(text, _observed_date(text) or _header_date(text))
    if not date:
        raise ValueError(f"{_rel(path)}: the header must say when its rows were read ('read YYYY-MM-DD') or "
                         "observed ('# observed-no-later-than: YYYY-MM-DD')")
    return date, observed


def skypilot_file_date(path: Path) -> str:
    """The date a recorded SkyPilot excerpt's prices carry (skypilot_file_window's)."""
    return skypilot_file_window(path)[0]


def refresh_aws_all_regions(path: Path, catalog_path: Path | None = None, today: Optional[str] = None,
                            write: bool = True) -> RefreshResult:
    """`costs refresh --aws-spot F --all-regions`: every region F has rows for but the reference region, in
    region order, each into its types' `regionalPrices` (Spot: the median over the region's zones; On-Demand:
    the region's Price), all dated by F's header. The reference region is left as it is."""
    path = Path(path)
    target = Path(catalog_path or CATALOG_DIR / "aws.yaml")
    doc = read_document(target)  # one load and one write for all regions
    ref = doc.get("referenceRegion")
    date, observed = skypilot_file_window(path)
    regions = [r for r in skypilot_regions(path) if r != ref]
    res = merge_results({r: _apply_aws_doc(doc, read_skypilot_vms_csv(path, r), read_skypilot_on_demand(path, r),
                                           f"{_rel(path)} (SkyPilot catalog Price column, {r})", today, False, r, date,
                                           file_dated=True, on_demand_observed=observed)
                         for r in regions})
    if write and (res.changed or res.notes):
        _write(target, doc)
    else:
        problems = validate_document(doc, target.name)
        if problems:
            raise ValueError("refreshed catalog would be invalid:\n  " + "\n  ".join(problems))
    res.notes.append(f"{len(regions)} regions read; the reference region {ref} is left as it is "
                     f"(--region {ref} refreshes it)")
    return res


def refresh_gcp_all_regions(path: Path, catalog_path: Path | None = None, today: Optional[str] = None,
                            write: bool = True) -> RefreshResult:
    """`costs refresh --gcp-machine-prices F --all-regions`: every region F prices but the reference region."""
    data = read_gcp_machine_prices(Path(path))
    target = catalog_path or CATALOG_DIR / "gcp.yaml"
    ref = read_document(Path(target)).get("referenceRegion")
    regions = [r for r in sorted(data.prices) if r != ref]
    res = apply_gcp_machines(data, regions, catalog_path=catalog_path, today=today, write=write, file_dated=True)
    res.notes.append(f"{len(regions)} regions read; the reference region {ref} is left as it is "
                     f"(--region {ref} refreshes it)")
    return res


# The recorded files `costs refresh --all-regions` reads, in the order that writes the shipped catalog's
# regional prices (tests/test_costs_regional_prices.py re-runs them and compares the catalog byte for byte).
RECORDED_ALL_REGIONS = (
    ("aws", "skypilot-aws-vms-v9.csv"),
    ("gcp", "cyclenerd-gcp-pricing.csv"),
    ("gcp", "skypilot-gcp-vms-v9-e2-standard-4.csv"),
)


def merge_results(results: Mapping[str, RefreshResult]) -> RefreshResult:
    """One result for a refresh of several regions, each line naming its region."""
    out = RefreshResult()
    missing: dict[str, list[str]] = {}
    for region, r in results.items():
        out.changed += [f"{region}: {c}" for c in r.changed]
        out.unchanged += [f"{region}: {c}" for c in r.unchanged]
        for m in r.missing_from_response:
            missing.setdefault(m, []).append(region)
        out.notes += [f"{region}: {n}" for n in r.notes]
    out.missing_from_response = [f"{m} ({len(rs)} of {len(results)} regions)" for m, rs in missing.items()]
    return out


__all__ = ["MachinePrices", "Observations", "RECORDED_ALL_REGIONS", "apply_aws", "apply_gcp", "apply_gcp_machines",
           "gcp_a2_prices", "merge_results", "read_ec2_price_list", "read_gcp_machine_prices", "read_gcp_skus",
           "read_skypilot_on_demand", "read_skypilot_vms_csv", "read_spot_price_history", "refresh_aws_all_regions",
           "refresh_gcp_all_regions", "skypilot_file_date", "skypilot_file_window", "skypilot_regions"]
