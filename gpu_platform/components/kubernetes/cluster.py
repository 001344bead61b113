"""The ExistingCluster component: the cluster contract for a cluster the stack does not create.

Pure rendering functions first (the pools as the platform sees them, the node-groups ConfigMap), the component
last. What it registers:

- a Kubernetes provider for the stack's kubeconfig (gpu_platform/config/kubernetes.py kubeconfig_source: the
  secret `kubernetes:kubeconfig`, else $KUBECONFIG; checked before anything is registered, never echoed) with
  `clusterIdentifier` set to `kubernetes.clusterName`. pulumi-kubernetes replaces a provider, and with it every
  object deployed through it, when the kubeconfig's active cluster (server, CA, ...) changes and no identifier is
  set (provider/pkg/provider/provider.go DiffConfig, pulumi/pulumi-kubernetes at 94977969d, 2026-07-01): a
  rotated certificate or a new load-balancer address of the same cluster would otherwise delete and recreate the
  whole platform. With the identifier only a new clusterName does.
- a read (`StorageClass.get`) of `kubernetes.storageClass`: `pulumi preview` and `up` stop with the provider's
  "not found" before any volume is asked of a StorageClass that does not exist.
- reads of what the cluster says about `kubernetes.network` (`ConfigMap.get` of Cilium's kube-system/cilium-config
  where `cni` is cilium: policy-cidr-match-mode, enable-policy; `EndpointSlice.get` of default/kubernetes, the
  API server's addresses and port, which kube-apiserver keeps under that name: kubernetes/kubernetes
  pkg/controlplane/reconcilers/endpointsadapter.go). Where the stack file disagrees, `pulumi preview` and `up`
  stop with one message naming each key (network_disagreements) before the platform is installed: preflight's
  flow check, offline, judged the platform's NetworkPolicies by the stack file's values.
- Namespace `gpu-platform` with ConfigMap `node-groups` (node-groups.json): the node groups as the stack file
  describes them; network.json: the network as read from the cluster and found as the stack file says. The cluster-fit model (gpu_platform/preflight/fit/nodes.py) and the policy pack
  (gpu_platform/policies/pools.py) read it from the plan, as they read a cloud's node pools; an operator reads it
  with kubectl to compare with the nodes.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from gpu_platform.components.cluster import (
    CHECKPOINT_CA_PATH, GPU_TAINT, POOL_LABEL, SYSTEM_NODE_LABELS, CheckpointStore, ClusterHandle, GpuPoolSpec,
    SystemPoolSpec, Taint,
)
from gpu_platform.config.base import approval_tags
from gpu_platform.config.kubernetes import (
    CHECKPOINT_CREDENTIAL_KEYS, CHECKPOINT_CREDENTIALS_NAMESPACE, KUBECONFIG_KEY, KubeconfigError, KubeconfigSource,
    KubeconfigTarget, KubernetesNetwork, checked_kubeconfig,
)

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog

NAMESPACE = "gpu-platform"
NODE_GROUPS = "node-groups"
NODE_GROUPS_KEY = "node-groups.json"
NETWORK_KEY = "network.json"
# What the program reads to check kubernetes.network (ids as pulumi-kubernetes takes them: namespace/name).
CILIUM_CONFIG_ID = "kube-system/cilium-config"  # the Cilium agent's settings (Helm chart and cilium CLI alike)
APISERVER_ENDPOINTS_ID = "default/kubernetes"  # the `kubernetes` Service's EndpointSlice, kept by kube-apiserver
MANAGED_BY = {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "gpu-platform"}
SYSTEM_GROUP = "system"


# ---------------------------------------------------------------------------------------------
# Pure: the pools and the node-groups document
# ---------------------------------------------------------------------------------------------


def gpu_pool_specs(cfg: "StackConfig", catalog: "Catalog") -> list[GpuPoolSpec]:
    """The GPU pools as the platform sees them: the pool label and the GPU taint every GPU node must carry, the
    pool's own labels, extra taints and zones from kubernetes.pools.<pool>, GPUs per node from its node type."""
    section = cfg.kubernetes
    assert section is not None, "validated by gpu_platform.config.stack"
    specs = []
    for pool in cfg.gpu_pools:
        t = catalog.instance("kubernetes", pool.instance_type)
        assert t is not None, "validated by gpu_platform.config.stack"
        extra = section.pool(pool.name)
        specs.append(GpuPoolSpec(
            name=pool.name, instance_type=pool.instance_type, gpu_model=t.gpu_model or "unknown",
            gpus_per_node=t.gpus, min_nodes=pool.min_nodes, max_nodes=pool.max_nodes, capacity=pool.capacity,
            node_labels={**pool.labels, POOL_LABEL: pool.name},
            taints=(GPU_TAINT, *(Taint(x.key, x.value, x.effect) for x in extra.taints)),
            zones=tuple(extra.zones)))
    return specs


