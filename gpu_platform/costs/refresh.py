"""Refresh the Linode prices of the catalog from Linode's public types API (no auth).

    python -m gpu_platform.costs refresh --linode                 # GET https://api.linode.com/v4/linode/types
    python -m gpu_platform.costs refresh --linode --from-file F   # a saved response (tests use tests/data/)

Only prices change: for every catalog type found in the response, the hourly price (onDemand)
and the monthly cap are rewritten; a changed price gets the API as its source and today's date,
an unchanged one keeps its source and date. Types in the response but not in the catalog are
reported, not added (their regions must be checked by a person). Where the base price is 0 or
missing (the API has returned $0 for GPU classes priced per region) the catalog's reference
region price from `region_prices` is used, or the type is skipped with a note.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from gpu_platform.costs.catalog import CATALOG_DIR, not_offered_there, validate_document

LINODE_TYPES_URL = "https://api.linode.com/v4/linode/types"


@dataclass
class RefreshResult:
    changed: list[str] = field(default_factory=list)  # "g1-gpu-rtx6000-1: 1.5 -> 1.6 $/h"
    unchanged: list[str] = field(default_factory=list)
    not_in_catalog: list[str] = field(default_factory=list)
    missing_from_response: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        out = [f"changed: {len(self.changed)}, unchanged: {len(self.unchanged)}"]
        out += [f"  ~ {c}" for c in self.changed]
        if self.missing_from_response:
            out.append("in the catalog but not in the response (kept as is): " + ", ".join(self.missing_from_response))
        if self.not_in_catalog:
            out.append("GPU types in the response but not in the catalog (add by hand, with regions): "
                       + ", ".join(self.not_in_catalog))
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


def fetch_linode_types(url: str = LINODE_TYPES_URL, timeout: float = 30.0) -> dict[str, Any]:
    """All pages of the public types endpoint (no token needed)."""
    data: list[Any] = []
    page, pages = 1, 1
    while page <= pages:
        req = urllib.request.Request(f"{url}?page={page}&page_size=500",
                                     headers={"Accept": "application/json", "User-Agent": "gpu-platform-costs"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - fixed https URL
            body = json.load(resp)
        data += body.get("data", [])
        pages = int(body.get("pages", 1) or 1)
        page += 1
    return {"data": data, "page": 1, "pages": 1, "results": len(data)}


def _pick_price(entry: Mapping[str, Any], region: Optional[str]) -> tuple[Optional[float], Optional[float], str]:
    price = entry.get("price") or {}
    hourly, monthly = price.get("hourly"), price.get("monthly")
    if hourly:
        return float(hourly), (float(monthly) if monthly else None), "base price"
    for rp in entry.get("region_prices") or []:
        if rp.get("id") == region and rp.get("hourly"):
            return float(rp["hourly"]), (float(rp["monthly"]) if rp.get("monthly") else None), f"{region} region price"
    return None, None, "no price"


def _regional_linode(inst: dict[str, Any], entry: Mapping[str, Any], reference: Optional[str], today: str, source: str,
                     res: RefreshResult) -> None:
    """The regions Linode prices otherwise than the default (`region_prices`, reference region aside: its price is
    the type's own) go to the type's `regionalPrices.<region>.onDemand`; the monthly cap there follows the hourly
    rate (catalog.Catalog.in_region). A region no longer listed keeps no regional price: the default holds again."""
    listed = {rp.get("id"): rp for rp in entry.get("region_prices") or []
              if rp.get("id") and rp.get("id") != reference and rp.get("hourly")}
    unoffered = sorted(r for r in listed if not_offered_there(inst, r))
    if unoffered:  # a plan the catalog does not record in a region has no price there (catalog.not_offered_there)
        res.notes.append(f"{inst['name']}: region price not written in {', '.join(unoffered)}: the catalog does not "
                         "record the plan there (its `regions`)")
        listed = {r: rp for r, rp in listed.items() if r not in unoffered}
    regional = inst.get("regionalPrices") or {}
    for region in sorted(set(regional) - set(listed)):
        res.changed.append(f"{inst['name']} {region}: regional price {regional[region]['onDemand']['usdPerHour']} "
                           "removed (the types API lists no region price there: the default holds)")
        regional.pop(region)
    for region, rp in sorted(listed.items()):
        hourly = float(rp["hourly"])
        monthly = float(rp["monthly"]) if rp.get("monthly") else None
        old = (regional.get(region) or {}).get("onDemand") or {}
        if old.get("usdPerHour") is not None and abs(float(old["usdPerHour"]) - hourly) <= 1e-9 \
                and (regional.get(region) or {}).get("monthlyCapUsd") == monthly:
            res.unchanged.append(f"{inst['name']} {region}")
            continue
        regional[region] = {"onDemand": {"usdPerHour": hourly, "date": today, "source": (
            f"{source} ({region} region price; refreshed by python -m gpu_platform.costs refresh)")},
            **({"monthlyCapUsd": monthly} if monthly else {})}
        res.changed.append(f"{inst['name']} {region}: {old.get('usdPerHour')} -> {hourly} $/h (region price)")
    if regional:
        inst["regionalPrices"] = regional
    else:
        inst.pop("regionalPrices", None)


class _FlowList(list):
    pass


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(_FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def _flow_lists(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _flow_lists(v) for k, v in doc.items()}
    if isinstance(doc, list):
        if all(isinstance(x, str) for x in doc):
            return _FlowList(doc)
        return [_flow_lists(x) for x in doc]
    return doc


def _replace(path: Path, header: str, doc: Any) -> None:
    """Write a catalog file beside it and move it into place: a preflight reading the catalog meanwhile sees the
    old file or the new one, never a half-written one; a write that fails leaves the old file and nothing else."""
    tmp = path.with_name(f".{path.name}.refresh")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(header)
            yaml.dump(_flow_lists(doc), f, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def refresh_linode(response: Mapping[str, Any], catalog_path: Path | None = None, today: Optional[str] = None,
                   source: str = LINODE_TYPES_URL, write: bool = True) -> RefreshResult:
    """Rewrite the Linode catalog file's prices from a types API response."""
    path = catalog_path or CATALOG_DIR / "linode.yaml"
    text = path.read_text(encoding="utf-8")
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: same resolver
    today = today or _dt.date.today().isoformat()
    region = doc.get("referenceRegion")
    by_id = {e["id"]: e for e in response.get("data", []) if isinstance(e, Mapping) and "id" in e}
    res = RefreshResult()
    catalog_names = set()
    for inst in doc["instances"]:
        name = inst["name"]
        catalog_names.add(name)
        entry = by_id.get(name)
        if entry is None:
            res.missing_from_response.append(name)
            continue
        _regional_linode(inst, entry, region, today, source, res)
        hourly, monthly, how = _pick_price(entry, region)
        if hourly is None:
            res.notes.append(f"{name}: the response has no usable price (base 0, no {region} region price); kept")
            continue
        old = inst["onDemand"]
        old_cap = inst.get("monthlyCapUsd")
        if abs(float(old["usdPerHour"]) - hourly) > 1e-9 or (monthly is not None and old_cap != monthly):
            inst["onDemand"] = {"usdPerHour": hourly, "source": f"{source} ({how}, refreshed by python -m gpu_platform.costs refresh)",
                                "date": today}
            if monthly is not None:
                inst["monthlyCapUsd"] = monthly
            res.changed.append(f"{name}: {old['usdPerHour']} -> {hourly} $/h"
                               + (f", cap {old_cap} -> {monthly} $/month" if monthly is not None and old_cap != monthly else ""))
        else:
            res.unchanged.append(name)
        for key, api_key, conv in (("vcpus", "vcpus", int), ("gpus", "gpus", int)):
            if entry.get(api_key) is not None and conv(entry[api_key]) != inst.get(key):
                res.notes.append(f"{name}: {key} is {inst.get(key)} in the catalog, {entry[api_key]} in the API (not changed)")
    res.not_in_catalog = sorted(i for i, e in by_id.items()
                                if i not in catalog_names and (e.get("gpus") or 0) > 0)
    problems = validate_document(doc, path.name)
    if problems:
        raise ValueError("refreshed catalog would be invalid:\n  " + "\n  ".join(problems))
    if write and res.changed:
        _replace(path, header, doc)
    return res


__all__ = ["LINODE_TYPES_URL", "RefreshResult", "fetch_linode_types", "refresh_linode"]
