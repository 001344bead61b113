"""The node model of a stack, read from what the program really registers (the mocked plan).

Labels and taints come from the rendered node configuration in the plan (kubeadm configs in the
Linode user data, GKE node pool inputs, the EKS node group inputs and the nodeadm NodeConfig in the
GPU launch templates), decoded with the constants the cluster components write them with. To those
the model adds what the cloud itself puts on every node (documented below with sources), and
allocatable per node from `gpu_platform.components.capacity`.

Facts used (also written into ClusterModel.notes so a reader of fit.json sees them):
- GKE adds cloud.google.com/gke-nodepool, gke-accelerator, gke-spot / gke-preemptible,
  gke-gpu-driver-version, machine-family, gke-os-distribution labels (and, as on every cloud node,
  topology.kubernetes.io/zone: a pool's nodes are in the zones of its nodeLocations), and the nvidia.com/gpu=present:
  NoSchedule taint on GPU nodes; its ExtendedResourceToleration admission controller adds the matching
  toleration to pods requesting nvidia.com/gpu (GKE "Run GPUs in Standard node pools", "About GPUs").
  A private cluster's control plane reaches nodes on TCP 443 and 10250 only (GKE's own
  gke-<cluster>-<id>-master firewall rule), plus what our firewall rules from the master CIDR open
  (GKE "Add firewall rules for specific use cases" / private clusters).
- EKS managed node groups label nodes eks.amazonaws.com/nodegroup and eks.amazonaws.com/capacityType;
  every EKS platform version enables ExtendedResourceToleration (EKS User Guide, "View Amazon EKS
  platform versions"); the cluster security group EKS creates allows all traffic between its members
  (EKS "View Amazon EKS security group requirements for clusters": inbound All/All from itself), the
  control plane ENIs carry it, managed nodes get it when their launch template names no security
  group, and our GPU launch templates name it explicitly.
- kubeadm labels control-plane nodes node-role.kubernetes.io/control-plane and
  node.kubernetes.io/exclude-from-external-load-balancers; the API server's default admission plugins do
  not include ExtendedResourceToleration (kube-apiserver --enable-admission-plugins default list).
- Every node: kubernetes.io/os=linux, kubernetes.io/arch=amd64 (kubelet) and
  node.kubernetes.io/instance-type (the cloud controller manager).
"""

from __future__ import annotations

import base64
import binascii
import email
import ipaddress
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Optional

import yaml

from gpu_platform.components.capacity import Allocatable, CapacityError, allocatable
from gpu_platform.components.cluster import GPU_TAINT, POOL_LABEL, SUBNET_LABEL
from gpu_platform.components.linode.render import ROLE_LABEL  # the system pools' label (GKE and EKS set the same key)
from gpu_platform.preflight.fit.model import ClusterModel, NetworkModel, NodeGroup

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.preflight.runner import Plan, PlannedResource

CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
KUBEADM_CONTROL_PLANE_LABELS = {"node-role.kubernetes.io/control-plane": "",
                                "node.kubernetes.io/exclude-from-external-load-balancers": ""}
GKE_MASTER_PORTS = frozenset({443, 10250})
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Per cloud, node agents no rendered release shows (installed by the cloud or as managed add-ons).
_CLOUD_AGENTS = {
    "gcp": "GKE's fluentbit, gke-metadata-server, anetd/Dataplane V2, pdcsi-node, GPU driver installer",
    "aws": "",  # EKS's managed add-ons (aws-node, kube-proxy, CoreDNS, EBS CSI) are counted: data/eks_addon_pods.py
    "linode": "kube-proxy and, unless its chart is rendered, the CNI",
    "kubernetes": "whatever the cluster runs besides the platform (its CNI, kube-proxy, CSI, the GPU operator, "
                  "other teams' DaemonSets)",
}


ZONE_LABEL = "topology.kubernetes.io/zone"


class ModelError(ValueError):
    """The plan lacks what the model needs (a node group the config promises, an unreadable node config)."""

    def __init__(self, message: str):
        super().__init__(f"cluster fit node model: {message}")


