"""cluster-autoscaler's externalgrpc CloudProvider for the stack's Linode GPU pools.

The Pulumi program owns the pool definitions (pools.json); this service owns the pools' instances.
An instance is found by its tags (`node-group-stack:<cluster>`, `node-group:<pool>`) and
named `<cluster>-<pool>-<slot>`: a slot is a place in the pool's block of fixed VPC addresses, and
Linode labels are unique per account, so a create repeated after a crash or a lost response cannot
make a second instance for the same slot, and a restarted service counts exactly what exists.

Join material is minted when a node is created: a bootstrap token Secret (kube-system, expiring
after the join deadline) created through the Kubernetes API, pinned to the cluster CA the pod's
service account trusts. The boot scripts are the program's own (render.node_user_data).
"""

from __future__ import annotations

import datetime
import logging
import re
import secrets
import string
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Optional, Protocol

import grpc

from gpu_platform.components.cluster import Taint as RenderTaint
from gpu_platform.components.linode import render
from gpu_platform.controllers.linode_node_groups import template
from gpu_platform.controllers.linode_node_groups.linode_api import LinodeApiError, LinodeClient
from gpu_platform.controllers.linode_node_groups.settings import POOL_TAG, Pool, Settings

log = logging.getLogger(__name__)

PROVIDER_PREFIX = "linode://"  # the Linode CCM's providerID: linode://<instance id>
CREATING = {"provisioning", "booting", "rebooting", "cloning", "migrating", "resizing", "rebuilding", "restoring"}
DELETING = {"deleting", "shutting_down"}
_TOKEN_ALPHABET = string.ascii_lowercase + string.digits


class Kube(Protocol):
    def create_secret(self, namespace: str, manifest: dict) -> None: ...
    def node_names(self, label_selector: str) -> set[str]: ...
    def pods_on_node(self, node_name: str) -> list[dict]: ...
    def cluster_ca_pem(self) -> str: ...


@dataclass
class Instance:
    id: int
    label: str
    pool: str
    slot: int
    status: str
    created: datetime.datetime
    gpus: int

    @property
    def provider_id(self) -> str:
        return f"{PROVIDER_PREFIX}{self.id}"


def _parse_time(value: str) -> datetime.datetime:
    # Linode timestamps are UTC without an offset: "2018-01-02T03:04:05".
    return datetime.datetime.fromisoformat(value.replace("Z", "")).replace(tzinfo=datetime.timezone.utc)


def _token(n: int) -> str:
    return "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(n))


