"""The GPU node's NVIDIA step executed, not just linted: in a throwaway root with the real dpkg,
dpkg-query and apt-mark (tests/boot_harness.py says what is real and what is a stand-in), under the
script's own `set -euo pipefail`, for each path a Linode GPU node can take on first boot."""

from __future__ import annotations

import pytest

from gpu_platform.components.linode import render
from gpu_platform.data import linode_versions as versions
from tests.boot_harness import KERNEL, BootRoot, archive_stubs, namespaces_work

needs_namespaces = pytest.mark.skipif(not namespaces_work(), reason="needs unshare --user --mount and dpkg (Debian util-linux, dpkg)")

BRANCH = versions.NVIDIA_DRIVER_BRANCH
TOOLKIT = versions.NVIDIA_CONTAINER_TOOLKIT
PRECOMPILED = f"linux-modules-nvidia-{BRANCH}-server-{KERNEL}"
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1")


def _root(tmp_path, **archive) -> BootRoot:
    return BootRoot(tmp_path, archive_stubs(BRANCH, TOOLKIT, **archive))


def _assert_gpu_node_ready(root: BootRoot, proc) -> dict[str, str]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    pkgs = root.packages()
    # Driver, toolkit, the kernel and its metapackages are installed and held (no apt upgrade moves them).
    for name in (f"nvidia-headless-no-dkms-{BRANCH}-server", f"nvidia-utils-{BRANCH}-server", *TOOLKIT_PACKAGES,
                 f"linux-image-{KERNEL}", "linux-image-generic", "linux-generic"):
        assert pkgs.get(name) == "hi", (name, pkgs)
    log = root.log()
    assert "nvidia-ctk runtime configure --runtime=containerd --set-as-default" in log
    assert "systemctl restart containerd" in log
    assert log.index("nvidia-ctk runtime configure --runtime=containerd --set-as-default") < log.index("systemctl restart containerd")
    assert 'default_runtime_name = "nvidia"' in root.file("/etc/containerd/config.toml")
    assert "signed-by=/etc/apt/keyrings/nvidia-container-toolkit.gpg" in root.file("/etc/apt/sources.list.d/nvidia-container-toolkit.list")
    assert log[-1] == "nvidia-smi -L"
    return pkgs


@needs_namespaces
def test_precompiled_module_path_installs_holds_and_configures_containerd(tmp_path):
    root = _root(tmp_path)
    pkgs = _assert_gpu_node_ready(root, root.run(render.install_nvidia_script()))
    assert pkgs[PRECOMPILED] == "hi"
    # No compiler path: no headers, no DKMS.
    assert f"linux-headers-{KERNEL}" not in pkgs and f"nvidia-dkms-{BRANCH}-server" not in pkgs


@needs_namespaces
def test_dkms_fallback_builds_against_this_kernels_headers_and_finishes(tmp_path):
    root = _root(tmp_path, precompiled=False)
    proc = root.run(render.install_nvidia_script())
    pkgs = _assert_gpu_node_ready(root, proc)
    assert "building with DKMS" in proc.stderr
    assert pkgs[f"nvidia-dkms-{BRANCH}-server"] == "hi" and pkgs[f"linux-headers-{KERNEL}"] == "hi"
    assert PRECOMPILED not in pkgs
    assert root.file(f"/lib/modules/{KERNEL}/updates/dkms/nvidia.ko")


@needs_namespaces
def test_a_rerun_after_a_failed_attempt_finishes_like_a_first_run(tmp_path):
    root = _root(tmp_path)
    (root.root / "run" / "fail-curl").touch()  # the toolkit repository is unreachable on the first try
    first = root.run(render.install_nvidia_script())
    assert first.returncode != 0
    assert not any(line.startswith("nvidia-ctk") for line in root.log())
    second = root.run(render.install_nvidia_script())  # what the bootstrap unit's Restart=on-failure does
    pkgs = _assert_gpu_node_ready(root, second)
    assert pkgs[PRECOMPILED] == "hi"


