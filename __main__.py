"""gpu-platform: typed config -> cluster for the chosen cloud -> ML platform -> guardrails -> exports."""

import pulumi

from gpu_platform.components.clouds import cloud_module
from gpu_platform.config.stack import load_from_pulumi
from gpu_platform.components.platform import MlPlatform, PlatformArgs

cfg = load_from_pulumi()
cloud = cloud_module(cfg.cloud)

cluster = cloud.create_cluster(cfg)
platform = MlPlatform("platform", PlatformArgs(cfg=cfg, cluster=cluster))
billing_alerts = cloud.create_billing_alerts(cfg)

pulumi.export("cloud", cfg.cloud)
pulumi.export("clusterName", cluster.name)
pulumi.export("kubeconfig", cluster.kubeconfig)
if cluster.endpoint is not None:
    pulumi.export("apiEndpoint", cluster.endpoint)
pulumi.export("checkpointBucket", cluster.checkpoint.url)
# The example training image by digest (built at `pulumi up` or published): docs/first-training-job.md runs it.
if cluster.training_image is not None:
    pulumi.export("trainingImage", cluster.training_image)
pulumi.export("platformParts", platform.parts)
pulumi.export("trainingQueue", platform.local_queue)
pulumi.export("gpuQuota", platform.gpu_quota)
pulumi.export("gpuPools", [
    {"name": p.name, "instanceType": p.instance_type, "gpusPerNode": p.gpus_per_node,
     "minNodes": p.min_nodes, "maxNodes": p.max_nodes, "capacity": p.capacity}
    for p in cluster.gpu_pools
])

# What this stack costs (catalog prices, or a kubernetes stack's own node prices; 730 h/month): the same figures
# preflight prints. Without node prices (cloud kubernetes) there is no figure, and the export says what is unpriced;
# without a price for the stack's region the export says why (preflight's budget verdict refuses it, exit 3).
from gpu_platform.config.derived import stack_catalog  # noqa: E402
from gpu_platform.costs.estimator import RegionPriceRefused, StackShape, estimate  # noqa: E402

try:
    cost = estimate(StackShape.from_config(cfg), stack_catalog(cfg))
    pulumi.export("costEstimate", {
        "idleMonthlyUsd": round(cost.idle_monthly_usd, 2) if cost.priced else None,
        "fullCapacityMonthlyUsd": round(cost.full_monthly_usd, 2) if cost.priced else None,
        "usdPerGpuHourAtFullUse": None if cost.usd_per_gpu_hour is None or not cost.priced else round(cost.usd_per_gpu_hour, 4),
        "monthlyBudgetUsd": cfg.monthly_budget_usd,
        **({} if cost.priced else {"unpriced": list(cost.unpriced)}),
    })
except RegionPriceRefused as exc:
    pulumi.export("costEstimate", {"refused": str(exc), "monthlyBudgetUsd": cfg.monthly_budget_usd})
