"""The stack's own Artifact Registry Docker repository, where `pulumi up` pushes the images it builds
(gpu_platform/components/images.py): <region>-docker.pkg.dev/<project>/<prefix>-images/<image>.

Immutable tags (a tag once pushed always means the same image), cleanup policies that keep the newest
KEEP_IMAGES versions of each image and delete the rest after 30 days, vulnerability scanning as the project
has it (INHERITED: on where the Container Scanning API is enabled, a charge per scanned image). The nodes pull
with their service account's roles/artifactregistry.reader (cluster.py NODE_ROLES). The build pushes with the
deployer's own Docker credentials: `gcloud auth configure-docker <region>-docker.pkg.dev` registers gcloud as
the host's credential helper (deploy.yml does it; docs/quickstart-gcp.md, Images). The program passes no
registry login, so no access token is in the stack's state (a preview token decrypts the state;
docs/state-and-secrets.md).
"""

from __future__ import annotations

from typing import Mapping, Optional

import pulumi
from pulumi_gcp import artifactregistry

from gpu_platform.components.images import KEEP_IMAGES, ImageSource, build

CLEANUP_AFTER = "2592000s"  # 30 days: versions beyond the newest KEEP_IMAGES go after this long


def repository_id(prefix: str) -> str:
    """<prefix>-images: lowercase letters, digits and hyphens, starting with a letter (prefixes are)."""
    return f"{prefix}-images"


def registry_host(region: str) -> str:
    return f"{region}-docker.pkg.dev"


def cleanup_policies(keep: int = KEEP_IMAGES) -> list[dict]:
    """KEEP wins over DELETE in Artifact Registry: the newest `keep` versions of each image stay whatever their age."""
    return [
        {"id": "keep-newest", "action": "KEEP", "most_recent_versions": {"keep_count": keep}},
        {"id": "delete-older", "action": "DELETE", "condition": {"tag_state": "ANY", "older_than": CLEANUP_AFTER}},
    ]


class ArtifactRegistry(pulumi.ComponentResource):
    """One Docker repository for the stack's images; `image` builds one into it."""

    def __init__(self, name: str, project: str, region: str, prefix: str, labels: Mapping[str, str],
                 provider: pulumi.ProviderResource, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:gcp:ImageRegistry", name, None, opts)
        self._name, self._provider = name, provider
        self.repository = artifactregistry.Repository(
            f"{name}-repository",
            project=project,
            location=region,
            repository_id=repository_id(prefix),
            format="DOCKER",
            description=f"gpu-platform {prefix}: images built from the gpu-platform repository at `pulumi up`",
            docker_config={"immutable_tags": True},
            cleanup_policies=cleanup_policies(),
            cleanup_policy_dry_run=False,
            vulnerability_scanning_config={"enablement_config": "INHERITED"},
            labels=dict(labels),
            opts=pulumi.ResourceOptions(parent=self, provider=provider))
        self.register_outputs({"registryUri": self.repository.registry_uri})

    def image(self, source: ImageSource) -> pulumi.Output[str]:
        """<region>-docker.pkg.dev/<project>/<prefix>-images/<name>@sha256:..."""
        address = self.repository.registry_uri.apply(lambda uri: f"{uri}/{source.name}")
        return build(f"{self._name}-{source.name}", source, address, None, depends_on=[self.repository],
                     parent=self)