def _well_known(instance_type: str) -> dict[str, str]:
    return {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": instance_type}


def _num(v: Any, default: int = 0) -> int:
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


def _add_taint(taints: list[dict], taint: dict) -> None:
    key = (taint.get("key"), taint.get("effect"))
    if not any((t.get("key"), t.get("effect")) == key for t in taints):
        taints.append(taint)


def _min_allocatable(items: Iterable[Allocatable]) -> Allocatable:
    items = list(items)
    return Allocatable(min(a.cpu_millis for a in items), min(a.memory_bytes for a in items),
                       min(a.gpus for a in items), min(a.pods for a in items))


def _role(labels: dict[str, str], taints: list[dict]) -> str:
    if any(t.get("key") == CONTROL_PLANE_TAINT["key"] for t in taints) or "node-role.kubernetes.io/control-plane" in labels:
        return "control-plane"
    if POOL_LABEL in labels or any(t.get("key") == GPU_TAINT.key for t in taints):
        return "gpu"
    return "system"


# ---------------------------------------------------------------------------------------------
# Linode (kubeadm): the kubeadm configuration inside each instance's user data
# ---------------------------------------------------------------------------------------------


def _kubeadm_docs(instance: "PlannedResource") -> Optional[list[dict]]:
    from gpu_platform.components.linode.render import KUBEADM_CONFIG_PATH, decode_user_data

    metas = instance.plain_inputs.get("metadatas") or []
    data = metas[0].get("userData") if metas and isinstance(metas[0], dict) else None
    if not isinstance(data, str):
        return None
    try:
        cloud_config = yaml.load(decode_user_data(data), Loader=_Loader)
    except (binascii.Error, OSError, EOFError, UnicodeDecodeError, yaml.YAMLError):
        return None
    for f in (cloud_config or {}).get("write_files", []):
        if f.get("path") == KUBEADM_CONFIG_PATH:
            return [d for d in yaml.load_all(f["content"], Loader=_Loader) if isinstance(d, dict)]
    return None


def _linode_groups(cfg: "StackConfig", plan: "Plan", notes: list[str]) -> list[NodeGroup]:
    groups: "OrderedDict[tuple, dict]" = OrderedDict()
    for inst in plan.by_type("linode:index/instance:Instance"):
        docs = _kubeadm_docs(inst)
        if docs is None:
            raise ModelError(f"{inst.name}: no readable kubeadm configuration in the instance's user data")
        reg = next((d["nodeRegistration"] for d in docs if "nodeRegistration" in d), {})
        control_plane = any(d.get("kind") == "InitConfiguration" or "controlPlane" in d for d in docs)
        labels: dict[str, str] = {}
        for arg in reg.get("kubeletExtraArgs") or []:
            if arg.get("name") == "node-labels" and arg.get("value"):
                labels.update(kv.split("=", 1) for kv in arg["value"].split(","))
        taints = [dict(t) for t in reg.get("taints") or []]
        if control_plane:
            labels.update(KUBEADM_CONTROL_PLANE_LABELS)
        itype = inst.plain_inputs.get("type")
        key = (itype, tuple(sorted(labels.items())), tuple(sorted((t.get("key"), t.get("value"), t.get("effect")) for t in taints)))
        entry = groups.setdefault(key, {"type": itype, "labels": labels, "taints": taints, "count": 0})
        entry["count"] += 1
    out = []
    pool_capacity = {p.name: p.capacity for p in cfg.gpu_pools}
    for entry in groups.values():
        labels, taints, itype = entry["labels"], entry["taints"], entry["type"]
        role = _role(labels, taints)
        name = {"control-plane": "control-plane", "system": labels.get(ROLE_LABEL, "workers")}.get(role) or labels.get(POOL_LABEL, itype)
        out.append(NodeGroup(
            name=name, role=role, min_nodes=entry["count"], max_nodes=entry["count"],
            labels={**_well_known(itype), **labels}, taints=taints, allocatable=allocatable("linode", itype),
            instance_type=itype, capacity=pool_capacity.get(labels.get(POOL_LABEL, ""), "on-demand")))
    notes.append("linode: node groups, labels and taints decoded from each instance's kubeadm config (user data); "
                 "fixed sizes (no autoscaler): min = max = instances in the plan")
    scaled = _linode_autoscaled_groups(plan)
    if scaled:
        notes.append("linode: autoscaled GPU pools (" + ", ".join(g.name for g in scaled) + ") from the node-group "
                     "provider's pool definition (ConfigMap kube-system/linode-node-groups, pools.json): min..max nodes, "
                     "the labels and taints its nodes register with")
        for g in scaled:
            if g.capped:
                notes.append(f"linode: GPU pool {g.name}: {g.capped}")
    return out + scaled


def _linode_autoscaled_groups(plan: "Plan") -> list[NodeGroup]:
    """Pools the node-group provider scales (gpu_platform/components/linode/node_groups.py): they have no
    instance in the plan, only their definition. Without the provider's Deployment in the plan nothing
    creates their nodes: such a pool stays at minNodes (max_nodes = min_nodes, `capped` says why)."""
    import json

    from gpu_platform.components.linode.node_groups import NAME, NAMESPACE

    provider = any((d.plain_inputs.get("metadata") or {}).get("name") == NAME
                   and (d.plain_inputs.get("metadata") or {}).get("namespace") == NAMESPACE
                   for d in plan.by_type("kubernetes:apps/v1:Deployment"))
    out = []
    for cm in plan.by_type("kubernetes:core/v1:ConfigMap"):
        meta = cm.plain_inputs.get("metadata") or {}
        if meta.get("name") != NAME or meta.get("namespace") != NAMESPACE:
            continue
        raw = (cm.plain_inputs.get("data") or {}).get("pools.json")
        if not isinstance(raw, str):
            raise ModelError(f"{cm.name}: pools.json is not known at plan time")
        for pool in json.loads(raw)["pools"]:
            itype = pool["instanceType"]
            lo, hi = int(pool["minNodes"]), int(pool["maxNodes"])
            capped = "" if provider else (
                f"no node-group provider in the plan (Deployment {NAMESPACE}/{NAME}): nothing creates its nodes, "
                f"so it stays at minNodes {lo} of maxNodes {hi}")
            out.append(NodeGroup(
                name=pool["name"], role="gpu", min_nodes=lo, max_nodes=hi if provider else lo,
                labels={**_well_known(itype), **pool["labels"]}, taints=[dict(t) for t in pool["taints"]],
                allocatable=allocatable("linode", itype), instance_type=itype, capacity="on-demand", capped=capped))
    return out


def _linode_ports(cfg: "StackConfig", plan: "Plan", notes: list[str]) -> Optional[frozenset[int]]:
    """Ports the control-plane nodes may open on other nodes over the VPC, per the node Cloud Firewall."""
    subnet = ipaddress.ip_network(cfg.linode.subnet_cidr) if cfg.linode else None
    firewalls = plan.by_type("linode:index/firewall:Firewall")
    if subnet is None or not firewalls:
        notes.append("linode: no node firewall in the plan: every node port is reachable")
        return None
    ports: set[int] = set()
    for fw in firewalls:
        inputs = fw.plain_inputs
        if str(inputs.get("inboundPolicy", "ACCEPT")).upper() == "ACCEPT":
            notes.append(f"linode: firewall {fw.name} accepts inbound by default: every node port is reachable")
            return None
        for rule in inputs.get("inbounds") or []:
            if str(rule.get("action", "")).upper() != "ACCEPT" or str(rule.get("protocol", "")).upper() != "TCP":
                continue
            if not any(subnet.subnet_of(ipaddress.ip_network(c)) for c in rule.get("ipv4s") or []
                       if ipaddress.ip_network(c).version == 4):
                continue
            if not rule.get("ports"):
                notes.append(f"linode: firewall {fw.name} rule {rule.get('label')} accepts all TCP from the VPC "
                             f"subnet {subnet}: the control planes reach every node port")
                return None
            ports |= _port_set(str(rule["ports"]).split(","))
    notes.append(f"linode: control planes reach node TCP ports {sorted(ports)} over the VPC (node firewall)")
    return frozenset(ports)


# ---------------------------------------------------------------------------------------------
# GKE
# ---------------------------------------------------------------------------------------------


def _port_set(specs: Iterable[str]) -> set[int]:
    out: set[int] = set()
    for s in specs:
        s = str(s).strip()
        if not s:
            continue
        if "-" in s:
            lo, hi = s.split("-", 1)
            out.update(range(int(lo), int(hi) + 1))
        else:
            out.add(int(s))
    return out


def _gke_zonal_sizes(inputs: dict) -> list[tuple[Optional[str], int, int]]:
    """(zone, min, max) of a node pool's nodes per zone of its node locations.

    GKE creates a pool's nodes in every zone of its `nodeLocations`, and each node carries its zone in
    topology.kubernetes.io/zone (GKE "About cluster configuration choices", regional clusters: a node
    pool's nodes are replicated to each of its node locations). A pod held to some zones (a notebook whose
    home is a zonal persistent disk, components/platform/notebooks.py home_zones) can only land on the
    pool's nodes there, so the model has one group per pool and zone, as for EKS's zonal groups.
    Sizes: per-zone limits (minNodeCount/maxNodeCount, nodeCount) are each zone's own; total limits
    (totalMinNodeCount/totalMaxNodeCount, what the platform sets) are split over the zones so that the
    groups add up to the pool's totals (config/names.zonal_groups: the first zones get the remainder), the
    spread of the BALANCED location policy. Under ANY (Spot and preemptible pools) the autoscaler may put
    more of the total in one zone than the split shows."""
    from gpu_platform.config.names import zonal_groups

    zones = [str(z) for z in inputs.get("nodeLocations") or []]
    auto = inputs.get("autoscaling") or {}
    if "totalMaxNodeCount" in auto:
        lo, hi = _num(auto.get("totalMinNodeCount")), _num(auto.get("totalMaxNodeCount"))
        if not zones:
            return [(None, lo, hi)]
        return list(zonal_groups(lo, hi, zones)) if hi > 0 else [(zones[0], 0, 0)]
    fixed = _num(inputs.get("nodeCount", inputs.get("initialNodeCount", 1)), 1)
    lo = _num(auto.get("minNodeCount"), fixed) if auto else fixed
    hi = _num(auto.get("maxNodeCount"), fixed) if auto else fixed
    return [(z, lo, hi) for z in zones] if zones else [(None, lo, hi)]


def _gke_groups(cfg: "StackConfig", plan: "Plan", notes: list[str]) -> list[NodeGroup]:
    from gpu_platform.components.gcp.nodepool import GKE_TAINT_EFFECTS

    effect = {v: k for k, v in GKE_TAINT_EFFECTS.items()}
    out = []
    for pool in plan.by_type("gcp:container/nodePool:NodePool"):
        i = pool.plain_inputs
        nc = i.get("nodeConfig") or {}
        itype = nc.get("machineType")
        labels = {**_well_known(itype), **(nc.get("labels") or {})}
        labels["cloud.google.com/gke-nodepool"] = i.get("name") or pool.name
        labels["cloud.google.com/machine-family"] = str(itype).split("-")[0]
        labels["cloud.google.com/gke-os-distribution"] = "cos" if str(nc.get("imageType", "")).startswith("COS") else "ubuntu"
        capacity = "on-demand"
        if nc.get("spot"):
            labels["cloud.google.com/gke-spot"] = "true"
            capacity = "spot"
        if nc.get("preemptible"):
            labels["cloud.google.com/gke-preemptible"] = "true"
            capacity = "preemptible"
        taints = [{"key": t["key"], "value": t.get("value", ""), "effect": effect.get(t["effect"], t["effect"])}
                  for t in nc.get("taints") or []]
        accels = nc.get("guestAccelerators") or []
        alloc = allocatable("gcp", itype)
        if accels:
            labels["cloud.google.com/gke-accelerator"] = accels[0]["type"]
            driver = (accels[0].get("gpuDriverInstallationConfig") or {}).get("gpuDriverVersion")
            if driver and driver != "INSTALLATION_DISABLED":
                labels["cloud.google.com/gke-gpu-driver-version"] = str(driver).lower()
            elif driver == "INSTALLATION_DISABLED":
                # No driver from GKE (and none the platform installs): GKE's device plugin advertises no
                # nvidia.com/gpu until a driver is loaded, so the nodes have no GPU to schedule on.
                alloc = replace(alloc, gpus=0)
                notes.append(f"gcp: node pool {i.get('name') or pool.name} has no GPU driver (gpuDriverVersion "
                             f"{driver}): its nodes advertise no nvidia.com/gpu")
            _add_taint(taints, GPU_TAINT.as_k8s())
        for zone, lo, hi in _gke_zonal_sizes(i):
            zonal = {**labels, ZONE_LABEL: zone} if zone else dict(labels)
            out.append(NodeGroup(name=labels["cloud.google.com/gke-nodepool"], role=_role(labels, taints), min_nodes=lo,
                                 max_nodes=hi, labels=zonal, taints=[dict(t) for t in taints],
                                 allocatable=alloc, instance_type=itype, capacity=capacity))
    notes.append("gcp: node pools from the plan's NodePool inputs plus GKE's own labels (gke-nodepool, gke-accelerator, "
                 "gke-spot/gke-preemptible, topology.kubernetes.io/zone) and GPU taint; one group per pool and zone of its "
                 "nodeLocations, total limits split over the zones as GKE's BALANCED policy spreads them (under ANY, "
                 "Spot and preemptible pools, one zone may get more); ExtendedResourceToleration on (GPU pods get the "
                 "toleration)")
    return out


def _gke_ports(plan: "Plan", notes: list[str]) -> Optional[frozenset[int]]:
    clusters = plan.by_type("gcp:container/cluster:Cluster")
    if not clusters:
        raise ModelError("no GKE cluster in the plan")
    pcc = clusters[0].plain_inputs.get("privateClusterConfig") or {}
    if not pcc.get("enablePrivateNodes"):
        notes.append("gcp: nodes are not private: GKE opens the control plane to every node port")
        return None
    master = ipaddress.ip_network(pcc["masterIpv4CidrBlock"])
    node_tags: set[str] = set()
    for pool in plan.by_type("gcp:container/nodePool:NodePool"):
        node_tags.update((pool.plain_inputs.get("nodeConfig") or {}).get("tags") or [])
    ports = set(GKE_MASTER_PORTS)
    opened = []
    for fw in plan.by_type("gcp:compute/firewall:Firewall"):
        i = fw.plain_inputs
        if str(i.get("direction", "INGRESS")).upper() != "INGRESS" or i.get("disabled"):
            continue
        if not any(master.subnet_of(ipaddress.ip_network(r)) for r in i.get("sourceRanges") or []):
            continue
        targets = set(i.get("targetTags") or [])
        if targets and not targets & node_tags:
            continue
        for allow in i.get("allows") or []:
            if str(allow.get("protocol")).lower() not in ("tcp", "all", "6"):
                continue
            if not allow.get("ports"):
                notes.append(f"gcp: firewall {i.get('name', fw.name)} opens every TCP port to the control plane")
                return None
            found = _port_set(allow["ports"])
            ports |= found
            opened.append(f"{i.get('name', fw.name)}: {','.join(str(p) for p in allow['ports'])}")
    notes.append(f"gcp: private cluster, master CIDR {master}: control plane reaches nodes on TCP 443, 10250 (GKE's rule)"
                 + (f" and {'; '.join(opened)} (our firewall rules)" if opened else ""))
    return frozenset(ports)


# ---------------------------------------------------------------------------------------------
# EKS
# ---------------------------------------------------------------------------------------------


def _nodeadm_config(user_data: str) -> Optional[dict]:
    try:
        text = base64.b64decode(user_data).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    msg = email.message_from_string(text)
    for part in msg.walk() if msg.is_multipart() else [msg]:
        if part.get_content_type() == "application/node.eks.aws":
            doc = yaml.safe_load(part.get_payload())
            return doc if isinstance(doc, dict) else None
    return None


def _eks_groups(cfg: "StackConfig", plan: "Plan", notes: list[str]) -> list[NodeGroup]:
    effect = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}
    out = []
    for ng in plan.by_type("aws:eks/nodeGroup:NodeGroup"):
        i = ng.plain_inputs
        types = list(i.get("instanceTypes") or [])
        sc = i.get("scalingConfig") or {}
        labels = {**_well_known(types[0]), **(i.get("labels") or {})}
        name = i.get("nodeGroupName") or ng.name
        labels["eks.amazonaws.com/nodegroup"] = name
        cap = str(i.get("capacityType", "ON_DEMAND"))
        labels["eks.amazonaws.com/capacityType"] = cap
        taints = [{"key": t["key"], "value": t.get("value", ""), "effect": effect.get(t["effect"], t["effect"])}
                  for t in i.get("taints") or []]
        alloc = _min_allocatable(allocatable("aws", t, managed_node_group=True) for t in types)
        # One system node group per zone (aws/eks.py): its nodes carry the zone, as EC2 labels them; in an
        # existing VPC the group is one subnet, whose label (SUBNET_LABEL) it carries instead (zone unknown).
        zone = (i.get("tags") or {}).get("node-group-zone")
        if zone and SUBNET_LABEL not in labels:
            labels[ZONE_LABEL] = zone
        out.append(NodeGroup(name=labels.get(ROLE_LABEL, name), role=_role(labels, taints), min_nodes=_num(sc.get("minSize")),
                             max_nodes=_num(sc.get("maxSize")), labels=labels, taints=taints, allocatable=alloc,
                             instance_type="|".join(types), capacity="spot" if cap == "SPOT" else "on-demand"))
    templates = {lt.parent: lt for lt in plan.by_type("aws:ec2/launchTemplate:LaunchTemplate")}
    for asg in plan.by_type("aws:autoscaling/group:Group"):
        i = asg.plain_inputs
        lt = templates.get(asg.parent)
        node_config = _nodeadm_config(lt.plain_inputs.get("userData", "")) if lt is not None else None
        if node_config is None:
            raise ModelError(f"{asg.name}: no nodeadm NodeConfig in its launch template's user data")
        kubelet = (node_config.get("spec") or {}).get("kubelet") or {}
        labels: dict[str, str] = {}
        for flag in kubelet.get("flags") or []:
            if flag.startswith("--node-labels="):
                labels.update(kv.split("=", 1) for kv in flag.split("=", 1)[1].split(","))
        taints = [dict(t) for t in (kubelet.get("config") or {}).get("registerWithTaints") or []]
        mip = i.get("mixedInstancesPolicy") or {}
        types = [o["instanceType"] for o in (mip.get("launchTemplate") or {}).get("overrides") or [] if o.get("instanceType")]
        if not types and (lt.plain_inputs.get("instanceType")):
            types = [lt.plain_inputs["instanceType"]]
        dist = mip.get("instancesDistribution") or {}
        on_demand = _num(dist.get("onDemandPercentageAboveBaseCapacity"), 100) >= 100
        alloc = _min_allocatable(allocatable("aws", t) for t in types)
        labels = {**_well_known(types[0]), **labels}
        # One group per pool and zone (config/names.zonal_groups): its nodes carry the zone, as EC2 labels them.
        zone = next((t.get("value") for t in i.get("tags") or [] if t.get("key") == "gpu-pool-zone"), None)
        if zone and SUBNET_LABEL not in labels:
            labels[ZONE_LABEL] = zone
        out.append(NodeGroup(name=labels.get(POOL_LABEL, asg.name), role=_role(labels, taints),
                             min_nodes=_num(i.get("minSize")), max_nodes=_num(i.get("maxSize")), labels=labels,
                             taints=taints, allocatable=alloc, instance_type="|".join(types),
                             capacity="on-demand" if on_demand else "spot"))
        if len(types) > 1:
            notes.append(f"aws: GPU group {labels.get(POOL_LABEL, asg.name)} mixes {', '.join(types)}: allocatable is the "
                         "smallest of them per resource (the ASG may launch any)")
    notes.append("aws: managed node group labels from its inputs plus eks.amazonaws.com/nodegroup and capacityType; GPU "
                 "groups' labels/taints decoded from the nodeadm NodeConfig in their launch templates; "
                 "ExtendedResourceToleration on")
    return out


