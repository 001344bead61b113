"""The checkpoint bucket and the Google service account training pods use to reach it.

Pods never hold a key: the Kubernetes service account `training/trainer` (created by the platform layer
with the annotation this component returns) impersonates the Google service account through Workload
Identity, and that account may read and write objects in this one bucket only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import pulumi
from pulumi_gcp import serviceaccount, storage

from gpu_platform.config.bucket_lifecycle import BucketDeletion
from gpu_platform.config.names import account_id, bucket_name
from gpu_platform.components.cluster import TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT

OBJECT_ROLE = "roles/storage.objectUser"
WORKLOAD_IDENTITY_ROLE = "roles/iam.workloadIdentityUser"
WORKLOAD_IDENTITY_ANNOTATION = "iam.gke.io/gcp-service-account"
# Multipart/resumable uploads a preempted trainer left behind cost storage until aborted.
ABORT_INCOMPLETE_UPLOADS_DAYS = 1


def workload_identity_member(project: str, namespace: str = TRAINING_NAMESPACE,
                             service_account: str = TRAINING_SERVICE_ACCOUNT) -> str:
    return f"serviceAccount:{project}.svc.id.goog[{namespace}/{service_account}]"


def lifecycle_rules(retention_days: int) -> list[dict[str, Any]]:
    """Old checkpoint versions go after `retention_days`; live objects are never deleted by age (a job
    suspended for longer, or the final weights, must survive). With versioning on, an overwritten or
    deleted object becomes noncurrent ("ARCHIVED"): the same semantics as the S3 bucket's
    noncurrent-version expiration."""
    return [
        {"action": {"type": "Delete"},
         "condition": {"days_since_noncurrent_time": retention_days, "with_state": "ARCHIVED"}},
        {"action": {"type": "AbortIncompleteMultipartUpload"}, "condition": {"age": ABORT_INCOMPLETE_UPLOADS_DAYS}},
    ]


@dataclass(frozen=True)
class CheckpointBucketArgs:
    project: str
    region: str
    resource_prefix: str
    retention_days: int
    labels: Mapping[str, str]
    deletion: BucketDeletion  # checkpointBucket.onDestroy: kept by Pulumi, or emptied and deleted by GCS


class CheckpointBucket(pulumi.ComponentResource):
    """Outputs: url (gs://…), bucket_name, service_account_email."""

    def __init__(self, name: str, args: CheckpointBucketArgs, depends_on_cluster: pulumi.Resource,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:gcp:CheckpointBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = storage.Bucket(
            f"{name}-bucket",
            name=bucket_name(args.project, args.resource_prefix),
            project=args.project,
            # Same region as the GPUs: no cross-region egress on every checkpoint.
            location=args.region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            # Overwritten checkpoints stay recoverable for retention_days (lifecycle_rules).
            versioning={"enabled": True},
            lifecycle_rules=lifecycle_rules(args.retention_days),
            # force_destroy: GCS deletes every object (then the bucket); otherwise it refuses a non-empty bucket.
            force_destroy=args.deletion.force_destroy,
            labels=dict(args.labels),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=args.deletion.retain_on_delete),
        )
        self.service_account = serviceaccount.Account(
            f"{name}-gsa",
            project=args.project,
            account_id=account_id(args.resource_prefix, "trainer"),
            display_name=f"gpu-platform {args.resource_prefix}: training jobs (checkpoints)",
            opts=child,
        )
        self.object_access = storage.BucketIAMMember(
            f"{name}-object-user",
            bucket=self.bucket.name,
            role=OBJECT_ROLE,
            member=self.service_account.member,
            opts=child,
        )
        # The identity pool <project>.svc.id.goog exists once a Workload Identity cluster does.
        self.workload_identity = serviceaccount.IAMMember(
            f"{name}-workload-identity",
            service_account_id=self.service_account.name,
            role=WORKLOAD_IDENTITY_ROLE,
            member=workload_identity_member(args.project),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[depends_on_cluster]),
        )
        self.url = self.bucket.url
        self.service_account_email = self.service_account.email
        self.register_outputs({"url": self.bucket.url, "serviceAccountEmail": self.service_account.email})
