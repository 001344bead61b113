"""The Kubernetes version calendar: which minors each cloud can create on a given day, and their support status.

Reads `gpu_platform/costs/catalog/kubernetes-versions.yaml` (dated, sourced rows; see its header). Pure: no Pulumi, no
network, so config validation, the cost estimator and tests share it.

Clouds: "linode" (kubeadm, follows upstream Kubernetes), "gcp" (GKE), "aws" (EKS); "kubernetes" (a cluster the stack
does not create) reads the upstream rows.
Statuses on a day:
  "unreleased"  not yet available for new clusters (upstream/EKS release, GKE Regular-channel availability);
  "standard"    inside standard support (upstream: before the end of patch support);
  "extended"    past the end of standard support, inside the cloud's paid extended support (EKS, GKE);
  "unsupported" past everything: the cloud refuses new clusters (and upgrades existing ones).
"Today" is the UTC date, or `GPU_PLATFORM_TODAY` (ISO date) when set, so tests and reviewers can pin it.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

CALENDAR_FILE = Path(__file__).resolve().parent.parent / "costs" / "catalog" / "kubernetes-versions.yaml"
TODAY_ENV = "GPU_PLATFORM_TODAY"
WARN_DAYS = 60  # warn this many days before the end of standard support
CLOUD_SECTIONS = {"linode": "upstream", "gcp": "gke", "aws": "eks"}
# A cluster the stack does not create (cloud kubernetes) is judged by upstream Kubernetes' support dates: the
# program cannot know whose it is (EKS, GKE, kubeadm, a distribution) nor their extended support.
_SECTION_OF = {**CLOUD_SECTIONS, "kubernetes": "upstream"}
CNIS = ("cilium", "calico")
Status = Literal["unreleased", "standard", "extended", "unsupported"]
DateLike = Union[_dt.date, str, None]

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MINOR = re.compile(r"^1\.\d{1,2}$")
# Per section: the key of the availability date, of the end of standard support, of the end of extended support.
_KEYS = {"upstream": ("release", "endOfLife", None), "eks": ("release", "endOfStandard", "endOfExtended"),
         "gke": ("regular", "endOfStandard", "endOfExtended")}


class CalendarError(ValueError):
    """The calendar file breaks its rules (a row without source/date, a bad date, a duplicate minor)."""


@dataclass(frozen=True)
class MinorSupport:
    cloud: str  # linode | gcp | aws
    minor: str  # "1.35"
    available: _dt.date  # first day new clusters can use it
    end_of_standard: _dt.date  # first day outside standard support (upstream: end of patch support)
    end_of_extended: Optional[_dt.date]  # first day outside extended support; None = no extended support
    source: str
    retrieved: str

    def status(self, on: DateLike = None) -> Status:
        day = as_date(on)
        if day < self.available:
            return "unreleased"
        if day < self.end_of_standard:
            return "standard"
        if self.end_of_extended is not None and day < self.end_of_extended:
            return "extended"
        return "unsupported"

    def days_to_end_of_standard(self, on: DateLike = None) -> int:
        """Days from `on` to the end of standard support (negative once past it)."""
        return (self.end_of_standard - as_date(on)).days


@dataclass(frozen=True)
class Fees:
    standard_usd_per_hour: float
    extended_usd_per_hour: float
    extra_usd_per_hour: float  # what extended support adds to the standard fee
    source: str
    retrieved: str


# A pinned "today" outside these years is a mistake, and date arithmetic near year 1 or 9999 overflows.
TODAY_YEARS = (2000, 2999)
_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def today_problem() -> Optional[str]:
    """What is wrong with GPU_PLATFORM_TODAY (None: unset or a usable date); the message names the variable."""
    pinned = os.environ.get(TODAY_ENV, "").strip()
    if not pinned:
        return None
    try:
        day = _dt.date.fromisoformat(pinned) if _ISO_DATE.fullmatch(pinned) else None
    except ValueError:
        day = None
    if day is None or not TODAY_YEARS[0] <= day.year <= TODAY_YEARS[1]:
        return (f"{TODAY_ENV}={pinned[:40]!r}: a real date written YYYY-MM-DD from {TODAY_YEARS[0]} to {TODAY_YEARS[1]} "
                "(e.g. 2026-11-23), or unset it for today's UTC date")
    return None


def today() -> _dt.date:
    """The UTC date, or GPU_PLATFORM_TODAY (YYYY-MM-DD) when set; CalendarError (naming it) when it is no date."""
    problem = today_problem()
    if problem:
        raise CalendarError(problem)
    pinned = os.environ.get(TODAY_ENV, "").strip()
    if pinned:
        return _dt.date.fromisoformat(pinned)
    return _dt.datetime.now(_dt.timezone.utc).date()


def as_date(value: DateLike) -> _dt.date:
    if value is None:
        return today()
    if isinstance(value, _dt.date):
        return value
    return _dt.date.fromisoformat(value)


class Calendar:
    def __init__(self, rows: dict[str, dict[str, MinorSupport]], fees: dict[str, Fees], snapshot: str,
                 cni: Optional[dict[tuple[str, str], tuple[str, ...]]] = None):
        self._rows = rows
        self._fees = fees
        self.snapshot = snapshot
        self._cni = cni or {}

    def cni_kubernetes(self, cni: str, cni_minor: str) -> tuple[str, ...]:
        """The Kubernetes minors a CNI minor is tested on (empty: no sourced row)."""
        return self._cni.get((cni, cni_minor), ())

    def cni_minors(self, cni: str) -> tuple[str, ...]:
        """The CNI minors with a sourced row, oldest first."""
        return tuple(sorted((m for c, m in self._cni if c == cni), key=minor_key))

    def row(self, cloud: str, minor: str) -> Optional[MinorSupport]:
        return self._rows[_section(cloud)].get(minor)

    def minors(self, cloud: str) -> tuple[str, ...]:
        """Every minor the calendar knows for a cloud, oldest first."""
        return tuple(sorted(self._rows[_section(cloud)], key=minor_key))

    def status(self, cloud: str, minor: str, on: DateLike = None) -> Optional[Status]:
        """The minor's status on a day; None when the calendar has no row for it."""
        r = self.row(cloud, minor)
        return r.status(on) if r else None

    def allowed_minors(self, cloud: str, on: DateLike = None, extended: bool = False) -> tuple[str, ...]:
        """Minors a new cluster may use on a day: in standard support, plus extended when chosen explicitly."""
        ok = ("standard", "extended") if extended else ("standard",)
        return tuple(m for m in self.minors(cloud) if self._rows[_section(cloud)][m].status(on) in ok)

    def days_to_end_of_standard(self, cloud: str, minor: str, on: DateLike = None) -> Optional[int]:
        r = self.row(cloud, minor)
        return r.days_to_end_of_standard(on) if r else None

    def fees(self, cloud: str) -> Optional[Fees]:
        return self._fees.get(_section(cloud))

    def extended_support_fee_per_hour(self, cloud: str, minor: str, on: DateLike = None) -> float:
        """USD per cluster-hour that extended support adds on `on` (0.0 in standard support, on kubeadm,
        or for a minor the calendar does not know)."""
        fees = self.fees(cloud)
        if fees is None or self.status(cloud, minor, on) != "extended":
            return 0.0
        return fees.extra_usd_per_hour


