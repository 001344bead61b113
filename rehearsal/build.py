"""Build the rehearsal's upstream components from their pinned Go modules, cached.

`make rehearsal-build` runs this (standard library only: it runs before any virtualenv exists).
Each [[component]] of rehearsal/components.lock.toml that the shipped stacks' rehearsal runs is built, in
the lock's order (one marked `on_demand` only when named: `python3 rehearsal/build.py NAME`, or `--all`), with
`go build -trimpath -mod=readonly` inside its wrapper module (rehearsal/go/<wrapper>), so the exact
dependency graph is the committed go.mod/go.sum; the Go module proxy is the only source.

A component whose module the proxy refuses (cluster-autoscaler) names a `source` instead of a wrapper: an
upstream `git archive` tarball in the shared sources folder ($GPU_PLATFORM_SOURCES, default
../shared/sources beside the project), pinned by its `sha256`. The tarball is checked against that hash
(a mismatch or a missing file stops the build, naming the file), unpacked into a temporary folder under
the cache, built there with its own go.mod/go.sum (`-mod=readonly`: dependencies from the module proxy
only) and the lock's build `tags` (one binary per cloud provider), then removed: nothing of it is kept
or committed, and nothing but Go modules is downloaded. Where the tarball's go.mod cannot build outside
its repository (the Pulumi language host's replaces pkg/v3 and sdk/v3 by paths in the pulumi repository),
`overlay` names a folder rehearsal/go/<overlay> whose committed go.mod and go.sum replace the tarball's;
`files` names files of the tarball (relative to its go.mod's folder) installed beside the binary (the
language host's `pulumi-language-python-exec` shim, which it runs from its own folder).

A wrapper component whose upstream main package embeds files its release build generates (the
pulumi-kubernetes provider's `//go:embed schema-embed.json`, written by its `go generate`) names
`generate` (the environment upstream's Makefile gives `go generate`): the package's folder is copied from
the module cache into a temporary copy of the wrapper, `go generate` runs there, and that copy is built.

Cache: $GPU_PLATFORM_REHEARSAL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/gpu-platform/rehearsal)/bin/<name>. A binary
is rebuilt only when its key changes: the sha256 of its lock entry's build fields (module, version,
package, wrapper or source + sha256 + tags, ldflags_x), its wrapper's go.mod, go.sum and
*.go files, the go build flags, the Go version and the target platform. Each binary is written under a
temporary name and renamed into bin/ as soon as it is built, and bin/VERSIONS.json (name ->
{module, version, package}) is rewritten after each, so a harness can start on the first binaries
while the rest build. Build times go to <cache>/build-times.json.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import sys
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK = HERE / "components.lock.toml"
WRAPPERS = HERE / "go"
CACHE_ENV = "GPU_PLATFORM_REHEARSAL_CACHE"
# The shared folder of upstream source tarballs the proxy does not serve (../shared/sources/README.md).
SOURCES_ENV = "GPU_PLATFORM_SOURCES"
REQUIRED = ("name", "module", "version", "package", "pin", "ldflags_x")
# A component is built from exactly one of: a wrapper module (rehearsal/go/<wrapper>) or a source tarball.
SOURCE_REQUIRED = ("source", "sha256", "tags")
# A component whose entry has `on_demand = "<why>"` is built only when named (or with --all): no shipped
# stack's rehearsal runs it, and each cold build costs minutes on 2 cores.
ON_DEMAND = "on_demand"
# The lock fields that change the binary (not `pin`, `chart`, `commit` or `on_demand`, which only document and
# test it). A source component's `sha256` stands for the tarball's whole content (checked before each build).
BUILD_FIELDS = ("name", "module", "version", "package", "wrapper", "ldflags_x")
SOURCE_BUILD_FIELDS = ("name", "module", "version", "package", "source", "sha256", "tags", "ldflags_x")
# Optional build fields: each changes the key only where it is set (a lock without them keeps its keys).
OPTIONAL_BUILD_FIELDS = ("overlay", "files", "generate")
# Shared by every build: no cgo (static binaries, no C toolchain needed), paths trimmed and symbols
# stripped so the same lock gives the same bytes on any machine.
GO_FLAGS = ["-trimpath", "-mod=readonly"]
LD_BASE = "-s -w"
# A source tarball unpacks outside any repository: no VCS stamp (the lock's commit says which one it is).
SOURCE_GO_FLAGS = ["-buildvcs=false"]
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TAG = re.compile(r"[A-Za-z0-9_.]+")


class BuildError(Exception):
    """A failure worth one line to the user (names the file or component)."""


def cache_dir() -> Path:
    """Where the binaries go: as gpu_platform/rehearsal/binaries.py looks for them ($XDG_CACHE_HOME honoured; a
    build that ignored it put them where no test looked, and every rehearsal test skipped or failed)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-platform" / "rehearsal"


