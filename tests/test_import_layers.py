"""The package imports one way: no import cycle, no import from a lower layer to a higher one.

The graph is built from the source with `ast`: every `import` and `from ... import` anywhere in a module
(module level, function bodies, `if TYPE_CHECKING:` blocks), relative imports resolved, plus
`importlib.import_module("<constant>")`. A name computed at run time (`clouds.cloud_module`'s
f-string) cannot be followed and is not counted. `from pkg import mod` is an edge to the submodule
`pkg.mod`. Importing `a.b.c` also runs `a/__init__.py` and `a/b/__init__.py`, so each of those is an
edge too, except the importer's own enclosing packages: Python ran them before the importer started.

The layers, and what each may import, are read from the table in the README's `## Layout` section:
that table is the one place they are written.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "gpu_platform"
PROGRAM = "__main__"  # the repository's Pulumi program, __main__.py beside Pulumi.yaml


# ---------------------------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str
    path: str  # relative to the root, POSIX
    is_package: bool


def find_modules(root: Path) -> dict[str, Module]:
    mods: dict[str, Module] = {}
    for file in sorted((root / PACKAGE).rglob("*.py")):
        rel = file.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        mods[".".join(parts)] = Module(".".join(parts), rel.as_posix(), is_package)
    if (root / "__main__.py").exists():
        mods[PROGRAM] = Module(PROGRAM, "__main__.py", False)
    return mods


def _resolve_relative(module: Module, level: int, name: Optional[str]) -> str:
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    parts = package.split(".")
    base = parts[:len(parts) - (level - 1)] if level > 1 else parts
    return ".".join(base + ([name] if name else []))


def _longest_known(name: str, mods: dict[str, Module]) -> Optional[str]:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in mods:
            return candidate
    return None


def imports_of(module: Module, source: str, mods: dict[str, Module]) -> set[str]:
    """Every module of the package `module` imports, wherever the statement is."""
    out: set[str] = set()
    already_run = {module.name, *_enclosing_packages(module.name)}
    for node in ast.walk(ast.parse(source, filename=module.path)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, node.level, node.module) if node.level else (node.module or "")
            for alias in node.names:
                targets.append(f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base)
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets = [node.args[0].value]
        for target in targets:
            known = _longest_known(target, mods)
            if known is not None:
                out |= {name for name in _runs(known, mods) if name not in already_run}
    return out


def _enclosing_packages(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]: the packages whose `__init__` Python runs before `a.b.c`."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _runs(name: str, mods: dict[str, Module]) -> list[str]:
    """What `import name` executes: each enclosing package's `__init__`, then the module itself."""
    return [p for p in _enclosing_packages(name) if p in mods] + [name]


_PARSED: dict[tuple[str, str, frozenset[str]], set[str]] = {}


