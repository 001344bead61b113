"""The Kubernetes upgrade path on Linode, with no SSH: `pulumi up` runs one privileged Job per node, control
plane first, then each worker in turn, then one Job per autoscaled GPU pool that upgrades the nodes the
node-group provider made (found at run time); the scripts those Jobs run are executed in the throwaway
root (tests/boot_harness.py: real dpkg and apt-mark, recorded stand-ins for kubeadm, kubelet and kubectl)
for the patch path and the minor path; refused version changes name the key; cluster-autoscaler and the
provider's pools.json move only after the control plane."""

from __future__ import annotations

import copy

import pytest

from gpu_platform.components.linode import upgrade
from gpu_platform.data import linode_versions as versions
from gpu_platform.components.linode.upgrade import UpgradeError, check_upgrade
from tests.boot_harness import IMAGE_PACKAGES, BootRoot, kubernetes_stubs, namespaces_work

needs_namespaces = pytest.mark.skipif(not namespaces_work(), reason="needs unshare --user --mount and dpkg (Debian util-linux, dpkg)")

CPS = ["gpu-staging-cp-0", "gpu-staging-cp-1", "gpu-staging-cp-2"]
WORKERS = ["gpu-staging-ada-0", "gpu-staging-ada-1", "gpu-staging-system-0"]
REV = versions.KUBERNETES_DEB_REVISION
PATCH_135 = versions.KUBERNETES_PATCH["1.35"]
PATCH_136 = versions.KUBERNETES_PATCH["1.36"]
# An older 1.35 patch the node runs before a patch upgrade (the pin moved on).
OLDER_135 = "1.35." + str(int(PATCH_135.split(".")[2]) - 1)
ENDPOINT = "10.0.0.10:6443"


@pytest.mark.parametrize("current,target,fragment", [
    ("1.34", "1.36", "skips a minor: upgrade to 1.35 first"),
    ("1.36", "1.35", "cannot downgrade"),
    ("1.36", "1.37", "no pinned kubeadm release for 1.37"),
    ("1.35", "2.0", "skips a minor"),
    ("1.35", "latest", "not a Kubernetes minor"),
])
def test_version_changes_kubeadm_refuses_are_refused(current, target, fragment):
    with pytest.raises(UpgradeError, match=fragment):
        check_upgrade(current, target)


def test_the_same_minor_and_the_next_one_are_allowed():
    check_upgrade("1.35", "1.35")
    check_upgrade("1.35", "1.36")


def test_a_minor_the_calendar_no_longer_allows_is_refused():
    with pytest.raises(UpgradeError, match="not allowed on Linode today"):
        check_upgrade("1.33", "1.34", allowed=("1.35", "1.36"))


# --- the Jobs ----------------------------------------------------------------------------------


def _jobs(minor="1.36"):
    return upgrade.upgrade_manifests(CPS, WORKERS, minor, ENDPOINT, "quay.io/cilium/cilium:v1.19.6@sha256:" + "0" * 64)


def test_one_job_per_node_pinned_by_node_name_control_plane_first():
    shared, jobs = _jobs()
    pods = [j["spec"]["template"]["spec"] for j in jobs]
    assert [p["nodeName"] for p in pods] == CPS + WORKERS
    roles = [next(e["value"] for e in p["containers"][0]["env"] if e["name"] == "ROLE") for p in pods]
    assert roles == ["apply", "control-plane", "control-plane", "worker", "worker", "worker"]
    for pod in pods:
        # Runs in the host's namespaces (kubeadm, apt, systemd), on tainted and cordoned nodes alike.
        assert pod["hostPID"] and pod["containers"][0]["securityContext"]["privileged"]
        assert pod["tolerations"] == [{"operator": "Exists"}] and pod["restartPolicy"] == "Never"
        assert "nsenter --target 1 --mount" in pod["containers"][0]["command"][2]
    config_map = next(m for m in shared if m["kind"] == "ConfigMap")
    assert sorted(config_map["data"]) == ["apply.sh", "control-plane.sh", "worker.sh"]
    assert "kubeadm upgrade apply -y" in config_map["data"]["apply.sh"]
    assert "kubeadm upgrade node" in config_map["data"]["worker.sh"]
    # The drain can evict, cordon and read DaemonSets, nothing more.
    role = next(m for m in shared if m["kind"] == "ClusterRole")
    verbs = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert ("pods/eviction", "create") in verbs and not any(v in ("delete", "*") for _, v in verbs)


