"""pulumi-kubernetes reads (`<Kind>.get`) while preflight runs the program offline.

cloud kubernetes reads what the cluster says about `kubernetes.network` (gpu_platform/components/kubernetes/
cluster.py): Cilium's kube-system/cilium-config and the default/kubernetes EndpointSlice; and it reads the
stack's StorageClass. Offline there is no
cluster: the answers are the stack file's own values, so preflight plans as the stack file describes the network
(its flow check says so), and `pulumi preview` / `up` compare them with the real cluster. A read of anything else
is an error that names it, as an invoke without a mock is.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable

import pulumi


def _network() -> dict[str, Any]:
    return dict((pulumi.Config("gpu-platform").get_object("kubernetes") or {}).get("network") or {})


def _cilium_config(_id: str) -> dict[str, Any]:
    cilium = dict(_network().get("cilium") or {})
    data = {"policy-cidr-match-mode": " ".join(cilium.get("policyCidrMatchMode") or []),
            "enable-policy": str(cilium.get("enablePolicy") or "default")}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cilium-config", "namespace": "kube-system"},
            "data": data}


def _apiserver_endpoints(_id: str) -> dict[str, Any]:
    net = _network()
    api = dict(net.get("apiServer") or {})
    ranges = list(api.get("cidrs") or []) or (list(net.get("nodeCidrs") or []) if api.get("onNodes") else [])
    addresses = []
    if ranges:
        block = ipaddress.ip_network(str(ranges[0]), strict=False)
        addresses.append(str(next(block.hosts(), block.network_address)))
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "endpoints": [{"addresses": addresses, "conditions": {"ready": True}}] if addresses else [],
            "ports": [{"name": "https", "port": int(api.get("port") or 443), "protocol": "TCP"}]}


def _storage_class(id_: str) -> dict[str, Any]:
    """kubernetes.storageClass: offline, taken to exist (preview and up read it and stop where it does not)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": id_}}


# (type token, id or "*") -> function(id) -> the object's state.
READS: dict[tuple[str, str], Callable[[str], dict[str, Any]]] = {
    ("kubernetes:storage.k8s.io/v1:StorageClass", "*"): _storage_class,
    ("kubernetes:core/v1:ConfigMap", "kube-system/cilium-config"): _cilium_config,
    ("kubernetes:discovery.k8s.io/v1:EndpointSlice", "default/kubernetes"): _apiserver_endpoints,
}
