"""The README and the day-2 guides in docs/ stay true to the repository.

Every guide is linked from the README; every relative link (and #anchor) resolves; every stack key
the docs name (`gpu-platform:<key>`, YAML stack-file blocks, and `platform.x` / `aws.x`-style keys in
the guides) exists in the config model; every repository path and `python -m` module the guides name
exists. A renamed key, file or heading fails here instead of misleading a reader.
"""

from __future__ import annotations

import json
import os
import re
import typing
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml
from pydantic import BaseModel

from gpu_platform.config.model import StackConfig
from gpu_platform.config.stack import _model_of

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
NAMESPACED_KEY = re.compile(r"gpu-platform:([A-Za-z][A-Za-z0-9_.<>\[\]-]*)")
# `platform.idleGpuMinutes`, `aws.pools.<pool>`, `checkpointBucket.onDestroy` in backticks.
# (`kubernetes.io/...` is a label namespace, not the `kubernetes` section)
DOTTED_KEY = re.compile(r"`((?:platform|aws|gcp|linode|kubernetes(?!\.io\b)|costs|checkpointBucket)\.[A-Za-z<>][A-Za-z0-9_.<>\[\]]*)`")
REPO_PATH = re.compile(r"`((?:\.github|gpu_platform|examples|stacks|tests|docs)"
                       r"/[A-Za-z0-9_./-]+)`")
PYTHON_MODULE = re.compile(r"python -m ([A-Za-z_][A-Za-z0-9_.]*)")
REPO_PACKAGES = {"gpu_platform"}


def _prose(text: str) -> list[str]:
    """Lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def _code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^\s*```{lang}\n(.*?)^\s*```", text, re.M | re.S)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^a-z0-9 -]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(page.read_text()) if re.match(r"^#{1,6} ", line)}


def _unwrap(annotation: Any) -> Any:
    """Optional[X] -> X."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Union and len(args) == 1:
        return args[0]
    return annotation


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or n): f.annotation for n, f in model.model_fields.items()}


def key_problem(path: str) -> Optional[str]:
    """None if `path` (e.g. `aws.pools.<pool>.rootVolumeGiB`, `adminCidrs[0]`) names a key of the model."""
    parts = re.sub(r"\[[^\]]*\]", "", path).split(".")
    model: Optional[type[BaseModel]] = StackConfig
    i = 0
    while i < len(parts):
        if model is None:
            return f"{'.'.join(parts[:i])} has no sub-keys"
        fields = _fields(model)
        if parts[i] not in fields:
            return f"{parts[i]!r} is not a key of {model.__name__}; keys: {', '.join(sorted(fields))}"
        annotation = _unwrap(fields[parts[i]])
        i += 1
        if typing.get_origin(annotation) is dict:
            i += 1  # the user's own key (a pool name), then the value's keys
            annotation = typing.get_args(annotation)[1]
        model = _model_of(annotation)
    return None


def yaml_key_problems(value: Any, model: Optional[type[BaseModel]], where: str) -> list[str]:
    """Keys of a stack-file YAML value that the model does not have."""
    if model is None or not isinstance(value, dict):
        return []
    problems, fields = [], _fields(model)
    for key, sub in value.items():
        if key not in fields:
            problems.append(f"{where}.{key}: not a key of {model.__name__}")
            continue
        annotation = _unwrap(fields[key])
        if typing.get_origin(annotation) is dict and isinstance(sub, dict):
            inner = _model_of(typing.get_args(annotation)[1])
            for user_key, item in sub.items():
                problems += yaml_key_problems(item, inner, f"{where}.{key}.{user_key}")
        elif isinstance(sub, list):
            for n, item in enumerate(sub):
                problems += yaml_key_problems(item, _model_of(annotation), f"{where}.{key}[{n}]")
        else:
            problems += yaml_key_problems(sub, _model_of(annotation), f"{where}.{key}")
    return problems


# ---------------------------------------------------------------------------------------------


