"""Linode answers: numeric ids, documentation-range addresses, object-storage endpoints and keys.

Shapes follow linodego's recorded API responses (github.com/linode/linodego, test/integration/fixtures,
commit 676b9dbe): TestInstance_Clone.yaml records an instance created with `"private_ip": true` whose
`ipv4` list holds two addresses and whose /ips answer has one public (prefix 24) and one private
(192.168.128.0/17, prefix 17) IPv4. terraform-provider-linode (linode/instance/resource.go,
commit 6aef35f5) copies that list into the `ipv4` attribute, a TypeSet (hash order, not the API's),
and sets `ip_address` from the public and `private_ip_address` from the private list. So the program
must read `ip_address`/`private_ip_address`, never a position in `ipv4s`: the mock orders the set by
a hash of the name (both orders occur across a stack's nodes), and IPV4_ORDER lets tests force one.
"""

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


# "hash": the provider's set order (differs per node); "private-first" / "public-first": forced (tests).
IPV4_ORDER = "hash"


def private_address(name: str) -> str:
    """Linode private IPv4s come from 192.168.128.0/17; stable per name."""
    n = int(hashlib.sha256(name.encode()).hexdigest()[:6], 16) % (128 * 256 - 2) + 1
    return f"192.168.{128 + n // 256}.{n % 256}"


def _instance(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    reserved = inputs.get("ipv4s") or []
    public = reserved[0] if reserved else public_address(name)
    out: dict[str, Any] = {"ipAddress": public, "ipv4s": [public], "status": "running",
                           "ipv6": "2600:3c00::f03c:91ff:fe00:1/128"}
    if inputs.get("privateIp"):
        private = private_address(name)
        out["privateIpAddress"] = private
        private_first = (IPV4_ORDER == "private-first" or
                         (IPV4_ORDER == "hash" and int(hashlib.sha256(f"order/{name}".encode()).hexdigest(), 16) % 2 == 0))
        out["ipv4s"] = [private, public] if private_first else [public, private]
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
