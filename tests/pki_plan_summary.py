"""What `linode.pki: program` must keep exactly as the program-owned-CA flow registers it (recorded from main at
57ca698, where that flow is the only one): every resource's type and name, the PKI resources' inputs, and each
node's boot files. Key
material is random in every plan (the mocks generate real keys), so PEM blocks, hashes and long base64 are
masked before hashing. tests/data/linode_pki_program_main.json holds the summary of main's plans, recorded with

    cd <checkout of main> && python -c 'import sys; sys.path[:0] = [".", "<this repo>/tests"]; \
        from pki_plan_summary import record; record("<this repo>/tests/data/linode_pki_program_main.json")'

(the program imported from main's checkout, this module from this repository)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml

PKI_TYPES = ("tls:", "random:")
STACKS = ("linode-dev", "linode-ha")
# Every resource of the Linode cluster layer (components/linode: instances and their user data, the PKI, the CA
# read-back, the token Secrets, the add-ons) is named after the stack's name prefix; the platform layer's are
# named `platform...`. `linode.pki` is read by the cluster layer only.
PREFIXES = {"linode-dev": "gpu-dev", "linode-ha": "gpu-staging"}


def cluster_layer(resources: list[str], stack: str) -> set[str]:
    """The `type::name` entries of the Linode cluster layer: what `linode.pki` can change."""
    prefix = PREFIXES[stack]
    return {r for r in resources if r.split("::", 1)[1] == prefix or r.split("::", 1)[1].startswith(prefix + "-")}


def _mask(text: str) -> str:
    text = re.sub(r"-----BEGIN ([A-Z ]+)-----[\s\S]*?-----END \1-----", r"<PEM \1>", text)
    text = re.sub(r"sha256:[0-9a-f]{64}", "sha256:<hash>", text)
    return re.sub(r"[A-Za-z0-9+/]{40,}={0,2}", "<base64>", text)


def _digest(value: Any) -> str:
    return hashlib.sha256(_mask(json.dumps(value, sort_keys=True, default=str)).encode()).hexdigest()[:16]


def summary(plan: Any) -> dict[str, Any]:
    from gpu_platform.components.linode.render import decode_user_data

    out: dict[str, Any] = {"resources": sorted(f"{r.type}::{r.name}" for r in plan.resources),
                           "pki_inputs": {}, "boot_files": {}}
    for r in plan.resources:
        if r.type.startswith(PKI_TYPES):
            out["pki_inputs"][f"{r.type}::{r.name}"] = json.loads(_mask(json.dumps(r.plain_inputs, sort_keys=True)))
        if r.type == "linode:index/instance:Instance":
            doc = yaml.safe_load(decode_user_data(r.plain_inputs["metadatas"][0]["userData"]))
            files = {f["path"]: _digest([f["content"], f.get("permissions")]) for f in doc["write_files"]}
            files["runcmd"] = _digest(doc.get("runcmd"))
            out["boot_files"][r.plain_inputs["label"]] = files
    return out


def plans(pki: str | None) -> dict[str, Any]:
    """The shipped Linode stacks' plans, with linode.pki set to `pki` (None: as shipped, for main)."""
    import copy
    from pathlib import Path

    from gpu_platform.preflight.runner import run_program, stack_input_from_mapping

    root = Path.cwd()
    out = {}
    for stack in STACKS:
        cfg = copy.deepcopy(yaml.safe_load((root / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"])
        if pki is not None:
            cfg["gpu-platform:linode"]["pki"] = pki
        out[stack] = summary(run_program(stack_input_from_mapping(stack, cfg)))
    return out


def record(path: str) -> None:
    import os

    os.environ.setdefault("GPU_PLATFORM_TODAY", "2026-11-23")
    with open(path, "w") as f:
        json.dump(plans(None), f, indent=1, sort_keys=True)
        f.write("\n")
