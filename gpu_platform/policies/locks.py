"""Locked policies: what a stack's policy config may not do to the pack's security policies.

The rules live in gpu_platform/policies/enforcement.yaml (shipped, locked, exceptions). Two places apply them:
- preflight (gpu_platform/preflight/analyzer.py) keeps a locked policy at its level and settings and reports the
  attempt as a mandatory violation of that policy (a verdict, exit 3);
- the pack itself (`install`, called by gpu_platform/policies/__main__.py) refuses a Configure call that lowers or
  loosens a locked policy, so `pulumi preview --policy-pack-config` cannot do it either (the CLI
  reports the refusal and the preview fails).
An exception (stack, policy, level, reason, approver) in the same file is the only way around a lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

ENFORCEMENT_FILE = Path(__file__).resolve().parent / "enforcement.yaml"
RANK = {"disabled": 0, "advisory": 1, "remediate": 2, "mandatory": 2}
# Settings of locked policies and when a new value is looser than the default.
LOOSER: dict[str, Callable[[Any, Any], bool]] = {
    "minPrefixV4": lambda new, old: new < old, "minPrefixV6": lambda new, old: new < old,
    "maxUnionPrefixV4": lambda new, old: new < old, "maxUnionPrefixV6": lambda new, old: new < old,
    "sshPorts": lambda new, old: not set(old) <= set(new), "kubeApiPorts": lambda new, old: not set(old) <= set(new),
}
EXCEPTION_KEYS = ("stack", "policy", "level", "reason", "approver")


@dataclass(frozen=True)
class Enforcement:
    shipped: tuple[str, ...]
    locked: tuple[str, ...]
    exceptions: tuple[dict, ...]


def parse_enforcement(doc: Any, where: str) -> Enforcement:
    doc = doc or {}
    if not isinstance(doc, Mapping):
        raise ValueError(f"{where}: a mapping of shipped, locked and exceptions")
    exceptions = tuple(doc.get("exceptions") or ())
    for e in exceptions:
        missing = [k for k in EXCEPTION_KEYS if not isinstance(e, Mapping) or not str(e.get(k) or "").strip()]
        if missing:
            raise ValueError(f"{where}: exception {e!r} lacks {', '.join(missing)}")
    return Enforcement(tuple(doc.get("shipped") or ()), tuple(doc.get("locked") or ()), exceptions)


def weakened(level: str, props: Mapping[str, Any], base_level: str, base_props: Mapping[str, Any]) -> list[str]:
    """How (level, props) is weaker than the defaults, in words; empty when it is not."""
    what = []
    if RANK.get(level, 0) < RANK.get(base_level, 2):
        what.append(f"sets it to {level}")
    looser = sorted(k for k, v in props.items()
                    if (k in LOOSER and k in base_props and LOOSER[k](v, base_props[k]))
                    or (k not in LOOSER and v != base_props.get(k)))
    if looser:
        what.append(f"loosens {', '.join(looser)}")
    return what


def exception_for(enforcement: Enforcement, stack: str, policy: str, level: str) -> Optional[dict]:
    return next((e for e in enforcement.exceptions if e["stack"] == stack and e["policy"] == policy
                 and RANK.get(str(e["level"]), 2) <= RANK.get(level, 0)), None)


def refusal(where: str, name: str, what: list[str], base_level: str) -> str:
    return (f"{where} {' and '.join(what)}, but {name} is a locked security policy: it stays {base_level} with "
            "its default settings. Only an entry in gpu_platform/policies/enforcement.yaml (exceptions, with a reason and an "
            "approver) can change it.")


# ---------------------------------------------------------------------------------------------
# In the pack: refuse a Configure call that weakens a locked policy
# ---------------------------------------------------------------------------------------------


def _defaults(policies: Sequence[Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for p in policies:
        level = getattr(p.enforcement_level, "value", None) or "advisory"
        schema = getattr(p.config_schema, "properties", None) or {}
        out[p.name] = (level, {k: v["default"] for k, v in schema.items() if isinstance(v, dict) and "default" in v})
    return out


def install(policies: Sequence[Any], path: Path = ENFORCEMENT_FILE) -> None:
    """Wrap pulumi_policy's Configure handler (and ConfigureStack, for the stack name)."""
    import yaml
    from google.protobuf import json_format
    from pulumi_policy import policy as pp

    enforcement = parse_enforcement(yaml.safe_load(path.read_text()), str(path))
    defaults = _defaults(policies)
    from pulumi.runtime.proto import analyzer_pb2

    names = {analyzer_pb2.ADVISORY: "advisory", analyzer_pb2.MANDATORY: "mandatory",
             analyzer_pb2.DISABLED: "disabled", analyzer_pb2.REMEDIATE: "remediate"}
    servicer = pp._PolicyAnalyzerServicer  # pylint: disable=protected-access
    original_configure, original_stack = servicer.Configure, servicer.ConfigureStack
    state = {"stack": os.environ.get("PULUMI_STACK", "")}

    def configure_stack(self, request, context):
        state["stack"] = request.stack or state["stack"]
        return original_stack(self, request, context)

    def configure(self, request, context):
        problems = []
        for name in enforcement.locked:
            if name not in request.policyConfig or name not in defaults:
                continue
            cfg = request.policyConfig[name]
            level = names.get(cfg.enforcementLevel, "advisory")
            props = json_format.MessageToDict(cfg.properties)
            what = weakened(level, props, *defaults[name])
            if what and exception_for(enforcement, state["stack"], name, level) is None:
                problems.append(refusal("the policy pack config", name, what, defaults[name][0]))
        if problems:
            import grpc

            context.abort(grpc.StatusCode.FAILED_PRECONDITION, " ".join(problems))
        return original_configure(self, request, context)

    servicer.Configure = configure
    servicer.ConfigureStack = configure_stack
