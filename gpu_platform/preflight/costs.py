"""The cost part of preflight: the stack's whole monthly bill, the budget comparison, the catalog's age,
cost.json and the decision chart.

The estimator (gpu_platform/costs/estimator.py) is pure; this module feeds it what only the program knows: boot-disk
sizes (the node pools and launch templates the program registers), the storage the platform's charts
request (PVCs and StatefulSet volumeClaimTemplates in the rendered releases of gpu_platform/preflight/fit/render.py),
the Services of type LoadBalancer those charts create, and the extended-support fee of the Kubernetes
version on the day (gpu_platform/data/versions_calendar.py). The chart is drawn in a child process
(`python -m gpu_platform.preflight.costs`, the data piped in) so matplotlib's import runs on the other core."""

from __future__ import annotations

import datetime as _dt
import json
import os
import pickle
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from gpu_platform.data.versions_calendar import today as calendar_today

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig

_QUANTITY = re.compile(r"^([0-9.]+)\s*([KMGTPE]i?)?$")
_FACTORS = {None: 1 / 2**30, "K": 1e3 / 2**30, "M": 1e6 / 2**30, "G": 1e9 / 2**30, "T": 1e12 / 2**30,
            "Ki": 1 / 2**20, "Mi": 1 / 2**10, "Gi": 1.0, "Ti": 2**10, "Pi": 2**20}


def gib(quantity: Any) -> Optional[float]:
    """A Kubernetes storage quantity ("10Gi", "500Mi", "20G") in GiB; None if not a quantity."""
    m = _QUANTITY.match(str(quantity).strip())
    if not m or m.group(2) not in _FACTORS:
        return None
    return float(m.group(1)) * _FACTORS[m.group(2)]


def _storage(spec: Any) -> Optional[float]:
    try:
        return gib(spec["resources"]["requests"]["storage"])
    except (KeyError, TypeError):
        return None


def storage_requests(releases: Iterable[Any]) -> list[tuple[str, float]]:
    """(Kind/namespace/name, GiB) of every PersistentVolumeClaim and StatefulSet volumeClaimTemplate (times
    its replicas) in the rendered releases; Helm hook objects included (they run too). Volumes the
    Prometheus operator creates count too: a Prometheus or Alertmanager resource's
    `storage.volumeClaimTemplate` becomes its StatefulSet's claim, one per replica (and per shard)."""
    out: list[tuple[str, float]] = []
    for rel in releases:
        for obj in getattr(rel, "objects", None) or []:
            if not isinstance(obj, dict):
                continue
            kind, meta = obj.get("kind"), obj.get("metadata") or {}
            where = f"{meta.get('namespace', '-')}/{meta.get('name', '?')}"
            if kind == "PersistentVolumeClaim":
                size = _storage(obj.get("spec") or {})
                if size:
                    out.append((f"{rel.name}: PVC {where}", size))
            elif kind == "StatefulSet":
                spec = obj.get("spec") or {}
                replicas = spec.get("replicas", 1)
                replicas = replicas if isinstance(replicas, int) else 1
                for tpl in spec.get("volumeClaimTemplates") or []:
                    size = _storage((tpl or {}).get("spec") or {})
                    if size:
                        out.append((f"{rel.name}: StatefulSet {where} x{replicas} "
                                    f"{(tpl.get('metadata') or {}).get('name', '')}", size * replicas))
            elif kind in OPERATOR_STATEFUL_KINDS and str(obj.get("apiVersion", "")).startswith("monitoring.coreos.com/"):
                spec = obj.get("spec") or {}
                tpl = (spec.get("storage") or {}).get("volumeClaimTemplate") or {}
                size = _storage(tpl.get("spec") or {})
                copies = _count(spec.get("replicas")) * (_count(spec.get("shards")) if kind == "Prometheus" else 1)
                if size and copies:
                    out.append((f"{rel.name}: {kind} {where} x{copies} (its operator's StatefulSet)", size * copies))
    return out


