"""The rules only GCP has that read the whole stack, offline, before any resource is registered.

The project, region and zones are well-formed and agree with each other, the GPU of every pool is
offered in the chosen zones (where the price catalog knows the zones), the network ranges do not overlap
and are big enough for the largest cluster the pools allow, and the control plane stays reachable only
from `adminCidrs`.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

from gpu_platform.config.base import ConfigIssue, system_pool_key
from gpu_platform.config.checks.pools import pool_issue_capacity, pool_region_issues
from gpu_platform.config.gcp import (INTERNAL_TEXT, MACHINE_TYPE, MAX_AUTHORIZED_NETWORKS, MAX_BUDGET_CHANNELS, MAX_EXCLUSIONS,
                                     MAX_NO_UPGRADES_DAYS, MIN_WINDOW_HOURS_PER_32_DAYS, POD_RANGE_PER_NODE, SYSTEM_POOL_NAME,
                                     GcpSection, Maintenance, is_internal, pool_zones, zones_in_region)
from gpu_platform.config.kubernetes_version import version_issues

# gcp.gpuDriverVersion that leaves the NVIDIA driver to the user (GKE installs none).
DRIVER_DISABLED = "INSTALLATION_DISABLED"

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    issues = pool_issue_capacity(cfg, ("spot", "preemptible", "on-demand"),
                                 "GCP offers Spot, preemptible and on-demand VMs")
    issues += _zone_issues(section, catalog)
    issues += _assumed_offering_issues(cfg, section, catalog)
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
    if section.gpu_driver_version == DRIVER_DISABLED and cfg.gpu_pools:
        # The platform installs no NVIDIA driver of its own on GKE (no driver DaemonSet, no GPU operator): GKE's
        # is the only one. Without it GKE's device plugin advertises no nvidia.com/gpu and every GPU pod waits.
        issues.append(ConfigIssue("gcp.gpuDriverVersion", section.gpu_driver_version,
                                  "LATEST or DEFAULT (GKE installs the NVIDIA driver): with INSTALLATION_DISABLED GKE "
                                  "installs none and the platform has no driver installer of its own, so the GPU nodes "
                                  "advertise no nvidia.com/gpu and every GPU job and notebook waits for ever "
                                  "(GKE \"Run GPUs in Standard node pools\", manual driver installation)"))
    if len(cfg.alert_emails) > MAX_BUDGET_CHANNELS:
        issues.append(ConfigIssue("alertEmails", cfg.alert_emails,
                                  f"at most {MAX_BUDGET_CHANNELS} addresses on GCP (a billing budget notifies at most "
                                  f"{MAX_BUDGET_CHANNELS} channels; use a group address)"))
    return issues


def _pool_issues(cfg: "StackConfig", section: GcpSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    not_in_region: list[tuple[int, str, tuple[str, ...]]] = []  # (pool index, type, its regions)
    zones_known = True  # every pool's zones are known to the catalog
    offered_somewhere: set[str] = set()
    regions, zones = recorded_places(catalog)  # an unrecorded region or zone is reported once, by _zone_issues
    for i, pool in enumerate(cfg.gpu_pools):
        if pool.name == SYSTEM_POOL_NAME:
            issues.append(ConfigIssue(f"gpuPools[{i}].name", pool.name,
                                      f"a name other than {SYSTEM_POOL_NAME!r} (the GKE system node pool has it)"))
        itype = catalog.instance("gcp", pool.instance_type)
        if itype is None or not itype.is_gpu:
            continue  # reported by gpu_platform.config.stack
        if itype.price(pool.capacity) is None:
            issues.append(ConfigIssue(f"gpuPools[{i}].capacity", pool.capacity,
                                      f"a capacity {pool.instance_type} is sold as: "
                                      f"{', '.join(c for c in ('spot', 'preemptible', 'on-demand') if itype.price(c))}"))
        asserted = section.assumed_zones(pool.instance_type)
        if asserted is not None:  # gcp.assumeOffered: the stack's word, checked by _assumed_offering_issues
            offered_somewhere.update(z for z in section.zones if z in asserted)
            continue
        if itype.regions is not None and section.region not in itype.regions:
            if regions and section.region not in regions:
                continue
            not_in_region.append((i, pool.instance_type, itype.regions))
            continue
        if zones_in_region(itype, section.region) is None:  # no zone recorded in this region (zonesSource)
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
    issues += pool_region_issues(cfg, catalog, "gcp.region", section.region, not_in_region, lambda itype: (
        f" (the catalog's type-by-region data: {_offering_date(catalog, itype)}); if GCP offers it in {section.region} "
        f"now, assert it: gcp.assumeOffered: [{{type: {itype}, zones: [{', '.join(dict.fromkeys(section.zones))}]}}] "
        "(docs/configuration.md, \"GCP regions and zones\")"))
    if zones_known and not not_in_region and offered_somewhere:
        wanted = sorted({t.accelerator for p in cfg.gpu_pools
                         if (t := catalog.instance("gcp", p.instance_type)) is not None and t.accelerator})
        for i, zone in enumerate(section.zones):
            if zone.startswith(section.region + "-") and zone not in offered_somewhere and (not zones or zone in zones):
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


def recorded_places(catalog: "Catalog") -> tuple[set[str], set[str]]:
    """The GCP regions and zones the price catalog records for any machine type (gcp.yaml's regions and zones,
    each with its regionsSource/zonesSource): the places this project knows exist."""
    regions: set[str] = set()
    zones: set[str] = set()
    for t in catalog.instances("gcp"):
        regions.update(t.regions or ())
        zones.update(t.zones or ())
    return regions, zones


def _offering_date(catalog: "Catalog", name: str) -> str:
    """Where and when the catalog's regions of a GCP type come from (its regionsSource), in a few words."""
    t = catalog.instance("gcp", name)
    src = (t.regions_source if t is not None else None) or "gpu_platform/costs/catalog/gcp.yaml"
    return src.removeprefix("regions: ").split(", recorded in")[0]


