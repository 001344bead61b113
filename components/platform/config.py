"""The `platform` section: which parts of the ML platform a stack gets, and their knobs."""

from __future__ import annotations

from pydantic import Field

from components.config_base import Model


class PlatformSection(Model):
    kubeflow: bool = True
    notebooks: bool = True
    queue: bool = True
    monitoring: bool = True
    # A GPU held by a pod but idle this long (or a GPU node without GPU pods) raises an alert.
    idle_gpu_minutes: int = Field(default=120, ge=5, le=24 * 60)