def test_there_are_guides_and_each_is_linked_from_the_readme():
    assert len(DOCS) >= 8, [d.name for d in DOCS]
    linked = {(README.parent / target.split("#")[0]).resolve()
              for target in LINK.findall("\n".join(_prose(README.read_text()))) if not target.startswith(("http", "#"))}
    missing = [d.name for d in DOCS if d.resolve() not in linked]
    assert not missing, f"docs not linked from README.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page):
    problems = []
    for target in LINK.findall("\n".join(_prose(page.read_text()))):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            problems.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not problems, f"{page.name}: {problems}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_namespaced_config_key_exists(page):
    text = page.read_text()
    problems = [f"gpu-platform:{k}: {p}" for k in sorted(set(NAMESPACED_KEY.findall(text)))
                if (p := key_problem(k.rstrip(".")))]
    for block in _code_blocks(text, "yaml"):
        doc = yaml.safe_load(block)
        config = doc.get("config") if isinstance(doc, dict) else None
        for key, value in (config or {}).items():
            if isinstance(key, str) and key.startswith("gpu-platform:"):
                bare = key[len("gpu-platform:"):]
                problem = key_problem(bare)
                if problem:
                    problems.append(f"{key}: {problem}")
                else:
                    owner = StackConfig
                    annotation = _unwrap(_fields(owner)[bare])
                    model = _model_of(annotation)
                    items = value if isinstance(value, list) else [value]
                    for item in items:
                        problems += yaml_key_problems(item, model, key)
    assert not problems, f"{page.name}: {problems}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_dotted_config_key_in_the_guides_exists(page):
    keys = sorted(set(DOTTED_KEY.findall(page.read_text())))
    problems = [f"{k}: {p}" for k in keys if (p := key_problem(k))]
    assert not problems, f"{page.name}: {problems}"


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_repository_path_and_module_in_the_guides_exists(page):
    text = page.read_text()
    problems = []
    for path in sorted(set(REPO_PATH.findall(text))):
        if "<" in path or "*" in path:
            continue  # a pattern (`stacks/Pulumi.<stack>.yaml`), not one file
        if not (ROOT / path.rstrip("/")).exists():
            problems.append(f"{path}: no such path")
    for module in sorted(set(PYTHON_MODULE.findall(text))):
        if module.split(".")[0] not in REPO_PACKAGES:
            continue
        base = ROOT / module.replace(".", "/")
        if not ((base / "__main__.py").exists() or base.with_suffix(".py").exists()):
            problems.append(f"python -m {module}: no such module in the repository")
    assert not problems, f"{page.name}: {problems}"


def test_the_checks_catch_what_they_should():
    assert key_problem("checkpointBucket.onDestroy") is None
    assert key_problem("aws.pools.<pool>.rootVolumeGiB") is None
    assert key_problem("adminCidrs[0]") is None
    assert key_problem("platform.notebookAdminUsers") is None
    assert "onDelete" in key_problem("checkpointBucket.onDelete")
    assert key_problem("gcp.deletionProtection.x") is not None
    assert yaml_key_problems({"pools": {"a10g": {"rootVolumeGib": 1}}}, _model_of(_fields(StackConfig)["aws"]), "aws")
    assert _slug("Quickstart: GCP") == "quickstart-gcp"
    assert _slug("Scale-in protection (AWS)") == "scale-in-protection-aws"


# --- The README is a front door ---------------------------------------------------------------


def test_readme_is_a_front_door():
    """Short, the two commands first, a table of contents whose entries resolve, where charts come from."""
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into docs/"
    first_heading = next(i for i, line in enumerate(lines) if line.startswith("## "))
    front = "\n".join(lines[:first_heading])
    assert "make preflight" in front and "make test" in front
    for where in ("../shared/charts", "$GPU_PLATFORM_CHARTS", "charts pull", ".cache/gpu-platform/charts"):
        assert where in front, f"the README's first screen does not say where charts come from ({where})"
    assert ".venv/bin/" in front, "the README's first screen says how to run commands with the virtualenv"
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    toc = re.findall(r"\]\(#([^)]+)\)", contents)
    assert len(toc) >= 4 and set(toc) <= _anchors(README), toc
    long = [f"{n}: {len(line)}" for n, line in enumerate(lines, 1) if len(line) > 120 and not line.startswith("|")]
    assert not long, f"README prose lines over 120 characters: {long}"