@needs_namespaces
def test_a_package_missing_from_the_archive_stops_before_containerd_is_touched(tmp_path):
    root = _root(tmp_path, missing=(f"nvidia-utils-{BRANCH}-server",))
    proc = root.run(render.install_nvidia_script())
    assert proc.returncode != 0 and f"Unable to locate package nvidia-utils-{BRANCH}-server" in proc.stderr
    log = root.log()
    assert not any(line.startswith(("nvidia-ctk", "systemctl restart")) for line in log)
    assert not any(state == "hi" for state in root.packages().values())


VERSION_JSON = """{
  "major": "1",
  "minor": "35",
  "emulationMajor": "1",
  "emulationMinor": "35",
  "gitVersion": "v1.35.8",
  "gitCommit": "0000000000000000000000000000000000000000",
  "platform": "linux/amd64"
}
"""


@pytest.mark.parametrize("answer, code, expect", [
    (VERSION_JSON, 0, "minor=1.35 pkg=1.35.8-1.1"),
    ("", 7, "did not answer"),  # API not up yet: exit non-zero, the bootstrap unit retries
    ('{"gitVersion": "v1.35.8; rm -rf /"}', 0, "did not answer"),  # only a plain version is trusted
])
def test_a_worker_installs_the_version_the_api_server_reports(tmp_path, answer, code, expect):
    """The worker's version discovery, executed under the install script's own shell options with a
    stand-in curl answering as the API server's GET /version does."""
    import subprocess

    (tmp_path / "curl").write_text(f"#!/bin/sh\ncat <<'JSON'\n{answer}JSON\nexit {code}\n")
    (tmp_path / "curl").chmod(0o755)
    script = ("set -euo pipefail\n" + render._discover_version("10.0.0.10:6443")
              + 'echo "minor=$minor pkg=$pkg"\n')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    if expect.startswith("minor="):
        assert proc.returncode == 0 and proc.stdout.strip() == expect, proc.stderr
    else:
        assert proc.returncode != 0 and "minor=" not in proc.stdout


# --- monthly certificate renewal ------------------------------------------------------------------

CRICTL = r"""#!/bin/bash
# stand-in: one ready sandbox per static pod in /run/pods/<component>; stopp makes the kubelet's next
# sandbox appear; STOPP_FAILS=<component> makes stopp of that component die (the run is killed).
echo "crictl $*" >> /var/log/standins.log
args=("$@"); set -- "${args[@]:2}"   # drop --runtime-endpoint URL
case "$1" in
  pods) comp=${3#component=}; cat "/run/pods/$comp" ;;
  stopp)
    for f in /run/pods/*; do
      if [ "$(cat "$f")" = "$2" ]; then
        [ "${STOPP_FAILS:-}" = "$(basename "$f")" ] && exit 137
        echo "$2-restarted" > "$f"
      fi
    done ;;
esac
"""
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _control_plane_root(tmp_path) -> BootRoot:
    root = BootRoot(tmp_path, [], image=[])
    for name, text in (("crictl", CRICTL), ("kubeadm", '#!/bin/sh\necho "kubeadm $*" >> /var/log/standins.log\n'),
                       ("sleep", "#!/bin/sh\n")):
        (root.root / "standins" / name).write_text(text)
        (root.root / "standins" / name).chmod(0o755)
    (root.root / "etc/kubernetes/manifests").mkdir(parents=True)
    (root.root / "run/pods").mkdir()
    (root.root / "var/lib/gpu-platform").mkdir(parents=True)
    (root.root / "var/lib/gpu-platform/joined").touch()
    for c in COMPONENTS:
        (root.root / f"etc/kubernetes/manifests/{c}.yaml").write_text(f"kind: Pod # {c}\n")
        (root.root / f"run/pods/{c}").write_text(f"{c}-1\n")
    return root


def _manifests(root: BootRoot) -> list[str]:
    return sorted(p.name for p in (root.root / "etc/kubernetes/manifests").iterdir())


@needs_namespaces
def test_cert_renewal_restarts_each_static_pod_without_moving_its_manifest(tmp_path):
    root = _control_plane_root(tmp_path)
    proc = root.run(render.renew_certs_script())
    assert proc.returncode == 0, proc.stderr
    log = root.log()
    assert log[0] == "kubeadm certs renew all" and log[-1] == "kubeadm certs check-expiration"
    stops = [line.split()[-1] for line in log if " stopp " in line]
    assert stops == [f"{c}-1" for c in COMPONENTS]  # one at a time, in order
    assert _manifests(root) == [f"{c}.yaml" for c in COMPONENTS]


