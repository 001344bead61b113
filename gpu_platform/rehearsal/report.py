"""The rehearsal report on the console (rich), from the same document as rehearsal.json."""

from __future__ import annotations

from typing import Any

from rich.console import Console
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
    # Lines, not tables: a piped report (CI logs) is 80 columns wide and tables would cut the names.
    console.print("Scenarios:")
    for s in doc["scenarios"]:
        line = Text(f"  {s['status']:<13} ", style=_STYLE.get(s["status"], ""))
        line.append(f"{s['name']}: {s['title']} ({s['seconds']} s)")
        console.print(line)
        for p in s["problems"]:
            console.print(Text(f"      ✗ {p}", style="red"))
        for d in s["details"]:
            console.print(f"      {d}", highlight=False, markup=False)
    if doc["workloads"]:
        console.print("Workloads (Ready/wanted; node group the pods landed on; cluster fit's group):")
        for w in doc["workloads"]:
            ok = w["want"] is not None and w["ready"] >= w["want"]
            line = Text(f"  {w['ready']}/{w['want']}".ljust(8), style="green" if ok else "red")
            line.append(f"{w['object']} ({w['release']}): on {', '.join(w['groups']) or '-'}; fit {', '.join(w['fitGroups']) or '-'}")
            console.print(line)
    console.print("Platform controllers (local processes with their ServiceAccount's token):")
    for c in doc["controllers"]:
        line = Text(f"  {c['status']:<10} ", style="green" if c["status"] == "running" else "red")
        line.append(f"{c['binary']} as {c['serviceAccount']}"
                    + (f"; configuration changed: {'; '.join(c['configChanges'])}" if c["configChanges"] else ""))
        console.print(line)
        if c["problem"]:
            console.print(Text(f"      {c['problem']}", style="red"))
    rewritten = [w for w in doc["webhooks"] if w["action"].startswith("webhook clientConfig")]
    removed = [w for w in doc["webhooks"] if not w["action"].startswith("webhook clientConfig")]
    console.print(f"  webhook clientConfig rewritten to local process: {len(rewritten)} webhook(s)", highlight=False)
    for w in removed:
        console.print(Text(f"  NOT REHEARSED: {w['configuration']} {w['webhook']} ({w['was']}, {w['controller']})", style="yellow"))
    for n in doc["notRehearsed"]:
        console.print(Text(f"  NOT REHEARSED: {n}", style="yellow"))
    for h in doc["hooks"]:
        console.print(f"  hook {h['hook']} {h['object']} ({h['release']}): {h['action']}", highlight=False, markup=False)
    for s in doc.get("secretsAsRendered") or []:
        console.print(f"  {s}", highlight=False, markup=False)
    for c in doc["cloudObjects"]:
        console.print(f"  created as the cloud does: {c}", highlight=False)
    if doc["volumesProvisioned"]:
        console.print(f"  volumes provisioned by the rehearsal (stand-in for the CSI driver): {', '.join(doc['volumesProvisioned'])}",
                      highlight=False)
    for c in doc.get("claimsUnprovisioned") or []:
        console.print(f"  claim no provisioner takes (stays Pending, as on a cluster): {c}", highlight=False, markup=False)
    for r in doc.get("crdsRegistered") or []:
        console.print(f"  registered as the controller does: {r}", highlight=False, markup=False)
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
