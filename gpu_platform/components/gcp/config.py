"""The `gcp` section of the stack config and the rules only GCP has.

Everything here is checked offline, before any resource is registered: the project, region and zones
are well-formed and agree with each other, the GPU of every pool is offered in the chosen zones (where
the price catalog knows the zones), the network ranges do not overlap and are big enough for the
largest cluster the pools allow, and the control plane stays reachable only from `adminCidrs`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gpu_platform.components.config_base import (SYSTEM_POOL_DEFAULTS, Cidr, ConfigIssue, Model, SystemPool, pool_issue_capacity,
                                    system_pool_key, validate_system_pool)
from gpu_platform.components.kubernetes_version import version_issues

if TYPE_CHECKING:
    from gpu_platform.components.config import StackConfig
    from gpu_platform.costs.catalog import Catalog, InstanceType

PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
BILLING_ACCOUNT = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")
MACHINE_TYPE = re.compile(r"^[a-z][a-z0-9]*-[a-z0-9-]+$")

# Environments whose GKE cluster gets deletion protection unless the stack says otherwise.
PRODUCTION_ENVIRONMENTS = ("prod", "production")
# Name of the GKE node pool for system workloads; GPU pools may not take it.
SYSTEM_POOL_NAME = "system"
# A GCP budget notifies at most this many Cloud Monitoring channels.
MAX_BUDGET_CHANNELS = 5
# GKE accepts at most this many master authorized networks (public endpoint).
MAX_AUTHORIZED_NETWORKS = 50
# GKE gives every node a /24 out of the pod range (110 pods per node).
POD_RANGE_PER_NODE = 24
# Ranges that stay inside a VPC (RFC 1918 and the RFC 6598 shared range). Python's is_private also
# counts the documentation ranges, which are not usable here.
INTERNAL_RANGES = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"))
INTERNAL_TEXT = "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10"


def is_internal(net: "ipaddress.IPv4Network | ipaddress.IPv6Network") -> bool:
    return net.version == 4 and any(net.subnet_of(r) for r in INTERNAL_RANGES)  # type: ignore[arg-type]


RFC3339_Z = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")  # fullmatch; \d is any Unicode digit
# GKE: a maintenance window must allow at least 48 hours of maintenance in any 32 days; 32 days hold at
# least 4 of each weekday (https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions).
MIN_WINDOW_HOURS_PER_32_DAYS = 48
MAX_EXCLUSIONS = 20  # per cluster (provider docstring of maintenance_exclusions)
MAX_NO_UPGRADES_DAYS = 30  # a NO_UPGRADES exclusion lasts at most 30 days


class MaintenanceExclusion(Model):
    """A period without automatic upgrades (e.g. before a deadline). `end` unset: until the minor's end of support."""

    name: str = Field(min_length=1, max_length=63)
    start: str  # RFC 3339 UTC, e.g. 2026-12-01T00:00:00Z
    end: Optional[str] = None
    # NO_MINOR_OR_NODE_UPGRADES: no minor upgrades and no node upgrades (patches of the control plane go on);
    # NO_MINOR_UPGRADES: no minor upgrades; NO_UPGRADES: nothing (at most 30 days).
    scope: Literal["NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"] = "NO_MINOR_OR_NODE_UPGRADES"

    @field_validator("start", "end")
    @classmethod
    def _rfc3339(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not RFC3339_Z.fullmatch(value):
            raise ValueError("an RFC 3339 UTC time such as 2026-12-01T00:00:00Z (GKE returns UTC; another form diffs forever)")
        if value is not None:
            import datetime as dt

            try:  # the pattern admits 2026-02-30 and 25:61:61; the calendar does not
                dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"a real date and time in RFC 3339 UTC such as 2026-12-01T00:00:00Z ({value} does "
                                 "not exist)") from None
        return value


