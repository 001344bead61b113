"""The `aws` section of the stack config and the rules only AWS has."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from components.config_base import ConfigIssue, Model, pool_issue_capacity

if TYPE_CHECKING:
    from components.config import StackConfig
    from costs.catalog import Catalog


class AwsSection(Model):
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    return pool_issue_capacity(cfg, ("spot", "on-demand"), "EC2 has Spot and On-Demand capacity; 'preemptible' is GCP's term")
