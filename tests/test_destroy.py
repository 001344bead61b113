"""`pulumi destroy` succeeds on every cloud by a stated choice (docs/destroy.md).

The checkpoint bucket holds objects (and, on AWS and Linode, object versions) once a job has run, and
no provider deletes a non-empty bucket unless told to. `checkpointBucket.onDestroy` chooses: `retain`
(default) leaves the bucket out of the provider's hands (`retainOnDelete`, recorded by preflight's
monitor from the RegisterResource request), `delete` turns on the provider's empty-then-delete switch.
Volumes: the Linode default StorageClass deletes a volume with its claim.
"""

from __future__ import annotations

import pytest

from gpu_platform.config.bucket_lifecycle import BucketDeletion
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from tests.conftest import plan_config, plan_stack, stack_config

AWS_BUCKET = "aws:s3/bucket:Bucket"
# The AWS settings resources that keep a retained bucket private, encrypted, TLS-only and expiring old versions.
AWS_BUCKET_SETTINGS = ["aws:s3/bucketOwnershipControls:BucketOwnershipControls",
                       "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
                       "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
                       "aws:s3/bucketVersioning:BucketVersioning",
                       "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration",
                       "aws:s3/bucketPolicy:BucketPolicy"]
GCS_BUCKET = "gcp:storage/bucket:Bucket"
LINODE_BUCKET = "linode:index/objectStorageBucket:ObjectStorageBucket"
LINODE_PROVIDER = "pulumi:providers:linode"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
STACKS = {"aws": "aws-prod", "gcp": "gcp-prod", "linode": "linode-dev"}


def _delete_variant(cloud: str):
    config = stack_config(STACKS[cloud])
    config["gpu-platform:checkpointBucket"] = {"onDestroy": "delete"}
    return plan_config(config)


@pytest.fixture(scope="module")
def retained():
    return {cloud: plan_stack(stack) for cloud, stack in STACKS.items()}


@pytest.fixture(scope="module")
def deleted():
    return {cloud: _delete_variant(cloud) for cloud in STACKS}


def test_the_choice_maps_to_one_switch_each():
    assert BucketDeletion.of("retain") == BucketDeletion(retain_on_delete=True, force_destroy=False)
    assert BucketDeletion.of("delete") == BucketDeletion(retain_on_delete=False, force_destroy=True)
    with pytest.raises(ValueError, match="retain, delete"):
        BucketDeletion.of("keep")


def test_default_is_retain_and_a_bad_value_names_the_key():
    prefix = "gpu-platform:"
    base = {k[len(prefix):]: v for k, v in stack_config("linode-dev").items() if k.startswith(prefix)}
    assert "checkpointBucket" not in base
    assert parse_config(base, "t").checkpoint_bucket.on_destroy == "retain"
    # As the CLI hands a structured key to the program: a JSON string.
    assert parse_config({**base, "checkpointBucket": '{"onDestroy": "delete"}'}, "t").checkpoint_bucket.on_destroy == "delete"
    with pytest.raises(ConfigError) as err:
        parse_config({**base, "checkpointBucket": {"onDestroy": "keep"}}, "t", source="stacks/Pulumi.t.yaml")
    text = str(err.value)
    assert "checkpointBucket.onDestroy" in text and "'retain'" in text and "'delete'" in text
    assert "stacks/Pulumi.t.yaml" in text


def test_aws_retain_keeps_the_bucket_and_its_settings_and_never_empties_it(retained):
    plan = retained["aws"]
    bucket = plan.one(AWS_BUCKET)
    assert bucket.options["retainOnDelete"] is True and bucket.inputs["forceDestroy"] is False
    for kind in AWS_BUCKET_SETTINGS:
        assert plan.one(kind).options["retainOnDelete"] is True, kind
    # The trainer role trusts the cluster's OIDC provider, which destroy removes: it goes too.
    assert plan.one("aws:iam/role:Role", "trainer").options["retainOnDelete"] is False


def test_aws_delete_empties_every_version_then_deletes(deleted):
    plan = deleted["aws"]
    bucket = plan.one(AWS_BUCKET)
    assert bucket.options["retainOnDelete"] is False and bucket.inputs["forceDestroy"] is True
    for kind in AWS_BUCKET_SETTINGS:
        assert plan.one(kind).options["retainOnDelete"] is False, kind


def test_gcp_retain_and_delete(retained, deleted):
    kept = retained["gcp"].one(GCS_BUCKET)
    assert kept.options["retainOnDelete"] is True and kept.inputs["forceDestroy"] is False
    gone = deleted["gcp"].one(GCS_BUCKET)
    assert gone.options["retainOnDelete"] is False and gone.inputs["forceDestroy"] is True
    # The cluster's own deletion protection is a separate, production-only switch (docs/destroy.md).
    assert retained["gcp"].one("gcp:container/cluster:Cluster").inputs["deletionProtection"] is True


def test_linode_retain_and_delete_through_the_bucket_provider(retained, deleted):
    kept, gone = retained["linode"], deleted["linode"]
    assert kept.one(LINODE_BUCKET, "checkpoints").options["retainOnDelete"] is True
    assert gone.one(LINODE_BUCKET, "checkpoints").options["retainOnDelete"] is False
    # pulumi-linode has no per-bucket force_destroy: the provider that manages the bucket carries it
    # (provider inputs travel as JSON strings).
    objects_kept = kept.one(LINODE_PROVIDER, "objects")
    objects_gone = gone.one(LINODE_PROVIDER, "objects")
    assert kept.one(LINODE_BUCKET, "checkpoints").provider.startswith(objects_kept.urn)
    assert objects_kept.inputs["objBucketForceDelete"] == "false"
    assert objects_gone.inputs["objBucketForceDelete"] == "true"


def test_linode_volumes_are_deleted_with_their_claims(retained):
    sc = retained["linode"].one(STORAGE_CLASS)
    assert sc.inputs["reclaimPolicy"] == "Delete"
    # reclaimPolicy is immutable: an existing cluster's class is replaced under the same name.
    assert sc.options["deleteBeforeReplace"] is True