def _assumed_offering_issues(cfg: "StackConfig", section: GcpSection, catalog: "Catalog") -> list[ConfigIssue]:
    """gcp.assumeOffered names a GPU pool's machine type the catalog prices and sizes, once, and zones of gcp.zones."""
    issues: list[ConfigIssue] = []
    pool_types = [p.instance_type for p in cfg.gpu_pools]
    named = [e.type for e in section.assume_offered]
    for i, entry in enumerate(section.assume_offered):
        key = f"gcp.assumeOffered[{i}]"
        if catalog.instance("gcp", entry.type) is None:
            known = ", ".join(sorted(t.name for t in catalog.gpu_instances("gcp")))
            issues.append(ConfigIssue(f"{key}.type", entry.type, "a GCP machine type of the price catalog "
                                      f"(gpu_platform/costs/catalog/gcp.yaml; it sizes and prices the pool): {known}"))
        elif entry.type not in pool_types:
            issues.append(ConfigIssue(f"{key}.type", entry.type, "the instanceType of a gpuPools entry "
                                      f"({', '.join(pool_types) or 'none'}): an assertion about no pool changes nothing"))
        elif named.index(entry.type) != i:
            issues.append(ConfigIssue(f"{key}.type", entry.type, "each machine type once"))
        for j, zone in enumerate(entry.zones):
            if zone not in section.zones:
                issues.append(ConfigIssue(f"{key}.zones[{j}]", zone,
                                          f"one of gcp.zones ({', '.join(section.zones)}): the cluster's nodes run only there"))
    return issues


def assumed_offering_warnings(cfg: "StackConfig") -> list[str]:
    """One warning per gcp.assumeOffered entry: the offering is the stack's word, not recorded data; and a
    note when the catalog already records it (the entry can go)."""
    if cfg.cloud != "gcp" or cfg.gcp is None or not cfg.gcp.assume_offered:
        return []
    from gpu_platform.config.catalog import stack_catalog

    catalog = stack_catalog(cfg)
    section: GcpSection = cfg.gcp  # type: ignore[assignment]
    out = []
    for entry in section.assume_offered:
        zones = section.assumed_zones(entry.type) or []
        itype = catalog.instance("gcp", entry.type)
        recorded = itype is not None and itype.regions is not None and section.region in itype.regions
        known = zones_in_region(itype, section.region) if recorded else None
        if recorded and (known is None or all(z in known for z in zones)):
            out.append(f"gcp.assumeOffered: the catalog already records {entry.type} in {section.region}"
                       f"{' (' + ', '.join(zones) + ')' if known else ''}: the entry can be removed")
            continue
        out.append(f"gcp.assumeOffered: {entry.type} in {section.region} ({', '.join(zones)}) is asserted by the stack, "
                   "not recorded in the catalog (gpu_platform/costs/catalog/gcp.yaml, regionsSource/zonesSource): "
                   "the region and zone checks trust it, and GKE refuses the node pool at `pulumi up` if it is wrong "
                   "(check with `gcloud compute machine-types list --filter=\"name=" + entry.type + "\" "
                   f"--zones={','.join(zones)}`)")
    return out


