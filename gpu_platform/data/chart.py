"""A pinned Helm chart: name, version and repository. Pure data, so the version pins (data/*_versions.py)
and the config checks that read them need neither Pulumi nor the Kubernetes SDK."""

from __future__ import annotations

from dataclasses import dataclass


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
