"""What the queues admit, and where (platform review of the Kueue layer).

1. Kueue refuses a workload asking for a resource no resource group of its ClusterQueue covers (v0.19.2
   pkg/scheduler/flavorassigner: "resource ... unavailable in ClusterQueue"), unless the resource's name
   starts with one of the Configuration's resources.excludeResourcePrefixes (pkg/workload/workload.go
   dropExcludedResources). Ours cover cpu, memory and nvidia.com/gpu; Katib v0.19.0 gives every suggestion
   container an ephemeral-storage request of 500Mi (pkg/apis/config/v1beta1/defaults.go), so without the
   exclusion an experiment's suggestion pod (cpu-queue) waited for ever, and so did any Job asking for
   scratch space. Preflight's fit model of Kueue reads the same exclusion from the rendered ConfigMap.
2. The training namespace's ResourceQuota must hold everything the queues can admit there: LocalQueues
   of both gpu-training and cpu-work live in `training`. Sized from the GPU queue alone, a namespace
   whose GPU jobs used it up refused the pods of a CPU job Kueue had admitted ("exceeded quota").
3. cpu-work is BestEffortFIFO whatever platform.queueingStrategy says (that orders the GPU queue).
"""

from __future__ import annotations

import copy

import pytest
import yaml

from gpu_platform.components.capacity import parse_quantity
from gpu_platform.components.platform.queue import (
    CLUSTER_QUEUE, CPU_CLUSTER_QUEUE, CPU_LOCAL_QUEUE, QUEUE_NAME_LABEL, kueue_manager_config, kueue_values,
)
from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.kueue import assign
from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
from tests.conftest import stack_config
from tests.fit_support import STACKS, need_charts, stack_plan
from tests.test_rehearsal import needs_components

KUEUE_TYPE = "kubernetes:kueue.x-k8s.io/v1beta2:"
KATIB_SUGGESTION_REQUESTS = {"cpu": 50, "memory": 10 * 1024 ** 2, "ephemeral-storage": 500 * 1024 ** 2}


# --- 1. resources no queue covers ------------------------------------------------------------------------------


def test_kueue_ignores_ephemeral_storage_and_still_gates_hugepages() -> None:
    conf = kueue_manager_config()
    prefixes = conf["resources"]["excludeResourcePrefixes"]
    assert "ephemeral-storage" in prefixes
    # Kueue matches prefixes: nothing excluded may swallow a resource the queues count.
    for counted in ("cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi", "hugepages-1Gi"):
        assert not any(counted.startswith(p) for p in prefixes), counted
    # ...and the chart gets it (the Configuration is the ConfigMap's YAML)
    shipped = yaml.safe_load(kueue_values()["managerConfig"]["controllerManagerConfigYaml"])
    assert shipped["resources"] == conf["resources"]


def _cpu_work(stack: str) -> tuple[dict, dict]:
    from tests.test_fit_stacks import _objects, _stack

    need_charts()
    _, releases = _stack(stack)
    cq = _objects(releases, "ClusterQueue", CPU_CLUSTER_QUEUE)[0]
    flavors = {o["metadata"]["name"]: o for o in _objects(releases, "ResourceFlavor")}
    return cq, flavors


def test_fit_model_drops_excluded_resources_and_refuses_uncovered_ones() -> None:
    cq, flavors = _cpu_work("linode-dev")
    excluded = tuple(kueue_manager_config()["resources"]["excludeResourcePrefixes"])
    got = assign([("main", {}, KATIB_SUGGESTION_REQUESTS)], cq, flavors, excluded=excluded)
    assert got.admitted and got.flavor_of("main") == "system", got.reason
    # what Kueue did without the exclusion
    got = assign([("main", {}, KATIB_SUGGESTION_REQUESTS)], cq, flavors)
    assert not got.admitted and "resource ephemeral-storage unavailable in ClusterQueue cpu-work" in got.reason
    # a resource neither covered nor excluded: never admitted
    got = assign([("main", {}, {"cpu": 50, "hugepages-2Mi": 2 * 1024 ** 2})], cq, flavors, excluded=excluded)
    assert not got.admitted and "hugepages-2Mi unavailable" in got.reason


