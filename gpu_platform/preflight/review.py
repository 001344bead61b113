"""What a pull-request reviewer reads besides the verdict (`preflight -v`, and `review` in preflight.json):
how close the stack is to the policy ceilings, the policy config applied, the Kubernetes version and the
end of its standard support, who can reach the Kubernetes API; and, with `--base DIR`, what changed
against the base branch's preflight output (resources, cost, policies)."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Optional

# Policies that judge one cloud's resources: on another cloud's stack they have nothing to judge.
POLICY_CLOUD = {"aws-imdsv2-encrypted-volumes": "aws", "linode-disk-encryption": "linode", "gke-node-hardening": "gcp"}


def not_applicable(policy: str, cloud: Optional[str]) -> bool:
    return cloud is not None and POLICY_CLOUD.get(policy, cloud) != cloud


def _setting(config: Optional[dict[str, Any]], policy: str, key: str, default: float) -> tuple[float, str]:
    """A policy setting as the pack applies it, and where it came from."""
    entry = (config or {}).get(policy)
    if isinstance(entry, dict) and key in entry:
        return float(entry[key]), "policy config"
    return float(default), "pack default"


def _money(usd: float) -> str:
    return f"${usd / 1000:,.1f}k" if usd >= 1000 else f"${usd:,.0f}"


def headroom(config: Optional[dict[str, Any]], cost: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ceilings the pack enforces next to what the stack can reach at full capacity."""
    from gpu_platform.policies.cost_rules import DEFAULT_MAX_GPUS, DEFAULT_MAX_MONTHLY_USD

    if not cost:
        return []
    out = []
    gpus = cost.get("fullGpus")
    if gpus is not None:
        limit, where = _setting(config, "gpu-count-ceiling", "maxGpus", DEFAULT_MAX_GPUS)
        out.append({"policy": "gpu-count-ceiling", "setting": "maxGpus", "value": gpus, "limit": limit, "from": where,
                    "text": f"{gpus} of {limit:g} GPUs"})
    full = cost.get("fullMonthlyUsd")
    if full is not None:
        limit, where = _setting(config, "monthly-cost-ceiling", "maxMonthlyUsd", DEFAULT_MAX_MONTHLY_USD)
        out.append({"policy": "monthly-cost-ceiling", "setting": "maxMonthlyUsd", "value": round(full, 2),
                    "limit": limit, "from": where, "text": f"{_money(full)} of {_money(limit)} a month at full capacity"})
    return out


def kubernetes(cfg: Any) -> dict[str, Any]:
    from gpu_platform.data import versions_calendar

    minor = getattr(cfg, "kubernetes_version", None)
    if not minor:
        return {"version": None, "text": "not pinned: the release channel's default version"}
    row = versions_calendar.load_calendar().row(cfg.cloud, minor)
    if row is None:
        return {"version": minor, "text": f"{minor} (not in the version calendar)"}
    days = row.days_to_end_of_standard()
    whose = " (the cluster's; upstream" if cfg.cloud == "kubernetes" else ""
    return {"version": minor, "endOfStandardSupport": row.end_of_standard.isoformat(), "status": row.status(),
            "text": f"{minor}{whose}{',' if not whose else ''} standard support until {row.end_of_standard.isoformat()}"
                    f"{')' if whose else ''} ({days} days)"}


def api_exposure(cfg: Any) -> dict[str, Any]:
    """Who can reach the Kubernetes API, from the config the program builds the endpoint from."""
    cidrs = [str(c) for c in getattr(cfg, "admin_cidrs", [])]
    private = False
    if cfg.cloud == "gcp":
        private = bool(getattr(cfg.gcp, "private_endpoint", False))
    elif cfg.cloud == "aws":
        private = bool(getattr(cfg.aws, "endpoint_private_only", False))
    if cfg.cloud == "kubernetes":
        return {"private": False, "adminCidrs": cidrs,
                "text": "the existing cluster's own: the program creates no API endpoint (cloud kubernetes); who "
                        "reaches it is the cluster's setting"}
    if private:
        text = "private endpoint only (reachable inside the VPC" + (f", from {', '.join(cidrs)}" if cidrs else "") + ")"
    elif cidrs:
        text = f"public endpoint, open to {', '.join(cidrs)} only"
    else:
        text = "public endpoint, open to nobody outside the cluster network (adminCidrs is empty)"
    return {"private": private, "adminCidrs": cidrs, "text": text}


def review(cfg: Any, policy_config: Optional[dict[str, Any]], policy_config_file: Optional[str],
           cost: Optional[dict[str, Any]]) -> dict[str, Any]:
    return {"headroom": headroom(policy_config, cost),
            "policyConfig": {"file": policy_config_file, "settings": policy_config or {}},
            "kubernetes": kubernetes(cfg), "apiExposure": api_exposure(cfg)}


