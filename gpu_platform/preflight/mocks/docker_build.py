"""pulumi-docker-build answers: what `docker_build.Image` reports after a push, so the program's applies
(the image by digest in a Deployment, the trainingImage output) run offline.

Shapes from the provider's own source (github.com/pulumi/pulumi-docker-build v0.0.22,
provider/internal/image.go): `digest` is the pushed manifest's `sha256:<64 hex>`; `ref` is one pushed tag
with that digest, `<name>:<tag>@sha256:<64 hex>` (addDigest: `latest` when the tag has none);
`contextHash` is the hex SHA-256 of the build context (context.go hashBuildContext). The mock digest is
derived from the pushed tags, which carry the image's source hash (components/images.py source_tag): new
sources, new digest, as a real build gives.
"""

from __future__ import annotations

import hashlib
from typing import Any


def _image(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    tags = [t for t in inputs.get("tags") or [] if isinstance(t, str)]
    digest = "sha256:" + hashlib.sha256(("\n".join(tags) or name).encode()).hexdigest()
    out: dict[str, Any] = {"digest": digest,
                           "contextHash": hashlib.sha256(repr(inputs.get("context")).encode()).hexdigest()}
    if inputs.get("push") and tags:
        name, _, tag = tags[0].rpartition(":")
        # a ':' after the last '/' separates the tag; one before it is a registry port
        out["ref"] = f"{name}:{tag}@{digest}" if name and "/" not in tag else f"{tags[0]}:latest@{digest}"
    return out


RESOURCES = {
    "docker-build:index:Image": _image,
}
