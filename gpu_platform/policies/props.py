"""Reading resource properties the way the analyzer hands them to a policy.

pulumi_policy wraps properties in read-only proxies (Mapping/Sequence, not dict/list) that raise
UnknownValueError when a value is unknown during preview; these helpers only use the Mapping and
Sequence interfaces, so an unknown value that a rule actually needs surfaces as the pack's own
"can't run policy during preview" advisory instead of a wrong verdict. Numbers arrive as floats.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Iterable, Optional

from gpu_platform.config.linode_network import LINODE_NODEBALANCER_BACKENDS, LINODE_SHARED_PRIVATE_RANGE

WORLD_V4 = "0.0.0.0/0"
WORLD_V6 = "::/0"


def get(props: Any, path: str, default: Any = None) -> Any:
    """props["a"]["b"][0]... for a dotted path ("a.b.0"); default where any step is absent."""
    cur = props
    for part in path.split("."):
        if isinstance(cur, Mapping):
            if part not in cur:
                return default
            cur = cur[part]
        elif isinstance(cur, Sequence) and not isinstance(cur, str) and part.isdigit():
            i = int(part)
            if i >= len(cur):
                return default
            cur = cur[i]
        else:
            return default
        if cur is None:
            return default
    return cur


def as_list(value: Any) -> list[Any]:
    if value is None or isinstance(value, (str, bytes)):
        return [] if value is None else [value]
    if isinstance(value, Sequence):
        return [value[i] for i in range(len(value))]
    return []


def as_map(value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return {k: value[k] for k in value}
    return {}


def as_int(value: Any, default: Optional[int] = None) -> Optional[int]:
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        return default


def is_true(value: Any) -> bool:
    """Booleans as providers accept them: True or "true" (AWS launch templates use strings)."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def is_false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def is_world(cidr: Any) -> bool:
    """0.0.0.0/0, ::/0 or any other prefix of length 0 (e.g. "0.0.0.0/0" written as "0/0")."""
    if not isinstance(cidr, str):
        return False
    text = cidr.strip()
    if text in (WORLD_V4, WORLD_V6):
        return True
    net = _network(text)
    return net is not None and net.prefixlen == 0


def world_cidrs(cidrs: Iterable[Any]) -> list[str]:
    return [str(c) for c in cidrs if is_world(c)]


# Ranges that are not the public internet: RFC 1918, shared (RFC 6598), loopback, link-local,
# documentation (RFC 5737/3849), unique-local. Python's `is_private` is no use here: it calls
# 0.0.0.0/1 private because both of its ends (0.0.0.0 and 127.255.255.255) are.
NON_PUBLIC = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",
    "::1/128", "fc00::/7", "fe80::/10", "2001:db8::/32"))
DEFAULT_MIN_PREFIX = {4: 16, 6: 32}
# The union of a rule's public ranges may cover at most as many addresses as one prefix of this length.
DEFAULT_MAX_UNION_PREFIX = {4: 12, 6: 28}


# IPv6 prefixes that embed IPv4 addresses (IPv4-mapped, NAT64): judged as the IPv4 range they hold.
_IPV4_EMBEDDING = tuple(ipaddress.ip_network(n) for n in ("::ffff:0:0/96", "64:ff9b::/96"))
# 6to4 (RFC 3056): 2002:WWXX:YYZZ::/48 is IPv4 host W.X.Y.Z's site; judged as the IPv4 range in bits 16 to 48.
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
# Teredo (RFC 4380): any IPv4 host behind any NAT has an address in it (the client's IPv4 address is in the
# last 32 bits, obfuscated, below any prefix a rule can name): judged as the whole IPv4 internet.
_TEREDO = ipaddress.ip_network("2001::/32")


def _network(cidr: Any):
    if not isinstance(cidr, str):
        return None
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return None
    if net.version != 6:
        return net
    for embedding in _IPV4_EMBEDDING:
        if net.subnet_of(embedding):
            low = int(net.network_address) & 0xFFFFFFFF
            return ipaddress.ip_network((low, net.prefixlen - 96), strict=False)
    if net.subnet_of(_SIX_TO_FOUR):
        v4 = (int(net.network_address) >> 80) & 0xFFFFFFFF
        return ipaddress.ip_network((v4, min(32, net.prefixlen - 16)), strict=False)
    if net.subnet_of(_TEREDO) and net.prefixlen < 128:
        return ipaddress.ip_network("0.0.0.0/0")
    return net