def test_readme_names_the_import_layers_once():
    text = README.read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert "config → components → platform → program" in layout
    assert "costs" in layout and "policies" in layout
    assert text.count("config → components → platform → program") == 1


def test_test_data_does_not_live_in_prose():
    """Lists the tests parse are data files; no page carries markers a test splits on."""
    for page in PAGES:
        assert "checkov-skips -->" not in page.read_text(), f"{page.name} still holds a skip list a test parses"
    doc = yaml.safe_load((ROOT / "tests" / "data" / "checkov-skips.yaml").read_text())
    assert set(doc) == {"platform", "images", "upstream", "privileged"} and doc["upstream"]


def test_the_quickstarts_say_what_the_shipped_stacks_do():
    """quickstart-gcp called gcp-prod's A100 pool preemptible while the stack file says spot; the AWS and GCP
    quickstarts sent readers to a Pulumi set-up "as above" that is not on their page."""
    from tests.conftest import stack_config

    gcp = (ROOT / "docs" / "quickstart-gcp.md").read_text()
    intro = gcp.split("\n1. ", 1)[0]
    (pool,) = stack_config("gcp-prod")["gpu-platform:gpuPools"]
    assert f"capacity: {pool['capacity']}" in intro and f"{pool['capacity'].capitalize()} A100 pool" in intro, intro
    for name in ("quickstart-aws.md", "quickstart-gcp.md"):
        text = (ROOT / "docs" / name).read_text()
        assert "as above" not in text.split("\n2. ", 1)[0], name
        assert "pulumi login" in text and "https://www.pulumi.com/docs/install/" in text, name


# --- issue 37 item 5: state that holds credentials is named honestly ---------------------------------------

# Resources whose *outputs* (not in a plan's inputs) are credentials the state keeps.
CREDENTIAL_OUTPUTS = ("tls:index/privateKey:PrivateKey", "random:index/randomString:RandomString",
                      "random:index/randomPassword:RandomPassword", "linode:index/objectStorageKey:ObjectStorageKey")


def _secret_paths(value: Any, path: str = "") -> list[str]:
    from gpu_platform.preflight.runner import REDACTED

    if value == REDACTED:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _secret_paths(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for v in value for p in _secret_paths(v, f"{path}[]")]
    return []


@pytest.mark.parametrize("stack", ["gcp-prod", "aws-prod", "linode-dev", "linode-ha"])
def test_the_state_table_names_every_secret_each_shipped_stack_keeps(stack):
    """docs/state-and-secrets.md, "What the state holds": every secret input and every credential-generating
    resource of the shipped stacks' plans has a row for its cloud; GKE and EKS keep only the kubeconfig (the
    doc and docs/ci.md say their state holds no credential: the Grafana password was one, issue 37)."""
    from tests.conftest import shipped_plan

    text = (ROOT / "docs" / "state-and-secrets.md").read_text()
    table = text.split("## What the state holds", 1)[1].split("\n## ", 1)[0]
    plan = shipped_plan(stack)
    cloud = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]["gpu-platform:cloud"]
    rows = [line for line in table.splitlines() if line.startswith(("| all ", f"| {cloud} "))]
    found = {(r.type, p) for r in plan.resources for p in _secret_paths(r.inputs)}
    found |= {(r.type, "(outputs)") for r in plan.resources if r.type in CREDENTIAL_OUTPUTS}
    missing = [(t, p) for t, p in sorted(found)
               if not any(f"`{t}`" in row and (p == "(outputs)" and "outputs" in row or f"`{p}`" in row) for row in rows)]
    assert not missing, f"docs/state-and-secrets.md's table lacks, for {cloud}: {missing}"
    if cloud in ("gcp", "aws"):
        # No credential at all: only the kubeconfig (endpoint and CA certificate; the token comes from a plugin at
        # run time). docs/ci.md says so, and preview-gcp-prod / preview-aws-prod have no reviewers: an image
        # build's registry token here (the deployer's OAuth token, an ECR token) was readable by their Stack
        # Read token (issue 37).
        assert found <= {("pulumi:providers:kubernetes", "kubeconfig")}, found