def sources_dir() -> Path:
    env = os.environ.get(SOURCES_ENV)
    return Path(env) if env else HERE.parent.parent / "shared" / "sources"


def is_source(comp: dict) -> bool:
    return "source" in comp


def load_lock(path: Path = LOCK) -> list[dict]:
    """The lock's components, each checked for the fields the build needs."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BuildError(f"{path}: {exc}") from None
    components = doc.get("component")
    if not isinstance(components, list) or not components:
        raise BuildError(f"{path}: no [[component]] entries")
    seen: set[str] = set()
    for i, comp in enumerate(components):
        where = f"{path}: component #{i + 1} ({comp.get('name', '?')})"
        missing = [k for k in REQUIRED if k not in comp]
        if missing:
            raise BuildError(f"{where} lacks {', '.join(missing)}")
        if comp["name"] in seen:
            raise BuildError(f"{path}: component name {comp['name']!r} appears twice")
        seen.add(comp["name"])
        if ("wrapper" in comp) == is_source(comp):
            raise BuildError(f"{where} needs exactly one of `wrapper` (a module wrapper in rehearsal/go) or `source` "
                             "(a tarball in the shared sources folder)")
        if is_source(comp):
            missing = [k for k in SOURCE_REQUIRED if k not in comp]
            if missing:
                raise BuildError(f"{where}: a `source` component also needs {', '.join(missing)}")
            if not isinstance(comp["sha256"], str) or not _SHA256.fullmatch(comp["sha256"]):
                raise BuildError(f"{where}: sha256 must be 64 lowercase hex digits (`sha256sum` of the tarball), "
                                 f"got {comp['sha256']!r}")
            tags = comp["tags"]
            if not isinstance(tags, list) or not all(isinstance(t, str) and _TAG.fullmatch(t) for t in tags):
                raise BuildError(f"{where}: tags must be a list of Go build tags ([A-Za-z0-9_.]), got {tags!r}")
            src = Path(comp["source"])
            if src.is_absolute() or ".." in src.parts:
                raise BuildError(f"{where}: source {comp['source']!r} must be a path inside the shared sources folder")
            if "overlay" in comp and not all((WRAPPERS / str(comp["overlay"]) / f).is_file() for f in ("go.mod", "go.sum")):
                raise BuildError(f"{where}: overlay rehearsal/go/{comp['overlay']} needs a go.mod and a go.sum")
            files = comp.get("files", [])
            if not isinstance(files, list) or not all(isinstance(f, str) and f and not Path(f).is_absolute()
                                                      for f in files):
                raise BuildError(f"{where}: files must be a list of paths relative to the tarball's go.mod folder, "
                                 f"got {files!r}")
            if "generate" in comp:
                raise BuildError(f"{where}: `generate` is for wrapper components (a source tarball is built as it is)")
        elif "overlay" in comp or "files" in comp:
            raise BuildError(f"{where}: `overlay` and `files` are for `source` components")
        elif "generate" in comp and (not isinstance(comp["generate"], dict)
                                     or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in comp["generate"].items())):
            raise BuildError(f"{where}: generate must be a table of environment variables for `go generate`, "
                             f"got {comp['generate']!r}")
        elif "generate" in comp and not comp["package"].startswith(comp["module"] + "/"):
            raise BuildError(f"{where}: generate needs a package inside module {comp['module']}, got {comp['package']!r}")
        elif not (WRAPPERS / comp["wrapper"] / "go.mod").is_file():
            raise BuildError(f"{path}: {comp['name']}: wrapper rehearsal/go/{comp['wrapper']}/go.mod does not exist")
    return components


def go_env() -> dict[str, str]:
    try:
        out = subprocess.run(["go", "env", "-json", "GOVERSION", "GOOS", "GOARCH", "GOMODCACHE"],
                             check=True, capture_output=True, text=True).stdout
    except FileNotFoundError:
        raise BuildError("`go` is not on PATH: the rehearsal's components are built with Go >= 1.26") from None
    return json.loads(out)


def wrapper_files(wrapper: str) -> list[Path]:
    folder = WRAPPERS / wrapper
    return sorted([folder / "go.mod", folder / "go.sum", *folder.glob("*.go")])


def build_key(comp: dict, env: dict[str, str]) -> str:
    h = hashlib.sha256()
    if is_source(comp):
        h.update(json.dumps({k: comp[k] for k in SOURCE_BUILD_FIELDS}, sort_keys=True).encode())
        h.update(" ".join(SOURCE_GO_FLAGS).encode())
        if "overlay" in comp:
            for f in wrapper_files(comp["overlay"]):
                h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    else:
        h.update(json.dumps({k: comp[k] for k in BUILD_FIELDS}, sort_keys=True).encode())
        for f in wrapper_files(comp["wrapper"]):
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    optional = {k: comp[k] for k in OPTIONAL_BUILD_FIELDS if k in comp}
    if optional:
        h.update(json.dumps(optional, sort_keys=True).encode())
    h.update(" ".join([*GO_FLAGS, LD_BASE]).encode())
    h.update(f"{env['GOVERSION']} {env['GOOS']} {env['GOARCH']} CGO_ENABLED=0".encode())
    return h.hexdigest()


def module_download(comp: dict) -> dict:
    """`go mod download -json` of module@version (Info: the proxy's .info file; Dir: the unpacked module)."""
    out = subprocess.run(["go", "mod", "download", "-json", f"{comp['module']}@{comp['version']}"],
                         cwd=WRAPPERS / comp["wrapper"], capture_output=True, text=True)
    if out.returncode != 0:
        raise BuildError(f"{comp['name']}: go mod download {comp['module']}@{comp['version']}: {out.stdout}{out.stderr}".strip())
    return json.loads(out.stdout)


def module_info(comp: dict, env: dict[str, str]) -> dict:
    """The proxy's .info for module@version (Time; Origin.Hash where the proxy recorded it)."""
    return json.loads(Path(module_download(comp)["Info"]).read_text())


def ldflags(comp: dict, info: dict) -> str:
    version = comp["version"]
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "version": version,
        "version_bare": version.lstrip("v"),
        "major": major,
        "minor": minor,
        "date": info.get("Time", ""),
        "commit": (info.get("Origin") or {}).get("Hash", "unknown"),
    }
    flags = [LD_BASE]
    for var, template in sorted(comp["ldflags_x"].items()):
        flags.append(f"-X '{var}={template.format(**values)}'")
    return " ".join(flags)


