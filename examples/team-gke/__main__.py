"""The vision team's program: gpu-platform's GKE cluster and ML platform, plus the team's own bucket.

What reuse looks like: the team owns this Pulumi project (its name, its stacks, its other resources)
and takes the cluster, the platform and the guardrails from the `gpu_platform` package, configured by
the same validated `gpu-platform:` keys as the main program. Plan it offline with
`gpu-platform-preflight dev` from this folder.
"""

import pulumi
import pulumi_gcp as gcp

from gpu_platform.components.cluster import common_labels
from gpu_platform.config.stack import load_from_pulumi
from gpu_platform.components.gcp import create_billing_alerts, create_cluster
from gpu_platform.components.platform import MlPlatform, PlatformArgs

cfg = load_from_pulumi()  # every problem in the stack file reported at once, before any resource
if cfg.cloud != "gcp" or cfg.gcp is None:
    raise pulumi.RunError(f"this program builds on GKE: set gpu-platform:cloud to gcp (got {cfg.cloud})")

cluster = create_cluster(cfg)
platform = MlPlatform("platform", PlatformArgs(cfg=cfg, cluster=cluster))
create_billing_alerts(cfg)

# The team's own resource, labelled like the platform's so the budget and the policy pack see it.
datasets = gcp.storage.Bucket(
    "datasets",
    project=cfg.gcp.project,
    location=cfg.gcp.region.upper(),  # beside the GPUs: no cross-region egress while training
    uniform_bucket_level_access=True,
    public_access_prevention="enforced",
    labels=common_labels(cfg),
)

pulumi.export("kubeconfig", cluster.kubeconfig)
pulumi.export("trainingQueue", platform.local_queue)
pulumi.export("datasetsBucket", datasets.url)