def render_node_groups(cfg: "StackConfig", catalog: "Catalog", pools: Sequence[GpuPoolSpec]) -> dict[str, Any]:
    """node-groups.json: every node group of the cluster as the stack file describes it, with what the fit model
    and the policy pack need (GPUs, allocatable, sizes, capacity, labels, taints, zones, price or null, the
    on-demand approval as the clouds tag it)."""
    section = cfg.kubernetes
    assert section is not None
    approvals = {p.name: p.approved_on_demand for p in cfg.gpu_pools}

    def group(name: str, role: str, type_name: str, lo: int, hi: int, capacity: str, labels: Mapping[str, str],
              taints: Sequence[Mapping[str, str]], zones: Sequence[str], tags: Mapping[str, str]) -> dict[str, Any]:
        t = catalog.instance("kubernetes", type_name)
        assert t is not None
        price = t.price(capacity)
        return {"name": name, "role": role, "instanceType": type_name, "gpusPerNode": t.gpus, "gpuModel": t.gpu_model,
                "vcpus": t.vcpus, "memoryGib": t.memory_gib,
                "allocatable": dict(t.allocatable) if t.allocatable else None,
                "minNodes": lo, "maxNodes": hi, "capacity": capacity, "labels": dict(labels),
                "taints": [dict(x) for x in taints], "zones": list(zones),
                "usdPerHour": None if price is None else price.usd_per_hour, "tags": dict(tags)}

    groups = [group(p.name, "gpu", p.instance_type, p.min_nodes, p.max_nodes, p.capacity, p.node_labels,
                    [x.as_k8s() for x in p.taints], p.zones, approval_tags(approvals[p.name], "kubernetes"))
              for p in pools]
    sp = section.system_pool
    groups.append(group(SYSTEM_GROUP, "system", sp.instance_type, sp.min_nodes, sp.max_nodes, "on-demand",
                        SYSTEM_NODE_LABELS, [], section.system_zones, {}))
    return {"cluster": section.cluster_name, "nodeGroups": groups}


