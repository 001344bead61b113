"""Linode answers: numeric ids, documentation-range addresses, object-storage endpoints and keys."""

from __future__ import annotations

import hashlib
from typing import Any

from gpu_platform.preflight.mocks import sensitive


def public_address(name: str) -> str:
    """A public IPv4 stable per resource name, from the benchmarking range 198.18.0.0/15 (RFC 2544:
    never routed). Derived from the name, not handed out in call order: the program registers from
    several threads, and two runs must plan the same addresses."""
    n = int(hashlib.sha256(f"public/{name}".encode()).hexdigest()[:8], 16) % (2 * 65536 - 2) + 1
    return f"198.{18 + n // 65536}.{n // 256 % 256}.{n % 256}"


def resource_id(name: str) -> str:
    """Linode ids are integers; stable per name so plans are reproducible."""
    return str(int(hashlib.sha256(name.encode()).hexdigest()[:7], 16))


def _instance(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    reserved = inputs.get("ipv4s") or []
    ip = reserved[0] if reserved else public_address(name)
    out = {"ipAddress": ip, "ipv4s": [ip], "status": "running"}
    if inputs.get("privateIp"):
        # Linode private IPv4s come from 192.168.128.0/17; stable per name.
        n = int(hashlib.sha256(name.encode()).hexdigest()[:6], 16) % (128 * 256 - 2) + 1
        out["privateIpAddress"] = f"192.168.{128 + n // 256}.{n % 256}"
    return out


def _bucket(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    region = inputs.get("region", "us-east")
    return {"s3Endpoint": f"{region}-1.linodeobjects.com", "hostname": f"{inputs.get('label')}.{region}-1.linodeobjects.com"}


def _key(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    digest = hashlib.sha256(name.encode()).hexdigest()
    return {"accessKey": digest[:20].upper(), "secretKey": sensitive(digest)}


RESOURCES = {
    "linode:index/instance:Instance": _instance,
    "linode:index/reservedIp:ReservedIp": lambda inputs, name: {"address": public_address(name)},
    "linode:index/nodeBalancer:NodeBalancer": lambda inputs, name: {"ipv4": public_address(name), "hostname": f"{name}.nodebalancer.linode.com"},
    "linode:index/objectStorageBucket:ObjectStorageBucket": _bucket,
    "linode:index/objectStorageKey:ObjectStorageKey": _key,
}
