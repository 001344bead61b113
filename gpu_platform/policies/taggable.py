"""Which resource types take cost-allocation tags or labels, read from the installed provider SDKs.

The Python SDKs are generated from each provider's Pulumi schema: every resource's `<Name>Args` takes
exactly the schema's input properties. A type whose args have `tags` (AWS maps, Linode string lists) or
`labels` (GCP label maps; `userLabels` where a type has both, as a notification channel's `labels` are its
settings) can carry owner / cost-center / environment, so the cost-allocation-tags policy checks it. `taggable.json` beside this file is what the pack reads (importing every SDK module at
each pack start would cost seconds); `python -m gpu_platform.policies.taggable` regenerates it, and
tests/test_policy_pack.py fails when it differs from what the installed SDKs say.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("taggable.json")
PACKAGES = {"pulumi_aws": "tags", "pulumi_gcp": "labels", "pulumi_linode": "tags"}
# Where a type keeps the labels billing reads when that is not the top-level field of the same name:
# a GKE cluster's `labels`-less `resourceLabels`, a node pool's labels on its nodes' VMs.
NESTED = {"gcp:container/cluster:Cluster": "resourceLabels",
          "gcp:container/nodePool:NodePool": "nodeConfig.resourceLabels"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _args_fields(source: str, cls: str) -> set[str]:
    """The keyword parameters of `class <cls>Args`'s __init__ in a generated SDK module."""
    start = source.find(f"\nclass {cls}Args:")
    if start < 0:
        return set()
    init = source.find("def __init__(__self__, *", start)
    end = source.find("):", init)
    if init < 0 or end < 0:
        return set()
    return set(re.findall(r"^\s+(\w+): ", source[init:end], re.M))


def from_sdks() -> dict[str, str]:
    """type token -> tag/label input (camelCase, as the analyzer sees props), for every SDK installed."""
    out: dict[str, str] = {}
    for package, field in PACKAGES.items():
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        match = re.search(r'resource_modules="""(.*?)"""', (root / "__init__.py").read_text(), re.S)
        for entry in json.loads(match.group(1)) if match else []:
            folder = root.joinpath(*entry["fqn"].split(".")[1:])
            mod = entry["mod"].split("/")[-1]
            for token, cls in entry["classes"].items():
                path = folder / f"{_snake(mod)}.py"
                if not path.exists():  # a module name the snake-case rule misses: find the class
                    path = next((p for p in folder.glob("*.py") if f"\nclass {cls}Args:" in p.read_text()), path)
                if not path.exists():
                    continue
                fields = _args_fields(path.read_text(), cls)
                if "user_labels" in fields:  # GCP types whose `labels` configure the resource (a channel's address)
                    out[token] = "userLabels"
                elif field in fields:
                    out[token] = field
    if importlib.util.find_spec("pulumi_gcp") is not None:
        out.update(NESTED)
    return dict(sorted(out.items()))


@lru_cache(maxsize=1)
def taggable() -> dict[str, str]:
    return json.loads(DATA.read_text())


def main() -> int:
    DATA.write_text(json.dumps(from_sdks(), indent=0, sort_keys=True) + "\n")
    print(f"{DATA}: {len(taggable.__wrapped__())} taggable types", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