def _eks_ports(plan: "Plan", notes: list[str]) -> Optional[frozenset[int]]:
    """Every node port, if every node carries the cluster security group (inbound All from itself, which
    the control plane ENIs carry): managed nodes get it when their launch template names no security
    group; our GPU launch templates must name it."""
    clusters = plan.by_type("aws:eks/cluster:Cluster")
    sg = ((clusters[0].outputs.get("vpcConfig") or {}).get("clusterSecurityGroupId")) if clusters else None
    for lt in plan.by_type("aws:ec2/launchTemplate:LaunchTemplate"):
        groups = lt.plain_inputs.get("vpcSecurityGroupIds") or [
            g for ni in lt.plain_inputs.get("networkInterfaces") or [] for g in ni.get("securityGroups") or []]
        if groups and sg and sg not in groups:
            notes.append(f"aws: launch template {lt.name} names security groups {groups} without the cluster security "
                         f"group {sg}: the control plane is not known to reach any port on those nodes")
            return frozenset()
    notes.append("aws: every node carries the EKS cluster security group (inbound All from itself, the control plane "
                 "ENIs carry it): the control plane reaches every node port")
    return None


# ---------------------------------------------------------------------------------------------
# Network: what enforces NetworkPolicies, where pods, nodes and the API server live
# ---------------------------------------------------------------------------------------------

