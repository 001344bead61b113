"""Preflight's verdict: one document per run (what `--format json` prints and `build/<stack>/preflight.json`
holds, validated by `gpu_platform/preflight/preflight.schema.json`), the summary a reviewer reads first, and the
Markdown table CI writes to the job summary and the pull request (`python -m gpu_platform.preflight summary DIR`).

Everything here is ordered and rounded deterministically: two runs of one stack give the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

SCHEMA_PATH = Path(__file__).with_name("preflight.schema.json")
DOCUMENT = "preflight.json"

EXIT_OK, EXIT_CONFIG, EXIT_FAILED, EXIT_USAGE = 0, 2, 3, 4
EXIT_CODES = {
    EXIT_OK: "ok: policies pass and every workload fits",
    EXIT_CONFIG: "the stack config, a policy config or a chart is wrong (the message names the file and key)",
    EXIT_FAILED: "a mandatory policy is violated or a workload would not be scheduled or admitted",
    EXIT_USAGE: "usage: an unknown stack, a missing file or folder, bad arguments",
    1: "an internal error (a bug: please report it with the output)",
}


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def money(usd: Optional[float]) -> str:
    return "n/a" if usd is None else f"${usd:,.0f}"


# pulumi-docker-build's image: what `pulumi up` builds from the repository and pushes (components/images.py).
IMAGE_BUILD = "docker-build:index:Image"


def image_builds(plan: Any) -> list[dict[str, Any]]:
    """The images `pulumi up` would build: name, where it is pushed, its build context and Dockerfile."""
    out = []
    for r in plan.by_type(IMAGE_BUILD):
        inputs = r.inputs
        tags = [t for t in inputs.get("tags") or [] if isinstance(t, str)]
        labels = inputs.get("labels") if isinstance(inputs.get("labels"), dict) else {}
        out.append({"name": str(labels.get("org.opencontainers.image.title") or r.name),
                    "repository": tags[0].rsplit(":", 1)[0] if tags else "[unknown]",
                    "context": str((inputs.get("context") or {}).get("location", "")),
                    "dockerfile": str((inputs.get("dockerfile") or {}).get("location", ""))})
    return sorted(out, key=lambda i: (i["name"], i["repository"]))


def plan_summary(plan: Any) -> dict[str, Any]:
    by_type = Counter(r.type for r in plan.resources)
    return {"resources": len(plan.resources),
            "byType": [{"type": t, "count": n} for t, n in sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0]))],
            "images": image_builds(plan)}


def kinds_line(plan: dict[str, Any], top: int = 6) -> str:
    """'61 resources: 12 Release, 9 Namespace, ... (+N kinds)' — the kind is the type's last part."""
    kinds: Counter[str] = Counter()
    for row in plan["byType"]:
        kinds[row["type"].rsplit(":", 1)[-1]] += row["count"]
    ordered = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{n} {k}" for k, n in ordered[:top])
    more = f" (+{len(ordered) - top} kinds)" if len(ordered) > top else ""
    return f"{plural(plan['resources'], 'resource')}: {shown}{more}"


def policy_section(report: Any) -> dict[str, Any]:
    doc = report.to_json()
    return {"verdict": "fail" if report.mandatory_violations else "pass",
            "mandatoryViolations": report.mandatory_violations, "advisoryViolations": report.advisory_violations,
            "resourcesAnalyzed": doc.get("resourcesAnalyzed"), "pack": doc.get("pack"),
            "policies": sorted(doc.get("policies", []), key=lambda p: p.get("name", "")),
            "approvals": doc.get("approvals", [])}


def fit_section(result: Any) -> dict[str, Any]:
    report = result.report
    problems = sorted(({"check": p.check, "release": p.release, "object": p.object, "reason": p.reason, "fix": p.fix}
                       for p in report.problems), key=lambda p: (p["check"], p["release"], p["object"], p["reason"]))
    flows = getattr(report, "flows", None)
    return {"verdict": "fail" if problems else "pass", "releases": report.releases, "pods": report.pods,
            "problems": problems,
            "notRendered": sorted(f"{r.name} ({r.chart} {r.version})" for r in result.not_rendered),
            # the platform's connections (fit/flows.py); every detail in fit.json
            "flows": None if flows is None else {
                "dataplane": flows.dataplane, "checked": len(flows.results),
                "failed": [{"name": r.name, "verdict": r.verdict, "expected": r.expected, "policies": r.policies}
                           for r in flows.failed]}}