def source_info(comp: dict) -> dict:
    """ldflags values of a source component: its lock entry's commit (the tarball has no VCS data)."""
    return {"Time": "", "Origin": {"Hash": comp.get("commit", "unknown")}}


def fetch_source(comp: dict, env: dict[str, str]) -> None:
    """The module of an on_demand component into Go's module cache, without building it (seconds): tests
    read pinned upstream files from there (Cilium's compatibility table of each pinned chart). A source
    component has nothing to fetch: its tarball is only checked against the lock."""
    if is_source(comp):
        verified_archive(comp)
    else:
        module_info(comp, env)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verified_archive(comp: dict) -> Path:
    """The component's tarball, after checking it is the one the lock pins (BuildError naming it if not)."""
    path = sources_dir() / comp["source"]
    if not path.is_file():
        raise BuildError(f"{comp['name']}: source tarball {path} does not exist (the shared sources folder is "
                         f"../shared/sources beside the project, or ${SOURCES_ENV})")
    actual = sha256_file(path)
    if actual != comp["sha256"]:
        raise BuildError(f"{comp['name']}: {path} has sha256 {actual}, rehearsal/components.lock.toml pins "
                         f"{comp['sha256']}: refusing to build from a tarball that is not the pinned one")
    return path


def unpack(archive: Path, dest: Path, module: str) -> Path:
    """Unpacks `archive` into `dest` (tarfile's "data" filter: no links out, no device files, no absolute
    paths) and returns the folder whose go.mod declares `module`."""
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BuildError(f"{archive}: cannot unpack: {exc}") from None
    for gomod in sorted(dest.rglob("go.mod"), key=lambda p: len(p.parts)):
        first = gomod.read_text(errors="replace").split("\n", 1)[0].strip()
        if first == f"module {module}":
            return gomod.parent
    raise BuildError(f"{archive}: no go.mod declaring `module {module}` in the tarball")