def _field(obj: Any, key: str) -> Any:
    """A field of a read object: a plain mapping (mocks, tests) or the SDK's output type (a dict subclass)."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _modes(value: Any) -> list[str]:
    return sorted(set(str(value or "").replace(",", " ").split()))


def network_disagreements(net: KubernetesNetwork, stack_file: str, cilium_config: Optional[Mapping[str, Any]],
                          endpoints: Optional[Sequence[Any]], ports: Optional[Sequence[Any]]) -> list[str]:
    """Where `kubernetes.network` says otherwise than the cluster: Cilium's agent settings (cilium_config: the data of
    kube-system/cilium-config, None when not read) and the API server's endpoints (the default/kubernetes
    EndpointSlice's endpoints and ports, None when not read). One line per key, naming it and the file, what the
    cluster has and what to do. Pure."""
    key = "gpu-platform:kubernetes.network"
    out = []
    if cilium_config is not None:
        cilium = net.cilium
        stated = sorted(cilium.policy_cidr_match_mode) if cilium else []
        found = _modes(cilium_config.get("policy-cidr-match-mode"))
        if stated != found:
            out.append(f"{key}.cilium.policyCidrMatchMode in {stack_file} is {stated}, but the cluster's Cilium "
                       f"(ConfigMap {CILIUM_CONFIG_ID}, policy-cidr-match-mode) has {found}")
        enable = cilium.enable_policy if cilium else "default"
        found_enable = str(cilium_config.get("enable-policy") or "default")
        if enable != found_enable:
            out.append(f"{key}.cilium.enablePolicy in {stack_file} is {enable!r}, but the cluster's Cilium "
                       f"(ConfigMap {CILIUM_CONFIG_ID}, enable-policy) has {found_enable!r}")
    api = net.api_server
    if api is not None and (endpoints is not None or ports is not None):
        numbers = sorted({int(_field(p, "port")) for p in ports or [] if _field(p, "port") is not None})
        if numbers and api.port not in numbers:
            out.append(f"{key}.apiServer.port in {stack_file} is {api.port}, but the API server's endpoints "
                       f"(EndpointSlice {APISERVER_ENDPOINTS_ID}) listen on {', '.join(map(str, numbers))}")
        ranges, where = (list(api.cidrs), "apiServer.cidrs") if api.cidrs else (
            (list(net.node_cidrs), "nodeCidrs") if api.on_nodes else ([], ""))
        nets = [ipaddress.ip_network(c, strict=False) for c in ranges]
        outside = []
        for ep in endpoints or []:
            for address in _field(ep, "addresses") or []:
                try:
                    ip = ipaddress.ip_address(str(address))
                except ValueError:
                    continue
                if nets and not any(ip.version == n.version and ip in n for n in nets):
                    outside.append(str(ip))
        if outside:
            out.append(f"{key}.{where} in {stack_file} is {ranges}, which does not hold the API server's address"
                       f"{'es' if len(outside) > 1 else ''} {', '.join(sorted(set(outside)))} (EndpointSlice "
                       f"{APISERVER_ENDPOINTS_ID})" + ("" if api.cidrs else ": with apiServer.onNodes true and no "
                                                       "apiServer.cidrs, the API server is taken to be on nodeCidrs"))
    return out


def network_error(problems: Sequence[str]) -> str:
    return ("cloud kubernetes: kubernetes.network does not describe the cluster, and preflight's flow check judged "
            "the platform's NetworkPolicies by it:\n  " + "\n  ".join(problems) + "\nCorrect the stack file to what "
            "the cluster runs (docs/quickstart-kubernetes.md \"The network\"), run preflight again, then deploy.")


def network_as_read(cilium_config: Optional[Mapping[str, Any]], endpoints: Optional[Sequence[Any]],
                    ports: Optional[Sequence[Any]]) -> dict[str, Any]:
    """network.json: what was read and found as the stack file says."""
    doc: dict[str, Any] = {}
    if cilium_config is not None:
        doc["cilium"] = {"policyCidrMatchMode": _modes(cilium_config.get("policy-cidr-match-mode")),
                         "enablePolicy": str(cilium_config.get("enable-policy") or "default")}
    if endpoints is not None or ports is not None:
        doc["apiServer"] = {"addresses": sorted({str(a) for ep in endpoints or [] for a in _field(ep, "addresses") or []}),
                            "ports": sorted({int(_field(p, "port")) for p in ports or [] if _field(p, "port") is not None})}
    return doc


def render_node_groups_configmap(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": NODE_GROUPS, "namespace": NAMESPACE, "labels": dict(MANAGED_BY)},
            "data": {NODE_GROUPS_KEY: json.dumps(doc, indent=2, sort_keys=True)}}


def render_namespace() -> dict[str, Any]:
    """Restricted: it holds a ConfigMap, no pod."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {**MANAGED_BY, "pod-security.kubernetes.io/enforce": "restricted",
                                                       "pod-security.kubernetes.io/enforce-version": "latest"}}}