# Resources of the Prometheus operator whose StatefulSets claim volumes (operator API monitoring.coreos.com/v1:
# `replicas` defaults to 1, Prometheus `shards` too).
OPERATOR_STATEFUL_KINDS = ("Prometheus", "Alertmanager")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 1


def gke_system_idle_floor(group: Any, plan: Any) -> Any:
    """A regional GKE node pool starts with `initialNodeCount` nodes in *each* of its zones, and the
    platform's volumes (hub database, Katib and Pipelines MySQL, Prometheus) are zonal disks created on
    whichever of those nodes their pod first ran: the autoscaler then cannot remove a zone's last node
    (the pods pinned there have nowhere to go), so the configured minimum is not where the pool idles."""
    pools = [r for r in (plan.by_type("gcp:container/nodePool:NodePool") if plan is not None else [])
             if not (r.plain_inputs.get("nodeConfig") or {}).get("guestAccelerators")]
    if len(pools) != 1:
        return group
    inputs = pools[0].plain_inputs
    zones = len(inputs.get("nodeLocations") or [])
    initial = inputs.get("initialNodeCount") or 0
    initial = int(initial) if isinstance(initial, (int, float)) and not isinstance(initial, bool) else 0
    floor = min(zones * initial, group.full_count)
    if floor <= group.count:
        return group
    return replace(group, count=floor,
                   idle_basis=f"GKE starts {initial} per zone in {zones} zones and the platform's zonal volumes keep a "
                              f"node in each zone they were created in, whatever the minimum of {group.count}")


def load_balancer_services(releases: Iterable[Any]) -> list[str]:
    out = []
    for rel in releases:
        for obj in getattr(rel, "objects", None) or []:
            if isinstance(obj, dict) and obj.get("kind") == "Service" and (obj.get("spec") or {}).get("type") == "LoadBalancer":
                meta = obj.get("metadata") or {}
                out.append(f"{rel.name}: {meta.get('namespace', '-')}/{meta.get('name', '?')}")
    return out


# Where the program pushes the images it builds, and the catalog's price of storing them (components/images.py).
REGISTRY_STORAGE = {"aws": ("ECR", "ecr-storage"), "gcp": ("Artifact Registry", "artifact-registry-storage")}


def registry_note(cfg: "StackConfig", plan: Any) -> Optional[str]:
    """What the stack's own images cost to keep, in words: the registry, the images, what is kept and the
    catalog's storage price. Not a line of the bill: an image's size is known only once it is built."""
    from gpu_platform.components.images import KEEP_IMAGES
    from gpu_platform.preflight.verdict import image_builds

    images = image_builds(plan) if plan is not None else []
    if not images:
        return None
    names = ", ".join(i["name"] for i in images)
    if cfg.cloud in REGISTRY_STORAGE:
        from gpu_platform.costs.catalog import load_catalog

        where, key = REGISTRY_STORAGE[cfg.cloud]
        price = load_catalog(cfg.catalog_overrides() or None).fixed_costs(cfg.cloud)[key]
        return (f"container images the program builds into the stack's {where} ({names}; the newest {KEEP_IMAGES} "
                f"pushes of each kept): ${price.usd_per_hour:g}/GiB-month ({key}, {price.date}); their size is known "
                "only after the build")
    return f"container images the program builds into linode.imageRegistry ({names}): that registry's own pricing"