def apply_overlay(comp: dict, root: Path) -> None:
    """The committed go.mod/go.sum of rehearsal/go/<overlay> in place of the unpacked tarball's."""
    for name in ("go.mod", "go.sum"):
        (root / name).unlink(missing_ok=True)
        shutil.copyfile(WRAPPERS / comp["overlay"] / name, root / name)


def install_files(comp: dict, root: Path, work: Path, bin_dir: Path) -> None:
    """The lock's `files` of the unpacked tarball (relative to its go.mod folder `root`), beside the binary."""
    for rel in comp.get("files", []):
        src = (root / rel).resolve()
        if not src.is_relative_to(work.resolve()) or not src.is_file():
            raise BuildError(f"{comp['name']}: file {rel!r} of the lock's `files` is not a file inside "
                             f"{comp['source']}")
        tmp = bin_dir / f".{src.name}.building.{os.getpid()}"
        shutil.copyfile(src, tmp)
        tmp.chmod(0o755)
        os.replace(tmp, bin_dir / src.name)


def installed_files(comp: dict) -> list[str]:
    return [Path(rel).name for rel in comp.get("files", [])]


def generated_package(comp: dict, work: Path) -> tuple[Path, str]:
    """A temporary copy of the wrapper with the upstream package's folder copied in (writable) and `go generate`
    run there with the lock's environment; returns the folder to build in and the package to build."""
    for f in wrapper_files(comp["wrapper"]):
        shutil.copyfile(f, work / f.name)
    pkg_dir = Path(module_download(comp)["Dir"]) / comp["package"][len(comp["module"]) + 1:]
    local = work / pkg_dir.name
    local.mkdir()
    for f in sorted(pkg_dir.iterdir()):
        if f.is_file():  # the package's own files; subfolders are other packages
            shutil.copyfile(f, local / f.name)
    flags = " ".join(filter(None, [os.environ.get("GOFLAGS", ""), "-mod=readonly"]))
    proc = subprocess.run(["nice", "-n", "10", "go", "generate", f"./{local.name}"], cwd=work,
                          env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": flags, **comp["generate"]},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{comp['name']}: `go generate {comp['package']}` (environment {comp['generate']}) failed:\n"
                         f"{proc.stdout}{proc.stderr}".rstrip())
    return work, f"./{local.name}"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def go_build_command(comp: dict, info: dict, jobs: int, output: Path, package: str | None = None) -> list[str]:
    extra = [*SOURCE_GO_FLAGS, "-tags", ",".join(comp["tags"])] if is_source(comp) else []
    return ["nice", "-n", "10", "go", "build", "-p", str(jobs), *GO_FLAGS, *extra,
            "-ldflags", ldflags(comp, info), "-o", str(output), package or comp["package"]]


def build(comp: dict, env: dict[str, str], bin_dir: Path, jobs: int) -> None:
    target = bin_dir / comp["name"]
    tmp = bin_dir / f".{comp['name']}.building.{os.getpid()}"
    go_env_vars = {**os.environ, "CGO_ENABLED": "0"}
    if not is_source(comp) and "generate" in comp:
        # The generated files are written beside bin/ (same disk), removed after the build whatever happens.
        with tempfile.TemporaryDirectory(prefix=f".gen-{comp['name']}-", dir=bin_dir.parent) as work:
            folder, package = generated_package(comp, Path(work))
            cmd = go_build_command(comp, module_info(comp, env), jobs, tmp, package)
            proc = subprocess.run(cmd, cwd=folder, env=go_env_vars, capture_output=True, text=True)
        where = f"rehearsal/go/{comp['wrapper']} (after go generate)"
    elif not is_source(comp):
        cmd = go_build_command(comp, module_info(comp, env), jobs, tmp)
        proc = subprocess.run(cmd, cwd=WRAPPERS / comp["wrapper"], env=go_env_vars, capture_output=True, text=True)
        where = f"rehearsal/go/{comp['wrapper']}"
    else:
        archive = verified_archive(comp)
        # Unpacked beside bin/ (same disk), removed after the build whatever happens.
        with tempfile.TemporaryDirectory(prefix=f".src-{comp['name']}-", dir=bin_dir.parent) as work:
            root = unpack(archive, Path(work), comp["module"])
            if "overlay" in comp:
                apply_overlay(comp, root)
            cmd = go_build_command(comp, source_info(comp), jobs, tmp)
            proc = subprocess.run(cmd, cwd=root, env=go_env_vars, capture_output=True, text=True)
            if proc.returncode == 0:
                install_files(comp, root, Path(work), bin_dir)
        where = f"{archive.name} (tags {','.join(comp['tags'])})"
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{comp['name']}: `go build {comp['package']}` in {where} failed:\n"
                         f"{proc.stdout}{proc.stderr}".rstrip())
    os.replace(tmp, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rehearsal-build", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="build only these components (default: every one not marked on_demand)")
    parser.add_argument("--all", action="store_true", help="build every component of the lock, on_demand ones included")
    parser.add_argument("-p", "--jobs", type=int, default=2, help="go build -p (default 2)")
    args = parser.parse_args(argv)
    try:
        components = load_lock()
        unknown = sorted(set(args.names) - {c["name"] for c in components})
        if unknown:
            raise BuildError(f"unknown component(s) {', '.join(unknown)}; the lock has "
                             f"{', '.join(c['name'] for c in components)}")
        env = go_env()
    except BuildError as exc:
        print(f"rehearsal-build: {exc}", file=sys.stderr)
        return 2
    root = cache_dir()
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / "keys").mkdir(parents=True, exist_ok=True)
    # One build at a time per cache: a second `make rehearsal-build` waits, then finds everything cached,
    # instead of compiling the same packages again beside the first.
    with (root / ".build.lock").open("a+") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"rehearsal-build: another build is writing {root}; waiting for it", flush=True)
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        only = set(args.names) or {c["name"] for c in components if args.all or not c.get(ON_DEMAND)}
        # The on_demand modules are fetched with the default build only (naming components builds just those).
        return build_all(components, env, root, only, args.jobs, fetch=not args.names)


