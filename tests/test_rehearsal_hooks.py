"""The Kubeflow Trainer chart's runtimes hooks, stood in for by the rehearsal's HookRunner (gpu_platform/rehearsal/
hooks.py): the post-install installer Job and the pre-delete cleanup Job of kubeflow-trainer 2.3.0, rendered from the
pinned chart, run on a KWOK node of a real control plane, as the pod's own ServiceAccount under the chart's own RBAC."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest

from gpu_platform.components.platform.kubeflow import DEFAULT_RUNTIMES, TRAINER_RELEASE, trainer_values
from gpu_platform.data import platform_versions as versions
from gpu_platform.rehearsal import binaries
from gpu_platform.rehearsal.controlplane import KWOK_ANNOTATION
from gpu_platform.rehearsal.hooks import RUNTIMES_CLEANUP, RUNTIMES_INSTALLER, HookRunner, shell_script
from gpu_platform.rehearsal.kube import wait_for
from tests.fit_support import chart_archive

needs_components = pytest.mark.skipif(
    not binaries.bin_dir().is_dir(),
    reason=f"no component cache at {binaries.bin_dir()}: build it with `{binaries.BUILD_COMMAND}`")

NS = "kubeflow-system"
RUNTIME = ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime")
MANAGED_BY = "trainer.kubeflow.org/managed-by"
INSTALLER = f"{TRAINER_RELEASE}-runtimes-installer"
SERVICE_ACCOUNT = f"system:serviceaccount:{NS}:{INSTALLER}"


def _rendered() -> list[dict]:
    from gpu_platform.preflight.fit.render import chart_info, render_chart

    path = chart_archive(versions.KUBEFLOW_TRAINER.chart, versions.KUBEFLOW_TRAINER.version)
    objs, _texts = render_chart(chart_info(Path(path), TRAINER_RELEASE), TRAINER_RELEASE, trainer_values(), NS, None, [])
    return objs


def _one(objs: list[dict], kind: str, name: str) -> dict:
    return copy.deepcopy(next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name))


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """Needs a control plane of its own: the HookRunner runs on it, and on it only the Trainer's CRDs and the runtimes
    hooks' ServiceAccount, RBAC and ConfigMap are installed (no controller: these hooks need none)."""
    from gpu_platform.rehearsal.controlplane import ControlPlane

    if not binaries.bin_dir().is_dir():
        pytest.skip(f"no component cache at {binaries.bin_dir()}: build it with `{binaries.BUILD_COMMAND}`")
    objs = _rendered()
    with ControlPlane(tmp_path_factory.mktemp("hooks") / "logs") as cp:
        client = cp.client
        res = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        client.create({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "hooks-0", "annotations": {KWOK_ANNOTATION: "fake"}}})
        client.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "hooks-0"},
                      "status": {"allocatable": res, "capacity": res}}, subresource="status")
        client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for obj in objs:
            if obj["kind"] == "CustomResourceDefinition" and obj["spec"]["group"] == "trainer.kubeflow.org":
                client.apply(obj)
        for kind, name in (("ServiceAccount", INSTALLER), ("ClusterRole", INSTALLER), ("ClusterRoleBinding", INSTALLER),
                           ("ConfigMap", INSTALLER)):
            client.apply(_one(objs, kind, name))
        wait_for("the ClusterTrainingRuntime CRD to be served", lambda: client.list(*RUNTIME) is not None, 60)
        runner = HookRunner(client, interval=0.5).start()
        try:
            yield cp, objs, runner
        finally:
            runner.stop()


def _manifest(objs: list[dict]) -> list[dict]:
    """The ClusterTrainingRuntimes of the chart's installer ConfigMap."""
    from gpu_platform.preflight.fit.render import parse_yaml_docs

    return [d for _t, d in parse_yaml_docs(_one(objs, "ConfigMap", INSTALLER)["data"]["runtimes.yaml"])]


def _runtime(objs: list[dict], name: str, labels: dict[str, str]) -> dict:
    """A ClusterTrainingRuntime like the chart's torch-distributed, named `name`, with `labels` (and the chart's
    webhook-validation label: no webhook is installed here anyway)."""
    rt = next(d for d in _manifest(objs) if d["metadata"]["name"] == "torch-distributed")
    rt["metadata"] = {"name": name, "labels": labels}
    return rt