def linode_shared_private(cidrs: Iterable[Any]) -> list[str]:
    """The ranges (as written) that reach into Linode's shared private network (config.linode: any customer's
    Linodes; on a Linode firewall as good as public), NodeBalancer backends aside (the only way an API
    NodeBalancer reaches the control planes)."""
    out = []
    for c in cidrs:
        net = _network(c)
        if net is not None and net.version == 4 and net.overlaps(LINODE_SHARED_PRIVATE_RANGE) \
                and not net.subnet_of(LINODE_NODEBALANCER_BACKENDS):
            out.append(str(c))
    return out


def _is_public(net) -> bool:
    return not any(net.version == r.version and net.subnet_of(r) for r in NON_PUBLIC)


def too_open(cidrs: Iterable[Any], min_prefix: Optional[dict[int, int]] = None,
             max_union_prefix: Optional[dict[int, int]] = None) -> list[str]:
    """Why a set of source ranges opens too much of the internet (empty when it does not): any public
    range shorter than the minimum prefix (default /16 IPv4, /32 IPv6), or public ranges whose union
    covers more addresses than one prefix of max_union_prefix (default /12, /28) - so 0.0.0.0/1 plus
    128.0.0.0/1 counts as what it is, the whole internet."""
    min_prefix = {**DEFAULT_MIN_PREFIX, **(min_prefix or {})}
    max_union_prefix = {**DEFAULT_MAX_UNION_PREFIX, **(max_union_prefix or {})}
    reasons: list[str] = []
    public = {4: [], 6: []}
    for c in cidrs:
        net = _network(c)
        if net is None or not _is_public(net):
            continue
        public[net.version].append(net)
        if net.prefixlen < min_prefix[net.version]:
            reasons.append(f"{c} (a public /{net.prefixlen}, shorter than /{min_prefix[net.version]})")
    for version, nets in public.items():
        if len(nets) < 2:
            continue
        union = sum(n.num_addresses for n in ipaddress.collapse_addresses(nets))
        bits = 32 if version == 4 else 128
        limit = 2 ** (bits - max_union_prefix[version])
        if union > limit:
            share = union / 2 ** bits
            shown = ", ".join(str(n) for n in nets[:4]) + (f" and {len(nets) - 4} more" if len(nets) > 4 else "")
            reasons.append(f"together {shown} ({union:,} IPv{version} addresses, "
                           f"{share:.2%} of the address space; at most one /{max_union_prefix[version]} allowed)")
    return reasons


def port_ranges(spec: Any) -> Optional[list[tuple[int, int]]]:
    """Linode/GCP port specs ("22", "80,443", "1-65535", ["22", "1000-2000"]) as ranges.
    None means "all ports" (the spec is absent or empty)."""
    items: list[str] = []
    for entry in as_list(spec):
        items += [p.strip() for p in str(entry).split(",") if p.strip()]
    if not items:
        return None
    out = []
    for item in items:
        lo, _, hi = item.partition("-")
        lo_i, hi_i = as_int(lo), as_int(hi or lo)
        if lo_i is None or hi_i is None:
            continue
        out.append((lo_i, hi_i))
    return out


def covers(ranges: Optional[list[tuple[int, int]]], port: int) -> bool:
    return ranges is None or any(lo <= port <= hi for lo, hi in ranges)


def tags_from_list(tags: Any) -> dict[str, str]:
    """Linode-style tags ["owner:ml", "cost-center:research"] (and AWS ASG [{key, value}]) as a dict."""
    out: dict[str, str] = {}
    for t in as_list(tags):
        if isinstance(t, Mapping):
            k = t.get("key")
            if k is not None:
                out[str(k)] = "" if t.get("value") is None else str(t.get("value"))
        elif isinstance(t, str):
            k, sep, v = t.partition(":")
            if not sep:
                k, sep, v = t.partition("=")
            out[k.strip()] = v.strip()
    return out


def tags_of(props: Any, key: str = "tags") -> dict[str, str]:
    """Tags/labels of a resource whatever their shape: a map, a list of "k:v" strings, or [{key, value}]."""
    value = get(props, key)
    if isinstance(value, Mapping):
        return {str(k): "" if value[k] is None else str(value[k]) for k in value}
    return tags_from_list(value)