@needs_namespaces
def test_an_interrupted_cert_renewal_leaves_every_manifest_in_place(tmp_path):
    root = _control_plane_root(tmp_path)
    proc = root.run(render.renew_certs_script(), env={"STOPP_FAILS": "kube-apiserver"})
    assert proc.returncode != 0
    assert _manifests(root) == [f"{c}.yaml" for c in COMPONENTS]  # nothing stranded
    # A manifest an older version of the script left aside is put back on the next run.
    (root.root / "etc/kubernetes/manifests/kube-scheduler.yaml").rename(root.root / "etc/kubernetes/kube-scheduler.yaml.renewing")
    assert root.run(render.renew_certs_script()).returncode == 0
    assert _manifests(root) == [f"{c}.yaml" for c in COMPONENTS]


# --- a control plane's bootstrap, executed: it installs the release the cluster runs ----------------------

from pathlib import Path  # noqa: E402
import shutil  # noqa: E402

import yaml  # noqa: E402

from tests.boot_harness import INSTALL_PACKAGES, IMAGE_PACKAGES, Stub, kubernetes_stubs  # noqa: E402

REV = versions.KUBERNETES_DEB_REVISION


def _bootstrap_root(tmp_path: Path, doc: dict, releases: list[str]) -> BootRoot:
    """A throwaway root holding the node's write_files, with pkgs.k8s.io offering `releases`."""
    stubs = kubernetes_stubs(*[f"{r}-{REV}" for r in releases]) + [Stub(n) for n in INSTALL_PACKAGES]
    root = BootRoot(tmp_path, stubs, IMAGE_PACKAGES)
    for f in doc["write_files"]:
        # /usr/local of the root is its local/ folder, bind-mounted over the read-only /usr.
        rel = f["path"].lstrip("/")
        path = root.root / ("local/" + rel.removeprefix("usr/local/") if rel.startswith("usr/local/") else rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f["content"])
        path.chmod(int(f["permissions"], 8))
    shutil.copytree("/etc/ssl", root.root / "etc" / "ssl", symlinks=True, dirs_exist_ok=True)  # openssl's config
    for d in ("modules-load.d", "sysctl.d"):  # an Ubuntu image has them
        (root.root / "etc" / d).mkdir(exist_ok=True)
    (root.root / "etc" / "fstab").write_text("/dev/sda / ext4 defaults 0 1\n/dev/sdb none swap sw 0 0\n")
    return root


def _bootstrap(doc: dict) -> str:
    return next(f["content"] for f in doc["write_files"] if f["path"] == render.BOOTSTRAP_SCRIPT_PATH)


def _plan_doc(stack: str, label: str, minor: str | None = None) -> dict:
    from gpu_platform.components.linode.render import decode_user_data
    from tests.conftest import plan_config, stack_config

    cfg = stack_config(stack)
    if minor:
        cfg["gpu-platform:kubernetesVersion"] = minor
        cfg["gpu-platform:linode"]["controlPlaneVersion"] = minor
    plan = plan_config(cfg, stack)
    inst = next(r for r in plan.by_type("linode:index/instance:Instance") if r.plain_inputs["label"] == label)
    return yaml.safe_load(decode_user_data(inst.plain_inputs["metadatas"][0]["userData"]))


def _serve_cluster_info(root: BootRoot, docs: dict) -> None:
    """What the peers' API servers answer for kube-public/cluster-info (the harness's curl serves /run/api)."""
    import base64
    import json

    from gpu_platform.components.linode import cluster_info

    files = {f["path"]: f["content"] for f in docs["gpu-staging-cp-0"]["write_files"]}
    token = yaml.safe_load(files[render.KUBEADM_JOIN_CONFIG_PATH].split("---\n")[0])["discovery"]["bootstrapToken"]["token"]
    ca = next(f["content"] for f in docs["gpu-staging-cp-2"]["write_files"] if f["path"] == render.CLUSTER_CA_PATH)
    kubeconfig = f"clusters:\n- cluster:\n    certificate-authority-data: {base64.b64encode(ca.encode()).decode()}\n"
    token_id, _, secret = token.partition(".")
    body = {"data": {"kubeconfig": kubeconfig,
                     f"jws-kubeconfig-{token_id}": cluster_info.detached_signature(kubeconfig, token_id, secret)}}
    target = root.root / "run/api/api/v1/namespaces/kube-public/configmaps/cluster-info"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(body))


