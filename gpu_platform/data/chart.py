"""A pinned Helm chart: name, version and repository. Pure data, so the version pins (data/*_versions.py)
and the config checks that read them need neither Pulumi nor the Kubernetes SDK."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Chart:
    chart: str  # chart name, or a full oci:// reference
    version: str
    repo: str | None = None  # classic Helm repository URL; None for OCI charts

    @property
    def ref(self) -> str:
        return self.chart if self.repo is None else f"{self.repo} {self.chart}"

    @property
    def archive_name(self) -> str:
        """`NAME-VERSION.tgz`, as `helm pull` saves it and chart folders hold it (OCI: the last path element)."""
        return f"{self.chart.rstrip('/').rsplit('/', 1)[-1]}-{self.version}.tgz"


# A kustomize remote target of a pinned ref: `github.com/ORG/REPO(.git)/PATH?ref=REF`.
KUSTOMIZE_REMOTE = re.compile(r"^(?:https://)?github\.com/[^/]+/(?P<repo>[^/?]+?)(?:\.git)?/(?P<path>[^?]+)\?ref=(?P<ref>[^&]+)$")


def kustomize_file_name(target: str) -> Optional[str]:
    """`github.com/ORG/REPO(.git)/PATH?ref=REF` -> `REPO-REF-<last element of PATH>.yaml`: the file a chart folder's
    `kustomize/` holds the target's `kustomize build` output in (`preflight charts pull`); None for a local path."""
    m = KUSTOMIZE_REMOTE.match(target.strip())
    if not m:
        return None
    return f"{m['repo']}-{m['ref']}-{m['path'].rstrip('/').rsplit('/', 1)[-1]}.yaml"