def _cpu_job(name: str, requests: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "training", "labels": {QUEUE_NAME_LABEL: CPU_LOCAL_QUEUE}},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": requests}}]}}}}


@pytest.mark.parametrize("stack", STACKS)
def test_preflight_admits_a_cpu_job_asking_for_ephemeral_storage_and_refuses_hugepages(stack: str) -> None:
    """Preflight reads excludeResourcePrefixes from the rendered Kueue ConfigMap: a cpu-queue Job with
    Katib's suggestion requests is admitted to `system` and placed; one asking for huge pages is
    reported as never admitted."""
    from tests.test_fit_checks import rel
    from tests.test_fit_stacks import _problems, _stack

    need_charts()
    model, releases = _stack(stack)
    scratch = _cpu_job("scratch", {"cpu": "50m", "memory": "10Mi", "ephemeral-storage": "500Mi"})
    huge = _cpu_job("huge", {"cpu": "50m", "memory": "10Mi", "hugepages-2Mi": "4Mi"})
    report = check_fit(model, releases + [rel("user-jobs", [scratch, huge])])
    verdicts = {k: v for k, v in report.queue.items() if k.startswith("Job/training/")}
    assert verdicts["Job/training/scratch"]["admitted"], verdicts
    assert verdicts["Job/training/scratch"]["flavors"]["main"]["cpu"] == "system"
    assert any(p.object == "Job/training/scratch" for p in report.placements)
    assert not verdicts["Job/training/huge"]["admitted"]
    [never] = _problems(report, "queue-fit", reason="Kueue never admits it")
    assert "huge" in never.object and "hugepages-2Mi unavailable in ClusterQueue cpu-work" in never.reason


def _without_exclusion(releases) -> None:
    """Kueue's Configuration as it shipped before: no resources.excludeResourcePrefixes."""
    for rel in releases:
        for o in rel.objects:
            data = o.get("data") or {} if o.get("kind") == "ConfigMap" else {}
            if "controller_manager_config.yaml" in data:
                conf = yaml.safe_load(data["controller_manager_config.yaml"])
                if str(conf.get("apiVersion", "")).startswith("config.kueue.x-k8s.io/"):
                    conf.pop("resources", None)
                    o["data"]["controller_manager_config.yaml"] = yaml.safe_dump(conf)


def test_preflight_without_the_exclusion_says_the_ephemeral_storage_job_is_never_admitted() -> None:
    from tests.test_fit_checks import rel
    from tests.test_fit_stacks import _problems, _stack

    need_charts()
    model, releases = _stack("linode-dev")
    _without_exclusion(releases)
    job = _cpu_job("scratch", {"cpu": "50m", "memory": "10Mi", "ephemeral-storage": "500Mi"})
    report = check_fit(model, releases + [rel("user-jobs", [job])])
    [never] = _problems(report, "queue-fit", reason="Kueue never admits it")
    assert "resource ephemeral-storage unavailable in ClusterQueue cpu-work" in never.reason


@needs_components
@pytest.mark.rehearsal(stack="linode-dev")
def test_rehearsal_admits_a_cpu_job_asking_for_ephemeral_storage(tmp_path) -> None:
    """The real Kueue with the program's Configuration admits the cpu-queue Job that asks for
    ephemeral-storage as Katib's suggestion pod does; without the exclusion it waits, "resource
    ephemeral-storage unavailable in ClusterQueue"."""
    from gpu_platform.rehearsal.scenarios import cpu_job_placement
    from tests.test_rehearsal import _failures, _rehearse

    result = _rehearse("linode-dev", tmp_path / "fixed", scenarios=(cpu_job_placement,))
    [sc] = result.scenarios
    assert sc.status == "PASS", _failures(result)
    assert any("ephemeral-storage 500Mi" in d and "pod bound to system node" in d for d in sc.details), sc.details

    before = _rehearse("linode-dev", tmp_path / "before", mutate=_without_exclusion, scenarios=(cpu_job_placement,))
    [sc] = before.scenarios
    assert sc.status == "FAIL", sc.details
    assert "ephemeral-storage unavailable in ClusterQueue" in " ".join(sc.problems), sc.problems
    # Kueue's verdict ended the wait, not the hang guard.
    assert "(Kueue: ClusterQueue cpu-work can never admit it as it stands)" in " ".join(sc.problems), sc.problems