def _run_job(cp, objs: list[dict], chart_name: str, suffix: str) -> dict:
    """The chart's hook Job `chart_name`, created as `<name>-<suffix>` (a fresh Job per test, as Helm's
    before-hook-creation makes it), and its pod once that has finished (or after 60 s)."""
    job = _one(objs, "Job", chart_name)
    job["metadata"]["name"] = f"{chart_name}-{suffix}"
    cp.client.create(job)

    def finished():
        pods = cp.client.list("v1", "Pod", NS, selector=f"job-name={job['metadata']['name']}")
        done = [p for p in pods if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")]
        return done[0] if done else None

    return wait_for(f"the pod of Job {job['metadata']['name']} to finish", finished, 60)


def _job(cp, name: str) -> dict:
    return wait_for(f"Job {name}'s status", lambda: (cp.client.get("batch/v1", "Job", name, NS) or {}).get("status"), 30)


def _terminated(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]


def _names(cp, selector: str = "") -> set[str]:
    return {o["metadata"]["name"] for o in cp.client.list(*RUNTIME, selector=selector or None)}


def test_the_runner_knows_the_trainer_hooks_by_their_scripts_and_no_other_job():
    """The stand-in is chosen by the container's script as the pinned chart renders it, not by a Job name: the installer
    and the cleanup each match their own form only, and a Job running any other script is left alone."""
    objs = _rendered()
    installer = shell_script(_one(objs, "Job", INSTALLER)["spec"]["template"]["spec"]["containers"][0])
    cleanup = shell_script(_one(objs, "Job", f"{INSTALLER}-cleanup")["spec"]["template"]["spec"]["containers"][0])
    m = RUNTIMES_INSTALLER.fullmatch(installer)
    assert m and (m["file"], m["key"], m["value"]) == ("/manifests/runtimes.yaml", MANAGED_BY, "runtimes-installer")
    assert RUNTIMES_CLEANUP.fullmatch(cleanup)["key"] == MANAGED_BY
    assert not RUNTIMES_CLEANUP.fullmatch(installer) and not RUNTIMES_INSTALLER.fullmatch(cleanup)
    # One more command in the script (what the stand-in would not do) and it is not the installer any more.
    assert not RUNTIMES_INSTALLER.fullmatch(installer + "\nkubectl delete namespace default")
    assert shell_script({"command": ["/bin/sh", "-c", "kubectl apply -f /x.yaml"]}) == "kubectl apply -f /x.yaml"
    assert shell_script({"command": ["kubectl"], "args": ["apply", "-f", "/x.yaml"]}) is None


@needs_components
@pytest.mark.rehearsal
def test_the_runtimes_installer_job_completes_with_the_runtimes_applied_labelled_and_a_stale_one_pruned(trainer):
    """The chart's post-install hook, as it runs in a cluster: every runtime of the mounted manifest is applied
    server-side by field manager `kubectl` and labelled managed-by=runtimes-installer (what the cleanup hook deletes
    by); a labelled runtime the manifest no longer has (one an older release installed) is pruned, an unlabelled one
    (a user's) is not. Without the stand-in the pod stays Running and Helm waits for the Job until it times out. On the module's own control plane (the `trainer`
    fixture says why)."""
    cp, objs, runner = trainer
    cp.client.apply(_runtime(objs, "stale-runtime", {MANAGED_BY: "runtimes-installer"}))
    cp.client.apply(_runtime(objs, "users-runtime", {}))
    pod = _run_job(cp, objs, INSTALLER, "install")
    assert pod["status"]["phase"] == "Succeeded", (_terminated(pod), runner.ran)
    assert _terminated(pod)["exitCode"] == 0
    wait_for("the Job to complete", lambda: _job(cp, f"{INSTALLER}-install").get("succeeded") == 1, 30)
    labelled = _names(cp, f"{MANAGED_BY}=runtimes-installer")
    assert labelled == set(DEFAULT_RUNTIMES), labelled
    assert _names(cp) == {*DEFAULT_RUNTIMES, "users-runtime"}
    torch = cp.client.get(*RUNTIME, "torch-distributed")
    managers = {(f["manager"], f["operation"]) for f in torch["metadata"]["managedFields"]}
    assert {("kubectl", "Apply"), ("kubectl-label", "Update")} <= managers, managers
    assert torch["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] == "disabled"
    line = next(x for x in runner.ran if "-install-" in x)
    assert "pruned stale-runtime" in line and "8 object(s) of /manifests/runtimes.yaml" in line, line


@needs_components
@pytest.mark.rehearsal
def test_the_installer_under_rbac_without_patch_fails_naming_the_refusal(trainer):
    """The stand-in acts as the pod's ServiceAccount, so the chart's hook RBAC decides: with a ClusterRole that lacks
    `patch` (which a server-side apply is), the pod fails with kubectl's refusal and the Job counts the failure. On the module's own control plane (the `trainer`
    fixture says why)."""
    cp, objs, runner = trainer
    role = _one(objs, "ClusterRole", INSTALLER)
    planted = copy.deepcopy(role)
    planted["rules"][0]["verbs"] = [v for v in planted["rules"][0]["verbs"] if v != "patch"]
    cp.client.apply(planted)  # the rules list is atomic: the fixture's manager replaces it
    try:
        time.sleep(1)  # the authorizer's RBAC informer
        pod = _run_job(cp, objs, INSTALLER, "nopatch")
        assert pod["status"]["phase"] == "Failed", runner.ran
        message = _terminated(pod)["message"]
        assert _terminated(pod)["exitCode"] == 1
        assert SERVICE_ACCOUNT in message and 'cannot patch resource "clustertrainingruntimes"' in message, message
        wait_for("the Job to count the failed pod", lambda: _job(cp, f"{INSTALLER}-nopatch").get("failed", 0) >= 1, 30)
    finally:
        cp.client.delete("batch/v1", "Job", f"{INSTALLER}-nopatch", NS)  # before its retries run under the real RBAC
        cp.client.apply(role)


@needs_components
@pytest.mark.rehearsal
def test_a_refused_list_in_the_prune_loop_prunes_nothing_and_the_installer_still_succeeds(trainer):
    """The script's shell rules: `for res in $(kubectl get ...)` over a refused list runs no iteration, and `set -e`
    does not stop the script on a failed command substitution there, so the Job succeeds without pruning. On the module's own control plane (the `trainer`
    fixture says why)."""
    cp, objs, runner = trainer
    role = _one(objs, "ClusterRole", INSTALLER)
    planted = copy.deepcopy(role)
    planted["rules"][0]["verbs"] = [v for v in planted["rules"][0]["verbs"] if v != "list"]
    cp.client.apply(planted)
    cp.client.apply(_runtime(objs, "stale-again", {MANAGED_BY: "runtimes-installer"}))
    try:
        time.sleep(1)
        pod = _run_job(cp, objs, INSTALLER, "nolist")
        assert pod["status"]["phase"] == "Succeeded", (_terminated(pod), runner.ran)
        assert cp.client.get(*RUNTIME, "stale-again") is not None
        line = next(x for x in runner.ran if "-nolist-" in x)
        assert "no prune" in line and 'cannot list resource "clustertrainingruntimes"' in line, line
    finally:
        cp.client.delete(*RUNTIME, "stale-again")
        cp.client.apply(role)


@needs_components
@pytest.mark.rehearsal
def test_the_cleanup_job_deletes_the_labelled_runtimes_and_waits_for_one_held_by_a_finalizer(trainer):
    """The chart's pre-delete hook deletes every ClusterTrainingRuntime labelled managed-by=runtimes-installer (and
    nothing else); as kubectl waits for each to be gone, the pod stays Running while a finalizer holds one, and
    completes once it is released. On the module's own control plane (the `trainer`
    fixture says why)."""
    cp, objs, runner = trainer
    for rt in _manifest(objs):  # what the installer leaves (a test of its own above)
        rt["metadata"]["labels"][MANAGED_BY] = "runtimes-installer"
        cp.client.apply(rt)
    held = _runtime(objs, "held-runtime", {MANAGED_BY: "runtimes-installer"})
    held["metadata"]["finalizers"] = ["rehearsal.test/hold"]
    cp.client.apply(held)
    cp.client.apply(_runtime(objs, "users-runtime", {}))
    job = _one(objs, "Job", f"{INSTALLER}-cleanup")
    job["metadata"]["name"] = f"{INSTALLER}-cleanup-test"
    cp.client.create(job)
    wait_for("the labelled runtimes to be deleted", lambda: _names(cp) == {"held-runtime", "users-runtime"}, 60)
    time.sleep(2)  # some rounds of the runner: the pod must still be running
    pods = cp.client.list("v1", "Pod", NS, selector=f"job-name={INSTALLER}-cleanup-test")
    assert [p["status"]["phase"] for p in pods] == ["Running"], [p["status"] for p in pods]
    assert cp.client.get(*RUNTIME, "held-runtime")["metadata"].get("deletionTimestamp")
    cp.client.merge_patch(*RUNTIME, "held-runtime", {"metadata": {"finalizers": None}})
    wait_for("the cleanup Job to complete", lambda: _job(cp, f"{INSTALLER}-cleanup-test").get("succeeded") == 1, 60)
    assert _names(cp) == {"users-runtime"}
    line = next(x for x in runner.ran if "-cleanup-test-" in x)
    assert "held-runtime" in line and "torch-distributed" in line, line
