"""The pods of the EKS managed add-ons the program installs (aws:eks/addon:Addon), which no rendered chart
shows: EKS applies them itself. Cluster fit counts them like any release's pods (preflight/fit/render.py),
and the CPU queue's system quota leaves their requests out (components/platform/queue.py system_quota), so
the room left on the system nodes (where CPU notebooks and the platform's controllers run) is what a real
cluster has.

What each add-on runs, with its requests and placement, from the add-on's own chart or manifest (the EKS
add-on is built from it); read 2026-11-28:
- vpc-cni (`aws-node` DaemonSet, every node, tolerates every taint): container aws-node requests cpu 25m
  and, with NetworkPolicy enforcement on (eks.py VPC_CNI_CONFIGURATION), aws-eks-nodeagent the same
  (`default .Values.resources .Values.nodeAgent.resources`): aws/amazon-vpc-cni-k8s v1.23.0
  charts/aws-vpc-cni/values.yaml `resources.requests.cpu: 25m`, templates/daemonset.yaml.
- kube-proxy (DaemonSet, every node, tolerates every taint): requests cpu 100m, as the EKS kube-proxy
  DaemonSet sets it (the same 100m as kubeadm's and kops' kube-proxy; not read from a live cluster here).
- coredns (Deployment, 2 replicas, tolerates CriticalAddonsOnly and the control-plane taint, so not the
  GPU nodes'): requests cpu 100m, memory 70Mi per replica, kubernetes/kubernetes
  cluster/addons/dns/coredns/coredns.yaml.base, which EKS's CoreDNS add-on keeps (EKS user guide, "Manage
  CoreDNS": two replicas by default).
- aws-ebs-csi-driver (kubernetes-sigs/aws-ebs-csi-driver helm-chart-aws-ebs-csi-driver-2.64.0,
  charts/aws-ebs-csi-driver): the controller Deployment, 2 replicas (controller.replicaCount), containers
  ebs-plugin, csi-provisioner, csi-attacher, csi-resizer at 10m / 40Mi each (controller.resources, the
  sidecars' default), liveness-probe none, csi-snapshotter only where the snapshot CRDs exist (EKS installs
  none); tolerations CriticalAddonsOnly and NoExecute for 300 s (not the GPU taint). The ebs-csi-node
  DaemonSet (tolerateAllTaints): ebs-plugin 10m / 40Mi (node.resources), node-driver-registrar and
  liveness-probe none.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "kube-system"
_ALL_TAINTS = [{"operator": "Exists"}]
_LINUX = {"kubernetes.io/os": "linux"}


def _container(name: str, cpu: str, memory: str | None = None) -> dict[str, Any]:
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    return {"name": name, "image": f"eks-addon/{name}", "resources": {"requests": requests}}


def _workload(kind: str, name: str, containers: list[dict], tolerations: list[dict], replicas: int = 1,
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = labels or {"k8s-app": name}
    spec: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": {
        "metadata": {"labels": labels},
        "spec": {"nodeSelector": dict(_LINUX), "tolerations": tolerations, "containers": containers,
                 "priorityClassName": "system-node-critical" if kind == "DaemonSet" else "system-cluster-critical"}}}
    if kind == "Deployment":
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


def addon_objects(addon: str, configuration: dict[str, Any]) -> list[dict[str, Any]]:
    """The workloads EKS runs for managed add-on `addon` with `configuration` (its configurationValues);
    [] for an add-on this module does not model."""
    if addon == "vpc-cni":
        containers = [_container("aws-node", "25m")]
        if str(configuration.get("enableNetworkPolicy", "false")).lower() == "true":
            containers.append(_container("aws-eks-nodeagent", "25m"))
        return [_workload("DaemonSet", "aws-node", containers, _ALL_TAINTS)]
    if addon == "kube-proxy":
        return [_workload("DaemonSet", "kube-proxy", [_container("kube-proxy", "100m")], _ALL_TAINTS)]
    if addon == "coredns":
        tolerations = [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                       {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
        replicas = int(configuration.get("replicaCount", 2))
        return [_workload("Deployment", "coredns", [_container("coredns", "100m", "70Mi")], tolerations, replicas,
                          {"k8s-app": "kube-dns"})]
    if addon == "aws-ebs-csi-driver":
        controller = [_container(n, "10m", "40Mi") for n in ("ebs-plugin", "csi-provisioner", "csi-attacher", "csi-resizer")]
        controller.append({"name": "liveness-probe", "image": "eks-addon/liveness-probe"})
        tolerations = [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                       {"effect": "NoExecute", "operator": "Exists", "tolerationSeconds": 300}]
        replicas = int(((configuration.get("controller") or {}).get("replicaCount")) or 2)
        node = [_container("ebs-plugin", "10m", "40Mi"), {"name": "node-driver-registrar", "image": "eks-addon/registrar"},
                {"name": "liveness-probe", "image": "eks-addon/liveness-probe"}]
        return [_workload("Deployment", "ebs-csi-controller", controller, tolerations, replicas, {"app": "ebs-csi-controller"}),
                _workload("DaemonSet", "ebs-csi-node", node, _ALL_TAINTS, labels={"app": "ebs-csi-node"})]
    return []


# What the program configures (components/aws/eks.py): NetworkPolicy enforcement on, default replicas.
PROGRAM_CONFIGURATION = {"vpc-cni": {"enableNetworkPolicy": "true"}}
ADDONS = ("vpc-cni", "kube-proxy", "coredns", "aws-ebs-csi-driver")


def _millicores(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _bytes(q: str) -> int:
    return int(q[:-2]) * 2**20 if q.endswith("Mi") else int(q)


def system_node_requests(nodes: int) -> tuple[int, int]:
    """(CPU millicores, memory bytes) the add-ons request on `nodes` system nodes: each DaemonSet once per
    node, each Deployment's replicas once (their tolerations keep them off the GPU nodes)."""
    cpu = mem = 0
    for addon in ADDONS:
        for obj in addon_objects(addon, PROGRAM_CONFIGURATION.get(addon, {})):
            spec = obj["spec"]
            count = nodes if obj["kind"] == "DaemonSet" else int(spec.get("replicas", 1))
            for c in spec["template"]["spec"]["containers"]:
                req = (c.get("resources") or {}).get("requests") or {}
                cpu += count * _millicores(req.get("cpu", "0m"))
                mem += count * _bytes(req.get("memory", "0"))
    return cpu, mem
