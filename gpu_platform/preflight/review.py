"""What a pull-request reviewer reads besides the verdict (`preflight -v`, and `review` in preflight.json):
how close the stack is to the policy ceilings, the policy config applied, the Kubernetes version and the
end of its standard support, who can reach the Kubernetes API; and, with `--base DIR`, what changed
against the base branch's preflight output (resources, cost, policies)."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import stat
from collections import Counter
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
        text = (f"{gpus} GPUs, over the ceiling of {limit:g} by {gpus - limit:g}" if gpus > limit
                else f"{gpus} of {limit:g} GPUs")
        out.append({"policy": "gpu-count-ceiling", "setting": "maxGpus", "value": gpus, "limit": limit, "from": where,
                    "text": text})
    full = cost.get("fullMonthlyUsd")
    if full is not None:
        limit, where = _setting(config, "monthly-cost-ceiling", "maxMonthlyUsd", DEFAULT_MAX_MONTHLY_USD)
        text = (f"{_money(full)} a month at full capacity, over the ceiling of {_money(limit)} by {_money(full - limit)}"
                if full > limit else f"{_money(full)} of {_money(limit)} a month at full capacity")
        out.append({"policy": "monthly-cost-ceiling", "setting": "maxMonthlyUsd", "value": round(full, 2),
                    "limit": limit, "from": where, "text": text})
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
        # A /0 is every address of its family: said as such, not as "open to 0.0.0.0/0 only", which reads narrow.
        everyone = [c for c in cidrs if ipaddress.ip_network(c, strict=False).prefixlen == 0]
        if everyone:
            others = [c for c in cidrs if c not in everyone]
            text = (f"public endpoint, open to the whole internet ({', '.join(everyone)})"
                    + (f" and {', '.join(others)}" if others else ""))
        else:
            text = f"public endpoint, open to {', '.join(cidrs)} only"
    else:
        text = "public endpoint, open to nobody outside the cluster network (adminCidrs is empty)"
    return {"private": private, "adminCidrs": cidrs, "text": text}


def review(cfg: Any, policy_config: Optional[dict[str, Any]], policy_config_file: Optional[str],
           cost: Optional[dict[str, Any]]) -> dict[str, Any]:
    return {"headroom": headroom(policy_config, cost),
            "policyConfig": {"file": policy_config_file, "settings": policy_config or {}},
            "kubernetes": kubernetes(cfg), "apiExposure": api_exposure(cfg)}


def review_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of the reviewer's block, as `-v` prints it and the pull-request comment carries it. A policy
    config value under a key that names a credential is shown as [secret], as in the changes against the base."""
    rows = [("headroom", f"{h['text']} ({h['policy']}.{h['setting']}, {h['from']})") for h in doc["headroom"]]
    pc = doc["policyConfig"]
    if pc["file"]:
        settings = _mask(pc["settings"], False)
        text = ", ".join(f"{k}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(settings.items()))
        rows.append(("policy config", f"{pc['file']}: {text or '(empty)'}"))
    else:
        rows.append(("policy config", "none: the pack's defaults"))
    rows.append(("kubernetes", doc["kubernetes"]["text"]))
    rows.append(("API access", doc["apiExposure"]["text"]))
    return rows


def render_review(doc: dict[str, Any]) -> str:
    return "\n".join(["For the reviewer", *(f"  {label:<13} {text}" for label, text in review_rows(doc))])


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
LINE_NUMBERS = ("idleQuantity", "quantity", "idleMonthlyUsd", "monthlyUsd")


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
        lines = cost.get("lines", [])
        if not isinstance(lines, list) or len(lines) > MAX_BASE_RESOURCES:
            raise BaseRunError(f"{_shown(cost_path)}: lines: not a list of the bill's lines")
        for i, ln in enumerate(lines):
            if not (isinstance(ln, dict) and isinstance(ln.get("name"), str) and isinstance(ln.get("kind"), str)
                    and all(_number(ln.get(k)) and ln.get(k) is not None for k in LINE_NUMBERS)
                    and _number(ln.get("gpusPerUnit", 0), integer=True)):
                raise BaseRunError(f"{_shown(cost_path)}: lines[{i}]: not a line of the bill (an object with `name` and "
                                   f"`kind` strings and {', '.join(f'`{k}`' for k in LINE_NUMBERS)} numbers)")
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


# --- what changed inside a resource ---------------------------------------------------------------

# The order a reviewer reads changes in: who may do what, who may reach what, how traffic flows, the rest.
CATEGORIES = ("iam", "firewall", "network", "other")
CATEGORY_TITLES = {"iam": "IAM and access", "firewall": "firewall and API access", "network": "network",
                   "other": "other resources"}
# By type token (lower case; provider:module/name:Type) ...
_TYPE_WORDS = {
    "iam": ("iam", "serviceaccount", "rbac.authorization", "accessentry", "accesspolicyassociation", "kms/",
            "openidconnectprovider", "workloadidentity", "identitypool", "role", "instanceprofile", "core/v1:secret"),
    "firewall": ("firewall", "securitygroup", "networkpolicy", "networkacl", "validatingadmissionpolicy",
                 "podsecurity"),
    "network": ("network", "subnet", "vpc", "route", "router", "nat", "address", "nodebalancer", "loadbalancer",
                "lb/", "endpoint", "gateway", "peering", "dns", "eip"),
}
# ... and by the name of the changed field, whatever the resource (a cluster's authorized networks).
_FIELD_WORDS = {
    "iam": ("iam", "role", "serviceaccount", "principal", "policy", "oauthscopes", "workloadidentity", "accessconfig"),
    "firewall": ("cidr", "authorizednetwork", "sourceranges", "ingress", "egress", "firewall", "publicaccess",
                 "privateendpoint", "endpointprivateaccess", "endpointpublicaccess", "allowed", "ports"),
    "network": ("network", "subnet", "vpc", "ipallocation", "ip_range", "iprange", "servicecidr", "podcidr",
                "nodelocations", "zones", "region"),
}
MAX_FIELDS = 200  # per resource in baseDiff (a chart's values can change in hundreds of places)
SHOWN_FIELDS = 12  # per resource in the text
SHOWN_RESOURCES = 20  # per category in the text
MAX_VALUE = 80  # characters of a value in the text
MAX_ELEMENT = 2000  # characters of a list element added or removed, shown whole up to this
# Keys whose values are credentials, masked even where the program did not mark them secret.
_SECRET_KEY = __import__("re").compile(r"(?i)(password|passwd|secret|token|private_?key|privatekeypem|credential|"
                                       r"kubeconfig|apikey|api_key|stringdata|certificatekey)")
SECRET = "[secret]"


def category_of_type(type_token: str) -> str:
    low = type_token.lower().split("::")[-1]
    for cat in ("iam", "firewall", "network"):
        if any(w in low for w in _TYPE_WORDS[cat]):
            return cat
    return "other"


def category_of_field(path: str) -> Optional[str]:
    low = path.lower().replace("_", "").replace("-", "")
    for cat in ("iam", "firewall", "network"):
        if any(w.replace("_", "") in low for w in _FIELD_WORDS[cat]):
            return cat
    return None


def _json_text(value: Any) -> Any:
    """A string that holds a JSON object or array (an IAM policy document) as that object, else the value."""
    if isinstance(value, str) and value[:1] in "{[" and len(value) <= 1_000_000:
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def field_changes(old: Any, new: Any, path: str = "", secret: bool = False, out: Optional[list] = None,
                  depth: int = 0) -> list[dict[str, Any]]:
    """Every leaf that differs between two resources' inputs: [{path, base, head}] (a path in
    dotted/indexed form; `base`/`head` absent when the field is added/removed). Values under a key that
    names a credential, and values the plan already redacted, are shown as [secret]. JSON documents held in
    strings (IAM policies) are compared as documents."""
    out = [] if out is None else out
    if len(out) >= MAX_FIELDS or depth > MAX_BASE_DEPTH:
        return out
    old, new = _json_text(old), _json_text(new)
    if old == new:
        return out
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            sub = f"{path}.{k}" if path else str(k)
            hidden = secret or bool(_SECRET_KEY.search(str(k)))
            if k not in old:
                out.append({"path": sub, "head": _mask(new[k], hidden)})
            elif k not in new:
                out.append({"path": sub, "base": _mask(old[k], hidden)})
            else:
                field_changes(old[k], new[k], sub, hidden, out, depth + 1)
            if len(out) >= MAX_FIELDS:
                break
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            field_changes(a, b, f"{path}[{i}]", secret, out, depth + 1)
        return out
    if isinstance(old, list) and isinstance(new, list) and not secret:
        # A list that grew or shrank (an admin CIDR added): the elements removed and added, each whole, not
        # the two lists side by side, which the text cut off before the element that changed.
        removed, added = _list_difference(old, new)
        for i, element in removed:
            out.append({"path": f"{path}[{i}]", "base": _mask(element, False), "element": "removed"})
        for i, element in added:
            out.append({"path": f"{path}[{i}]", "head": _mask(element, False), "element": "added"})
        return out
    out.append({"path": path or "(inputs)", "base": _mask(old, secret), "head": _mask(new, secret)})
    return out


def _list_difference(old: list, new: list) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
    """(index in old, element) of the elements only the old list has, and (index in new, element) of those only
    the new one has, compared as whole elements and counted (a duplicate removed is one removal)."""
    def key(v: Any) -> str:
        return json.dumps(v, sort_keys=True, default=str)

    def only_in(these: list, others: list) -> list[tuple[int, Any]]:
        unmatched = Counter(key(v) for v in others)
        out = []
        for i, v in enumerate(these):
            if unmatched[key(v)]:
                unmatched[key(v)] -= 1
            else:
                out.append((i, v))
        return out

    return only_in(old, new), only_in(new, old)


def _mask(value: Any, secret: bool) -> Any:
    if secret or value == SECRET:
        return SECRET
    if isinstance(value, dict):
        return {k: _mask(v, bool(_SECRET_KEY.search(str(k)))) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, False) for v in value]
    return value


