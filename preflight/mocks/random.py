"""pulumi-random answers that honour the requested character classes and length."""

from __future__ import annotations

import secrets
import string
from typing import Any

from preflight.mocks import sensitive


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
    return {"result": sensitive("".join(secrets.choice(alphabet) for _ in range(length)))}


def _random_id(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    raw = secrets.token_bytes(int(inputs.get("byteLength", 8)))
    sensitive(raw.hex())
    return {"hex": raw.hex(), "b64Url": raw.hex(), "b64Std": raw.hex(), "dec": str(int.from_bytes(raw, "big"))}


RESOURCES = {
    "random:index/randomString:RandomString": _random_string,
    "random:index/randomPassword:RandomPassword": _random_string,
    "random:index/randomId:RandomId": _random_id,
}