@pytest.fixture(scope="module")
def ha_docs() -> dict[str, dict]:
    """linode-ha's control planes as first written at 1.35 (user data is kept: ignore_changes)."""
    return {label: _plan_doc("linode-ha", label, "1.35") for label in ("gpu-staging-cp-0", "gpu-staging-cp-2")}


@needs_namespaces
@pytest.mark.parametrize("label", ["gpu-staging-cp-2", "gpu-staging-cp-0"])
def test_a_replaced_control_plane_joins_at_the_release_the_cluster_runs(tmp_path, ha_docs, label):
    """The cluster moved to 1.36 (node-upgrade Jobs) after these nodes' user data was written at 1.35. A
    replacement boots with the old document: it must install and join with what the cluster runs, as a
    worker does; a kubeadm 1.35 join into a 1.36 control plane is a skipped upgrade (and etcd pulled at the
    old release). Executed in the throwaway root: real dpkg and openssl, stand-ins for the API server's
    /version, kubeadm, ctr."""
    old, new = versions.KUBERNETES_PATCH["1.35"], versions.KUBERNETES_PATCH["1.36"]
    root = _bootstrap_root(tmp_path, ha_docs[label], [old, new])
    (root.root / "run" / "apiserver-version").write_text(f"v{new}\n")
    if label.endswith("-cp-0"):
        # cp-0's user data predates the CA: the peers' cluster-info, signed for cp-0's own token, gives it.
        _serve_cluster_info(root, ha_docs)
    proc = root.run(_bootstrap(ha_docs[label]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed = root.versions()
    assert {installed[p] for p in ("kubeadm", "kubelet", "kubectl")} == {f"{new}-{REV}"}, installed
    assert root.packages()["kubeadm"] == "hi"  # held: only the upgrade Jobs move it
    log = root.log()
    joins = [line for line in log if " join --config " in line]
    assert joins and joins[0].startswith(f"kubeadm@{new}-{REV} join"), log
    assert not [line for line in log if " init " in line], "a replaced control plane must not initialise a cluster"
    assert f"kubeadm@{new}-{REV} config images list --kubernetes-version v{new}" in log  # etcd of the cluster's release
    assert f"/v{new.rsplit('.', 1)[0]}/deb/" in root.file("/etc/apt/sources.list.d/kubernetes.list")
    assert (root.root / render.JOINED_MARKER.lstrip("/")).exists()


@needs_namespaces
def test_a_first_cp0_finds_no_peer_and_initialises_the_pinned_release(tmp_path, monkeypatch):
    """A new cluster: nobody answers /version (the single control plane of linode-dev has no peers), so cp-0
    installs the pinned release and runs kubeadm init."""
    doc = _plan_doc("linode-dev", "gpu-dev-cp-0")
    pinned = versions.KUBERNETES_PATCH["1.35"]
    root = _bootstrap_root(tmp_path, doc, [pinned, versions.KUBERNETES_PATCH["1.36"]])
    proc = root.run(_bootstrap(doc))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert root.versions()["kubeadm"] == f"{pinned}-{REV}"
    log = root.log()
    assert any(line.startswith(f"kubeadm@{pinned}-{REV} init --config") for line in log), log
    assert not [line for line in log if " join " in line]


@needs_namespaces
def test_a_joining_control_plane_waits_while_no_peer_answers(tmp_path, ha_docs):
    root = _bootstrap_root(tmp_path, ha_docs["gpu-staging-cp-2"], [versions.KUBERNETES_PATCH["1.35"]])
    proc = root.run(_bootstrap(ha_docs["gpu-staging-cp-2"]))
    assert proc.returncode == 1 and "retrying later" in proc.stderr
    assert "kubeadm" not in root.versions()  # nothing installed at a guessed release
