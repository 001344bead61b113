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
- Namespace `gpu-platform` with ConfigMap `node-groups` (node-groups.json): the node groups as the stack file
  describes them. The cluster-fit model (gpu_platform/preflight/fit/nodes.py) and the policy pack
  (gpu_platform/policies/pools.py) read it from the plan, as they read a cloud's node pools; an operator reads it
  with kubectl to compare with the nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from gpu_platform.components.cluster import (
    CHECKPOINT_CA_PATH, GPU_TAINT, POOL_LABEL, SYSTEM_NODE_LABELS, CheckpointStore, ClusterHandle, GpuPoolSpec,
    SystemPoolSpec, Taint,
)
from gpu_platform.config.base import UNDECRYPTABLE, approval_tags
from gpu_platform.config.kubernetes import (
    CHECKPOINT_CREDENTIAL_KEYS, CHECKPOINT_CREDENTIALS_NAMESPACE, KUBECONFIG_KEY, KubeconfigError, KubeconfigSource,
    KubeconfigTarget, check_kubeconfig, kubeconfig_source,
)

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog

NAMESPACE = "gpu-platform"
NODE_GROUPS = "node-groups"
NODE_GROUPS_KEY = "node-groups.json"
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
        source = kubeconfig_source(value, stack_file)
        if source.text == UNDECRYPTABLE:
            return source, None
        if value and source.path is None and not _is_secret(KUBECONFIG_KEY):
            raise KubeconfigError(f"{source.where}: a kubeconfig in clear in the stack file; its credentials belong in "
                                  f"a secret: `pulumi config set --secret {KUBECONFIG_KEY} < kubeconfig.yaml` (or a path "
                                  "to the file, or $KUBECONFIG)")
        return source, check_kubeconfig(source, context, f"gpu-platform:kubernetes.context in {stack_file}")
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
        # Before anything is registered: a missing or broken kubeconfig stops the program with one message.
        source, target = read_kubeconfig(section.context, args.stack_file)
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
        cm = render_node_groups_configmap(args.node_groups)
        self.node_groups = k8s.core.v1.ConfigMap(
            f"{name}-node-groups", metadata=cm["metadata"], data=cm["data"],
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider, depends_on=[self.namespace]))

        checkpoint = CheckpointStore(url=None)
        store = section.checkpoint_store
        if store is not None:
            keys = pulumi.Config(CHECKPOINT_CREDENTIALS_NAMESPACE)
            access, secret = (keys.require_secret(k) for k in CHECKPOINT_CREDENTIAL_KEYS)
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
            ready=[self.storage_class],
            endpoint=self.endpoint,
            system_zones=tuple(section.system_zones),
            system_pool=SystemPoolSpec(sp.instance_type, sp.min_nodes, sp.max_nodes),
            catalog=args.catalog,
            node_boot_minutes=float(section.node_boot_minutes),
        )
        self.register_outputs({"clusterName": section.cluster_name, "endpoint": self.endpoint,
                               "kubeconfig": self.kubeconfig, "checkpointStore": checkpoint.url})
