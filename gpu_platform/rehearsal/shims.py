"""Cloud-layer shims for the engine run (gpu_platform/rehearsal/engine.py): what a stack's cloud component hands the
platform (its ClusterHandle), made without the cloud's provider plugin, which cannot be built or fetched here.

`__main__.py` builds the cluster with `cloud_module(cfg.cloud).create_cluster(cfg)` and the billing guardrails with
`create_billing_alerts(cfg)`, then installs the platform (MlPlatform) on the handle. The engine run starts the
program from a `__main__.py` of its own that first calls `install(cloud)` here: that replaces those two functions of
the cloud's module for this process, then runs the repository's `__main__.py` unchanged. So the program's platform
layer (every Helm release, kustomize install and object MlPlatform registers, with the handle's cloud-specific
values) runs through the real engine; the cloud's own resources (cluster, node pools, network, bucket, IAM, budget)
are not registered at all, and what they would output is supplied here.

One shim per cloud layer, named:
- `GkeClusterShim` (cloud gcp): the handle GkeCluster builds (components/gcp/cluster.py), from the same pure
  `GkeClusterArgs.from_config` (pools with their zones, system pool); the rehearsal's kubeconfig under the context
  name gcloud writes; the checkpoint bucket's URL and the training service account's e-mail from the names
  CheckpointBucket gives them (config/names.py bucket_name, account_id). Not exercised: the GKE cluster and node
  pools, the bucket and its IAM, Artifact Registry and the example image build, the budget.
- `EksClusterShim` (cloud aws): the handle AwsCluster builds (components/aws/cluster.py): the pools from the same
  `gpu_pool_specs` with the capacity label and the zones (or, in an existing VPC, subnets) of their groups
  (`zonal_groups`), the system pool; the rehearsal's kubeconfig. The bucket's URL and the training role's ARN are
  named by AWS at creation (a random bucket suffix, an IAM role ARN): stand-ins of the same shape are used
  (STANDIN_AWS_ACCOUNT); the default `gp3` StorageClass AwsCluster creates in the cluster, with the same arguments
  (eks.GP3_STORAGE_CLASS), through the engine. Not exercised: the VPC, EKS and its add-ons, the GPU Auto Scaling
  Groups, the node termination handler, the cluster autoscaler and the scale-in controller (Helm releases and
  objects AwsCluster installs through its own provider), the bucket, IAM, ECR, the alarms and the budget.
- `LinodeClusterShim` (cloud linode): LinodeKubeadmCluster's in-cluster half through the real engine, on the
  rehearsal's API server: `LinodeAddons` with the same `addons_args` (the CNI's Helm release, the metadata-deny
  CiliumClusterwideNetworkPolicy after it, the Linode CCM and block-storage CSI driver releases with their token
  Secret, the encrypted default StorageClass, the NVIDIA device plugin), and the handle from the same
  `cluster_handle` (pools as Kueue may count on them, the alert rules, the textfile folder, the system pool) with
  the checkpoint store from `checkpoint_store`. Stand-ins: the CCM/CSI token (STANDIN_LINODE_TOKEN: nothing calls
  Linode), the bucket's random label suffix, its endpoint (`<region>-1.linodeobjects.com`, as preflight's mocks
  answer) and its key; Cilium's CRDs, which cilium-operator registers when it starts (`cluster_objects`, from the
  pinned cilium module as the rehearsal's installer gets them: gpu_platform/rehearsal/cilium.py). Not exercised:
  the instances, VPC, firewalls, NodeBalancer or reserved IP, the buckets and keys (the Linode provider); the
  program's PKI, join tokens and their Secrets, the admin certificate read-back, the API and readiness gates, the
  node leave hooks (pulumi-tls, pulumi-random and pulumi-command: no plugin for them here); the node-upgrade Jobs
  (their pods run kubeadm on the node: a KWOK node runs no container, so they never complete); the node-group
  provider and its cluster-autoscaler (certificates from pulumi-tls, a destroy hook from pulumi-command, an image
  built by docker-build); the images built into linode.imageRegistry.
The onprem (cloud kubernetes) stack needs none: its cluster component registers only Kubernetes objects and reads,
which the engine run supplies (engine.py ClusterShim).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pulumi

SHIMMED_CLOUDS = ("gcp", "aws", "linode")
# The account of the stand-in ARNs (AWS documents 000000000000-like IDs only as examples; nothing is called with it).
STANDIN_AWS_ACCOUNT = "000000000000"
# The Linode CCM/CSI token's stand-in (linode-cluster:token): put in the add-ons' Secret; nothing calls Linode with it.
STANDIN_LINODE_TOKEN = "rehearsal-linode-token"
# The checkpoint bucket's random label suffix (BUCKET_SUFFIX_LENGTH characters) and its key's stand-ins.
STANDIN_BUCKET_SUFFIX = "rehearsl"
STANDIN_BUCKET_KEY = ("REHEARSALACCESSKEY00", "rehearsal-secret-key")


class GkeClusterShim(pulumi.ComponentResource):
    """GkeCluster's handle, with the rehearsal's API server behind its Kubernetes provider."""

    def __init__(self, name: str, cfg: Any, kubeconfig: str):
        import pulumi_kubernetes as k8s

        from gpu_platform.components.cluster import CheckpointStore, ClusterHandle, SystemPoolSpec
        from gpu_platform.components.gcp.bucket import WORKLOAD_IDENTITY_ANNOTATION
        from gpu_platform.components.gcp.cluster import DEFAULT_STORAGE_CLASS, GkeClusterArgs
        from gpu_platform.config.names import account_id, bucket_name

        super().__init__("gpu-platform:rehearsal:GkeClusterShim", name, None, None)
        args = GkeClusterArgs.from_config(cfg)
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(parent=self))
        email = f"{account_id(args.resource_prefix, 'trainer')}@{args.project}.iam.gserviceaccount.com"
        self.handle = ClusterHandle(
            cloud="gcp", name=args.resource_prefix, kubeconfig=self.kubeconfig, provider=provider,
            gpu_pools=[p.spec for p in args.gpu_pools], default_storage_class=DEFAULT_STORAGE_CLASS,
            checkpoint=CheckpointStore(url=f"gs://{bucket_name(args.project, args.resource_prefix)}",
                                       service_account_annotations={WORKLOAD_IDENTITY_ANNOTATION: email},
                                       env={"GOOGLE_CLOUD_PROJECT": args.project}),
            gpu_device_plugin_installed=True, ready=[], endpoint=None,
            system_zones=tuple(args.system_pool.zones) or tuple(args.zones),
            system_pool=SystemPoolSpec(args.system_pool.instance_type, args.system_pool.min_nodes,
                                       args.system_pool.max_nodes))
        self.register_outputs({})


class EksClusterShim(pulumi.ComponentResource):
    """AwsCluster's handle, with the rehearsal's API server behind its Kubernetes provider."""

    def __init__(self, name: str, cfg: Any, kubeconfig: str):
        import pulumi_kubernetes as k8s

        from gpu_platform.components.aws.cluster import CAPACITY_LABEL
        from gpu_platform.components.aws.eks import GP3_STORAGE_CLASS, STORAGE_CLASS
        from gpu_platform.components.cluster import (
            SUBNET_LABEL, CheckpointStore, ClusterHandle, SystemPoolSpec, gpu_pool_specs)
        from gpu_platform.config.names import zonal_groups

        super().__init__("gpu-platform:rehearsal:EksClusterShim", name, None, None)
        section = cfg.aws
        if section.new_vpc:
            if not section.availability_zones:
                raise pulumi.RunError("the EKS shim needs gpu-platform:aws.availabilityZones (AwsCluster would ask AWS "
                                      "for the region's zones, which the rehearsal cannot)")
            zone_labels, zone_node_label = list(section.availability_zones), None
        else:
            zone_labels = [f"subnet{i + 1}" for i in range(len(section.private_subnet_ids))]
            zone_node_label = SUBNET_LABEL
        specs = gpu_pool_specs(cfg, {p.name: {CAPACITY_LABEL: p.capacity} for p in cfg.gpu_pools})
        specs = [replace(spec, zones=tuple(z for z, _, _ in zonal_groups(pool.min_nodes, pool.max_nodes, zone_labels)))
                 for pool, spec in zip(cfg.gpu_pools, specs)]
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(parent=self))
        # The default StorageClass AwsCluster creates in the cluster (the same arguments), through the engine.
        storage_class = k8s.storage.v1.StorageClass(f"{name}-storage-class-gp3", **GP3_STORAGE_CLASS,
                                                    opts=pulumi.ResourceOptions(parent=self, provider=provider))
        self.handle = ClusterHandle(
            cloud="aws", name=cfg.name_prefix, kubeconfig=self.kubeconfig, provider=provider, gpu_pools=specs,
            default_storage_class=STORAGE_CLASS,
            checkpoint=CheckpointStore(
                url=f"s3://{cfg.name_prefix}-checkpoints-rehearsal",
                service_account_annotations={"eks.amazonaws.com/role-arn":
                                             f"arn:aws:iam::{STANDIN_AWS_ACCOUNT}:role/{cfg.name_prefix}-trainer-rehearsal"},
                env={"AWS_REGION": section.region}),
            gpu_device_plugin_installed=False, ready=[storage_class], endpoint=None,
            system_zones=tuple(zone_labels), zone_label=zone_node_label or "topology.kubernetes.io/zone",
            system_pool=SystemPoolSpec(section.system_pool.instance_type, section.system_pool.min_nodes,
                                       section.system_pool.max_nodes))
        self.register_outputs({})


class LinodeClusterShim(pulumi.ComponentResource):
    """LinodeKubeadmCluster's add-ons and handle, with the rehearsal's API server behind its Kubernetes provider."""

    def __init__(self, name: str, cfg: Any, kubeconfig: str):
        import pulumi_kubernetes as k8s

        from gpu_platform.components.linode.addons import LinodeAddons
        from gpu_platform.components.linode.cluster import addons_args, checkpoint_store, cluster_handle
        from gpu_platform.config.checks.linode import node_groups_deployed
        from gpu_platform.config.linode import BUCKET_SUFFIX_LENGTH, bucket_label

        super().__init__("gpu-platform:rehearsal:LinodeClusterShim", name, None, None)
        section = cfg.linode
        assert len(STANDIN_BUCKET_SUFFIX) == BUCKET_SUFFIX_LENGTH
        self.kubeconfig = pulumi.Output.secret(kubeconfig)
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(parent=self))
        installed = LinodeAddons(f"{name}-addons", addons_args(cfg, pulumi.Output.secret(STANDIN_LINODE_TOKEN)),
                                 opts=pulumi.ResourceOptions(parent=self, provider=provider))
        access, secret = STANDIN_BUCKET_KEY
        checkpoint = checkpoint_store(section.region, bucket_label(cfg.name_prefix, cfg.owner, STANDIN_BUCKET_SUFFIX),
                                      f"{section.region}-1.linodeobjects.com", access, pulumi.Output.secret(secret))
        self.handle = cluster_handle(cfg, kubeconfig=self.kubeconfig, provider=provider, checkpoint=checkpoint,
                                     ready=list(installed.ready), endpoint=pulumi.Output.from_input(_server(kubeconfig)),
                                     scaler_deployed=node_groups_deployed(cfg))
        self.register_outputs({})


def _server(kubeconfig: str) -> str:
    """The API server's URL in a kubeconfig (JSON or YAML)."""
    import yaml

    doc = yaml.safe_load(kubeconfig)
    return doc["clusters"][0]["cluster"]["server"]


