"""Guardrails that a stack's policy config may not weaken without a recorded exception.

Every policy the pack declares mandatory, and every ceiling of one (maxGpus, maxMonthlyUsd, ...), can be
lowered or loosened only with an exception: who approved it, why, and until when, the same
{reason, approver} a pool's approvedOnDemand records, plus `until` (gpu_platform/config/approvals.py
checks all three). Where the exception is written:
- an ordinary mandatory policy: under the policy in the stack's policy config,
    gpu-count-ceiling: {maxGpus: 128, exception: {reason: ..., approver: jane@example.com, until: 2027-03-31}}
- a locked security policy (gpu_platform/policies/enforcement.yaml `locked`): only in that file's
  `exceptions` (stack, policy, level, reason, approver, until): a stack's own file cannot unlock it.
A locked policy is mandatory whatever declares it: the pack refuses to load when it declares one at
another level, and preflight refuses such a pack.

Two places apply the rules:
- preflight (gpu_platform/preflight/analyzer.py) keeps a weakened policy at its level and settings and
  reports the attempt as a mandatory violation of that policy (a verdict, exit 3); the exceptions that
  apply are listed in the verdict;
- the pack itself (`install`, called by gpu_platform/policies/__main__.py) refuses a Configure call that
  weakens a policy without a valid exception, so `pulumi preview --policy-pack-config` cannot either.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from gpu_platform.config.approvals import approval_problems, describe

ENFORCEMENT_FILE = Path(__file__).resolve().parent / "enforcement.yaml"
RANK = {"disabled": 0, "advisory": 1, "remediate": 2, "mandatory": 2}
# Settings and when a new value is looser than the default. A setting not listed here is looser
# whenever it differs from the default.
LOOSER: dict[str, Callable[[Any, Any], bool]] = {
    "minPrefixV4": lambda new, old: new < old, "minPrefixV6": lambda new, old: new < old,
    "maxUnionPrefixV4": lambda new, old: new < old, "maxUnionPrefixV6": lambda new, old: new < old,
    "sshPorts": lambda new, old: not set(old) <= set(new), "kubeApiPorts": lambda new, old: not set(old) <= set(new),
    # Ceilings: a higher ceiling (or a lower floor) is looser; a stricter one needs nobody's approval.
    "maxGpus": lambda new, old: new > old, "maxMonthlyUsd": lambda new, old: new > old,
    "minOverrideRatio": lambda new, old: new < old, "maxIdleShare": lambda new, old: new > old,
    "maxBudgetOverrun": lambda new, old: new > old, "maxBudgetHeadroom": lambda new, old: new > old,
    # What preflight measured in the rendered charts: more only raises the cost estimate.
    "chartStorageGib": lambda new, old: new < old, "chartLoadBalancers": lambda new, old: new < old,
}
# Settings that are approvals themselves (each exemptPools entry carries its reason and approver,
# checked by the policy) or the record of one.
NOT_SETTINGS = ("exception", "exemptPools")
EXCEPTION_KEY = "exception"
EXCEPTION_KEYS = ("stack", "policy", "level", "reason", "approver", "until")
# The JSON schema of `exception`, added to every mandatory policy's config schema (with_exceptions).
EXCEPTION_SCHEMA = {
    "type": "object", "required": ["reason", "approver", "until"], "additionalProperties": False,
    "description": "Who approved weakening this policy for the stack, why, and the last day it holds.",
    "properties": {"reason": {"type": "string"}, "approver": {"type": "string"},
                   "until": {"type": "string", "description": "YYYY-MM-DD"}},
}


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


def _show(value: Any) -> str:
    """A setting as written (protobuf Structs turn every number into a float: 16.0 reads 16)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


def weakened(level: str, props: Mapping[str, Any], base_level: str, base_props: Mapping[str, Any]) -> list[str]:
    """How (level, props) is weaker than the defaults, in words; empty when it is not."""
    what = []
    if RANK.get(level, 0) < RANK.get(base_level, 2):
        what.append(f"sets it to {level}")
    looser = []
    for k, v in sorted(props.items()):
        if k in NOT_SETTINGS:
            continue
        old = base_props.get(k)
        try:
            loose = LOOSER[k](v, old) if k in LOOSER and k in base_props else v != old
        except TypeError:  # a value of the wrong type: the schema check reports it
            loose = True
        if loose:
            looser.append(f"{k} ({_show(old)} -> {_show(v)})" if k in LOOSER else k)
    if looser:
        what.append(f"loosens {', '.join(looser)}")
    return what