def _imports_cached(mod: Module, source: str, mods: dict[str, Module], names: frozenset[str]) -> set[str]:
    key = (mod.path, source, names)
    if key not in _PARSED:
        _PARSED[key] = imports_of(mod, source, mods)
    return _PARSED[key]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = find_modules(root)
    names = frozenset(mods)
    return {name: set(_imports_cached(mod, (root / mod.path).read_text(), mods, names)) for name, mod in mods.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1 or node in graph.get(node, ()):
                        groups.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return groups


def cycle_in(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the group's first module, as [a, b, ..., a] (breadth-first: the shortest)."""
    start, members = group[0], set(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start] + path[::-1][1:] + [start] if len(path) > 1 else [start, start]
                if child in members and child not in came_from:
                    came_from[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per group of modules that import each other."""
    return [cycle_in(group, graph) for group in strongly_connected(graph)]


def find_cycle(graph: dict[str, set[str]]) -> Optional[list[str]]:
    cycles = find_cycles(graph)
    return cycles[0] if cycles else None


# ---------------------------------------------------------------------------------------------
# The layers, from the README
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    name: str
    paths: tuple[str, ...]
    may_import: frozenset[str]


def layout_section(readme: str) -> str:
    return readme.split("## Layout", 1)[1].split("\n## ", 1)[0]


def read_layers(readme: str) -> dict[str, Layer]:
    rows = [line for line in layout_section(readme).splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    assert header[:3] == ["layer", "path", "may import"], f"README ## Layout table header: {header}"
    layers: dict[str, Layer] = {}
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        allowed = frozenset(a.strip() for a in cells[2].split(",") if a.strip() not in ("", "—", "-"))
        layers[cells[0]] = Layer(cells[0], tuple(re.findall(r"`([^`]+)`", cells[1])), allowed)
    return layers


def summary_chains(readme: str) -> list[list[str]]:
    """Each bold chain's order, e.g. data → config → components → platform → program."""
    chains = re.findall(r"\*\*([a-z]+(?: → [a-z]+)+)\*\*", layout_section(readme))
    assert chains, "README ## Layout: no **a → b → ...** line"
    return [chain.split(" → ") for chain in chains]


def layer_of(path: str, layers: dict[str, Layer]) -> Optional[str]:
    """The most specific path in the table: an exact file or glob beats a folder, a longer folder a shorter."""
    best: Optional[tuple[tuple[int, int], str]] = None
    for layer in layers.values():
        for pattern in layer.paths:
            if pattern.endswith("/"):
                score = (0, len(pattern)) if path.startswith(pattern) else None
            else:
                score = (1, len(pattern)) if fnmatch.fnmatchcase(path, pattern) else None
            if score is not None and (best is None or score > best[0]):
                best = (score, layer.name)
    return best[1] if best else None


def violations(graph: dict[str, set[str]], mods: dict[str, Module], layers: dict[str, Layer]) -> list[str]:
    out = []
    for a in sorted(graph):
        la = layer_of(mods[a].path, layers)
        for b in sorted(graph[a]):
            lb = layer_of(mods[b].path, layers)
            if la is None or lb is None:
                continue  # reported as a module no layer claims
            if la != lb and lb not in layers[la].may_import:  # type: ignore[index]
                out.append(f"{a} -> {b} ({la} imports {lb}; {la} may import {', '.join(sorted(layers[la].may_import)) or 'nothing'})")  # type: ignore[index]
    return out


def check(root: Path, readme: str) -> list[str]:
    """Every problem: modules no layer claims, a cycle, imports against the layers."""
    mods = find_modules(root)
    layers = read_layers(readme)
    problems = [f"{m.path}: in no layer of the README table" for m in mods.values() if layer_of(m.path, layers) is None]
    graph = import_graph(root)
    problems += ["import cycle: " + " -> ".join(cycle) for cycle in find_cycles(graph)]
    return problems + violations(graph, mods, layers)


README = (ROOT / "README.md").read_text()


# ---------------------------------------------------------------------------------------------
# The package as it is
# ---------------------------------------------------------------------------------------------


def test_the_readme_table_is_one_direction_and_agrees_with_its_summary_line():
    layers = read_layers(README)
    for layer in layers.values():
        assert layer.paths, f"layer {layer.name}: no path"
        assert layer.may_import <= set(layers), f"layer {layer.name} names unknown layers {layer.may_import - set(layers)}"
    # The allowed imports between layers form no cycle either.
    cycle = find_cycle({name: set(layer.may_import) for name, layer in layers.items()})
    assert cycle is None, f"the README's layers import each other: {' -> '.join(cycle)}"
    reach = _closure({name: set(layer.may_import) for name, layer in layers.items()})
    for chain in summary_chains(README):
        assert set(chain) <= set(layers), chain
        for lower, higher in zip(chain, chain[1:]):
            assert lower in reach[higher] and higher not in reach[lower], (lower, higher)


def _closure(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    out = {}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo += graph.get(n, ())
        out[start] = seen
    return out


def test_every_module_is_in_a_layer():
    layers = read_layers(README)
    loose = [m.path for m in find_modules(ROOT).values() if layer_of(m.path, layers) is None]
    assert not loose, f"modules the README's ## Layout table does not place: {loose}"


def test_no_import_cycle_anywhere_in_the_package():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_import_runs_against_the_layers():
    mods = find_modules(ROOT)
    bad = violations(import_graph(), mods, read_layers(README))
    assert not bad, "imports against the README's layers:\n" + "\n".join(bad)


def test_vendored_files_sit_in_a_vendor_folder_that_names_their_source():
    """Upstream files (the .proto interface definitions) are apart from the code, in a `vendor/` folder with
    a README; nothing generated from them (`*_pb2*.py`) is committed."""
    files = [p for p in (ROOT / PACKAGE).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    for path in files:
        rel = path.relative_to(ROOT)
        assert not re.search(r"_pb2(_grpc)?\.pyi?$", path.name), f"{rel}: generated code is committed"
        if path.suffix == ".proto":
            vendor = next((ROOT.joinpath(*rel.parts[:i + 1]) for i, part in enumerate(rel.parts) if part == "vendor"), None)
            assert vendor is not None, f"{rel}: an upstream file outside a vendor/ folder"
            assert rel.relative_to(vendor.relative_to(ROOT)).as_posix() in (vendor / "README.md").read_text(), \
                f"{rel}: not listed in {vendor.relative_to(ROOT)}/README.md"


def test_the_config_package_is_built_bottom_up():
    """Inside config the field types and the sections never reach the StackConfig built from them, nor the
    loader and the checks that read the whole stack: StackConfig is built from the sections, not the reverse."""
    reach = _closure(import_graph())
    above = {f"{PACKAGE}.config.{m}" for m in ("model", "stack", "checks", "names", "derived", "kubernetes_version")}
    above |= {m for m in reach if m.startswith(f"{PACKAGE}.config.checks.")}
    for low in ("base", "aws", "gcp", "linode", "kubernetes", "catalog", "platform"):
        assert not reach[f"{PACKAGE}.config.{low}"] & above, f"config.{low} reaches {sorted(reach[f'{PACKAGE}.config.{low}'] & above)}"
    # The model reaches neither the loader nor the checks.
    assert not reach[f"{PACKAGE}.config.model"] & (above - {f"{PACKAGE}.config.model"})


def test_the_cluster_contract_needs_only_the_stack_model():
    """components/cluster.py (ClusterHandle) imports the StackConfig model, not the loader and its checks."""
    reach = _closure(import_graph())[f"{PACKAGE}.components.cluster"]
    model = {f"{PACKAGE}.config.{m}" for m in ("model", "base", "aws", "gcp", "linode", "linode_network", "kubernetes",
                                              "catalog", "platform", "approvals", "bucket_lifecycle")}
    assert {m for m in reach if m.startswith(f"{PACKAGE}.config.")} <= model, sorted(reach)


# ---------------------------------------------------------------------------------------------
# The check can fail: each back-import the package had before issue #25, restored in a copy
# ---------------------------------------------------------------------------------------------

# (file, statement to plant, the edge the failure must name). Planted three ways: inside a function,
# under `if TYPE_CHECKING:` and at module level, each of which the graph must see.
BACK_IMPORTS = [
    # config_base imported StackConfig (from the module built on it) and kubernetes_version (built on it).
    ("gpu_platform/config/base.py", "from gpu_platform.config.model import StackConfig",
     "gpu_platform.config.base", "gpu_platform.config.model"),
    ("gpu_platform/config/base.py", "from gpu_platform.config.kubernetes_version import version_issues",
     "gpu_platform.config.base", "gpu_platform.config.kubernetes_version"),
    # Each cloud's section imported StackConfig back.
    ("gpu_platform/config/aws.py", "from gpu_platform.config.model import StackConfig",
     "gpu_platform.config.aws", "gpu_platform.config.model"),
    ("gpu_platform/config/gcp.py", "from gpu_platform.config.model import StackConfig",
     "gpu_platform.config.gcp", "gpu_platform.config.model"),
    ("gpu_platform/config/linode.py", "from gpu_platform.config.model import StackConfig",
     "gpu_platform.config.linode", "gpu_platform.config.model"),
    ("gpu_platform/config/platform.py", "from gpu_platform.config.model import StackConfig",
     "gpu_platform.config.platform", "gpu_platform.config.model"),
    # The model imported the checks built on it; the loader is above both.
    ("gpu_platform/config/model.py", "from gpu_platform.config.checks.aws import check_stack",
     "gpu_platform.config.model", "gpu_platform.config.checks.aws"),
    ("gpu_platform/config/model.py", "from gpu_platform.config.stack import parse_config",
     "gpu_platform.config.model", "gpu_platform.config.stack"),
    # names.py imported resource modules to derive names.
    ("gpu_platform/config/names.py", "from gpu_platform.components.gcp.bucket import CheckpointBucket",
     "gpu_platform.config.names", "gpu_platform.components.gcp.bucket"),
    ("gpu_platform/config/names.py", "from gpu_platform.components.aws.gpu_asg import GpuNodeGroup",
     "gpu_platform.config.names", "gpu_platform.components.aws.gpu_asg"),
    # config reaching into a cloud component, costs beyond the catalog, or the preflight.
    ("gpu_platform/config/checks/linode.py", "from gpu_platform.components.linode import cluster",
     "gpu_platform.config.checks.linode", "gpu_platform.components.linode.cluster"),
    ("gpu_platform/config/stack.py", "from gpu_platform.costs.estimator import estimate",
     "gpu_platform.config.stack", "gpu_platform.costs.estimator"),
    ("gpu_platform/config/stack.py", "from gpu_platform.preflight.runner import Plan",
     "gpu_platform.config.stack", "gpu_platform.preflight.runner"),
    # The data layer, the cluster contract and the policies against the layers above them.
    ("gpu_platform/data/linode_versions.py", "from gpu_platform.config.base import ConfigIssue",
     "gpu_platform.data.linode_versions", "gpu_platform.config.base"),
    ("gpu_platform/data/chart.py", "from gpu_platform.components.helm import helm_release",
     "gpu_platform.data.chart", "gpu_platform.components.helm"),
    # preflight ran the rehearsal itself (issue #38); the command line above both does now, and nothing
    # below it imports the command line.
    ("gpu_platform/preflight/runner.py", "from gpu_platform.rehearsal.cli import rehearse_after_preflight",
     "gpu_platform.preflight.runner", "gpu_platform.rehearsal.cli"),
    ("gpu_platform/rehearsal/run.py", "from gpu_platform.preflight.__main__ import cli",
     "gpu_platform.rehearsal.run", "gpu_platform.preflight.__main__"),
    ("gpu_platform/components/cluster.py", "from gpu_platform.components.platform.platform import MlPlatform",
     "gpu_platform.components.cluster", "gpu_platform.components.platform.platform"),
    ("gpu_platform/components/gcp/bucket.py", "from gpu_platform.preflight.runner import Plan",
     "gpu_platform.components.gcp.bucket", "gpu_platform.preflight.runner"),
    ("gpu_platform/policies/pools.py", "from gpu_platform.components.cluster import GpuPoolSpec",
     "gpu_platform.policies.pools", "gpu_platform.components.cluster"),
    ("gpu_platform/costs/estimator.py", "from gpu_platform.config.model import StackConfig",
     "gpu_platform.costs.estimator", "gpu_platform.config.model"),
]


def _plant(text: str, statement: str, how: str) -> str:
    if how == "function":
        return text + f"\n\ndef _planted():\n    {statement}\n"
    if how == "type_checking":
        return text + f"\n\nimport typing\nif typing.TYPE_CHECKING:\n    {statement}\n"
    return text + f"\n{statement}\n"


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / PACKAGE, root / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.yaml", "*.json", "*.csv"))
    shutil.copy(ROOT / "__main__.py", root / "__main__.py")
    return root


@pytest.mark.parametrize("how", ["function", "type_checking", "module"])
@pytest.mark.parametrize("file,statement,src,dst", BACK_IMPORTS, ids=[f"{b[2]}->{b[3]}" for b in BACK_IMPORTS])
def test_a_restored_back_import_fails_naming_the_edge(package_copy, file, statement, src, dst, how):
    target = package_copy / file
    original = target.read_text()
    try:
        target.write_text(_plant(original, statement, how))
        problems = check(package_copy, README)
    finally:
        target.write_text(original)
    named = [p for p in problems if re.search(rf"(^|[ :]){re.escape(src)} -> {re.escape(dst)}( |$)", p)]
    assert named, f"planting {statement!r} in {file} was not reported as {src} -> {dst}: {problems}"


# Cycles that run through a package's __init__, each on main before issue #38: the config's Linode checks
# imported components.linode.versions, and capacity imported components.linode.render. Either import runs
# components/linode/__init__.py, whose create_cluster imports the cluster, which leads back to the importer
# (through the policies to config.stack and its checks; through node_groups to capacity).
INIT_CYCLES = [
    ("gpu_platform/config/checks/linode.py", "from gpu_platform.components.linode import render",
     "gpu_platform.config.checks.linode"),
    ("gpu_platform/components/capacity.py", "from gpu_platform.components.linode import render",
     "gpu_platform.components.capacity"),
]


@pytest.mark.parametrize("file,statement,importer", INIT_CYCLES, ids=[c[2] for c in INIT_CYCLES])
def test_a_cycle_through_a_package_init_is_found(package_copy, file, statement, importer):
    target = package_copy / file
    original = target.read_text()
    try:
        target.write_text(_plant(original, statement, "function"))
        graph = import_graph(package_copy)
    finally:
        target.write_text(original)
    # render.py itself imports nothing that leads back: the cycle is the package __init__ the import runs.
    assert f"{PACKAGE}.components.linode" in graph[importer]
    cycles = [c for c in find_cycles(graph) if importer in c and f"{PACKAGE}.components.linode" in c]
    assert cycles, f"planting {statement!r} in {file}: no cycle through components/linode/__init__.py"


def test_an_import_runs_the_enclosing_package_inits_but_not_the_importers_own():
    mods = find_modules(ROOT)
    src = mods[f"{PACKAGE}.components.linode.cluster"]
    edges = imports_of(src, "from gpu_platform.controllers.linode_node_groups import settings\n"
                            "import gpu_platform.components.linode.render\n", mods)
    # Python runs controllers/__init__ and controllers/linode_node_groups/__init__ before settings; the
    # importer's own packages (gpu_platform, components, components.linode) ran before it started.
    assert edges == {f"{PACKAGE}.controllers", f"{PACKAGE}.controllers.linode_node_groups",
                     f"{PACKAGE}.controllers.linode_node_groups.settings", f"{PACKAGE}.components.linode.render"}


def test_config_reaches_only_config_and_data():
    """No config module imports components, preflight, policies or rehearsal, directly, through another
    module or through a package __init__, at any depth of a function."""
    mods = find_modules(ROOT)
    layers = read_layers(README)
    reach = _closure(import_graph())
    for name, mod in mods.items():
        if mod.path.startswith(f"{PACKAGE}/config/"):
            beyond = {m for m in reach[name] if layer_of(mods[m].path, layers) not in ("config", "data")}
            assert not beyond, f"{name} reaches {sorted(beyond)}"


def test_validating_the_shipped_stacks_runs_only_config_and_data():
    """What the graph says, at run time: validating every shipped stack (each cloud's checks, the Linode
    CNI and upgrade pins included) loads no component, policy or tool, and not Pulumi. Before issue #38
    the Linode checks imported components.linode.versions, which ran components/linode/__init__.py."""
    import subprocess
    import sys

    script = """
import sys, yaml
from gpu_platform.config.stack import parse_config
for stack in ("linode-dev", "linode-ha", "aws-prod", "gcp-prod"):
    doc = yaml.safe_load(open(f"stacks/Pulumi.{stack}.yaml"))
    parse_config({k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("gpu-platform:")}, stack)
print(" ".join(sorted(m for m in sys.modules if m == "pulumi" or m.startswith("gpu_platform."))))
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    mods, layers = find_modules(ROOT), read_layers(README)
    loaded = out.stdout.split()
    assert "pulumi" not in loaded
    assert {layer_of(mods[m].path, layers) for m in loaded} == {"config", "data"}, loaded


def test_the_unmodified_copy_passes(package_copy):
    assert check(package_copy, README) == []


def test_a_relative_back_import_is_resolved(package_copy):
    target = package_copy / "gpu_platform/config/aws.py"
    original = target.read_text()
    try:
        target.write_text(_plant(original, "from .stack import StackConfig", "function"))
        problems = check(package_copy, README)
    finally:
        target.write_text(original)
    assert any("gpu_platform.config.aws -> gpu_platform.config.stack" in p for p in problems), problems


def test_a_module_no_layer_claims_is_reported(package_copy):
    stray = package_copy / "gpu_platform" / "stray.py"
    stray.write_text("")
    try:
        problems = check(package_copy, README)
    finally:
        stray.unlink()
    assert problems == ["gpu_platform/stray.py: in no layer of the README table"]


def test_an_import_against_the_table_is_reported_even_without_a_cycle():
    """A synthetic edge: the checker reads layers, not only cycles."""
    mods = find_modules(ROOT)
    graph = import_graph()
    graph[f"{PACKAGE}.config.approvals"] = graph[f"{PACKAGE}.config.approvals"] | {f"{PACKAGE}.components.helm"}
    assert find_cycle(graph) is None
    bad = violations(graph, mods, read_layers(README))
    assert bad == [f"{PACKAGE}.config.approvals -> {PACKAGE}.components.helm (config imports components; config may import data)"]


def test_pulumi_is_imported_whole_before_the_policy_thread_starts():
    """Loading the config no longer imports pulumi (names.py imported resource modules before), so the
    policy pack's start-up thread and the program run imported pulumi at once and one of them could see
    it half-initialised (ImportError: cannot import name 'LanguageRuntimeServicer' from partially
    initialized module 'pulumi.runtime.proto'). The thread must start with pulumi already imported."""
    import subprocess
    import sys

    script = """
import sys
import gpu_platform.preflight.analyzer as analyzer_module
from gpu_platform.preflight.__main__ import BackgroundAnalyzer
assert "pulumi" not in sys.modules, "importing preflight imports pulumi: this test would prove nothing"
seen = []
class FakeAnalyzer:
    def __init__(self, **kwargs): pass
    def start(self): seen.append("pulumi" in sys.modules and hasattr(sys.modules["pulumi"], "ResourceOptions"))
    def close(self): pass
analyzer_module.Analyzer = FakeAnalyzer
BackgroundAnalyzer("dev", {}, "project").close()
print(seen)
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[True]", out.stdout


def test_the_old_documented_import_path_still_loads_the_config_with_a_warning():
    """0.2.0's examples/team-gke imported load_from_pulumi from gpu_platform.components.config."""
    import importlib
    import sys

    from gpu_platform.config import stack

    sys.modules.pop(f"{PACKAGE}.components.config", None)
    with pytest.warns(DeprecationWarning, match="gpu_platform.config.stack"):
        old = importlib.import_module(f"{PACKAGE}.components.config")
    assert old.load_from_pulumi is stack.load_from_pulumi
    assert set(old.__all__) == {"ConfigError", "StackConfig", "load_from_pulumi"}
