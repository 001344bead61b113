"""The installable package (issue 16): `pip install .` gives `gpu_platform` and its console scripts to
any Pulumi program, and a program that reuses a component plans under preflight.

The wheel is built from the tracked files alone (a copy of the working tree, offline: setuptools is
pinned in requirements-dev.txt) and installed into a fresh virtualenv. That virtualenv sees this
repository's pinned dependencies through a .pth line (no download at test time), never the
repository itself: every check runs from a folder outside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

import gpu_platform
from tests.cli_support import preflight_in_process
from tests.conftest import ROOT
from tests.fit_support import CHARTS
from tests.test_requirements_lock import direct_pins

EXAMPLE = ROOT / "examples" / "team-gke"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pins(path: Path) -> dict[str, str]:
    """name -> pinned version of a requirements .in file, the direct dependencies (following -r); `make lock`
    compiles each into its lock, requirements*.txt (tests/test_requirements_lock.py, whose direct_pins reads them)."""
    return {name: next(iter(req.specifier)).version for name, req in direct_pins(path).items()}


def declared(requirements: list[str]) -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in map(Requirement, requirements)}


# --- metadata ------------------------------------------------------------------------------------


def test_runtime_dependencies_are_the_pinned_requirements_and_the_pins_are_in_range():
    runtime = declared(PYPROJECT["project"]["dependencies"])
    pinned = pins(ROOT / "requirements.in")
    assert set(runtime) == set(pinned), "pyproject.toml dependencies and requirements.in name different packages"
    for name, req in runtime.items():
        assert req.specifier.contains(pinned[name]), f"requirements.in pins {name}=={pinned[name]} outside {req}"


def test_dev_dependencies_are_the_pinned_dev_requirements():
    dev = declared(PYPROJECT["project"]["optional-dependencies"]["dev"])
    pinned = pins(ROOT / "requirements-dev.in")
    runtime = set(declared(PYPROJECT["project"]["dependencies"]))
    assert set(dev) == set(pinned) - runtime
    for name, req in dev.items():
        assert req.specifier.contains(pinned[name]), f"requirements-dev.in pins {name}=={pinned[name]} outside {req}"
    # Test tools stay out of what a Pulumi program installs.
    assert not {"pytest", "moto", "hypothesis", "zizmor"} & runtime


def version_problem(version: str, changelog: str) -> str | None:
    """Why the package version and CHANGELOG.md disagree (None when they agree): with an [Unreleased] section
    the version is a .dev release after the newest released section (a wheel built from main must not claim
    to be that release); without one it is the newest released section."""
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M)
    newest = max((Version(v) for v in released), default=None)
    ours = Version(version)
    if re.search(r"^## \[Unreleased\]", changelog, re.M):
        if not ours.is_devrelease:
            return f"CHANGELOG.md has an [Unreleased] section, so the version is a .dev release, not {version}"
        if newest is not None and ours.release <= newest.release:
            return f"{version} is not after the newest release in CHANGELOG.md ({newest})"
        return None
    return None if newest == ours else f"{version} is not the newest CHANGELOG.md section ({newest})"


def test_version_agrees_with_the_changelog_and_tags_are_v_prefixed():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    problem = version_problem(gpu_platform.__version__, changelog)
    assert problem is None, problem
    tags = subprocess.run(["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert all(re.fullmatch(r"v\d+\.\d+\.\d+", t) for t in tags), tags
    for tag in tags:  # each tag has its CHANGELOG section
        assert f"## [{tag[1:]}]" in changelog, f"{tag} has no CHANGELOG section"


def test_the_version_check_catches_a_release_number_while_unreleased():
    changelog = "## [Unreleased]\n### Changed\n- x\n\n## [0.2.0] — 2026-11-23\n"
    assert "a .dev release" in version_problem("0.2.0", changelog)
    assert "not after" in version_problem("0.2.0.dev0", changelog)
    assert version_problem("0.3.0.dev0", changelog) is None
    released = changelog.replace("## [Unreleased]", "## [0.3.0] — 2026-12-01")
    assert version_problem("0.3.0", released) is None and version_problem("0.3.0.dev0", released)


def tagged_releases(changelog: str) -> set[str]:
    """The `v<version>` tags the release process made: every CHANGELOG release from the first tagged one on
    (the header names it; 0.1.0 and 0.2.0 were never tagged)."""
    first = Version(re.search(r"(\d+\.\d+\.\d+) is the\s+first tagged release", changelog).group(1))
    return {f"v{v}" for v in re.findall(r"^## \[(\d+\.\d+\.\d+)\]", changelog, re.M) if Version(v) >= first}


def test_the_changelog_names_the_tagged_releases_and_not_the_untagged_ones():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    tagged = tagged_releases(changelog)
    assert {"v0.3.0", "v0.3.1"} <= tagged and not {"v0.1.0", "v0.2.0"} & tagged, tagged


def test_the_docs_name_no_release_tag_that_git_lacks():
    """examples/team-gke/requirements.txt said to pin @v0.2.0, which was never tagged.

    Where the clone carries the tags they are the truth; CI's clone of main carries none (it failed here on
    v0.3.1), so there the tagged releases come from the CHANGELOG, and every tag git does have must be one."""
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True)
    if shallow.stdout.strip() != "false":
        pytest.skip("a shallow clone (CI's checkout) has no tags to compare with")
    from_git = set(subprocess.run(["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True).stdout.split())
    from_changelog = tagged_releases((ROOT / "CHANGELOG.md").read_text())
    assert from_git <= from_changelog | {f"v{gpu_platform.__version__}"}, from_git - from_changelog
    tags = from_git or from_changelog
    if not Version(gpu_platform.__version__).is_devrelease:
        # A release commit names its own tag, which is made on it once it is merged (docs/architecture.md).
        tags.add(f"v{gpu_platform.__version__}")
    texts = [ROOT / "README.md", ROOT / "examples" / "team-gke" / "requirements.txt", ROOT / "examples" / "team-gke" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]
    named = {(p.relative_to(ROOT).as_posix(), m) for p in texts for line in p.read_text().splitlines()
             if "gpu-platform" in line for m in re.findall(r"@(v\d+\.\d+\.\d+)\b", line)}  # this package's pins
    missing = sorted((where, tag) for where, tag in named if tag not in tags)
    assert not missing, f"pinning a tag that was never made: {missing}"


def test_the_policy_pack_reports_the_package_version():
    """One version: the pack preflight and `pulumi preview` report is the package's (in SemVer form)."""
    manifest = yaml.safe_load((ROOT / "gpu_platform" / "policies" / "PulumiPolicy.yaml").read_text())
    assert Version(str(manifest["version"])) == Version(gpu_platform.__version__)
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", str(manifest["version"])), manifest["version"]  # SemVer