# --- issue 37 item 7: the kinds of docs mismatch an adopter found, each caught here --------------------------
# (1) a config key the model reads but the docs never name (`nameSuffix`, `costs.checkpointGibPerDay` were
# missing from the key table); (2) artifact names that differ from what the workflows upload (docs/ci.md said
# `preflight-<stack>`, ci.yml uploads `preflight`); (3) a `make` target, (4) a command-line flag, (5) an
# environment variable or (6) an output file named in prose that the code does not have. Commands in code
# blocks are run or parsed by tests/test_doc_commands.py; links, paths and keys the docs name by
# test_relative_links_and_anchors_resolve and the key tests above.

# Where each section's keys are documented: the paragraph (or key-table row) that starts with the text.
SECTION_DOCS = {
    "linode": ("docs/configuration.md", "`linode` section:"),
    "gcp": ("docs/quickstart-gcp.md", "`gcp` section:"),
    "aws": ("docs/quickstart-aws.md", "`aws` section:"),
    "platform": ("docs/platform.md", "`platform` keys"),
    "costs": ("docs/configuration.md", "| `costs` |"),
    "checkpointBucket": ("docs/configuration.md", "| `checkpointBucket` |"),
    "gpuPools": ("docs/configuration.md", "| `gpuPools` |"),
    "priceOverrides": ("docs/configuration.md", "| `priceOverrides` |"),
    "kubernetes": ("docs/configuration.md", "## Cloud kubernetes"),
}


def _model_key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        out.append(key)
        subs: list[type[BaseModel]] = []

        def collect(a: Any) -> None:
            if isinstance(a, type) and issubclass(a, BaseModel):
                subs.append(a)
            for x in typing.get_args(a):
                collect(x)
        collect(field.annotation)
        for sub in subs:
            out += _model_key_paths(sub, key + ".")
    return out


def _section_text(doc: str, start: str) -> str:
    text = (ROOT / doc).read_text()
    if start not in text:
        return ""
    rest = text.split(start, 1)[1]
    if start.startswith("#"):  # a whole section, to the next heading of its level
        return rest.split("\n" + start.split(" ", 1)[0] + " ", 1)[0]
    return rest.split("\n", 1)[0] if start.startswith("|") else rest.split("\n\n", 1)[0]


def undocumented_keys() -> list[str]:
    """Keys of the config model no doc names: a top-level key needs a row in docs/configuration.md's key
    table; a nested one its name in its section's paragraph (or row), or its dotted path anywhere."""
    conf = (ROOT / "docs" / "configuration.md").read_text()
    table = conf.split("| key | required | default | meaning |", 1)[1].split("\n\n", 1)[0]
    rows = {k for line in table.splitlines() if line.startswith("| `") for k in re.findall(r"`([^`]+)`", line.split("|")[1])}
    every = "\n".join(p.read_text() for p in PAGES)
    missing = []
    for path in _model_key_paths(StackConfig):
        parts = path.split(".")
        if len(parts) == 1:
            if path not in rows:
                missing.append(path)
            continue
        text = _section_text(*SECTION_DOCS[parts[0]]) if parts[0] in SECTION_DOCS else ""
        if f"`{path}`" in every or re.search(rf"(?<![A-Za-z]){re.escape(parts[-1])}(?![A-Za-z])", text):
            continue
        missing.append(path)
    return missing


def test_every_config_key_the_model_reads_is_documented():
    missing = undocumented_keys()
    assert not missing, f"config keys no doc names (add them to their section; docs/configuration.md): {missing}"


def test_the_key_check_catches_a_missing_key(monkeypatch):
    real = _section_text

    def without(doc, start):
        text = real(doc, start)
        return text.replace("checkpointGibPerDay", "x") if start == "| `costs` |" else text
    monkeypatch.setitem(globals(), "_section_text", without)
    assert "costs.checkpointGibPerDay" in undocumented_keys()