def exception_for(enforcement: Enforcement, stack: str, policy: str, level: str) -> Optional[dict]:
    return next((e for e in enforcement.exceptions if e["stack"] == stack and e["policy"] == policy
                 and RANK.get(str(e["level"]), 2) <= RANK.get(level, 0)), None)


def refusal(where: str, name: str, what: list[str], base_level: str) -> str:
    return (f"{where} {' and '.join(what)}, but {name} is a locked security policy: it stays {base_level} with "
            "its default settings. Only an entry in gpu_platform/policies/enforcement.yaml (exceptions, with a reason, an "
            "approver and until) can change it.")


def judge(name: str, level: str, props: Mapping[str, Any], base_level: str, base_props: Mapping[str, Any], *,
          locked: bool, enforcement: Enforcement, stack: str, where: str,
          on: Optional[_dt.date] = None) -> tuple[Optional[str], Optional[str]]:
    """(refusal, exception applied) for one policy as configured: both None when nothing is weakened."""
    what = weakened(level, props, base_level, base_props)
    if not what:
        return None, None
    if locked:
        entry = exception_for(enforcement, stack, name, level)
        if entry is None:
            return refusal(where, name, what, base_level), None
        source = "its exception in gpu_platform/policies/enforcement.yaml"
    else:
        entry = props.get(EXCEPTION_KEY)
        if entry is None:
            return (f"{where} {' and '.join(what)}, but {name} is a mandatory guardrail: it stays {base_level} with its "
                    f"default settings unless the change is approved. Record who approved it, why and until when "
                    f"under the policy: {EXCEPTION_KEY}: {{reason: ..., approver: <e-mail or @github-handle>, "
                    "until: YYYY-MM-DD} (docs/costs-and-alerts.md, 'Guardrails and their exceptions')."), None
        source = f"its {EXCEPTION_KEY} in the policy config"
    problems = approval_problems(dict(entry) if isinstance(entry, Mapping) else entry, need_until=True, on=on)
    if problems:
        return (f"{where} {' and '.join(what)} of {name}, but {source} does not hold: {'; '.join(problems)}. "
                f"The policy stays {base_level} with its default settings."), None
    return None, f"{name}: {' and '.join(what)} for stack {stack} by exception ({describe(dict(entry))})"


def guarded(name: str, level: str, locked: Sequence[str]) -> tuple[bool, str]:
    """(whether weakening `name` needs an exception, the level it is held at)."""
    if name in locked:
        return True, "mandatory"
    return RANK.get(level, 0) >= RANK["mandatory"], level


def with_exceptions(policies: Sequence[Any]) -> list[Any]:
    """Give every mandatory policy an `exception` setting (EXCEPTION_SCHEMA), where a stack records the
    approval of weakening it; the CLI and preflight validate it against the schema like any setting."""
    from pulumi_policy import EnforcementLevel, PolicyConfigSchema

    for p in policies:
        if p.enforcement_level != EnforcementLevel.MANDATORY:
            continue
        if p.config_schema is None:
            p.config_schema = PolicyConfigSchema(properties={})
        p.config_schema.properties[EXCEPTION_KEY] = EXCEPTION_SCHEMA
    return list(policies)


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
    """Refuse to load when a locked policy is declared below mandatory; wrap pulumi_policy's Configure
    handler (and ConfigureStack, for the stack name) so a weakening without a valid exception fails."""
    import yaml
    from google.protobuf import json_format
    from pulumi_policy import policy as pp

    enforcement = parse_enforcement(yaml.safe_load(path.read_text()), str(path))
    defaults = _defaults(policies)
    lowered = sorted(n for n in enforcement.locked if n in defaults and defaults[n][0] != "mandatory")
    if lowered:
        raise ValueError(f"the pack declares the locked polic{'y' if len(lowered) == 1 else 'ies'} {', '.join(lowered)} "
                         f"below mandatory; locked policies ({path}) are mandatory whatever declares them")
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
        for name, (base_level, base_props) in defaults.items():
            needs, base_level = guarded(name, base_level, enforcement.locked)
            if not needs or name not in request.policyConfig:
                continue
            cfg = request.policyConfig[name]
            level = names.get(cfg.enforcementLevel, "advisory")
            props = json_format.MessageToDict(cfg.properties)
            refused, _ = judge(name, level, props, base_level, base_props, locked=name in enforcement.locked,
                               enforcement=enforcement, stack=state["stack"], where="the policy pack config")
            if refused:
                problems.append(refused)
        if problems:
            import grpc

            context.abort(grpc.StatusCode.FAILED_PRECONDITION, " ".join(problems))
        return original_configure(self, request, context)

    servicer.Configure = configure
    servicer.ConfigureStack = configure_stack