def cluster_objects(cfg: Any) -> list[dict]:
    """What a stack's cluster has before the program runs that no release renders and the rehearsal must supply: on
    Linode with Cilium, the CRDs cilium-operator registers when it starts (the program's metadata-deny policy is one
    of them), for the CNI chart the program pins (raises binaries.MissingBinaries when their program is not built)."""
    if getattr(cfg, "cloud", None) != "linode" or cfg.linode.cni != "cilium":
        return []
    from gpu_platform.components.linode.cluster import addons_args
    from gpu_platform.data import linode_versions
    from gpu_platform.rehearsal import cilium

    args = addons_args(cfg, "")  # the chart LinodeAddons installs: the same arguments, the token unused here
    chart = linode_versions.cni_chart(args.cni, args.kubernetes_minor, also=args.running_minor)
    assert chart is not None, "validated by gpu_platform.config.stack (linode.cni)"
    return cilium.operator_crds(chart.version)


SHIMS = {"gcp": GkeClusterShim, "aws": EksClusterShim, "linode": LinodeClusterShim}


def install(cloud: str) -> None:
    """Replace `create_cluster` and `create_billing_alerts` of `cloud`'s module with the shim's (in this process)."""
    if cloud not in SHIMMED_CLOUDS:
        raise ValueError(f"no cloud-layer shim for cloud {cloud!r}; shimmed: {', '.join(SHIMMED_CLOUDS)}")
    from gpu_platform.components.clouds import cloud_module

    module = cloud_module(cloud)
    kubeconfig = open(os.environ["KUBECONFIG"]).read()

    def create_cluster(cfg: Any) -> Any:
        return replace(SHIMS[cloud](cfg.name_prefix, cfg, kubeconfig).handle, training_image=None)

    module.create_cluster = create_cluster  # type: ignore[attr-defined]
    module.create_billing_alerts = lambda cfg: []  # type: ignore[attr-defined]