def _zone_issues(section: GcpSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues = []
    regions, zones = recorded_places(catalog)
    asserted = {z for e in section.assume_offered for z in (e.zones or section.zones)}
    if regions and section.region not in regions and not section.assume_offered:
        issues.append(ConfigIssue("gcp.region", section.region,
                                  "a GCP region the price catalog records (gpu_platform/costs/catalog/gcp.yaml): "
                                  f"{', '.join(sorted(regions))}"))
    in_region = sorted(z for z in zones if z.startswith(section.region + "-"))
    zone_re = re.compile(rf"^{re.escape(section.region)}-[a-z]$")
    for i, zone in enumerate(section.zones):
        if not zone_re.fullmatch(zone):
            issues.append(ConfigIssue(f"gcp.zones[{i}]", zone,
                                      f"a zone of gcp.region {section.region}, such as {section.region}-a"))
        elif in_region and zone not in in_region and zone not in asserted:
            issues.append(ConfigIssue(f"gcp.zones[{i}]", zone,
                                      f"a zone of {section.region} the price catalog records (gpu_platform/costs/catalog/"
                                      f"gcp.yaml): {', '.join(in_region)}"))
        elif section.zones.index(zone) != i:
            issues.append(ConfigIssue(f"gcp.zones[{i}]", zone, "each zone once"))
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
    plain = ", ".join(sorted(t.name for t in catalog.instances("gcp") if not t.is_gpu))
    if itype is None:
        # The node-fit check, the estimate and the budget price and size every pool from the catalog.
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type,
                                  f"a machine type without GPUs in the price catalog (gpu_platform/costs/catalog/gcp.yaml): {plain}"))
    elif itype.is_gpu:
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type,
                                  f"a machine type without GPUs (system pods must not hold GPU nodes): {plain}"))
    elif itype.vcpus < 2 or itype.memory_gib < 4:
        issues.append(ConfigIssue(key("instanceType"), pool.instance_type,
                                  "a machine type with at least 2 vCPUs and 4 GiB (the platform's controllers run there)"))
    for i, zone in enumerate(pool.zones):
        if zone not in section.zones:
            issues.append(ConfigIssue(f"{key('zones')}[{i}]", zone,
                                      f"one of gcp.zones ({', '.join(section.zones)}): the cluster's nodes run only there"))
        elif pool.zones.index(zone) != i:
            issues.append(ConfigIssue(f"{key('zones')}[{i}]", zone, "each zone once"))
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


def shutdown_grace_warnings(cfg: "StackConfig") -> list[str]:
    """A GKE pool whose pods get less time to checkpoint on a reclaim than the training runtime asks for:
    a preemptible pool (GKE's default 15 s of graceful shutdown; the 120 s setting is Spot's only), or a Spot
    pool whose nodes may run a minor before 1.35 (the channel's oldest today, or the pinned one)."""
    from gpu_platform.config.derived import gke_node_minor_floor
    from gpu_platform.config.gcp import (SPOT_GRACE_MIN_MINOR, TRAINING_CHECKPOINT_GRACE_SECONDS,
                                         pod_shutdown_grace_seconds)

    if cfg.cloud != "gcp":
        return []
    floor = gke_node_minor_floor(cfg)
    need = TRAINING_CHECKPOINT_GRACE_SECONDS
    out = []
    for i, pool in enumerate(cfg.gpu_pools):
        grace = pod_shutdown_grace_seconds(pool.capacity, floor)
        if grace is None or grace >= need:
            continue
        if pool.capacity == "preemptible":
            why = ("GKE gives a preemptible VM's pods 15 of its 30 seconds of graceful shutdown, and only Spot pools "
                   "may extend it (to 120 s); use capacity: spot (the same price, no 24-hour limit)")
        else:
            minimum = ".".join(map(str, SPOT_GRACE_MIN_MINOR))
            section: GcpSection = cfg.gcp  # type: ignore[assignment]
            source = ("kubernetesVersion" if cfg.kubernetes_version_pinned else
                      f"the oldest minor gcp.releaseChannel {section.release_channel} can still run today")
            why = (f"The nodes may run {floor or 'a minor the version calendar does not know'} ({source}), before "
                   f"{minimum}, the first whose Spot pools may extend graceful shutdown to 120 s (105 s for pods); "
                   f"pin kubernetesVersion: \"{minimum}\" or later")
        out.append(f"gpuPools[{i}] ({pool.name}, {pool.capacity}): on a reclaim its pods get {grace} s between SIGTERM "
                   f"and the VM's stop, less than the {need} s the training runtime (torch-checkpointed) gives a "
                   f"checkpoint: a checkpoint in progress is cut and the job resumes from the one before. {why}")
    return out