def minor_key(minor: str) -> tuple[int, int]:
    major, _, rest = minor.partition(".")
    return int(major), int(rest)


def _section(cloud: str) -> str:
    try:
        return _SECTION_OF[cloud]
    except KeyError:
        raise ValueError(f"cloud must be one of {', '.join(_SECTION_OF)}, not {cloud!r}") from None


def validate_document(doc: Any) -> list[str]:
    """Every problem with a calendar document (empty list = valid)."""
    errors: list[str] = []
    if not isinstance(doc, dict):
        return ["the calendar must be a mapping"]
    for name, fee in (doc.get("fees") or {}).items():
        for key in ("standardUsdPerHour", "extendedUsdPerHour", "extraUsdPerHour"):
            if not isinstance(fee.get(key), (int, float)) or fee[key] < 0:
                errors.append(f"fees.{name}.{key}: a non-negative number")
        errors += _sourced(f"fees.{name}", fee)
    errors += _cni_errors(doc.get("cni"))
    for section, (avail, end_std, end_ext) in _KEYS.items():
        rows = doc.get(section)
        if not isinstance(rows, list) or not rows:
            errors.append(f"{section}: a non-empty list of rows")
            continue
        seen: set[str] = set()
        for i, row in enumerate(rows):
            where = f"{section}[{i}]"
            minor = str(row.get("minor", ""))
            if not _MINOR.match(minor):
                errors.append(f"{where}.minor: a quoted minor such as '1.35', not {row.get('minor')!r}")
            elif minor in seen:
                errors.append(f"{where}.minor: {minor} appears twice")
            seen.add(minor)
            errors += _sourced(where, row)
            date_keys = [k for k, v in row.items() if k not in ("minor", "source", "retrieved", "derived", "note")]
            for key in date_keys:
                value = row[key]
                if value is None and key in ("rapid", "stable"):
                    continue
                if not (isinstance(value, str) and _ISO.match(value)):
                    errors.append(f"{where}.{key}: an ISO date (quoted 'YYYY-MM-DD'), not {value!r}")
            for key in (avail, end_std) + ((end_ext,) if end_ext else ()):
                if key not in row:
                    errors.append(f"{where}.{key}: required")
            if not any(e.startswith(where) for e in errors):
                a, s = row[avail], row[end_std]
                if not a < s:
                    errors.append(f"{where}: {avail} must precede {end_std}")
                if end_ext and not s <= row[end_ext]:
                    errors.append(f"{where}: {end_std} must not follow {end_ext}")
    return errors