class Maintenance(Model):
    """When GKE may upgrade the cluster and its nodes (control plane and every node pool).

    Default: weekends only (Saturday and Sunday, UTC), so no automatic upgrade drains a GPU node during the
    working week. GKE still acts outside the window for end of support and critical security fixes."""

    days: list[Literal["MO", "TU", "WE", "TH", "FR", "SA", "SU"]] = Field(default_factory=lambda: ["SA", "SU"], min_length=1)
    start_hour_utc: int = Field(default=0, ge=0, le=23, alias="startHourUTC")
    hours: int = Field(default=24, ge=4, le=24)  # each day's window; GKE needs at least 4 h contiguous
    exclusions: list[MaintenanceExclusion] = Field(default_factory=list)


class GcpSection(Model):
    project: str
    region: str
    zones: list[str] = Field(min_length=1)
    billing_account: str
    # VPC-native networking: nodes get networkCidr, pods and services the two secondary ranges.
    network_cidr: Cidr = "10.10.0.0/20"
    pods_cidr: Cidr = "10.16.0.0/14"
    services_cidr: Cidr = "10.20.0.0/20"
    # The /28 the private GKE control plane lives in (peered into the VPC).
    master_cidr: Cidr = "172.16.0.16/28"
    # The cluster is created and upgraded through this channel. EXTENDED keeps a minor up to ~24 months
    # (paid extended support after the end of standard support); the only way to use such a minor.
    release_channel: Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"] = "REGULAR"
    # None: on when environment is prod or production (see effective_deletion_protection).
    deletion_protection: Optional[bool] = None
    # gcp.systemPool {instanceType, minNodes, maxNodes}; machineType is last release's name of instanceType.
    system_pool: SystemPool = Field(default_factory=lambda: SystemPool(**SYSTEM_POOL_DEFAULTS["gcp"]))
    gpu_driver_version: Literal["LATEST", "DEFAULT", "INSTALLATION_DISABLED"] = "LATEST"
    # Checkpoints older than this are deleted by a bucket lifecycle rule.
    checkpoint_retention_days: int = Field(default=30, ge=1, le=3650)
    # True: the control plane has no public endpoint; adminCidrs must then be internal ranges
    # (VPN, Interconnect, a bastion in the VPC).
    private_endpoint: bool = False
    maintenance: Maintenance = Field(default_factory=Maintenance)

    _system_pool_renamed: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _system_pool_shape(cls, data: Any, handler: Any) -> "GcpSection":
        return validate_system_pool("gcp", data, handler)

    @field_validator("project")
    @classmethod
    def _project(cls, value: str) -> str:
        if not PROJECT_ID.fullmatch(value):
            raise ValueError("a GCP project ID: 6 to 30 lowercase letters, digits or '-', starting with a letter "
                             "(e.g. my-ml-project; the ID, not the display name or number)")
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not REGION.fullmatch(value):
            raise ValueError("a GCP region such as us-central1 (a region, not a zone)")
        return value

    @field_validator("billing_account")
    @classmethod
    def _billing_account(cls, value: str) -> str:
        if not BILLING_ACCOUNT.fullmatch(value):
            raise ValueError("a billing account ID like 012345-6789AB-CDEF01 (uppercase hex, as `gcloud billing "
                             "accounts list` prints it, without the billingAccounts/ prefix)")
        return value

    @field_validator("master_cidr")
    @classmethod
    def _master_cidr(cls, value: str) -> str:
        if ipaddress.ip_network(value).prefixlen != 28 or ipaddress.ip_network(value).version != 4:
            raise ValueError("an IPv4 /28 (GKE's private control plane needs exactly a /28), e.g. 172.16.0.16/28")
        return value


def effective_deletion_protection(cfg: "StackConfig") -> bool:
    """deletionProtection as configured; unset, it is on for prod/production environments."""
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    if section.deletion_protection is not None:
        return section.deletion_protection
    return cfg.environment in PRODUCTION_ENVIRONMENTS