def _uploaded_artifacts() -> set[str]:
    out = set()
    for wf in sorted((ROOT / ".github" / "workflows").glob("*.yml")):
        for job in yaml.safe_load(wf.read_text())["jobs"].values():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("actions/upload-artifact@"):
                    out.add(step["with"]["name"].replace("${{ matrix.stack }}", "<stack>"))
    return out


def test_artifact_names_in_the_docs_are_the_ones_the_workflows_upload():
    uploaded = _uploaded_artifacts()
    named = set()
    for page in PAGES:
        for line in _prose(page.read_text()):
            if "artifact" in line:
                named |= {m for m in re.findall(r"artifacts? `([A-Za-z0-9<>_-]+)`", line)}
    ci = (ROOT / "docs" / "ci.md").read_text()
    assert named and named <= uploaded, f"artifacts the docs name but no workflow uploads: {sorted(named - uploaded)}"
    assert all(f"`{a}`" in ci for a in uploaded), f"docs/ci.md does not name: {sorted(a for a in uploaded if f'`{a}`' not in ci)}"


def test_make_targets_named_in_prose_exist():
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", (ROOT / "Makefile").read_text(), re.M))
    named = {m for page in PAGES for m in re.findall(r"`make ([a-z][a-z0-9-]*)", page.read_text())}
    assert named and not named - targets, sorted(named - targets)


# Flags of the upstream components the rehearsal runs, which docs/rehearsal.md quotes.
UPSTREAM_FLAGS = {"--authorization-mode", "--feature-gates", "--config-reloader-", "--create-namespace",
                  # cluster-autoscaler 1.35.2's (config/flags/flags.go), which the autoscaling drills run
                  "--cloud-config", "--cloud-provider", "--scale-down-unneeded-time", "--max-node-provision-time",
                  # ... and the threshold cluster fit's scale-down check reads from the rendered autoscaler (docs/preflight.md)
                  "--scale-down-gpu-utilization-threshold",
                  # kube-apiserver v1.35.4's (pkg/controlplane/apiserver/options/options.go), in the engine section
                  "--enable-aggregator-routing",
                  # k8s.io/apiserver v0.35.4's (pkg/server/options/egress_selector.go), the engine run's webhook proxy
                  "--egress-selector-config-file",
                  # k8s.io/apiserver's (pkg/server/options/server_run_options.go; the 60 s default in pkg/server/config.go,
                  # read at v0.36.3), the rehearsal API server's request timeout
                  "--request-timeout", "--min-request-timeout"}


def test_flags_named_in_the_preflight_and_rehearsal_docs_exist():
    code = "\n".join(p.read_text() for d in ("gpu_platform", "tools", "rehearsal")
                     for p in sorted((ROOT / d).rglob("*.py")))
    defined = set(re.findall(r"add_argument\(\s*(?:\"-\w\",\s*)?\"(--[a-z0-9-]+)\"", code))
    named = {m for name in ("README.md", "docs/preflight.md", "docs/rehearsal.md")
             for m in re.findall(r"`(--[a-z][a-z0-9-]*)", (ROOT / name).read_text())}
    unknown = sorted(f for f in named - defined if not any(f.startswith(u) for u in UPSTREAM_FLAGS))
    assert named and not unknown, f"flags the docs name that no parser defines: {unknown}"


def test_environment_variables_and_output_files_named_in_the_docs_exist():
    code = "\n".join(p.read_text() for d in ("gpu_platform", "rehearsal", "tests") for p in sorted((ROOT / d).rglob("*.py")))
    code += (ROOT / "Makefile").read_text()
    every = "\n".join(p.read_text() for p in PAGES)
    variables = set(re.findall(r"\b(GPU_PLATFORM_[A-Z_]+)\b", every))
    assert variables and not {v for v in variables if v not in code}, sorted(v for v in variables if v not in code)
    files = set(re.findall(r"build/<stack>/([A-Za-z0-9_.-]+)", every))
    assert files and not {f for f in files if f'"{f}"' not in code}, sorted(f for f in files if f'"{f}"' not in code)


