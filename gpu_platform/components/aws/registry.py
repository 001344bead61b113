"""The stack's own ECR repositories, one per image the program builds (gpu_platform/components/images.py).

Each repository: immutable tags (a tag once pushed always means the same image), scan on push (basic
scanning, no charge), AES-256 encryption at rest, and a lifecycle policy that keeps the newest
KEEP_IMAGES pushes (the program deploys the newest one). `pulumi destroy` deletes the repositories with
their images (force_delete): they are rebuilt from the repository on the next `pulumi up`.

The build pushes with the deployer's own Docker credentials (`aws ecr get-login-password | docker login
--username AWS --password-stdin <account>.dkr.ecr.<region>.amazonaws.com`, which deploy.yml runs; docs/
quickstart-aws.md, Images): the program passes no registry login, so no ECR authorization token is in the
stack's state (a preview token decrypts the state; docs/state-and-secrets.md). The nodes pull with their role's AmazonEC2ContainerRegistryReadOnly
(eks.py NODE_POLICIES).
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

import pulumi
from pulumi_aws import ecr

from gpu_platform.components.images import KEEP_IMAGES, TAG_PREFIX, ImageSource, build


def repository_name(prefix: str, image: str) -> str:
    """<cluster>/<image>: ECR names allow lowercase letters, digits and . _ - / (2-256 characters)."""
    return f"{prefix}/{image}"


def lifecycle_policy(keep: int = KEEP_IMAGES) -> dict:
    """Expire the program's pushes beyond the newest `keep` (tags TAG_PREFIX*: only what the program pushed).
    Untagged manifests are left alone: the children of a pushed image index (its platform image and BuildKit's
    provenance attestation) are untagged, and the index needs them."""
    return {"rules": [{
        "rulePriority": 1,
        "description": f"keep the newest {keep} images the program pushed",
        "selection": {"tagStatus": "tagged", "tagPrefixList": [TAG_PREFIX], "countType": "imageCountMoreThan",
                      "countNumber": keep},
        "action": {"type": "expire"},
    }]}


class EcrRegistry(pulumi.ComponentResource):
    """Makes a repository per image on demand and builds the image into it (`image`)."""

    def __init__(self, name: str, prefix: str, tags: Mapping[str, str], provider: pulumi.ProviderResource,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:aws:ImageRegistry", name, None, opts)
        self._name, self._prefix, self._tags, self._provider = name, prefix, dict(tags), provider
        self.register_outputs({})

    def image(self, source: ImageSource) -> pulumi.Output[str]:
        """The image built from `source` and pushed here: <account>.dkr.ecr.<region>.amazonaws.com/<prefix>/<name>@sha256:..."""
        child = pulumi.ResourceOptions(parent=self, provider=self._provider)
        repo = ecr.Repository(
            f"{self._name}-{source.name}",
            name=repository_name(self._prefix, source.name),
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            encryption_configurations=[{"encryption_type": "AES256"}],
            force_delete=True,
            tags=self._tags,
            opts=child)
        policy = ecr.LifecyclePolicy(f"{self._name}-{source.name}-lifecycle", repository=repo.name,
                                     policy=json.dumps(lifecycle_policy()), opts=child)
        return build(f"{self._name}-{source.name}-image", source, repo.repository_url, None,
                     depends_on=[repo, policy], parent=self)