def checkpoint_env(store: Any) -> dict[str, str]:
    """What a pod needs besides the keys to reach an S3-compatible store: its endpoint (AWS SDKs and boto3 read
    AWS_ENDPOINT_URL_S3), the region it signs for and, for a store with a private CA, the file of its certificates
    (botocore reads AWS_CA_BUNDLE as its ca_bundle: botocore/configprovider.py; s3fs passes no `verify`, so
    aiobotocore's create_client takes it too), where the torch-checkpointed runtime mounts them."""
    env = {"AWS_ENDPOINT_URL_S3": store.endpoint, "AWS_REGION": store.region}
    if store.ca_bundle:
        env["AWS_CA_BUNDLE"] = CHECKPOINT_CA_PATH
    return env


# ---------------------------------------------------------------------------------------------
# The kubeconfig, read and checked before any resource is registered
# ---------------------------------------------------------------------------------------------


def _is_secret(full_key: str) -> bool:
    from pulumi.runtime import config as runtime_config

    return runtime_config.is_config_secret(full_key) or full_key in set(runtime_config.get_config_secret_keys_env())


def read_kubeconfig(context: Optional[str], stack_file: str) -> tuple[KubeconfigSource, Optional[KubeconfigTarget]]:
    """The kubeconfig and what it points at (None while preflight plans with a stand-in for it). pulumi.RunError
    (printed without a traceback) naming the key or $KUBECONFIG and the problem, never the content."""
    value = pulumi.Config("kubernetes").get("kubeconfig")
    try:
        return checked_kubeconfig(value, _is_secret(KUBECONFIG_KEY), context, stack_file)
    except KubeconfigError as exc:
        raise pulumi.RunError(f"cloud kubernetes: {exc}") from None


# ---------------------------------------------------------------------------------------------
# The component
# ---------------------------------------------------------------------------------------------


@dataclass
class ExistingClusterArgs:
    cfg: "StackConfig"
    catalog: "Catalog"
    pools: list[GpuPoolSpec]
    node_groups: dict[str, Any]
    stack_file: str

    @classmethod
    def from_config(cls, cfg: "StackConfig") -> "ExistingClusterArgs":
        from gpu_platform.config.base import stack_file
        from gpu_platform.config.derived import stack_catalog

        catalog = stack_catalog(cfg)
        pools = gpu_pool_specs(cfg, catalog)
        return cls(cfg, catalog, pools, render_node_groups(cfg, catalog, pools), stack_file(pulumi.get_stack()))


