"""gpu-platform: typed config -> cluster for the chosen cloud -> ML platform -> guardrails -> exports."""

import pulumi

from components.clouds import cloud_module
from components.config import load_from_pulumi

cfg = load_from_pulumi()
cloud = cloud_module(cfg.cloud)

cluster = cloud.create_cluster(cfg)
billing_alerts = cloud.create_billing_alerts(cfg)

pulumi.export("cloud", cfg.cloud)
pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", cluster.kubeconfig)
if cluster.endpoint is not None:
    pulumi.export("apiEndpoint", cluster.endpoint)
pulumi.export("checkpointBucket", cluster.checkpoint.url)
pulumi.export("gpuPools", [
    {"name": p.name, "instanceType": p.instance_type, "gpusPerNode": p.gpus_per_node,
     "minNodes": p.min_nodes, "maxNodes": p.max_nodes, "capacity": p.capacity}
    for p in cluster.gpu_pools
])
