"""Building blocks of the stack config: the error type, validated field types, the base model.

The bottom of the config package: the sections (aws, gcp, linode, platform) build on these, the stack
model (model.py) on the sections; nothing here imports them back.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Optional

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      ValidationInfo, field_validator)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic.alias_generators import to_camel

NAMESPACE = "gpu-platform"
CLOUDS = ("linode", "gcp", "aws", "kubernetes")
CAPACITIES = ("spot", "preemptible", "on-demand")


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
        shown = _short(self.value, self.key, by_name=self.allowed.startswith("unknown key"))
        # The key comes from the file: escape sequences in it must not reach the terminal.
        from gpu_platform.config.approvals import one_line

        key = one_line(self.key)
        return f"  {NAMESPACE}:{key}: {shown} -> {self.allowed}"


MISSING = object()


# Stands in for a secret value in messages: neither its plaintext nor its ciphertext is shown.
SECRET = object()

# What preflight hands the program for a `secure:` value it cannot decrypt, and for a run-time credential CI
# supplies (gpu_platform/preflight/runner.py): always a secret, never a usable value. A component that reads a
# credential's content (the kubeconfig of cloud kubernetes) plans without looking inside it.
UNDECRYPTABLE = "preflight-cannot-decrypt-secure-value"


def _holds_secure(value: Any, depth: int = 0) -> bool:
    """A `secure:` mapping anywhere in `value` (a secret written where no secret belongs, perhaps beside
    other keys): the whole value is never echoed."""
    if depth > 64:
        return True
    if isinstance(value, dict):
        return "secure" in value or any(_holds_secure(v, depth + 1) for v in list(value.values())[:1000])
    if isinstance(value, list):
        return any(_holds_secure(v, depth + 1) for v in value[:1000])
    return False


# Key names that say their value may be a credential: an unknown key so named (gpu-platform:dbPassword), or a
# `secure` key written beside other keys (a `secure:` value that is not alone is no secret to Pulumi, but was
# meant as one). Their values are never shown, whatever they are.
SECRET_KEY_NAME = re.compile(r"(?i:passw(or)?d|passwd|pwd|token|secret|credential|private[-_]?key|api[-_]?key|"
                             r"access[-_]?key|^secure$|[-_.]key$)|[a-z]Key$")
# A URL's user info (scheme://user:password@host, or a token before the @): shown as user:***@, or ***@.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s?#]*)@")
# A PEM private key (-----BEGIN OPENSSH PRIVATE KEY-----, RSA, EC, ENCRYPTED...): never shown, whole or cut.
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY")


def secret_looking_key(key: str) -> bool:
    """Whether the last part of a key path (gpuPools[0].foo.dbPassword -> dbPassword) names a credential."""
    last = re.split(r"[.:\[\]]", str(key).rstrip("]"))[-1] if key else ""
    return bool(last) and bool(SECRET_KEY_NAME.search(last))


def _mask_text(text: str) -> str:
    """`text` with what may be a credential in it replaced: a URL's password (or a bare token as user info), a
    user:password pair's password."""
    def userinfo(m: "re.Match[str]") -> str:
        user, sep, _password = m.group(2).partition(":")
        return f"{m.group(1)}{user}:***@" if sep else f"{m.group(1)}***@"

    return _URL_USERINFO.sub(userinfo, text)