class ExistingCluster(pulumi.ComponentResource):
    """Outputs: cluster_name, endpoint (the kubeconfig's API server), kubeconfig (secret); `handle` is the
    ClusterHandle."""

    def __init__(self, name: str, args: ExistingClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        cfg = args.cfg
        section = cfg.kubernetes
        assert section is not None, "validated by gpu_platform.config.stack"
        # Before anything is registered: a missing or broken kubeconfig, or a checkpoint store without its
        # credentials (checkpoint-store:accessKeyId/secretAccessKey), stops the program with one message.
        source, target = read_kubeconfig(section.context, args.stack_file)
        store = section.checkpoint_store
        credentials = None
        if store is not None:
            keys = pulumi.Config(CHECKPOINT_CREDENTIALS_NAMESPACE)
            credentials = [keys.require_secret(k) for k in CHECKPOINT_CREDENTIAL_KEYS]
        super().__init__("gpu-platform:kubernetes:ExistingCluster", name, None, opts)
        self.kubeconfig = pulumi.Output.secret(source.text)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, context=section.context,
            cluster_identifier=section.cluster_name, enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self))
        in_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.storage_class = k8s.storage.v1.StorageClass.get(f"{name}-storage-class", section.storage_class,
                                                             opts=in_cluster)
        self.namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=render_namespace()["metadata"],
                                               opts=in_cluster)
        network = self._read_network(name, section.network, args.stack_file, in_cluster)
        cm = render_node_groups_configmap(args.node_groups)
        data: Any = cm["data"] if network is None else network.apply(lambda doc: {**cm["data"], NETWORK_KEY: doc})
        self.node_groups = k8s.core.v1.ConfigMap(
            f"{name}-node-groups", metadata=cm["metadata"], data=data,
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.namespace]))

        checkpoint = CheckpointStore(url=None)
        if store is not None and credentials is not None:
            access, secret = credentials
            checkpoint = CheckpointStore(
                url=store.url, env=checkpoint_env(store), ca_bundle=store.ca_bundle,
                credentials=pulumi.Output.secret(pulumi.Output.all(access, secret).apply(
                    lambda k: {"AWS_ACCESS_KEY_ID": k[0], "AWS_SECRET_ACCESS_KEY": k[1]})))
        self.endpoint = None if target is None else pulumi.Output.from_input(target.server)
        sp = section.system_pool
        self.handle = ClusterHandle(
            cloud="kubernetes",
            name=section.cluster_name,
            kubeconfig=self.kubeconfig,
            provider=self.provider,
            gpu_pools=args.pools,
            default_storage_class=section.storage_class,
            checkpoint=checkpoint,
            gpu_device_plugin_installed=section.gpu_device_plugin == "preinstalled",
            # The platform waits for the node-groups ConfigMap, which waits for the network check.
            ready=[self.storage_class, self.node_groups],
            endpoint=self.endpoint,
            system_zones=tuple(section.system_zones),
            system_pool=SystemPoolSpec(sp.instance_type, sp.min_nodes, sp.max_nodes),
            catalog=args.catalog,
            node_boot_minutes=float(section.node_boot_minutes),
            autoscaler=section.autoscaler,
            # Other teams' workloads share the cluster: the GPU pod policy judges the platform's namespaces only.
            gpu_pod_scope="queue-namespaces",
        )
        self.register_outputs({"clusterName": section.cluster_name, "endpoint": self.endpoint,
                               "kubeconfig": self.kubeconfig, "checkpointStore": checkpoint.url})

    def _read_network(self, name: str, net: Optional[KubernetesNetwork], stack_file: str,
                      opts: pulumi.ResourceOptions) -> Optional[pulumi.Output[str]]:
        """Read what the cluster says about kubernetes.network (see the module docstring); the Output fails with
        network_error where the stack file disagrees, else is network.json. None where nothing is to be read
        (no network section, or cni none: no policy engine to ask)."""
        if net is None or net.cni == "none":
            return None
        parts: dict[str, Any] = {}
        if net.cni == "cilium":
            self.cilium_config = k8s.core.v1.ConfigMap.get(f"{name}-cilium-config", CILIUM_CONFIG_ID, opts=opts)
            parts["cilium"] = self.cilium_config.data
        if net.api_server is not None:
            self.apiserver_endpoints = k8s.discovery.v1.EndpointSlice.get(f"{name}-apiserver-endpoints",
                                                                          APISERVER_ENDPOINTS_ID, opts=opts)
            parts["endpoints"] = self.apiserver_endpoints.endpoints
            parts["ports"] = self.apiserver_endpoints.ports

        def check(read: dict[str, Any]) -> str:
            cilium = (read.get("cilium") or {}) if "cilium" in parts else None
            endpoints = (read.get("endpoints") or []) if "endpoints" in parts else None
            ports = (read.get("ports") or []) if "ports" in parts else None
            problems = network_disagreements(net, stack_file, cilium, endpoints, ports)
            if problems:
                raise pulumi.RunError(network_error(problems))
            return json.dumps(network_as_read(cilium, endpoints, ports), indent=2, sort_keys=True)

        return pulumi.Output.all(**parts).apply(check)
