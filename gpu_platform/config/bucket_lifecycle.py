"""What `pulumi destroy` does with the checkpoint bucket: `gpu-platform:checkpointBucket.onDestroy`.

Every cloud's checkpoint bucket is versioned (AWS, Linode) or holds objects the provider will not
delete on its own, so a plain delete fails once a job has written a checkpoint. The stack chooses:

- `retain` (default): Pulumi's `retain_on_delete`. `pulumi destroy` drops the bucket from the stack
  without calling the provider's delete, so destroy succeeds and the checkpoints (and the bucket's
  settings) stay, billed, until someone deletes the bucket by hand.
- `delete`: the provider empties the bucket first (AWS S3 / GCS `force_destroy`, pulumi-linode's
  provider-level `obj_bucket_force_delete`: every object and every version) and deletes it. Not
  recoverable.

Both are read by the engine from the stack's state, so a change takes a `pulumi up` before it applies
to a `pulumi destroy` (the AWS provider documents the same for `force_destroy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OnDestroy = Literal["retain", "delete"]
ON_DESTROY_CHOICES: tuple[str, ...] = ("retain", "delete")


@dataclass(frozen=True)
class BucketDeletion:
    retain_on_delete: bool  # the resource option on the bucket (and, on AWS, its settings resources)
    force_destroy: bool  # the provider's empty-then-delete switch

    @classmethod
    def of(cls, on_destroy: str) -> "BucketDeletion":
        if on_destroy not in ON_DESTROY_CHOICES:
            raise ValueError(f"checkpointBucket.onDestroy must be one of {', '.join(ON_DESTROY_CHOICES)}, not {on_destroy!r}")
        return cls(retain_on_delete=on_destroy == "retain", force_destroy=on_destroy == "delete")