def _resource_change(urn: str, change: str, old: Optional[dict], new: Optional[dict]) -> dict[str, Any]:
    r = new or old or {}
    rtype = str(r.get("type") or (urn.split("::")[-2].rsplit("$", 1)[-1] if urn.count("::") >= 2 else ""))
    if change == "changed":
        fields = field_changes(old.get("inputs"), new.get("inputs"))
    elif change == "added":
        fields = field_changes({}, new.get("inputs") if isinstance(new.get("inputs"), dict) else {})
    else:
        fields = []
    cats = [category_of_type(rtype)] + [c for c in (category_of_field(f["path"]) for f in fields) if c]
    category = min(cats, key=CATEGORIES.index)
    return {"urn": urn, "type": rtype, "name": str(r.get("name") or _short(urn).split(" ", 1)[-1]), "change": change,
            "category": category, "fields": fields}


def diff(base: dict[str, Any], head: Path) -> dict[str, Any]:
    """Resources added, removed and changed (by URN and inputs) with, per resource, the inputs that changed
    (old -> new, secrets masked), ordered IAM, firewall, network, the rest; the capacity and the bill line by
    line (the total's change is the sum of the lines' to the cent); and each policy's result.
    `base`: load_base's documents of the base run; `head`: this run's folder."""
    old, new = base["plan"], _read(head / "plan.json") or {}
    before = {r["urn"]: r for r in old.get("resources", [])}
    after = {r["urn"]: r for r in new.get("resources", [])}
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(u for u in set(before) & set(after) if before[u].get("inputs") != after[u].get("inputs"))
    details = ([_resource_change(u, "changed", before[u], after[u]) for u in changed]
               + [_resource_change(u, "added", None, after[u]) for u in added]
               + [_resource_change(u, "removed", before[u], None) for u in removed])
    order = {"changed": 0, "removed": 1, "added": 2}
    details.sort(key=lambda d: (CATEGORIES.index(d["category"]), order[d["change"]], d["type"], d["name"]))
    out: dict[str, Any] = {"base": str(base["dir"]), "resources": {"added": added, "removed": removed, "changed": changed},
                           "changes": details}
    oc, nc = base["cost"], _read(head / "cost.json")
    if oc and nc:
        out["cost"] = {k: {"base": oc.get(k), "head": nc.get(k)} for k in COST_KEYS}
        out["capacity"], out["costLines"] = _bill_changes(oc.get("lines") or [], nc.get("lines") or [])
    op, np_ = base["policy"], _read(head / "policy.json")
    if op and np_:
        was = {p["name"]: (p["status"], len(p.get("violations", []))) for p in op.get("policies", [])}
        now = {p["name"]: (p["status"], len(p.get("violations", []))) for p in np_.get("policies", [])}
        out["policies"] = [{"policy": n, "base": f"{was[n][0]} ({was[n][1]})" if n in was else "absent",
                            "head": f"{now[n][0]} ({now[n][1]})" if n in now else "absent"}
                           for n in sorted(set(was) | set(now)) if was.get(n) != now.get(n)]
    return out