DOCS_PAGE = re.compile(r"(?<![\w/.-])docs/([A-Za-z0-9_-]+\.md)")


def test_every_docs_page_named_in_code_and_recorded_files_exists():
    """Adopter review F9: recorded/cyclenerd-gcp-pricing-a2-highgpu-1g.csv said "see docs/costs.md" (the page is
    docs/cost-model.md). Every `docs/<page>.md` named in the package's code and comments, its catalog and
    recorded files, the tests' messages, the examples and the stack files is a page that exists."""
    roots = [ROOT / "gpu_platform", ROOT / "examples", ROOT / "stacks", ROOT / "tests", ROOT / "Makefile",
             ROOT / "CHANGELOG.md", ROOT / ".github"]
    files = [p for r in roots for p in ([r] if r.is_file() else r.rglob("*"))
             if p.is_file() and p.suffix in {".py", ".yaml", ".yml", ".csv", ".md", ".toml", ".txt", ".sh", ""}
             and "__pycache__" not in p.parts]
    problems = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for page in sorted(set(DOCS_PAGE.findall(text))):
            if not (ROOT / "docs" / page).is_file() and path.name != "test_docs.py":
                problems.append(f"{path.relative_to(ROOT)}: docs/{page}")
    assert not problems, problems


def test_the_upgrade_notes_name_the_types_with_regional_prices():
    """Adopter review F7: "Upgrading from 0.2.0" step 1 said every AWS/GCP stack outside us-east-1/us-central1 is
    refused, while the catalog has prices in other regions. The step says every catalogued AWS and GCP type has
    them, with the range of region counts per cloud the catalog has, and names the offered regions left unpriced
    (tests/test_costs_regional_prices.py UNPRICED)."""
    from gpu_platform.costs.catalog import load_catalog
    from tests.test_costs_regional_prices import UNPRICED

    text = (ROOT / "CHANGELOG.md").read_text()
    step = text[text.index("### Upgrading from 0.2.0"):text.index("2. **Your own program's imports**")]
    step = " ".join(step.split())
    assert "outside us-east-1/us-central1 is refused (exit 3) until" not in step
    assert "for every catalogued AWS type" in step
    catalog = load_catalog()
    for cloud, word in (("aws", "AWS"), ("gcp", "GCP")):
        counts = [len(t.regional) for t in catalog.instances(cloud)]
        assert min(counts) > 0, cloud
        assert f"{word} type ({min(counts)} to {max(counts)} more" in step, (cloud, min(counts), max(counts))
    for name, region, cap in UNPRICED:
        family = name.split(".")[0]
        assert region in step and (f"`{name}`" in step or f"{family[0].upper()}{family[1:]} types" in step), (name, region)
        assert f"{'On-Demand' if cap == 'on-demand' else 'Spot'} of " in step, cap


def test_wheel_commands_name_no_file_the_wheel_lacks():
    """Adopter review (issue 37 brief), item 6: docs/architecture.md's wheel section ran `gpu-platform-costs
    simulate examples/seed-scenario.yaml`, a file only a checkout has. An installed console script's line that
    names a repository file outside the package must say it comes from a checkout."""
    import re

    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if not re.search(r"(^|\s|/)gpu-platform-(costs|preflight)\s", line):
                continue
            command = line.split("#", 1)[0]
            files = [w for w in command.split() if re.match(r"(examples|stacks|tests|tools)/", w)]
            if files and "checkout" not in command:
                bad.append(f"{page.name}:{n}: {files}")
    assert not bad, bad


# --- dollar figures quoted for the shipped stacks are preflight's own (adopter review of 94425ce) -------------
# docs/quickstart-gcp.md and CHANGELOG.md said gcp-prod idles at $192.71 (regional layout $400.43), the stack file
# "$193", and stacks/policy.gcp-prod.yaml "$11,839.49 ... one number", while preflight printed $196.71, $404.43 and
# $11,844.54. Each quote below is checked against preflight's cost.json of the stack (and of gcp-prod with the
# regional system pool, the layout the quickstart compares).