# The private IPv4 ranges (RFC 1918): where an existing VPC of unknown CIDR lies.
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
# kubeadm's API server port on the Linode control planes (components/linode/render.py localAPIEndpoint).
KUBEADM_API_PORT = 6443


def _linode_network(cfg: "StackConfig") -> NetworkModel:
    """Pods get addresses from linode.podCidr (Cilium's cluster-pool IPAM or Calico's pool), nodes and the
    control planes from the VPC subnet; the API server is a static pod on the control-plane nodes (host
    network), reached at their VPC address on 6443 (the kubeadm advertiseAddress)."""
    section = cfg.linode
    cni = section.cni
    return NetworkModel(
        dataplane=cni, description=f"{'Cilium' if cni == 'cilium' else 'Calico'} (linode.cni), installed by the "
                                   "program's own chart (rendered)",
        pod_cidrs=(section.pod_cidr,), node_cidrs=(section.subnet_cidr,), apiserver_cidrs=(section.subnet_cidr,),
        apiserver_port=KUBEADM_API_PORT, apiserver_on_nodes=True)


def _gke_network(cfg: "StackConfig", plan: "Plan") -> NetworkModel:
    """GKE Dataplane V2 (datapathProvider ADVANCED_DATAPATH) enforces NetworkPolicies with Cilium (GKE "About
    GKE Dataplane V2": "GKE Dataplane V2 is implemented using Cilium"); the legacy datapath with the
    networkPolicy add-on enforces them with Calico. A private cluster's pods reach the control plane at its
    private endpoint in the master CIDR (outside the cluster's nodes); otherwise at a public address."""
    cluster = plan.by_type("gcp:container/cluster:Cluster")
    inputs = cluster[0].plain_inputs if cluster else {}
    section = cfg.gcp
    if inputs.get("datapathProvider") == "ADVANCED_DATAPATH":
        dataplane, desc = "gke-dataplane-v2", "GKE Dataplane V2 (datapathProvider ADVANCED_DATAPATH)"
    elif (inputs.get("networkPolicy") or {}).get("enabled"):
        dataplane, desc = "calico", "GKE's legacy datapath with the networkPolicy add-on: Calico"
    else:
        dataplane, desc = "none", "GKE's legacy datapath without the networkPolicy add-on: NetworkPolicies are not enforced"
    pcc = inputs.get("privateClusterConfig") or {}
    master = pcc.get("masterIpv4CidrBlock") if pcc.get("enablePrivateNodes") else None
    return NetworkModel(dataplane=dataplane, description=desc, pod_cidrs=(section.pods_cidr,),
                        node_cidrs=(section.network_cidr,), apiserver_cidrs=(master,) if master else PUBLIC_RANGES,
                        apiserver_port=443, apiserver_on_nodes=False)


