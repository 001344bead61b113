"""The checkpoint bucket and the IAM role the training service account assumes (IRSA).

Encrypted, versioned (an interrupted write never destroys the last good checkpoint), public access
blocked, TLS-only, old versions and abandoned multipart uploads expire.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

import pulumi
from pulumi_aws import iam, s3

from gpu_platform.components.aws.iam import irsa_role, policy, statement
from gpu_platform.config.bucket_lifecycle import BucketDeletion
from gpu_platform.components.cluster import TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT


def tls_only_policy(bucket_arn: str) -> dict:
    return {"Version": "2012-10-17", "Statement": [{
        "Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }]}


def trainer_policy(bucket_arn: str) -> dict:
    return policy(
        statement(["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"], [bucket_arn], sid="Bucket"),
        statement(["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                   "s3:ListMultipartUploadParts"], [f"{bucket_arn}/*"], sid="Objects"),
    )


@dataclass
class CheckpointBucketArgs:
    cluster_name: str
    retention_days: int
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer_url: pulumi.Input[str]
    tags: Mapping[str, str]
    deletion: BucketDeletion  # checkpointBucket.onDestroy


class CheckpointBucket(pulumi.ComponentResource):
    """Outputs: url (s3://...), bucket, role_arn."""

    def __init__(self, name: str, args: CheckpointBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:CheckpointBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # onDestroy retain: the bucket and the settings that keep it private, encrypted and TLS-only stay
        # as they are (deleting the public access block or the policy would loosen a bucket that keeps data).
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=args.deletion.retain_on_delete)
        tags = dict(args.tags)
        # force_destroy empties every object version and delete marker before deleting (onDestroy delete).
        bucket = s3.Bucket(f"{name}-bucket", bucket_prefix=f"{args.cluster_name}-checkpoints-",
                           force_destroy=args.deletion.force_destroy, tags=tags, opts=kept)
        s3.BucketOwnershipControls(f"{name}-ownership", bucket=bucket.id, rule={"object_ownership": "BucketOwnerEnforced"},
                                   opts=kept)
        block = s3.BucketPublicAccessBlock(f"{name}-public-access-block", bucket=bucket.id, block_public_acls=True,
                                           block_public_policy=True, ignore_public_acls=True, restrict_public_buckets=True,
                                           opts=kept)
        s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption", bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}, "bucket_key_enabled": True}],
            opts=kept)
        versioning = s3.BucketVersioning(f"{name}-versioning", bucket=bucket.id,
                                         versioning_configuration={"status": "Enabled"}, opts=kept)
        s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle", bucket=bucket.id,
            rules=[
                {"id": "expire-old-checkpoint-versions", "status": "Enabled", "filter": {},
                 "noncurrent_version_expiration": {"noncurrent_days": args.retention_days}},
                {"id": "abort-incomplete-uploads", "status": "Enabled", "filter": {},
                 "abort_incomplete_multipart_upload": {"days_after_initiation": 7}},
            ],
            opts=pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(depends_on=[versioning])))
        s3.BucketPolicy(f"{name}-policy", bucket=bucket.id, policy=bucket.arn.apply(lambda a: json.dumps(tls_only_policy(a))),
                        opts=pulumi.ResourceOptions.merge(kept, pulumi.ResourceOptions(depends_on=[block])))

        role = irsa_role(f"{name}-trainer-role", args.oidc_provider_arn, args.oidc_issuer_url, TRAINING_NAMESPACE,
                         TRAINING_SERVICE_ACCOUNT, tags, child)
        iam.RolePolicy(f"{name}-trainer-policy", role=role.id, policy=bucket.arn.apply(lambda a: json.dumps(trainer_policy(a))),
                       opts=child)
        self.bucket = bucket.bucket
        self.url: pulumi.Output[str] = bucket.bucket.apply(lambda b: f"s3://{b}")
        self.role_arn: pulumi.Output[str] = role.arn
        self.register_outputs({"url": self.url, "roleArn": role.arn})