def _holds_private_key(value: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if isinstance(value, str):
        return bool(_PRIVATE_KEY.search(value))
    if isinstance(value, dict):
        return any(_holds_private_key(v, depth + 1) for v in list(value.values())[:1000])
    if isinstance(value, list):
        return any(_holds_private_key(v, depth + 1) for v in value[:1000])
    return False


def _masked(value: Any, depth: int = 0) -> Any:
    """`value` with secret-looking parts replaced: URL passwords masked, a dict's secret-named keys' values hidden."""
    if depth > 64:
        return "..."
    if isinstance(value, str):
        return _mask_text(value)
    if isinstance(value, dict):
        return {k: "***" if secret_looking_key(str(k)) else _masked(v, depth + 1) for k, v in list(value.items())[:10]}
    if isinstance(value, list):
        return [_masked(v, depth + 1) for v in value[:10]]
    return value


def _short(value: Any, key: str = "", by_name: bool = False) -> str:
    """`value` for a message about `key`: never a secret's value. A `secure:` value, the value of a `secure` key
    beside others, of an unknown key (`by_name`) named like a credential (password, token, secret, apiKey,
    credential), a private key: not shown at all; a URL's password, a user:password pair's password in a user
    name, and a mapping's values under credential-like names are replaced by ***."""
    if value is MISSING:
        return "(missing)"
    if value is SECRET or _holds_secure(value):
        return "(a secret value)"
    last = re.split(r"[.:\[\]]", key.rstrip("]"))[-1] if key else ""
    if last == "secure" or (by_name and secret_looking_key(key)):
        return "(value not shown: the key's name says it may hold a secret)"
    value = _masked(value)
    if value is SECRET or _holds_private_key(value):
        return "(value not shown: it holds a private key)"
    if isinstance(value, str) and key.endswith(("username", "Username", "user", "User")) and ":" in value:
        value = value.split(":", 1)[0] + ":***"  # user:password in a user name
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

# A container image by digest, registry/repository[:tag]@sha256:<64 hex>, the registry host required (no
# Docker Hub shorthand): the form of every image key a stack sets (a published image the program then does
# not build) and of every image the program deploys (components/aws/protection.py, linode/node_groups.py).
# The tag is distribution/reference's `[\w][\w.-]{0,127}`, whose \w is Go's: ASCII letters, digits and '_'.
# Spelled out: in pydantic's Rust regex and in Python's re, \w is any Unicode letter (a tag `v1-é` passed here and
# failed at the registry), and the Rust engine took 60 ms to compile its Unicode tables in every process that
# imports the config (each policy pack and preflight).
IMAGE_BY_DIGEST = (r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+"
                   r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}$")

# Every pattern is used with fullmatch: `$` alone also matches before a trailing newline.
DNS1123_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
PLAIN_NUMBER = re.compile(r"-?[0-9]{1,30}(\.[0-9]{1,30})?")
EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")


def _dns_label(value: str) -> str:
    if len(value) > 30 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError("a DNS-1123 label: lowercase letters, digits and '-', starting with a letter, at most 30 characters")
    return value


# IPv6 prefixes whose addresses are IPv4 addresses written in IPv6 (RFC 4291 IPv4-mapped, RFC 6052 NAT64
# well-known and local-use prefixes): ::ffff:0.0.0.0/96 is every IPv4 address, whatever its length says.
# IPv6 prefixes whose addresses stand for IPv4 hosts: IPv4-mapped (RFC 4291), NAT64 (RFC 6052, RFC 8215), and
# the transition tunnels Teredo 2001::/32 (RFC 4380: any IPv4 host behind any NAT gets an address there) and
# 6to4 2002::/16 (RFC 3056: 2002:WWXX:YYZZ::/48 is the IPv4 host W.X.Y.Z's site).
IPV4_EMBEDDING = tuple(ipaddress.ip_network(n) for n in ("::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48",
                                                         "2001::/32", "2002::/16"))


def _cidr(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"a CIDR block such as 203.0.113.0/24 with no host bits set ({exc})") from None
    if net.version == 6 and any(net.subnet_of(e) for e in IPV4_EMBEDDING):
        raise ValueError("an IPv4 range written as IPv4 (such as 203.0.113.0/24): this IPv6 range holds IPv4 "
                         "hosts (IPv4-mapped, NAT64, Teredo 2001::/32 or 6to4 2002::/16), so its length says nothing "
                         "about how much it opens (Teredo's /32 is any IPv4 host on the internet)")
    return value


# RFC 1918 private ranges. Python's `is_private` also counts loopback, link-local, "this network",
# benchmarking, documentation and reserved (240/4) ranges, which no VPC can use.
RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
RFC1918_TEXT = "10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16"


# Ranges that hold no host a connection can come from, or a pod or node can have: 'this network', loopback and
# link-local (RFC 1122, RFC 3927, RFC 4291), where the metadata services answer.
NON_HOST_RANGES = {"0.0.0.0/8": "'this network' (RFC 1122)", "127.0.0.0/8": "loopback", "169.254.0.0/16": "link-local",
                   "::/128": "the unspecified address", "::1/128": "loopback", "fe80::/10": "link-local"}


def non_host_range_problem(net: "ipaddress.IPv4Network | ipaddress.IPv6Network", contains: bool = False) -> "str | None":
    """What is wrong with `net` when it lies inside (with `contains`, also: holds) one of NON_HOST_RANGES."""
    for text, what in NON_HOST_RANGES.items():
        other = ipaddress.ip_network(text)
        if other.version != net.version:
            continue
        if net.subnet_of(other):  # type: ignore[arg-type]
            return f"{net} is inside {other}, {what}"
        if contains and net.supernet_of(other):  # type: ignore[arg-type]
            return f"{net} holds {other}, {what}"
    return None


def is_rfc1918(net: "ipaddress.IPv4Network | ipaddress.IPv6Network") -> bool:
    """Whether `net` lies wholly inside one RFC 1918 range."""
    return net.version == 4 and any(net.subnet_of(r) for r in RFC1918)  # type: ignore[arg-type]


def _email(value: str) -> str:
    from gpu_platform.config.approvals import email_problem

    problem = email_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# Label namespaces a pool's labels may not use: whoever owns them sets them on every node, and a user's
# value would forge it (kubernetes.io/hostname: evil breaks topology spreading and per-node scheduling;
# node.kubernetes.io/instance-type: p5.48xlarge lies to the autoscaler and to jobs that select on it).
# - kubernetes.io, k8s.io and their subdomains: the kubelet and the cloud set the well-known labels; the
#   kubelet refuses any other there (NodeRestriction, kubernetes/kubernetes staging/src/k8s.io/kubelet/pkg/
#   apis/well_known_labels.go), EKS managed node groups refuse every one ("Label cannot contain reserved
#   prefixes [kubernetes.io/, k8s.io/, eks.amazonaws.com/]": aws/containers-roadmap#1451, eksctl#4007).
# - eks.amazonaws.com, k8s.amazonaws.com (EKS, and this program's accelerator label on EKS),
#   cloud.google.com (GKE: gke-nodepool, gke-accelerator, gke-spot, machine-family, ...), linode.com (the
#   Linode CCM), nvidia.com (GPU feature discovery's nvidia.com/gpu.*), gpu-platform.io (this program's
#   pool, capacity, accelerator and role labels).
# - the CSI drivers' topology keys (issue 37): the EBS CSI node plugin registers topology.ebs.csi.aws.com/zone,
#   GKE's Persistent Disk CSI topology.gke.io/zone; a pool label there makes the CSINode registration collide
#   with the kubelet's (the node's volumes never attach). csi.aws.com covers every AWS CSI driver (ebs, efs,
#   fsx), gke.io every GKE-set key.
RESERVED_LABEL_NAMESPACES = ("kubernetes.io", "k8s.io", "eks.amazonaws.com", "k8s.amazonaws.com", "csi.aws.com",
                             "cloud.google.com", "gke.io", "linode.com", "nvidia.com", "gpu-platform.io")


def label_key_problem(key: str) -> "str | None":
    """None when `key` is a Kubernetes label key a pool may carry (validation.IsQualifiedName: a name of
    at most 63 characters, an optional DNS-subdomain prefix of at most 253) outside the namespaces the
    kubelet, the clouds and this program set (RESERVED_LABEL_NAMESPACES)."""
    if not LABEL_KEY.fullmatch(key):
        return f"Kubernetes label keys ([prefix/]name of letters, digits, '-', '_', '.'); {key!r} is not one"
    prefix, _, name = key.rpartition("/")
    if len(name) > 63:
        return f"a label name (after the prefix) of at most 63 characters; {key[:40]!r}... has {len(name)}"
    if len(prefix) > 253:
        return f"a label prefix (a DNS subdomain) of at most 253 characters; it has {len(prefix)}"
    owner = next((ns for ns in RESERVED_LABEL_NAMESPACES if prefix == ns or prefix.endswith("." + ns)), None)
    if owner is not None:
        return (f"a label outside the namespaces the kubelet, the cloud and the platform set on nodes ({key!r} is in "
                f"{owner}; refused: {', '.join(RESERVED_LABEL_NAMESPACES)} and their subdomains): a value there would "
                "forge or fight theirs. Use your own prefix, e.g. example.com/team, or none")
    return None


def _labels(value: dict[str, str]) -> dict[str, str]:
    for k, v in value.items():
        problem = label_key_problem(k)
        if problem:
            raise ValueError(problem)
        if len(v) > 63 or not LABEL_VALUE.fullmatch(v):
            raise ValueError(f"Kubernetes label values (at most 63 of [A-Za-z0-9-_.]); {v!r} is not one")
    return value


def _minor_from_number(value: Any) -> Any:
    """An unquoted `kubernetesVersion: 1.33` is a YAML float: take it as "1.33" when that is what the
    number prints as. 1.30 prints as 1.3, so a number that is not a known minor asks for quotes."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    text = repr(float(value)) if isinstance(value, float) else str(value)
    from gpu_platform.data.versions_calendar import known_minors

    if isinstance(value, float) and text in known_minors():
        return text
    raise ValueError(f"a quoted version string: the unquoted number {text} is ambiguous (YAML reads 1.30 as 1.3); "
                     f"write it in quotes, e.g. kubernetesVersion: \"{text}0\" or \"{text}\"")


def _kubernetes_minor(value: str) -> str:
    from gpu_platform.data.versions_calendar import known_minors

    known = known_minors()
    if value not in known and re.fullmatch(r"[0-9]+\.[0-9]*0", value):
        # `kubernetesVersion: 1.350` unquoted: YAML's number 1.35, the CLI's text "1.350"; say which to write.
        raise ValueError(f"a quoted Kubernetes minor: {value} written unquoted is the number {float(value):g} to YAML "
                         f"and the text {value!r} to the Pulumi CLI, neither a minor; write it in quotes as the minor "
                         f"is named, e.g. kubernetesVersion: \"{known[-2] if len(known) > 1 else known[-1]}\" (the minors: "
                         + ", ".join(repr(m) for m in known) + ")")
    if value not in known:
        raise ValueError("a quoted Kubernetes minor the version calendar (gpu_platform/costs/catalog/kubernetes-versions.yaml) "
                         f"lists: {', '.join(repr(m) for m in known)}; which of them a cloud accepts today depends "
                         "on its support dates")
    return value


# The most a priceOverrides entry may say one node costs per hour. The catalog's dearest node is about
# $88/hour (gcp/a3-highgpu-8g on-demand, gpu_platform/costs/catalog/gcp.yaml): ten times that is still a
# price, anything above is a typo, and 1e306 overflows the estimate's monthly sums to infinity, which
# the Pulumi runtime cannot serialize (a traceback instead of a config error).
MAX_PRICE_OVERRIDE_USD_PER_HOUR = 1000.0


_PRICE_ALLOWED = (f"a number of USD per node-hour, above 0 and at most {MAX_PRICE_OVERRIDE_USD_PER_HOUR:,.0f}, written "
                  "without quotes (such as 0.42)")


def _usd_per_hour_text(value: Any) -> Any:
    """A number as YAML writes it (2 or 0.42), never text: "0.1" would pass here and be refused later by
    the policy pack, whose check sees the raw stack value."""
    if isinstance(value, str):
        raise ValueError(f"{_PRICE_ALLOWED}; not text")
    return value


def _usd_per_hour_range(value: float) -> float:
    if not 0 < value <= MAX_PRICE_OVERRIDE_USD_PER_HOUR:
        raise ValueError(f"{_PRICE_ALLOWED}; the catalog's dearest node costs about $88/hour")
    return value


UsdPerHour = Annotated[float, BeforeValidator(_usd_per_hour_text), AfterValidator(_usd_per_hour_range)]


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
        if numeric and bool not in kinds and str not in kinds and isinstance(value, str) \
                and re.search(r"[0-9]", value) and not PLAIN_NUMBER.fullmatch(value):
            # The CLI hands numbers as text; pydantic would also read "5_000", " 5000" or "1e3" as numbers.
            raise ValueError("a plain number such as 5000 (digits only: no '_', spaces, exponent or hex; the Pulumi CLI "
                             "hands a top-level number to the program as the text written, so 1e3 or 0x5DC is text)")
        return value



class OnDemandApproval(Model):
    """Why a GPU pool may run on-demand, and who said so: lands in tags/labels and preflight's report."""

    reason: str = Field(min_length=10, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    approver: str = Field(min_length=2, max_length=64, pattern=r"^[A-Za-z0-9@][A-Za-z0-9._@+-]*$")
    # The last day the approval holds (YYYY-MM-DD); optional for pools, required for policy exceptions.
    until: Optional[str] = None

    @field_validator("until", mode="before")
    @classmethod
    def _until_text(cls, value: Any) -> Any:
        import datetime as dt

        return value.isoformat() if isinstance(value, dt.date) else value

    @field_validator("reason", "approver", "until")
    @classmethod
    def _recorded(cls, value: Any, info: ValidationInfo) -> Any:
        from gpu_platform.config import approvals

        check = {"reason": approvals.reason_problem, "approver": approvals.approver_problem,
                 "until": approvals.until_problem}[info.field_name]
        problem = None if value is None else check(value)
        if problem:
            raise ValueError(problem)
        return value


# Characters each cloud accepts in a tag/label value, and the most it takes (key:value on Linode).
_TAG_RULES = {
    # GCP label values: lowercase letters, digits, '_' and '-', at most 63 (cloud.google.com resource labels).
    "gcp": (re.compile(r"[^a-z0-9_-]"), 63, str.lower),
    # AWS tag values: letters, digits, spaces and _ . : / = + - @, at most 256 (AWS tagging rules).
    "aws": (re.compile(r"[^A-Za-z0-9 _.:/=+@-]"), 256, str),
    # Linode tags are one "key:value" string of 3 to 50 characters (Cloud Manager's tag validation).
    "linode": (re.compile(r"[^A-Za-z0-9 _.:/=+@-]"), 50, str),
    # cloud kubernetes: JSON in the node-groups ConfigMap (components/kubernetes), kept to the AWS rule's characters.
    "kubernetes": (re.compile(r"[^A-Za-z0-9 _.:/=+@-]"), 256, str),
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


# ---------------------------------------------------------------------------------------------
# The system pool: one shape on every cloud (the keys gpuPools use)
# ---------------------------------------------------------------------------------------------


class SystemPool(Model):
    """The small CPU pool for cluster add-ons, the job queue and the ML platform's controllers (never GPU
    work). Written `<cloud>.systemPool: {instanceType, minNodes, maxNodes}`; a key left out takes the
    cloud's default (SYSTEM_POOL_DEFAULTS). Per-cloud rules (non-GPU type, Linode's fixed size) live
    in each cloud's check_stack."""

    instance_type: str = Field(min_length=1, max_length=63)
    min_nodes: int = Field(ge=1, le=100)
    max_nodes: int = Field(ge=1, le=100)


SYSTEM_POOL_DEFAULTS: dict[str, dict[str, Any]] = {
    "gcp": {"instanceType": "e2-standard-4", "minNodes": 1, "maxNodes": 3},
    # maxNodes 6: two a zone over three zones, room for CPU notebooks in the zones they may run in (issue 33 item 4).
    "aws": {"instanceType": "m6i.large", "minNodes": 2, "maxNodes": 6},
    # A kubeadm pool on Linode is a fixed set of instances: min == max (check_stack). Two: on one g6-standard-4 the
    # platform's pods leave no room for a CPU notebook, so admission and Kueue refuse the `cpu` profile (preflight's
    # cluster fit says so); a second 8 GB node costs $48/month, as linode-dev has run since 0.3.0.
    "linode": {"instanceType": "g6-standard-4", "minNodes": 2, "maxNodes": 2},
}

# Spellings of the last release, accepted with a warning for one more release:
# cloud -> (section key holding the pool, {old sub-key: new sub-key}).
_DEPRECATED_SYSTEM_POOL: dict[str, tuple[str, dict[str, str]]] = {
    "gcp": ("systemPool", {"machineType": "instanceType"}),
    "aws": ("systemNodes", {"instanceType": "instanceType", "min": "minNodes", "max": "maxNodes"}),
}


def _both_given(cloud: str, old: str, new: str, loc: tuple[str, ...], value: Any) -> ValidationError:
    """A ValidationError located at the deprecated key (parse_config names it), naming both keys."""
    error = PydanticCustomError(
        "deprecated_and_new_key",
        "only one of {new} and {old} (the deprecated spelling of {new}); both are set: keep {new}",
        {"old": f"{cloud}.{old}", "new": f"{cloud}.{new}"})
    return ValidationError.from_exception_data(
        "SystemPool", [InitErrorDetails(type=error, loc=loc, input=value)])


def system_pool_input(cloud: str, data: Any) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """A cloud section's raw input with its system pool in the current shape and the cloud's defaults
    filled in, plus the deprecated keys it was written with ((old, new) pairs, for config_warnings).
    Old and new spelling of the same key together -> a ValidationError at the old key."""
    if not isinstance(data, dict):
        return data, ()
    data = dict(data)
    renamed: list[tuple[str, str]] = []
    legacy = _DEPRECATED_SYSTEM_POOL.get(cloud)
    if legacy is not None:
        old_section, keys = legacy
        if old_section != "systemPool" and old_section in data:
            if "systemPool" in data:
                raise _both_given(cloud, old_section, "systemPool", (old_section,), data[old_section])
            renamed.append((f"{cloud}.{old_section}{{{','.join(keys)}}}",
                            f"{cloud}.systemPool{{{','.join(keys.values())}}}"))
            old = data.pop(old_section)
            data["systemPool"] = {keys.get(k, k): v for k, v in old.items()} if isinstance(old, dict) else old
        elif old_section == "systemPool" and isinstance(data.get("systemPool"), dict):
            pool = dict(data["systemPool"])
            for old_key, new_key in keys.items():
                if old_key in pool:
                    if new_key in pool:
                        raise _both_given(cloud, f"systemPool.{old_key}", f"systemPool.{new_key}",
                                          ("systemPool", old_key), pool[old_key])
                    renamed.append((f"{cloud}.systemPool.{old_key}", f"{cloud}.systemPool.{new_key}"))
                    pool[new_key] = pool.pop(old_key)
            data["systemPool"] = pool
    pool = data.get("systemPool", {})
    if isinstance(pool, dict):
        data["systemPool"] = {**SYSTEM_POOL_DEFAULTS[cloud], **pool}
    return data, tuple(renamed)


def validate_system_pool(cloud: str, data: Any, handler: Any) -> Any:
    """Body of each cloud section's wrap validator: migrate, validate, and remember what was renamed in the
    section's private `_system_pool_renamed` (not on the pool, so old and new spelling give equal pools)."""
    data, renamed = system_pool_input(cloud, data)
    try:
        section = handler(data)
    except ValidationError as exc:
        if not renamed:
            raise
        raise _at_old_keys(cloud, exc) from None
    if renamed:
        section._system_pool_renamed = renamed
    return section


def _at_old_keys(cloud: str, exc: ValidationError) -> ValidationError:
    """The same errors, located at the deprecated keys the user wrote (aws.systemNodes.min, not
    aws.systemPool.minNodes), so the message names a key that is in the stack file."""
    old_section, keys = _DEPRECATED_SYSTEM_POOL[cloud]
    back = {new: old for old, new in keys.items()}
    details = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        # An unknown key stays under systemPool, where the message can list the keys allowed there.
        if loc[:1] == ("systemPool",) and err["type"] != "extra_forbidden":
            loc = (old_section, *(back.get(str(k), k) for k in loc[1:2]), *loc[2:])
        details.append(InitErrorDetails(type=err["type"], loc=loc, input=err["input"], ctx=err.get("ctx", {})))
    try:
        return ValidationError.from_exception_data(exc.title, details)
    except (KeyError, TypeError, ValueError):
        return exc  # an error type that cannot be rebuilt: the new key's location is still right


def system_pool_key(cloud: str, section: Any, key: str) -> str:
    """How the stack file spells `<cloud>.systemPool.<key>`: the deprecated spelling when it was written
    that way, so a rule's message names a key the user can find."""
    if getattr(section, "_system_pool_renamed", None):
        old_section, keys = _DEPRECATED_SYSTEM_POOL[cloud]
        back = {new: old for old, new in keys.items()}
        return f"{cloud}.{old_section}.{back.get(key, key)}"
    return f"{cloud}.systemPool.{key}"