# How the bill accounts for each resource type a plan registers (tests/test_costs_accounting.py holds every type the
# shipped stacks plan to one of these). A planned resource of a type in none of them is listed under "not
# modelled", by type, with its names: a library user's own bucket or database is never silently left off.
# Priced from the plan, whoever registered them (_network_and_keys, the load balancers in stack_shape):
PRICED_FROM_PLAN = frozenset({
    "aws:ec2/natGateway:NatGateway", "aws:ec2/eip:Eip", "aws:kms/key:Key", "aws:lb/loadBalancer:LoadBalancer",
    "gcp:compute/routerNat:RouterNat", "gcp:kms/cryptoKey:CryptoKey", "linode:index/nodeBalancer:NodeBalancer",
})
# Priced from the stack config, so only as the program's own components register them (a second cluster, node
# pool or bucket of the user's program is not in the bill):
PRICED_FROM_CONFIG = frozenset({
    "aws:eks/cluster:Cluster", "aws:eks/nodeGroup:NodeGroup", "aws:autoscaling/group:Group", "aws:s3/bucket:Bucket",
    "gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool", "gcp:storage/bucket:Bucket",
    "linode:index/instance:Instance", "linode:index/objectStorageBucket:ObjectStorageBucket",
})
# Billed by use only, and named by a standing note of the bill (ALWAYS_NOT_MODELLED, registry_note), when the
# program registers them:
USAGE_NOTED = frozenset({
    "aws:cloudwatch/logGroup:LogGroup",  # "logs and metrics shipped to the cloud"
    "aws:ecr/repository:Repository", "gcp:artifactregistry/repository:Repository",  # registry_note
    "docker-build:index:Image",  # registry_note
    "linode:index/objectStorageObject:ObjectStorageObject",  # bytes in the priced bucket
})
# No charge of their own (configuration, identity, networking without an hourly fee, objects in the cluster), or
# requests far below the providers' free tiers (SNS topics, SQS queues, EventBridge rules on AWS events).
FREE_PREFIXES = ("kubernetes:", "pulumi:providers:", "random:", "tls:", "command:", "aws:iam/", "gcp:serviceaccount/")
FREE_TYPES = frozenset({
    "aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation", "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup", "aws:ec2/securityGroup:SecurityGroup",
    "aws:ec2/launchTemplate:LaunchTemplate", "aws:eks/accessEntry:AccessEntry",
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation", "aws:eks/addon:Addon", "aws:kms/alias:Alias",
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls", "aws:s3/bucketPolicy:BucketPolicy",
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketVersioning:BucketVersioning", "aws:ecr/lifecyclePolicy:LifecyclePolicy",
    "aws:budgets/budget:Budget", "aws:cloudwatch/eventRule:EventRule", "aws:cloudwatch/eventTarget:EventTarget",
    "aws:sns/topic:Topic", "aws:sns/topicPolicy:TopicPolicy", "aws:sns/topicSubscription:TopicSubscription",
    "aws:sqs/queue:Queue", "aws:sqs/queuePolicy:QueuePolicy",
    "gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork", "gcp:compute/firewall:Firewall",
    "gcp:compute/router:Router", "gcp:projects/iAMMember:IAMMember", "gcp:storage/bucketIAMMember:BucketIAMMember",
    "gcp:billing/budget:Budget", "gcp:monitoring/notificationChannel:NotificationChannel",
    "linode:index/firewall:Firewall", "linode:index/firewallDevice:FirewallDevice", "linode:index/vpc:Vpc",
    "linode:index/vpcSubnet:VpcSubnet", "linode:index/nodeBalancerConfig:NodeBalancerConfig",
    "linode:index/nodeBalancerNode:NodeBalancerNode", "linode:index/objectStorageKey:ObjectStorageKey",
})
SHOWN_NAMES = 5


def _programs_own(urn: str) -> bool:
    """Registered inside one of the package's components (its URN's type chain holds a gpu-platform: type)."""
    parts = urn.split("::")
    return len(parts) >= 3 and any(t.startswith("gpu-platform:") for t in parts[2].split("$")[:-1])


def _free(r: Any) -> bool:
    if r.type == "aws:ec2/vpcEndpoint:VpcEndpoint":  # a Gateway endpoint (S3, DynamoDB) has no charge; others do
        return (r.plain_inputs.get("vpcEndpointType") or "Gateway") == "Gateway"
    return r.type in FREE_TYPES or r.type.startswith(FREE_PREFIXES)


