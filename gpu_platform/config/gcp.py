"""The `gcp` section of the stack config: its keys, their types and limits.

The rules that read the rest of the stack are in checks/gcp.py (offline, before any resource is
registered): the project, region and zones are well-formed and agree with each other, the GPU of every
pool is offered in the chosen zones (where the price catalog knows the zones), the network ranges do not
overlap and are big enough for the largest cluster the pools allow, and the control plane stays
reachable only from `adminCidrs`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import Field, PrivateAttr, field_validator, model_validator

from gpu_platform.config.base import SYSTEM_POOL_DEFAULTS, Cidr, Model, SystemPool, validate_system_pool

if TYPE_CHECKING:
    from gpu_platform.costs.catalog import InstanceType

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


class GcpSystemPool(SystemPool):
    """GKE's system pool: the shared shape plus the zones it runs in (docs/quickstart-gcp.md, "System pool
    layout"). Empty `zones` (the default): every zone of gcp.zones, a regional pool, which GKE starts with
    one node per zone and whose zonal volumes then keep a node in each zone they were created in. One zone:
    a zonal pool; the platform's volumes are all made in that zone (their pods run there), so they stay
    schedulable, and the pool idles at the nodes the platform needs there (often one)."""

    zones: list[str] = Field(default_factory=list, max_length=8)


class AssumedOffering(Model):
    """One entry of gcp.assumeOffered: the stack asserts that GCP offers machine type `type` in gcp.region,
    in `zones` (default: every zone of gcp.zones), where the catalog's offering data (gcp.yaml `regions`,
    `zones`, dated by their regionsSource/zonesSource) does not say so. The checks then trust the stack, and
    preflight warns that the offering is asserted, not recorded: GKE refuses the node pool at `pulumi up`
    if the assertion is wrong."""

    type: str = Field(min_length=1)
    zones: list[str] = Field(default_factory=list, max_length=8)


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
    # gcp.systemPool {instanceType, minNodes, maxNodes, zones}; machineType is last release's name of instanceType.
    system_pool: GcpSystemPool = Field(default_factory=lambda: GcpSystemPool(**SYSTEM_POOL_DEFAULTS["gcp"]))
    gpu_driver_version: Literal["LATEST", "DEFAULT", "INSTALLATION_DISABLED"] = "LATEST"
    # Checkpoints older than this are deleted by a bucket lifecycle rule.
    checkpoint_retention_days: int = Field(default=30, ge=1, le=3650)
    # True: the control plane has no public endpoint; adminCidrs must then be internal ranges
    # (VPN, Interconnect, a bastion in the VPC).
    private_endpoint: bool = False
    maintenance: Maintenance = Field(default_factory=Maintenance)
    # Offerings the stack asserts where the catalog's type-by-region data is older than GCP's (docs/configuration.md,
    # "GCP regions and zones"): [{type: g2-standard-8, zones: [europe-west1-b]}].
    assume_offered: list[AssumedOffering] = Field(default_factory=list, max_length=32)

    _system_pool_renamed: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _system_pool_shape(cls, data: Any, handler: Any) -> "GcpSection":
        return validate_system_pool("gcp", data, handler)

    def assumed_zones(self, machine_type: str) -> Optional[list[str]]:
        """The zones gcp.assumeOffered asserts for `machine_type` (every zone of gcp.zones when the entry names
        none), or None when the stack asserts nothing for it."""
        for entry in self.assume_offered:
            if entry.type == machine_type:
                return list(entry.zones) or list(self.zones)
        return None

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


# GKE graceful node shutdown on a Spot or preemptible reclaim: 30 s by default, of which 15 s for pods and 15 s
# for critical system pods (GKE "Spot VMs", "Termination and graceful shutdown of Spot VMs"; "Preemptible VMs").
# Spot pools may extend it to 120 s (kubelet_config shutdown_grace_period_seconds /
# shutdown_grace_period_critical_pods_seconds) on Standard node pools whose control plane runs GKE
# 1.35.0-gke.1171000 or later; preemptible VMs keep the default. Pods get the total less the critical pods'
# share: 105 s, more than the training runtime's 60 s checkpoint grace
# (components/platform/training.py CHECKPOINT_GRACE_SECONDS); with the default they get 15 s.
DEFAULT_POD_SHUTDOWN_GRACE_SECONDS = 15
SPOT_SHUTDOWN_GRACE_SECONDS = 120
SPOT_SHUTDOWN_GRACE_CRITICAL_PODS_SECONDS = 15
# The first minor with a GKE version that allows it. The calendar holds minors, not GKE patch builds: nodes
# on 1.35 get the newest 1.35 patch of their channel, which GKE must run at 1.35.0-gke.1171000 or later;
# should it not, GKE refuses the pool at `pulumi up` with its message (nothing is dropped silently).
SPOT_GRACE_MIN_MINOR = (1, 35)
TRAINING_CHECKPOINT_GRACE_SECONDS = 60  # components/platform/training.py CHECKPOINT_GRACE_SECONDS (a test keeps them equal)


def spot_grace_allowed(kubernetes_minor: Optional[str]) -> bool:
    """Whether nodes whose oldest possible minor is `kubernetes_minor` may take the 120 s Spot grace."""
    if not kubernetes_minor:
        return False
    try:
        minor = tuple(int(x) for x in kubernetes_minor.split(".")[:2])
    except ValueError:
        raise ValueError(f"kubernetes minor {kubernetes_minor!r}: expected MAJOR.MINOR like 1.35") from None
    return minor >= SPOT_GRACE_MIN_MINOR


def pod_shutdown_grace_seconds(capacity: str, kubernetes_minor: Optional[str]) -> Optional[int]:
    """Seconds a pod gets between SIGTERM and the VM's stop on a reclaim of a `capacity` node (None:
    on-demand, never reclaimed)."""
    if capacity == "on-demand":
        return None
    if capacity == "spot" and spot_grace_allowed(kubernetes_minor):
        return SPOT_SHUTDOWN_GRACE_SECONDS - SPOT_SHUTDOWN_GRACE_CRITICAL_PODS_SECONDS
    return DEFAULT_POD_SHUTDOWN_GRACE_SECONDS
def system_pool_zones(section: GcpSection) -> list[str]:
    """The zones the system pool's nodes run in: `gcp.systemPool.zones`, or every zone of `gcp.zones`."""
    return list(section.system_pool.zones) or list(section.zones)


