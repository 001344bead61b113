"""The platform's rendered objects, checked by real validators:
- Kueue and Kubeflow Trainer objects against the upstream CRD schemas (../shared/crds/, the pinned
  versions), made strict: an unknown field is an error, as a typo would silently be pruned by the API server;
- every core Kubernetes manifest with kubernetes-validate (strict, Kubernetes 1.33);
- all of them with checkov; a failed check fails the test unless tests/data/checkov-skips.yaml
  justifies it."""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpu_platform.components.cluster import POOL_LABEL, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    GPU_NAMESPACE, JUPYTERHUB_NAMESPACE, KUEUE_NAMESPACE, MONITORING_NAMESPACE, TRAINER_NAMESPACE, render_namespace,
)
from gpu_platform.components.platform.monitoring import (
    render_dashboard_configmap, render_dcgm_service_monitor, render_idle_rules,
    render_spend_rule,
)
from gpu_platform.components.platform.queue import (
    DEFAULT_LOCAL_QUEUE, FIT_POLICY, gpu_quotas, render_fit_policy, render_policy_binding, pool_capacities, render_cluster_queue, render_gpu_admission_binding,
    render_gpu_admission_policy, render_local_queue, render_resource_flavor,
)
from gpu_platform.components.platform.kubeflow import (
    CHECKPOINT_EXIT_CODE, CHECKPOINTED_RUNTIME, render_checkpointed_runtime, render_kubeflow_namespace,
)
from gpu_platform.components.platform.notebooks import render_notebooks_namespace
from gpu_platform.components.platform.training import (
    CHECKPOINT_GRACE_SECONDS, render_checkpoint_configmap, render_checkpoint_secret, render_limit_range, render_network_policy,
    render_resource_quota, render_training_namespace, render_training_service_account,
)

ROOT = Path(__file__).resolve().parent.parent
CRDS = ROOT / ".." / "shared" / "crds"
EXAMPLE = ROOT / "examples" / "training" / "trainjob-checkpointed.yaml"
# The Trainer version Kueue's TrainJob integration is compiled against (sigs.k8s.io/kueue v0.19.2 go.mod:
# github.com/kubeflow/trainer/v2 v2.2.1): Kueue rewrites an admitted TrainJob with these types.
KUEUE_TRAINER_CHART = "kubeflow-trainer-2.2.1.tgz"
CHECKOV_SKIPS = ROOT / "tests" / "data" / "checkov-skips.yaml"

POOLS = [
    GpuPoolSpec("rtx", "g1-gpu-rtx6000-1", "Quadro RTX 6000", 1, 2, 2, "on-demand", {POOL_LABEL: "rtx"}),
    GpuPoolSpec("rtx4", "g1-gpu-rtx6000-4", "Quadro RTX 6000", 4, 1, 1, "on-demand", {POOL_LABEL: "rtx4"}),
]


def kueue_objects() -> list[dict[str, Any]]:
    return ([render_resource_flavor(p) for p in POOLS]
            + [render_cluster_queue(POOLS, pool_capacities("linode", POOLS), gpu_quotas(POOLS), "StrictFIFO"),
               render_local_queue(), render_local_queue(name=DEFAULT_LOCAL_QUEUE)])


def core_objects() -> list[dict[str, Any]]:
    return [
        render_training_namespace(),
        render_training_service_account({"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/trainer"}),
        render_checkpoint_configmap("s3://bucket", {"AWS_REGION": "us-east"}),
        render_checkpoint_secret({"AWS_ACCESS_KEY_ID": "example", "AWS_SECRET_ACCESS_KEY": "example"}),
        render_resource_quota(5, 16_000, 64 * 1024 ** 3),
        render_limit_range(23_000, 120 * 1024 ** 3),
        render_network_policy("linode"),
        render_notebooks_namespace(),
        render_kubeflow_namespace(),
        render_gpu_admission_policy("cluster"),
        render_gpu_admission_binding(),
        render_fit_policy(pool_capacities("linode", POOLS)),
        render_policy_binding(FIT_POLICY),
        render_dashboard_configmap(),
        *[render_namespace(ns, psa) for ns, psa in ((GPU_NAMESPACE, "privileged"), (KUEUE_NAMESPACE, "restricted"),
                                                     (TRAINER_NAMESPACE, "baseline"), (JUPYTERHUB_NAMESPACE, "baseline"),
                                                     (MONITORING_NAMESPACE, "privileged"))],
    ]


