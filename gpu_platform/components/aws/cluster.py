"""The AwsCluster component: network, EKS, GPU groups and what keeps them cheap and safe."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import replace

import pulumi
import pulumi_aws as aws

from gpu_platform.components.aws.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from gpu_platform.components.aws.billing import IdleGpuAlarms, IdleGpuAlarmsArgs
from gpu_platform.components.aws.bucket import CheckpointBucket, CheckpointBucketArgs
from gpu_platform.config.bucket_lifecycle import BucketDeletion
from gpu_platform.config.derived import instance_types_of, on_demand_split
from gpu_platform.components.aws.eks import STORAGE_CLASS, EksCluster, EksClusterArgs
from gpu_platform.components.aws.gpu_asg import CAPACITY_REBALANCE, GpuNodeGroup, GpuNodeGroupArgs
from gpu_platform.config.names import asg_name, zonal_groups
from gpu_platform.components.aws.network import Network, NetworkArgs, default_zones, existing_vpc_s3_endpoint
from gpu_platform.components.aws.nth import NodeTerminationHandler, NodeTerminationHandlerArgs, termination_timing
from gpu_platform.components.aws.protection import ScaleInProtection, ScaleInProtectionArgs
from gpu_platform.components.aws.registry import EcrRegistry
from gpu_platform.components.images import SCALE_IN_PROTECTION, training_image
from gpu_platform.components.aws.scale_down import scale_down_timing
from gpu_platform.components.cluster import (SUBNET_LABEL, CheckpointStore, ClusterHandle, SystemPoolSpec, common_labels,
                                             gpu_pool_specs)

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig

CAPACITY_LABEL = "gpu-platform.io/capacity"


class AwsCluster(pulumi.ComponentResource):
    """The whole EKS side of a stack. Outputs: cluster_name, endpoint, kubeconfig (secret),
    checkpoint_url, asg_names; `handle` is the ClusterHandle."""

    def __init__(self, name: str, cfg: "StackConfig", opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:Cluster", name, None, opts)
        section = cfg.aws
        assert section is not None, "validated by gpu_platform.config.stack"
        cluster_name = cfg.name_prefix
        region = section.region
        tags = common_labels(cfg)  # with `cluster`: the tag the stack budget counts (billing.py)
        provider = aws.Provider(f"{name}-aws", region=region, opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, providers={"aws": provider})

        if section.new_vpc:
            zones = list(section.availability_zones) or default_zones(provider)
            net = Network(f"{name}-network", NetworkArgs(cluster_name, section.effective_vpc_cidr, zones,
                                                         section.nat_gateways == "per-az", tags, region), opts=child)
            subnet_ids = net.private_subnet_ids
        else:
            subnet_ids = list(section.private_subnet_ids)
            if section.s3_gateway_endpoint == "create":
                existing_vpc_s3_endpoint(f"{name}-s3-endpoint", section.vpc_id, subnet_ids, region, cluster_name, tags,
                                         child)
        # One GPU group per pool and zone (config/names.zonal_groups): the zone names of a new VPC; an
        # existing VPC's private subnets are one zone each (EC2 subnets never span zones), named by position,
        # and every node there carries its subnet (SUBNET_LABEL): the same zone guarantees by that label.
        zone_labels = zones if section.new_vpc else [f"subnet{i + 1}" for i in range(len(subnet_ids))]
        subnet_of = dict(zip(zone_labels, subnet_ids))
        zone_node_label = None if section.new_vpc else SUBNET_LABEL

        public_cidrs = [] if section.endpoint_private_only else list(cfg.admin_cidrs)
        eks = EksCluster(f"{name}-eks", EksClusterArgs(
            cluster_name=cluster_name, region=region, kubernetes_version=cfg.kubernetes_version, subnet_ids=subnet_ids,
            public_access_cidrs=public_cidrs, admin_principal_arns=section.admin_principal_arns,
            system_instance_type=section.system_pool.instance_type, system_min=section.system_pool.min_nodes,
            system_max=section.system_pool.max_nodes, log_retention_days=section.log_retention_days, tags=tags,
            support_type=section.support_type, system_subnets=list(subnet_of.items()),
            cluster_creator_arn=section.cluster_creator_arn, zone_node_label=zone_node_label), opts=child)

        specs = gpu_pool_specs(cfg, {p.name: {CAPACITY_LABEL: p.capacity} for p in cfg.gpu_pools})
        # The zones (a new VPC) or subnets (an existing one, SUBNET_LABEL) each pool has groups in.
        specs = [replace(spec, zones=tuple(z for z, _, _ in zonal_groups(pool.min_nodes, pool.max_nodes, zone_labels)))
                 for pool, spec in zip(cfg.gpu_pools, specs)]
        controller = section.scale_in_controller
        scale_down = scale_down_timing(section.scale_down_grace_minutes * 60, controller_enabled=controller.on)
        termination = termination_timing(section.drain_grace_seconds)
        groups: list[GpuNodeGroup] = []
        names: list[str] = []
        alarm_groups: dict[str, str] = {}
        for i, (pool, spec) in enumerate(zip(cfg.gpu_pools, specs)):
            base, pct = on_demand_split(cfg, i)
            for zone, lo, hi in zonal_groups(pool.min_nodes, pool.max_nodes, zone_labels):
                groups.append(GpuNodeGroup(f"{name}-gpu-{pool.name}-{zone}", GpuNodeGroupArgs(
                    cluster_name=cluster_name, kubernetes_version=cfg.kubernetes_version, spec=spec,
                    instance_types=instance_types_of(cfg, i), on_demand_base=base, on_demand_pct_above_base=pct,
                    approved_on_demand=pool.approved_on_demand, root_volume_gib=section.pool(pool.name).root_volume_gib,
                    subnet_ids=[subnet_of[zone]], security_group_id=eks.cluster_security_group_id,
                    instance_profile_arn=eks.gpu_instance_profile.arn, endpoint=eks.endpoint, ca_data=eks.ca_data,
                    service_cidr=eks.service_cidr, tags=tags, scale_down_unneeded_time=scale_down.unneeded_tag_value(),
                    protect_from_scale_in=controller.on,
                    lifecycle_hook_timeout_seconds=termination.hook_timeout_seconds,
                    depends_on=[eks.gpu_node_access, *eks.ready[:1]], zone=zone, min_size=lo, max_size=hi,
                    extra_node_labels={zone_node_label: zone} if zone_node_label else {}), opts=child))
                names.append(asg_name(cluster_name, pool.name, zone))
                alarm_groups[f"{pool.name}-{zone}"] = names[-1]
        asg_arns = [g.asg_arn for g in groups]

        nth = NodeTerminationHandler(f"{name}-nth", NodeTerminationHandlerArgs(
            cluster_name=cluster_name, region=region, asg_arns=asg_arns, oidc_provider_arn=eks.oidc_provider_arn,
            oidc_issuer_url=eks.oidc_issuer_url, k8s_provider=eks.k8s_provider, tags=tags, timing=termination,
            capacity_rebalance=CAPACITY_REBALANCE), opts=child)
        ClusterAutoscaler(f"{name}-autoscaler", ClusterAutoscalerArgs(
            cluster_name=cluster_name, region=region, kubernetes_version=cfg.kubernetes_version,
            oidc_provider_arn=eks.oidc_provider_arn,
            oidc_issuer_url=eks.oidc_issuer_url, k8s_provider=eks.k8s_provider, tags=tags), opts=child)
        # The project's own images (components/images.py): built into the stack's ECR repositories unless a
        # published digest is given.
        registries: list[EcrRegistry] = []

        def registry() -> EcrRegistry:
            if not registries:
                registries.append(EcrRegistry(f"{name}-images", cluster_name, tags, provider,
                                              opts=pulumi.ResourceOptions(parent=self)))
            return registries[0]

        if controller.on:
            image = (pulumi.Output.from_input(controller.image) if controller.image is not None
                     else registry().image(SCALE_IN_PROTECTION))
            ScaleInProtection(f"{name}-scale-in-protection", ScaleInProtectionArgs(
                region=region, asg_names=names, asg_arns=asg_arns, image=image, timing=scale_down,
                oidc_provider_arn=eks.oidc_provider_arn, oidc_issuer_url=eks.oidc_issuer_url,
                k8s_provider=eks.k8s_provider, tags=tags), opts=child)
        bucket = CheckpointBucket(f"{name}-checkpoints", CheckpointBucketArgs(
            cluster_name=cluster_name, retention_days=section.checkpoint_retention_days,
            oidc_provider_arn=eks.oidc_provider_arn, oidc_issuer_url=eks.oidc_issuer_url, tags=tags,
            deletion=BucketDeletion.of(cfg.checkpoint_bucket.on_destroy)), opts=child)
        IdleGpuAlarms(f"{name}-idle-gpu", IdleGpuAlarmsArgs(
            name_prefix=cluster_name, region=region, asg_names=alarm_groups,
            idle_minutes=cfg.platform.idle_gpu_minutes, util_percent=cfg.platform.idle_gpu_util_percent,
            emails=cfg.alert_emails, tags=tags), opts=pulumi.ResourceOptions(parent=self, providers={"aws": provider},
                                                                             depends_on=groups))

        self.handle = ClusterHandle(
            cloud="aws",
            name=cluster_name,
            kubeconfig=eks.kubeconfig,
            provider=eks.k8s_provider,
            gpu_pools=specs,
            default_storage_class=STORAGE_CLASS,
            checkpoint=CheckpointStore(
                url=bucket.url,
                service_account_annotations={"eks.amazonaws.com/role-arn": bucket.role_arn},
                env={"AWS_REGION": region},
            ),
            # The AL2023 NVIDIA AMI has the driver and container toolkit; the platform layer installs the device plugin.
            gpu_device_plugin_installed=False,
            ready=[*eks.ready, nth.release],
            endpoint=eks.endpoint,
            system_zones=tuple(zone_labels),
            zone_label=zone_node_label or "topology.kubernetes.io/zone",
            system_pool=SystemPoolSpec(section.system_pool.instance_type, section.system_pool.min_nodes,
                                       section.system_pool.max_nodes),
            training_image=training_image(cfg, registry),
        )
        self.register_outputs({"clusterName": cluster_name, "endpoint": eks.endpoint, "kubeconfig": eks.kubeconfig,
                               "checkpointUrl": bucket.url, "asgNames": names})