def _cni_errors(rows: Any) -> list[str]:
    """The CNI compatibility rows: cni, its minor, the Kubernetes minors it is tested on, source, date."""
    if not isinstance(rows, list) or not rows:
        return ["cni: a non-empty list of CNI compatibility rows"]
    errors: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, row in enumerate(rows):
        where = f"cni[{i}]"
        if not isinstance(row, dict):
            errors.append(f"{where}: a mapping")
            continue
        name, minor = row.get("cni"), str(row.get("minor", ""))
        if name not in CNIS:
            errors.append(f"{where}.cni: one of {', '.join(CNIS)}, not {name!r}")
        if not re.match(r"^\d+\.\d+$", minor):
            errors.append(f"{where}.minor: the CNI's quoted minor such as '1.19', not {row.get('minor')!r}")
        elif (name, minor) in seen:
            errors.append(f"{where}: {name} {minor} appears twice")
        seen.add((name, minor))
        k8s = row.get("kubernetes")
        if not isinstance(k8s, list) or not k8s or not all(isinstance(m, str) and _MINOR.match(m) for m in k8s):
            errors.append(f"{where}.kubernetes: a non-empty list of quoted Kubernetes minors, not {k8s!r}")
        errors += _sourced(where, row)
    return errors


def _sourced(where: str, row: dict) -> list[str]:
    errors = []
    if not isinstance(row.get("source"), str) or len(row["source"].strip()) < 10:
        errors.append(f"{where}.source: the URL or document the figures come from")
    if not (isinstance(row.get("retrieved"), str) and _ISO.match(row["retrieved"])):
        errors.append(f"{where}.retrieved: the ISO date the figures were read")
    return errors


def parse_calendar(doc: Any) -> Calendar:
    errors = validate_document(doc)
    if errors:
        raise CalendarError("invalid Kubernetes version calendar:\n  " + "\n  ".join(errors))
    rows: dict[str, dict[str, MinorSupport]] = {}
    for cloud, section in CLOUD_SECTIONS.items():
        avail, end_std, end_ext = _KEYS[section]
        rows[section] = {
            str(r["minor"]): MinorSupport(
                cloud=cloud, minor=str(r["minor"]), available=_dt.date.fromisoformat(r[avail]),
                end_of_standard=_dt.date.fromisoformat(r[end_std]),
                end_of_extended=_dt.date.fromisoformat(r[end_ext]) if end_ext else None,
                source=r["source"], retrieved=r["retrieved"])
            for r in doc[section]
        }
    fees = {name: Fees(float(f["standardUsdPerHour"]), float(f["extendedUsdPerHour"]), float(f["extraUsdPerHour"]),
                       f["source"], f["retrieved"]) for name, f in (doc.get("fees") or {}).items()}
    cni = {(r["cni"], str(r["minor"])): tuple(r["kubernetes"]) for r in doc["cni"]}
    return Calendar(rows, fees, str(doc.get("snapshotOf", "")), cni)


