"""Chart-rendered Secrets the rehearsal installs as rendered, not as preflight's masked copy.

Preflight masks every Secret's data in what it renders and writes (`mask_secret`: no secret reaches a
file, and random chart secrets would make every render differ). A controller that reads its
configuration from such a Secret then reads `preflight-secret-value` instead: kube-prometheus-stack's
Alertmanager configuration (`alertmanager-<name>`, key `alertmanager.yaml`) is one, and the operator
refuses it. Its content is not secret: it is the program's `alertmanager.config` value (the SMTP
password is a file from another Secret, `smtp_auth_password_file`). z2jh's `hub` Secret is another:
the hub reads its configuration (`values.yaml`) and seeded secrets from it. So the rehearsal renders
those releases again with Helm, with the program's values, and installs the Secrets as `helm install`
would (the chart's random secrets, e.g. the hub's cookie secret, are new random values).
Values that are Pulumi secrets stay preflight's stand-in strings (what a preview gives the chart, the
same shape: a string where the program has a string); each is listed in the report.

`check_alertmanager_config` validates the installed configuration with Alertmanager's own `amtool
check-config` (Debian package prometheus-alertmanager)."""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Optional

from gpu_platform.preflight.fit.render import (RELEASE_TYPE, SECRET_PLACEHOLDER, chart_info, crd_api_versions,
                                               find_chart, plain_values, render_chart)
from gpu_platform.preflight.runner import SECRET_SIG, SIG_KEY
from gpu_platform.rehearsal.scenarios import Context, Scenario

ALERTMANAGER_KEY = "alertmanager.yaml"


def _needs_rendered_secret(chart: str, obj: dict) -> bool:
    """The Secrets a process of the rehearsal reads as configuration: Alertmanager's (the Prometheus
    operator), and z2jh's `hub` Secret (values.yaml and the hub's seeded secrets: the hub scenario)."""
    name = (obj.get("metadata") or {}).get("name") or ""
    if chart == "kube-prometheus-stack":
        return name.startswith("alertmanager-") and ALERTMANAGER_KEY in (obj.get("data") or {})
    return chart == "jupyterhub" and name == "hub"


def secret_paths(value: Any, path: str = "") -> list[str]:
    """Where the program's values hold Pulumi secrets (dotted paths)."""
    if isinstance(value, dict) and value.get(SIG_KEY) == SECRET_SIG:
        return [path or "(the whole value)"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in secret_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in secret_paths(v, f"{path}[{i}]")]
    return []


def restore_rendered_secrets(plan: Any, releases: list[Any], chart_dirs: list[Path],
                             kubernetes_version: Optional[str]) -> list[str]:
    """Put the chart's rendered data back into the Secrets controllers read (in `releases`, in place).
    Returns what was done, one line per Secret, for the report."""
    by_urn = {r.urn: r for r in plan.resources if r.type == RELEASE_TYPE}
    api_versions = crd_api_versions(o for rel in releases for o in rel.objects)
    kube_version = f"v{kubernetes_version}.0" if kubernetes_version and kubernetes_version.count(".") == 1 else None
    done = []
    for rel in releases:
        short = (rel.chart or "").rstrip("/").rsplit("/", 1)[-1]
        wanted = [i for i, o in enumerate(rel.objects) if o.get("kind") == "Secret" and _needs_rendered_secret(short, o)]
        if rel.source != "helm" or not wanted or rel.urn not in by_urn:
            continue
        path = find_chart(rel.chart, rel.version, chart_dirs)
        if path is None:
            done.append(f"{rel.name}: chart {rel.chart} {rel.version} not found in {', '.join(map(str, chart_dirs))}; "
                        "its Secrets stay preflight's stand-ins")
            continue
        wire = by_urn[rel.urn].wire_inputs.get("values") or {}
        objects, _ = render_chart(chart_info(path, rel.name), rel.name, plain_values(wire), rel.namespace, kube_version,
                                  api_versions)
        rendered = {(o["metadata"].get("namespace") or rel.namespace, o["metadata"]["name"]): o
                    for o in objects if o.get("kind") == "Secret"}
        stand_ins = secret_paths(wire)
        for i in wanted:
            meta = rel.objects[i]["metadata"]
            real = rendered.get((meta.get("namespace") or rel.namespace, meta["name"]))
            if real is None:
                continue
            rel.objects[i] = {**rel.objects[i], "data": dict(real.get("data") or {})}
            if len(rel.texts) == len(rel.objects):
                rel.texts[i] = None
            done.append(f"Secret {meta.get('namespace') or rel.namespace}/{meta['name']} ({rel.name}): installed as the chart "
                        "renders it from the program's values"
                        + (f"; Pulumi secrets given preflight's stand-in `{SECRET_PLACEHOLDER}`: {', '.join(stand_ins)}"
                           if stand_ins else "; the values hold no Pulumi secret"))
    return done


def check_alertmanager_config(secret: dict) -> tuple[Optional[bool], str]:
    """`amtool check-config` on the Secret's alertmanager.yaml (and its template files beside it, as the
    operator mounts them): (True, output) valid, (False, output) refused, (None, why) amtool missing."""
    amtool = shutil.which("amtool")
    if amtool is None:
        return None, "amtool is not installed (Debian package prometheus-alertmanager; .ci/run installs it)"
    data = secret.get("data") or {}
    if ALERTMANAGER_KEY not in data:
        return False, f"Secret has no key {ALERTMANAGER_KEY}"
    with tempfile.TemporaryDirectory(prefix="rehearsal-amtool-") as tmp:
        for key, value in data.items():
            Path(tmp, key).write_bytes(base64.b64decode(value))
        proc = subprocess.run([amtool, "check-config", str(Path(tmp, ALERTMANAGER_KEY))], capture_output=True, text=True,
                              timeout=60)
    out = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0, out


def alertmanager_config(ctx: Context) -> Scenario:
    """The Alertmanager configuration the operator reads, as installed, passes `amtool check-config`."""
    sc = Scenario("alertmanager-config", "the Alertmanager configuration as installed (the chart's Secret, rendered from "
                                         "the program's values) passes Alertmanager's own `amtool check-config`")
    secrets = [(o["metadata"].get("namespace") or rel.namespace, o["metadata"]["name"]) for rel in ctx.releases if rel.rendered
               for o in rel.objects if o.get("kind") == "Secret" and _needs_rendered_secret(
                   (rel.chart or "").rstrip("/").rsplit("/", 1)[-1], o) and o["metadata"]["name"].startswith("alertmanager-")]
    if not secrets:
        sc.details.append("the stack renders no Alertmanager configuration")
        return sc
    for ns, name in secrets:
        live = ctx.client.get("v1", "Secret", name, ns)
        if live is None:
            sc.fail(f"Secret {ns}/{name} is not on the API server")
            continue
        ok, out = check_alertmanager_config(live)
        if ok is None:
            sc.status = "NOT REHEARSED"
            sc.problems.append(out)
        elif ok:
            sc.details.append(f"Secret {ns}/{name}: amtool check-config: " + " ".join(out.split()))
        else:
            sc.fail(f"Secret {ns}/{name}: amtool check-config refuses it: {out}")
    return sc
