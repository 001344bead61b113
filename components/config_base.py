"""Building blocks of the stack config: the error type, validated field types, the base model.

Kept apart from `components.config` so the per-cloud section modules can import them without a cycle.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

if TYPE_CHECKING:
    from components.config import StackConfig

NAMESPACE = "gpu-platform"
CLOUDS = ("linode", "gcp", "aws")
CAPACITIES = ("spot", "preemptible", "on-demand")
SUPPORTED_KUBERNETES_VERSIONS = ("1.31", "1.32", "1.33", "1.34")


def stack_file(stack: str) -> str:
    return f"stacks/Pulumi.{stack}.yaml"


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigIssue:
    """One problem with one key. `key` is the path as the user writes it: gpuPools[0].capacity."""

    key: str
    value: Any
    allowed: str

    def render(self) -> str:
        shown = _short(self.value)
        return f"  {NAMESPACE}:{self.key}: {shown} -> {self.allowed}"


MISSING = object()


def _short(value: Any) -> str:
    if value is MISSING:
        return "(missing)"
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


class ConfigError(Exception):
    """The stack file is not a valid gpu-platform configuration. str() is the user-facing message."""

    def __init__(self, stack: str, issues: list[ConfigIssue]):
        self.stack = stack
        self.issues = issues
        lines = [f"invalid configuration in {stack_file(stack)} ({len(issues)} problem(s)):"]
        lines += [i.render() for i in issues]
        lines.append("Fix the key(s) above with `pulumi config set` or by editing the stack file.")
        super().__init__("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# Reusable field types
# ---------------------------------------------------------------------------------------------

DNS1123_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")


def _dns_label(value: str) -> str:
    if len(value) > 30 or not DNS1123_LABEL.match(value):
        raise ValueError("a DNS-1123 label: lowercase letters, digits and '-', starting with a letter, at most 30 characters")
    return value


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"a CIDR block such as 203.0.113.0/24 with no host bits set ({exc})") from None
    return value


def _email(value: str) -> str:
    if not EMAIL.match(value):
        raise ValueError("an e-mail address such as ops@example.com")
    return value


def _labels(value: dict[str, str]) -> dict[str, str]:
    for k, v in value.items():
        if len(k) > 63 + 254 or not LABEL_KEY.match(k):
            raise ValueError(f"Kubernetes label keys ([prefix/]name); {k!r} is not one")
        if len(v) > 63 or not LABEL_VALUE.match(v):
            raise ValueError(f"Kubernetes label values (at most 63 of [A-Za-z0-9-_.]); {v!r} is not one")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Email = Annotated[str, AfterValidator(_email)]
NodeLabels = Annotated[dict[str, str], AfterValidator(_labels)]


class Model(BaseModel):
    """Base for every config section: camelCase keys, unknown keys rejected, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
    )



def pool_issue_capacity(cfg: "StackConfig", allowed: tuple[str, ...], why: str) -> list[ConfigIssue]:
    """Shared by the cloud checks: every pool's capacity must be one the cloud offers."""
    return [
        ConfigIssue(f"gpuPools[{i}].capacity", p.capacity, f"one of {', '.join(allowed)} ({why})")
        for i, p in enumerate(cfg.gpu_pools)
        if p.capacity not in allowed
    ]