def monitoring_objects() -> list[dict[str, Any]]:
    return [render_dcgm_service_monitor(), render_idle_rules(120, 10), render_spend_rule({"rtx": 1.5, "rtx4": 6.0}, 3000)]


def example_trainjob() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE.read_text())


# --- CRD schemas ---------------------------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """additionalProperties: false wherever the schema lists properties and allows nothing else."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.lru_cache(maxsize=None)
def _crd_file(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def crd_schema(folder: str, group: str, kind: str, version: str) -> dict[str, Any]:
    if not CRDS.is_dir():
        pytest.skip(f"upstream CRDs not found at {CRDS.resolve()} (the shared checkout's crds/ folder)")
    for path in sorted((CRDS / folder).glob("*.yaml")):
        crd = _crd_file(path)  # read only: _strict returns new mappings
        if crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind:
            for v in crd["spec"]["versions"]:
                if v["name"] == version:
                    return _strict(v["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {group}/{version} {kind} in {CRDS / folder}")


def validate_cr(obj: dict[str, Any]) -> None:
    group, version = obj["apiVersion"].split("/")
    folder = {"kueue.x-k8s.io": versions.KUEUE_CRDS, "trainer.kubeflow.org": versions.TRAINER_CRDS}[group]
    schema = crd_schema(folder, group, obj["kind"], version)
    body = {k: v for k, v in obj.items() if k != "metadata"}  # metadata is validated by the API server itself
    jsonschema.validate(body, schema, cls=jsonschema.Draft7Validator)


@pytest.mark.parametrize("obj", kueue_objects(), ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
def test_kueue_objects_match_the_pinned_crds(obj: dict[str, Any]) -> None:
    validate_cr(obj)


def test_example_trainjob_matches_the_trainer_crd_and_uses_the_platform_queue() -> None:
    job = example_trainjob()
    validate_cr(job)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == render_local_queue()["metadata"]["name"]
    assert job["metadata"]["namespace"] == render_local_queue()["metadata"]["namespace"]
    env = {e["name"]: e for e in job["spec"]["trainer"]["env"]}
    assert env["CHECKPOINT_URL"]["valueFrom"]["configMapKeyRef"]["name"] == render_checkpoint_configmap("x", {})["metadata"]["name"]
    assert job["spec"]["runtimeRef"]["name"] == CHECKPOINTED_RUNTIME
    # Kueue rewrites an admitted TrainJob whole; its own runtime patch is the only one it must carry.
    assert "runtimePatches" not in job["spec"]


def _chart_file(chart: str, member: str) -> Any:
    """A YAML file of a pinned chart; Helm template lines ({{ ... }}) left out."""
    import tarfile
    from tests.fit_support import CHART_DIRS, no_charts, without_charts

    path = next((d / chart for d in CHART_DIRS if (d / chart).exists()), None)
    if path is None:
        without_charts(no_charts(chart))
    with tarfile.open(path) as tar:
        text = tar.extractfile(member).read().decode()
    return yaml.safe_load("\n".join(line for line in text.splitlines() if "{{" not in line))


def test_example_trainjob_round_trips_through_kueues_trainer_schema() -> None:
    """Kueue 0.19.2 updates the admitted TrainJob with Trainer 2.2.1's Go types: a field those types
    lack (2.3's pod-spec patch terminationGracePeriodSeconds) is dropped, and the JobSet update that
    follows is refused forever. Strict 2.2.1 schema = nothing dropped."""
    crd = _chart_file(KUEUE_TRAINER_CHART, "kubeflow-trainer/crds/trainer.kubeflow.org_trainjobs.yaml")
    schema = _strict(next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")["schema"]["openAPIV3Schema"])
    job = example_trainjob()
    jsonschema.validate({k: v for k, v in job.items() if k != "metadata"}, schema, cls=jsonschema.Draft7Validator)


def test_checkpointed_runtime_is_torch_distributed_with_the_checkpoint_contract() -> None:
    runtime = render_checkpointed_runtime(cloud="linode")
    validate_cr(runtime)
    assert runtime["metadata"]["name"] == CHECKPOINTED_RUNTIME
    # The chart's torch-distributed runtime (the one the example used to name), plus the contract.
    upstream = _chart_file(f"kubeflow-trainer-{versions.KUBEFLOW_TRAINER.version}.tgz",
                           "kubeflow-trainer/files/runtimes/torch-distributed.yaml")
    ours = copy.deepcopy(runtime["spec"])
    for key in ("serviceAccountName", "terminationGracePeriodSeconds", "securityContext", "restartPolicy"):
        del ours["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][key]
    for key in ("backoffLimit", "podFailurePolicy"):
        del ours["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][key]
    del ours["template"]["spec"]["failurePolicy"]
    # Scale-down never evicts its pods (issue 33 item 2): the pod template's only metadata.
    assert ours["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"].pop("metadata") == {
        "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}}
    del ours["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert ours == upstream["spec"]
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == render_training_service_account({})["metadata"]["name"]
    assert pod["terminationGracePeriodSeconds"] == CHECKPOINT_GRACE_SECONDS
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert render_checkpointed_runtime(120, cloud="linode")["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"]["spec"]["terminationGracePeriodSeconds"] == 120
    with pytest.raises(ValueError, match="at least 0"):
        render_checkpointed_runtime(-1, cloud="linode")


@pytest.mark.parametrize("cloud,name,needed", [("gcp", "LD_LIBRARY_PATH", "/usr/local/nvidia/lib64"),
                                               ("linode", "NVIDIA_DRIVER_CAPABILITIES", "compute"),
                                               ("aws", "NVIDIA_DRIVER_CAPABILITIES", "compute")])
def test_example_trainjob_pod_carries_what_the_clouds_driver_needs(cloud, name, needed) -> None:
    """Issue 34 item 1. Before: the example's pod (python:3.12-slim + PyPI torch through the
    torch-checkpointed runtime) had no LD_LIBRARY_PATH, so on GKE, whose device plugin mounts the
    driver at /usr/local/nvidia without putting it on the loader's path, torch found no libcuda and
    trained on the CPU. The pod the example TrainJob makes (preflight's model of Trainer v2.3.0: the
    runtime's container, the TrainJob's env upserted by name) carries what each cloud's driver needs."""
    from gpu_platform.preflight.fit.pods import trainjob_pods

    runtime = render_checkpointed_runtime(cloud=cloud)
    validate_cr(runtime)
    pods, issue = trainjob_pods("example", example_trainjob(), {("ClusterTrainingRuntime", None, CHECKPOINTED_RUNTIME): runtime})
    assert issue is None and len(pods) == 1
    node = next(c for c in pods[0].containers() if c["name"] == "node")
    env = {e["name"]: e.get("value") for e in node["env"]}
    assert needed in env[name].split(":" if name == "LD_LIBRARY_PATH" else ",")
    assert env["RUN_NAME"] == "resnet-checkpointed"  # the TrainJob's own env is kept beside it
    with pytest.raises(ValueError, match="'azure'"):
        render_checkpointed_runtime(cloud="azure")


def _jobset_crd_schema() -> dict[str, Any]:
    """JobSet v0.12.0's CRD (the kubeflow-trainer chart's subchart: what the cluster installs), strict."""
    crd = _chart_file(f"kubeflow-trainer-{versions.KUBEFLOW_TRAINER.version}.tgz",
                      "kubeflow-trainer/charts/jobset/crds/jobset.x-k8s.io_jobsets.yaml")
    return _strict(next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2")["schema"]["openAPIV3Schema"])


def test_checkpointed_runtime_does_not_count_disruptions_as_failures() -> None:
    """Before: no failure policy. JobSet's webhook defaulted restartPolicy OnFailure and every
    preemption (pod failed with DisruptionTarget) or checkpointed stop counted against the Job's
    backoffLimit and then the JobSet's maxRestarts (0): a spot job's retries were used up by
    preemptions. Now a disrupted pod or one that exits CHECKPOINT_EXIT_CODE fails its Job with reason
    PodFailurePolicy, and the JobSet restarts on that reason without counting it. Checked against the
    schemas the cluster installs: Trainer's ClusterTrainingRuntime CRD, JobSet v0.12.0's CRD (the
    JobSet Trainer creates from the template), Kubernetes' batch/v1 Job (kubernetes-validate, strict)
    and JobSet's webhook rules (failure reasons it accepts, rule names)."""
    runtime = render_checkpointed_runtime(cloud="linode")
    validate_cr(runtime)
    jobset_spec = runtime["spec"]["template"]["spec"]
    jsonschema.validate({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": jobset_spec},
                        _jobset_crd_schema(), cls=jsonschema.Draft7Validator)
    rjob = jobset_spec["replicatedJobs"][0]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "node"}, "spec": copy.deepcopy(rjob["template"]["spec"])}
    job["spec"]["template"]["spec"]["containers"][0]["name"] = "node"
    kubernetes_validate.validate(job, "1.33", strict=True)

    pod = rjob["template"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # the Job API refuses a podFailurePolicy with OnFailure
    rules = rjob["template"]["spec"]["podFailurePolicy"]["rules"]
    on_disruption = [r for r in rules if {"type": "DisruptionTarget", "status": "True"} in r.get("onPodConditions", [])]
    on_checkpoint = [r for r in rules if CHECKPOINT_EXIT_CODE in (r.get("onExitCodes") or {}).get("values", [])
                     and (r.get("onExitCodes") or {}).get("operator") == "In"]
    assert on_disruption and on_disruption[0]["action"] == "FailJob"
    assert on_checkpoint and on_checkpoint[0]["action"] == "FailJob"
    assert on_checkpoint[0]["onExitCodes"]["containerName"] in {c["name"] for c in pod["containers"]}
    assert CHECKPOINT_EXIT_CODE not in (0, 1, 128 + 15, 128 + 9)  # not success, a crash, a bare SIGTERM or SIGKILL

    policy = jobset_spec["failurePolicy"]
    first = policy["rules"][0]  # JobSet applies the first rule that matches
    assert first["onJobFailureReasons"] == ["PodFailurePolicy"]
    assert first["action"] == "RestartJobSetAndIgnoreMaxRestarts"
    # JobSet v0.12.0 pkg/webhooks/jobset_webhook.go: validOnJobFailureReasons and ruleNameRegexp.
    assert all(set(r.get("onJobFailureReasons", [])) <= {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                                                           "MaxFailedIndexesExceeded", "PodFailurePolicy"}
               for r in policy["rules"])
    assert all(re.fullmatch(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?", r["name"]) for r in policy["rules"])
    # Real failures are still bounded: the Job retries a crash, then the JobSet fails after maxRestarts.
    assert rjob["template"]["spec"]["backoffLimit"] >= 1 and policy["maxRestarts"] >= 0


def test_strict_crd_validation_rejects_a_typo() -> None:
    bad = copy.deepcopy(render_cluster_queue(POOLS, pool_capacities("linode", POOLS), gpu_quotas(POOLS)))
    bad["spec"]["queueingStrategey"] = "StrictFIFO"
    with pytest.raises(jsonschema.ValidationError):
        validate_cr(bad)
    bad = copy.deepcopy(render_cluster_queue(POOLS, pool_capacities("linode", POOLS), gpu_quotas(POOLS)))
    bad["spec"]["queueingStrategy"] = "FIFO"
    with pytest.raises(jsonschema.ValidationError):
        validate_cr(bad)


# --- kubernetes-validate ---------------------------------------------------------------------------


@pytest.mark.parametrize("obj", core_objects(), ids=lambda o: f"{o['kind']}-{o['metadata']['name']}")
def test_core_manifests_pass_kubernetes_validate_strict(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, "1.33", strict=True)


# --- checkov ---------------------------------------------------------------------------------------


def checkov_bin() -> str:
    for candidate in (os.environ.get("CHECKOV_BIN"), str(ROOT / ".venv-checkov" / "bin" / "checkov"), shutil.which("checkov")):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.fail("checkov not found: make checkov-venv (.venv-checkov from requirements-checkov.txt), "
                "or set CHECKOV_BIN")


def checkov_skips() -> dict[str, Any]:
    """tests/data/checkov-skips.yaml, its shape checked: every allowed failure has a reason (and an upstream
    one the releases it applies to), so the list stays data a reviewer can read, not prose a test parses."""
    doc = yaml.safe_load(CHECKOV_SKIPS.read_text()) or {}
    assert set(doc) <= {"platform", "images", "upstream", "privileged"}, f"{CHECKOV_SKIPS}: unknown sections {sorted(doc)}"
    for name, entry in (doc.get("privileged") or {}).items():
        assert isinstance(entry, dict) and entry.get("resources") and entry.get("checks") and \
            str(entry.get("reason", "")).strip(), f"{CHECKOV_SKIPS}: privileged.{name} needs resources, checks and a reason"
    for section in ("platform", "images"):
        for check, reason in (doc.get(section) or {}).items():
            assert re.fullmatch(r"CKV2?_[A-Z0-9]+_\d+", check) and isinstance(reason, str) and reason.strip(), \
                f"{CHECKOV_SKIPS}: {section}.{check} needs a check id and a reason"
    for check, entry in (doc.get("upstream") or {}).items():
        assert isinstance(entry, dict) and entry.get("releases") and str(entry.get("reason", "")).strip(), \
            f"{CHECKOV_SKIPS}: upstream.{check} needs releases and a reason"
    return doc


def justified_checks() -> set[str]:
    """Check ids allowed for the platform's own manifests (`platform:` in tests/data/checkov-skips.yaml)."""
    return {c for c in (checkov_skips().get("platform") or {}) if "_K8S_" in c}


def _dump(tmp: Path) -> Iterator[Path]:
    objs = core_objects() + kueue_objects() + monitoring_objects() + [example_trainjob()]
    for i, obj in enumerate(objs):
        path = tmp / f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        yield path


@pytest.mark.sidevenv
def test_checkov_finds_no_unjustified_failure(tmp_path: Path) -> None:
    files = list(_dump(tmp_path))
    proc = subprocess.run([checkov_bin(), "-d", str(tmp_path), "--framework", "kubernetes", "-o", "json",
                           "--quiet", "--compact", "--skip-download"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout or "{}")
    reports = report if isinstance(report, list) else [report]
    failed = [c for r in reports for c in r.get("results", {}).get("failed_checks", [])]
    summary = {k: sum(r.get("summary", {}).get(k, 0) for r in reports) for k in ("resource_count", "parsing_errors")}
    assert summary["resource_count"] == len(files) and summary["parsing_errors"] == 0, proc.stdout[:1000]
    allowed = justified_checks()
    unjustified = sorted({f"{c['check_id']} {c['file_path']}: {c['check_name']}" for c in failed
                          if c["check_id"] not in allowed})
    assert not unjustified, f"checkov failures not justified in {CHECKOV_SKIPS.name} (platform):\n" + "\n".join(unjustified)