def pool_zones(section: GcpSection, itype: "Optional[InstanceType]") -> list[str]:
    """The configured zones a GPU pool's nodes may run in: those offering its accelerator where the
    catalog knows, otherwise all of them (GKE then places nodes wherever capacity is)."""
    if itype is None or itype.zones is None:
        return list(section.zones)
    return [z for z in section.zones if z in itype.zones]


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    issues = pool_issue_capacity(cfg, ("spot", "preemptible", "on-demand"),
                                 "GCP offers Spot, preemptible and on-demand VMs")
    issues += _zone_issues(section)
    issues += _pool_issues(cfg, section, catalog)
    issues += _network_issues(cfg, section)
    issues += _access_issues(cfg, section)
    issues += _system_pool_issues(section, catalog)
    issues += _maintenance_issues(section.maintenance)
    if cfg.kubernetes_version_pinned:
        issues += version_issues(cfg)
    if cfg.name_suffix:
        # Workload Identity's "identity sameness": every cluster of a project maps training/trainer to the
        # same member of <project>.svc.id.goog, and the budget filters on the project.
        issues.append(ConfigIssue("nameSuffix", cfg.name_suffix,
                                  "not on GCP: two GKE stacks in one project share Workload Identity's pool "
                                  f"({section.project}.svc.id.goog), so each cluster's training/trainer could use the "
                                  "other's checkpoint bucket, and a GCP budget counts the whole project; give each "
                                  "stack its own project (gcp.project) and leave nameSuffix unset"))
    if len(cfg.alert_emails) > MAX_BUDGET_CHANNELS:
        issues.append(ConfigIssue("alertEmails", cfg.alert_emails,
                                  f"at most {MAX_BUDGET_CHANNELS} addresses on GCP (a billing budget notifies at most "
                                  f"{MAX_BUDGET_CHANNELS} channels; use a group address)"))
    return issues


def _zone_issues(section: GcpSection) -> list[ConfigIssue]:
    issues = []
    zone_re = re.compile(rf"^{re.escape(section.region)}-[a-z]$")
    for i, zone in enumerate(section.zones):
        if not zone_re.fullmatch(zone):
            issues.append(ConfigIssue(f"gcp.zones[{i}]", zone,
                                      f"a zone of gcp.region {section.region}, such as {section.region}-a"))
        elif section.zones.index(zone) != i:
            issues.append(ConfigIssue(f"gcp.zones[{i}]", zone, "each zone once"))
    return issues