def unpriced_resources(plan: Any) -> list[str]:
    """The planned resources the bill neither prices nor knows to be free (or billed by use and noted), one item
    per type: how many, and their names."""
    left: dict[str, list[str]] = {}
    for r in plan.resources:
        if not r.custom or _free(r) or r.type in PRICED_FROM_PLAN:
            continue
        if (r.type in PRICED_FROM_CONFIG or r.type in USAGE_NOTED) and _programs_own(r.urn):
            continue
        left.setdefault(r.type, []).append(r.name)
    out = []
    for rtype, names in sorted(left.items()):
        names = sorted(names)  # the plan's order varies between runs; a note is shown again only when it changes
        shown = ", ".join(names[:SHOWN_NAMES]) + (f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else "")
        out.append(f"{len(names)} planned {rtype} resource(s) the cost model does not price: {shown}")
    return out


def _boot_disks(cfg: "StackConfig", plan: Any):
    """(GPU pool boot disk GiB by pool name, system node boot disk GiB) as the program registers them."""
    pools: dict[str, int] = {}
    system: Optional[int] = None
    if cfg.cloud == "gcp":
        from gpu_platform.components.gcp.nodepool import GPU_DISK_GB, SYSTEM_DISK_GB

        pools = {p.name: GPU_DISK_GB for p in cfg.gpu_pools}
        system = SYSTEM_DISK_GB
    elif cfg.cloud == "aws":
        pools = {p.name: cfg.aws.pool(p.name).root_volume_gib for p in cfg.gpu_pools} if cfg.aws else {}
        for r in (plan.by_type("aws:ec2/launchTemplate:LaunchTemplate") if plan is not None else []):
            if "system" in r.name:
                for bdm in r.plain_inputs.get("blockDeviceMappings") or []:
                    size = (bdm.get("ebs") or {}).get("volumeSize")
                    if isinstance(size, (int, float)):
                        system = int(size)
    return pools, system


def _extended_support(cfg: "StackConfig", today: _dt.date) -> tuple[Optional[float], str]:
    from gpu_platform.costs.estimator import extended_support

    return extended_support(cfg.cloud, cfg.kubernetes_version, today)


def platform_idle_floor(group: Any, idle: Optional[dict[str, int]]) -> Any:
    """The system group at the nodes the platform's own pods need with no job running (fit.checks.idle_nodes,
    summed over a pool's zonal groups), when that is more than its configured idle floor: the cluster
    autoscaler keeps those nodes, whatever the minimum says."""
    if not idle:
        return group
    need = sum(n for key, n in idle.items() if key.split("/", 1)[0] == "system")
    if need <= group.count:
        return group
    need = min(need, group.full_count)
    return replace(group, count=need,
                   idle_basis=f"the platform's own pods need {need} system node(s) with no job running (preflight's "
                              f"packing of the rendered charts; the cloud's own agents not counted), whatever the "
                              f"minimum of {group.count}")


def _network_and_keys(cfg: "StackConfig", plan: Any) -> dict[str, Any]:
    """What the plan registers that the bill prices per unit: NAT gateways and the public IPv4 addresses
    they use, customer-managed KMS keys, the checkpoint bucket's soft-delete retention (GCS). An existing
    AWS VPC's NAT is not the stack's: no gateway, no address."""
    out: dict[str, Any] = {}
    if cfg.cloud == "aws":
        out["nat_gateways"] = len(plan.by_type("aws:ec2/natGateway:NatGateway"))
        out["public_ipv4"] = len(plan.by_type("aws:ec2/eip:Eip"))
        out["kms_keys"] = len(plan.by_type("aws:kms/key:Key"))
    elif cfg.cloud == "gcp":
        nats = plan.by_type("gcp:compute/routerNat:RouterNat")
        out["nat_gateways"] = len(nats)
        # AUTO_ONLY: GCP allocates the addresses, one per 1,008 VMs at the default 64 ports each; MANUAL_ONLY: listed.
        out["public_ipv4"] = sum(len(n.plain_inputs.get("natIps") or []) or 1 for n in nats)
        out["kms_keys"] = len(plan.by_type("gcp:kms/cryptoKey:CryptoKey"))
        for bucket in plan.by_type("gcp:storage/bucket:Bucket"):
            seconds = (bucket.plain_inputs.get("softDeletePolicy") or {}).get("retentionDurationSeconds")
            if seconds is not None:
                out["soft_delete_days"] = int(seconds) / 86400
    return out