def pool_zones(section: GcpSection, itype: "Optional[InstanceType]") -> list[str]:
    """The configured zones a GPU pool's nodes may run in: those offering its accelerator where the
    catalog knows, otherwise all of them (GKE then places nodes wherever capacity is). The catalog knows a
    region's zones only where its zone list (older than its region list) names one of that region's zones;
    gcp.assumeOffered names them for a type the stack asserts."""
    asserted = section.assumed_zones(itype.name) if itype is not None else None
    if asserted is not None:
        return [z for z in section.zones if z in asserted]
    known = zones_in_region(itype, section.region)
    if known is None:
        return list(section.zones)
    return [z for z in section.zones if z in known]


def zones_in_region(itype: "Optional[InstanceType]", region: str) -> "Optional[list[str]]":
    """The zones of `region` the catalog records for `itype`, or None when it records none there (unknown:
    the zone list is from 2023, the region list newer; gpu_platform/costs/catalog/gcp.yaml zonesSource)."""
    if itype is None or itype.zones is None:
        return None
    known = [z for z in itype.zones if z.startswith(region + "-")]
    return known or None


__all__ = ["AssumedOffering", "GcpSection", "GcpSystemPool", "Maintenance", "MaintenanceExclusion", "SystemPool", "pool_zones", "system_pool_zones", "zones_in_region", "PRODUCTION_ENVIRONMENTS",
           "SYSTEM_POOL_NAME"]