@pytest.mark.skipif(__import__("shutil").which("shellcheck") is None, reason="needs shellcheck (Debian package shellcheck)")
@pytest.mark.parametrize("role", upgrade.ROLES)
def test_each_roles_script_passes_shellcheck(role, tmp_path):
    import subprocess

    path = tmp_path / f"{role}.sh"
    path.write_text(upgrade.node_upgrade_script(role, PATCH_136, ENDPOINT))
    proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_a_new_release_is_a_new_set_of_jobs_and_the_same_release_is_not():
    _, now = _jobs("1.35")
    _, again = _jobs("1.35")
    _, later = _jobs("1.36")
    assert [j["metadata"]["name"] for j in now] == [j["metadata"]["name"] for j in again]
    assert not {j["metadata"]["name"] for j in now} & {j["metadata"]["name"] for j in later}
    assert now[0]["metadata"]["name"] == f"upgrade-gpu-staging-cp-0-v{PATCH_135.replace('.', '-')}"


def test_the_program_runs_the_jobs_one_after_another_after_the_addons(linode_ha_plan):
    jobs = [r for r in linode_ha_plan.by_type("kubernetes:batch/v1:Job") if "-upgrade-" in r.name]
    by_urn = {r.urn: r for r in linode_ha_plan.resources}
    nodes = [r.inputs["spec"]["template"]["spec"]["nodeName"] for r in jobs]
    assert nodes[:3] == ["gpu-staging-cp-0", "gpu-staging-cp-1", "gpu-staging-cp-2"]
    assert len(nodes) == len(set(nodes)) and any("system" in n for n in nodes)
    for before, after in zip(jobs, jobs[1:]):
        assert before.urn in after.dependencies, (before.name, after.name)
    first_deps = {by_urn[u].type for u in jobs[0].dependencies if u in by_urn}
    assert "kubernetes:helm.sh/v3:Release" in first_deps  # the CNI (and CCM, CSI) move first
    # A failed upgrade is run again by the next `pulumi up` (replaced), not waited on forever.
    assert all(j.inputs["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true" for j in jobs)


@pytest.fixture(scope="module")
def linode_ha_plan():
    from tests.conftest import plan_stack

    return plan_stack("linode-ha")


# --- the scripts, executed -----------------------------------------------------------------------


def _node(tmp_path, running: str, api_server: str, available: tuple[str, ...]) -> BootRoot:
    """A node that runs `running` (packages installed and held, apt pointed at its minor) in a cluster whose
    API server runs `api_server`; the archive offers `available`."""
    root = BootRoot(tmp_path, kubernetes_stubs(*{f"{v}-{REV}" for v in (running, *available)}), IMAGE_PACKAGES)
    minor = ".".join(running.split(".")[:2])
    setup = f"""set -e
apt-get install -y kubeadm={running}-{REV} kubelet={running}-{REV} kubectl={running}-{REV}
apt-mark hold kubeadm kubelet kubectl
mkdir -p /etc/apt/keyrings /etc/kubernetes/pki /var/lib/gpu-platform/upgrade
echo 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v{minor}/deb/ /' > /etc/apt/sources.list.d/kubernetes.list
echo v{api_server} > /run/apiserver-version
echo service-account-token > /var/lib/gpu-platform/upgrade/token
: > /var/log/standins.log
"""
    proc = root.run(setup)
    assert proc.returncode == 0, proc.stderr
    return root


def _run(root: BootRoot, role: str, patch: str, node: str = "gpu-dev-cp-0", **env: str):
    # The wait for the first control plane (30 x 10 s on a node) shortened here.
    return root.run(upgrade.node_upgrade_script(role, patch, ENDPOINT),
                    env={"NODE_NAME": node, "SERVER_WAIT_ATTEMPTS": "2", "SERVER_WAIT_SECONDS": "0", **env})


def _index(log: list[str], fragment: str) -> int:
    return next(i for i, line in enumerate(log) if fragment in line)


def _assert_upgraded(root: BootRoot, proc, patch: str, node: str) -> list[str]:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    pkg = f"{patch}-{REV}"
    installed, states = root.versions(), root.packages()
    for name in ("kubeadm", "kubelet", "kubectl"):
        assert installed[name] == pkg and states[name] == "hi", (name, installed[name], states[name])
    log = root.log()
    # kubeadm first (unhold, exact version, hold); drain before the kubelet changes; uncordon after it restarts.
    order = [f"apt-get install -y -q kubeadm={pkg}", f"drain {node} --ignore-daemonsets",
             f"apt-get install -y -q kubelet={pkg} kubectl={pkg}", "systemctl restart kubelet", f"uncordon {node}",
             f"wait --for=condition=Ready node/{node}"]
    positions = [_index(log, f) for f in order]
    assert positions == sorted(positions), log
    assert "--pod-selector !gpu-platform.io/node-upgrade" in log[_index(log, "drain ")]
    # The service-account token is gone from the host afterwards.
    assert not (root.root / "var/lib/gpu-platform/upgrade/token").exists()
    return log


@needs_namespaces
def test_patch_upgrade_of_the_first_control_plane(tmp_path):
    root = _node(tmp_path, OLDER_135, OLDER_135, (PATCH_135,))
    proc = _run(root, "apply", PATCH_135)
    log = _assert_upgraded(root, proc, PATCH_135, "gpu-dev-cp-0")
    # `upgrade apply` is run by the new kubeadm (an old one refuses a newer target), after `upgrade plan`.
    apply = _index(log, f"upgrade apply -y v{PATCH_135}")
    assert log[apply].startswith(f"kubeadm@{PATCH_135}-{REV} ")
    assert _index(log, f"upgrade plan v{PATCH_135}") < apply < _index(log, "drain ")
    assert root.file("/run/apiserver-version").strip() == f"v{PATCH_135}"
    # Same minor: the apt source stays.
    assert "/v1.35/deb/" in root.file("/etc/apt/sources.list.d/kubernetes.list")


@needs_namespaces
def test_minor_upgrade_of_the_first_control_plane_moves_the_apt_source(tmp_path):
    root = _node(tmp_path, PATCH_135, PATCH_135, (PATCH_136,))
    proc = _run(root, "apply", PATCH_136)
    log = _assert_upgraded(root, proc, PATCH_136, "gpu-dev-cp-0")
    assert log[_index(log, f"upgrade apply -y v{PATCH_136}")].startswith(f"kubeadm@{PATCH_136}-{REV} ")
    assert "/v1.36/deb/" in root.file("/etc/apt/sources.list.d/kubernetes.list")
    assert any("pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key" in line for line in log)
    # Run again (the Job replaced after a later failure): nothing to do, no second drain.
    (root.root / "var/lib/gpu-platform/upgrade/token").write_text("token")
    root.run(": > /var/log/standins.log")
    again = _run(root, "apply", PATCH_136)
    assert again.returncode == 0 and "already runs" in again.stdout
    assert not any("drain" in line or "apt-get install" in line for line in root.log())
    # ... but the node is never left cordoned by the run that failed (Linode review).
    assert any("uncordon gpu-dev-cp-0" in line for line in root.log())


@needs_namespaces
@pytest.mark.parametrize("role", ["control-plane", "worker"])
def test_minor_upgrade_of_a_later_node_runs_kubeadm_upgrade_node(tmp_path, role):
    root = _node(tmp_path, PATCH_135, PATCH_136, (PATCH_136,))
    proc = _run(root, role, PATCH_136, "gpu-dev-ada-0")
    log = _assert_upgraded(root, proc, PATCH_136, "gpu-dev-ada-0")
    assert log[_index(log, "upgrade node")].startswith(f"kubeadm@{PATCH_136}-{REV} ")
    assert not any("upgrade apply" in line for line in log)


@needs_namespaces
def test_a_later_node_goes_on_once_any_api_server_behind_the_balancer_runs_the_target(tmp_path):
    """Linode review: on linode-ha the NodeBalancer spreads the check over three API servers and only cp-0's
    is upgraded before the others' own `kubeadm upgrade node`; one old answer failed the Job half the time.
    The stub answers the old version twice, then the target."""
    root = _node(tmp_path, PATCH_135, PATCH_135, (PATCH_136,))
    root.run(f"printf 'v{PATCH_136}' > /run/apiserver-version.later; echo 2 > /run/apiserver-old-answers")
    proc = _run(root, "control-plane", PATCH_136, "gpu-staging-cp-1", SERVER_WAIT_ATTEMPTS="5")
    _assert_upgraded(root, proc, PATCH_136, "gpu-staging-cp-1")


@needs_namespaces
def test_a_worker_waits_for_its_control_plane(tmp_path):
    root = _node(tmp_path, PATCH_135, PATCH_135, (PATCH_136,))
    proc = _run(root, "worker", PATCH_136, "gpu-dev-ada-0")
    assert proc.returncode != 0 and "the control plane is upgraded first" in proc.stderr
    assert root.versions()["kubelet"] == f"{PATCH_135}-{REV}" and root.packages()["kubelet"] == "hi"


@needs_namespaces
@pytest.mark.parametrize("running,message", [
    ("1.34.11", "skips a minor"),          # 1.34 -> 1.36
    (PATCH_136, "refusing to downgrade"),  # 1.36 -> 1.35
])
def test_the_script_refuses_a_skipped_minor_and_a_downgrade_touching_nothing(tmp_path, running, message):
    target = PATCH_136 if message == "skips a minor" else PATCH_135
    root = _node(tmp_path, running, running, (target,))
    proc = _run(root, "apply", target)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert root.versions()["kubeadm"] == f"{running}-{REV}" and root.packages()["kubeadm"] == "hi"
    assert not any("drain" in line or "apt-get install" in line for line in root.log())


@needs_namespaces
def test_held_packages_are_unheld_first_or_apt_refuses(tmp_path):
    """The stand-in apt-get refuses to change a held package, as apt does: the script's unhold matters."""
    root = _node(tmp_path, PATCH_135, PATCH_135, (PATCH_136,))
    proc = root.run(f"apt-get install -y -q kubeadm={PATCH_136}-{REV}")
    assert proc.returncode == 100 and "Held packages were changed" in proc.stderr


# --- autoscaled pools: nodes the program does not declare -----------------------------------------

POOL = upgrade.AutoscaledPool("ada", 3)
IMAGE = "quay.io/cilium/cilium:v1.19.6@sha256:" + "0" * 64


def _pool_script(patch: str = PATCH_136) -> str:
    return upgrade.pool_upgrade_script(POOL.name, patch, ENDPOINT, upgrade.pool_node_job(POOL.name, patch, IMAGE))


def _pool_cluster(tmp_path, nodes: list[str], api_server: str = PATCH_136, **files: str) -> BootRoot:
    """cp-0 (already upgraded: its kubectl is the target's) where the pool's Job runs, and a cluster whose
    nodes are `<name> <kubelet version> <pool label>` lines."""
    root = _node(tmp_path, PATCH_136, api_server, ())
    lines = "\n".join(nodes) + "\n"
    extra = "".join(f"printf '%s' '{text}' > /run/cluster/{name}\n" for name, text in files.items())
    proc = root.run(f"mkdir -p /run/cluster/jobs && printf '%s' '{lines}' > /run/cluster/nodes && "
                    f"echo v{PATCH_136} > /run/cluster/target\n{extra}")
    assert proc.returncode == 0, proc.stderr
    return root


def _run_pool(root: BootRoot, patch: str = PATCH_136):
    return root.run(_pool_script(patch), env={"NODE_NAME": "gpu-dev-cp-0", "SERVER_WAIT_ATTEMPTS": "2",
                                              "SERVER_WAIT_SECONDS": "0", "NODE_WAIT_SECONDS": "0"})


def _nodes(root: BootRoot) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in root.file("/run/cluster/nodes").splitlines() if line.strip()}


