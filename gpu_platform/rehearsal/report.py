"""The rehearsal report on the console (rich), from the same document as rehearsal.json."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

_STYLE = {"PASS": "green", "FAIL": "bold red", "NOT REHEARSED": "yellow"}


def render(doc: dict[str, Any], console: Console) -> None:
    status = doc["status"]
    console.print(Text(f"Rehearsal of {doc['stack']}: {status}", style=_STYLE.get(status, "")))
    if doc.get("error"):
        console.print(Text(f"  error: {doc['error']}", style="red"))
    t = doc.get("timings") or {}
    console.print(f"  {len(doc['nodes'])} KWOK node(s), {doc['applied']} object(s) applied server-side"
                  + (f", {t.get('total')} s" if t.get("total") is not None else ""), highlight=False)
    sc = Table(title="Scenarios", title_justify="left", show_lines=False)
    for col in ("scenario", "status", "what was seen"):
        sc.add_column(col)
    for s in doc["scenarios"]:
        lines = [*(f"✗ {p}" for p in s["problems"]), *s["details"]]
        sc.add_row(s["name"], Text(s["status"], style=_STYLE.get(s["status"], "")), "\n".join(lines) or "")
    console.print(sc)
    wl = Table(title="Workloads (Ready / wanted, node group the pods landed on, cluster fit's group)", title_justify="left")
    for col in ("workload", "release", "ready", "landed on", "fit"):
        wl.add_column(col)
    for w in doc["workloads"]:
        ok = w["want"] is not None and w["ready"] >= w["want"]
        wl.add_row(w["object"], w["release"], Text(f"{w['ready']}/{w['want']}", style="green" if ok else "red"),
                   ", ".join(w["groups"]) or "-", ", ".join(w["fitGroups"]) or "-")
    if doc["workloads"]:
        console.print(wl)
    ctl = Table(title="Platform controllers (local processes, their ServiceAccount's token)", title_justify="left")
    for col in ("controller", "status", "service account", "changed in its configuration"):
        ctl.add_column(col)
    for c in doc["controllers"]:
        ctl.add_row(c["binary"], Text(c["status"], style="green" if c["status"] == "running" else "red"),
                    c["serviceAccount"], "\n".join(c["configChanges"]) + (f"\n{c['problem']}" if c["problem"] else ""))
    console.print(ctl)
    rewritten = [w for w in doc["webhooks"] if w["action"].startswith("webhook clientConfig")]
    removed = [w for w in doc["webhooks"] if not w["action"].startswith("webhook clientConfig")]
    console.print(f"  webhook clientConfig rewritten to local process: {len(rewritten)} webhook(s)", highlight=False)
    for w in removed:
        console.print(Text(f"  NOT REHEARSED: {w['configuration']} {w['webhook']} ({w['was']}, {w['controller']})", style="yellow"))
    for n in doc["notRehearsed"]:
        console.print(Text(f"  NOT REHEARSED: {n}", style="yellow"))
    for h in doc["hooks"]:
        console.print(f"  hook {h['hook']} {h['object']} ({h['release']}): {h['action']}", highlight=False, markup=False)
    for c in doc["cloudObjects"]:
        console.print(f"  created as the cloud does: {c}", highlight=False)
    if doc["volumesProvisioned"]:
        console.print(f"  volumes provisioned by the rehearsal (stand-in for the CSI driver): {', '.join(doc['volumesProvisioned'])}",
                      highlight=False)
    for ns in doc["namespacesCreated"]:
        console.print(f"  namespace {ns} created (a release installs into it without declaring it)", highlight=False)
    for r in doc["refused"]:
        console.print(Text(f"  REFUSED {r['kind']} {(r['namespace'] + '/') if r['namespace'] else ''}{r['name']} "
                           f"({r['release']}): {r['message']}", style="red"))
    from gpu_platform.rehearsal.controllers import fatal

    for name, lines in doc["controllerErrors"].items():
        bad = fatal(lines)
        first = (bad or lines)[0][:400]
        console.print(Text(f"  {name}: {len(lines)} error line(s) in its log ({len(bad)} failing the rehearsal), "
                           f"{'first failing' if bad else 'first'}: {first}", style="red" if bad else "yellow"))
    for e in doc["controlPlaneErrors"]:
        console.print(Text(f"  control plane: {e}", style="red"))
    console.print(f"  logs: {doc['logs']}", highlight=False)