def _pool_issues(cfg: "StackConfig", section: GcpSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    region_reported = False
    zones_known = True  # every pool's zones are known to the catalog
    offered_somewhere: set[str] = set()
    for i, pool in enumerate(cfg.gpu_pools):
        if pool.name == SYSTEM_POOL_NAME:
            issues.append(ConfigIssue(f"gpuPools[{i}].name", pool.name,
                                      f"a name other than {SYSTEM_POOL_NAME!r} (the GKE system node pool has it)"))
        itype = catalog.instance("gcp", pool.instance_type)
        if itype is None or not itype.is_gpu:
            continue  # reported by gpu_platform.components.config
        if itype.price(pool.capacity) is None:
            issues.append(ConfigIssue(f"gpuPools[{i}].capacity", pool.capacity,
                                      f"a capacity {pool.instance_type} is sold as: "
                                      f"{', '.join(c for c in ('spot', 'preemptible', 'on-demand') if itype.price(c))}"))
        if itype.regions is not None and section.region not in itype.regions:
            if not region_reported:
                issues.append(ConfigIssue("gcp.region", section.region,
                                          f"a region offering {pool.instance_type} (gpuPools[{i}]): {', '.join(itype.regions)}"))
                region_reported = True
            continue
        if itype.zones is None:
            zones_known = False
            continue
        offered = pool_zones(section, itype)
        offered_somewhere.update(offered)
        if not offered:
            in_region = [z for z in itype.zones if z.startswith(section.region + "-")]
            issues.append(ConfigIssue(
                f"gpuPools[{i}].instanceType", pool.instance_type,
                f"a type whose GPU ({itype.accelerator}) is offered in one of gcp.zones; in {section.region} "
                f"{pool.instance_type} is offered in: {', '.join(in_region) or 'no zone'}"))
    if zones_known and not region_reported and offered_somewhere:
        wanted = sorted({t.accelerator for p in cfg.gpu_pools
                         if (t := catalog.instance("gcp", p.instance_type)) is not None and t.accelerator})
        for i, zone in enumerate(section.zones):
            if zone.startswith(section.region + "-") and zone not in offered_somewhere:
                issues.append(ConfigIssue(
                    f"gcp.zones[{i}]", zone,
                    f"a zone offering the GPU of a gpuPools entry ({', '.join(wanted)}); offered in: "
                    f"{', '.join(sorted(offered_somewhere))}"))
    return issues


def _network_issues(cfg: "StackConfig", section: GcpSection) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    nets = {
        "gcp.networkCidr": ipaddress.ip_network(section.network_cidr),
        "gcp.podsCidr": ipaddress.ip_network(section.pods_cidr),
        "gcp.servicesCidr": ipaddress.ip_network(section.services_cidr),
        "gcp.masterCidr": ipaddress.ip_network(section.master_cidr),
    }
    for key, net in nets.items():
        if not is_internal(net):
            issues.append(ConfigIssue(key, str(net), f"a private IPv4 range inside {INTERNAL_TEXT}"))
    keys = list(nets)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            if nets[keys[a]].overlaps(nets[keys[b]]):
                issues.append(ConfigIssue(keys[b], str(nets[keys[b]]),
                                          f"a range that does not overlap {keys[a]} ({nets[keys[a]]})"))
    nodes = section.system_pool.max_nodes + sum(p.max_nodes for p in cfg.gpu_pools)
    pods = nets["gcp.podsCidr"]
    if pods.version == 4 and 2 ** max(0, POD_RANGE_PER_NODE - pods.prefixlen) < nodes:
        need = POD_RANGE_PER_NODE - (nodes - 1).bit_length()
        issues.append(ConfigIssue("gcp.podsCidr", str(pods),
                                  f"a range of /{need} or larger: GKE gives each node a /24 and the pools allow "
                                  f"{nodes} nodes (gcp.systemPool.maxNodes + gpuPools[*].maxNodes)"))
    subnet = nets["gcp.networkCidr"]
    if subnet.num_addresses - 4 < nodes:  # GCP reserves 4 addresses per subnet
        issues.append(ConfigIssue("gcp.networkCidr", str(subnet),
                                  f"a range with room for {nodes} nodes plus 4 addresses GCP reserves"))
    return issues


def _access_issues(cfg: "StackConfig", section: GcpSection) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    if not cfg.admin_cidrs:
        issues.append(ConfigIssue(
            "adminCidrs", [],
            "at least one CIDR on GCP: the control plane accepts only these ranges, and the machine running "
            "`pulumi up` must reach it to install the ML platform"))
    if len(cfg.admin_cidrs) > MAX_AUTHORIZED_NETWORKS:
        issues.append(ConfigIssue("adminCidrs", cfg.admin_cidrs,
                                  f"at most {MAX_AUTHORIZED_NETWORKS} ranges (GKE master authorized networks)"))
    for i, cidr in enumerate(cfg.admin_cidrs):
        net = ipaddress.ip_network(cidr)
        if net.prefixlen == 0:
            issues.append(ConfigIssue(f"adminCidrs[{i}]", cidr,
                                      "a specific range such as 203.0.113.0/24: /0 would open the control plane to the internet"))
        elif net.version != 4:
            issues.append(ConfigIssue(f"adminCidrs[{i}]", cidr, "an IPv4 range (GKE master authorized networks are IPv4)"))
        elif section.private_endpoint and not is_internal(net):
            issues.append(ConfigIssue(f"adminCidrs[{i}]", cidr,
                                      f"a private range ({INTERNAL_TEXT}) reaching the VPC through VPN, Interconnect "
                                      "or a bastion, because gcp.privateEndpoint is true; or set gcp.privateEndpoint: false"))
    return issues


def _system_pool_issues(section: GcpSection, catalog: "Catalog") -> list[ConfigIssue]:
    pool = section.system_pool
    key = lambda k: system_pool_key("gcp", section, k)  # noqa: E731 - the spelling the stack file uses
    issues = []
    if pool.min_nodes > pool.max_nodes:
        issues.append(ConfigIssue(key("minNodes"), pool.min_nodes, f"at most {key('maxNodes')} ({pool.max_nodes})"))
    if not MACHINE_TYPE.fullmatch(pool.instance_type):
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type,
                                  "a Compute Engine machine type such as e2-standard-4"))
    itype = catalog.instance("gcp", pool.instance_type)
    if itype is not None and itype.is_gpu:
        plain = sorted(t.name for t in catalog.instances("gcp") if not t.is_gpu)
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type,
                                  f"a machine type without GPUs (system pods must not hold GPU nodes), e.g. {', '.join(plain)}"))
    return issues