def build_all(components: list[dict], env: dict[str, str], root: Path, only: set[str], jobs: int,
              fetch: bool = True) -> int:
    """Build what the cache lacks of the components named in `only` (all of `components` if empty); 1 if any failed."""
    bin_dir, key_dir = root / "bin", root / "keys"
    versions_path, times_path = bin_dir / "VERSIONS.json", root / "build-times.json"
    times = json.loads(times_path.read_text()) if times_path.is_file() else {}
    keys = {c["name"]: build_key(c, env) for c in components}
    by_name = {c["name"]: c for c in components}

    def cached(name: str) -> bool:
        key_file = key_dir / name
        extra = installed_files(by_name[name])
        return (all((bin_dir / f).is_file() for f in [name, *extra]) and key_file.is_file()
                and key_file.read_text() == keys[name])

    def entry(comp: dict) -> dict:
        out = {"module": comp["module"], "version": comp["version"], "package": comp["package"]}
        if is_source(comp):
            out.update(source=comp["source"], sha256=comp["sha256"], tags=list(comp["tags"]))
            if comp.get("files"):
                out["files"] = installed_files(comp)
        return out

    # VERSIONS.json names only binaries that match the lock as it is now (a moved pin drops its entry
    # until the new binary is in place).
    versions = {c["name"]: entry(c) for c in components if cached(c["name"])}
    write_json(versions_path, versions)
    failed: list[str] = []
    started = time.monotonic()
    for comp in components:
        name = comp["name"]
        if only and name not in only:
            if comp.get(ON_DEMAND) and fetch:
                try:
                    fetch_source(comp, env)
                    print(f"  source  {name:<24} {comp['module']}@{comp['version']} (on demand: module only, not built)")
                except BuildError as exc:  # only tests that read its files need it: they say so and skip
                    print(f"rehearsal-build: warning: {exc}", file=sys.stderr)
            continue
        if cached(name):
            print(f"  cached  {name:<24} {comp['module']}@{comp['version']}")
        else:
            print(f"  build   {name:<24} {comp['module']}@{comp['version']} ...", flush=True)
            t0 = time.monotonic()
            try:
                build(comp, env, bin_dir, jobs)
            except BuildError as exc:
                print(f"rehearsal-build: {exc}", file=sys.stderr)
                failed.append(name)
                continue
            seconds = round(time.monotonic() - t0, 1)
            (key_dir / name).write_text(keys[name])
            times[name] = {"seconds": seconds, "go": env["GOVERSION"], "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            write_json(times_path, times)
            print(f"  built   {name:<24} in {seconds:.0f} s", flush=True)
        versions[name] = entry(comp)
        write_json(versions_path, versions)
    print(f"rehearsal-build: {bin_dir} ({time.monotonic() - started:.1f} s)")
    if failed:
        print(f"rehearsal-build: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
