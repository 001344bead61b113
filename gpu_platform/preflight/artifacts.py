"""Files a reviewer reads next to the plan: the first-boot documents each node gets and the
kubeadm configs inside them, as the program rendered them (with preflight's throwaway PKI and
tokens masked)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Callable, Iterable

import yaml

from gpu_platform.preflight.runner import Plan, PlannedResource

MASK = "<masked-by-preflight>"

# libyaml where PyYAML has it: the documents read here are the program's own cloud-init, tens of kilobytes
# per node, and the pure-Python loader spent most of a Linode stack's artifact step on them.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def mask(text: str, sensitive: Iterable[str]) -> str:
    """Mask every line of every made-up secret (line by line: YAML re-indents multi-line PEM)."""
    pieces = {line.strip() for value in sensitive for line in value.splitlines()}
    for piece in sorted(pieces, key=len, reverse=True):
        if len(piece) >= 6 and not piece.startswith("-----"):
            text = text.replace(piece, MASK)
    return text


def _linode_instance(r: PlannedResource) -> dict[str, str]:
    data = (r.plain_inputs.get("metadatas") or [{}])[0].get("userData")
    if not data or data.startswith("["):
        return {}
    from gpu_platform.components.linode.render import decode_user_data

    doc = decode_user_data(data)
    label = r.plain_inputs.get("label", r.name)
    out = {f"cloud-init/{label}.yaml": doc}
    parsed = yaml.load(doc, Loader=_Loader)
    for f in parsed.get("write_files", []):
        if f["path"].endswith("kubeadm-config.yaml"):
            out[f"kubeadm/{label}.yaml"] = f["content"]
        elif f["path"].endswith(".sh"):
            out[f"scripts/{label}/{Path(f['path']).name}"] = f["content"]
    return out


def _launch_template(r: PlannedResource) -> dict[str, str]:
    data = r.plain_inputs.get("userData")
    if not isinstance(data, str) or data.startswith("["):
        return {}
    try:
        text = base64.b64decode(data).decode()
    except ValueError:
        text = data
    return {f"user-data/{r.name}.txt": text}


EXTRACTORS: dict[str, Callable[[PlannedResource], dict[str, str]]] = {
    "linode:index/instance:Instance": _linode_instance,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
}


def extract(plan: Plan) -> dict[str, str]:
    files: dict[str, str] = {}
    for r in plan.resources:
        fn = EXTRACTORS.get(r.type)
        if fn is not None:
            files.update(fn(r))
    return files


def write(plan: Plan, out_dir: Path, sensitive: Iterable[str]) -> list[Path]:
    secrets = list(sensitive)
    written = []
    for rel, content in sorted(extract(plan).items()):
        safe = re.sub(r"[^A-Za-z0-9_./-]", "_", rel)
        path = out_dir / safe
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(mask(content, secrets))
        written.append(path)
    return written