def stale_prices_text(cost: dict[str, Any]) -> Optional[str]:
    """'STALE PRICES: a2-highgpu-1g 632 days old ...' when a price of the bill is older than the catalog's
    maximum age (gpu_platform/costs/report.py CATALOG_MAX_AGE_DAYS), else None."""
    age = cost.get("catalogAge") or {}
    if not age.get("stale"):
        return None
    names = ", ".join(age.get("staleResources") or [])
    return (f"STALE PRICES: {names} up to {age['ageDays']} days old (dated {age['oldestPriceDate']}; more than "
            f"{age['maxAgeDays']}): refresh before trusting these figures (docs/cost-model.md, \"Catalog age\")")


def _missing_text(refused: dict[str, Any]) -> str:
    """'no spot price for g5.2xlarge, g6.xlarge in eu-west-1': every type a refused bill lacks, by capacity."""
    missing = refused.get("missing") or [{"type": refused["type"], "capacity": refused["capacity"]}]
    by_capacity: dict[str, list[str]] = {}
    for m in missing:
        by_capacity.setdefault(m["capacity"], []).append(m["type"])
    return "; ".join(f"no {capacity} price for {', '.join(types)} in {refused['region']}"
                     for capacity, types in by_capacity.items())


def _refused_fix_text(refused: dict[str, Any]) -> str:
    """What the bill below a refusal offers, as it does (estimator.RegionPriceRefused.fix): the priceOverrides lines
    always; the command that records the region's published prices only for a type the recorded offerings do not
    rule out there; for one they list in no zone of the region, no command (its lookup would come back empty)."""
    region = refused["region"]
    missing = refused.get("missing") or []
    absent = list(dict.fromkeys(m["type"] for m in missing if m.get("offered") is False))
    recordable = [m for m in missing if m.get("offered") is not False]
    text = "the bill below gives the priceOverrides lines to paste"
    if recordable:
        text += f" and the command that records {region}'s published prices"
        if absent:
            text += f" of {', '.join(dict.fromkeys(m['type'] for m in recordable))}"
    if absent:
        them = "it" if len(absent) == 1 else "them"
        text += (f"; {region} may not offer {', '.join(absent)} (the recorded offerings list {them} in no {region} "
                 f"zone): no price can be recorded there, choose a region that offers {them}")
    return text


def cost_section(cost_json: Path) -> Optional[dict[str, Any]]:
    if not cost_json.exists():
        return None
    doc = json.loads(cost_json.read_text())
    if doc.get("refused"):
        r = doc["refused"]
        refused = {k: r.get(k) for k in ("type", "capacity", "region", "message")}
        refused["missing"] = r.get("missing") or [{"type": r.get("type"), "capacity": r.get("capacity")}]
        return {"idleMonthlyUsd": None, "fullMonthlyUsd": None, "budgetUsd": None, "priceNotes": [],
                "refused": refused}
    budget = doc.get("budget") or {}
    return {"idleMonthlyUsd": doc.get("idleMonthlyUsd"), "fullMonthlyUsd": doc.get("fullMonthlyUsd"),
            "fullGpus": doc.get("fullGpus"), "gpuModels": doc.get("gpuModels", []),
            "budgetUsd": budget.get("monthlyBudgetUsd"),
            # what the figures stand on when it is not the stack's own region (reference-region prices)
            "priceNotes": list(doc.get("warnings") or []),
            # a share (0..1) in cost.json; a percentage here, as the summary prints it
            "budgetReachedAtUtilisation": (None if budget.get("budgetReachedAtUtilization") is None
                                           else round(100 * budget["budgetReachedAtUtilization"], 1)),
            "catalogAge": doc.get("catalogAge"),
            # what has no price (cloud kubernetes without node prices): then there are no figures above
            "unpriced": list(doc.get("unpriced") or [])}


