"""The locks (adopter review: requirements.txt pinned only the direct dependencies, with no hash, so a deploy
months later could install another grpcio/protobuf than the one tested, or a tampered wheel).

requirements*.in name the direct dependencies; `make lock` (uv pip compile --universal --generate-hashes)
compiles each into its requirements*.txt: every package, transitive ones included, `==`-pinned with its
sha256 hashes, which pip installs in hash-checking mode. Offline: these tests read the files and this
virtualenv's metadata; nothing here resolves or downloads (`make lock` needs the network and is never run).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

POLICIES = ROOT / "gpu_platform" / "policies"
# Each lock, the .in file it is compiled from, and the lock it is constrained to (`make lock`).
LOCKS = {
    ROOT / "requirements.txt": (ROOT / "requirements.in", None),
    ROOT / "requirements-dev.txt": (ROOT / "requirements-dev.in", ROOT / "requirements.txt"),
    POLICIES / "requirements.txt": (POLICIES / "requirements.in", ROOT / "requirements.txt"),
}
# Installed beside the lock and never from it: the installer itself, and this package (editable, --no-deps).
NOT_LOCKED = {"pip", "gpu-platform"}
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Locked:
    name: str  # canonical
    version: str
    marker: Marker | None
    hashes: frozenset[str]
    line: str

    def applies_here(self) -> bool:
        return self.marker is None or self.marker.evaluate()


def lock_entries(text: str, where: str = "lock") -> tuple[dict[tuple[str, str], Locked], list[str]]:
    """A lock's requirements ((name, marker) -> entry: uv writes one line per version a marker selects, numpy on
    Python 3.11 and on 3.12+) and what is wrong with its lines: not `==` on one version, no sha256 hash, an
    option or a line pip cannot hash-check (a path, a URL, an editable, -r/-c)."""
    entries: dict[tuple[str, str], Locked] = {}
    problems: list[str] = []
    logical = re.sub(r"\\\n", " ", text)  # continuation lines
    for raw in logical.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith("-"):
            problems.append(f"{where}: an option or a file where a pinned requirement belongs: {line[:80]!r}")
            continue
        words = line.split()  # (a marker's quotes stay as they are)
        hashes = frozenset(w for w in words if w.startswith("--hash="))
        spec = " ".join(w for w in words if not w.startswith("--"))
        others = [w for w in words if w.startswith("--") and not w.startswith("--hash=")]
        try:
            req = Requirement(spec)
        except Exception as exc:  # noqa: BLE001 (any parse error is a problem with the line)
            problems.append(f"{where}: {spec[:80]!r} is not a requirement pip can hash-check ({exc})")
            continue
        name = canonicalize_name(req.name)
        pins = list(req.specifier)
        if req.url or len(pins) != 1 or pins[0].operator != "==" or "*" in pins[0].version:
            problems.append(f"{where}: {name} is not pinned to one version with == ({spec[:80]!r})")
            continue
        if others:
            problems.append(f"{where}: {name} carries {others} beside its hashes")
        if not hashes:
            problems.append(f"{where}: {name}=={pins[0].version} has no --hash=sha256: (pip refuses to install "
                            "a lock where one requirement lacks a hash)")
        bad = sorted(h for h in hashes if not HASH.fullmatch(h))
        if bad:
            problems.append(f"{where}: {name} has hashes that are not sha256: {bad}")
        key = (name, str(req.marker or ""))
        if key in entries:
            problems.append(f"{where}: {name} is listed twice")
        entries[key] = Locked(name, pins[0].version, req.marker, hashes, line)
    return entries, problems


def read_lock(path: Path) -> dict[tuple[str, str], Locked]:
    entries, problems = lock_entries(path.read_text(), path.relative_to(ROOT).as_posix())
    assert not problems, "\n".join(problems)
    return entries


def here(entries: dict[tuple[str, str], Locked]) -> dict[str, Locked]:
    """The entries whose markers hold in this environment: name -> entry (one per name)."""
    out: dict[str, Locked] = {}
    for entry in entries.values():
        if entry.applies_here():
            assert entry.name not in out, f"two entries of {entry.name} apply here: {out[entry.name].line}, {entry.line}"
            out[entry.name] = entry
    return out


def direct_pins(path: Path) -> dict[str, Requirement]:
    """The requirements of an .in file (following -r): name -> requirement."""
    out: dict[str, Requirement] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("-r "):
            out.update(direct_pins(path.parent / line[3:].strip()))
        elif line:
            req = Requirement(line)
            out[canonicalize_name(req.name)] = req
    return out


def pin_problems(pins: dict[str, Requirement], entries: dict[tuple[str, str], Locked], where: str) -> list[str]:
    """A direct pin the lock lacks, or holds at another version."""
    problems = []
    for name, req in sorted(pins.items()):
        (pin,) = req.specifier
        versions = sorted({e.version for e in entries.values() if e.name == name})
        if not versions:
            problems.append(f"{where}: {name}=={pin.version} (the .in file) is not in the lock")
        elif versions != [pin.version]:
            problems.append(f"{where}: the .in file pins {name}=={pin.version}, the lock has {versions} "
                            "(run `make lock`)")
    return problems


def closure_problems(locked: dict[str, Locked], roots: list[Requirement], requires) -> list[str]:
    """Every package this environment needs, walking from the .in file's requirements through each package's
    metadata (`requires(name)`, markers evaluated here with the extras asked of it), is in the lock at a version
    its requirer accepts."""
    env = default_environment()
    problems: list[str] = []
    done: set[tuple[str, str]] = set()
    todo = [(r, "the .in file") for r in roots]
    while todo:
        req, by = todo.pop()
        name = canonicalize_name(req.name)
        entry = locked.get(name)
        if entry is None:
            problems.append(f"{by} requires {req}, which the lock does not pin for this environment")
            continue
        if not req.specifier.contains(Version(entry.version), prereleases=True):
            problems.append(f"{by} requires {req}; the lock pins {name}=={entry.version}")
        for extra in ("", *sorted(req.extras)):
            if (name, extra) in done:
                continue
            done.add((name, extra))
            for text in requires(name) or []:
                dep = Requirement(text)
                if dep.marker is None or dep.marker.evaluate({**env, "extra": extra}):
                    if not extra or (dep.marker and "extra" in str(dep.marker)):
                        todo.append((dep, f"{name}=={entry.version}" + (f"[{extra}]" if extra else "")))
    return sorted(set(problems))


def installed_requires(name: str) -> list[str] | None:
    try:
        return importlib.metadata.distribution(name).requires
    except importlib.metadata.PackageNotFoundError:
        return None


def venv_problems(locked: dict[str, Locked], installed: dict[str, str], extra_allowed: set[str] | None) -> list[str]:
    """Each locked package that applies here installed at its locked version; with extra_allowed, nothing else
    installed but those."""
    problems = [f"{name}=={entry.version} is locked, {installed[name] + ' is' if name in installed else 'nothing is'} "
                "installed" for name, entry in sorted(locked.items()) if installed.get(name) != entry.version]
    if extra_allowed is not None:
        problems += [f"{name} {installed[name]} is installed but not in the lock"
                     for name in sorted(set(installed) - set(locked) - extra_allowed)]
    return problems


def installed_versions() -> dict[str, str]:
    return {canonicalize_name(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}


# --- the real files -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_requirement_of_the_lock_is_pinned_with_a_sha256_hash(lock):
    text = lock.read_text()
    source = LOCKS[lock][0].relative_to(ROOT).as_posix()
    first, second = text.split("\n", 2)[:2]
    assert first.startswith("# DO NOT EDIT BY HAND: the lock of " + source), f"{lock.name}: the header says what it is"
    assert f"Change {source}, then run `make lock`" in second, second
    assert read_lock(lock)


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_direct_pin_is_in_the_lock_at_the_same_version(lock):
    source = LOCKS[lock][0]
    pins = direct_pins(source)
    assert pins and all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in pins.values()), \
        f"{source.name}: every direct dependency is pinned with =="
    problems = pin_problems(pins, read_lock(lock), lock.relative_to(ROOT).as_posix())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_lock_is_closed_for_this_environment(lock):
    """Nothing floats: every dependency of every package the .in file brings (importlib.metadata's requires,
    markers evaluated here) is itself locked, at a version its requirer accepts."""
    problems = closure_problems(here(read_lock(lock)), list(direct_pins(LOCKS[lock][0]).values()), installed_requires)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("lock", [p for p, (_, c) in LOCKS.items() if c], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_constrained_lock_agrees_with_the_programs_lock(lock):
    """The dev lock and the policy pack's are compiled against requirements.txt: a package both hold is the
    same line (version, marker, hashes), so the tests run on what a deploy installs."""
    program = read_lock(ROOT / "requirements.txt")
    differ = [f"{k[0]}=={e.version} vs {program[k].version} (or other hashes)" for k, e in read_lock(lock).items()
              if k in program and (e.version, e.hashes) != (program[k].version, program[k].hashes)]
    missing = [] if lock.name != "requirements-dev.txt" else sorted(k[0] for k in set(program) - set(read_lock(lock)))
    assert not differ and not missing, f"{lock.name} vs requirements.txt: {differ or missing} (run `make lock`)"


def test_the_virtualenv_matches_the_lock():
    """What the tests run on is what the locks say: every locked package that applies here is installed at its
    locked version, and nothing outside the dev lock is (`make venv` installs requirements-dev.txt)."""
    installed = installed_versions()
    problems = venv_problems(here(read_lock(ROOT / "requirements.txt")), installed, None)
    problems += venv_problems(here(read_lock(ROOT / "requirements-dev.txt")), installed, NOT_LOCKED)
    assert not problems, "this virtualenv is not the lock (`make venv` rebuilds it):\n" + "\n".join(problems)


def test_make_lock_compiles_universally_for_the_pythons_the_package_supports():
    """One lock for every Python requires-python allows and every platform: `--universal` from its lowest
    version (uv reads no requires-python from a requirements.in)."""
    makefile = (ROOT / "Makefile").read_text()
    requires_python = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    lowest = re.fullmatch(r">=(\d+\.\d+)", requires_python).group(1)
    assert re.search(rf"^LOCK_PYTHON := {re.escape(lowest)}$", makefile, re.M), requires_python
    recipe = makefile[makefile.index("define compile_lock"):makefile.index("endef", makefile.index("define compile_lock"))]
    for flag in ("uv pip compile", "--universal", "--generate-hashes", "--python-version $(LOCK_PYTHON)"):
        assert flag in recipe, flag
    for lock, (source, constraint) in LOCKS.items():
        call = f"$(call compile_lock,{source.relative_to(ROOT)},{lock.relative_to(ROOT)}"
        assert call + (f",-c {constraint.relative_to(ROOT)})" if constraint else ")") in makefile, call


# pip in hash-checking mode refuses a requirement without a hash in the same install, so every command that
# installs a lock installs it alone, with --require-hashes; the package itself goes in after, with --no-deps.
INSTALLERS = [ROOT / "Makefile", ROOT / ".ci" / "run", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
              *sorted((ROOT / ".github" / "workflows").glob("*.yml")), ROOT / "examples" / "team-gke" / "README.md"]


def install_problems(text: str, where: str) -> list[str]:
    problems = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        for cmd in re.findall(r"pip install[^;&|`#\n]*", line):
            words = cmd.split()
            locks = [w for w in words if re.search(r"(^|/)requirements(-dev)?\.txt$", w)]
            if locks and "--require-hashes" not in words:
                problems.append(f"{where}: `{cmd.strip()}` installs a lock without --require-hashes")
            if locks and any(w in ("-e", ".", "../..") or w.startswith("git+") for w in words):
                problems.append(f"{where}: `{cmd.strip()}` mixes a lock with a requirement that has no hash")
            if ("-e" in words or "." in words[2:] or "../.." in words) and not locks and "--no-deps" not in words \
                    and "requirements" not in cmd:
                problems.append(f"{where}: `{cmd.strip()}` installs the package with its dependencies resolved "
                                "again, not from the lock (--no-deps)")
    return problems


def test_every_command_that_installs_a_lock_checks_its_hashes_and_resolves_nothing_else():
    problems = [p for path in INSTALLERS for p in install_problems(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert not problems, "\n".join(problems)
    makefile = (ROOT / "Makefile").read_text()
    assert "pip install --progress-bar off --require-hashes -r requirements-dev.txt" in makefile
    assert "pip install --quiet --no-deps --no-build-isolation -e ." in makefile


# --- each check fails on a planted defect ---------------------------------------------------------------------


def _planted(old: str, new: str) -> str:
    text = (ROOT / "requirements.txt").read_text()
    assert old in text, old
    return text.replace(old, new, 1)


def _entry_block(name: str) -> str:
    text = (ROOT / "requirements.txt").read_text()
    return re.search(rf"^{re.escape(name)}==.*?(?=^\S)", text, re.M | re.S).group(0)


def test_a_missing_hash_or_a_floating_pin_is_caught():
    block = _entry_block("grpcio")
    unhashed = _planted(block, block.split(" \\\n", 1)[0] + "\n    # via pulumi\n")
    _, problems = lock_entries(unhashed)
    assert problems == ["lock: grpcio==%s has no --hash=sha256: (pip refuses to install a lock where one "
                        "requirement lacks a hash)" % here(read_lock(ROOT / "requirements.txt"))["grpcio"].version]
    version = here(read_lock(ROOT / "requirements.txt"))["protobuf"].version
    floating = _planted(f"protobuf=={version} ", f"protobuf>={version} ")
    _, problems = lock_entries(floating)
    assert len(problems) == 1 and "protobuf is not pinned to one version with ==" in problems[0], problems
    _, problems = lock_entries(_planted("pulumi==", "-e ./pulumi\npulumi=="))
    assert problems and "an option or a file" in problems[0]
    _, problems = lock_entries(_planted("--hash=sha256:", "--hash=md5:"))
    assert problems and "not sha256" in problems[0]


def test_a_floating_transitive_dependency_is_caught():
    """A dependency left out of the lock (pip would resolve it at install time) is named with its requirer."""
    locked = here(read_lock(ROOT / "requirements.txt"))
    roots = list(direct_pins(ROOT / "requirements.in").values())
    assert closure_problems(locked, roots, installed_requires) == []
    without = {k: v for k, v in locked.items() if k != "semver"}
    problems = closure_problems(without, roots, installed_requires)
    assert problems and all("semver" in p and "does not pin" in p for p in problems), problems
    assert any(p.startswith(f"pulumi=={locked['pulumi'].version} requires semver") for p in problems), problems


def test_a_lock_entry_its_requirer_refuses_is_caught():
    """A transitive pin outside what its requirer accepts (a hand edit, a half-run `make lock`)."""
    roots = [Requirement("app==1.0")]
    locked = {n: Locked(n, v, None, frozenset(), "") for n, v in {"app": "1.0", "lib": "2.0"}.items()}
    problems = closure_problems(locked, roots, {"app": ["lib<2", "extra-tool; extra == 'cli'"], "lib": []}.get)
    assert problems == ["app==1.0 requires lib<2; the lock pins lib==2.0"]
    # An extra asked of a package brings its dependencies in; one never asked does not.
    problems = closure_problems(locked, [Requirement("app[cli]==1.0")], {"app": ["lib<3", "extra-tool; extra == 'cli'"],
                                                                          "lib": []}.get)
    assert problems == ["app==1.0[cli] requires extra-tool; extra == \"cli\", which the lock does not pin for this "
                        "environment"]


def test_a_drifted_pin_is_caught():
    """requirements.in moved (or the lock was edited) without `make lock`: the .in's version is named."""
    pins = direct_pins(ROOT / "requirements.in")
    entries = read_lock(ROOT / "requirements.txt")
    assert pin_problems(pins, entries, "lock") == []
    pins["pulumi"] = Requirement("pulumi==3.271.0")
    assert pin_problems(pins, entries, "lock") == [
        f"lock: the .in file pins pulumi==3.271.0, the lock has ['{here(entries)['pulumi'].version}'] (run `make lock`)"]
    pins["left-out"] = Requirement("left-out==1.0")
    assert "lock: left-out==1.0 (the .in file) is not in the lock" in pin_problems(pins, entries, "lock")