def _eks_network(cfg: "StackConfig", plan: "Plan") -> NetworkModel:
    """The VPC CNI gives pods addresses of the VPC's subnets, like the nodes; the EKS control plane's ENIs sit
    in the same subnets (not nodes). NetworkPolicies are enforced by the VPC CNI's network policy agent when
    its add-on configuration sets enableNetworkPolicy (EKS "Limit pod traffic with Kubernetes network
    policies"); it matches ipBlock against any address, pods' included (upstream semantics)."""
    enforced = False
    for addon in plan.by_type("aws:eks/addon:Addon"):
        if addon.plain_inputs.get("addonName") != "vpc-cni":
            continue
        try:
            values = yaml.load(str(addon.plain_inputs.get("configurationValues") or "{}"), Loader=_Loader) or {}
        except yaml.YAMLError:
            values = {}
        enforced = isinstance(values, dict) and str(values.get("enableNetworkPolicy", "")).lower() == "true"
    section = cfg.aws
    vpc = (section.effective_vpc_cidr,) if section.new_vpc else PRIVATE_RANGES
    return NetworkModel(
        dataplane="aws-vpc-cni" if enforced else "none",
        description=("the VPC CNI's network policy agent (vpc-cni add-on, enableNetworkPolicy)" if enforced else
                     "the vpc-cni add-on without enableNetworkPolicy: NetworkPolicies are not enforced"),
        pod_cidrs=vpc, node_cidrs=vpc, apiserver_cidrs=vpc, apiserver_port=443, apiserver_on_nodes=False)


