"""The stack file's model: `StackConfig`, built from the per-cloud and platform sections.

The sections (aws, gcp, linode, platform) and the field types (base) sit below; the loader and the
checks that read the whole stack (stack, checks, names, kubernetes_version, derived) sit above and
import this model, never the reverse.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, PrivateAttr, model_validator

from gpu_platform.config.aws import AwsSection
from gpu_platform.config.base import (CLOUDS, MAX_PRICE_OVERRIDE_USD_PER_HOUR, Cidr, DnsLabel, Email, KubernetesMinor,  # noqa: F401
                                      Model, NodeLabels, OnDemandApproval, UsdPerHour)
from gpu_platform.config.bucket_lifecycle import OnDestroy
from gpu_platform.config.gcp import GcpSection
from gpu_platform.config.kubernetes import KubernetesSection
from gpu_platform.config.linode import LinodeSection
from gpu_platform.config.platform import PlatformSection
from gpu_platform.data.versions_calendar import default_minor

__all__ = ["CheckpointBucketSection", "CostsSection", "GpuPool", "PriceOverride", "STRUCTURED_KEYS", "StackConfig"]

# ---------------------------------------------------------------------------------------------
# Sections shared by every cloud
# ---------------------------------------------------------------------------------------------


class GpuPool(Model):
    """One pool of GPU nodes. GPUs per node and prices come from the catalog, not from here."""

    name: DnsLabel
    instance_type: str = Field(min_length=1)
    capacity: Literal["spot", "preemptible", "on-demand"]
    min_nodes: int = Field(default=0, ge=0, le=1000)
    max_nodes: int = Field(ge=1, le=1000)
    labels: NodeLabels = Field(default_factory=dict)
    # Policy knob: an on-demand GPU pool is a deliberate, reviewed decision, not a default:
    # {reason, approver} (recorded in tags/labels). A bare `true` is still read, but carries no
    # reason or approver, so the policy pack does not accept it as an approval.
    approved_on_demand: Union[bool, OnDemandApproval] = False


class PriceOverride(Model):
    """Replace the catalog's $/hour for one instance type (e.g. a negotiated discount): a number above 0
    and at most MAX_PRICE_OVERRIDE_USD_PER_HOUR."""

    on_demand: Optional[UsdPerHour] = None
    spot: Optional[UsdPerHour] = None
    preemptible: Optional[UsdPerHour] = None


class CheckpointBucketSection(Model):
    """What `pulumi destroy` does with the checkpoint bucket (gpu_platform/config/bucket_lifecycle.py, docs/destroy.md)."""

    # retain: destroy succeeds and the bucket and its checkpoints stay; delete: emptied (every version) and deleted.
    on_destroy: OnDestroy = "retain"


class CostsSection(Model):
    """What the cost estimate cannot read from the program (gpu_platform/costs/estimator.py): expected use and sizes."""

    # Average share of the month the GPU pools are busy; preflight compares the bill at this use with the budget.
    expected_utilization: float = Field(default=0.3, ge=0, le=1)
    checkpoint_gib: float = Field(default=100, ge=0, le=10_000_000)  # live checkpoints in the bucket on average
    # Checkpoints written per day at full capacity. Every save is a new object and old ones are deleted
    # (retention), and the versioned bucket keeps each deleted/overwritten version for the cloud's
    # checkpointRetentionDays: the bucket holds about this x retention on top of checkpointGib.
    checkpoint_gib_per_day: float = Field(default=10, ge=0, le=1_000_000)
    # Traffic through the NAT at full capacity: image pulls from public registries, datasets, pip. Not
    # checkpoints: they reach the bucket through the S3 gateway endpoint (EKS) or Private Google Access (GKE).
    nat_gib_per_month: float = Field(default=200, ge=0, le=10_000_000)


class StackConfig(Model):
    """The whole `gpu-platform:*` namespace of one stack."""

    # kubernetes: a cluster that exists (the `kubernetes` section says how to reach it and what its nodes are).
    cloud: Literal["linode", "gcp", "aws", "kubernetes"]
    environment: DnsLabel = "dev"
    # Opt-in: a short suffix that makes every cloud name of this stack unique where two stacks share an
    # `environment` in one account/project (gpu-<environment>-<nameSuffix>); the stack budget filters on
    # the `cluster` tag, which carries the same name. Setting or changing it on a deployed stack renames,
    # so replaces, every named resource (CHANGELOG, docs/costs-and-alerts.md): set it before the first up.
    name_suffix: Annotated[str, Field(min_length=1, max_length=6, pattern=r"^[a-z0-9]+$")] = None  # type: ignore[assignment]
    owner: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$")]
    cost_center: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$")]
    monthly_budget_usd: int = Field(gt=0, le=10_000_000)
    alert_emails: list[Email] = Field(default_factory=list)
    admin_cidrs: list[Cidr] = Field(default_factory=list)
    # Checked per cloud against the dated version calendar (gpu_platform/config/kubernetes_version.py). Unset: the
    # newest minor in the cloud's standard support today (on GKE nothing is pinned: the release channel picks).
    kubernetes_version: KubernetesMinor = None  # type: ignore[assignment]
    gpu_pools: list[GpuPool] = Field(min_length=1)
    linode: Optional[LinodeSection] = None
    gcp: Optional[GcpSection] = None
    aws: Optional[AwsSection] = None
    kubernetes: Optional[KubernetesSection] = None
    platform: PlatformSection = Field(default_factory=PlatformSection)
    price_overrides: dict[str, PriceOverride] = Field(default_factory=dict)
    costs: CostsSection = Field(default_factory=CostsSection)
    checkpoint_bucket: CheckpointBucketSection = Field(default_factory=CheckpointBucketSection)
    _kubernetes_version_pinned: bool = PrivateAttr(default=True)

    @model_validator(mode="wrap")
    @classmethod
    def _default_kubernetes_version(cls, data: Any, handler: Any) -> "StackConfig":
        pinned = not isinstance(data, dict) or data.get("kubernetesVersion", data.get("kubernetes_version")) is not None
        # On an existing cluster (kubernetes) the version is the cluster's: the stack states it (checks/kubernetes.py).
        if not pinned and data.get("cloud") in CLOUDS and data.get("cloud") != "kubernetes":
            linode = data.get("linode") if isinstance(data.get("linode"), dict) else {}
            cni = linode.get("cni", LinodeSection.model_fields["cni"].default) if data["cloud"] == "linode" else None
            data = {**data, "kubernetesVersion": default_minor(data["cloud"], cni=cni if isinstance(cni, str) else None)}
        model = handler(data)
        model._kubernetes_version_pinned = pinned
        return model

    @property
    def kubernetes_version_pinned(self) -> bool:
        """Whether the stack file sets kubernetesVersion (GKE pins the control plane only then)."""
        return self._kubernetes_version_pinned

    @property
    def name_prefix(self) -> str:
        """Prefix of every cloud resource name: gpu-<environment>[-<nameSuffix>]."""
        return f"gpu-{self.environment}" + (f"-{self.name_suffix}" if self.name_suffix else "")

    @property
    def cloud_section(self) -> Any:
        return getattr(self, self.cloud)

    def stack_catalog(self) -> Any:
        """The catalog this stack's instance types are sized and priced from (gpu_platform.config.derived.stack_catalog):
        the price catalog with priceOverrides, or on cloud kubernetes the stack's own node types."""
        from gpu_platform.config.catalog import stack_catalog

        return stack_catalog(self)

    def catalog_overrides(self) -> dict[str, dict[str, float]]:
        """price_overrides in the catalog's form: {"<cloud>/<type>": {"onDemand": ..}}."""
        out: dict[str, dict[str, float]] = {}
        for type_name, o in self.price_overrides.items():
            out[f"{self.cloud}/{type_name}"] = o.model_dump(by_alias=True, exclude_none=True)
        return out


# Keys whose value is structured (the CLI hands the program those as JSON strings).
STRUCTURED_KEYS = {
    StackConfig.model_fields[f].alias or f
    for f in ("alert_emails", "admin_cidrs", "gpu_pools", "linode", "gcp", "aws", "kubernetes", "platform", "price_overrides", "costs",
              "checkpoint_bucket")
}