# --- 2. the training namespace's quota holds what the queues admit there -----------------------------------------


def _amount(resource: str, value) -> int:
    q = parse_quantity(str(value))
    return int(q * 1000) if resource == "cpu" else int(q)


def _queues_into(plan, namespace: str) -> dict[str, dict]:
    cqs = {r.inputs["metadata"]["name"]: r.inputs for r in plan.resources if r.type == KUEUE_TYPE + "ClusterQueue"}
    names = {r.inputs["spec"]["clusterQueue"] for r in plan.resources
             if r.type == KUEUE_TYPE + "LocalQueue" and r.inputs["metadata"]["namespace"] == namespace}
    return {n: cqs[n] for n in names}


@pytest.mark.parametrize("stack", STACKS)
def test_training_quota_holds_everything_the_queues_admit_into_training(stack: str) -> None:
    plan = stack_plan(stack)
    queues = _queues_into(plan, "training")
    assert set(queues) == {CLUSTER_QUEUE, CPU_CLUSTER_QUEUE}  # gpu-queue and default; cpu-queue
    hard = next(r.inputs["spec"]["hard"] for r in plan.resources
                if r.type == "kubernetes:core/v1:ResourceQuota" and r.inputs["metadata"]["namespace"] == "training")
    for resource in ("cpu", "memory", "nvidia.com/gpu"):
        admitted = sum(_amount(resource, r["nominalQuota"]) for cq in queues.values()
                       for rg in cq["spec"]["resourceGroups"] for fl in rg["flavors"]
                       for r in fl["resources"] if r["name"] == resource)
        assert _amount(resource, hard[f"requests.{resource}"]) >= admitted, (
            f"{stack}: training-quota requests.{resource} {hard[f'requests.{resource}']} < what "
            f"{', '.join(sorted(queues))} admit into training")


# --- 3. the CPU queue's ordering --------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_queueing_strategy_orders_the_gpu_queue_and_cpu_work_is_always_best_effort(strategy: str) -> None:
    config = stack_config("linode-dev")
    config["gpu-platform:platform"] = {**config.get("gpu-platform:platform", {}), "queueingStrategy": strategy}
    plan = run_program(stack_input_from_mapping("linode-dev", copy.deepcopy(config)))
    got = {r.inputs["metadata"]["name"]: r.inputs["spec"]["queueingStrategy"]
           for r in plan.resources if r.type == KUEUE_TYPE + "ClusterQueue"}
    assert got == {CLUSTER_QUEUE: strategy, CPU_CLUSTER_QUEUE: "BestEffortFIFO"}


def _training_quota_of_before(releases) -> None:
    """training-quota as it shipped before: the GPU pools' share only (gpu-training's CPU/memory quota)."""
    from tests.test_fit_stacks import _objects

    [cq] = _objects(releases, "ClusterQueue", CLUSTER_QUEUE)
    cpu = sum(_amount("cpu", r["nominalQuota"]) for fl in cq["spec"]["resourceGroups"][0]["flavors"]
              for r in fl["resources"] if r["name"] == "cpu")
    [quota] = _objects(releases, "ResourceQuota", "training-quota")
    quota["spec"]["hard"]["requests.cpu"] = f"{cpu}m"


@pytest.mark.parametrize("stack", STACKS)
def test_preflight_reports_a_namespace_quota_below_what_its_queues_admit(stack: str) -> None:
    from tests.test_fit_stacks import _problems, _stack

    need_charts()
    model, releases = _stack(stack)
    assert not _problems(check_fit(model, copy.deepcopy(releases)), "queue-fit", reason="quota is below")
    _training_quota_of_before(releases)
    [problem] = _problems(check_fit(model, releases), "queue-fit", reason="quota is below")
    assert problem.object == "ResourceQuota/training/training-quota"
    assert "cpu-work, gpu-training" in problem.reason and "requests.cpu" in problem.reason