def _public_ranges() -> tuple[str, ...]:
    """Every IPv4 address outside the private, shared, link-local, loopback, multicast and reserved ranges:
    where an address on the internet (a bucket's endpoint, a public API endpoint) may be."""
    special = [ipaddress.ip_network(n) for n in (*PRIVATE_RANGES, "0.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8",
                                                 "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4")]
    out = [ipaddress.ip_network("0.0.0.0/0")]
    for sp in special:
        nxt = []
        for n in out:
            if n.subnet_of(sp):
                continue
            nxt.extend(n.address_exclude(sp) if sp.subnet_of(n) else [n])
        out = nxt
    return tuple(str(n) for n in sorted(out))


PUBLIC_RANGES = _public_ranges()


def network_model(cfg: "StackConfig", plan: "Plan") -> Optional[NetworkModel]:
    """None where the config has no section for its cloud (a model built for a test of the nodes alone)."""
    if getattr(cfg, cfg.cloud, None) is None:
        return None
    if cfg.cloud == "linode":
        return _linode_network(cfg)
    if cfg.cloud == "gcp":
        return _gke_network(cfg, plan)
    if cfg.cloud == "aws":
        return _eks_network(cfg, plan)
    if cfg.cloud == "kubernetes":
        return _kubernetes_network(cfg)
    return None


_CNI_NAMES = {"cilium": "Cilium", "calico": "Calico", "other-upstream": "a CNI with upstream NetworkPolicy semantics",
              "none": "no policy engine"}


