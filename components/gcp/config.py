"""The `gcp` section of the stack config and the rules only GCP has."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from components.config_base import ConfigIssue, Model, pool_issue_capacity

if TYPE_CHECKING:
    from components.config import StackConfig
    from costs.catalog import Catalog


class GcpSection(Model):
    project: str = Field(pattern=r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
    region: str = Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")
    zones: list[str] = Field(min_length=1)
    billing_account: str = Field(pattern=r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    return pool_issue_capacity(cfg, ("spot", "preemptible", "on-demand"), "GCP offers Spot, preemptible and on-demand VMs")