def _maintenance_issues(m: Maintenance) -> list[ConfigIssue]:
    import datetime as dt

    issues: list[ConfigIssue] = []
    for i, day in enumerate(m.days):
        if m.days.index(day) != i:
            issues.append(ConfigIssue(f"gcp.maintenance.days[{i}]", day, "each day once"))
    if len(set(m.days)) * m.hours * 4 < MIN_WINDOW_HOURS_PER_32_DAYS:
        issues.append(ConfigIssue("gcp.maintenance.hours", m.hours,
                                  f"enough hours for GKE's minimum of {MIN_WINDOW_HOURS_PER_32_DAYS} h of maintenance in any "
                                  f"32 days: days x hours must be at least 12 (now {len(set(m.days))} x {m.hours})"))
    if len(m.exclusions) > MAX_EXCLUSIONS:
        issues.append(ConfigIssue("gcp.maintenance.exclusions", len(m.exclusions), f"at most {MAX_EXCLUSIONS} exclusions"))
    names = [e.name for e in m.exclusions]
    for i, e in enumerate(m.exclusions):
        key = f"gcp.maintenance.exclusions[{i}]"
        if names.index(e.name) != i:
            issues.append(ConfigIssue(f"{key}.name", e.name, "a name used once"))
        if e.end is None:
            if e.scope == "NO_UPGRADES":
                issues.append(ConfigIssue(f"{key}.end", None, "an end time: a NO_UPGRADES exclusion lasts at most "
                                                              f"{MAX_NO_UPGRADES_DAYS} days (only the other scopes may run until end of support)"))
            continue
        start = dt.datetime.fromisoformat(e.start.replace("Z", "+00:00"))
        end = dt.datetime.fromisoformat(e.end.replace("Z", "+00:00"))
        if end <= start:
            issues.append(ConfigIssue(f"{key}.end", e.end, f"a time after start ({e.start})"))
        elif e.scope == "NO_UPGRADES" and end - start > dt.timedelta(days=MAX_NO_UPGRADES_DAYS):
            issues.append(ConfigIssue(f"{key}.end", e.end, f"at most {MAX_NO_UPGRADES_DAYS} days after start for scope "
                                                           "NO_UPGRADES; use NO_MINOR_OR_NODE_UPGRADES for longer"))
    return issues


def gpu_pool_zone_map(cfg: "StackConfig", catalog: "Catalog") -> dict[str, list[str]]:
    """Pool name -> the zones its nodes run in (see pool_zones)."""
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    return {p.name: pool_zones(section, catalog.instance("gcp", p.instance_type)) for p in cfg.gpu_pools}


__all__ = ["GcpSection", "Maintenance", "MaintenanceExclusion", "SystemPool", "check_stack", "effective_deletion_protection", "gpu_pool_zone_map",
           "pool_zones", "PRODUCTION_ENVIRONMENTS", "SYSTEM_POOL_NAME"]