def _kubernetes_network(cfg: "StackConfig") -> Optional[NetworkModel]:
    """A cluster the stack does not create: its network as the stack file states it (kubernetes.network, required by
    config/checks/kubernetes.py). The API server's endpoints are on the nodes (kubeadm, k3s, RKE2, Talos: reached at
    the control-plane nodes' addresses) or outside them (a managed control plane, at the stated addresses)."""
    net = cfg.kubernetes.network if cfg.kubernetes else None
    if net is None:
        return None
    where = "as the stack file states it (kubernetes.network)"
    if net.cni == "none":
        return NetworkModel(dataplane="none", description=f"kubernetes.network.cni none, {where}: NetworkPolicies are "
                                                          "not enforced", pod_cidrs=tuple(net.pod_cidrs),
                            node_cidrs=tuple(net.node_cidrs), apiserver_cidrs=(), apiserver_port=443,
                            apiserver_on_nodes=False)
    api = net.api_server
    assert api is not None, "validated by config/checks/kubernetes.py"
    cidrs = tuple(api.cidrs) or (tuple(net.node_cidrs) if api.on_nodes else ())
    cilium = net.cilium
    return NetworkModel(
        dataplane=net.cni, description=f"{_CNI_NAMES[net.cni]} (kubernetes.network.cni {net.cni}), {where}",
        pod_cidrs=tuple(net.pod_cidrs), node_cidrs=tuple(net.node_cidrs), apiserver_cidrs=cidrs,
        apiserver_port=api.port, apiserver_on_nodes=api.on_nodes,
        cilium_cidr_match_mode=(tuple(cilium.policy_cidr_match_mode) if cilium else ()) if net.cni == "cilium" else None,
        cilium_enable_policy=(cilium.enable_policy if cilium else "default") if net.cni == "cilium" else None)


# ---------------------------------------------------------------------------------------------
# A cluster the stack does not create (cloud kubernetes): the node groups the stack describes
# ---------------------------------------------------------------------------------------------


def _kubernetes_groups(cfg: "StackConfig", plan: "Plan", notes: list[str]) -> list[NodeGroup]:
    """From the node-groups ConfigMap the program registers (gpu_platform/components/kubernetes/cluster.py): the
    labels and taints the stack says the nodes carry, allocatable as stated or the kubelet's defaults. A pool in
    several zones is one group per zone, its sizes split as config/names.zonal_groups splits an EKS pool (where the
    nodes really are is the cluster's autoscaler's choice: the split keeps the totals)."""
    import json

    from gpu_platform.components.kubernetes.cluster import NAMESPACE, NODE_GROUPS, NODE_GROUPS_KEY
    from gpu_platform.config.derived import stack_catalog
    from gpu_platform.config.names import zonal_groups

    catalog = stack_catalog(cfg)
    docs = [cm for cm in plan.by_type("kubernetes:core/v1:ConfigMap")
            if (cm.plain_inputs.get("metadata") or {}).get("name") == NODE_GROUPS
            and (cm.plain_inputs.get("metadata") or {}).get("namespace") == NAMESPACE]
    if len(docs) != 1:
        raise ModelError(f"kubernetes: {len(docs)} ConfigMaps {NAMESPACE}/{NODE_GROUPS} in the plan, expected one")
    raw = (docs[0].plain_inputs.get("data") or {}).get(NODE_GROUPS_KEY)
    if not isinstance(raw, str):
        raise ModelError(f"{docs[0].name}: {NODE_GROUPS_KEY} is not known at plan time")
    out = []
    stated = []
    for g in json.loads(raw)["nodeGroups"]:
        itype = g["instanceType"]
        alloc = allocatable("kubernetes", itype, catalog)
        if g.get("allocatable"):
            stated.append(g["name"])
        labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **g["labels"]}
        taints = [dict(t) for t in g["taints"]]
        zones = g.get("zones") or []
        for zone, lo, hi in (zonal_groups(int(g["minNodes"]), int(g["maxNodes"]), zones) if zones
                             else [(None, int(g["minNodes"]), int(g["maxNodes"]))]):
            out.append(NodeGroup(name=g["name"], role=g["role"], min_nodes=lo, max_nodes=hi,
                                 labels={**labels, **({ZONE_LABEL: zone} if zone else {})}, taints=taints,
                                 allocatable=alloc, instance_type=itype, capacity=g["capacity"]))
    notes.append(f"kubernetes: node groups as the stack describes them (ConfigMap {NAMESPACE}/{NODE_GROUPS}): the nodes "
                 "must carry these labels and taints (docs/quickstart-kubernetes.md); allocatable "
                 + (f"as stated for {', '.join(stated)}, " if stated else "")
                 + "otherwise the kubelet's defaults (no reservation but the 100Mi eviction threshold: an upper bound)")
    notes.append("kubernetes: whether the control plane reaches webhooks on the nodes is the cluster's own business: "
                 "assumed it reaches every port; ExtendedResourceToleration assumed off (GPU pods carry their tolerations)")
    notes.extend(shared_cluster_notes(cfg))
    return out