def test_a_virtualenv_that_drifted_from_the_lock_is_caught():
    locked = here(read_lock(ROOT / "requirements.txt"))
    installed = {name: entry.version for name, entry in locked.items()} | {"pip": "26.3"}
    assert venv_problems(locked, installed, NOT_LOCKED) == []
    installed["grpcio"] = "1.86.0"
    del installed["dill"]
    installed["requests-oauthlib"] = "2.0.0"
    assert venv_problems(locked, installed, NOT_LOCKED) == [
        f"dill=={locked['dill'].version} is locked, nothing is installed",
        f"grpcio=={locked['grpcio'].version} is locked, 1.86.0 is installed",
        "requests-oauthlib 2.0.0 is installed but not in the lock"]


def test_an_install_command_that_would_break_hash_checking_is_caught():
    assert install_problems(".venv/bin/pip install --require-hashes -r requirements.txt", "x") == []
    assert install_problems("venv/bin/pip install --no-deps ../..", "x") == []
    assert "without --require-hashes" in install_problems("pip install -r requirements.txt", "x")[0]
    assert "mixes a lock" in install_problems("pip install --require-hashes -r requirements.txt -e .", "x")[0]
    assert "--no-deps" in install_problems("$(PY) -m pip install --no-build-isolation -e .", "x")[0]