# (file, pattern whose groups are dollar figures, which figure each group must be; "~" rounds to whole dollars)
DOLLAR_QUOTES = [
    ("docs/quickstart-gcp.md", r"3 × e2-standard-4, idle floor \$([\d,.]+)/month", ("regional-idle",)),
    ("docs/quickstart-gcp.md", r"1 × e2-standard-4, idle floor \$([\d,.]+)/month", ("idle",)),
    ("CHANGELOG.md", r'"gcp-prod idles at \$([\d,.]+)"', ("idle",)),
    ("CHANGELOG.md", r"gcp-prod idles at \$([\d,.]+) a month, was \$([\d,.]+)\*\*", ("idle", "regional-idle")),
    ("stacks/Pulumi.gcp-prod.yaml", r"\(\$(\d+) a month\s*#\s*idle instead of \$(\d+)\)", ("~idle", "~regional-idle")),
    ("stacks/policy.gcp-prod.yaml", r"full capacity is \$([\d,.]+)/month", ("full",)),
    # adopter re-review of f294e99: docs/linode-autoscaling.md said linode-dev idles at $151 ($597 full), preflight
    # printed $156.10 / $602.10
    ("docs/linode-autoscaling.md", r"linode-dev: \$([\d,.]+)/month for the control plane[\s\S]*?full capacity at "
     r"`maxNodes` \(\$([\d,.]+)\)", ("linode-dev-idle", "linode-dev-full")),
]


@pytest.fixture(scope="module")
def gcp_prod_bills(tmp_path_factory) -> dict[str, float]:
    """preflight's own figures for gcp-prod, for gcp-prod with a regional system pool (no systemPool.zones) and for
    linode-dev."""
    from gpu_platform.preflight.__main__ import main

    out = tmp_path_factory.mktemp("bills")
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.gcp-prod.yaml").read_text())
    doc["config"]["gpu-platform:gcp"]["systemPool"].pop("zones")
    regional = out / "Pulumi.gcp-regional.yaml"
    regional.write_text(yaml.safe_dump(doc))
    assert main(["gcp-prod", "--no-policies", "--out", str(out)]) in (0, 3)  # 3: over its budget at full capacity
    assert main(["--stack-file", str(regional), "--no-policies", "--out", str(out)]) in (0, 3)
    assert main(["linode-dev", "--no-policies", "--out", str(out)]) == 0
    zonal = json.loads((out / "gcp-prod" / "cost.json").read_text())
    wide = json.loads((out / "gcp-regional" / "cost.json").read_text())
    linode = json.loads((out / "linode-dev" / "cost.json").read_text())
    return {"idle": zonal["idleMonthlyUsd"], "full": zonal["fullMonthlyUsd"], "regional-idle": wide["idleMonthlyUsd"],
            "linode-dev-idle": linode["idleMonthlyUsd"], "linode-dev-full": linode["fullMonthlyUsd"]}


@pytest.mark.parametrize("path,pattern,figures", DOLLAR_QUOTES, ids=lambda v: str(v)[:40])
def test_dollar_figures_quoted_for_shipped_stacks_are_preflights(gcp_prod_bills, path, pattern, figures):
    text = (ROOT / path).read_text()
    found = re.findall(pattern, text)
    assert found, f"{path}: no quote matching {pattern!r} (reworded? update DOLLAR_QUOTES)"
    for match in found:
        for quoted, which in zip((match,) if isinstance(match, str) else match, figures):
            value = gcp_prod_bills[which.lstrip("~")]
            want = f"{round(value):,}" if which.startswith("~") else f"{value:,.2f}"
            assert quoted == want, f"{path}: ${quoted} quoted for {which.lstrip('~')}, preflight says ${want}"


