"""What a pull-request reviewer reads besides the verdict (`preflight -v`, and `review` in preflight.json):
how close the stack is to the policy ceilings, the policy config applied, the Kubernetes version and the
end of its standard support, who can reach the Kubernetes API; and, with `--base DIR`, what changed
against the base branch's preflight output (resources, cost, policies)."""

from __future__ import annotations

import json
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
    from gpu_platform.config import versions_calendar

    minor = getattr(cfg, "kubernetes_version", None)
    if not minor:
        return {"version": None, "text": "not pinned: the release channel's default version"}
    row = versions_calendar.load_calendar().row(cfg.cloud, minor)
    if row is None:
        return {"version": minor, "text": f"{minor} (not in the version calendar)"}
    days = row.days_to_end_of_standard()
    return {"version": minor, "endOfStandardSupport": row.end_of_standard.isoformat(), "status": row.status(),
            "text": f"{minor}, standard support until {row.end_of_standard.isoformat()} ({days} days)"}


def api_exposure(cfg: Any) -> dict[str, Any]:
    """Who can reach the Kubernetes API, from the config the program builds the endpoint from."""
    cidrs = [str(c) for c in getattr(cfg, "admin_cidrs", [])]
    private = False
    if cfg.cloud == "gcp":
        private = bool(getattr(cfg.gcp, "private_endpoint", False))
    elif cfg.cloud == "aws":
        private = bool(getattr(cfg.aws, "endpoint_private_only", False))
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
        if (d / "plan.json").is_file():
            return d
    return None


def _read(path: Path) -> Optional[dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def diff(base: Path, head: Path) -> dict[str, Any]:
    """Resources added, removed and changed (by URN and inputs), the cost, and each policy's result."""
    old, new = _read(base / "plan.json") or {}, _read(head / "plan.json") or {}
    before = {r["urn"]: r for r in old.get("resources", [])}
    after = {r["urn"]: r for r in new.get("resources", [])}
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(u for u in set(before) & set(after) if before[u].get("inputs") != after[u].get("inputs"))
    out: dict[str, Any] = {"base": str(base), "resources": {"added": added, "removed": removed, "changed": changed}}
    oc, nc = _read(base / "cost.json"), _read(head / "cost.json")
    if oc and nc:
        out["cost"] = {k: {"base": oc.get(k), "head": nc.get(k)} for k in ("idleMonthlyUsd", "fullMonthlyUsd", "fullGpus")}
    op, np_ = _read(base / "policy.json"), _read(head / "policy.json")
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
    lines = [f"Changes against the base ({d['base']})",
             f"  resources     +{len(r['added'])} added, -{len(r['removed'])} removed, ~{len(r['changed'])} changed"]
    for sign, key in (("+", "added"), ("-", "removed"), ("~", "changed")):
        for urn in r[key][:20]:
            lines.append(f"    {sign} {_short(urn)}")
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
            lines.append(f"  policies      {p['policy']}: {p['base']} -> {p['head']}")
    return "\n".join(lines)