def render_review(doc: dict[str, Any]) -> str:
    lines = ["For the reviewer"]
    for h in doc["headroom"]:
        lines.append(f"  headroom      {h['text']} ({h['policy']}.{h['setting']}, {h['from']})")
    pc = doc["policyConfig"]
    if pc["file"]:
        settings = ", ".join(f"{k}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(pc["settings"].items()))
        lines.append(f"  policy config {pc['file']}: {settings or '(empty)'}")
    else:
        lines.append("  policy config none: the pack's defaults")
    lines.append(f"  kubernetes    {doc['kubernetes']['text']}")
    lines.append(f"  API access    {doc['apiExposure']['text']}")
    return "\n".join(lines)


# --- the diff against a base plan ----------------------------------------------------------------


def base_dir(base: Path, stack: str) -> Optional[Path]:
    """The base run's folder for this stack: DIR/<stack> (a build folder) or DIR itself."""
    for d in (base / stack, base):
        if os.path.lexists(d / "plan.json"):
            return d
    return None


class BaseRunError(ValueError):
    """A --base folder's file that is not what preflight writes; str() names the file."""


# The base folder is another run's output, perhaps from an untrusted branch's CI artifacts: read within
# bounds. A plan.json is ~0.2-1 MiB (every resource's inputs); cost.json and policy.json a few KiB.
MAX_BASE_BYTES = {"plan.json": 16 * 1024 * 1024, "cost.json": 1024 * 1024, "policy.json": 4 * 1024 * 1024}
MAX_BASE_DEPTH = 200  # resource inputs (Helm values) nest a few dozen levels
MAX_BASE_RESOURCES = 10_000  # a stack registers a few hundred
COST_KEYS = ("idleMonthlyUsd", "fullMonthlyUsd", "fullGpus")


def _shown(path: Path) -> str:
    from gpu_platform.config.approvals import one_line

    return one_line(str(path))


def _load_base_file(path: Path) -> Any:
    """The JSON document at `path`, or BaseRunError: not a regular file, larger than MAX_BASE_BYTES, not
    UTF-8 JSON, or nested deeper than MAX_BASE_DEPTH."""
    limit = MAX_BASE_BYTES[path.name]
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise BaseRunError(f"{_shown(path)}: not a regular file (a directory, device, pipe or socket)")
        if st.st_size > limit:
            raise BaseRunError(f"{_shown(path)}: {st.st_size / 2**20:.1f} MiB, larger than the {limit // 2**20} MiB "
                               f"a preflight {path.name} can be")
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise BaseRunError(f"{_shown(path)}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > limit:  # grew while read
        raise BaseRunError(f"{_shown(path)}: larger than the {limit // 2**20} MiB a preflight {path.name} can be")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BaseRunError(f"{_shown(path)}: not JSON ({exc})") from None
    except RecursionError:
        raise BaseRunError(f"{_shown(path)}: nested deeper than {MAX_BASE_DEPTH} levels") from None
    from gpu_platform.preflight.fit.render import nested_deeper_than

    if nested_deeper_than(doc, MAX_BASE_DEPTH):
        raise BaseRunError(f"{_shown(path)}: nested deeper than {MAX_BASE_DEPTH} levels")
    return doc


def _number(v: Any, integer: bool = False) -> bool:
    if isinstance(v, bool) or v is None:
        return v is None
    return isinstance(v, int) or (not integer and isinstance(v, float) and math.isfinite(v))


def load_base(folder: Path) -> dict[str, Any]:
    """The base run's plan.json (required), cost.json and policy.json (where present), checked against the
    shape preflight writes them in (runner.Plan.to_json, costs.report.cost_document, analyzer
    PolicyReport.to_json): {"dir", "plan", "cost", "policy"}, or BaseRunError naming the file and the key."""
    out: dict[str, Any] = {"dir": folder, "plan": None, "cost": None, "policy": None}
    plan_path = folder / "plan.json"
    plan = _load_base_file(plan_path)
    resources = plan.get("resources") if isinstance(plan, dict) else None
    if not isinstance(resources, list):
        raise BaseRunError(f"{_shown(plan_path)}: not a preflight plan (an object with a `resources` list)")
    if len(resources) > MAX_BASE_RESOURCES:
        raise BaseRunError(f"{_shown(plan_path)}: {len(resources)} resources, more than the {MAX_BASE_RESOURCES} a "
                           "preflight plan can hold")
    for i, r in enumerate(resources):
        if not isinstance(r, dict) or not isinstance(r.get("urn"), str):
            raise BaseRunError(f"{_shown(plan_path)}: resources[{i}]: not a resource (an object with a `urn` string)")
    out["plan"] = plan
    cost_path = folder / "cost.json"
    if os.path.lexists(cost_path):
        cost = _load_base_file(cost_path)
        if not isinstance(cost, dict):
            raise BaseRunError(f"{_shown(cost_path)}: not a preflight cost document (an object)")
        for key in COST_KEYS:
            if not _number(cost.get(key), integer=key == "fullGpus"):
                raise BaseRunError(f"{_shown(cost_path)}: {key}: {_shown(json.dumps(cost.get(key)))[:60]} is not "
                                   f"{'a whole number' if key == 'fullGpus' else 'a number'} (or null)")
        out["cost"] = cost
    policy_path = folder / "policy.json"
    if os.path.lexists(policy_path):
        policy = _load_base_file(policy_path)
        policies = policy.get("policies") if isinstance(policy, dict) else None
        if not isinstance(policies, list):
            raise BaseRunError(f"{_shown(policy_path)}: not a preflight policy report (an object with a `policies` list)")
        for i, p in enumerate(policies):
            if not (isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("status"), str)
                    and isinstance(p.get("violations", []), list)):
                raise BaseRunError(f"{_shown(policy_path)}: policies[{i}]: not a policy result (an object with "
                                   "`name` and `status` strings and a `violations` list)")
        out["policy"] = policy
    return out


def _read(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def diff(base: dict[str, Any], head: Path) -> dict[str, Any]:
    """Resources added, removed and changed (by URN and inputs), the cost, and each policy's result.
    `base`: load_base's documents of the base run; `head`: this run's folder."""
    old, new = base["plan"], _read(head / "plan.json") or {}
    before = {r["urn"]: r for r in old.get("resources", [])}
    after = {r["urn"]: r for r in new.get("resources", [])}
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(u for u in set(before) & set(after) if before[u].get("inputs") != after[u].get("inputs"))
    out: dict[str, Any] = {"base": str(base["dir"]), "resources": {"added": added, "removed": removed, "changed": changed}}
    oc, nc = base["cost"], _read(head / "cost.json")
    if oc and nc:
        out["cost"] = {k: {"base": oc.get(k), "head": nc.get(k)} for k in COST_KEYS}
    op, np_ = base["policy"], _read(head / "policy.json")
    if op and np_:
        was = {p["name"]: (p["status"], len(p.get("violations", []))) for p in op.get("policies", [])}
        now = {p["name"]: (p["status"], len(p.get("violations", []))) for p in np_.get("policies", [])}
        out["policies"] = [{"policy": n, "base": f"{was[n][0]} ({was[n][1]})" if n in was else "absent",
                            "head": f"{now[n][0]} ({now[n][1]})" if n in now else "absent"}
                           for n in sorted(set(was) | set(now)) if was.get(n) != now.get(n)]
    return out


def _short(urn: str) -> str:
    """type::name of a URN."""
    parts = urn.split("::")
    return f"{parts[-2].rsplit('$', 1)[-1]} {parts[-1]}" if len(parts) >= 2 else urn


def render_diff(d: dict[str, Any]) -> str:
    r = d["resources"]
    from gpu_platform.config.approvals import one_line

    lines = [f"Changes against the base ({one_line(d['base'])})",
             f"  resources     +{len(r['added'])} added, -{len(r['removed'])} removed, ~{len(r['changed'])} changed"]
    for sign, key in (("+", "added"), ("-", "removed"), ("~", "changed")):
        for urn in r[key][:20]:
            lines.append(f"    {sign} {one_line(_short(urn))}")
        if len(r[key]) > 20:
            lines.append(f"    {sign} ... {len(r[key]) - 20} more (plan.json)")
    for key, label in (("fullMonthlyUsd", "full capacity"), ("idleMonthlyUsd", "idle floor")):
        c = (d.get("cost") or {}).get(key)
        if c and c["base"] is not None and c["head"] is not None:
            delta = c["head"] - c["base"]
            lines.append(f"  cost          {label}: ${c['base']:,.0f} -> ${c['head']:,.0f}/month ({delta:+,.0f})")
    g = (d.get("cost") or {}).get("fullGpus")
    if g and g["base"] != g["head"]:
        lines.append(f"  GPUs          at full capacity: {g['base']} -> {g['head']}")
    if "policies" in d:
        if not d["policies"]:
            lines.append("  policies      no result changed")
        for p in d["policies"]:
            lines.append(one_line(f"  policies      {p['policy']}: {p['base']} -> {p['head']}"))
    return "\n".join(lines)
