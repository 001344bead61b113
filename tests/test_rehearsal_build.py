"""The rehearsal's component lock (rehearsal/components.lock.toml) agrees with its Go wrapper modules and
with the program's pins, and the build cache skips what is already built. Builds nothing: go.mod files
are read by `go mod edit -json` (Go's own parser, offline), charts from ../shared/charts."""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from gpu_platform.data import platform_versions as versions
from gpu_platform.preflight.fit.run import default_chart_dirs

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("rehearsal_build", ROOT / "rehearsal" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

COMPONENTS = build.load_lock()
BY_NAME = {c["name"]: c for c in COMPONENTS}
# Built inside a wrapper module of rehearsal/go, or from a pinned tarball of the shared sources folder.
WRAPPED = [c for c in COMPONENTS if not build.is_source(c)]
SOURCES = [c for c in COMPONENTS if build.is_source(c)]
# The binaries the rehearsal harness starts, in the order they are built (the harness can start etcd and
# the API server while the controllers still build).
HARNESS_ORDER = ["etcd", "kube-apiserver", "kwok", "kube-scheduler", "kube-controller-manager",
                 "kueue-manager", "jobset-manager", "trainer-manager", "prometheus-operator"]


@functools.cache
def go_mod(wrapper: str) -> dict:
    if shutil.which("go") is None:  # `make check` needs no Go; `make test` (and CI) always has it
        pytest.skip("go is not on PATH: these tests read go.mod files with Go's own parser (`go mod edit -json`)")
    out = subprocess.run(["go", "mod", "edit", "-json"], cwd=ROOT / "rehearsal" / "go" / wrapper,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def requires(wrapper: str) -> dict[str, str]:
    return {r["Path"]: r["Version"] for r in go_mod(wrapper).get("Require") or []}


def chart_file(archive: str, member: str) -> dict:
    for folder in default_chart_dirs(ROOT):
        path = folder / archive
        if path.is_file():
            with tarfile.open(path) as tar:
                return yaml.safe_load(tar.extractfile(member).read())
    pytest.fail(f"chart archive {archive} is not in {[str(d) for d in default_chart_dirs(ROOT)]}: "
                "a chart pin moved without rehearsal/components.lock.toml (or the charts are missing)")


def dotted(doc: dict, key: str):
    for part in key.split("."):
        doc = doc[part]
    return doc


def test_lock_names_the_harness_binaries_in_build_order():
    names = [c["name"] for c in COMPONENTS]
    assert names[:len(HARNESS_ORDER)] == HARNESS_ORDER


@pytest.mark.parametrize("comp", WRAPPED, ids=lambda c: c["name"])
def test_wrapper_pins_the_locked_module_and_names_its_package(comp):
    mod = go_mod(comp["wrapper"])
    assert requires(comp["wrapper"]).get(comp["module"]) == comp["version"], (
        f"rehearsal/go/{comp['wrapper']}/go.mod does not require {comp['module']} {comp['version']} "
        "(run `go get -tool <package>@<version>` there after moving the lock)")
    folder = ROOT / "rehearsal" / "go" / comp["wrapper"]
    if comp["package"] == mod["Module"]["Path"]:
        # A program of the wrapper's own (cilium-crds): it must call into the locked module.
        sources = "".join(p.read_text() for p in folder.glob("*.go"))
        assert f'"{comp["module"]}/' in sources, f"rehearsal/go/{comp['wrapper']}/*.go imports nothing of {comp['module']}"
    else:
        assert comp["package"] in {t["Path"] for t in mod.get("Tool") or []}
        assert comp["package"] == comp["module"] or comp["package"].startswith(comp["module"] + "/")
    assert (folder / "go.sum").is_file()


@pytest.mark.parametrize("wrapper", sorted({c["wrapper"] for c in WRAPPED}))
def test_wrapper_builds_with_the_projects_go(wrapper):
    # Go 1.26 on the CI machine: a wrapper asking for a newer Go would need GOTOOLCHAIN everywhere.
    assert tuple(int(x) for x in go_mod(wrapper)["Go"].split(".")[:2]) <= (1, 26)


@pytest.mark.parametrize("wrapper", sorted({c["wrapper"] for c in WRAPPED}))
def test_kubernetes_libraries_agree_within_each_wrapper(wrapper):
    """k8s.io/api, apimachinery, client-go, apiserver and component-base are released together and used
    together; a skewed pair is a broken graph. (Others may trail as upstream has them: JobSet v0.11.0's own
    go.mod keeps apiextensions-apiserver v0.34.1 from controller-runtime.)"""
    core = ("k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/apiserver", "k8s.io/component-base")
    req = requires(wrapper)
    staging = {p: req[p] for p in core if p in req}
    minors = {".".join(v.split(".")[:2]) for v in staging.values()}
    assert len(minors) <= 1, f"rehearsal/go/{wrapper}: Kubernetes libraries at several minors: {staging}"


def test_kubernetes_staging_modules_are_all_replaced_by_the_matching_release():
    comp = BY_NAME["kube-apiserver"]
    staging_version = "v0." + comp["version"].split(".", 1)[1]  # v1.35.4 -> v0.35.4
    mod = go_mod(comp["wrapper"])
    replaced = {r["Old"]["Path"]: r["New"] for r in mod.get("Replace") or []}
    assert len(replaced) >= 30, "k8s.io/kubernetes has ~31 staging modules; each needs a replace"
    for path, new in replaced.items():
        assert new == {"Path": path, "Version": staging_version}, f"{path} => {new}, expected {staging_version}"
    unpinned = [p for p, v in requires(comp["wrapper"]).items()
                if p.startswith("k8s.io/") and v.startswith("v0.35.") and p not in replaced]
    assert not unpinned, f"staging modules required without a replace: {unpinned}"


def test_control_plane_is_the_stacks_kubernetes_minor():
    minor = ".".join(BY_NAME["kube-apiserver"]["version"].lstrip("v").split(".")[:2])
    for name in ("kube-scheduler", "kube-controller-manager"):
        assert BY_NAME[name]["version"] == BY_NAME["kube-apiserver"]["version"]
    for stack in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(stack.read_text())["config"]
        assert str(config["gpu-platform:kubernetesVersion"]) == minor, (
            f"{stack.name} runs Kubernetes {config['gpu-platform:kubernetesVersion']}, the lock builds {minor}")


def test_etcd_is_the_minor_kubernetes_is_built_against():
    etcd_client = requires("kubernetes")["go.etcd.io/etcd/client/v3"]
    assert BY_NAME["etcd"]["version"].split(".")[:2] == etcd_client.split(".")[:2]


@pytest.mark.parametrize("comp", [c for c in COMPONENTS if "chart" in c], ids=lambda c: c["name"])
def test_lock_matches_the_chart_the_program_installs(comp):
    chart = comp["chart"]
    archive = chart["archive"]
    if "release" in chart:
        archive = archive.format(chart_version=versions.ALL_CHARTS[chart["release"]].version)
    value = str(dotted(chart_file(archive, chart["file"]), chart["key"]))
    assert chart.get("prefix", "") + value == comp["version"], (
        f"{archive} {chart['file']} {chart['key']} is {value}; rehearsal/components.lock.toml "
        f"builds {comp['name']} {comp['version']}")


def test_every_cilium_chart_the_linode_stack_may_pick_has_its_crds_program():
    """Cilium's CRDs come from cilium-operator's own code at the chart's version (no chart renders them):
    one program, rehearsal/go/cilium-crds/main.go, built per pinned Cilium chart by a wrapper that pins the
    version (go.mod) and holds a byte-identical copy of it: a Go module compiles only files in its own folder,
    and the repository tracks no symbolic links (tests/test_ci.py)."""
    from gpu_platform.data.linode_versions import CNI_CHARTS

    crds = {c["version"]: c for c in COMPONENTS if c["module"] == "github.com/cilium/cilium"}
    assert set(crds) == {f"v{chart.version}" for chart in CNI_CHARTS["cilium"]}
    for version, comp in crds.items():
        assert comp["name"] == f"cilium-crds-{version.lstrip('v')}"
    shared = ROOT / "rehearsal" / "go" / "cilium-crds" / "main.go"
    for comp in crds.values():
        folder = ROOT / "rehearsal" / "go" / comp["wrapper"]
        wrapper_copy = folder / "main.go"
        assert wrapper_copy.read_bytes() == shared.read_bytes(), f"{wrapper_copy} differs from {shared}: edit that one, then `cp` it here"
        assert [p.name for p in folder.glob("*.go")] == ["main.go"], f"{folder}: Go sources of its own"


def test_kueue_skew_binaries_are_the_trainer_kueue_is_built_against():
    assert requires("kueue")["github.com/kubeflow/trainer/v2"] == BY_NAME["trainer-manager-2.2.1"]["version"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(build, "go_env", lambda: {"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64"})
    built: list[str] = []

    def fake_build(comp, env, bin_dir, jobs):
        built.append(comp["name"])
        for name in [comp["name"], *build.installed_files(comp)]:  # the binary and what the lock installs beside it
            (bin_dir / name).write_text("binary")

    monkeypatch.setattr(build, "build", fake_build)
    fetched: list[str] = []
    monkeypatch.setattr(build, "fetch_source", lambda comp, env: fetched.append(comp["name"]))
    return tmp_path, built, fetched


DEFAULT_BUILD = [c["name"] for c in COMPONENTS if not c.get("on_demand")]


def _rehearsed_binaries() -> set[str]:
    """What the shipped stacks' rehearsals start: the control plane, the platform's controllers, the Pulumi engine
    (the engine tests deploy each stack's platform layer) and, for a Linode stack on Cilium, the CRD program of the
    Cilium chart its Kubernetes minor picks."""
    from gpu_platform.data.linode_versions import cni_chart
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.runner import load_stack
    from gpu_platform.rehearsal import binaries

    needed = set(binaries.CONTROL_PLANE) | set(binaries.CONTROLLERS) | set(binaries.ENGINE)  # engine: every stack's layer
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        cfg = parse_config(load_stack(stack).raw, stack)
        linode = getattr(cfg, "linode", None)
        if linode is not None and linode.cni == "cilium":
            needed.add(f"cilium-crds-{cni_chart('cilium', cfg.kubernetes_version).version}")
        if linode is not None and any(p.min_nodes < p.max_nodes for p in cfg.gpu_pools):
            needed.add("cluster-autoscaler-externalgrpc")  # the linode-autoscaling drill's autoscaler
        aws = getattr(cfg, "aws", None)
        if aws is not None and any(p.min_nodes < p.max_nodes for p in cfg.gpu_pools):
            needed.add("cluster-autoscaler-aws")  # the eks-autoscaling drill's autoscaler
    return needed


def test_make_rehearsal_build_builds_exactly_what_the_shipped_stacks_rehearse():
    """Every cold build is minutes on 2 cores: what no shipped stack's rehearsal starts is `on_demand`
    (with the reason), and nothing a shipped stack needs is."""
    assert set(DEFAULT_BUILD) == _rehearsed_binaries()
    for comp in COMPONENTS:
        if comp.get("on_demand"):
            assert isinstance(comp["on_demand"], str) and len(comp["on_demand"]) > 20, comp["name"]


def test_second_build_with_an_unchanged_lock_builds_nothing(cache):
    root, built, fetched = cache
    assert build.main([]) == 0
    assert built == DEFAULT_BUILD
    # what is not built is still fetched (module only): tests read pinned upstream files from the module cache
    assert fetched == [c["name"] for c in COMPONENTS if c.get("on_demand")]
    built.clear()
    assert build.main([]) == 0
    assert built == []
    listed = json.loads((root / "bin" / "VERSIONS.json").read_text())
    assert listed["kueue-manager"] == {"module": "sigs.k8s.io/kueue", "version": BY_NAME["kueue-manager"]["version"],
                                       "package": "sigs.k8s.io/kueue/cmd/kueue"}
    assert set(listed) == set(DEFAULT_BUILD)


def test_an_on_demand_component_builds_when_named_or_with_all(cache):
    root, built, fetched = cache
    on_demand = [c["name"] for c in COMPONENTS if c.get("on_demand")]
    assert on_demand, "the lock marks nothing on_demand"
    assert build.main([on_demand[0]]) == 0
    assert built == [on_demand[0]]
    built.clear()
    assert build.main(["--all"]) == 0
    assert sorted(built) == sorted(set(BY_NAME) - {on_demand[0]})
    assert set(json.loads((root / "bin" / "VERSIONS.json").read_text())) == set(BY_NAME)


def test_a_moved_pin_rebuilds_only_its_component(cache, monkeypatch):
    root, built, fetched = cache
    assert build.main([]) == 0
    built.clear()
    moved = [dict(c, version="v0.19.3") if c["name"] == "kueue-manager" else c for c in COMPONENTS]
    monkeypatch.setattr(build, "load_lock", lambda: moved)
    assert build.main([]) == 0
    assert built == ["kueue-manager"]
    assert json.loads((root / "bin" / "VERSIONS.json").read_text())["kueue-manager"]["version"] == "v0.19.3"


def test_the_key_covers_the_wrappers_go_sum_and_the_go_version(tmp_path, monkeypatch):
    comp = BY_NAME["jobset-manager"]
    env = {"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64"}
    key = build.build_key(comp, env)
    assert build.build_key(comp, dict(env, GOVERSION="go1.27.3")) != key
    assert build.build_key(dict(comp, ldflags_x={}), env) != key
    assert build.build_key(dict(comp, pin="reworded"), env) == key  # documentation only: no rebuild
    wrapper = tmp_path / comp["wrapper"]
    wrapper.mkdir()
    for name in ("go.mod", "go.sum"):
        (wrapper / name).write_bytes((build.WRAPPERS / comp["wrapper"] / name).read_bytes())
    monkeypatch.setattr(build, "WRAPPERS", tmp_path)
    assert build.build_key(comp, env) == key
    with (wrapper / "go.sum").open("a") as f:
        f.write("example.com/x v1.0.0 h1:AAAA=\n")
    assert build.build_key(comp, env) != key


def test_lock_errors_name_the_file_and_the_component(tmp_path):
    bad = tmp_path / "components.lock.toml"
    bad.write_text('[[component]]\nname = "etcd"\nmodule = "go.etcd.io/etcd/server/v3"\n')
    with pytest.raises(build.BuildError, match=r"components.lock.toml: component #1 \(etcd\) lacks version"):
        build.load_lock(bad)
    bad.write_text("[[component]\n")
    with pytest.raises(build.BuildError, match=re.escape(str(bad))):
        build.load_lock(bad)


def test_a_second_build_waits_for_the_one_running(cache):
    import fcntl
    import threading

    root, built, fetched = cache
    holder = (root / ".build.lock").open("a+")
    fcntl.flock(holder, fcntl.LOCK_EX)  # the "first" build
    second = threading.Thread(target=build.main, args=([],))
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive() and built == []
    fcntl.flock(holder, fcntl.LOCK_UN)
    second.join(timeout=10)
    assert not second.is_alive() and built == DEFAULT_BUILD


def test_naming_components_builds_only_those_and_a_failed_source_fetch_only_warns(cache, monkeypatch, capsys):
    """Adversarial review: an on_demand module that could not be fetched (offline, empty module cache) failed
    `make rehearsal-build`, and so `make test`, though nothing the rehearsal runs was missing."""
    root, built, fetched = cache
    assert build.main(["kueue-manager"]) == 0
    assert built == ["kueue-manager"] and fetched == []

    def offline(comp, env):
        raise build.BuildError(f"{comp['name']}: go mod download: no network")

    monkeypatch.setattr(build, "fetch_source", offline)
    assert build.main([]) == 0
    assert "warning" in capsys.readouterr().err


# --- components built from a pinned source tarball (cluster-autoscaler: the proxy refuses its module) -------


def test_the_autoscaler_is_built_from_the_tarball_of_the_image_the_program_runs():
    """The lock builds the cluster-autoscaler the program deploys on the stacks' minor (the image tag of
    aws_versions, used on EKS and by the Linode stacks' externalgrpc autoscaler), from that tag's tarball."""
    from gpu_platform.data import aws_versions

    comp = BY_NAME["cluster-autoscaler-externalgrpc"]
    minors = {str(yaml.safe_load(p.read_text())["config"]["gpu-platform:kubernetesVersion"])
              for p in (ROOT / "stacks").glob("Pulumi.*.yaml")}
    assert {aws_versions.cluster_autoscaler_image_tag(m) for m in minors} == {comp["version"]}
    assert comp["source"] == f"cluster-autoscaler/cluster-autoscaler-{comp['version'].lstrip('v')}.tar.gz"
    assert comp["tags"] == ["externalgrpc"] and comp["package"] == comp["module"]


def _sources_or_skip():
    if not build.sources_dir().is_dir():
        pytest.skip(f"no shared sources folder ({build.sources_dir()}, ${build.SOURCES_ENV})")
    return build.sources_dir()


# The Pulumi language host's tarball has its own test (tests/test_rehearsal_engine.py).
@pytest.mark.parametrize("comp", [c for c in SOURCES if c["module"] == "k8s.io/autoscaler/cluster-autoscaler"],
                         ids=lambda c: c["name"])
def test_the_shared_tarball_is_the_pinned_one_and_says_its_version(comp):
    _sources_or_skip()
    archive = build.verified_archive(comp)  # raises, naming the file, on a hash mismatch
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        root = next(n.rsplit("/", 1)[0] for n in sorted(names, key=len) if n.endswith("/go.mod"))
        gomod = tar.extractfile(f"{root}/go.mod").read().decode()
        assert gomod.splitlines()[0] == f"module {comp['module']}"
        go = re.search(r"(?m)^go (\d+)\.(\d+)", gomod)
        assert (int(go[1]), int(go[2])) <= (1, 26), "the project's Go is 1.26"
        version = tar.extractfile(f"{root}/version/version.go").read().decode()
        assert f'ClusterAutoscalerVersion = "{comp["version"].lstrip("v")}"' in version
        for tag in comp["tags"]:
            assert f"{root}/cloudprovider/builder/builder_{tag}.go" in names, f"no cloud provider builds with -tags {tag}"


def _tarball(path: Path, files: dict[str, str], top: str = "cluster-autoscaler-9.9.9") -> str:
    """A git-archive-like tarball (one top folder) of `files`; returns its sha256."""
    import hashlib
    import io

    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


# A tiny module shaped like cluster-autoscaler: the provider is chosen by a build tag, as in
# cloudprovider/builder/builder_<tag>.go. No dependencies, so it builds with the proxy switched off.
TAGGED = {
    "go.mod": "module k8s.io/autoscaler/cluster-autoscaler\n\ngo 1.22\n",
    "main.go": 'package main\n\nimport "fmt"\n\nvar provider = "none"\n\nfunc main() { fmt.Print(provider) }\n',
    "builder_externalgrpc.go": '//go:build externalgrpc\n\npackage main\n\nfunc init() { provider = "externalgrpc" }\n',
    "builder_aws.go": '//go:build aws\n\npackage main\n\nfunc init() { provider = "aws" }\n',
}


@pytest.fixture
def source_comp(tmp_path, monkeypatch):
    sources = tmp_path / "sources"
    (sources / "ca").mkdir(parents=True)
    sha = _tarball(sources / "ca" / "ca-9.9.9.tar.gz", TAGGED)
    monkeypatch.setenv(build.SOURCES_ENV, str(sources))
    monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "cache"))
    comp = {"name": "ca-externalgrpc", "module": "k8s.io/autoscaler/cluster-autoscaler", "version": "v9.9.9",
            "package": "k8s.io/autoscaler/cluster-autoscaler", "source": "ca/ca-9.9.9.tar.gz", "sha256": sha,
            "tags": ["externalgrpc"], "pin": "test", "ldflags_x": {}}
    return comp, sources / "ca" / "ca-9.9.9.tar.gz"


@pytest.mark.gobuild
def test_a_source_component_builds_from_its_tarball_with_its_tags_and_downloads_nothing(source_comp, tmp_path, monkeypatch):
    """A real `go build` of the tarball with the module proxy switched off (GOPROXY=off; GOFLAGS=-mod=mod,
    which would let go edit go.mod, is overridden by the command's -mod=readonly): the binary runs the
    tagged provider, and the unpacked source is gone afterwards."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH")
    comp, _ = source_comp
    monkeypatch.setenv("GOPROXY", "off")
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    monkeypatch.setattr(build, "module_info", lambda *a: pytest.fail("a source component asked the proxy for its module"))
    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    (root / "keys").mkdir()
    env = build.go_env()
    assert build.build_all([comp], env, root, set(), jobs=1) == 0
    binary = root / "bin" / "ca-externalgrpc"
    assert subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout == "externalgrpc"
    assert sorted(p.name for p in root.iterdir()) == ["bin", "build-times.json", "keys"], "the unpacked source was removed"
    listed = json.loads((root / "bin" / "VERSIONS.json").read_text())["ca-externalgrpc"]
    assert listed["sha256"] == comp["sha256"] and listed["tags"] == ["externalgrpc"]
    aws = dict(comp, name="ca-aws", tags=["aws"])
    assert build.build_all([comp, aws], env, root, set(), jobs=1) == 0
    assert subprocess.run([str(root / "bin" / "ca-aws")], capture_output=True, text=True).stdout == "aws"


def test_a_tarball_that_is_not_the_pinned_one_is_refused_naming_the_file(source_comp, tmp_path, monkeypatch, capsys):
    comp, archive = source_comp
    ran: list = []
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: ran.append(a) or pytest.fail(f"ran {a}"))
    _tarball(archive, {**TAGGED, "main.go": TAGGED["main.go"] + "// changed\n"})
    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    (root / "keys").mkdir()
    env = {"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64"}
    assert build.build_all([comp], env, root, set(), jobs=1) == 1
    err = capsys.readouterr().err
    assert str(archive) in err and comp["sha256"] in err and "refusing" in err and "FAILED: ca-externalgrpc" in err
    assert ran == [] and not (root / "bin" / "ca-externalgrpc").exists()
    archive.unlink()
    with pytest.raises(build.BuildError, match=re.escape(str(archive)) + " does not exist"):
        build.verified_archive(comp)


def test_a_tarball_reaching_out_of_its_folder_is_refused(source_comp, tmp_path):
    comp, archive = source_comp
    evil = tmp_path / "evil.tar.gz"
    _tarball(evil, {**TAGGED, "../../outside.txt": "x"})
    with pytest.raises(build.BuildError, match=re.escape(str(evil)) + ": cannot unpack"):
        build.unpack(evil, tmp_path / "dest", comp["module"])
    assert not (tmp_path / "outside.txt").exists()


def test_the_key_of_a_source_component_covers_the_tarball_hash_and_the_tags(source_comp):
    comp, _ = source_comp
    env = {"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64"}
    key = build.build_key(comp, env)
    assert build.build_key(dict(comp, sha256="0" * 64), env) != key
    assert build.build_key(dict(comp, tags=["aws"]), env) != key
    assert build.build_key(dict(comp, source="ca/other.tar.gz"), env) != key
    assert build.build_key(comp, dict(env, GOVERSION="go1.27.0")) != key
    assert build.build_key(dict(comp, pin="reworded", commit="abc"), env) == key  # documentation only


def refused(module, lock, text: str, match: str) -> None:
    """The lock file `text`, written to `lock`, is refused by `module`'s load_lock (rehearsal/build.py, as the
    test module loaded it) with a message matching `match`."""
    lock.write_text(text)
    with pytest.raises(module.BuildError, match=match):
        module.load_lock(lock)


def test_source_lock_errors_name_the_file_and_the_component(tmp_path):
    lock = tmp_path / "components.lock.toml"
    head = '[[component]]\nname = "ca"\nmodule = "k8s.io/autoscaler/cluster-autoscaler"\nversion = "v1.35.2"\n' \
           'package = "k8s.io/autoscaler/cluster-autoscaler"\npin = "x"\nldflags_x = {}\n'
    refused(build, lock, head + 'source = "ca.tar.gz"\ntags = ["externalgrpc"]\n', r"components.lock.toml: component #1 \(ca\): a `source` component also needs sha256")
    refused(build, lock, head + 'source = "ca.tar.gz"\nsha256 = "abc"\ntags = ["externalgrpc"]\n', r"\(ca\): sha256 must be 64 lowercase hex")
    refused(build, lock, head + f'source = "../ca.tar.gz"\nsha256 = "{"a" * 64}"\ntags = ["externalgrpc"]\n', r"inside the shared sources folder")
    refused(build, lock, head + f'source = "ca.tar.gz"\nsha256 = "{"a" * 64}"\ntags = ["external grpc"]\n', r"tags must be a list of Go build tags")
    refused(build, lock, head + f'source = "ca.tar.gz"\nsha256 = "{"a" * 64}"\ntags = []\nwrapper = "etcd"\n', r"exactly one of `wrapper`")


@pytest.mark.parametrize("env", [
    {},
    {"XDG_CACHE_HOME": "/xdg/cache"},
    {"XDG_CACHE_HOME": ""},
    {"XDG_CACHE_HOME": "/xdg/cache", "GPU_PLATFORM_REHEARSAL_CACHE": "/named/by/the/variable"},
], ids=["home", "xdg", "empty xdg", "variable over xdg"])
def test_the_build_puts_the_binaries_where_the_rehearsal_looks_for_them(monkeypatch, env):
    """build.py wrote to ~/.cache whatever $XDG_CACHE_HOME said, while the rehearsal looked under $XDG_CACHE_HOME: a run
    with it set built every component and then skipped or failed every rehearsal test ("binary not built")."""
    from gpu_platform.rehearsal import binaries

    for var in ("XDG_CACHE_HOME", "GPU_PLATFORM_REHEARSAL_CACHE"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("HOME", "/home/someone")
    assert build.cache_dir() == binaries.cache_dir()
    assert str(build.cache_dir()).startswith(env.get("GPU_PLATFORM_REHEARSAL_CACHE") or env.get("XDG_CACHE_HOME")
                                             or "/home/someone/.cache")