@needs_namespaces
def test_the_pool_job_upgrades_each_autoscaled_node_below_the_target_with_the_workers_job(tmp_path):
    import json

    root = _pool_cluster(tmp_path, [f"gpu-dev-ada-0 v{PATCH_135} ada", f"gpu-dev-ada-1 v{PATCH_136} ada",
                                    f"gpu-dev-ada-2 v{PATCH_135} ada", f"gpu-dev-system-0 v{PATCH_135} -"])
    proc = _run_pool(root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # Only this pool's nodes below the target, one at a time, each with the worker Job pinned to it.
    created = [line for line in root.log() if " create -f " in line]
    assert len(created) == 2
    jobs = {p.name: json.loads(p.read_text()) for p in (root.root / "run/cluster/jobs").glob("*.json")}
    assert sorted(jobs) == [f"upgrade-gpu-dev-ada-0-v{PATCH_136.replace('.', '-')}.json",
                            f"upgrade-gpu-dev-ada-2-v{PATCH_136.replace('.', '-')}.json"]
    for job in jobs.values():
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeName"] in job["metadata"]["name"] and pod["serviceAccountName"] == upgrade.SERVICE_ACCOUNT
        assert {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}["ROLE"] == "worker"
        assert pod["containers"][0]["securityContext"]["privileged"] and pod["hostPID"]
        assert job["metadata"]["labels"][upgrade.POOL_JOB_LABEL] == "ada" and job["spec"]["ttlSecondsAfterFinished"] > 0
    assert _nodes(root) == {"gpu-dev-ada-0": f"v{PATCH_136}", "gpu-dev-ada-1": f"v{PATCH_136}",
                            "gpu-dev-ada-2": f"v{PATCH_136}", "gpu-dev-system-0": f"v{PATCH_135}"}
    # One node finished before the next began: each create follows the previous Job's Complete.
    log = root.log()
    first, second = (i for i, line in enumerate(log) if " create -f " in line)
    assert any("get job upgrade-gpu-dev-ada-0" in line for line in log[first:second])
    assert not (root.root / "var/lib/gpu-platform/upgrade/token").exists()
    assert not (root.root / "var/lib/gpu-platform/upgrade/node-job.json").exists()
    # Run again (the Job replaced): every node at the target, nothing created.
    (root.root / "var/lib/gpu-platform/upgrade/token").write_text("token")
    root.run(": > /var/log/standins.log")
    again = _run_pool(root)
    assert again.returncode == 0 and "every node runs" in again.stdout
    assert not any(" create " in line for line in root.log())


@needs_namespaces
def test_a_node_that_registers_late_at_the_old_version_is_upgraded_too(tmp_path):
    root = _pool_cluster(tmp_path, [f"gpu-dev-ada-0 v{PATCH_135} ada"], late=f"gpu-dev-ada-1 v{PATCH_135} ada\n")
    proc = _run_pool(root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _nodes(root) == {"gpu-dev-ada-0": f"v{PATCH_136}", "gpu-dev-ada-1": f"v{PATCH_136}"}


@needs_namespaces
def test_a_node_the_autoscaler_removes_meanwhile_is_skipped(tmp_path):
    root = _pool_cluster(tmp_path, [f"gpu-dev-ada-0 v{PATCH_135} ada", f"gpu-dev-ada-1 v{PATCH_135} ada"],
                         **{"vanish-gpu-dev-ada-0": ""})
    proc = _run_pool(root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "gpu-dev-ada-0 left the cluster" in proc.stdout
    assert _nodes(root) == {"gpu-dev-ada-1": f"v{PATCH_136}"}
    assert any("delete job upgrade-gpu-dev-ada-0" in line for line in root.log()[-20:])


@needs_namespaces
def test_a_failed_node_fails_the_pool_job_naming_it_and_goes_no_further(tmp_path):
    root = _pool_cluster(tmp_path, [f"gpu-dev-ada-0 v{PATCH_135} ada", f"gpu-dev-ada-1 v{PATCH_135} ada"],
                         **{"fail-gpu-dev-ada-0": ""})
    proc = _run_pool(root)
    assert proc.returncode != 0 and "of gpu-dev-ada-0 failed" in proc.stderr
    assert len([line for line in root.log() if " create -f " in line]) == 1
    assert _nodes(root)["gpu-dev-ada-1"] == f"v{PATCH_135}"
    # The next run (the Job replaced) removes the failed per-node Job before creating it again.
    (root.root / "run/cluster/fail-gpu-dev-ada-0").unlink()
    (root.root / "var/lib/gpu-platform/upgrade/token").write_text("token")
    root.run(": > /var/log/standins.log")
    again = _run_pool(root)
    assert again.returncode == 0, again.stderr[-2000:]
    log = root.log()
    delete = next(i for i, line in enumerate(log) if "delete job upgrade-gpu-dev-ada-0" in line)
    create = next(i for i, line in enumerate(log) if " create -f " in line)
    assert delete < create
    assert set(_nodes(root).values()) == {f"v{PATCH_136}"}


@needs_namespaces
def test_the_pool_job_waits_for_the_control_plane_and_touches_nothing_before(tmp_path):
    root = _pool_cluster(tmp_path, [f"gpu-dev-ada-0 v{PATCH_135} ada"], api_server=PATCH_135)
    proc = _run_pool(root)
    assert proc.returncode != 0 and "the control plane is upgraded first" in proc.stderr
    assert not any(" create " in line or " get nodes" in line for line in root.log())


def test_a_pool_job_follows_the_workers_on_the_first_control_plane_with_its_own_account():
    shared, jobs = upgrade.upgrade_manifests(CPS, WORKERS, "1.36", ENDPOINT, IMAGE, [POOL])
    pool_job = jobs[-1]
    pod = pool_job["spec"]["template"]["spec"]
    assert pool_job["metadata"]["name"] == f"upgrade-pool-ada-v{PATCH_136.replace('.', '-')}"
    assert pod["nodeName"] == CPS[0] and pod["serviceAccountName"] == upgrade.POOL_SERVICE_ACCOUNT
    assert next(e["value"] for e in pod["containers"][0]["env"] if e["name"] == "ROLE") == "pool-ada"
    assert [j["spec"]["template"]["spec"]["nodeName"] for j in jobs[:-1]] == CPS + WORKERS
    # It may take each of the pool's nodes in turn.
    assert pool_job["spec"]["activeDeadlineSeconds"] >= POOL.max_nodes * upgrade.JOB_TIMEOUT_MINUTES * 60
    config_map = next(m for m in shared if m["kind"] == "ConfigMap")
    assert "pool-ada.sh" in config_map["data"]
    # Its account finds nodes and runs Jobs in kube-system; it cannot evict, read pods or touch Secrets.
    rules = [(m["kind"], r) for m in shared if m["metadata"]["name"] == upgrade.POOL_SERVICE_ACCOUNT
             and m["kind"] in ("Role", "ClusterRole") for r in m["rules"]]
    assert ("Role", {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "delete"]}) in rules
    assert {res for _, r in rules for res in r["resources"]} == {"nodes", "jobs"}
    role = next(m for m in shared if m["kind"] == "Role")
    assert role["metadata"]["namespace"] == "kube-system"


@pytest.mark.skipif(__import__("shutil").which("shellcheck") is None, reason="needs shellcheck (Debian package shellcheck)")
def test_the_pool_script_passes_shellcheck(tmp_path):
    import subprocess

    path = tmp_path / "pool.sh"
    path.write_text(_pool_script())
    proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


IMAGE_DIGEST = "ghcr.io/example/gpu-platform-linode-node-groups@sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def autoscaled_upgrade_plan():
    """linode-dev with its node-group provider, one minor ahead of its control plane."""
    from tests.conftest import plan_config, stack_config

    cfg = stack_config("linode-dev")
    cfg["gpu-platform:linode"]["nodeGroups"] = {"image": IMAGE_DIGEST, "apiTokenExpires": "2027-05-03"}
    cfg["gpu-platform:linode"]["controlPlaneVersion"] = "1.34"
    cfg["gpu-platform:kubernetesVersion"] = "1.35"
    return plan_config(cfg, "linode-dev")


def test_the_program_upgrades_the_autoscaled_pool_after_the_workers(autoscaled_upgrade_plan):
    plan = autoscaled_upgrade_plan
    jobs = [r for r in plan.by_type("kubernetes:batch/v1:Job") if "-upgrade-" in r.name]
    assert jobs[-1].inputs["metadata"]["name"] == f"upgrade-pool-ada-v{PATCH_135.replace('.', '-')}"
    assert jobs[-2].urn in jobs[-1].dependencies
    [scripts] = [r for r in plan.by_type("kubernetes:core/v1:ConfigMap") if r.name.endswith("node-upgrade-scripts")]
    assert "pool-ada.sh" in scripts.plain_inputs["data"]
    assert plan.by_type("kubernetes:rbac.authorization.k8s.io/v1:Role")


def test_cluster_autoscaler_and_the_pools_config_move_only_after_the_control_plane(autoscaled_upgrade_plan):
    """cluster-autoscaler supports only its own Kubernetes minor (kubernetes/autoscaler
    cluster-autoscaler/README.md, Releases): its new image, and the provider's pools.json naming the new
    minor, wait for the control planes' upgrade Jobs in the same `pulumi up`."""
    from gpu_platform.components.linode import node_groups

    plan = autoscaled_upgrade_plan
    cp_jobs = [r for r in plan.by_type("kubernetes:batch/v1:Job")
               if r.inputs["spec"]["template"]["spec"]["nodeName"].endswith("-cp-0") and "pool" not in r.name]
    assert cp_jobs
    release = next(r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == "cluster-autoscaler")
    assert release.plain_inputs["values"]["image"]["tag"].startswith("v1.35.")
    provider = next(r for r in plan.by_type("kubernetes:apps/v1:Deployment")
                    if r.plain_inputs["metadata"]["name"] == node_groups.NAME)
    pools = next(r for r in plan.by_type("kubernetes:core/v1:ConfigMap")
                 if r.plain_inputs["metadata"]["name"] == node_groups.NAME)
    assert '"kubernetesMinor": "1.35"' in pools.plain_inputs["data"]["pools.json"]
    for resource in (release, provider, pools):
        for job in cp_jobs:
            assert job.urn in resource.dependencies, (resource.name, job.name)


# --- config: the version change the program accepts -----------------------------------------------


def _linode_dev():
    from tests.conftest import stack_config

    return copy.deepcopy(stack_config("linode-dev"))


def _parse(cfg):
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.runner import stack_input_from_mapping

    return parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")


def test_a_skipped_minor_is_refused_before_anything_is_registered():
    from gpu_platform.config.base import ConfigError

    cfg = _linode_dev()
    cfg["gpu-platform:linode"]["controlPlaneVersion"] = "1.34"
    cfg["gpu-platform:kubernetesVersion"] = "1.36"
    with pytest.raises(ConfigError) as err:
        _parse(cfg)
    message = str(err.value)
    assert "gpu-platform:kubernetesVersion" in message and "skips a minor" in message
    assert "linode.controlPlaneVersion" in message


def test_the_next_minor_is_an_upgrade_the_program_runs():
    """kubernetesVersion one minor ahead of linode.controlPlaneVersion: accepted when a pinned CNI is
    tested on both minors (the CNI moves first); otherwise refused on linode.cni, naming both."""
    from gpu_platform.config.base import ConfigError

    from gpu_platform.data.versions_calendar import load_calendar

    cfg = _linode_dev()
    cfg["gpu-platform:linode"]["controlPlaneVersion"] = "1.35"
    cfg["gpu-platform:kubernetesVersion"] = "1.36"
    both = [c for c in versions.CNI_CHARTS["cilium"]
            if {"1.35", "1.36"} <= set(load_calendar().cni_kubernetes("cilium", versions.cni_minor(c)))]
    if both:
        assert _parse(cfg).kubernetes_version == "1.36"
    else:
        with pytest.raises(ConfigError) as err:
            _parse(cfg)
        message = str(err.value)
        assert "linode.cni" in message and "1.35 and 1.36" in message and "skips" not in message


# --- rehearsed: the objects on a real API server ----------------------------------------------------


def _rehearsal_cache() -> bool:
    from gpu_platform.rehearsal import binaries

    return binaries.bin_dir().is_dir()


@pytest.mark.rehearsal
@pytest.mark.skipif(not _rehearsal_cache(), reason="no rehearsal component cache: build it with `make rehearsal-build`")
def test_the_jobs_and_their_rbac_are_accepted_and_can_drain_on_a_real_api_server(tmp_path):
    """The rehearsal's kube-apiserver (Node+RBAC, Pod Security, strict field validation), controller-manager
    and KWOK: every object is created server-side, the Job controller makes the first Job's pod on its
    node, and the Jobs' service account can do what the drain needs and nothing more.
    Needs its own control plane: the upgrade Jobs drain and cordon nodes, which no platform install should
    have beside it (a bare control plane starts in seconds)."""
    from gpu_platform.rehearsal.controlplane import KWOK_ANNOTATION, ControlPlane
    from gpu_platform.rehearsal.kube import ApiError, wait_for

    nodes = ["gpu-dev-cp-0", "gpu-dev-ada-0"]
    image = versions.NODE_TOOLS_IMAGES["1.19.6"]
    shared, jobs = upgrade.upgrade_manifests(nodes[:1], nodes[1:], "1.36", ENDPOINT, image, [POOL])
    with ControlPlane(tmp_path / "logs") as cp:
        client = cp.client
        for name in nodes:
            client.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: "fake"}},
                           "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
                                    if "ada" in name else []}})
        victim = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "training", "namespace": "default"},
                  "spec": {"nodeName": nodes[1], "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        client.create(victim)
        for obj in [*shared, *jobs]:
            path = client.path(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace")
                               if client.namespaced(obj["apiVersion"], obj["kind"]) else None)
            client.request("POST", path, obj, query={"fieldValidation": "Strict"})

        def first_pod():
            pods = client.list("v1", "Pod", "kube-system", selector=f"job-name={jobs[0]['metadata']['name']}")
            return pods[0] if pods else None

        pod = wait_for("the Job controller to create the first upgrade pod", first_pod, 60)
        assert pod["spec"]["nodeName"] == nodes[0] and pod["metadata"]["labels"][upgrade.POD_LABEL] == "true"

        sa = client.with_token(client.token("kube-system", upgrade.SERVICE_ACCOUNT))
        sa.merge_patch("v1", "Node", nodes[1], {"spec": {"unschedulable": True}})  # cordon
        assert sa.list("v1", "Pod", field_selector=f"spec.nodeName={nodes[1]}")
        sa.request("POST", "/api/v1/namespaces/default/pods/training/eviction",
                   {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "training", "namespace": "default"}})
        def evicted():
            pod = client.get("v1", "Pod", "training", "default")
            return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

        wait_for("the evicted pod to go", evicted, 30)
        sa.merge_patch("v1", "Node", nodes[1], {"spec": {"unschedulable": False}})  # uncordon
        for forbidden in (lambda: sa.list("v1", "Secret", "kube-system"),
                          lambda: sa.delete("v1", "Node", nodes[1])):
            with pytest.raises(ApiError) as err:
                forbidden()
            assert err.value.status == 403

        # An autoscaled pool's Job: its account finds the pool's nodes and creates, reads and deletes the
        # per-node worker Job (accepted by strict validation), in kube-system only; nothing else.
        import json

        scaled = "gpu-dev-ada-7"  # made by the node-group provider: no Job of the program names it
        client.create({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": scaled, "labels": {"gpu-platform.io/pool": POOL.name}, "annotations": {KWOK_ANNOTATION: "fake"}}})
        pool_sa = client.with_token(client.token("kube-system", upgrade.POOL_SERVICE_ACCOUNT))
        assert [n["metadata"]["name"] for n in pool_sa.list("v1", "Node", selector=f"gpu-platform.io/pool={POOL.name}")] == [scaled]
        node_job = json.loads(json.dumps(upgrade.pool_node_job(POOL.name, PATCH_136, image))
                              .replace(upgrade.NODE_PLACEHOLDER, scaled))
        pool_sa.request("POST", "/apis/batch/v1/namespaces/kube-system/jobs", node_job, query={"fieldValidation": "Strict"})
        assert pool_sa.get("batch/v1", "Job", node_job["metadata"]["name"], "kube-system") is not None
        pool_sa.delete("batch/v1", "Job", node_job["metadata"]["name"], "kube-system")
        elsewhere = {**node_job, "metadata": {**node_job["metadata"], "namespace": "default"}}
        for forbidden in (lambda: pool_sa.list("v1", "Pod", "kube-system"),
                          lambda: pool_sa.list("v1", "Secret", "kube-system"),
                          lambda: pool_sa.request("POST", "/apis/batch/v1/namespaces/default/jobs", elsewhere)):
            with pytest.raises(ApiError) as err:
                forbidden()
            assert err.value.status == 403


def test_a_pool_name_too_long_for_its_nodes_upgrade_jobs_is_refused_naming_the_key():
    """An autoscaled node's upgrade Job is named at run time (upgrade-<node>-<release>): a name past 63
    characters must be refused by the config, not fail the pool's Job half-way through an upgrade."""
    from gpu_platform.config.base import ConfigError

    cfg = _linode_dev()
    cfg["gpu-platform:nameSuffix"] = "abcdef"
    cfg["gpu-platform:gpuPools"][0]["maxNodes"] = 20
    # upgrade-gpu-dev-abcdef-<30 characters>-19-v1-35-8: 64 characters.
    cfg["gpu-platform:gpuPools"][0]["name"] = "a" * 30
    with pytest.raises(ConfigError) as err:
        _parse(cfg)
    assert "gpuPools[0].name" in str(err.value) and "63-character" in str(err.value)
    assert "29 characters or shorter" in str(err.value)
    cfg["gpu-platform:gpuPools"][0]["name"] = "a" * 29
    assert _parse(cfg).gpu_pools[0].name == "a" * 29