def test_the_changelog_lists_as_config_errors_only_what_the_config_check_refuses():
    """Adopter review of 94425ce: CHANGELOG 0.3.0's upgrade note listed "`monthlyBudgetUsd` at most 4 times the
    full-capacity cost" among the config errors, but the config accepts such a budget; the policy pack's
    monthly-cost-ceiling refuses it (exit 3)."""
    from gpu_platform.config.stack import parse_config
    from tests.conftest import stack_config

    text = re.sub(r"\s+", " ", (ROOT / "CHANGELOG.md").read_text())
    config_errors = text.split("each a config error naming the key", 1)[1].split(". ", 1)[0]
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items() if k.startswith("gpu-platform:")}
    raw["monthlyBudgetUsd"] = 10_000_000  # hundreds of times gcp-prod's full capacity
    parse_config(raw, "gcp-prod")  # no ConfigError: not a config check
    assert "monthlyBudgetUsd" not in config_errors, config_errors


@pytest.mark.parametrize("cloud", ["aws", "gcp", "linode"])
def test_each_clouds_entry_points_say_what_they_create_take_and_return(cloud):
    """Adopter review: help(create_cluster) was blank on every cloud, and AWS's create_billing_alerts too."""
    import importlib
    import inspect

    module = importlib.import_module(f"gpu_platform.components.{cloud}")
    for name, returns in (("create_cluster", "ClusterHandle"), ("create_billing_alerts", "list")):
        doc = inspect.getdoc(getattr(module, name)) or ""
        assert "cfg" in doc and "Returns" in doc and returns in doc, (cloud, name, doc)


def test_no_code_comment_cites_the_unreleased_version_or_a_review_round():
    """Adopter review: comments said "before 0.3.2" (the version under development: nobody has run it, so "before"
    it is every release) and "issue 37 round 3 item 2" (a pointer into the tracker instead of the reason). A
    comment says why."""
    import tokenize

    from gpu_platform import __version__

    developing = __version__.removesuffix(".dev0")
    found = []
    for path in sorted((ROOT / "gpu_platform").rglob("*.py")):
        with open(path, "rb") as f:
            for tok in tokenize.tokenize(f.readline):
                if tok.type == tokenize.COMMENT and (re.search(rf"\b{re.escape(developing)}\b", tok.string)
                                                     or re.search(r"round \d+ item \d+", tok.string)):
                    found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("page, stack, login, var, want", [
    ("quickstart-aws.md", "aws-prod", "get-login-password", "REGION", "us-east-1"),
    ("quickstart-gcp.md", "gcp-prod", "configure-docker", "REGISTRY", "us-central1-docker.pkg.dev"),
])
def test_the_quickstarts_log_docker_in_to_the_stacks_own_region(page, stack, login, var, want, tmp_path):
    """Adopter review: quickstart-aws's docker login hard-coded us-east-1, so a stack in eu-west-1 logged Docker in to
    the wrong registry and its push failed at `pulumi up`. The login names no region of its own: it reads the stack's
    (`preflight image-registry`), and that line, run, gives the stack's region, and another region for a stack
    moved there."""
    import subprocess

    text = (ROOT / "docs" / page).read_text()
    lines = [ln.strip() for ln in text.splitlines() if login in ln]
    assert lines
    for ln in lines:
        assert not re.search(r"\b(us|eu|ap|sa|ca|me|af|europe|asia|australia|northamerica|southamerica)-[a-z]+-?\d", ln), ln
    block = next(b for b in re.findall(r"```sh cloud\n(.*?)```", text, re.S) if login in b)
    setter = next(ln.strip() for ln in block.splitlines() if ln.strip().startswith(f"{var}="))

    def run(root: Path) -> str:
        return subprocess.run(["bash", "-c", f'{setter.replace(".venv/bin/python", str(ROOT / ".venv/bin/python"))}; '
                               f'echo "${var}"'], cwd=root, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.strip()

    assert run(ROOT) == want
    moved = tmp_path / "moved"
    (moved / "stacks").mkdir(parents=True)
    (moved / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    moves = {"aws-prod": [("us-east-1", "eu-west-1")],
             "gcp-prod": [("      - us-central1-c\n", ""), ("us-central1", "europe-west4")]}[stack]  # A100 zones a, b
    stack_text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    for old, new in moves:
        stack_text = stack_text.replace(old, new)
    (moved / "stacks" / f"Pulumi.{stack}.yaml").write_text(stack_text)
    assert run(moved) == want.replace(*moves[-1])