class NodeGroups:
    """The provider's state and operations, independent of gRPC (the servicer below adapts it)."""

    def __init__(self, settings: Settings, linode: LinodeClient, kube: Kube,
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)):
        self.settings = settings
        self.linode = linode
        self.kube = kube
        self.now = now
        self._lock = threading.RLock()
        self._instances: Optional[list[Instance]] = None
        self._disk_mib: dict[str, int] = {}  # instance type -> the plan's disk (MB), as the Linode API says
        self._label = re.compile(rf"^{re.escape(settings.cluster)}-(?P<pool>.+)-(?P<slot>\d+)$")

    # --- state ---------------------------------------------------------------------------

    def _from_api(self, raw: dict) -> Optional[Instance]:
        tags = set(raw.get("tags") or [])
        if self.settings.stack_tag not in tags:  # the API filtered on it; never trust a filter alone
            return None
        match = self._label.match(str(raw.get("label", "")))
        for pool in self.settings.pools:
            if POOL_TAG.format(pool.name) in tags and match and match["pool"] == pool.name:
                return Instance(int(raw["id"]), raw["label"], pool.name, int(match["slot"]), str(raw.get("status", "")),
                                _parse_time(raw.get("created") or "1970-01-01T00:00:00"), pool.gpus_per_node)
        return None  # the stack's other instances (control planes, system and fixed-size workers)

    def reload(self) -> list[Instance]:
        with self._lock:
            found = [i for i in (self._from_api(r) for r in self.linode.list_instances(self.settings.stack_tag)) if i]
            self._instances = found
            return list(found)

    def instances(self, pool: Optional[str] = None) -> list[Instance]:
        with self._lock:
            if self._instances is None:
                self.reload()
            assert self._instances is not None
            return [i for i in self._instances if pool is None or i.pool == pool]

    def target_size(self, pool: str) -> int:
        return len([i for i in self.instances(pool) if i.status not in DELETING])

    def gpus_in_use(self) -> int:
        return sum(i.gpus for i in self.instances() if i.status not in DELETING)

    def disk_mib(self, pool_name: str) -> Optional[int]:
        """The disk of the pool's plan (MB), from the Linode API once per type; None when pools.json carries
        no kubelet reservation to compute ephemeral storage with (a program before it)."""
        pool = self.settings.pool(pool_name)
        if self.settings.ephemeral_storage is None:
            return None
        if pool.instance_type not in self._disk_mib:
            self._disk_mib[pool.instance_type] = int(self.linode.get_type(pool.instance_type)["disk"])
        return self._disk_mib[pool.instance_type]

    # --- scale up ------------------------------------------------------------------------

    def increase(self, pool_name: str, delta: int) -> None:
        pool = self.settings.pool(pool_name)
        with self._lock:
            self.reload()  # never decide on a stale count: a create is billed
            size = self.target_size(pool.name)
            if delta <= 0:
                raise ValueError(f"delta must be positive, got {delta}")
            if size + delta > pool.max_nodes:
                raise ValueError(f"pool {pool.name}: {size} + {delta} nodes would exceed maxNodes {pool.max_nodes}")
            # Every GPU of the stack counts: the fixed pools' (always there) and the autoscaled ones'.
            fixed = self.settings.fixed_gpus
            gpus = fixed + self.gpus_in_use() + delta * pool.gpus_per_node
            if gpus > self.settings.max_gpus:
                raise ValueError(f"pool {pool.name}: {delta} more node(s) would bring the stack to {gpus} GPUs "
                                 f"({fixed} of them in fixed pools), over the ceiling of {self.settings.max_gpus} (maxGpus)")
            used = {i.slot for i in self.instances(pool.name)}
            free = [s for s in range(pool.max_nodes) if s not in used][:delta]
            for slot in free:
                self._create(pool, slot)

    def _create(self, pool: Pool, slot: int) -> None:
        label = f"{self.settings.cluster}-{pool.name}-{slot}"
        body = self.create_request(pool, slot, self._user_data(pool, slot, label))
        try:
            raw = self.linode.create_instance(body)
        except LinodeApiError as err:
            if not err.label_taken:
                raise
            # An earlier attempt (a lost response, a restart) created it: count what exists.
            log.info("instance %s already exists; keeping it", label)
            self.reload()
            return
        inst = self._from_api(raw)
        log.info("created instance %s (%s) for pool %s", label, raw.get("id"), pool.name)
        if inst is not None:
            assert self._instances is not None
            self._instances.append(inst)

    def create_request(self, pool: Pool, slot: int, user_data: str) -> dict:
        s = self.settings
        label = f"{s.cluster}-{pool.name}-{slot}"
        body: dict = {
            "label": label,
            "region": s.region,
            "type": pool.instance_type,
            "image": s.image,
            # Required with an image; nobody logs in with it (cloud-init, no password SSH).
            "root_pass": secrets.token_urlsafe(32),
            "tags": [*s.tags, *pool.tags, s.stack_tag, POOL_TAG.format(pool.name)],
            "private_ip": True,
            "interfaces": [{"purpose": "public"},
                           {"purpose": "vpc", "subnet_id": s.subnet_id, "ipv4": {"vpc": pool.addresses[slot]}}],
            "metadata": {"user_data": user_data},
            "disk_encryption": "enabled" if s.disk_encryption else "disabled",
            "booted": True,
        }
        if s.firewall_id is not None:
            body["firewall_id"] = s.firewall_id
        if s.authorized_keys:
            body["authorized_keys"] = list(s.authorized_keys)
        return body

    def _user_data(self, pool: Pool, slot: int, label: str) -> str:
        """The program's worker boot document, with a bootstrap token minted now for this node."""
        s = self.settings
        token_id, token_secret = _token(6), _token(16)
        expires = (self.now() + datetime.timedelta(seconds=s.join_deadline_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
        secret = render.bootstrap_token_secret(token_id, token_secret, expires)
        secret["stringData"]["description"] = f"gpu-platform node-group provider: join of {label}"
        self.kube.create_secret("kube-system", secret)
        node = render.NodeSpec(name=label, vpc_ip=pool.addresses[slot], labels=dict(pool.labels),
                               taints=[RenderTaint(t.key, t.value, t.effect) for t in pool.taints])
        cluster = render.ClusterSpec(name=s.cluster, kubernetes_minor=s.kubernetes_minor,
                                     control_plane_endpoint=s.control_plane_endpoint, pod_cidr=s.pod_cidr,
                                     service_cidr=s.service_cidr, cert_sans=())
        ca_pem = self.kube.cluster_ca_pem()
        join = render.kubeadm_worker_join_config(cluster, node, render.bootstrap_token(token_id, token_secret),
                                                 render.discovery_hash(ca_pem))
        # The worker asks the API server its version at boot and installs that (render.install_kubernetes_script).
        doc = render.node_user_data("join", node, join, s.kubernetes_minor, gpu=pool.gpus_per_node > 0,
                                    endpoint=s.control_plane_endpoint, cluster_ca_pem=ca_pem)
        return render.encode_user_data(doc)

    # --- scale down ----------------------------------------------------------------------

    def find(self, pool_name: str, provider_id: str, name: str) -> Instance:
        for inst in self.instances():
            if (provider_id and provider_id == inst.provider_id) or (not provider_id and name == inst.label):
                if inst.pool != pool_name:
                    raise LookupError(f"node {name or provider_id} belongs to pool {inst.pool}, not {pool_name}")
                return inst
        raise LookupError(f"node {name or provider_id} is not an instance of pool {pool_name}")

    def delete_nodes(self, pool_name: str, nodes: list[tuple[str, str]]) -> None:
        """nodes: (providerID, name). Refuses the whole call before deleting anything if a node is not
        in the pool, the pool would drop under its minimum, or a node still runs GPU pods (the
        autoscaler drains first; a GPU pod still there means the drain did not finish)."""
        pool = self.settings.pool(pool_name)
        with self._lock:
            self.reload()
            doomed = [self.find(pool.name, pid, name) for pid, name in nodes]
            if self.target_size(pool.name) - len(doomed) < pool.min_nodes:
                raise ValueError(f"pool {pool.name}: deleting {len(doomed)} node(s) would go below minNodes {pool.min_nodes}")
            for inst in doomed:
                busy = [p["metadata"]["name"] for p in self.kube.pods_on_node(inst.label) if _uses_gpu(p)]
                if busy:
                    raise ValueError(f"node {inst.label} still runs GPU pods: {', '.join(sorted(busy))}")
            joined = self.kube.node_names(f"gpu-platform.io/pool={pool.name}")
            for inst in doomed:
                self.linode.delete_instance(inst.id)
                log.info("deleted instance %s (%s) of pool %s%s", inst.label, inst.id, pool.name,
                         "" if inst.label in joined else " (it never registered as a node)")
            gone = {i.id for i in doomed}
            assert self._instances is not None
            self._instances = [i for i in self._instances if i.id not in gone]

    def decrease_target(self, pool_name: str, delta: int) -> None:
        """Drops requested nodes that have not registered yet (never a registered one)."""
        pool = self.settings.pool(pool_name)
        if delta >= 0:
            raise ValueError(f"delta must be negative, got {delta}")
        with self._lock:
            self.reload()
            joined = self.kube.node_names(f"gpu-platform.io/pool={pool.name}")
            pending = sorted((i for i in self.instances(pool.name) if i.label not in joined and i.status not in DELETING),
                             key=lambda i: -i.slot)
            if len(pending) < -delta:
                raise ValueError(f"pool {pool.name}: only {len(pending)} node(s) not yet registered, cannot drop {-delta}")
            for inst in pending[:-delta]:
                self.linode.delete_instance(inst.id)
            self.reload()

    # --- refresh: instances that never joined ----------------------------------------------

    def refresh(self) -> list[str]:
        """Reloads the instances and deletes those that did not register as nodes within the join deadline
        plus the backstop margin. The autoscaler removes such an instance itself first (at
        --max-node-provision-time, the join deadline: it times the scale-up out, backs the group off and calls
        NodeGroupDeleteNodes); this deletion is for when the autoscaler is away, and is late enough that it
        never pre-empts the autoscaler's (a pre-empted autoscaler sees the group at target and never backs off)."""
        removed: list[str] = []
        with self._lock:
            instances = self.reload()
            if not instances:
                return removed
            joined: set[str] = set()
            for pool in self.settings.pools:
                joined |= self.kube.node_names(f"gpu-platform.io/pool={pool.name}")
            s = self.settings
            deadline = datetime.timedelta(seconds=s.join_deadline_seconds + s.join_backstop_seconds)
            for inst in instances:
                if inst.label in joined or inst.status in DELETING:
                    continue
                if self.now() - inst.created > deadline:
                    log.warning("instance %s did not join within %ss (join deadline %ss + backstop %ss) and the "
                                "autoscaler did not remove it: deleting it", inst.label,
                                s.join_deadline_seconds + s.join_backstop_seconds, s.join_deadline_seconds,
                                s.join_backstop_seconds)
                    self.linode.delete_instance(inst.id)
                    removed.append(inst.label)
            if removed:
                self.reload()
        return removed


def _uses_gpu(pod: dict) -> bool:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" for o in owners):
        return False
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            if str((res.get(part) or {}).get(template.GPU_RESOURCE, "0")) not in ("0", ""):
                return True
    return False


# ---------------------------------------------------------------------------------------------
# gRPC adapter
# ---------------------------------------------------------------------------------------------


def make_servicer(groups: NodeGroups, pb2: ModuleType, pb2_grpc: ModuleType, core: ModuleType):
    """The CloudProvider servicer over `groups` (pb2/pb2_grpc/core: the generated modules)."""
    settings = groups.settings

    def group_msg(pool: Pool):
        return pb2.NodeGroup(id=pool.name, minSize=pool.min_nodes, maxSize=pool.max_nodes,
                             debug=f"{pool.name}: {pool.instance_type} x {pool.min_nodes}-{pool.max_nodes} in {settings.region}")

    def pool_or_abort(context, pool_id: str) -> Pool:
        try:
            return settings.pool(pool_id)
        except KeyError:
            raise LookupError(f"no node group {pool_id!r}") from None

    def guarded(fn):
        def wrapper(self, request, context):
            try:
                return fn(self, request, context)
            except ValueError as err:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
            except LookupError as err:
                context.abort(grpc.StatusCode.NOT_FOUND, str(err))
            except Exception as err:  # the API or the cluster failed: the autoscaler retries
                log.exception("%s failed", fn.__name__)
                context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(err).__name__}: {err}")
        wrapper.__name__ = fn.__name__
        return wrapper

    class Servicer(pb2_grpc.CloudProviderServicer):
        @guarded
        def NodeGroups(self, request, context):
            return pb2.NodeGroupsResponse(nodeGroups=[group_msg(p) for p in settings.pools])

        @guarded
        def NodeGroupForNode(self, request, context):
            node = request.node
            for inst in groups.instances():
                if node.providerID == inst.provider_id or (not node.providerID and node.name == inst.label):
                    return pb2.NodeGroupForNodeResponse(nodeGroup=group_msg(settings.pool(inst.pool)))
            return pb2.NodeGroupForNodeResponse(nodeGroup=pb2.NodeGroup(id=""))

        @guarded
        def PricingNodePrice(self, request, context):
            inst = next((i for i in groups.instances() if i.provider_id == request.node.providerID), None)
            if inst is None:
                raise LookupError(f"no instance {request.node.providerID!r}")
            hours = max(0.0, (request.endTimestamp.ToDatetime() - request.startTimestamp.ToDatetime()).total_seconds() / 3600)
            return pb2.PricingNodePriceResponse(price=settings.pool(inst.pool).hourly_price_usd * hours)

        def PricingPodPrice(self, request, context):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "pod pricing is not offered")

        def GPULabel(self, request, context):
            return pb2.GPULabelResponse(label=settings.gpu_label)

        def GetAvailableGPUTypes(self, request, context):
            from google.protobuf import any_pb2

            return pb2.GetAvailableGPUTypesResponse(
                gpuTypes={p.gpu_type: any_pb2.Any() for p in settings.pools})

        def Cleanup(self, request, context):
            return pb2.CleanupResponse()

        @guarded
        def Refresh(self, request, context):
            groups.refresh()
            return pb2.RefreshResponse()

        @guarded
        def NodeGroupTargetSize(self, request, context):
            pool = pool_or_abort(context, request.id)
            return pb2.NodeGroupTargetSizeResponse(targetSize=groups.target_size(pool.name))

        @guarded
        def NodeGroupIncreaseSize(self, request, context):
            pool = pool_or_abort(context, request.id)
            groups.increase(pool.name, request.delta)
            return pb2.NodeGroupIncreaseSizeResponse()

        @guarded
        def NodeGroupDeleteNodes(self, request, context):
            pool = pool_or_abort(context, request.id)
            groups.delete_nodes(pool.name, [(n.providerID, n.name) for n in request.nodes])
            return pb2.NodeGroupDeleteNodesResponse()

        @guarded
        def NodeGroupDecreaseTargetSize(self, request, context):
            pool = pool_or_abort(context, request.id)
            groups.decrease_target(pool.name, request.delta)
            return pb2.NodeGroupDecreaseTargetSizeResponse()

        @guarded
        def NodeGroupNodes(self, request, context):
            pool = pool_or_abort(context, request.id)
            state = pb2.InstanceStatus.InstanceState
            out = []
            for inst in sorted(groups.instances(pool.name), key=lambda i: i.slot):
                st = (state.Value("instanceDeleting") if inst.status in DELETING else
                      state.Value("instanceCreating") if inst.status in CREATING else state.Value("instanceRunning"))
                out.append(pb2.Instance(id=inst.provider_id, status=pb2.InstanceStatus(instanceState=st)))
            return pb2.NodeGroupNodesResponse(instances=out)

        @guarded
        def NodeGroupTemplateNodeInfo(self, request, context):
            pool = pool_or_abort(context, request.id)
            # The plan's disk comes from the Linode API: if it does not answer, neither would the create.
            return pb2.NodeGroupTemplateNodeInfoResponse(
                nodeBytes=template.template_node_bytes(core, settings, pool, groups.disk_mib(pool.name)))

        def NodeGroupGetOptions(self, request, context):
            # The autoscaler's flags (scale-down-unneeded-time from scaleDownGraceMinutes) apply to every group.
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "the autoscaler's global options apply")

    return Servicer()