def _line_key(line: dict[str, Any]) -> str:
    """A bill line's name without what it says about its size ("gpu pool a100 (a2-highgpu-1g, spot)" ->
    "gpu pool a100"), so a resized line is the same line."""
    return str(line.get("name", "")).split(" (", 1)[0]


def _cents(usd: Any) -> int:
    return round(float(usd or 0) * 100)


def _bill_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(capacity changes: node lines whose idle..full count changed; cost changes: every line whose idle or
    full monthly amount changed, in cents, so the lines' changes add up to the total's exactly)."""
    if not old or not new:  # a base run from before cost.json had its lines: the totals only
        return [], []
    was = {_line_key(ln): ln for ln in old}
    now = {_line_key(ln): ln for ln in new}
    capacity, costs = [], []
    for key in list(was) + [k for k in now if k not in was]:
        a, b = was.get(key), now.get(key)
        if (a or b).get("kind") in ("gpu-pool", "system", "control-plane"):
            qa = (a["idleQuantity"], a["quantity"]) if a else (0, 0)
            qb = (b["idleQuantity"], b["quantity"]) if b else (0, 0)
            ga = int(a.get("gpusPerUnit") or 0) * qa[1] if a else 0
            gb = int(b.get("gpusPerUnit") or 0) * qb[1] if b else 0
            if qa != qb or (a or {}).get("resource") != (b or {}).get("resource"):
                capacity.append({"line": key, "base": {"nodes": list(qa), "resource": (a or {}).get("resource"), "gpus": ga},
                                 "head": {"nodes": list(qb), "resource": (b or {}).get("resource"), "gpus": gb}})
        full = (_cents(a["monthlyUsd"]) if a else 0, _cents(b["monthlyUsd"]) if b else 0)
        idle = (_cents(a["idleMonthlyUsd"]) if a else 0, _cents(b["idleMonthlyUsd"]) if b else 0)
        if full[0] != full[1] or idle[0] != idle[1]:
            costs.append({"line": key, "name": (b or a)["name"], "full": {"base": full[0] / 100, "head": full[1] / 100},
                          "idle": {"base": idle[0] / 100, "head": idle[1] / 100}})
    return capacity, costs


def _short(urn: str) -> str:
    """type::name of a URN."""
    parts = urn.split("::")
    return f"{parts[-2].rsplit('$', 1)[-1]} {parts[-1]}" if len(parts) >= 2 else urn


def _text(v: Any) -> str:
    from gpu_platform.config.approvals import one_line

    return one_line(json.dumps(v, sort_keys=True, ensure_ascii=False) if not isinstance(v, str) else json.dumps(v, ensure_ascii=False))


def _value(v: Any) -> str:
    if v == SECRET:
        return SECRET
    if isinstance(v, str) and "\n" in v:
        return f"({len(v.splitlines())} lines of text)"
    text = _text(v)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE - 3] + "..."


# Characters shown before the first difference when an old and new value are cut around it.
DIFF_CONTEXT = 24


def _values(a: Any, b: Any) -> tuple[str, str]:
    """The old and new value as the report prints them: whole up to MAX_VALUE characters; longer, both cut to the
    same window that starts a little before the first character where they differ, so that the difference stays
    visible (two image references differing only in their tag printed identical when both were cut at the
    front). A secret stays "[secret]"; multi-line text is summarised (_value)."""
    if SECRET in (a, b) or any(isinstance(v, str) and "\n" in v for v in (a, b)):
        return _value(a), _value(b)
    ta, tb = _text(a), _text(b)
    if len(ta) <= MAX_VALUE and len(tb) <= MAX_VALUE:
        return ta, tb
    at = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    start = max(0, at - DIFF_CONTEXT)

    def cut(text: str) -> str:
        if len(text) <= MAX_VALUE and start == 0:
            return text
        lead = "..." if start > 0 else ""
        end = start + MAX_VALUE - len(lead) - 3
        return lead + (text[start:end] + "..." if end < len(text) else text[start:])

    return cut(ta), cut(tb)


def _field_line(f: dict[str, Any]) -> str:
    from gpu_platform.config.approvals import one_line

    path = one_line(f["path"])
    if f.get("element") in ("added", "removed"):  # a list's element, whole (up to MAX_ELEMENT characters)
        v = f["head"] if f["element"] == "added" else f["base"]
        text = SECRET if v == SECRET else one_line(json.dumps(v, sort_keys=True, ensure_ascii=False))
        if len(text) > MAX_ELEMENT:
            text = text[:MAX_ELEMENT - 3] + "..."
        return f"{path}: {f['element']} {text}"
    if "base" not in f:
        return f"{path}: (none) -> {_value(f['head'])}"
    if "head" not in f:
        return f"{path}: {_value(f['base'])} -> (removed)"
    a, b = f["base"], f["head"]
    if a == SECRET and b == SECRET:
        return f"{path}: [secret] changed"
    if isinstance(a, str) and isinstance(b, str) and ("\n" in a or "\n" in b):
        la, lb = a.splitlines(), b.splitlines()
        at = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
        first = (f"line {at + 1}: {_value(la[at]) if at < len(la) else '(none)'} -> "
                 f"{_value(lb[at]) if at < len(lb) else '(none)'}")
        return f"{path}: text of {len(la)} -> {len(lb)} lines, first change at {first}"
    va, vb = _values(a, b)
    return f"{path}: {va} -> {vb}"


def _usd(cents_value: float) -> str:
    return f"${cents_value:,.2f}"


def _delta(a: float, b: float) -> str:
    d = (round(b * 100) - round(a * 100)) / 100
    return f"{'+' if d >= 0 else '-'}${abs(d):,.2f}"


def _nodes(q: list) -> str:
    lo, hi = (int(x) if float(x).is_integer() else x for x in q)
    return f"{lo}" if lo == hi else f"{lo}..{hi}"


def render_diff(d: dict[str, Any]) -> str:
    from gpu_platform.config.approvals import one_line

    r = d["resources"]
    lines = [f"Changes against the base ({one_line(d['base'])})",
             f"  resources     +{len(r['added'])} added, -{len(r['removed'])} removed, ~{len(r['changed'])} changed"]
    details = d.get("changes", [])
    sign = {"added": "+", "removed": "-", "changed": "~"}
    for cat in CATEGORIES:
        items = [i for i in details if i["category"] == cat]
        if items:
            lines.append(f"  {CATEGORY_TITLES[cat]}")
        for item in items[:SHOWN_RESOURCES]:
            lines.append(f"    {sign[item['change']]} {one_line(_short(item['urn']))}")
            if item["change"] == "removed" or (item["change"] == "added" and cat == "other"):
                continue  # a new resource's inputs are the plan's; those of an IAM, firewall or network one are shown
            fields = item["fields"]
            for f in fields[:SHOWN_FIELDS]:
                lines.append(f"        {_field_line(f)}")
            if len(fields) > SHOWN_FIELDS:
                more = len(fields) - SHOWN_FIELDS
                lines.append(f"        ... {more}{'+' if len(fields) >= MAX_FIELDS else ''} more field(s) "
                             "(baseDiff in preflight.json)")
        if len(items) > SHOWN_RESOURCES:
            lines.append(f"    ... {len(items) - SHOWN_RESOURCES} more (baseDiff in preflight.json)")
    for c in d.get("capacity", []):
        a, b = c["base"], c["head"]
        what = f"{_nodes(a['nodes'])} -> {_nodes(b['nodes'])} nodes (idle..full)"
        if a["resource"] != b["resource"]:
            what += f", {a['resource'] or '(none)'} -> {b['resource'] or '(none)'}"
        if a["gpus"] or b["gpus"]:
            what += f", {a['gpus']} -> {b['gpus']} GPUs at full capacity"
        lines.append(one_line(f"  capacity      {c['line']}: {what}"))
    cost = d.get("cost") or {}
    g = cost.get("fullGpus")
    if g and g["base"] != g["head"] and not d.get("capacity"):
        lines.append(f"  GPUs          at full capacity: {g['base']} -> {g['head']}")
    for key, label, part in (("fullMonthlyUsd", "full capacity", "full"), ("idleMonthlyUsd", "idle floor", "idle")):
        c = cost.get(key)
        if not c or c["base"] is None or c["head"] is None:
            continue
        if round(c["base"] * 100) == round(c["head"] * 100):
            lines.append(f"  cost          {label}: {_usd(c['head'])}/month, unchanged")
            continue
        lines.append(f"  cost          {label}: {_usd(c['base'])} -> {_usd(c['head'])}/month ({_delta(c['base'], c['head'])})")
        for ln in d.get("costLines", []):
            x = ln[part]
            if round(x["base"] * 100) != round(x["head"] * 100):
                lines.append(one_line(f"                  {ln['line']}: {_usd(x['base'])} -> {_usd(x['head'])} "
                                      f"({_delta(x['base'], x['head'])})"))
    if "policies" in d:
        if not d["policies"]:
            lines.append("  policies      no result changed")
        for p in d["policies"]:
            lines.append(one_line(f"  policies      {p['policy']}: {p['base']} -> {p['head']}"))
    return "\n".join(lines)