def document(stack: str, cfg: Any, exit_code: int, *, plan: Any = None, policies: Optional[dict] = None,
             fit: Optional[dict] = None, cost: Optional[dict] = None, warnings: tuple[str, ...] = (),
             error: Optional[str] = None, review: Optional[dict] = None,
             base_diff: Optional[dict] = None) -> dict[str, Any]:
    verdict = {EXIT_OK: "pass", EXIT_FAILED: "fail", EXIT_CONFIG: "config-error", EXIT_USAGE: "usage-error"}.get(
        exit_code, "error")
    doc: dict[str, Any] = {
        "stack": stack, "cloud": getattr(cfg, "cloud", None), "exitCode": exit_code, "verdict": verdict,
        "plan": plan_summary(plan) if plan is not None else None,
        "policies": policies, "clusterFit": fit, "cost": cost, "warnings": sorted(warnings),
    }
    if error is not None:
        doc["error"] = error
    if review is not None:
        doc["review"] = review
    if base_diff is not None:
        doc["baseDiff"] = base_diff
    return doc


@lru_cache(maxsize=1)
def _validator() -> Any:
    """The schema's validator, the schema itself checked once per process: jsonschema.validate checks it again on
    every call (30 ms, ten times the document's own check)."""
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(doc: dict[str, Any]) -> None:
    """Raise jsonschema's ValidationError (the best match, as jsonschema.validate) unless `doc` is a preflight
    document."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        raise error


# --- text -------------------------------------------------------------------------------------


def summary_lines(doc: dict[str, Any]) -> list[tuple[str, str, Optional[str]]]:
    """(label, text, style) rows of the summary; style is a rich style or None."""
    rows: list[tuple[str, str, Optional[str]]] = []
    if doc.get("plan"):
        rows.append(("plan", kinds_line(doc["plan"]), None))
        images = doc["plan"].get("images") or []
        if images:
            rows.append(("images", "built at `pulumi up` (a Docker daemon with BuildKit): "
                         + "; ".join(f"{i['name']} -> {i['repository']}" for i in images), None))
    pol = doc.get("policies")
    if pol is not None:
        text = (f"{'FAIL' if pol['verdict'] == 'fail' else 'PASS'}  {plural(len(pol['policies']), 'policy')}"
                .replace("policys", "policies") +
                f", {plural(pol['mandatoryViolations'], 'mandatory violation')}, {pol['advisoryViolations']} advisory")
        rows.append(("policies", text, "bold red" if pol["verdict"] == "fail" else "green"))
    elif doc.get("plan") and doc.get("verdict") in ("pass", "fail"):
        # A verdict without the policy pack must not read like one with it (--no-policies).
        rows.append(("policies", "NOT RUN: this verdict says nothing about policy", "yellow"))
    fit = doc.get("clusterFit")
    if fit is not None:
        text = (f"{'FAIL' if fit['verdict'] == 'fail' else 'PASS'}  {plural(fit['releases'], 'release')}, "
                f"{plural(fit['pods'], 'pod')}, {plural(len(fit['problems']), 'problem')}")
        if fit["notRendered"]:
            text += f"; NOT RENDERED: {', '.join(fit['notRendered'])}"
        rows.append(("cluster fit", text, "bold red" if fit["verdict"] == "fail" else
                     ("yellow" if fit["notRendered"] else "green")))
    cost = doc.get("cost")
    if cost is not None and cost.get("unpriced"):
        rows.append(("cost", f"NOT ESTIMATED: no node prices ({'; '.join(cost['unpriced'])}); set "
                             "kubernetes.nodeTypes.<type>.usdPerHour to have a bill", "yellow"))
    elif cost is not None and cost.get("refused"):
        rows.append(("cost", f"REFUSED: {_missing_text(cost['refused'])}; {_refused_fix_text(cost['refused'])}",
                     "bold red"))
    elif cost is not None:
        text = f"idle {money(cost['idleMonthlyUsd'])}/month, full capacity {money(cost['fullMonthlyUsd'])}/month"
        budget, full = cost.get("budgetUsd"), cost.get("fullMonthlyUsd")
        style = None
        if budget:
            text += f" vs budget {money(budget)}"
            if full is not None and full > budget:
                at = cost.get("budgetReachedAtUtilisation")
                text += " (OVER at full capacity" + (f"; reached at {at:.0f} % utilisation)" if isinstance(at, (int, float)) else ")")
                style = "yellow"
        for note in cost.get("priceNotes") or []:
            text += f"; {note}"
            style = style or "yellow"
        stale = stale_prices_text(cost)
        if stale:  # the verdict stays PASS: the age is shown where the figures are (docs/cost-model.md, "Catalog age")
            text += f"; {stale}"
            style = style or "yellow"
        rows.append(("cost", text, style))
    # Every exception and approval in force: a reviewer sees who allowed what, and until when.
    rows += [("approved", a, "yellow") for a in (pol or {}).get("approvals", [])]
    for warning in doc.get("warnings", []):
        rows.append(("warning", warning, "yellow"))
    return rows


def render_summary(doc: dict[str, Any], console: Any) -> None:
    """The verdict block, first thing a reviewer reads; colour only where the console has it."""
    head = {"pass": ("PASS", "bold green"), "fail": ("FAIL", "bold red")}.get(doc["verdict"], (doc["verdict"].upper(), "bold red"))
    console.print(f"preflight {doc['stack']} ({doc.get('cloud') or '?'}): [{head[1]}]{head[0]}[/] (exit {doc['exitCode']})",
                  highlight=False)
    for label, text, style in summary_lines(doc):
        console.print(f"  {label:<12}" + (f"[{style}]{_escape(text)}[/]" if style else _escape(text)), highlight=False)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


# --- CI summary -------------------------------------------------------------------------------


# What one comment may hold: GitHub refuses a comment body over 65,536 characters, and comment.yml posts the
# first 60,000 bytes of body.md after its marker line. A summary for the pull request (`summary --comment`) stays
# within COMMENT_MAX_BYTES (bytes, at least as many as characters), so that cut never falls inside it; the job
# summary, which GitHub takes up to 1 MiB of, within JOB_SUMMARY_MAX_BYTES.
GITHUB_COMMENT_MAX_CHARS = 65_536
COMMENT_MAX_BYTES = 59_000
JOB_SUMMARY_MAX_BYTES = 1_000_000
# More warnings than this for one stack are folded in a <details> block.
WARNINGS_SHOWN_OPEN = 3


def md_text(text: Any) -> str:
    """`text` as one line of Markdown text that renders as written: no line break (a warning or message that
    held one would start a heading or a table row of its own), and `&` and `<` as entities, so `<host>` shows and
    no `</details>` or other HTML in a value (a pull request's stack file) can end the comment's own blocks (a `>`
    opens nothing in the middle of a line: `64 -> 100` stays as it is)."""
    from gpu_platform.config.approvals import one_line

    return one_line(str(text)).replace("&", "&amp;").replace("<", "&lt;")


def md_code(text: Any) -> str:
    """`text` as an inline code span (nothing in one is HTML: `Pod/jupyterhub/jupyter-<user>` shows as written), or
    as md_text where a backtick in it could end the span."""
    from gpu_platform.config.approvals import one_line

    line = one_line(str(text))
    return md_text(line) if "`" in line else f"`{line}`"


def warning_texts(doc: dict[str, Any]) -> list[str]:
    """Every warning of a stack's verdict once: the verdict's own, the bill's price notes and a stale catalog."""
    cost = doc.get("cost") or {}
    notes = [*doc.get("warnings", []), *(cost.get("priceNotes") or [])]
    stale = stale_prices_text(cost) if cost else None
    return list(dict.fromkeys(notes + ([stale] if stale else [])))


def _stack_section(doc: dict[str, Any]) -> list[str]:
    """A stack's problems, its warnings (each once) and the reviewer's block (`-v`'s "For the reviewer")."""
    details = []
    if doc.get("error"):
        error = str(doc["error"])
        details += [f"- error: {md_text(error)}"] if "\n" not in error.strip() else ["- error:", *fenced(error)]
    for p in (doc.get("policies") or {}).get("policies", []):
        for v in p.get("violations", []) if p.get("status") not in ("pass", None) else []:
            message = v.get("message", v) if isinstance(v, dict) else v
            details.append(f"- policy `{p['name']}` ({p.get('enforcementLevel')}): {md_text(message)}")
    for p in (doc.get("clusterFit") or {}).get("problems", []):
        details.append(f"- {md_text(p['check'])}: {md_code(p['object'])} ({md_text(p['release'])}): "
                       f"{md_text(p['reason'])} — fix: {md_text(p['fix'])}")
    for a in (doc.get("policies") or {}).get("approvals", []):
        details.append(f"- approved: {md_text(a)}")
    warnings = [f"- warning: {md_text(w)}" for w in warning_texts(doc)]
    if len(warnings) > WARNINGS_SHOWN_OPEN:
        details += ["", f"<details><summary>{plural(len(warnings), 'warning')}</summary>", "", *warnings, "",
                    "</details>"]
    else:
        details += warnings
    if doc.get("review"):
        from gpu_platform.preflight.review import review_rows

        details += ["", "**For the reviewer**", "",
                    *(f"- {label}: {md_text(text)}" for label, text in review_rows(doc["review"]))]
    return [f"### {doc['stack']}", *details] if details else []


def markdown(docs: list[dict[str, Any]], comment: bool = False) -> str:
    """One table for every stack's verdict, then each stack's problems, warnings and the reviewer's block, then
    its changes against the base branch: the job summary (within JOB_SUMMARY_MAX_BYTES) and, with `comment`, the
    pull request's comment (within COMMENT_MAX_BYTES)."""
    lines = ["## Preflight", "", "| stack | verdict | policies | cluster fit | full capacity / budget |",
             "|---|---|---|---|---|"]
    for doc in sorted(docs, key=lambda d: d["stack"]):
        pol, fit, cost = doc.get("policies"), doc.get("clusterFit"), doc.get("cost")
        pol_text = "–" if pol is None else f"{pol['verdict']} ({pol['mandatoryViolations']} mandatory)"
        fit_text = "–" if fit is None else f"{fit['verdict']} ({plural(len(fit['problems']), 'problem')})"
        if fit and fit["notRendered"]:
            fit_text += f", not rendered: {', '.join(fit['notRendered'])}"
        if cost is not None and cost.get("refused"):
            r = cost["refused"]
            cost_text = f"refused: {_missing_text(r)}"
        else:
            cost_text = "–" if cost is None else (f"not priced / {money(cost.get('budgetUsd'))}" if cost.get("unpriced")
                                                  else f"{money(cost['fullMonthlyUsd'])} / {money(cost.get('budgetUsd'))}")
            if cost is not None and (cost.get("catalogAge") or {}).get("stale"):
                cost_text += f" (prices up to {cost['catalogAge']['ageDays']} days old)"
        mark = "✅" if doc["verdict"] == "pass" else "❌"
        warned = len(warning_texts(doc))
        verdict_text = f"{mark} {doc['verdict']}" + (f", {plural(warned, 'warning')}" if warned else "")
        lines.append(f"| {doc['stack']} ({doc.get('cloud') or '?'}) | {verdict_text} | {pol_text} | {fit_text} | {cost_text} |")
    for doc in sorted(docs, key=lambda d: d["stack"]):
        section = _stack_section(doc)
        if section:
            lines += ["", *section]
    compared = any(doc.get("baseDiff") for doc in docs)
    for doc in sorted(docs, key=lambda d: d["stack"]):
        if doc.get("baseDiff"):
            from gpu_platform.preflight.review import render_diff

            lines += ["", f"### {doc['stack']}: changes against the base branch", *fenced(render_diff(doc["baseDiff"]))]
        elif compared:
            lines += ["", f"### {doc['stack']}: not compared", "The base branch's run has no plan of this stack (a stack "
                      "new in this pull request, or the base run failed before planning it)."]
    return _within(lines, COMMENT_MAX_BYTES if comment else JOB_SUMMARY_MAX_BYTES, comment)


def _within(lines: list[str], max_bytes: int, comment: bool) -> str:
    """The lines joined, or, when they take more than `max_bytes` (UTF-8), as many whole lines as fit with the
    blocks open at the cut closed (a code fence, a <details>) and a note of what was left out and where it is."""
    text = "\n".join(lines) + "\n"
    size = len(text.encode())
    if size <= max_bytes:
        return text

    def note(left: int) -> str:
        holds = (f"a GitHub comment holds {GITHUB_COMMENT_MAX_CHARS:,} characters" if comment
                 else f"a job summary holds {JOB_SUMMARY_MAX_BYTES:,} bytes here")
        where = "this run's job summary and, for each stack, " if comment else ""
        return (f"\n**The summary stops here**: {left:,} more bytes of it are left out ({holds}). The rest is in "
                f"{where}`preflight.json` in the run's `preflight` artifact.\n")

    budget = max_bytes - len(note(size).encode())

    def closers(fence: Optional[str], details: int) -> list[str]:
        return ([fence] if fence else []) + ["", "</details>"] * details

    out: list[str] = []
    used = 0
    fence: Optional[str] = None  # the open code fence
    details = 0  # <details> blocks open
    for line in lines:
        after_fence, after_details = fence, details
        if fence is not None:
            after_fence = None if line == fence else fence
        elif line.startswith("```"):
            after_fence = line[:len(line) - len(line.lstrip("`"))]
        elif line.startswith("<details>"):
            after_details += 1
        elif line == "</details>":
            after_details -= 1
        cost = len(line.encode()) + 1
        if used + cost + sum(len(c.encode()) + 1 for c in closers(after_fence, after_details)) > budget:
            break
        out.append(line)
        used += cost
        fence, details = after_fence, after_details
    left = sum(len(line.encode()) + 1 for line in lines[len(out):])
    out += closers(fence, details)
    return "\n".join(out) + "\n" + note(left)


def fenced(text: str) -> list[str]:
    """`text` as a Markdown code block whose fence no run of backticks in it can close (its lines come from
    plans a pull request writes)."""
    import re

    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", *text.splitlines(), fence]


# A stack `summary --expect` names that left no preflight.json: a refused stack file or argument writes none.
NO_VERDICT = ("preflight wrote no verdict for this stack: it stopped before the plan (a config or usage error); the "
              "job's log names the key and the file")


def summary_main(argv: list[str]) -> int:
    """`python -m gpu_platform.preflight summary DIR`: Markdown of every DIR/<stack>/preflight.json."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gpu_platform.preflight summary", description=markdown.__doc__)
    parser.add_argument("dir", nargs="?", default="build", help="preflight's output folder (default: build)")
    parser.add_argument("--comment", action="store_true",
                        help=f"for a pull-request comment: at most {COMMENT_MAX_BYTES:,} bytes (GitHub holds "
                             f"{GITHUB_COMMENT_MAX_CHARS:,} characters a comment), cut with a note; without it, at most "
                             f"{JOB_SUMMARY_MAX_BYTES:,} (a job summary)")
    parser.add_argument("--expect", nargs="+", action="extend", default=[], metavar="STACK",
                        help="stacks that must have a verdict: one without (preflight stopped before writing it, e.g. "
                             "a stack file refused before the plan) is a failed row, not left out")
    args = parser.parse_args(argv)
    docs = [json.loads(p.read_text()) for p in sorted(Path(args.dir).glob(f"*/{DOCUMENT}"))]
    have = {d["stack"] for d in docs}
    docs += [document(stack, None, 1, error=NO_VERDICT) for stack in dict.fromkeys(args.expect) if stack not in have]
    if not docs:
        print(f"preflight summary: no {DOCUMENT} under {args.dir}/", file=__import__("sys").stderr)
        return EXIT_USAGE
    print(markdown(docs, comment=args.comment), end="")
    return EXIT_OK if all(d["exitCode"] == 0 for d in docs) else EXIT_FAILED
