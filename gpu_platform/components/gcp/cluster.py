"""A private GKE cluster with a small system pool and autoscaling (to zero) GPU pools.

`GkeCluster` owns everything the cluster needs on GCP: an explicit gcp provider for the stack's
project and region, the VPC with Cloud NAT, a least-privilege node service account, the cluster,
its node pools and the checkpoint bucket. `handle` is the cluster contract for the platform layer.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pulumi
import pulumi_gcp
import pulumi_kubernetes as k8s
import yaml
from pulumi_gcp import container, projects, serviceaccount

from gpu_platform.components.cluster import CheckpointStore, ClusterHandle, SystemPoolSpec, common_labels, gpu_pool_specs
from gpu_platform.config.bucket_lifecycle import BucketDeletion
from gpu_platform.components.gcp.bucket import WORKLOAD_IDENTITY_ANNOTATION, CheckpointBucket, CheckpointBucketArgs
from gpu_platform.config.names import account_id
from gpu_platform.config.gcp import GcpSection, GcpSystemPool, Maintenance, pool_zones
from gpu_platform.config.derived import effective_deletion_protection, gke_node_minor_floor
from gpu_platform.components.gcp.network import PODS_RANGE, SERVICES_RANGE, GcpNetwork, NetworkArgs
from gpu_platform.components.gcp.nodepool import GkeGpuPool, create_gpu_pool, create_system_pool, system_node_config

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig

# What the nodes' own identity may do: write logs and metrics, read images. Nothing else; workloads
# get their own identities through Workload Identity.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")
AUTOSCALING_PROFILE = "OPTIMIZE_UTILIZATION"
DEFAULT_STORAGE_CLASS = "standard-rwo"
AUTH_PLUGIN = "gke-gcloud-auth-plugin"
AUTH_PLUGIN_HINT = ("Install gke-gcloud-auth-plugin (`gcloud components install gke-gcloud-auth-plugin`), see "
                    "https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl#install_plugin")


@dataclass(frozen=True)
class GkeClusterArgs:
    project: str
    region: str
    zones: tuple[str, ...]
    resource_prefix: str  # GCP names: cluster, VPC, service accounts, bucket start with it
    kubernetes_version: Optional[str]  # a pinned minor ("1.35"); None: the release channel picks
    release_channel: str
    admin_cidrs: tuple[str, ...]
    private_endpoint: bool
    network_cidr: str
    pods_cidr: str
    services_cidr: str
    master_cidr: str
    deletion_protection: bool
    system_pool: GcpSystemPool
    gpu_pools: tuple[GkeGpuPool, ...]
    gpu_driver_version: str
    checkpoint_retention_days: int
    # The oldest minor the nodes can run: the pinned one, or, left to the channel, the oldest the channel
    # can still run today (config/derived.py gke_node_minor_floor). Decides Spot pools' shutdown grace.
    node_minor_floor: Optional[str] = None
    labels: Mapping[str, str] = field(default_factory=dict)
    checkpoint_deletion: BucketDeletion = BucketDeletion.of("retain")  # checkpointBucket.onDestroy
    maintenance: Maintenance = field(default_factory=Maintenance)

    @property
    def node_tag(self) -> str:
        return f"{self.resource_prefix}-node"

    @property
    def workload_pool(self) -> str:
        return f"{self.project}.svc.id.goog"

    @classmethod
    def from_config(cls, cfg: "StackConfig") -> "GkeClusterArgs":
        from gpu_platform.costs.catalog import load_catalog

        section: GcpSection = cfg.gcp  # type: ignore[assignment]
        catalog = load_catalog()
        pools = []
        for pool, spec in zip(cfg.gpu_pools, gpu_pool_specs(cfg)):
            itype = catalog.instance("gcp", pool.instance_type)
            assert itype is not None and itype.accelerator, "validated by gpu_platform.config.stack"
            zones = tuple(pool_zones(section, itype))
            pools.append(GkeGpuPool(spec=replace(spec, zones=zones), accelerator=itype.accelerator,
                                    zones=zones,
                                    approved_on_demand=pool.approved_on_demand))
        return cls(
            project=section.project, region=section.region, zones=tuple(section.zones),
            resource_prefix=cfg.name_prefix,
            kubernetes_version=cfg.kubernetes_version if cfg.kubernetes_version_pinned else None,
            node_minor_floor=gke_node_minor_floor(cfg),
            release_channel=section.release_channel, admin_cidrs=tuple(cfg.admin_cidrs),
            private_endpoint=section.private_endpoint, network_cidr=section.network_cidr,
            pods_cidr=section.pods_cidr, services_cidr=section.services_cidr, master_cidr=section.master_cidr,
            deletion_protection=effective_deletion_protection(cfg), system_pool=section.system_pool,
            gpu_pools=tuple(pools), gpu_driver_version=section.gpu_driver_version,
            checkpoint_retention_days=section.checkpoint_retention_days, labels=common_labels(cfg),
            maintenance=section.maintenance,
            checkpoint_deletion=BucketDeletion.of(cfg.checkpoint_bucket.on_destroy),
        )


# ---------------------------------------------------------------------------------------------
# Pure settings
# ---------------------------------------------------------------------------------------------


def private_cluster_config(args: GkeClusterArgs) -> dict[str, Any]:
    """Nodes never get public IPs; the control plane is public (restricted to adminCidrs) unless
    privateEndpoint is set."""
    return {
        "enable_private_nodes": True,
        "enable_private_endpoint": args.private_endpoint,
        "master_ipv4_cidr_block": args.master_cidr,
    }


def master_authorized_networks(admin_cidrs: Sequence[str]) -> dict[str, Any]:
    return {
        "cidr_blocks": [{"cidr_block": c, "display_name": f"admin-{i}"} for i, c in enumerate(admin_cidrs)],
        # Not "any VM on Google Cloud": only the listed ranges.
        "gcp_public_cidrs_access_enabled": False,
    }


# The recurring window's first occurrence: a fixed Saturday in the past. GKE uses its date only as the day
# the recurrence starts and (end - start) as the window length; a fixed value keeps `pulumi preview` quiet.
WINDOW_ANCHOR = dt.datetime(2026, 1, 3, tzinfo=dt.timezone.utc)


def _rfc3339(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def maintenance_policy(m: Maintenance) -> dict[str, Any]:
    """A weekly recurring window on the configured days (default Saturday and Sunday, all day UTC) and the
    configured exclusions. Automatic upgrades of the control plane and of every node pool, GPU pools included,
    happen only inside the window (GKE overrides it only for end of support and critical security fixes)."""
    start = WINDOW_ANCHOR + dt.timedelta(hours=m.start_hour_utc)
    exclusions = []
    for e in m.exclusions:
        item: dict[str, Any] = {"exclusion_name": e.name, "start_time": e.start}
        options: dict[str, Any] = {"scope": e.scope}
        if e.end is None:
            options["end_time_behavior"] = "UNTIL_END_OF_SUPPORT"
        else:
            item["end_time"] = e.end
        item["exclusion_options"] = options
        exclusions.append(item)
    policy: dict[str, Any] = {"recurring_window": {
        "start_time": _rfc3339(start),
        "end_time": _rfc3339(start + dt.timedelta(hours=m.hours)),
        "recurrence": "FREQ=WEEKLY;BYDAY=" + ",".join(d for d in ("MO", "TU", "WE", "TH", "FR", "SA", "SU") if d in m.days),
    }}
    if exclusions:
        policy["maintenance_exclusions"] = exclusions
    return policy


def _slug(role: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", role.split("/")[-1].lower()).strip("-")


def context_name(project: str, region: str, cluster_name: str) -> str:
    """The context name `gcloud container clusters get-credentials` would write."""
    return f"gke_{project}_{region}_{cluster_name}"


def render_kubeconfig(context: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig with no credential in it: kubectl (and the Pulumi provider) obtain a short-lived
    token from gke-gcloud-auth-plugin with the caller's gcloud credentials."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": {"server": f"https://{endpoint}",
                                                   "certificate-authority-data": ca_certificate}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "users": [{"name": context, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": AUTH_PLUGIN,
            "installHint": AUTH_PLUGIN_HINT,
            "provideClusterInfo": True,
            "interactiveMode": "Never",
        }}}],
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# The component
# ---------------------------------------------------------------------------------------------


class GkeCluster(pulumi.ComponentResource):
    """Outputs: cluster_name, endpoint, kubeconfig (secret); `handle` is the ClusterHandle."""

    def __init__(self, name: str, args: GkeClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:gcp:GkeCluster", name, None, opts)
        # An explicit provider: project and region come from the stack's gcp section, never from
        # whatever gcloud or the environment happens to default to.
        self.gcp_provider = pulumi_gcp.Provider(
            f"{name}-gcp", project=args.project, region=args.region,
            opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.gcp_provider)

        self.network = GcpNetwork(
            f"{name}-network",
            NetworkArgs(resource_prefix=args.resource_prefix, region=args.region, network_cidr=args.network_cidr,
                        pods_cidr=args.pods_cidr, services_cidr=args.services_cidr, master_cidr=args.master_cidr,
                        node_tag=args.node_tag),
            opts=pulumi.ResourceOptions(parent=self, providers={"gcp": self.gcp_provider}))

        self.node_service_account = serviceaccount.Account(
            f"{name}-nodes",
            project=args.project,
            account_id=account_id(args.resource_prefix, "nodes"),
            display_name=f"gpu-platform {args.resource_prefix}: GKE nodes",
            opts=child)
        self.node_roles = [
            projects.IAMMember(f"{name}-nodes-{_slug(role)}", project=args.project, role=role,
                               member=self.node_service_account.member, opts=child)
            for role in NODE_ROLES
        ]
        node_sa = self.node_service_account.email

        self.cluster = container.Cluster(
            f"{name}-cluster",
            name=args.resource_prefix,
            project=args.project,
            location=args.region,
            node_locations=list(args.zones),
            network=self.network.network_id,
            subnetwork=self.network.subnet_id,
            networking_mode="VPC_NATIVE",
            ip_allocation_policy={"cluster_secondary_range_name": PODS_RANGE,
                                  "services_secondary_range_name": SERVICES_RANGE},
            # Node pools are managed below; GKE insists on a default pool at creation and we delete it.
            # It still gets our node identity: the Compute Engine default account may be disabled.
            remove_default_node_pool=True,
            initial_node_count=1,
            node_config=system_node_config(args.system_pool.instance_type, node_sa, args.node_tag, args.labels),
            private_cluster_config=private_cluster_config(args),
            master_authorized_networks_config=master_authorized_networks(args.admin_cidrs),
            master_auth={"client_certificate_config": {"issue_client_certificate": False}},
            # Created and upgraded through the release channel. A minor is sent only when the stack pins one (the
            # config allows only minors the version calendar lists as available); GKE then creates the newest
            # patch of it in the channel. Never a stale default: unset, GKE picks the channel's default version.
            release_channel={"channel": args.release_channel},
            min_master_version=args.kubernetes_version,
            maintenance_policy=maintenance_policy(args.maintenance),
            workload_identity_config={"workload_pool": args.workload_pool},
            enable_shielded_nodes=True,
            enable_legacy_abac=False,
            # Dataplane V2: NetworkPolicy enforcement built in (no network_policy block: that is Calico, for the
            # legacy datapath). The datapath is fixed at creation: changing it replaces the cluster, so an existing
            # cluster created with the legacy datapath keeps it (see docs/quickstart-gcp.md).
            datapath_provider="ADVANCED_DATAPATH",
            # Node auto-provisioning stays off (pools are explicit); the autoscaler removes idle nodes fast.
            cluster_autoscaling={"enabled": False, "autoscaling_profile": AUTOSCALING_PROFILE},
            addons_config={
                "gce_persistent_disk_csi_driver_config": {"enabled": True},
                "gcs_fuse_csi_driver_config": {"enabled": True},
                "http_load_balancing": {"disabled": False},
                "horizontal_pod_autoscaling": {"disabled": False},
            },
            # GKE cost allocation: per-namespace/label costs in the billing export.
            cost_management_config={"enabled": True},
            deletion_protection=args.deletion_protection,
            resource_labels=dict(args.labels),
            opts=pulumi.ResourceOptions(
                parent=self, provider=self.gcp_provider, depends_on=self.node_roles,
                # The default pool's settings matter only at creation, and it is deleted right after.
                ignore_changes=["nodeConfig", "initialNodeCount"]),
        )

        self.system_pool = create_system_pool(
            f"{name}-system", self.cluster, args.region, list(args.system_pool.zones) or list(args.zones),
            args.system_pool.instance_type,
            args.system_pool.min_nodes, args.system_pool.max_nodes, node_sa, args.node_tag, args.labels, opts=child)
        self.gpu_node_pools = [
            create_gpu_pool(f"{name}-gpu-{p.spec.name}", self.cluster, args.region, p, node_sa, args.node_tag,
                            args.labels, args.gpu_driver_version, args.node_minor_floor, opts=child)
            for p in args.gpu_pools
        ]

        self.checkpoints = CheckpointBucket(
            f"{name}-checkpoints",
            CheckpointBucketArgs(project=args.project, region=args.region, resource_prefix=args.resource_prefix,
                                 retention_days=args.checkpoint_retention_days, labels=args.labels,
                                 deletion=args.checkpoint_deletion),
            depends_on_cluster=self.cluster,
            opts=pulumi.ResourceOptions(parent=self, providers={"gcp": self.gcp_provider}))

        endpoint = (self.cluster.private_cluster_config.apply(lambda c: c.private_endpoint)  # type: ignore[union-attr]
                    if args.private_endpoint else self.cluster.endpoint)
        self.endpoint = endpoint
        self.cluster_name = self.cluster.name
        context = self.cluster.name.apply(lambda n: context_name(args.project, args.region, n))
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(
            context, endpoint, self.cluster.master_auth.cluster_ca_certificate,
        ).apply(lambda v: render_kubeconfig(v[0], v[1], v[2])))
        self.k8s_provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self))

        self.handle = ClusterHandle(
            cloud="gcp",
            name=args.resource_prefix,
            kubeconfig=self.kubeconfig,
            provider=self.k8s_provider,
            gpu_pools=[p.spec for p in args.gpu_pools],
            default_storage_class=DEFAULT_STORAGE_CLASS,
            checkpoint=CheckpointStore(
                url=self.checkpoints.url,
                service_account_annotations={WORKLOAD_IDENTITY_ANNOTATION: self.checkpoints.service_account_email},
                env={"GOOGLE_CLOUD_PROJECT": args.project},
            ),
            # GKE runs the NVIDIA device plugin on GPU nodes and installs the driver (gpuDriverVersion).
            gpu_device_plugin_installed=True,
            ready=[self.cluster, self.system_pool],
            endpoint=endpoint,
            # Where the CPU notebook profile can run: the system pool's own zones (gcp.systemPool.zones).
            system_zones=tuple(args.system_pool.zones) or tuple(args.zones),
            system_pool=SystemPoolSpec(args.system_pool.instance_type, args.system_pool.min_nodes,
                                       args.system_pool.max_nodes),
        )
        self.register_outputs({
            "clusterName": self.cluster.name,
            "endpoint": endpoint,
            "kubeconfig": self.kubeconfig,
            "checkpointBucket": self.checkpoints.url,
        })