def shared_cluster_notes(cfg: "StackConfig") -> list[str]:
    """What a cluster the stack does not create leaves to its owner, as fit notes: GPU pods outside the platform's
    queue namespaces (the GPU pod policy judges only those there), and, with a preinstalled device plugin, whether a
    pod sees only the GPUs it was given (components/cluster.py DEVICE_LIST_STRATEGY)."""
    from gpu_platform.components.cluster import DEVICE_LIST_STRATEGY, GPU_TAINT, TOOLKIT_ISOLATION_SETTINGS
    from gpu_platform.components.platform.queue import QUEUE_NAMESPACE_LABEL, QUEUE_NAMESPACE_VALUE

    section = cfg.kubernetes
    assert section is not None
    gpu_taint = f"{GPU_TAINT.key}={GPU_TAINT.value}:{GPU_TAINT.effect}"
    notes = [f"kubernetes: GPU pods outside the platform's queue namespaces (label {QUEUE_NAMESPACE_LABEL}="
             f"{QUEUE_NAMESPACE_VALUE}) are other tenants' and not judged by the GPU pod policy: they are outside Kueue's "
             "accounting, so the GPU node groups must be the platform's alone (a taint only the platform's pods "
             "tolerate; not modelled here: fit places only the platform's pods)"]
    bare = [p.name for p in cfg.gpu_pools if not section.pool(p.name).taints]
    if bare:
        notes.append(f"kubernetes: GPU pool(s) {', '.join(bare)} carry only the taint {gpu_taint}, which other GPU pods "
                     f"often tolerate (the GPU operator's own pods; on EKS and GKE every pod asking for {GPU_TAINT.key}, "
                     "by ExtendedResourceToleration): such a pod can take a GPU Kueue counts free. Add a taint only the "
                     "platform tolerates in kubernetes.pools.<pool>.taints (e.g. gpu-platform.io/reserved=true:NoSchedule) "
                     "and on the nodes")
    if section.gpu_device_plugin == "preinstalled":
        toolkit = ", ".join(f"{k}={v}" for k, v in TOOLKIT_ISOLATION_SETTINGS)
        notes.append(f"kubernetes: gpuDevicePlugin preinstalled: a pod sees only the GPUs it was given only if the "
                     f"cluster's device plugin runs with DEVICE_LIST_STRATEGY={DEVICE_LIST_STRATEGY} and the nodes' "
                     f"container toolkit has {toolkit} (/etc/nvidia-container-runtime/config.toml); with the defaults "
                     "(envvar) a 1-GPU pod that sets NVIDIA_VISIBLE_DEVICES=all sees every GPU of its node. Not visible "
                     "in the plan: check the GPU operator's settings (docs/quickstart-kubernetes.md)")
    return notes


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def cluster_model(cfg: "StackConfig", plan: "Plan") -> ClusterModel:
    notes: list[str] = []
    try:
        if cfg.cloud == "linode":
            groups = _linode_groups(cfg, plan, notes)
            ports = _linode_ports(cfg, plan, notes)
            ert = False
        elif cfg.cloud == "gcp":
            groups = _gke_groups(cfg, plan, notes)
            ports = _gke_ports(plan, notes)
            ert = True
        elif cfg.cloud == "aws":
            groups = _eks_groups(cfg, plan, notes)
            ports = _eks_ports(plan, notes)
            ert = True
        elif cfg.cloud == "kubernetes":
            groups = _kubernetes_groups(cfg, plan, notes)
            ports = None
            ert = False
        else:
            raise ModelError(f"unknown cloud {cfg.cloud!r}")
    except CapacityError as exc:
        raise ModelError(str(exc)) from None
    if not groups:
        raise ModelError(f"{cfg.cloud}: the plan registers no node group")
    if _CLOUD_AGENTS[cfg.cloud]:
        notes.append(f"{cfg.cloud}: node agents the cloud runs itself ({_CLOUD_AGENTS[cfg.cloud]}) are not in the rendered "
                     "releases: their requests are not counted, so the headroom shown is an upper bound")
    else:
        notes.append(f"{cfg.cloud}: the managed add-ons' pods (aws-node, kube-proxy, CoreDNS, EBS CSI controller and node "
                     "plugin) are counted from what each add-on runs (gpu_platform/data/eks_addon_pods.py)")
    # The plan registers resources in the order their outputs resolve: order the groups by role, then
    # name, then zone (a pool's zonal groups share the name), so packing, the report and fit.json are the
    # same on every run.
    roles = {"control-plane": 0, "system": 1, "gpu": 2}
    groups = sorted(groups, key=lambda g: (roles.get(g.role, 3), g.name, g.zone or ""))
    for g in groups:
        notes.append(f"{g.key}: {g.role}, {g.min_nodes}-{g.max_nodes} x {g.instance_type} ({g.capacity}), "
                     f"allocatable per node {g.allocatable}")
    aws = getattr(cfg, "aws", None) if cfg.cloud == "aws" else None
    kept = ("the scale-in protection controller (aws.scaleInController) annotates every node a GPU pod runs on "
            "cluster-autoscaler.kubernetes.io/scale-down-disabled=true, which the autoscaler never removes"
            if aws is not None and aws.scale_in_controller.on else "")
    return ClusterModel(cloud=cfg.cloud, kubernetes_version=cfg.kubernetes_version, node_groups=groups,
                        control_plane_ports=ports, notes=notes, extended_resource_toleration=ert,
                        network=network_model(cfg, plan),
                        autoscaler=(cfg.kubernetes.autoscaler if getattr(cfg, "kubernetes", None) is not None
                                    else "cluster-autoscaler"),
                        busy_gpu_nodes_kept=kept)
