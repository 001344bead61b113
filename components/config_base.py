"""Building blocks of the stack config: the error type, validated field types, the base model.

Kept apart from `components.config` so the per-cloud section modules can import them without a cycle.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator
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


# Stands in for a secret value in messages: neither its plaintext nor its ciphertext is shown.
SECRET = object()


def _short(value: Any) -> str:
    if value is MISSING:
        return "(missing)"
    if value is SECRET:
        return "(a secret value)"
    try:
        # Bounded: a huge or deeply nested input is cut, never serialized whole.
        text = json.dumps(_clip(value, 3), default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(type(value).__name__)
    return text if len(text) <= 80 else text[:77] + "..."


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _clip(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return value[:100]
    if _non_finite(value):
        return str(value)
    if depth <= 0 and isinstance(value, (dict, list)):
        return "..."
    if isinstance(value, dict):
        return {str(k)[:40]: _clip(v, depth - 1) for k, v in list(value.items())[:10]}
    if isinstance(value, list):
        return [_clip(v, depth - 1) for v in value[:10]]
    return value


class ConfigError(Exception):
    """The stack file is not a valid gpu-platform configuration. str() is the user-facing message.
    `source`: the file actually read (preflight --stack-file); default stacks/Pulumi.<stack>.yaml."""

    def __init__(self, stack: str, issues: list[ConfigIssue], source: "str | None" = None):
        self.stack = stack
        self.issues = issues
        self.source = source or stack_file(stack)
        lines = [f"invalid configuration in {self.source} ({len(issues)} problem(s)):"]
        lines += [i.render() for i in issues]
        lines.append("Fix the key(s) above with `pulumi config set` or by editing the stack file.")
        super().__init__("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# Reusable field types
# ---------------------------------------------------------------------------------------------

# Every pattern is used with fullmatch: `$` alone also matches before a trailing newline.
DNS1123_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")


def _dns_label(value: str) -> str:
    if len(value) > 30 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError("a DNS-1123 label: lowercase letters, digits and '-', starting with a letter, at most 30 characters")
    return value


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"a CIDR block such as 203.0.113.0/24 with no host bits set ({exc})") from None
    return value


def _email(value: str) -> str:
    if not EMAIL.fullmatch(value):
        raise ValueError("an e-mail address such as ops@example.com")
    return value


def _labels(value: dict[str, str]) -> dict[str, str]:
    for k, v in value.items():
        if len(k) > 63 + 254 or not LABEL_KEY.fullmatch(k):
            raise ValueError(f"Kubernetes label keys ([prefix/]name); {k!r} is not one")
        if len(v) > 63 or not LABEL_VALUE.fullmatch(v):
            raise ValueError(f"Kubernetes label values (at most 63 of [A-Za-z0-9-_.]); {v!r} is not one")
    return value


def _minor_from_number(value: Any) -> Any:
    """An unquoted `kubernetesVersion: 1.33` is a YAML float: take it as "1.33" when that is what the
    number prints as. 1.30 prints as 1.3, so a number that is not a known minor asks for quotes."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    text = repr(float(value)) if isinstance(value, float) else str(value)
    from components.kubernetes_version import known_minors

    if isinstance(value, float) and text in known_minors():
        return text
    raise ValueError(f"a quoted version string: the unquoted number {text} is ambiguous (YAML reads 1.30 as 1.3); "
                     f"write it in quotes, e.g. kubernetesVersion: \"{text}0\" or \"{text}\"")


def _kubernetes_minor(value: str) -> str:
    from components.kubernetes_version import known_minors

    known = known_minors()
    if value not in known:
        raise ValueError("a quoted Kubernetes minor the version calendar (costs/catalog/kubernetes-versions.yaml) "
                         f"lists: {', '.join(repr(m) for m in known)}; which of them a cloud accepts today depends "
                         "on its support dates")
    return value


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
KubernetesMinor = Annotated[str, BeforeValidator(_minor_from_number), AfterValidator(_kubernetes_minor)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Email = Annotated[str, AfterValidator(_email)]
NodeLabels = Annotated[dict[str, str], AfterValidator(_labels)]


def _kinds(annotation: Any) -> set[type]:
    """The scalar types a field annotation admits (int, float, bool, str), through Optional/Annotated."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_kinds(a) for a in typing.get_args(annotation)))
    if origin is Literal:
        return {type(a) for a in typing.get_args(annotation)}
    return {annotation} if annotation in (int, float, bool, str) else set()


class Model(BaseModel):
    """Base for every config section: camelCase keys, unknown keys rejected, immutable; no infinities
    or NaN; a boolean is never read as a number (true as 1 node) nor a number as a boolean."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        allow_inf_nan=False,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_number_confusion(cls, value: Any, info: ValidationInfo) -> Any:
        kinds = _kinds(cls.model_fields[info.field_name].annotation) if info.field_name else set()
        numeric = kinds & {int, float}
        if isinstance(value, bool) and numeric and bool not in kinds:
            raise ValueError("a number, not true/false")
        if bool in kinds and not numeric and isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError("true or false, not a number")
        if _non_finite(value):
            raise ValueError("a finite number")
        return value



class OnDemandApproval(Model):
    """Why a GPU pool may run on-demand, and who said so: lands in tags/labels and preflight's report."""

    reason: str = Field(min_length=10, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    approver: str = Field(min_length=2, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@+-]*$")


# Characters each cloud accepts in a tag/label value, and the most it takes (key:value on Linode).
_TAG_RULES = {
    # GCP label values: lowercase letters, digits, '_' and '-', at most 63 (cloud.google.com resource labels).
    "gcp": (re.compile(r"[^a-z0-9_-]"), 63, str.lower),
    # AWS tag values: letters, digits, spaces and _ . : / = + - @, at most 256 (AWS tagging rules).
    "aws": (re.compile(r"[^A-Za-z0-9 _.:/=+@-]"), 256, str),
    # Linode tags are one "key:value" string of 3 to 50 characters (Cloud Manager's tag validation).
    "linode": (re.compile(r"[^A-Za-z0-9 _.:/=+@-]"), 50, str),
}


def approval_tags(approval: "bool | OnDemandApproval", cloud: str) -> dict[str, str]:
    """Tags/labels that record a pool's on-demand approval; the policy pack accepts an approval only
    with an approver and a reason. Values are cut to what the cloud accepts (the full text is in the
    stack file and in preflight's report)."""
    tags = {"on-demand-approved": "true" if approval else "false"}
    if isinstance(approval, OnDemandApproval):
        bad, limit, case = _TAG_RULES[cloud]
        for key, value in (("on-demand-approver", approval.approver), ("on-demand-reason", approval.reason)):
            room = limit - (len(key) + 1 if cloud == "linode" else 0)
            tags[key] = bad.sub("_", case(value))[:room].strip() or "_"
    return tags


def pool_issue_capacity(cfg: "StackConfig", allowed: tuple[str, ...], why: str) -> list[ConfigIssue]:
    """Shared by the cloud checks: every pool's capacity must be one the cloud offers."""
    return [
        ConfigIssue(f"gpuPools[{i}].capacity", p.capacity, f"one of {', '.join(allowed)} ({why})")
        for i, p in enumerate(cfg.gpu_pools)
        if p.capacity not in allowed
    ]