# --- the wheel in a fresh virtualenv --------------------------------------------------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel installed; its bin/ folder."""
    base = tmp_path_factory.mktemp("package")
    src = base / "src"
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(src)], check=True, cwd=base)
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # The repository's pinned dependencies, without a download (never the repository itself).
    Path(purelib, "pinned-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = wheels.glob("gpu_platform-*.whl")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, cwd=base)
    return env_dir / "bin"


def run_in(bin_dir: Path, args: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GPU_PLATFORM_CHARTS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kw)


def test_the_installed_package_imports_from_the_virtualenv_and_pip_check_passes(installed, tmp_path):
    where = run_in(installed, ["python", "-c", "import gpu_platform, gpu_platform.config.stack, "
                               "gpu_platform.policies.locks, gpu_platform.costs.catalog as c; "
                               "print(gpu_platform.__file__); print(gpu_platform.__version__); print(c.CATALOG_DIR)"],
                   tmp_path)
    assert where.returncode == 0, where.stderr
    module, version, catalog = where.stdout.split()
    assert Path(module).is_relative_to(installed.parent) and not Path(module).is_relative_to(ROOT)
    assert version == gpu_platform.__version__
    assert (Path(catalog) / "kubernetes-versions.yaml").is_file()  # package data came with it
    check = run_in(installed, ["python", "-m", "pip", "check"], tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr


def test_console_scripts_run(installed, tmp_path):
    for script in ("gpu-platform-preflight", "gpu-platform-costs"):
        assert (installed / script).is_file()
    usage = run_in(installed, ["gpu-platform-preflight", "--help"], tmp_path)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: gpu-platform-preflight"), usage.stderr
    catalog = run_in(installed, ["gpu-platform-costs", "check-catalog"], tmp_path)
    assert catalog.returncode == 0, catalog.stderr
    # Outside any Pulumi project: a usage error naming the way out, no traceback.
    lost = run_in(installed, ["gpu-platform-preflight", "dev"], tmp_path)
    assert lost.returncode == 4 and "no Pulumi.yaml" in lost.stderr and "-C DIR" in lost.stderr
    assert "Traceback" not in lost.stderr


def test_a_program_reusing_the_components_plans_under_preflight(installed, tmp_path):
    project = tmp_path / "vision-team"
    shutil.copytree(EXAMPLE, project)
    out = tmp_path / "out"
    run = run_in(installed, ["gpu-platform-preflight", "dev", "--charts", str(CHARTS), "--out", str(out), "-v"], project)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    plan = json.loads((out / "dev" / "plan.json").read_text())
    urns = [r["urn"] for r in plan["resources"]]
    # The team's project owns the stack; the package's components and its own resource are in it.
    assert all(u.startswith("urn:pulumi:dev::vision-team::") for u in urns)
    types = {r["type"] for r in plan["resources"]}
    assert {"gcp:container/cluster:Cluster", "gpu-platform:platform:MlPlatform", "kubernetes:helm.sh/v3:Release"} <= types
    datasets = next(r for r in plan["resources"] if r["name"] == "datasets")
    assert datasets["inputs"]["labels"]["owner"] == "vision-team"
    # The package's policy pack analysed it, and the cluster fit rendered the pinned charts.
    verdict = json.loads((out / "dev" / "preflight.json").read_text())
    assert verdict["policies"]["verdict"] == "pass" and verdict["clusterFit"]["verdict"] == "pass"
    assert verdict["clusterFit"]["releases"] >= 5


def test_shipped_files_are_named_relative_to_the_program_wherever_the_package_is(installed, tmp_path):
    """Kustomize overlays and node scripts ship in the package; a program installed elsewhere names
    them relative to its own folder (what Pulumi resolves them against)."""
    script = ("import os; from gpu_platform.components.paths import program_relative; "
              "p = program_relative('components/platform/kustomize/katib'); print(p); "
              "print(os.path.isfile(os.path.join(p, 'kustomization.yaml')))")
    run = run_in(installed, ["python", "-c", script], tmp_path)
    rel, exists = run.stdout.split()
    assert not os.path.isabs(rel) and exists == "True", run.stderr
    assert (tmp_path / rel).resolve().is_relative_to(installed.parent.resolve())



# --- which project preflight plans ----------------------------------------------------------------


def test_project_is_found_and_read_like_the_pulumi_cli(tmp_path):
    from gpu_platform.project import Project, ProjectFileError, ProjectNotFound, find_project

    (tmp_path / "Pulumi.yaml").write_text("name: infra\nruntime:\n  name: python\nmain: src/\nstackConfigDir: stacks\n")
    (tmp_path / "src" / "deep").mkdir(parents=True)
    found = find_project(tmp_path / "src" / "deep")  # upwards, like the CLI
    assert (found.root, found.name) == (tmp_path, "infra")
    assert found.program == tmp_path / "src" / "__main__.py" and found.stacks_dir == tmp_path / "stacks"
    (tmp_path / "Pulumi.yaml").write_text("name: infra\nruntime: nodejs\n")
    with pytest.raises(ProjectFileError, match="runtime is 'nodejs'"):
        Project.load(tmp_path)
    (tmp_path / "Pulumi.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ProjectFileError, match="Pulumi.yaml: not valid YAML"):
        Project.load(tmp_path)
    (tmp_path / "Pulumi.yaml").unlink()
    with pytest.raises(ProjectNotFound, match="-C DIR"):
        find_project(tmp_path / "src")
    (tmp_path / "Pulumi.yaml").write_text("name: infra\nruntime: python\n")
    with pytest.raises(ProjectNotFound, match="no such folder"):  # not the project above a mistyped folder
        find_project(tmp_path / "typo")


def test_preflight_dash_c_plans_another_project_and_names_its_files(tmp_path):
    """-C DIR from anywhere; a bad project file is a config error (2) naming it, never a traceback."""
    run = preflight_in_process("-C", str(EXAMPLE), "nope")
    assert run.returncode == 4 and "no stack file Pulumi.nope.yaml; stacks: dev" in run.stderr, run.stderr
    (tmp_path / "Pulumi.yaml").write_text("name: other\nruntime: go\n")
    bad = preflight_in_process("-C", str(tmp_path), "dev")
    assert bad.returncode == 2 and f"{tmp_path / 'Pulumi.yaml'}: runtime is 'go'" in bad.stderr
    assert "Traceback" not in run.stderr + bad.stderr


def test_preflight_checks_the_jobs_named_by_dash_dash_job(tmp_path):
    """--job FILE: the user's own jobs are checked for queue fit; one that no node can run fails (3)."""
    job = (ROOT / "examples" / "training" / "trainjob-checkpointed.yaml").read_text()
    greedy = tmp_path / "greedy.yaml"
    greedy.write_text(job.replace('nvidia.com/gpu: "1"', 'nvidia.com/gpu: "8"'))  # a2-highgpu-1g has one A100
    run = preflight_in_process("gcp-prod", "--no-policies", "--job", str(greedy), "--out", str(tmp_path / "out"),
                               "--format", "json")
    doc = json.loads(run.stdout)
    assert run.returncode == 3 and doc["clusterFit"]["verdict"] == "fail", run.stderr
    missing = preflight_in_process("gcp-prod", "--job", str(tmp_path / "no.yaml"))
    assert missing.returncode == 4 and "--job" in missing.stderr and "Traceback" not in missing.stderr


def test_without_a_job_preflight_says_no_training_job_was_checked(tmp_path):
    """A team's own program has no examples/training/: queue fit for training jobs was skipped in silence."""
    def run(*extra, code=0):
        done = preflight_in_process("-C", str(EXAMPLE), "dev", "--no-policies", "--charts", str(CHARTS),
                                    "--out", str(tmp_path / "out"), "--format", "json", *extra)
        assert done.returncode == code, done.stderr[-3000:]
        return [w for w in json.loads(done.stdout)["warnings"] if "no training job was checked" in w]

    (note,) = run()
    assert "--job FILE" in note and "examples/training/trainjob-checkpointed.yaml" in note
    # A job given: it was checked (this one names a runtime the team's platform lacks, so the fit fails).
    job = ROOT / "examples" / "training" / "trainjob-checkpointed.yaml"
    assert run("--job", str(job), code=3) == []


def test_an_in_process_run_of_another_project_leaves_the_test_process_as_it_was(tmp_path, monkeypatch):
    """tests/cli_support.py: a `-C DIR` run loads the other project's program and its own modules from its folder;
    afterwards that folder is off sys.path, its modules are unloaded and the environment is as before (a variable
    given None is unset during the run only)."""
    project = tmp_path / "team"
    shutil.copytree(EXAMPLE, project)
    (project / "team_naming.py").write_text('PREFIX = "team"\n')
    main_py = project / "__main__.py"
    main_py.write_text("import team_naming  # noqa: F401  (the team's own module, beside its program)\n"
                       + main_py.read_text())
    monkeypatch.setenv("GPU_PLATFORM_PROBE", "kept")
    path_before = list(sys.path)
    done = preflight_in_process("-C", str(project), "dev", "--no-policies", "--charts", str(CHARTS),
                                "--out", str(tmp_path / "out"), "--quiet", env={"GPU_PLATFORM_PROBE": None})
    assert done.returncode == 0, done.stderr[-3000:]
    assert sys.path == path_before
    assert "team_naming" not in sys.modules
    assert os.environ["GPU_PLATFORM_PROBE"] == "kept"


def test_preflight_C_on_a_project_inside_the_checkout_finds_the_checkouts_charts(tmp_path, monkeypatch):
    """Adopter review F5: `preflight -C examples/team-gke dev` (docs/preflight.md) exited 4 inside the repository,
    "chart directory ~/.cache/gpu-platform/charts does not exist", though gcp-prod from the repository root
    found ../shared/charts. A project inside a checkout finds the checkout's ../shared/charts; when no folder
    has them, the message lists every folder searched."""
    from gpu_platform.preflight.fit import run

    from tests.fit_support import need_charts

    need_charts()
    tree = tmp_path / "work"
    checkout = tree / "gpu-platform"
    (checkout / ".git").mkdir(parents=True)  # a checkout: the search stops at it
    shutil.copytree(EXAMPLE, checkout / "examples" / "team-gke", ignore=shutil.ignore_patterns("build", "__pycache__"))
    (tree / "shared").mkdir()
    (tree / "shared" / "charts").symlink_to(CHARTS)
    monkeypatch.setattr(run, "USER_CACHE", tmp_path / "cache" / "charts")  # not this machine's cache
    project = checkout / "examples" / "team-gke"
    env = {"GPU_PLATFORM_CHARTS": None, "NO_COLOR": "1"}
    found = preflight_in_process("-C", str(project), "dev", "--no-policies", "--out", str(tmp_path / "out"), env=env)
    assert found.returncode == 0, found.stdout + found.stderr
    (tree / "shared" / "charts").unlink()
    missing = preflight_in_process("-C", str(project), "dev", "--no-policies", "--out", str(tmp_path / "out"), env=env)
    assert missing.returncode == 4, missing.stdout + missing.stderr
    text = " ".join((missing.stdout + missing.stderr).split())
    for folder in (checkout / "examples" / "shared" / "charts", checkout / "shared" / "charts",
                   tree / "shared" / "charts", tmp_path / "cache" / "charts"):
        assert f"{folder} (absent)" in text, text


def test_messages_name_the_command_the_reader_can_run_where_the_package_is_installed(monkeypatch, tmp_path):
    """Adopter review of 9f3f48b: installed from the wheel, the stale-price warning and the missing-charts advice
    named `.venv/bin/python -m ...` (there is no .venv) and `costs refresh` (which would rewrite the catalog in
    site-packages). Installed: `python -m ...`, and the stale warning points at priceOverrides; in a checkout, as
    the README sets it up."""
    import gpu_platform.costs.report as report
    import gpu_platform.project as project
    from gpu_platform.costs.catalog import refresh_command
    from tests.cli_support import preflight_in_process

    def warning() -> str:  # aws-prod's g5.xlarge prices are older than 90 days (2026-06-03)
        run = preflight_in_process("aws-prod", "--no-policies", "--out", str(tmp_path), env={"NO_COLOR": "1"})
        return next(line for line in run.stdout.splitlines() if "prices older than" in line)

    assert project.source_checkout() == ROOT
    assert ".venv/bin/python -m gpu_platform.costs refresh --help" in warning()
    assert refresh_command("linode", "on-demand", "us-east") == ".venv/bin/python -m gpu_platform.costs refresh --linode"
    for module in (project, report):
        monkeypatch.setattr(module, "source_checkout", lambda: None)
    installed = warning()
    assert "gpu-platform:priceOverrides" in installed and ".venv" not in installed and "refresh" not in installed, installed
    assert refresh_command("linode", "on-demand", "us-east") == "python -m gpu_platform.costs refresh --linode"
    assert project.python_m("gpu_platform.preflight") == "python -m gpu_platform.preflight"
