"""pulumi-random answers that honour the requested character classes and length.

Seeded by the resource's name and inputs (keepers included): the same stack gives the same plan on
every run (plans are diffed in review), and a changed keeper gives a new value, as the provider does.
The values are throwaway all the same: preflight masks them wherever it writes them."""

from __future__ import annotations

import hashlib
import json
import random
import string
from typing import Any

from gpu_platform.preflight.mocks import sensitive


def _rng(inputs: dict[str, Any], name: str) -> random.Random:
    seed = hashlib.sha256(f"{name}|{json.dumps(inputs, sort_keys=True, default=str)}".encode()).digest()
    return random.Random(seed)


def _random_string(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    alphabet = ""
    if inputs.get("lower", True):
        alphabet += string.ascii_lowercase
    if inputs.get("upper", True):
        alphabet += string.ascii_uppercase
    if inputs.get("numeric", inputs.get("number", True)):
        alphabet += string.digits
    if inputs.get("special", True):
        alphabet += inputs.get("overrideSpecial") or "!@#$%&*()-_=+[]{}<>:?"
    length = int(inputs.get("length", 16))
    rng = _rng(inputs, name)
    return {"result": sensitive("".join(rng.choice(alphabet) for _ in range(length)))}


def _random_id(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    raw = _rng(inputs, name).randbytes(int(inputs.get("byteLength", 8)))
    sensitive(raw.hex())
    return {"hex": raw.hex(), "b64Url": raw.hex(), "b64Std": raw.hex(), "dec": str(int.from_bytes(raw, "big"))}


def _random_bytes(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    """random.RandomBytes: `length` bytes, as base64 and hex (both secret in the provider)."""
    import base64

    raw = _rng(inputs, name).randbytes(int(inputs.get("length", 32)))
    return {"base64": sensitive(base64.b64encode(raw).decode()), "hex": sensitive(raw.hex())}


RESOURCES = {
    "random:index/randomBytes:RandomBytes": _random_bytes,
    "random:index/randomString:RandomString": _random_string,
    "random:index/randomPassword:RandomPassword": _random_string,
    "random:index/randomId:RandomId": _random_id,
}