def stack_shape(cfg: "StackConfig", plan: Any = None, releases: Optional[list[Any]] = None,
                today: Optional[_dt.date] = None, idle: Optional[dict[str, int]] = None):
    """The estimator's StackShape of a configured stack with what the program and its charts add."""
    from gpu_platform.costs.estimator import StackShape

    day = today or calendar_today()
    shape = StackShape.from_config(cfg)
    pool_disks, system_disk = _boot_disks(cfg, plan)
    pools = tuple(replace(p, boot_disk_gib=pool_disks.get(p.name, p.boot_disk_gib)) for p in shape.gpu_pools)
    system = shape.system_nodes
    if system is not None and system_disk is not None:
        system = tuple(replace(g, boot_disk_gib=system_disk) for g in system)
    if system is not None and cfg.cloud == "gcp":
        system = tuple(gke_system_idle_floor(g, plan) for g in system)
    if system is not None:
        system = tuple(platform_idle_floor(g, idle) if g.role == "system" else g for g in system)
    fee, fee_basis = _extended_support(cfg, day)
    changes: dict[str, Any] = dict(gpu_pools=pools, system_nodes=system, extended_support_usd_per_hour=fee,
                                   extended_support_basis=fee_basis)
    extra = []
    for r in (plan.by_type("kubernetes:helm.sh/v3:Release") if plan is not None else []):
        values = r.plain_inputs.get("values") or {}
        cap = ((values.get("singleuser") or {}).get("storage") or {}).get("capacity") if isinstance(values, dict) else None
        if cap:
            extra.append(f"notebook home volumes: {cap} per user, created when a user first starts a server "
                         "(the number of users is not known)")
    note = registry_note(cfg, plan)
    if note:
        extra.append(note)
    if plan is not None:
        extra += unpriced_resources(plan)
    changes["extra_not_modelled"] = tuple(extra)
    if plan is not None:
        changes.update(_network_and_keys(cfg, plan))
    if releases is not None:
        pvcs = storage_requests(releases)
        changes.update(pvc_gib=tuple(pvcs), pvc_basis="requests in the rendered charts (gpu_platform/preflight/fit/render.py)")
        lbs = load_balancer_services(releases)
        plan_lbs = 0
        if plan is not None:
            plan_lbs = len(plan.by_type("linode:index/nodeBalancer:NodeBalancer")) if cfg.cloud == "linode" else \
                len(plan.by_type("aws:lb/loadBalancer:LoadBalancer")) if cfg.cloud == "aws" else 0
        if cfg.cloud == "linode":
            base = plan_lbs if plan is not None else (1 if shape.control_plane_count > 1 else 0)
            changes["load_balancers"] = base + len(lbs)
        elif lbs or plan_lbs:
            changes["load_balancers"] = plan_lbs + len(lbs)
    return replace(shape, **changes)


def bill_label(stack: Optional[str], prefix: str) -> str:
    """What the bill is for: the stack, and the prefix of its resources' names where that is another name (a
    stack eu-gke whose nameSuffix keeps the shipped gpu-prod-* names)."""
    if not stack or stack == prefix:
        return stack or prefix
    return f"{stack}, resources named {prefix}-*"


# Set (to anything but "" or "0"): preflight writes cost.json but draws no cost.png.
NO_CHART_ENV = "GPU_PLATFORM_NO_CHART"


def chart_disabled() -> bool:
    return os.environ.get(NO_CHART_ENV, "").strip() not in ("", "0")