@lru_cache(maxsize=4)
def load_calendar(path: Optional[Path] = None) -> Calendar:
    """The calendar from `path` (default: the repository's data file)."""
    target = Path(path) if path else CALENDAR_FILE
    with open(target, encoding="utf-8") as fh:
        # BaseLoader keeps every scalar a string: a YAML date or an unquoted 1.30 (a float) cannot slip through.
        doc = yaml.load(fh, Loader=getattr(yaml, "CBaseLoader", yaml.BaseLoader))
    return parse_calendar(_numbers(doc))


def _numbers(doc: Any) -> Any:
    """BaseLoader reads everything as strings; turn the fee figures back into numbers and 'null' into None."""
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            if k.endswith("UsdPerHour") and isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    pass
            out[k] = None if v in ("null", "~") else _numbers(v)
        return out
    if isinstance(doc, list):
        return [_numbers(v) for v in doc]
    return doc


# Module-level shortcuts on the repository's calendar.
def allowed_minors(cloud: str, on: DateLike = None, extended: bool = False) -> tuple[str, ...]:
    return load_calendar().allowed_minors(cloud, on, extended)


def status(cloud: str, minor: str, on: DateLike = None) -> Optional[Status]:
    return load_calendar().status(cloud, minor, on)


def days_to_end_of_standard(cloud: str, minor: str, on: DateLike = None) -> Optional[int]:
    return load_calendar().days_to_end_of_standard(cloud, minor, on)


def extended_support_fee_per_hour(cloud: str, minor: str, on: DateLike = None) -> float:
    """What extended support adds per cluster-hour for `minor` on `cloud` on `on` (today by default)."""
    return load_calendar().extended_support_fee_per_hour(cloud, minor, on)


def default_minor(cloud: str, on: DateLike = None, calendar: Optional[Calendar] = None,
                  cni: Optional[str] = None) -> Optional[str]:
    """The newest minor in standard support for the cloud on the day (None if the calendar has none); with
    `cni` (Linode, which installs its own), the newest of those the CNI's compatibility rows list, so an
    unset kubernetesVersion never lands on a minor the stack's CNI is refused on."""
    cal = calendar or load_calendar()
    allowed = cal.allowed_minors(cloud, on)
    if cni is not None:
        tested = {k for cni_minor in cal.cni_minors(cni) for k in cal.cni_kubernetes(cni, cni_minor)}
        allowed = [m for m in allowed if m in tested] or allowed  # none tested: linode.cni's check says why
    return allowed[-1] if allowed else None


def oldest_running_minor(cloud: str, on: DateLike = None, extended: bool = False,
                         calendar: Optional[Calendar] = None) -> Optional[str]:
    """The oldest minor a cluster can still run on the day when its version is left to the cloud: the
    oldest in standard support (GKE's Rapid, Regular and Stable channels upgrade a cluster off a minor at
    the end of its standard support, GKE "Release schedule" / "Get long-term support with the Extended
    channel"), or in extended support too (`extended`: GKE's Extended channel keeps it until then). None
    when the calendar has no such minor."""
    cal = calendar or load_calendar()
    allowed = cal.allowed_minors(cloud, on, extended=extended)
    return allowed[0] if allowed else None


def known_minors() -> tuple[str, ...]:
    """Every minor any cloud's calendar lists (the structural check of kubernetesVersion)."""
    cal = load_calendar()
    return tuple(sorted({m for c in ("linode", "gcp", "aws") for m in cal.minors(c)},
                        key=lambda m: tuple(int(x) for x in m.split("."))))
