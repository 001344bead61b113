"""Which module builds the cluster (and its billing guardrails) for each cloud.

Each cloud package exposes `create_cluster(cfg) -> ClusterHandle` and
`create_billing_alerts(cfg) -> list[pulumi.Resource]` (an empty list where the cloud has no billing
API, as on Linode). Imported lazily so a stack pays only for its own cloud's SDK.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from gpu_platform.config.base import CLOUDS


def cloud_module(cloud: str) -> ModuleType:
    if cloud not in CLOUDS:
        raise ValueError(f"unknown cloud {cloud!r}; allowed: {', '.join(CLOUDS)}")
    return importlib.import_module(f"gpu_platform.components.{cloud}")
