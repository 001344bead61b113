"""MlPlatform wired to a hand-made ClusterHandle under preflight's mocks: what each switch adds,
what every Kubernetes child is attached to, and what the one-pool / two-pool stacks get."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

import pulumi
import pytest
import yaml

from gpu_platform.components.cluster import GPU_TAINT, TRAINING_NAMESPACE, CheckpointStore, ClusterHandle, gpu_pool_specs
from gpu_platform.config.stack import parse_config
from gpu_platform.data import platform_versions as versions
from tests.conftest import ROOT, plan_stack, stack_config
from gpu_platform.preflight.runner import Plan, run_program, stack_input_from_mapping

BASE: dict[str, Any] = {
    "gpu-platform:cloud": "linode",
    # A minor the pinned Cilium is tested on (kubernetes-versions.yaml cni:); the default (newest) may not be.
    "gpu-platform:kubernetesVersion": "1.35",
    "gpu-platform:environment": "test",
    "gpu-platform:owner": "ml-platform",
    "gpu-platform:costCenter": "research",
    "gpu-platform:monthlyBudgetUsd": 3000,
    "gpu-platform:alertEmails": ["ops@example.com", "ml@example.com"],
    "gpu-platform:gpuPools": [
        {"name": "rtx", "instanceType": "g2-gpu-rtx4000a1-m", "capacity": "on-demand", "minNodes": 2, "maxNodes": 2},
    ],
    # A region with VPCs and these GPU plans (gpu_platform/config/linode_regions.yaml).
    "gpu-platform:linode": {"region": "us-ord", "apiTokenExpires": "2027-11-20"},
    "gpu-platform:platform": {"alertSmtp": {"smarthost": "smtp.example.com:587", "from": "alerts@example.com"}},
}
TWO_POOLS = [
    {"name": "rtx", "instanceType": "g2-gpu-rtx4000a1-m", "capacity": "on-demand", "minNodes": 2, "maxNodes": 2},
    {"name": "rtx4", "instanceType": "g2-gpu-rtx4000a4-m", "capacity": "on-demand", "minNodes": 1, "maxNodes": 1},
]
CR = "kubernetes:apiextensions.k8s.io:CustomResource"
RELEASE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE = "kubernetes:kustomize/v2:Directory"


def config(platform: Optional[dict[str, Any]] = None, pools: Optional[list[dict[str, Any]]] = None,
           **top: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    if platform is not None:
        raw["gpu-platform:platform"] = {**raw["gpu-platform:platform"], **platform}
    if pools is not None:
        raw["gpu-platform:gpuPools"] = pools
    raw.update({f"gpu-platform:{k}": v for k, v in top.items()})
    return raw


def plan_platform(raw: dict[str, Any], device_plugin_installed: bool = True, identity_based: bool = False) -> Plan:
    """Run MlPlatform on a hand-made Linode-like cluster handle under the mocks."""
    stack_input = stack_input_from_mapping("platform-test", raw)
    cfg = parse_config(stack_input.raw, "platform-test")
    ran: list[bool] = []

    def program() -> None:
        import pulumi_kubernetes as k8s

        from gpu_platform.components.platform import MlPlatform, PlatformArgs

        provider = k8s.Provider("fake-cluster", kubeconfig=pulumi.Output.secret("apiVersion: v1\nkind: Config\n"))
        ready = k8s.core.v1.ConfigMap("cluster-ready", metadata={"name": "ready", "namespace": "kube-system"},
                                      opts=pulumi.ResourceOptions(provider=provider))
        checkpoint = CheckpointStore(
            url=pulumi.Output.from_input("s3://ckpt-bucket"),
            service_account_annotations={"iam.gke.io/gcp-service-account": "trainer@p.iam.gserviceaccount.com"}
            if identity_based else {},
            env={"AWS_REGION": "us-east", "AWS_ENDPOINT_URL_S3": "https://us-east-1.linodeobjects.com"},
            credentials=None if identity_based else pulumi.Output.secret(
                {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}),
        )
        cluster = ClusterHandle(cloud=cfg.cloud, name="gpu-test", kubeconfig=pulumi.Output.secret("kc"),
                                provider=provider, gpu_pools=gpu_pool_specs(cfg), default_storage_class="linode-block-storage-retain",
                                checkpoint=checkpoint, gpu_device_plugin_installed=device_plugin_installed, ready=[ready])
        platform = MlPlatform("platform", PlatformArgs(cfg=cfg, cluster=cluster))
        pulumi.export("localQueue", platform.local_queue)
        ran.append(True)

    plan = run_program(stack_input, program=program, preview=False)
    assert ran, "the program did not run"
    return plan


def platform_children(plan: Plan) -> list:
    return [r for r in plan.resources if r.name.startswith("platform")]


def names(plan: Plan) -> set[str]:
    return {r.name for r in platform_children(plan)}


@pytest.fixture(scope="module")
def full_plan() -> Plan:
    return plan_platform(config())


def test_every_kubernetes_child_uses_the_cluster_provider_and_waits_for_it(full_plan: Plan) -> None:
    ready_urn = next(r.urn for r in full_plan.resources if r.name == "cluster-ready")
    k8s_children = [r for r in platform_children(full_plan) if r.type.startswith("kubernetes:")]
    assert len(k8s_children) > 20
    for r in k8s_children:
        if r.custom:
            assert r.provider and "fake-cluster" in r.provider, r.name
        assert ready_urn in r.dependencies, f"{r.name} does not wait for the cluster"
    root = full_plan.one("gpu-platform:platform:MlPlatform")
    assert root.parent is None or "Stack" in root.parent
    for r in platform_children(full_plan):
        if r is not root:
            assert r.parent is not None and "platform" in r.parent, r.name



PART_COMPONENTS = {
    "queue": "gpu-platform:platform:JobQueue",
    "kubeflow": "gpu-platform:platform:Kubeflow",
    "notebooks": "gpu-platform:platform:Notebooks",
    "monitoring": "gpu-platform:platform:Monitoring",
}
PART_PREFIX = {"queue": "platform-queue", "kubeflow": "platform-kubeflow", "notebooks": "platform-notebooks",
               "monitoring": "platform-monitoring"}


@pytest.mark.parametrize("part", sorted(PART_COMPONENTS))
def test_switching_a_part_off_removes_it_and_nothing_else(full_plan: Plan, part: str) -> None:
    plan = plan_platform(config({part: False}))
    assert not plan.by_type(PART_COMPONENTS[part])
    removed = names(full_plan) - names(plan)
    # GPU notebooks and pipeline steps are queued: without the queue their LocalQueues go, the GPU
    # profiles lose the queue label and the policy on TrainJobs Kueue would break goes; without
    # Kubeflow, its namespace's LocalQueue (the only couplings between parts)
    coupled = ({"platform-notebooks-local-queue", "platform-kubeflow-kueue-patch-policy",
                "platform-kubeflow-kueue-patch-binding"} if part == "queue" else
               {"platform-queue-pipelines-local-queue"} if part == "kubeflow" else set())
    assert removed and all(n.startswith(PART_PREFIX[part]) for n in removed - coupled), removed
    assert coupled <= removed
    assert not names(plan) - names(full_plan)
    # what stays is registered with the same inputs
    before = {r.name: r.inputs for r in platform_children(full_plan)}
    for r in platform_children(plan):
        if part == "queue" and r.name == "platform-notebooks-jupyterhub":
            profiles = r.inputs["values"]["singleuser"]["profileList"]
            assert not any("extra_labels" in p["kubespawner_override"] for p in profiles)
            continue
        assert r.inputs == before[r.name], r.name


def test_training_namespace_and_gpu_enablement_are_always_there() -> None:
    plan = plan_platform(config({"queue": False, "kubeflow": False, "notebooks": False, "monitoring": False}))
    ns = {r.inputs["metadata"]["name"] for r in plan.by_type("kubernetes:core/v1:Namespace")}
    assert {"training", "gpu-system"} <= ns
    sa = plan.one("kubernetes:core/v1:ServiceAccount", "platform-training")
    assert sa.inputs["metadata"]["name"] == "trainer" and sa.inputs["automountServiceAccountToken"] is False
    assert plan.one(RELEASE, "dcgm-exporter").inputs["version"] == versions.DCGM_EXPORTER.version
    assert plan.outputs.get("localQueue") is None


def test_full_platform_releases_are_pinned(full_plan: Plan) -> None:
    releases = {r.inputs["name"]: r.inputs for r in full_plan.by_type(RELEASE)}
    assert set(releases) == {"dcgm-exporter", "kueue", "kubeflow-trainer", "jupyterhub", "kube-prometheus-stack"}
    for rel_name, inputs in releases.items():
        chart = versions.ALL_CHARTS[rel_name]
        assert inputs["version"] == chart.version and inputs["chart"] == chart.chart
        if chart.repo:
            assert inputs["repositoryOpts"]["repo"] == chart.repo


def test_device_plugin_only_where_the_cluster_has_none() -> None:
    without = plan_platform(config({"queue": False, "kubeflow": False, "notebooks": False, "monitoring": False}),
                            device_plugin_installed=False)
    dp = without.one(RELEASE, "device-plugin")
    assert dp.inputs["version"] == versions.NVIDIA_DEVICE_PLUGIN.version
    assert dp.inputs["values"]["tolerations"] == [GPU_TAINT.toleration()]
    with_plugin = plan_platform(config({"queue": False, "kubeflow": False, "notebooks": False, "monitoring": False}))
    assert not [r for r in with_plugin.by_type(RELEASE) if "device-plugin" in r.name]


def test_kubeflow_kustomizations_are_registered_pinned_and_ordered(full_plan: Plan) -> None:
    dirs = {r.name: r for r in full_plan.by_type(KUSTOMIZE)}
    assert set(dirs) == {"platform-kubeflow-pipelines-cluster-scoped", "platform-kubeflow-pipelines",
                         "platform-kubeflow-katib"}
    cluster_scoped = dirs["platform-kubeflow-pipelines-cluster-scoped"]
    # Named relative to the program's folder (the repository root here), like every shipped file; the two installs
    # with databases as a copy with their claims' class (helm.claims_on), in the user cache, named by its content.
    overlays = {k: f"gpu_platform/{v}" for k, v in versions.KUSTOMIZE_OVERLAYS.items()}
    assert cluster_scoped.inputs["directory"] == overlays["pipelines-cluster-scoped"]
    for name, key in (("platform-kubeflow-pipelines", "pipelines-platform-agnostic"),
                      ("platform-kubeflow-katib", "katib-standalone")):
        built = Path(dirs[name].inputs["directory"])
        assert built.parent.name == "kustomize-overlays" and built.name.startswith(Path(overlays[key]).name + "-"), built
        shipped = yaml.safe_load((ROOT / overlays[key] / "kustomization.yaml").read_text())
        assert yaml.safe_load((built / "kustomization.yaml").read_text())["resources"] == shipped["resources"]
    assert cluster_scoped.urn in dirs["platform-kubeflow-pipelines"].dependencies
    # one owner of the `kubeflow` Namespace (the program), before both installs
    ns = full_plan.one("kubernetes:core/v1:Namespace", "platform-kubeflow-namespace")
    assert ns.inputs["metadata"]["name"] == "kubeflow"
    for d in dirs.values():
        assert ns.urn in d.dependencies, d.name
    # registered, not expanded: nothing was fetched, no child of the kustomizations exists
    for d in dirs.values():
        assert not full_plan.children_of(d.urn)


def test_kueue_objects_wait_for_kueue_and_follow_the_pool(full_plan: Plan) -> None:
    kueue = full_plan.one(RELEASE, "platform-queue-kueue")
    flavor = full_plan.one(CR.replace("apiextensions.k8s.io:CustomResource", "kueue.x-k8s.io/v1beta2:ResourceFlavor"))
    cq = full_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    lq = full_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue", "platform-queue-local")
    assert kueue.urn in flavor.dependencies and kueue.urn in cq.dependencies and flavor.urn in cq.dependencies
    training_ns = full_plan.one("kubernetes:core/v1:Namespace", "platform-training")
    assert training_ns.urn in lq.dependencies and lq.inputs["metadata"]["namespace"] == TRAINING_NAMESPACE
    notebooks_lq = full_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue", "notebooks")
    assert notebooks_lq.inputs["metadata"]["namespace"] == "jupyterhub" and cq.urn in notebooks_lq.dependencies
    res = cq.inputs["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r["nominalQuota"] for r in res}["nvidia.com/gpu"] == "2"  # 2 nodes x 1 RTX 6000
    assert flavor.inputs["spec"]["tolerations"] == [GPU_TAINT.toleration()]
    assert full_plan.outputs["localQueue"] == "gpu-queue"
    default_lq = full_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue", "platform-queue-default")
    assert default_lq.inputs["metadata"] == {**default_lq.inputs["metadata"], "name": "default",
                                             "namespace": TRAINING_NAMESPACE}
    # an unlabelled GPU job in training is queued for the GPU pools (issue #22 item 1)
    assert default_lq.inputs["spec"]["clusterQueue"] == cq.inputs["metadata"]["name"] == "gpu-training"
    # the GPU admission policy is bound, and only after the queues exist (queued work is never refused)
    policy = full_plan.one("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy", "gpu-admission")
    binding = full_plan.one("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding",
                            "gpu-admission")
    fit = full_plan.one("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy", "fit-policy")
    assert len(fit.inputs["spec"]["validations"]) == len(full_plan.by_type(
        "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"))  # one rule per pool
    assert binding.inputs["spec"]["policyName"] == policy.inputs["metadata"]["name"]
    assert lq.urn in policy.dependencies and default_lq.urn in policy.dependencies and policy.urn in binding.dependencies


def test_releases_in_queue_namespaces_install_after_kueue_and_kueue_after_trainer(full_plan: Plan) -> None:
    """Kueue's job webhooks (failurePolicy Fail) see the queue's namespaces only; JupyterHub lives in
    one (its GPU notebooks are queued), so it installs after Kueue; Kueue after Trainer's CRDs.
    Pipelines and Katib live in `kubeflow`, also one (pipeline GPU steps are queued): after Kueue too."""
    kueue = full_plan.one(RELEASE, "platform-queue-kueue")
    hub = full_plan.one(RELEASE, "platform-notebooks-jupyterhub")
    trainer = full_plan.one(RELEASE, "platform-kubeflow-trainer")
    assert kueue.urn in hub.dependencies
    assert trainer.urn in kueue.dependencies
    labelled = {r.inputs["metadata"]["name"] for r in full_plan.by_type("kubernetes:core/v1:Namespace")
                if r.inputs["metadata"]["labels"].get("gpu-platform.io/queue") == "enabled"}
    assert labelled == {"training", "jupyterhub", "kubeflow"}
    dirs = {r.name: r for r in full_plan.by_type(KUSTOMIZE)}
    for app in ("platform-kubeflow-pipelines", "platform-kubeflow-katib"):
        assert kueue.urn in dirs[app].dependencies, app


def test_quotas_follow_allocatable_and_the_limit_range_has_no_default_limits(full_plan: Plan) -> None:
    from gpu_platform.components.capacity import allocatable

    alloc = allocatable("linode", "g2-gpu-rtx4000a1-m")
    quota = full_plan.one("kubernetes:core/v1:ResourceQuota")
    cpu = quota.inputs["spec"]["hard"]["requests.cpu"]
    assert cpu.endswith("m") and int(cpu[:-1]) <= 2 * alloc.cpu_millis  # 2 nodes' allocatable at most
    lr = full_plan.one("kubernetes:core/v1:LimitRange")
    (item,) = lr.inputs["spec"]["limits"]
    assert "default" not in item and "nvidia.com/gpu" not in item["max"]
    assert int(item["max"]["cpu"][:-1]) <= alloc.cpu_millis


def test_training_egress_policy_where_the_metadata_server_is_not_workload_identity(full_plan: Plan) -> None:
    policy = full_plan.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", "platform-training")
    assert policy.inputs["spec"]["egress"][1]["to"][0]["ipBlock"]["except"] == ["169.254.169.254/32"]


def test_two_pool_stack_gets_two_flavors_and_both_quotas() -> None:
    plan = plan_platform(config({"gpuQuota": {"rtx4": 2}, "queueingStrategy": "StrictFIFO"}, pools=TWO_POOLS))
    flavors = plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")
    assert sorted(f.inputs["metadata"]["name"] for f in flavors) == ["rtx", "rtx4"]
    cq = plan.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}["nvidia.com/gpu"]
              for f in cq.inputs["spec"]["resourceGroups"][0]["flavors"]}
    assert quotas == {"rtx": "2", "rtx4": "2"}  # rtx4 overridden from 4 (1 node x 4 GPUs)
    assert cq.inputs["spec"]["queueingStrategy"] == "StrictFIFO"
    quota = plan.one("kubernetes:core/v1:ResourceQuota")
    assert quota.inputs["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    hub = plan.one(RELEASE, "jupyterhub")
    slugs = [p["slug"] for p in hub.inputs["values"]["singleuser"]["profileList"]]
    assert slugs == ["cpu", "gpu-rtx", "gpu-rtx4"]
    spend = plan.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "gpu-spend-run-rate")
    expr = spend.inputs["spec"]["groups"][0]["rules"][0]["expr"]
    assert 'label_gpu_platform_io_pool="rtx"' in expr and 'label_gpu_platform_io_pool="rtx4"' in expr


def test_notebook_gpu_profile_tolerates_the_gpu_taint(full_plan: Plan) -> None:
    hub = full_plan.one(RELEASE, "jupyterhub")
    gpu = next(p for p in hub.inputs["values"]["singleuser"]["profileList"] if p["slug"] == "gpu-rtx")
    assert GPU_TAINT.toleration() in gpu["kubespawner_override"]["tolerations"]
    assert hub.inputs["values"]["singleuser"]["storage"]["dynamic"]["storageClass"] == "linode-block-storage-retain"


def test_secrets_stay_secret(full_plan: Plan) -> None:
    creds = full_plan.one("kubernetes:core/v1:Secret", "checkpoint-credentials")
    assert creds.inputs["stringData"] == "[secret]"
    assert creds.plain_inputs["stringData"]["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value"
    kps = full_plan.one(RELEASE, "kube-prometheus-stack")
    assert "s3cr3t" not in json.dumps(kps.plain_inputs) and "adminPassword" not in json.dumps(kps.plain_inputs)


def test_the_grafana_password_is_made_in_the_cluster_never_in_the_state(full_plan: Plan) -> None:
    """issue 37 item 5: the program generated Grafana's admin password (RandomPassword) and wrote it to a
    Secret of its own, so it sat in the Pulumi state, which a preview token decrypts. Now no resource holds
    it: the grafana subchart generates its admin Secret in the cluster and its pods read it from there."""
    assert not full_plan.by_type("random:index/randomPassword:RandomPassword")
    assert not [r for r in full_plan.by_type("kubernetes:core/v1:Secret") if "grafana" in r.name]
    grafana = full_plan.one(RELEASE, "kube-prometheus-stack").plain_inputs["values"]["grafana"]
    assert grafana["admin"]["existingSecret"] == "" and "adminPassword" not in grafana


def test_identity_based_clouds_get_no_credentials_secret_and_an_annotated_service_account() -> None:
    plan = plan_platform(config({"kubeflow": False, "notebooks": False}), identity_based=True)
    assert not [r for r in plan.by_type("kubernetes:core/v1:Secret") if "checkpoint" in r.name]
    sa = plan.one("kubernetes:core/v1:ServiceAccount", "platform-training")
    assert sa.inputs["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": "trainer@p.iam.gserviceaccount.com"}
    cm = plan.one("kubernetes:core/v1:ConfigMap", "checkpoint-config")
    assert cm.inputs["data"]["CHECKPOINT_URL"] == "s3://ckpt-bucket"


def test_alertmanager_mails_the_stack_alert_emails(full_plan: Plan) -> None:
    kps = full_plan.one(RELEASE, "kube-prometheus-stack")
    am = kps.inputs["values"]["alertmanager"]["config"]
    email = next(r for r in am["receivers"] if r["name"] == "email")
    assert [c["to"] for c in email["email_configs"]] == ["ops@example.com", "ml@example.com"]
    rule = full_plan.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "gpu-spend-run-rate")
    alerts = {r.get("alert"): r["expr"] for r in rule.inputs["spec"]["groups"][0]["rules"]}
    assert alerts["GpuSpendRunRateOver100Percent"].endswith("> 3000")


SHIPPED = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_stack_gets_the_platform_for_its_pools(stack: str) -> None:


    cfg = parse_config(stack_input_from_mapping(stack, stack_config(stack)).raw, stack)
    plan = plan_stack(stack)
    platform = plan.one("gpu-platform:platform:MlPlatform")
    assert platform.name == "platform"
    p = cfg.platform
    releases = {r.inputs["name"]: r.inputs for r in plan.by_type(RELEASE) if r.name.startswith("platform-")}
    for rel_name, inputs in releases.items():
        assert inputs["version"] == versions.ALL_CHARTS[rel_name].version
    flavors = {r.inputs["metadata"]["name"]: r.inputs["spec"]
               for r in plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor")}
    if p.queue:
        # A flavor per GPU pool, and the system nodes' flavor for CPU-only work (no GPU quota).
        assert sorted(flavors) == sorted([pool.name for pool in cfg.gpu_pools] + ["system"])
        cqs = plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
        quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}["nvidia.com/gpu"]
                  for cq in cqs for f in cq.inputs["spec"]["resourceGroups"][0]["flavors"]}
        specs = {s.name: s for s in gpu_pool_specs(cfg)}
        assert quotas == {"system": "0", **{n: str(p.gpu_quota.get(n, specs[n].max_gpus)) for n in specs}}
        for name, spec in flavors.items():
            if name != "system":
                assert GPU_TAINT.toleration() in spec["tolerations"]
    else:
        assert not flavors
    if p.notebooks:
        profiles = releases["jupyterhub"]["values"]["singleuser"]["profileList"]
        gpu_profiles = [x for x in profiles if x["slug"].startswith("gpu-")]
        assert len(gpu_profiles) == len(cfg.gpu_pools)
        for x in gpu_profiles:
            assert GPU_TAINT.toleration() in x["kubespawner_override"]["tolerations"]
    if p.monitoring:
        plan.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule", "gpu-spend-run-rate")


def test_checkpointed_runtime_is_registered_after_the_trainer_release(full_plan: Plan) -> None:
    """The example's runtime is the program's own object; its CRD and the runtime webhook come with
    the Trainer release, so it is applied after it."""
    trainer = full_plan.one(RELEASE, "platform-kubeflow-trainer")
    runtime = full_plan.one("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime",
                            "platform-kubeflow-checkpointed-runtime")
    assert runtime.inputs["metadata"]["name"] == "torch-checkpointed"
    assert trainer.urn in runtime.dependencies
