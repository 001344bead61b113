"""GPU pools as the policy pack sees them: read back from the resources of a stack, on any cloud.

A pool is what bills GPUs: Linode GPU instances grouped by their `gpu-pool:<name>` tag, a GKE node pool
with accelerators (or a GPU machine type), an EC2 Auto Scaling Group (or EKS node group) whose
instance types carry GPUs. GPUs per node come from the project's price catalog (gpu_platform/costs/catalog), the
same numbers preflight's cost report uses.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Optional, Sequence

from gpu_platform.policies.props import as_int, as_list, get, is_true, tags_from_list, tags_of

LINODE_INSTANCE = "linode:index/instance:Instance"
KUBE_CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
# The pool definition of autoscaled Linode GPU pools (gpu_platform/components/linode/node_groups.py NAME,
# NAMESPACE): their instances are the node-group provider's, never in the plan.
LINODE_NODE_GROUPS = ("kube-system", "linode-node-groups")
# The node groups of a cluster the stack does not create (cloud kubernetes; gpu_platform/components/kubernetes/cluster.py
# NAMESPACE, NODE_GROUPS, NODE_GROUPS_KEY; the pack imports no component).
OWN_NODE_GROUPS = ("gpu-platform", "node-groups")
OWN_NODE_GROUPS_KEY = "node-groups.json"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
AWS_ASG = "aws:autoscaling/group:Group"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"

POOL_KEY = "gpu-pool"
APPROVAL_KEY = "on-demand-approved"
# An approval counts only with who approved it and why (gpu_platform.config.base.approval_tags).
APPROVER_KEY = "on-demand-approver"
REASON_KEY = "on-demand-reason"


def approval_of(tags: dict[str, str]) -> tuple[bool, Optional[str]]:
    """(approved, why not): approved needs on-demand-approved=true plus a non-empty approver and reason."""
    if tags.get(APPROVAL_KEY, "").lower() != "true":
        return False, None
    if not tags.get(APPROVER_KEY, "").strip() or not tags.get(REASON_KEY, "").strip():
        return False, (f"it is tagged {APPROVAL_KEY}=true but without {APPROVER_KEY} and {REASON_KEY} "
                       "(approvedOnDemand needs {reason, approver})")
    return True, None
# A GCP zone (us-central1-a) as opposed to a region (us-central1).
_GCP_ZONE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")
# GKE spreads a regional cluster's pool over three zones unless node locations say otherwise.
GKE_DEFAULT_REGIONAL_ZONES = 3


_CATALOG_READ = threading.Lock()


def catalog():
    """The price catalog, read once: an analysis that asks while read_catalog_ahead's thread is reading it waits
    for that read instead of reading the files a second time."""
    with _CATALOG_READ:
        return _catalog()


@lru_cache(maxsize=1)
def _catalog():
    from gpu_platform.costs.catalog import load_catalog

    return load_catalog()


def read_catalog_ahead() -> None:
    """Read the catalog before the first stack analysis asks for it (__main__.py runs this in a thread as the
    pack starts): every cloud's file parsed and checked takes a quarter of a second, and that analysis is the
    last step of a preflight, while the pack waits idle for the program to run. A catalog that does not load
    is left for that analysis to report, as a policy error (lru_cache keeps no exception)."""
    try:
        catalog()
    except Exception:  # noqa: BLE001 reported by the analysis that needs it
        pass


def gpus_of(cloud: str, instance_type: Optional[str]) -> Optional[int]:
    """GPUs per node of an instance type from the catalog; None when the catalog does not know it."""
    if not instance_type:
        return None
    t = catalog().instance(cloud, str(instance_type))
    return None if t is None else t.gpus


@dataclass
class Node:
    """One resource of the stack, whichever RPC delivered it (Analyze or AnalyzeStack)."""

    type: str
    urn: str
    name: str
    props: Any
    dependencies: Sequence["Node"] = ()
    provider_props: Any = None


@dataclass
class GpuPool:
    cloud: str
    name: str
    urns: list[str]  # the resources that make up the pool (one per Linode instance)
    resource_type: str
    instance_types: list[str]
    gpus_per_node: Optional[int]  # None: unknown to the catalog
    min_nodes: int
    max_nodes: int
    capacity: str  # spot | preemptible | on-demand | mixed (an on-demand share in a spot pool)
    on_demand_approved: bool
    autoscaled: bool
    problems: list[str] = field(default_factory=list)
    approval_problem: Optional[str] = None  # an approval tag without approver/reason
    boot_disk_gib: Optional[int] = None  # per node, as registered (None: not given; Linode plans include theirs)

    @property
    def urn(self) -> str:
        return self.urns[0]

    @property
    def max_gpus(self) -> Optional[int]:
        return None if self.gpus_per_node is None else self.gpus_per_node * self.max_nodes


def _node(r: Any) -> Node:
    """A pulumi_policy PolicyResource as a Node (dependencies kept one level deep)."""
    deps = [Node(d.resource_type, d.urn, d.name, d.props) for d in (getattr(r, "dependencies", None) or [])]
    prov = getattr(r, "provider", None)
    return Node(r.resource_type, r.urn, r.name, r.props, deps, prov.props if prov is not None else None)


def stack_nodes(resources: Sequence[Any]) -> list[Node]:
    return [_node(r) for r in resources]


# ---------------------------------------------------------------------------------------------
# Per cloud
# ---------------------------------------------------------------------------------------------


def _linode_pools(nodes: list[Node]) -> list[GpuPool]:
    groups: dict[str, GpuPool] = {}
    for n in nodes:
        if n.type != LINODE_INSTANCE:
            continue
        itype = get(n.props, "type")
        tags = tags_of(n.props)
        gpus = gpus_of("linode", itype)
        if not gpus and POOL_KEY not in tags:
            continue
        pool_name = tags.get(POOL_KEY) or n.name
        pool = groups.get(pool_name)
        if pool is None:
            pool = groups[pool_name] = GpuPool(
                cloud="linode", name=pool_name, urns=[], resource_type=n.type, instance_types=[],
                gpus_per_node=gpus, min_nodes=0, max_nodes=0, capacity="on-demand",
                on_demand_approved=True, autoscaled=False)
        pool.urns.append(n.urn)
        if itype and itype not in pool.instance_types:
            pool.instance_types.append(str(itype))
        if gpus is None:
            pool.problems.append(f"{n.name}: plan {itype!r} is not in the price catalog")
        elif pool.gpus_per_node is not None:
            pool.gpus_per_node = max(pool.gpus_per_node, gpus)
        # Linode has no spot market: every GPU instance is on-demand, one node per instance.
        pool.min_nodes += 1
        pool.max_nodes += 1
        approved, why = approval_of(tags)
        pool.on_demand_approved = pool.on_demand_approved and approved
        pool.approval_problem = pool.approval_problem or why
    return list(groups.values()) + _linode_autoscaled_pools(nodes)


def _linode_autoscaled_pools(nodes: list[Node]) -> list[GpuPool]:
    import json

    out = []
    for n in nodes:
        if n.type != KUBE_CONFIG_MAP or (get(n.props, "metadata.namespace"), get(n.props, "metadata.name")) != LINODE_NODE_GROUPS:
            continue
        data = get(n.props, "data")
        raw = data.get("pools.json") if isinstance(data, Mapping) else None  # (a dotted path would split the key)
        try:
            pools = json.loads(raw)["pools"] if isinstance(raw, str) else None
        except (ValueError, KeyError, TypeError):
            pools = None
        if pools is None:
            out.append(GpuPool(cloud="linode", name=n.name, urns=[n.urn], resource_type=n.type, instance_types=[],
                               gpus_per_node=None, min_nodes=0, max_nodes=0, capacity="on-demand",
                               on_demand_approved=False, autoscaled=True,
                               problems=["its pool definition (pools.json) is not readable at plan time"]))
            continue
        for p in pools:
            itype = str(p.get("instanceType"))
            tags = tags_from_list(p.get("tags"))
            approved, why = approval_of(tags)
            gpus = gpus_of("linode", itype)
            out.append(GpuPool(
                cloud="linode", name=str(p.get("name")), urns=[n.urn], resource_type=n.type, instance_types=[itype],
                gpus_per_node=gpus, min_nodes=as_int(p.get("minNodes")) or 0, max_nodes=as_int(p.get("maxNodes")) or 0,
                capacity="on-demand", on_demand_approved=approved, autoscaled=True, approval_problem=why,
                problems=[] if gpus is not None else [f"plan {itype!r} is not in the price catalog"]))
    return out


def _gke_cluster_of(pool: Node, clusters: list[Node]) -> Optional[Node]:
    for d in pool.dependencies:
        if d.type == GKE_CLUSTER:
            return d
    return clusters[0] if len(clusters) == 1 else None


def gke_zone_count(pool: Node, cluster: Optional[Node]) -> int:
    """Zones a GKE node pool spreads over (autoscaling min/maxNodeCount are per zone)."""
    locs = as_list(get(pool.props, "nodeLocations"))
    if not locs and cluster is not None:
        locs = as_list(get(cluster.props, "nodeLocations"))
    if locs:
        return len(locs)
    location = get(pool.props, "location") or (get(cluster.props, "location") if cluster is not None else None)
    if isinstance(location, str) and not _GCP_ZONE.match(location):
        return GKE_DEFAULT_REGIONAL_ZONES
    return 1


def _gke_pools(nodes: list[Node], include_cpu: bool = False) -> list[GpuPool]:
    clusters = [n for n in nodes if n.type == GKE_CLUSTER]
    out = []
    for n in nodes:
        if n.type != GKE_NODE_POOL:
            continue
        cfg = get(n.props, "nodeConfig", {})
        machine = get(cfg, "machineType")
        accel = sum(as_int(get(a, "count"), 0) or 0 for a in as_list(get(cfg, "guestAccelerators")))
        from_catalog = gpus_of("gcp", machine)
        gpus = accel or from_catalog
        labels = tags_of(cfg, "resourceLabels")
        if not gpus and POOL_KEY not in labels and not include_cpu:
            continue
        problems = []
        if not gpus and from_catalog is None:
            problems.append(f"machine type {machine!r} is not in the price catalog and no accelerators are declared")
        cluster = _gke_cluster_of(n, clusters)
        zones = gke_zone_count(n, cluster)
        auto = get(n.props, "autoscaling")
        if auto is not None:
            total_min, total_max = as_int(get(auto, "totalMinNodeCount")), as_int(get(auto, "totalMaxNodeCount"))
            if total_max is not None:
                lo, hi = total_min or 0, total_max
            else:
                lo = (as_int(get(auto, "minNodeCount"), 0) or 0) * zones
                hi = (as_int(get(auto, "maxNodeCount"), 0) or 0) * zones
        else:
            fixed = as_int(get(n.props, "nodeCount"))
            if fixed is None:
                fixed = as_int(get(n.props, "initialNodeCount"), 1)
            lo = hi = (fixed or 0) * zones
        if is_true(get(cfg, "spot")):
            capacity = "spot"
        elif is_true(get(cfg, "preemptible")):
            capacity = "preemptible"
        else:
            capacity = "on-demand"
        out.append(GpuPool(
            cloud="gcp", name=labels.get(POOL_KEY) or str(get(n.props, "name") or n.name), urns=[n.urn],
            resource_type=n.type, instance_types=[str(machine)] if machine else [],
            gpus_per_node=gpus if gpus else (0 if from_catalog == 0 else None),
            min_nodes=lo, max_nodes=hi, capacity=capacity,
            on_demand_approved=approval_of(labels)[0], approval_problem=approval_of(labels)[1],
            autoscaled=auto is not None, problems=problems, boot_disk_gib=as_int(get(cfg, "diskSizeGb"))))
    return out


def _template_disks(template: Optional[Node]) -> Optional[int]:
    """GiB of the EBS volumes a launch template gives each instance (None when it names none)."""
    sizes = [as_int(get(m, "ebs.volumeSize")) for m in as_list(get(template.props, "blockDeviceMappings"))] \
        if template is not None else []
    sizes = [s for s in sizes if s is not None]
    return sum(sizes) if sizes else None


def _launch_template_of(group: Node, templates: list[Node]) -> Optional[Node]:
    for d in group.dependencies:
        if d.type == AWS_LAUNCH_TEMPLATE:
            return d
    # Without dependency information (hand-built resource sets) match by name or id.
    ref = get(group.props, "launchTemplate") or get(group.props, "mixedInstancesPolicy.launchTemplate.launchTemplateSpecification")
    wanted = {str(get(ref, k)) for k in ("id", "name", "launchTemplateId", "launchTemplateName") if get(ref, k)}
    for t in templates:
        if {str(get(t.props, "name")), f"{t.name}-id", t.name} & wanted:
            return t
    return None


def _aws_pools(nodes: list[Node], include_cpu: bool = False) -> list[GpuPool]:
    templates = [n for n in nodes if n.type == AWS_LAUNCH_TEMPLATE]
    out = []
    for n in nodes:
        if n.type == AWS_ASG:
            tags = tags_of(n.props)
            lt = _launch_template_of(n, templates)
            mip = get(n.props, "mixedInstancesPolicy")
            types = [str(get(o, "instanceType")) for o in as_list(get(mip, "launchTemplate.overrides"))
                     if get(o, "instanceType")]
            if not types and lt is not None and get(lt.props, "instanceType"):
                types = [str(get(lt.props, "instanceType"))]
            if mip is not None:
                base = as_int(get(mip, "instancesDistribution.onDemandBaseCapacity"), 0) or 0
                pct = as_int(get(mip, "instancesDistribution.onDemandPercentageAboveBaseCapacity"), 100)
                pct = 100 if pct is None else pct
                capacity = "spot" if base == 0 and pct == 0 else ("on-demand" if pct == 100 else "mixed")
            elif lt is not None and str(get(lt.props, "instanceMarketOptions.marketType", "")).lower() == "spot":
                capacity = "spot"
            else:
                capacity = "on-demand"
            lo, hi = as_int(get(n.props, "minSize"), 0) or 0, as_int(get(n.props, "maxSize"), 0) or 0
            autoscaled = True
            disk = _template_disks(lt)
        elif n.type == AWS_EKS_NODE_GROUP:
            tags = tags_of(n.props)
            types = [str(t) for t in as_list(get(n.props, "instanceTypes"))]
            capacity = "spot" if str(get(n.props, "capacityType", "")).upper() == "SPOT" else "on-demand"
            lo = as_int(get(n.props, "scalingConfig.minSize"), 0) or 0
            hi = as_int(get(n.props, "scalingConfig.maxSize"), 0) or 0
            autoscaled = True
            disk = as_int(get(n.props, "diskSize"))
            if disk is None:
                disk = _template_disks(_launch_template_of(n, templates))
        else:
            continue
        known = [gpus_of("aws", t) for t in types]
        gpus = max([g for g in known if g is not None], default=None)
        if not gpus and POOL_KEY not in tags and not include_cpu:
            continue
        problems = [f"instance type {t!r} is not in the price catalog" for t, g in zip(types, known) if g is None]
        if not types:
            problems.append("no instance type found (neither mixed-instances overrides nor a launch template)")
        out.append(GpuPool(
            cloud="aws", name=tags.get(POOL_KEY) or n.name, urns=[n.urn], resource_type=n.type, instance_types=types,
            gpus_per_node=None if problems and not gpus else gpus, min_nodes=lo, max_nodes=hi, capacity=capacity,
            on_demand_approved=approval_of(tags)[0], approval_problem=approval_of(tags)[1], autoscaled=autoscaled,
            problems=problems, boot_disk_gib=disk))
    return out


@dataclass
class OwnNodeGroup(GpuPool):
    """A node group of a cluster the stack does not create, as its node-groups ConfigMap describes it: what it is
    made of comes from there (GPUs, vCPUs, memory, the stack's own price or none), not from the catalog."""

    vcpus: int = 0
    memory_gib: float = 0.0
    usd_per_hour: Optional[float] = None
    role: str = "gpu"


def own_node_groups(nodes: list[Node], include_cpu: bool = False) -> list[OwnNodeGroup]:
    """The node groups of cloud kubernetes, from ConfigMap gpu-platform/node-groups (node-groups.json; written by
    gpu_platform/components/kubernetes/cluster.py): GPU groups, and with include_cpu the system group too. A group
    is autoscaled when its sizes differ (the cluster's autoscaler moves it between them); a fixed one is held to the
    rules as a fixed GKE or EKS pool is."""
    import json

    out: list[OwnNodeGroup] = []
    for n in nodes:
        if n.type != KUBE_CONFIG_MAP or (get(n.props, "metadata.namespace"), get(n.props, "metadata.name")) != OWN_NODE_GROUPS:
            continue
        data = get(n.props, "data")
        raw = data.get(OWN_NODE_GROUPS_KEY) if isinstance(data, Mapping) else None
        try:
            groups = json.loads(raw)["nodeGroups"] if isinstance(raw, str) else None
        except (ValueError, KeyError, TypeError):
            groups = None
        if not isinstance(groups, list):
            out.append(OwnNodeGroup(cloud="kubernetes", name=n.name, urns=[n.urn], resource_type=n.type, instance_types=[],
                                    gpus_per_node=None, min_nodes=0, max_nodes=0, capacity="on-demand",
                                    on_demand_approved=False, autoscaled=False,
                                    problems=[f"its node groups ({OWN_NODE_GROUPS_KEY}) are not readable at plan time"]))
            continue
        for g in groups:
            if not isinstance(g, Mapping):
                continue
            role = str(g.get("role"))
            gpus = as_int(g.get("gpusPerNode"))
            if role != "gpu" and not include_cpu:
                continue
            approved, why = approval_of(tags_from_mapping(g.get("tags")))
            lo, hi = as_int(g.get("minNodes")) or 0, as_int(g.get("maxNodes")) or 0
            price = g.get("usdPerHour")
            out.append(OwnNodeGroup(
                cloud="kubernetes", name=str(g.get("name")), urns=[n.urn], resource_type=n.type,
                instance_types=[str(g.get("instanceType"))], gpus_per_node=gpus, min_nodes=lo, max_nodes=hi,
                capacity="spot" if g.get("capacity") == "spot" else "on-demand",
                on_demand_approved=approved, approval_problem=why, autoscaled=lo < hi,
                problems=[] if gpus is not None else ["gpusPerNode is not a number"],
                vcpus=as_int(g.get("vcpus")) or 0, memory_gib=float(g.get("memoryGib") or 0),
                usd_per_hour=float(price) if isinstance(price, (int, float)) and not isinstance(price, bool) else None,
                role=role))
    return out


def tags_from_mapping(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def gpu_pools(nodes: list[Node]) -> list[GpuPool]:
    """Every GPU pool of the stack, on whichever clouds its resources are."""
    return _linode_pools(nodes) + _gke_pools(nodes) + _aws_pools(nodes) + own_node_groups(nodes)


def node_groups(nodes: list[Node]) -> list[GpuPool]:
    """Every pool of nodes including CPU-only ones (system pools), for the cost estimate."""
    return _gke_pools(nodes, include_cpu=True) + _aws_pools(nodes, include_cpu=True)


def clouds_of(nodes: list[Node]) -> set[str]:
    """Clouds the stack has resources on (from type tokens: linode:, gcp:, aws:), and kubernetes where the stack
    describes the node groups of a cluster it does not create."""
    clouds = {n.type.split(":", 1)[0] for n in nodes} & {"linode", "gcp", "aws"}
    if own_node_groups(nodes, include_cpu=True):
        clouds.add("kubernetes")
    return clouds