class CostReport:
    """Build with the config and the plan; `report(releases)` once the charts are rendered prints the bill."""

    def __init__(self, cfg: "StackConfig", out: Path, plan: Any = None, today: Optional[_dt.date] = None,
                 repeat_notes: bool = True, stack: Optional[str] = None):
        self.cfg, self.out, self.plan = cfg, out, plan
        self.label = bill_label(stack, cfg.name_prefix)
        # False: notes this stack's last run showed (out/notes-shown.json) take one line.
        self.repeat_notes = repeat_notes
        self.today = today or calendar_today()  # GPU_PLATFORM_TODAY, like the config checks
        self.json_path = out / "cost.json"
        self.png_path = out / "cost.png"
        self._summary: Optional[str] = None
        # The chart is drawn in a child process started now: it imports matplotlib (about a second)
        # while the program, the charts and the policies are worked out, then waits for the data.
        # With GPU_PLATFORM_NO_CHART set there is no chart (a run whose build/ nobody looks at: the base branch's
        # preflight in CI, most of the test suite): that second of CPU is saved and no earlier cost.png is left.
        self._chart: Optional[subprocess.Popen] = None if chart_disabled() else subprocess.Popen(
            [sys.executable, "-m", "gpu_platform.preflight.costs", str(self.png_path)], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        self._sent = self._chart is None
        if self._chart is None and self.png_path.exists():
            self.png_path.unlink()  # an earlier run's chart is not this run's bill
        # What the rendered charts add that no resource shows (None until they are rendered): handed to the
        # policy pack's monthly-cost-ceiling (chartStorageGib, chartLoadBalancers), so its figure is this bill's.
        self.chart_storage_gib: Optional[float] = None
        self.chart_load_balancers: Optional[int] = None
        # The bill refused: the stack's region has no price for a type it uses (estimator.RegionPriceRefused).
        self.refused: Optional[Exception] = None

    def report(self, releases: Optional[list[Any]] = None, idle: Optional[dict[str, int]] = None) -> str:
        """The bill; `releases`: the rendered charts (their volumes and load balancers), `idle`: the nodes
        each group keeps with no job running (fit.checks.idle_nodes)."""
        from gpu_platform.config.derived import stack_catalog
        from gpu_platform.costs import report
        from gpu_platform.costs.estimator import RegionPriceRefused, estimate

        catalog = stack_catalog(self.cfg)
        shape = replace(stack_shape(self.cfg, self.plan, releases, self.today, idle), name=self.label)
        if releases is not None:
            self.chart_storage_gib = sum(g for _, g in storage_requests(releases))
            self.chart_load_balancers = len(load_balancer_services(releases))
        try:
            self.estimate = estimate(shape, catalog)
        except RegionPriceRefused as exc:
            return self._refuse(exc)
        self.refused = None
        autoscaled = [p for p in shape.gpu_pools if p.max_nodes > p.min_nodes]
        if not self.estimate.priced:
            self.overhead = report.Overhead(1.0, "not simulated: the stack has no node prices")
        elif autoscaled:
            # the pool with the most GPUs at full size sets the overhead of the stack's curve
            pool = max(autoscaled, key=lambda p: catalog.instance(shape.cloud, p.instance_type).gpus * p.max_nodes)
            # The stack's scaleDownGraceMinutes (aws. or linode.; GKE's autoscaler default otherwise).
            down = getattr(self.cfg.cloud_section, "scale_down_grace_minutes", None) or 10.0
            # A cluster the stack does not create boots its GPU nodes as the stack says (kubernetes.nodeBootMinutes).
            boot = getattr(self.cfg.cloud_section, "node_boot_minutes", None)
            self.overhead = report.simulated_overhead(shape.cloud, pool, catalog, scale_down_minutes=float(down),
                                                      scale_up_minutes=None if boot is None else float(boot),
                                                      region=shape.region)
        else:
            self.overhead = report.Overhead(1.0, "fixed-size pools: billed all month whatever the use")
        budget = float(self.cfg.monthly_budget_usd)
        report.write_cost_json(self.estimate, self.json_path, budget, self.overhead, self.today)
        shown = self.out / "notes-shown.json"
        seen: frozenset[str] = frozenset()
        if not self.repeat_notes:
            try:
                seen = frozenset(json.loads(shown.read_text()))
            except (OSError, ValueError, TypeError):
                seen = frozenset()
        self._summary = report.render_cost_summary(self.estimate, budget, self.overhead, self.today, seen)
        shown.write_text(json.dumps(sorted(report.notes(self.estimate, self.today))) + "\n")
        if not self._sent:
            self._sent = True
            self._chart.stdin.write(pickle.dumps((self.estimate, budget, self.overhead)))
            self._chart.stdin.close()
        return self._summary

    def _refuse(self, exc: Exception) -> str:
        """No bill: the region has no price for a type the stack uses. cost.json says so (and nothing else),
        the chart is not drawn, and the verdict fails (exit 3) naming the type and the region."""
        self.refused = exc
        fix = exc.fix()
        self.json_path.write_text(json.dumps({"refused": {
            "type": exc.type, "capacity": exc.capacity, "region": exc.region, "message": str(exc),
            # every type without a price there (the first is `type`), and what to write or run
            "missing": [{"type": m.name, "capacity": m.capacity,
                         # False: the recorded offerings list it in no zone of the region (no price to record)
                         **({"offered": m.offered} if m.offered is not None else {})} for m in exc.missing],
            "priceOverrides": exc.overrides_yaml(), "refresh": exc.refresh_lines()}}, indent=2) + "\n")
        if self.png_path.exists():
            self.png_path.unlink()  # an earlier run's chart is not this stack's bill
        if not self._sent:
            self._sent = True
            self._chart.stdin.close()  # the child draws nothing when no data comes
        self._summary = "\n  ".join([f"Cost estimate for {self.label} ({self.cfg.cloud}, {exc.region}): REFUSED",
                                      str(exc), *fix])
        return self._summary

    @property
    def summary(self) -> str:
        return self._summary if self._summary is not None else self.report(None)

    def finish(self) -> str:
        """Wait for the chart; raise if it could not be drawn."""
        if not self._sent:
            self.report(None)
        if self._chart is None:
            why = "the bill refused" if self.refused is not None else f"{NO_CHART_ENV} is set"
            return f"Wrote {self.json_path} ({why}: no chart)"
        err = self._chart.stderr.read().decode()
        if self._chart.wait() != 0:
            raise RuntimeError(f"drawing {self.png_path} failed:\n{err}")
        if self.refused is not None:
            return f"Wrote {self.json_path} (the bill refused: no chart)"
        return f"Wrote {self.json_path} and {self.png_path}"


    def abandon(self) -> None:
        """The run ended before the bill (an error): let the waiting child go."""
        if self._chart is not None and self._chart.poll() is None:
            self._chart.kill()
            self._chart.wait()


def _draw_from_stdin(png: str) -> None:
    # Everything slow happens before the data arrives, while the parent is still busy: import
    # matplotlib and the report, and draw a throwaway figure once (font cache, text layout).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from gpu_platform.costs import report

    warm = Figure(figsize=(2, 1))
    FigureCanvasAgg(warm)
    warm.text(0.5, 0.5, "$0 GPU 100 %")
    warm.canvas.draw()

    try:
        est, budget, overhead = pickle.load(sys.stdin.buffer)
    except EOFError:  # the parent ended before it had a bill (an error): nothing to draw
        return
    report.draw_cost_chart(est, report.default_alternatives(est), png, budget, overhead)


if __name__ == "__main__":
    _draw_from_stdin(sys.argv[1])
    # The parent waits for this exit: skip tearing down matplotlib's objects (a quarter of a second).
    # The figure is saved and closed; a failure above exits the normal way, with its traceback.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
