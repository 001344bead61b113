"""cloud: kubernetes, the platform on a cluster the stack does not create (issue 36 item 1).

The example stack stacks/Pulumi.onprem-dev.yaml and variants of it: config errors that name the key and the file,
the kubeconfig (where it comes from, what is wrong with it, never its credentials), what the program registers
(no cloud resource, the platform's releases, the provider's identity, the node-groups ConfigMap, the checkpoint
store), the cluster-fit model and check, the policy pack, and the bill with and without node prices.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpu_platform.config.base import ConfigError
from gpu_platform.config.kubernetes import (
    KubeconfigError, KubeconfigSource, check_kubeconfig, kubeconfig_source,
)
from gpu_platform.config.stack import config_warnings, parse_config
from gpu_platform.preflight.runner import (
    SECRET_SIG, SIG_KEY, Plan, ProgramError, run_program, stack_input_from_mapping,
)
from tests.conftest import plan_stack, stack_config

STACK = "onprem-dev"
FILE = "stacks/Pulumi.onprem-dev.yaml"
TOKEN = "s3cr3t-t0ken-d0-not-print"
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters:
- name: onprem-a
  cluster:
    server: https://10.0.0.10:6443
    certificate-authority-data: LS0tLS1CRUdJTg==
contexts:
- name: onprem-a-admin
  context: {{cluster: onprem-a, user: admin}}
- name: elsewhere
  context: {{cluster: onprem-a, user: admin}}
current-context: elsewhere
users:
- name: admin
  user:
    token: {TOKEN}
"""


def config(**changes: Any) -> dict[str, Any]:
    """The example stack's config with `changes` (bare keys, e.g. kubernetes=...; None deletes)."""
    cfg = stack_config(STACK)
    for key, value in changes.items():
        full = f"gpu-platform:{key}"
        if value is None:
            cfg.pop(full, None)
        else:
            cfg[full] = value
    return cfg


def section(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(stack_config(STACK)["gpu-platform:kubernetes"])
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def errors(cfg: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping(STACK, cfg).raw, STACK)
    message = str(err.value)
    assert FILE in message, message
    return message


def unpriced() -> dict[str, Any]:
    types = copy.deepcopy(section()["nodeTypes"])
    for t in types.values():
        t.pop("usdPerHour", None)
    return config(kubernetes=section(nodeTypes=types))


def plan_of(cfg: dict[str, Any], extra: dict[str, str] | None = None, secret: tuple[str, ...] = (),
            drop: tuple[str, ...] = ()) -> Plan:
    si = stack_input_from_mapping(STACK, cfg)
    for key in drop:
        si.config.pop(key, None)
        si.secret_keys.discard(key)
    si.config.update(extra or {})
    si.secret_keys -= set(extra or {})  # preflight's stand-in for a run-time credential is a secret; these may not be
    si.secret_keys |= set(secret)
    return run_program(si)


def node_groups(plan: Plan) -> dict[str, dict[str, Any]]:
    (cm,) = [r for r in plan.by_type("kubernetes:core/v1:ConfigMap")
             if r.plain_inputs["metadata"]["name"] == "node-groups"]
    assert cm.plain_inputs["metadata"]["namespace"] == "gpu-platform"
    return {g["name"]: g for g in json.loads(cm.plain_inputs["data"]["node-groups.json"])["nodeGroups"]}


def releases(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r.plain_inputs["name"]: r.plain_inputs for r in plan.by_type("kubernetes:helm.sh/v3:Release")}


# ---------------------------------------------------------------------------------------------
# The config: the example is valid, and every mistake names its key and the file
# ---------------------------------------------------------------------------------------------


def test_the_example_stack_is_valid_and_warns_only_of_its_placeholder_alert_address():
    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    assert cfg.cloud == "kubernetes" and cfg.kubernetes.cluster_name == "onprem-a"
    assert [w.split(":", 1)[0] for w in config_warnings(cfg)] == ["alertEmails[0] ml-platform-alerts@example.com"]


@pytest.mark.parametrize("change,key,allowed", [
    # a GPU pool on a node type without a GPU count
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"], "dgx-a100-4x": {"vcpus": 64, "memoryGib": 512}})),
     "gpu-platform:gpuPools[0].instanceType", "is a node type without GPUs"),
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"],
                                                  "dgx-a100-4x": {"gpus": 4, "vcpus": 64, "memoryGib": 512}})),
     "gpu-platform:kubernetes.nodeTypes.dgx-a100-4x", "gpuModel with gpus above 0"),
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"],
                                                  "dgx-a100-4x": {"catalog": "aws/g5.12xlarge", "vcpus": 48}})),
     "gpu-platform:kubernetes.nodeTypes.dgx-a100-4x", "either catalog or the node's own"),
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"], "dgx-a100-4x": {"catalog": "aws/p9.huge"}})),
     "gpu-platform:kubernetes.nodeTypes.dgx-a100-4x.catalog", "a aws type of the price catalog"),
    (lambda: config(kubernetes=section(gpuDevicePlugin=None)), "gpu-platform:kubernetes.gpuDevicePlugin", "required"),
    (lambda: config(kubernetes=section(autoscaler=None)), "gpu-platform:kubernetes.autoscaler", "required"),
    (lambda: config(kubernetes=section(autoscaler="keda")), "gpu-platform:kubernetes.autoscaler", "karpenter"),
    (lambda: config(kubernetes=section(storageClass=None)), "gpu-platform:kubernetes.storageClass", "required"),
    (lambda: config(kubernetes=None), "gpu-platform:kubernetes", "required when cloud is kubernetes"),
    (lambda: config(kubernetesVersion=None), "gpu-platform:kubernetesVersion", "the minor your cluster runs"),
    (lambda: config(adminCidrs=["203.0.113.0/24"]), "gpu-platform:adminCidrs", "empty on cloud kubernetes"),
    (lambda: config(alertEmails=[]), "gpu-platform:alertEmails", "at least one address on cloud kubernetes"),
    (lambda: config(priceOverrides={"dgx-a100-4x": {"onDemand": 5}}), "gpu-platform:priceOverrides.dgx-a100-4x",
     "kubernetes.nodeTypes.<type>.usdPerHour"),
    (lambda: config(checkpointBucket={"onDestroy": "delete"}), "gpu-platform:checkpointBucket.onDestroy",
     "the program never creates, empties or deletes it"),
    (lambda: config(gpuPools=[{**config()["gpu-platform:gpuPools"][0], "capacity": "preemptible"}]),
     "gpu-platform:gpuPools[0].capacity", "one of spot, on-demand on cloud kubernetes"),
    # prices for some node groups only: a bill of part of the cluster would read as the whole
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"],
                                                  "cpu-16": {"vcpus": 16, "memoryGib": 64}})),
     "gpu-platform:kubernetes.nodeTypes.cpu-16.usdPerHour.onDemand", "a price for every node group or for none"),
    (lambda: config(kubernetes=section(pools={"h100": {"zones": ["a"]}})), "gpu-platform:kubernetes.pools.h100",
     "the name of a pool in gpuPools"),
    (lambda: config(kubernetes=section(pools={"a100": {"taints": [{"key": "nvidia.com/gpu", "value": "x",
                                                                   "effect": "NoSchedule"}]}})),
     "gpu-platform:kubernetes.pools.a100.taints[0].key", "a taint other than nvidia.com/gpu"),
    (lambda: config(kubernetes=section(systemPool={"instanceType": "dgx-a100-4x", "minNodes": 1, "maxNodes": 1})),
     "gpu-platform:kubernetes.systemPool.instanceType", "a node type without GPUs"),
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"], "cpu-16": {
        **section()["nodeTypes"]["cpu-16"], "allocatable": {"cpu": "17", "memory": "60Gi"}}})),
     "gpu-platform:kubernetes.nodeTypes.cpu-16.allocatable.cpu", "at most the node's 16 vCPUs"),
    (lambda: config(kubernetes=section(nodeTypes={**section()["nodeTypes"], "cpu-16": {
        **section()["nodeTypes"]["cpu-16"], "allocatable": {"cpu": "lots", "memory": "60Gi"}}})),
     "gpu-platform:kubernetes.nodeTypes.cpu-16.allocatable.cpu", "a Kubernetes quantity"),
    (lambda: config(kubernetes=section(checkpointStore={"endpoint": "http://minio.example.internal:9000",
                                                        "bucket": "ckpt"})),
     "gpu-platform:kubernetes.checkpointStore.endpoint", "https"),
    (lambda: config(kubernetes=section(clusterName="On Prem")), "gpu-platform:kubernetes.clusterName", "DNS-1123"),
    # the network: required, so the platform's connections are checked against the cluster's own CNI
    (lambda: config(kubernetes=section(network=None)), "gpu-platform:kubernetes.network",
     "required on cloud kubernetes: {cni: cilium | calico | other-upstream | none"),
    (lambda: config(kubernetes=section(network={**section()["network"], "cni": "flannel"})),
     "gpu-platform:kubernetes.network.cni", "'cilium', 'calico', 'other-upstream' or 'none'"),
    (lambda: config(kubernetes=section(network={**section()["network"], "cni": "calico"})),
     "gpu-platform:kubernetes.network.cilium", "only with cni: cilium"),
    (lambda: config(kubernetes=section(network={"cni": "calico", "nodeCidrs": ["10.20.0.0/24"],
                                                "apiServer": {"onNodes": True, "port": 6443}})),
     "gpu-platform:kubernetes.network.podCidrs", "at least one CIDR with cni calico"),
    (lambda: config(kubernetes=section(network={"cni": "calico", "podCidrs": ["10.244.0.0/16"],
                                                "nodeCidrs": ["10.20.0.0/24"]})),
     "gpu-platform:kubernetes.network.apiServer", "{onNodes, port} with cni calico"),
    (lambda: config(kubernetes=section(network={**section()["network"], "apiServer": {"onNodes": True}})),
     "gpu-platform:kubernetes.network.apiServer.port", "required"),
    (lambda: config(kubernetes=section(network={**section()["network"], "apiServer": {
        "onNodes": True, "port": 6443, "cidrs": ["10.30.0.10/32"]}})),
     "gpu-platform:kubernetes.network.apiServer.cidrs[0]", "a range inside nodeCidrs (10.20.0.0/24)"),
    (lambda: config(kubernetes=section(network={**section()["network"], "apiServer": {"onNodes": False, "port": 443}})),
     "gpu-platform:kubernetes.network.apiServer.cidrs", "with onNodes: false"),
    (lambda: config(kubernetes=section(network={**section()["network"], "podCidrs": ["10.244.0.1/16"]})),
     "gpu-platform:kubernetes.network.podCidrs[0]", "no host bits set"),
    (lambda: config(kubernetes=section(network={**section()["network"], "cilium": {"policyCidrMatchMode": ["world"]}})),
     "gpu-platform:kubernetes.network.cilium.policyCidrMatchMode[0]", "'nodes' or 'pods'"),
], ids=["pool-type-without-gpus", "gpus-without-model", "catalog-and-own", "unknown-catalog-type", "no-device-plugin-choice",
        "no-autoscaler-choice", "unknown-autoscaler",
        "no-storage-class", "no-section", "no-version", "admin-cidrs", "no-alert-emails", "price-overrides", "delete-bucket", "preemptible",
        "some-prices", "unknown-pool", "gpu-taint-again", "gpu-system-pool", "allocatable-above-capacity",
        "allocatable-not-a-quantity", "http-endpoint", "cluster-name", "no-network", "unknown-cni", "cilium-settings-on-calico",
        "no-pod-cidrs", "no-api-server", "no-api-server-port", "api-server-off-the-nodes", "api-server-elsewhere-without-address",
        "pod-cidr-host-bits", "unknown-cidr-match-mode"])
def test_a_mistake_names_the_key_the_file_and_what_is_allowed(change, key, allowed):
    message = errors(change())
    line = next((ln for ln in message.splitlines() if ln.strip().startswith(f"{key}:")), None)
    assert line is not None, message
    assert allowed in line, message


def test_http_to_a_service_inside_the_cluster_is_allowed():
    store = {"endpoint": "http://minio.minio.svc.cluster.local:9000", "bucket": "ckpt"}
    cfg = parse_config(stack_input_from_mapping(STACK, config(kubernetes=section(checkpointStore=store))).raw, STACK)
    assert cfg.kubernetes.checkpoint_store.url == "s3://ckpt"


def test_without_prices_allocatable_or_checkpoint_store_the_config_warns():
    types = {"dgx-a100-4x": {"gpus": 4, "gpuModel": "NVIDIA A100 80GB", "vcpus": 64, "memoryGib": 512},
             "cpu-16": {"vcpus": 16, "memoryGib": 64}}
    cfg = parse_config(stack_input_from_mapping(STACK, config(kubernetes=section(
        nodeTypes=types, checkpointStore=None))).raw, STACK)
    text = "\n".join(config_warnings(cfg))
    assert "no usdPerHour on any node type" in text
    assert "no allocatable given" in text and "cpu-16, dgx-a100-4x" in text
    assert "kubernetes.checkpointStore is not set" in text


def test_a_minor_past_upstream_support_is_a_warning_not_an_error():
    cfg = parse_config(stack_input_from_mapping(STACK, config(kubernetesVersion="1.33")).raw, STACK)
    assert any("1.33 left upstream support on 2026-06-28" in w for w in config_warnings(cfg))


def test_the_gpu_taint_the_config_refuses_is_the_components():
    from gpu_platform.components.cluster import GPU_TAINT
    from gpu_platform.config.kubernetes import GPU_TAINT_KEY

    assert GPU_TAINT.key == GPU_TAINT_KEY


# ---------------------------------------------------------------------------------------------
# The kubeconfig: where it comes from, what is wrong with it, never what is in it
# ---------------------------------------------------------------------------------------------


def test_the_kubeconfig_comes_from_the_config_key_then_kubeconfig_and_nothing_else(tmp_path):
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(KUBECONFIG)
    assert kubeconfig_source(KUBECONFIG, FILE, env={}).text == KUBECONFIG
    by_path = kubeconfig_source(str(path), FILE, env={"KUBECONFIG": "/nowhere"})
    assert by_path.text == KUBECONFIG and by_path.path == str(path)
    from_env = kubeconfig_source(None, FILE, env={"KUBECONFIG": str(path)})
    assert from_env.where == f"$KUBECONFIG ({path})" and from_env.text == KUBECONFIG
    with pytest.raises(KubeconfigError, match=r"no kubeconfig: set kubernetes:kubeconfig .* or \$KUBECONFIG"):
        kubeconfig_source(None, FILE, env={"HOME": str(tmp_path)})
    with pytest.raises(KubeconfigError, match="names 2 files: name one"):
        kubeconfig_source(None, FILE, env={"KUBECONFIG": f"{path}:{path}"})
    with pytest.raises(KubeconfigError, match=r"\$KUBECONFIG \(/nowhere/config\): cannot read it"):
        kubeconfig_source(None, FILE, env={"KUBECONFIG": "/nowhere/config"})


@pytest.mark.parametrize("text,context,fragment", [
    (KUBECONFIG.replace("users:", "users: [\n"), "onprem-a-admin", "not YAML or JSON at line"),
    ("just a word", None, "a path to a file that does not exist, or text that is not a kubeconfig"),
    (KUBECONFIG, None, "it has 2 contexts ('onprem-a-admin', 'elsewhere'): name the one the stack deploys to in "
                       "gpu-platform:kubernetes.context"),
    (KUBECONFIG, "prod", "gpu-platform:kubernetes.context in stacks/Pulumi.onprem-dev.yaml is 'prod'"),
    (KUBECONFIG.replace("user: admin}\n- name: elsewhere", "user: nobody}\n- name: elsewhere"), "onprem-a-admin",
     "names user 'nobody', which is not in its users ('admin')"),
    (KUBECONFIG.replace("server: https://10.0.0.10:6443", "insecure-skip-tls-verify: false"), "onprem-a-admin",
     "cluster 'onprem-a' has no server URL"),
], ids=["yaml-error", "not-a-kubeconfig", "ambiguous-context", "unknown-context", "unknown-user", "no-server"])
def test_a_broken_kubeconfig_is_named_never_shown(text, context, fragment):
    source = KubeconfigSource(f"kubernetes:kubeconfig in {FILE}", text)
    with pytest.raises(KubeconfigError) as err:
        check_kubeconfig(source, context, f"gpu-platform:kubernetes.context in {FILE}")
    assert fragment in str(err.value)
    assert TOKEN not in str(err.value) and "LS0t" not in str(err.value)


def test_a_kubeconfig_nested_50000_levels_deep_is_an_error_not_a_crash():
    """A kubeconfig is the user's own file ($KUBECONFIG or the config key): one nested 50,000 levels deep crashed
    preflight with a segfault (libyaml's parser recurses in C; found 2026-11-30) where it should say what is wrong."""
    import subprocess
    import sys

    script = """
from gpu_platform.config.kubernetes import KubeconfigError, KubeconfigSource, check_kubeconfig
try:
    check_kubeconfig(KubeconfigSource("$KUBECONFIG (/k)", "[" * 50_000 + "]" * 50_000, "/k"), None, "ctx")
except KubeconfigError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "$KUBECONFIG (/k): not a kubeconfig (nested too deeply)", done.stdout


def test_a_good_kubeconfig_names_its_target():
    target = check_kubeconfig(KubeconfigSource("x", KUBECONFIG), "onprem-a-admin", "k")
    assert (target.context, target.cluster, target.user, target.server) == ("onprem-a-admin", "onprem-a", "admin",
                                                                              "https://10.0.0.10:6443")


def test_the_program_deploys_with_the_secret_kubeconfig_and_a_fixed_cluster_identity():
    plan = plan_of(config(), {"kubernetes:kubeconfig": KUBECONFIG}, secret=("kubernetes:kubeconfig",))
    (provider,) = plan.by_type("pulumi:providers:kubernetes")
    wire = provider.wire_inputs
    assert wire["kubeconfig"][SIG_KEY] == SECRET_SIG  # a secret in state, as in the stack file
    assert wire["context"] == "onprem-a-admin"
    # pulumi-kubernetes replaces a provider (and everything through it) when the active cluster's settings change,
    # unless clusterIdentifier is set: a rotated CA must not recreate the platform.
    assert wire["clusterIdentifier"] == "onprem-a"
    assert plan.outputs["apiEndpoint"] == "https://10.0.0.10:6443"
    assert TOKEN not in json.dumps(plan.to_json())


def test_the_program_reads_kubeconfig_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "config"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    plan = plan_of(config(), drop=("kubernetes:kubeconfig",))
    assert plan.outputs["apiEndpoint"] == "https://10.0.0.10:6443"


@pytest.mark.parametrize("extra,secret,fragment", [
    ({"kubernetes:kubeconfig": KUBECONFIG}, (), "a kubeconfig in clear in the stack file"),
    ({"kubernetes:kubeconfig": KUBECONFIG.replace("onprem-a-admin", "other-admin")}, ("kubernetes:kubeconfig",),
     "gpu-platform:kubernetes.context in stacks/Pulumi.onprem-dev.yaml is 'onprem-a-admin', which kubernetes:kubeconfig "
     "in stacks/Pulumi.onprem-dev.yaml does not have"),
    ({"kubernetes:kubeconfig": "{" + KUBECONFIG}, ("kubernetes:kubeconfig",), "not YAML or JSON at line"),
], ids=["in-clear", "wrong-context", "unparsable"])
def test_the_program_stops_on_a_bad_kubeconfig_before_registering_anything(extra, secret, fragment):
    with pytest.raises(ProgramError) as err:
        plan_of(config(), extra, secret=secret)
    assert fragment in str(err.value) and "cloud kubernetes" in str(err.value)
    assert TOKEN not in str(err.value)


def test_the_program_without_any_kubeconfig_says_where_to_put_one(monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(ProgramError, match=r"no kubeconfig: set kubernetes:kubeconfig"):
        plan_of(config(), drop=("kubernetes:kubeconfig",))


# ---------------------------------------------------------------------------------------------
# What the program registers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan() -> Plan:
    return plan_stack(STACK)


def test_nothing_outside_the_cluster_is_created(plan):
    packages = {r.type.split(":", 1)[0] for r in plan.resources if r.custom}
    assert packages <= {"kubernetes", "random", "pulumi"}, packages
    assert {r.type for r in plan.resources if r.type.startswith("pulumi:providers:")} == {"pulumi:providers:kubernetes"}
    # every Kubernetes object goes through the one provider of the stack's kubeconfig
    (provider,) = plan.by_type("pulumi:providers:kubernetes")
    assert all(r.provider and r.provider.startswith(provider.urn) for r in plan.resources
               if r.custom and r.type.startswith("kubernetes:"))


def test_the_whole_platform_is_installed(plan):
    names = set(releases(plan))
    assert {"kueue", "kubeflow-trainer", "jupyterhub", "kube-prometheus-stack", "dcgm-exporter"} <= names, names
    kinds = {r.type for r in plan.resources}
    assert "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue" in kinds
    assert "kubernetes:kustomize/v2:Directory" in kinds  # Kubeflow Pipelines and Katib
    assert "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy" in kinds
    assert plan.outputs["platformParts"] == {p: True for p in ("gpu", "training", "queue", "kubeflow", "notebooks",
                                                                 "monitoring")}


def test_the_device_plugin_is_installed_only_when_asked(plan):
    assert "nvidia-device-plugin" not in releases(plan)  # gpuDevicePlugin: preinstalled
    installed = plan_of(config(kubernetes=section(gpuDevicePlugin="install")))
    values = releases(installed)["nvidia-device-plugin"]["values"]
    assert values["deviceListStrategy"] == "volume-mounts"
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "gpu-platform.io/pool", "operator": "In", "values": ["a100"]}]}]


def test_volumes_come_from_the_named_storage_class(plan):
    rel = releases(plan)
    assert rel["jupyterhub"]["values"]["singleuser"]["storage"]["dynamic"]["storageClass"] == "rook-ceph-block"
    prom = rel["kube-prometheus-stack"]["values"]["prometheus"]["prometheusSpec"]["storageSpec"]
    assert prom["volumeClaimTemplate"]["spec"]["storageClassName"] == "rook-ceph-block"


def test_the_node_groups_are_described_in_the_cluster(plan):
    groups = node_groups(plan)
    assert set(groups) == {"a100", "system"}
    a100 = groups["a100"]
    assert (a100["role"], a100["gpusPerNode"], a100["minNodes"], a100["maxNodes"], a100["capacity"]) == \
        ("gpu", 4, 0, 2, "on-demand")
    assert a100["labels"]["gpu-platform.io/pool"] == "a100"
    assert a100["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert a100["usdPerHour"] == 6.4 and a100["allocatable"] == {"cpu": "63500m", "memory": "500Gi", "pods": 110}
    assert a100["tags"]["on-demand-approved"] == "true" and a100["tags"]["on-demand-approver"]
    assert groups["system"]["labels"] == {"gpu-platform.io/role": "system"} and groups["system"]["gpusPerNode"] == 0


def test_the_checkpoint_store_is_the_users_with_its_keys_as_a_secret(plan):
    data = next(r.plain_inputs["data"] for r in plan.by_type("kubernetes:core/v1:ConfigMap")
                if r.plain_inputs["metadata"]["name"] == "checkpoint-store")
    assert data == {"CHECKPOINT_URL": "s3://ml-checkpoints/onprem-dev",
                    "AWS_ENDPOINT_URL_S3": "https://s3.example.internal:9000", "AWS_REGION": "us-east-1"}
    (secret,) = [r for r in plan.by_type("kubernetes:core/v1:Secret")
                 if r.plain_inputs["metadata"]["name"] == "checkpoint-credentials"]
    assert secret.wire_inputs["stringData"][SIG_KEY] == SECRET_SIG
    assert plan.outputs["checkpointBucket"] == "s3://ml-checkpoints/onprem-dev"


def test_without_a_checkpoint_store_pods_get_no_checkpoint_url():
    plan = plan_of(config(kubernetes=section(checkpointStore=None)))
    data = next(r.plain_inputs["data"] for r in plan.by_type("kubernetes:core/v1:ConfigMap")
                if r.plain_inputs["metadata"]["name"] == "checkpoint-store")
    assert "CHECKPOINT_URL" not in data
    assert not [r for r in plan.by_type("kubernetes:core/v1:Secret")
                if r.plain_inputs["metadata"]["name"] == "checkpoint-credentials"]
    assert plan.outputs.get("checkpointBucket") is None


def test_without_a_checkpoint_store_the_example_job_starts_and_a_job_that_needs_the_url_is_caught(tmp_path, capsys):
    """Without kubernetes.checkpointStore ConfigMap training/checkpoint-store has no CHECKPOINT_URL. The example
    TrainJob read it without `optional`: its pods sat in CreateContainerConfigError, Kueue re-admitted the job about
    four times holding the pool's GPU quota, then deactivated it, and preflight passed. Now the example's reference is
    optional (the program then stops at its start, saying why) and preflight's config-keys check reports a job whose
    reference is not, naming the pod, the key and the ConfigMap."""
    import yaml

    from tests.conftest import ROOT
    from tests.fit_support import need_charts
    from tests.test_hostile_input import run_main

    need_charts()
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{STACK}.yaml").read_text())
    del doc["config"]["gpu-platform:kubernetes"]["checkpointStore"]
    stack_file = tmp_path / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    code, text, _ = run_main(["--stack-file", str(stack_file), "--no-policies", "--out", str(tmp_path / "example")], capsys)
    assert code == 0, text[-3000:]
    assert "[config-keys]" not in text
    example = (ROOT / "examples" / "training" / "trainjob-checkpointed.yaml").read_text()
    strict = example.replace("configMapKeyRef: {name: checkpoint-store, key: CHECKPOINT_URL, optional: true}",
                             "configMapKeyRef: {name: checkpoint-store, key: CHECKPOINT_URL}")
    assert strict != example
    job = tmp_path / "strict.yaml"
    job.write_text(strict)
    code, text, _ = run_main(["--stack-file", str(stack_file), "--no-policies", "--job", str(job),
                              "--out", str(tmp_path / "strict")], capsys)
    assert code == 3, text[-3000:]
    assert ("[config-keys] TrainJob/training/resnet-checkpointed[node] (strict): container node (env CHECKPOINT_URL) reads key "
            "CHECKPOINT_URL of ConfigMap training/checkpoint-store, which the rendered ConfigMap does not have") in text
    assert "holds its queue's quota until Kueue evicts it" in text


def test_the_queue_is_sized_from_the_stated_allocatable(plan):
    from gpu_platform.components.capacity import MI
    from gpu_platform.components.platform.queue import node_share
    from gpu_platform.components.capacity import Allocatable

    (cq,) = [r for r in plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
             if r.plain_inputs["metadata"]["name"] == "gpu-training"]
    resources = {r["name"]: r["nominalQuota"] for f in cq.plain_inputs["spec"]["resourceGroups"][0]["flavors"]
                 for r in f["resources"]}
    share = node_share(Allocatable(63500, 500 * 1024 ** 3, 4, 110))
    assert resources["nvidia.com/gpu"] == "8"  # a string, as the API server returns it
    assert resources["cpu"] == f"{share.cpu_millis * 2}m"
    assert resources["memory"] == f"{share.memory_bytes * 2 // MI}Mi"


def test_a_queued_job_waits_for_the_stated_node_boot(plan):
    from gpu_platform.components.platform.queue import pods_ready_timeouts

    values = releases(plan)["kueue"]["values"]
    text = json.dumps(values)
    timeout, _ = pods_ready_timeouts(12, 10)
    assert f"{timeout}m" in text


def test_the_spend_alert_runs_at_the_stacks_own_prices(plan):
    (rule,) = [r for r in plan.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
               if r.plain_inputs["metadata"]["name"] == "gpu-spend-run-rate"]
    expr = rule.plain_inputs["spec"]["groups"][0]["rules"][0]["expr"]
    assert '{label_gpu_platform_io_pool="a100"}) or vector(0)) * 6.4' in expr


def test_without_prices_there_is_no_spend_alert_and_no_invented_cost():
    plan = plan_of(unpriced())
    assert not [r for r in plan.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
                if r.plain_inputs["metadata"]["name"] == "gpu-spend-run-rate"]
    cost = plan.outputs["costEstimate"]
    assert cost["idleMonthlyUsd"] is None and cost["fullCapacityMonthlyUsd"] is None
    assert cost["unpriced"] == ["gpu pool a100 (dgx-a100-4x, on-demand)", "system nodes (cpu-16, on-demand)"]


# ---------------------------------------------------------------------------------------------
# Cluster fit, on the rendered charts
# ---------------------------------------------------------------------------------------------


def test_the_fit_model_is_the_described_node_groups(plan):
    from gpu_platform.preflight.fit.nodes import cluster_model

    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    model = cluster_model(cfg, plan)
    groups = {g.name: g for g in model.node_groups}
    assert set(groups) == {"a100", "system"}
    a100 = groups["a100"]
    assert (a100.role, a100.min_nodes, a100.max_nodes, a100.instance_type) == ("gpu", 0, 2, "dgx-a100-4x")
    assert (a100.allocatable.cpu_millis, a100.allocatable.memory_bytes, a100.allocatable.gpus, a100.allocatable.pods) == \
        (63500, 500 * 1024 ** 3, 4, 110)
    assert a100.taints == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert groups["system"].labels["gpu-platform.io/role"] == "system" and groups["system"].max_nodes == 2
    assert model.control_plane_ports is None and not model.extended_resource_toleration


def test_a_pool_in_zones_is_one_group_per_zone_and_allocatable_defaults_to_the_kubelets():
    from gpu_platform.preflight.fit.nodes import cluster_model

    types = copy.deepcopy(section()["nodeTypes"])
    types["dgx-a100-4x"].pop("allocatable")
    cfg_map = config(gpuPools=[{**config()["gpu-platform:gpuPools"][0], "maxNodes": 3}],
                     kubernetes=section(nodeTypes=types, pools={"a100": {"zones": ["rack-1", "rack-2"], "taints": [
                         {"key": "example.com/reserved", "value": "ml", "effect": "NoSchedule"}]}}))
    cfg = parse_config(stack_input_from_mapping(STACK, cfg_map).raw, STACK)
    model = cluster_model(cfg, plan_of(cfg_map))
    zonal = sorted((g.zone, g.min_nodes, g.max_nodes) for g in model.node_groups if g.name == "a100")
    assert zonal == [("rack-1", 0, 2), ("rack-2", 0, 1)]
    a100 = next(g for g in model.node_groups if g.name == "a100")
    assert a100.allocatable.cpu_millis == 64000 and a100.allocatable.memory_bytes == 512 * 1024 ** 3 - 100 * 1024 ** 2
    assert {"key": "example.com/reserved", "value": "ml", "effect": "NoSchedule"} in a100.taints


def test_the_platform_fits_the_example_cluster_and_its_nodes_can_be_rehearsed(plan):
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.rehearsal.nodes import node_objects
    from tests.fit_support import need_charts, rendered_copy

    need_charts()
    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    model = cluster_model(cfg, plan)
    rels = rendered_copy(STACK)
    assert {"kueue", "jupyterhub", "kube-prometheus-stack", "kubeflow-trainer"} <= {r.name for r in rels}
    report = check_fit(model, rels)
    assert not report.problems, [(p.check, p.object, p.reason) for p in report.problems]
    # The rehearsal's KWOK nodes are built from the same model (docs/rehearsal.md): one per node at maximum size.
    assert len(node_objects(model)) == sum(g.max_nodes for g in model.node_groups)
    # One small system node is not enough room for the platform: the check says so, as on the clouds.
    smaller = config(kubernetes=section(systemPool={"instanceType": "cpu-16", "minNodes": 1, "maxNodes": 1},
                                        nodeTypes={**section()["nodeTypes"], "cpu-16": {
                                            "vcpus": 2, "memoryGib": 4, "usdPerHour": {"onDemand": 0.05}}}))
    cfg_small = parse_config(stack_input_from_mapping(STACK, smaller).raw, STACK)
    small = check_fit(cluster_model(cfg_small, plan_of(smaller)), rendered_copy(STACK))
    assert any(p.check == "packing" and p.object == "StatefulSet/monitoring/prometheus-kube-prometheus-stack-prometheus"
               and "groups system at maximum size" in p.reason for p in small.problems)


# ---------------------------------------------------------------------------------------------
# Network flows, on the cluster's own CNI as kubernetes.network states it
# ---------------------------------------------------------------------------------------------

# An on-premises kubeadm cluster on Cilium as its chart installs it: no policy-cidr-match-mode, the API server a
# static pod on the control-plane nodes (reached at their addresses, port 6443).
CILIUM_DEFAULTS = {"cni": "cilium", "podCidrs": ["10.244.0.0/16"], "nodeCidrs": ["10.20.0.0/24"],
                   "apiServer": {"onNodes": True, "port": 6443}}
# What the quickstart offers instead of the mode: a CiliumNetworkPolicy letting the hub and the notebooks reach the
# kube-apiserver entity (Cilium Documentation/security/policy/layer3.rst "Entities based").
APISERVER_CNP = {
    "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
    "metadata": {"name": "jupyterhub-to-kube-apiserver", "namespace": "jupyterhub"},
    "spec": {"endpointSelector": {"matchExpressions": [{"key": "component", "operator": "In",
                                                        "values": ["hub", "singleuser-server"]}]},
             "egress": [{"toEntities": ["kube-apiserver"]}]},
}


def _fit_on(plan: Plan, network: dict[str, Any] | None, extra: tuple[dict[str, Any], ...] = ()):
    import dataclasses

    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from tests.fit_support import need_charts, rendered_copy

    need_charts()
    cfg = parse_config(stack_input_from_mapping(STACK, config(kubernetes=section(network=network))).raw, STACK)
    rels = rendered_copy(STACK)
    if extra:
        rels = [dataclasses.replace(r, objects=r.objects + list(extra)) if r.name == "jupyterhub" else r for r in rels]
    return check_fit(cluster_model(cfg, plan), rels)


def _verdicts(report) -> dict[str, str]:
    return {r.name: r.verdict for r in report.flows.results if r.protocol == "TCP"}


def test_on_cilium_defaults_the_hub_cannot_reach_an_api_server_on_the_nodes(plan):
    """z2jh's hub reaches the API server through ipBlock egress only (10/8, 172.16/12, 192.168/16 and the rest);
    Cilium does not match an ipBlock against a node unless policy-cidr-match-mode lists `nodes`
    (zero-to-jupyterhub-k8s#3202, cilium#20550): KubeSpawner cannot create a single pod. Before kubernetes.network,
    cloud kubernetes had no network model: no flow was checked and nothing said so (fit.json flows: null)."""
    report = _fit_on(plan, CILIUM_DEFAULTS)
    assert report.flows is not None, "the flows must be checked on cloud kubernetes"
    verdicts = _verdicts(report)
    assert verdicts["hub to the Kubernetes API"] == "denied"
    assert verdicts["notebook to the Kubernetes API"] == "denied"
    problem = next(p for p in report.by_check("flows") if "flow 'hub to the Kubernetes API'" in p.reason)
    assert problem.object == "NetworkPolicy/jupyterhub/hub" and problem.release == "jupyterhub"
    assert "does not apply ipBlock/CIDR rules to the API server (on the nodes)" in problem.reason
    assert "KubeSpawner" in problem.reason
    # The advice fits what is blocked: the API server is no pod, no selector reaches it.
    assert "select it with podSelector" not in problem.reason and "podSelector/namespaceSelector, not" not in problem.fix
    assert "policy-cidr-match-mode: nodes" in problem.fix and "kubernetes.network.cilium.policyCidrMatchMode" in problem.fix
    assert "egress toEntities: [kube-apiserver]" in problem.fix and "10.20.0.0/24" in problem.fix
    assert "policy-cidr-match-mode: none" in report.flows.dataplane
    # The rest of the platform is unaffected: notebooks reach Pipelines by pod selector.
    assert verdicts["notebook to Pipelines"] == "allowed"


def test_with_policy_cidr_match_mode_nodes_every_flow_passes(plan):
    report = _fit_on(plan, {**CILIUM_DEFAULTS, "cilium": {"policyCidrMatchMode": ["nodes"]}})
    assert not report.by_check("flows"), [p.reason for p in report.by_check("flows")]
    assert _verdicts(report)["hub to the Kubernetes API"] == "allowed"
    assert "policy-cidr-match-mode: nodes" in report.flows.dataplane
    # the quickstart's other way: a CiliumNetworkPolicy to the kube-apiserver entity, the mode left alone
    cnp = _fit_on(plan, CILIUM_DEFAULTS, (APISERVER_CNP,))
    assert not cnp.by_check("flows"), [p.reason for p in cnp.by_check("flows")]


def test_other_cnis_and_a_control_plane_outside_the_nodes(plan):
    # a managed control plane (EKS, GKE) is no node: Cilium matches its address by CIDR as upstream does
    managed = _fit_on(plan, {**CILIUM_DEFAULTS, "apiServer": {"onNodes": False, "port": 443, "cidrs": ["10.20.1.0/28"]}})
    assert not managed.by_check("flows"), [p.reason for p in managed.by_check("flows")]
    # Calico (upstream semantics): an ipBlock matches a node's address
    calico = _fit_on(plan, {**CILIUM_DEFAULTS, "cni": "calico"})
    assert not calico.by_check("flows") and "upstream semantics" in calico.flows.dataplane
    # nothing enforces NetworkPolicies: what the platform keeps closed is open, and preflight says so
    none = _fit_on(plan, {"cni": "none"})
    from tests.test_fit_flows import DATABASE_FLOWS

    kept_closed = {"notebook to the cloud metadata server", *DATABASE_FLOWS}
    assert {r.name for r in none.flows.failed} == kept_closed
    assert "not enforced" in none.flows.dataplane
    # Cilium with enable-policy never enforces nothing either
    never = _fit_on(plan, {**CILIUM_DEFAULTS, "cilium": {"enablePolicy": "never"}})
    assert {r.name for r in never.flows.failed} == kept_closed


# --- kubernetes.network against the cluster, at deploy (platform review 4) ----------------------------------------

def _network(**changes: Any):

    doc = {**copy.deepcopy(section()["network"]), **changes}
    return parse_config(stack_input_from_mapping(STACK, config(kubernetes=section(network=doc))).raw,
                        STACK).kubernetes.network


ENDPOINTS = [{"addresses": ["10.20.0.11"]}, {"addresses": ["10.20.0.12"]}]
PORTS = [{"name": "https", "port": 6443, "protocol": "TCP"}]


def test_the_stack_files_network_is_compared_with_what_the_cluster_says():
    from gpu_platform.components.kubernetes.cluster import network_disagreements

    net = _network()
    assert network_disagreements(net, FILE, {"policy-cidr-match-mode": "nodes"}, ENDPOINTS, PORTS) == []
    # Cilium's defaults: the hub's ipBlock to the API server on the nodes would be dropped
    (mode,) = network_disagreements(net, FILE, {}, ENDPOINTS, PORTS)
    assert mode.startswith(f"gpu-platform:kubernetes.network.cilium.policyCidrMatchMode in {FILE} is ['nodes']")
    assert "kube-system/cilium-config" in mode and "has []" in mode
    (enable,) = network_disagreements(net, FILE, {"policy-cidr-match-mode": "nodes", "enable-policy": "always"},
                                      ENDPOINTS, PORTS)
    assert "kubernetes.network.cilium.enablePolicy" in enable and "'always'" in enable
    port, where = network_disagreements(net, FILE, {"policy-cidr-match-mode": "nodes"},
                                        [{"addresses": ["10.30.0.5"]}], [{"name": "https", "port": 443}])
    assert "kubernetes.network.apiServer.port" in port and "listen on 443" in port
    assert "kubernetes.network.nodeCidrs" in where and "10.30.0.5" in where
    managed = _network(apiServer={"onNodes": False, "port": 6443, "cidrs": ["10.20.1.0/28"]})
    (cidrs,) = network_disagreements(managed, FILE, {"policy-cidr-match-mode": "nodes"}, ENDPOINTS, PORTS)
    assert "kubernetes.network.apiServer.cidrs" in cidrs and "10.20.0.11, 10.20.0.12" in cidrs
    # what was not read is not judged (a CNI other than Cilium has no cilium-config)
    assert network_disagreements(_network(cni="calico", cilium=None), FILE, None, ENDPOINTS, PORTS) == []


def test_the_program_reads_the_network_and_preflight_plans_with_the_stack_files_values(plan):
    """Offline, the mocks answer the reads with the stack file's values (gpu_platform/preflight/mocks/kubernetes.py);
    the node-groups ConfigMap carries what was read, and the platform waits for it."""
    (cm,) = [r for r in plan.by_type("kubernetes:core/v1:ConfigMap") if r.plain_inputs["metadata"]["name"] == "node-groups"]
    assert json.loads(cm.plain_inputs["data"]["network.json"]) == {
        "cilium": {"policyCidrMatchMode": ["nodes"], "enablePolicy": "default"},
        "apiServer": {"addresses": ["10.20.0.1"], "ports": [6443]}}
    trainer = next(r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.plain_inputs["name"] == "kubeflow-trainer")
    assert cm.urn in trainer.dependencies


@pytest.mark.parametrize("read,key", [
    (("kubernetes:core/v1:ConfigMap", "kube-system/cilium-config"),
     "gpu-platform:kubernetes.network.cilium.policyCidrMatchMode"),
    (("kubernetes:discovery.k8s.io/v1:EndpointSlice", "default/kubernetes"),
     "gpu-platform:kubernetes.network.nodeCidrs"),
], ids=["cilium-config", "apiserver-endpoints"])
def test_a_deploy_stops_naming_the_key_where_the_cluster_disagrees(monkeypatch, read, key):
    """Before: kubernetes.network was taken from the stack file only; a cluster on Cilium's defaults (or with its API
    server elsewhere) deployed a platform whose hub could not reach the API server, after preflight had passed."""
    import gpu_platform.preflight.mocks.kubernetes as mocked

    answers = {"kubernetes:core/v1:ConfigMap": {"data": {"policy-cidr-match-mode": ""}},
               "kubernetes:discovery.k8s.io/v1:EndpointSlice": {"endpoints": [{"addresses": ["192.168.7.7"]}],
                                                                 "ports": [{"name": "https", "port": 6443}]}}
    monkeypatch.setitem(mocked.READS, read, lambda _id: answers[read[0]])
    with pytest.raises(ProgramError) as err:
        plan_of(config(), {"kubernetes:kubeconfig": KUBECONFIG}, secret=("kubernetes:kubeconfig",))
    text = str(err.value)
    assert f"{key} in {FILE}" in text and "does not describe the cluster" in text, text
    assert TOKEN not in text


def test_preflight_says_the_network_is_the_stack_files_until_deploy(plan):
    report = _fit_on(plan, section()["network"])
    assert any("is the stack file's, not read from the cluster offline" in n and "default/kubernetes EndpointSlice" in n
               for n in report.flows.notes), report.flows.notes


def _with_endpoint(endpoint: str):
    """The shipped example's render with the checkpoint store at `endpoint`: the checkpoint-store ConfigMap the
    program writes from kubernetes.checkpointStore.endpoint (test_the_checkpoint_store_is_the_users_... checks that
    it does)."""
    import dataclasses

    from tests.fit_support import need_charts, rendered

    need_charts()
    rels = []
    for r in rendered(STACK):
        if not r.rendered:
            continue
        objs = copy.deepcopy(r.objects)
        for o in objs:
            if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "checkpoint-store":
                o["data"]["AWS_ENDPOINT_URL_S3"] = endpoint
        rels.append(dataclasses.replace(r, objects=objs))
    return rels


@pytest.mark.parametrize("endpoint,verdict,destination,port", [
    ("http://minio.minio.svc:9000", "allowed", "Service minio/minio's pods", 9000),
    ("https://192.168.50.10:9000", "allowed", "(https://192.168.50.10:9000)", 9000),
    # On the nodes' network (a MinIO on hostNetwork, the nodes' own disks): training-egress's 0.0.0.0/0 reaches no
    # node on Cilium, even with policy-cidr-match-mode nodes (cilium/cilium#47827)
    ("https://10.20.0.9:9000", "denied", "on the nodes' network", 9000),
    ("https://s3.example.internal:9000", "allowed", "(https://s3.example.internal:9000)", 9000),
], ids=["in-cluster-service", "private-address", "node-address", "host-name"])
def test_the_bucket_flow_goes_to_the_stacks_checkpoint_endpoint(plan, endpoint, verdict, destination, port):
    """platform review 9: the flow assumed the cloud's object storage (public addresses, port 443) whatever
    kubernetes.checkpointStore.endpoint said, so an in-cluster MinIO or one on the nodes' network was judged on
    the wrong address and port (a store on a node's address passed on Cilium, where training cannot reach it)."""
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model

    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    report = check_fit(cluster_model(cfg, plan), _with_endpoint(endpoint))
    (r,) = [r for r in report.flows.results if r.name == "training to the checkpoint bucket"]
    assert (r.verdict, r.port) == (verdict, port), (r.verdict, r.port, r.destination, r.reason)
    assert destination in r.destination, r.destination
    if verdict == "denied":
        problem = next(p for p in report.by_check("flows") if "'training to the checkpoint bucket'" in p.reason)
        assert "NetworkPolicy/training/training-egress" in problem.reason and "10.20.0.9" in problem.fix


def test_preflight_checks_the_flows_of_an_existing_cluster_and_names_the_hub(tmp_path, capsys):
    """Through the command: the shipped example passes with its flows in fit.json and -v; the same stack on Cilium
    defaults exits 3 naming the flow."""
    import yaml

    from tests.fit_support import need_charts
    from tests.test_hostile_input import run_main

    need_charts()
    code, text, _ = run_main([STACK, "--no-policies", "-vv", "--out", str(tmp_path / "ok")], capsys)
    assert code == 0, text[-3000:]
    assert "flows: " in text and "checked on Cilium (kubernetes.network.cni cilium)" in text
    assert "ok   hub to the Kubernetes API" in text
    # Adopter review (issue 37 brief), item 6: -v listed every passing flow (53 lines on gcp-prod); -vv does.
    code, brief, _ = run_main([STACK, "--no-policies", "-v", "--out", str(tmp_path / "ok")], capsys)
    flows = brief.split("  flows: ", 1)[1].split("\n  note: ", 1)[0].splitlines()
    assert code == 0 and "ok   hub to the Kubernetes API" not in brief
    passing = sum(1 for line in text.splitlines() if line.startswith("    ok   "))
    assert any(line.startswith(f"    ok   {passing} flow(s) as the platform needs (") for line in flows), flows
    assert len([line for line in flows if line.startswith("    ok")]) == 1, flows
    fit = json.loads((tmp_path / "ok" / STACK / "fit.json").read_text())
    assert fit["report"]["flows"]["checked"] > 20 and fit["report"]["flows"]["failed"] == 0
    assert fit["model"]["network"]["ciliumPolicyCidrMatchMode"] == ["nodes"]

    from tests.conftest import ROOT

    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{STACK}.yaml").read_text())
    doc["config"]["gpu-platform:kubernetes"]["network"] = CILIUM_DEFAULTS
    stack_file = tmp_path / f"Pulumi.{STACK}.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    code, text, _ = run_main(["--stack-file", str(stack_file), "--no-policies", "--out", str(tmp_path / "bad")], capsys)
    assert code == 3, text[-3000:]
    assert "[flows] NetworkPolicy/jupyterhub/hub (jupyterhub): flow 'hub to the Kubernetes API'" in text
    flows = json.loads((tmp_path / "bad" / STACK / "fit.json").read_text())["report"]["flows"]
    assert {f["name"] for f in flows["flows"] if f["verdict"] == "denied"} >= {"hub to the Kubernetes API"}
    # The quickstart's CiliumNetworkPolicy, given beside the job: the cluster's Cilium serves its kind (no plan
    # installs the CRD), and the hub reaches the API server by its identity.
    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "examples" / "training" / "trainjob-checkpointed.yaml").read_text().rstrip("\n")
                   + "\n---\n" + yaml.safe_dump(APISERVER_CNP))
    code, text, _ = run_main(["--stack-file", str(stack_file), "--no-policies", "--job", str(job),
                              "--out", str(tmp_path / "cnp")], capsys)
    assert code == 0, text[-3000:]


# ---------------------------------------------------------------------------------------------
# The policy pack, over what the program registers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def analyzer():
    from gpu_platform.preflight.analyzer import Analyzer

    with Analyzer(stack=STACK, stack_config=stack_input_from_mapping(STACK, config()).config) as a:
        yield a


def _failing(report) -> dict[str, str]:
    return {r.name: "\n".join(m.message for m in r.messages) for r in report.results if r.status != "pass"}


def test_the_example_passes_the_pack_with_the_cloud_policies_not_applicable(analyzer, plan):
    report = analyzer.analyze(plan)
    assert _failing(report) == {}, report.render()
    assert report.mandatory_violations == 0


@pytest.mark.parametrize("pool,policy,fragment", [
    ({"approvedOnDemand": None}, "gpu-interruptible-capacity",
     "GPU pool 'a100' (kubernetes, dgx-a100-4x) runs on-demand capacity without approval"),
    ({"minNodes": 2}, "gpu-pools-scale-to-zero", "GPU pool 'a100' (kubernetes) has a fixed size of 2 nodes"),
    ({"maxNodes": 20}, "gpu-count-ceiling", "The stack can scale to 80 GPUs (a100: 20 x 4)"),
], ids=["unapproved-on-demand", "fixed-size", "too-many-gpus"])
def test_the_gpu_policies_hold_on_the_described_pools(analyzer, pool, policy, fragment):
    base = config()["gpu-platform:gpuPools"][0]
    changed = {k: v for k, v in {**base, **pool}.items() if v is not None}
    report = analyzer.analyze(plan_of(config(gpuPools=[changed])))
    failing = _failing(report)
    assert policy in failing and fragment in failing[policy], report.render()


def test_the_cost_ceiling_reads_the_stacks_own_prices(analyzer, plan):
    report = analyzer.analyze(plan, {"monthly-cost-ceiling": {"maxMonthlyUsd": 5000}})
    failing = _failing(report)
    assert "At full capacity the stack costs $9,855.00/month, over the ceiling of $5,000" in \
        failing["monthly-cost-ceiling"], report.render()


def test_without_monitoring_a_priced_stack_has_no_budget_alert(analyzer):
    platform = {**config()["gpu-platform:platform"], "monitoring": False}
    report = analyzer.analyze(plan_of(config(platform=platform)))
    assert "GPU capacity on kubernetes but no budget alert" in _failing(report)["budget-alerts-required"]


def test_without_prices_the_cost_policies_have_nothing_to_judge_and_say_nothing_false(analyzer):
    report = analyzer.analyze(plan_of(unpriced()), {"monthly-cost-ceiling": {"maxMonthlyUsd": 1}})
    assert _failing(report) == {}, report.render()


# ---------------------------------------------------------------------------------------------
# The bill: at the stack's own prices, or none
# ---------------------------------------------------------------------------------------------


def _estimate(cfg_map: dict[str, Any]):
    from gpu_platform.costs.estimator import estimate

    cfg = parse_config(stack_input_from_mapping(STACK, cfg_map).raw, STACK)
    return estimate(cfg)


def test_the_bill_is_the_node_groups_at_the_stacks_prices():
    est = _estimate(config())
    assert est.priced
    lines = {ln.name: ln for ln in est.lines}
    gpu = lines["gpu pool a100 (dgx-a100-4x, on-demand)"]
    assert (gpu.unit_usd_per_hour, gpu.idle_monthly_usd, gpu.monthly_usd) == (6.4, 0, 6.4 * 730 * 2)
    assert gpu.source == "stack file: kubernetes.nodeTypes.dgx-a100-4x.usdPerHour.onDemand"
    system = lines["system nodes (cpu-16 x2)"]
    assert system.monthly_usd == pytest.approx(0.35 * 730 * 2)
    assert len(est.lines) == 2  # no control-plane fee, NAT, disks or buckets: the cluster's own bill
    assert est.full_monthly_usd == pytest.approx(9855.0) and est.idle_monthly_usd == pytest.approx(511.0)
    assert (est.idle_gpus, est.full_gpus) == (0, 8)
    assert any("the checkpoint store" in n for n in est.not_modelled)
    assert not any("CloudWatch" in n for n in est.not_modelled)


def test_without_prices_the_report_says_so_instead_of_a_number(tmp_path):
    from gpu_platform.costs import report
    from gpu_platform.preflight import verdict

    est = _estimate(unpriced())
    assert not est.priced and est.full_gpus == 8
    text = report.render_cost_summary(est, 5000)
    assert "NOT ESTIMATED: the stack gives no node prices" in text
    assert "gpu pool a100 (dgx-a100-4x, on-demand)" in text and "kubernetes.nodeTypes.<type>.usdPerHour" in text
    assert "$0" not in text and "not compared" in text
    path = report.write_cost_json(est, tmp_path / "cost.json", 5000)
    doc = json.loads(path.read_text())
    assert doc["priced"] is False and doc["fullMonthlyUsd"] is None and doc["idleMonthlyUsd"] is None
    assert doc["budget"] == {"monthlyBudgetUsd": 5000, "comparable": False} and doc["catalogAge"] is None
    section_ = verdict.cost_section(path)
    rows = dict((label, text) for label, text, _ in verdict.summary_lines({"cost": section_}))
    assert rows["cost"].startswith("NOT ESTIMATED: no node prices")
    assert "not priced / $5,000" in verdict.markdown([{"stack": STACK, "verdict": "pass", "cost": section_}])
    chart = report.chart_data(est, budget_usd=5000)
    assert "NOT ESTIMATED" in chart.title and all(s.style != "stack" for s in chart.series)


def test_a_mix_of_priced_and_unpriced_groups_is_no_bill():
    from gpu_platform.costs.catalog import OWN_NODES
    from gpu_platform.costs.estimator import EstimateError, NodeGroup, PoolShape, StackShape, estimate

    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    catalog = cfg.stack_catalog()
    cpu = catalog.instance(OWN_NODES, "cpu-16")
    import dataclasses

    mixed = catalog.with_instances(OWN_NODES, {"dgx-a100-4x": catalog.instance(OWN_NODES, "dgx-a100-4x"),
                                               "cpu-16": dataclasses.replace(cpu, on_demand=None)})
    shape = StackShape(OWN_NODES, None, (PoolShape("a100", "dgx-a100-4x", "on-demand", 0, 2),),
                       system_nodes=(NodeGroup("system", "cpu-16", 2),))
    with pytest.raises(EstimateError, match="a price for every node group or for none"):
        estimate(shape, mixed)


def test_the_autoscaler_overhead_is_simulated_with_the_stated_boot_time():
    """A boot longer than the scale-down delay (12 min > 10) left the simulator removing a gang's ready node
    while its peer booted, for ever: preflight of the example stack crashed."""
    from gpu_platform.costs.estimator import PoolShape
    from gpu_platform.costs.report import simulated_overhead

    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    over = simulated_overhead("kubernetes", PoolShape("a100", "dgx-a100-4x", "on-demand", 0, 2), cfg.stack_catalog(),
                              scale_up_minutes=12)
    assert over.factor > 1 and "boot 12 min" in over.basis


# ---------------------------------------------------------------------------------------------
# A checkpoint store with a private CA (kubernetes.checkpointStore.caBundle)
# ---------------------------------------------------------------------------------------------


def _ca_pem(days: int = 30) -> str:
    """A CA certificate valid from the (pinned) day before today for `days` days."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from gpu_platform.data.versions_calendar import today

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "onprem-s3-ca")])
    start = datetime.datetime.combine(today() - datetime.timedelta(days=1), datetime.time(), datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _with_ca(pem: str, endpoint: str = "https://s3.example.internal:9000") -> dict[str, Any]:
    return config(kubernetes=section(checkpointStore={**section()["checkpointStore"], "endpoint": endpoint, "caBundle": pem}))


def test_a_private_ca_reaches_the_training_pods_through_the_runtime():
    """Before: an on-prem store had to be https (config) but pods got only AWS_ENDPOINT_URL_S3 and AWS_REGION, so an
    endpoint signed by a private CA failed every checkpoint with a TLS verification error."""
    from gpu_platform.components.cluster import CHECKPOINT_CA_DIR, CHECKPOINT_CA_KEY, CHECKPOINT_CA_PATH

    pem = _ca_pem()
    plan = plan_of(_with_ca(pem))
    maps = {r.plain_inputs["metadata"]["name"]: r.plain_inputs for r in plan.by_type("kubernetes:core/v1:ConfigMap")}
    assert maps["checkpoint-store"]["data"]["AWS_CA_BUNDLE"] == CHECKPOINT_CA_PATH
    assert maps["checkpoint-ca"]["metadata"]["namespace"] == "training"
    assert maps["checkpoint-ca"]["data"] == {CHECKPOINT_CA_KEY: pem}
    (runtime,) = [r.plain_inputs for r in plan.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime")]
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "checkpoint-ca", "configMap": {
        "name": "checkpoint-ca", "items": [{"key": CHECKPOINT_CA_KEY, "path": CHECKPOINT_CA_KEY}]}}]
    (node,) = pod["containers"]
    assert node["volumeMounts"] == [{"name": "checkpoint-ca", "mountPath": CHECKPOINT_CA_DIR, "readOnly": True}]
    assert CHECKPOINT_CA_PATH == f"{CHECKPOINT_CA_DIR}/{CHECKPOINT_CA_KEY}"
    # without a CA: no ConfigMap, no mount, no AWS_CA_BUNDLE (botocore would fail on a path that does not exist)
    plain = plan_of(config())
    names = {r.plain_inputs["metadata"]["name"]: r.plain_inputs for r in plain.by_type("kubernetes:core/v1:ConfigMap")}
    assert "checkpoint-ca" not in names and "AWS_CA_BUNDLE" not in names["checkpoint-store"]["data"]
    (runtime,) = [r.plain_inputs for r in plain.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime")]
    assert "volumes" not in runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_the_example_job_reads_the_ca_bundle_and_the_runtime_mounts_it(plan):
    """The example TrainJob on the stack with a CA: its pod (Trainer's runtime merged with the job) mounts the file
    AWS_CA_BUNDLE names, and every key it reads exists (preflight's fit, config-keys included, has no problem)."""
    import yaml

    from gpu_platform.components.cluster import CHECKPOINT_CA_DIR
    from tests.conftest import ROOT

    job = yaml.safe_load((ROOT / "examples" / "training" / "trainjob-checkpointed.yaml").read_text())
    env = {e["name"]: e for e in job["spec"]["trainer"]["env"]}
    assert env["AWS_CA_BUNDLE"]["valueFrom"]["configMapKeyRef"] == {"name": "checkpoint-store", "key": "AWS_CA_BUNDLE",
                                                                   "optional": True}
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.fit.render import render_plan
    from tests.fit_support import CHART_DIRS, need_charts

    need_charts()
    cfg_map = _with_ca(_ca_pem())
    cfg = parse_config(stack_input_from_mapping(STACK, cfg_map).raw, STACK)
    ca_plan = plan_of(cfg_map)
    rels = render_plan(ca_plan, CHART_DIRS, kubernetes_version=cfg.kubernetes_version, base=ROOT)
    report = check_fit(cluster_model(cfg, ca_plan), rels)
    assert not report.problems, [(p.check, p.object, p.reason) for p in report.problems]
    from gpu_platform.preflight.fit.pods import pod_templates

    templates, _issues = pod_templates(rels)
    (pt,) = [t for t in templates if t.owner.startswith("TrainJob/training/resnet-checkpointed")]
    (node,) = [c for c in pt.containers() if c["name"] == "node"]
    assert {"name": "checkpoint-ca", "mountPath": CHECKPOINT_CA_DIR, "readOnly": True} in node.get("volumeMounts", [])


@pytest.mark.parametrize("bundle,endpoint,fragment", [
    ("not a certificate", None, "PEM certificates (-----BEGIN CERTIFICATE-----"),
    ("-----BEGIN CERTIFICATE-----\nMIIBbroken\n-----END CERTIFICATE-----\n", None,
     "X.509 certificates; certificate 1 of 1 is not one"),
    ("-----BEGIN X509 CRL-----\nMIIB\n-----END X509 CRL-----\n", None, "CERTIFICATE blocks only; block 1 of 1 is X509 CRL"),
    (None, "http://minio.minio.svc:9000", "only with an https endpoint"),
], ids=["not-pem", "corrupt-certificate", "not-a-certificate", "http-endpoint"])
def test_a_bad_ca_bundle_names_the_key_and_never_shows_it(bundle, endpoint, fragment):
    pem = bundle if bundle is not None else _ca_pem()
    message = errors(_with_ca(pem, endpoint or "https://s3.example.internal:9000"))
    line = next(ln for ln in message.splitlines() if ln.strip().startswith("gpu-platform:kubernetes.checkpointStore.caBundle:"))
    assert fragment in line, message
    assert "not shown" in line and "MIIB" not in message


def test_a_private_key_in_the_ca_bundle_is_refused_without_quoting_it():
    from gpu_platform.rehearsal.pki import CA

    ca = CA.new("onprem-s3-ca")
    _cert, key = ca.issue("s3.example.internal", dns=["s3.example.internal"])
    body = key.decode().splitlines()[1]
    message = errors(_with_ca(ca.cert_pem.decode() + key.decode()))
    assert "gpu-platform:kubernetes.checkpointStore.caBundle" in message and "PRIVATE KEY block" in message
    assert body not in message and body[:12] not in message


def test_an_expired_certificate_in_the_bundle_is_a_warning(monkeypatch):
    pem = _ca_pem(days=2)
    cfg = parse_config(stack_input_from_mapping(STACK, _with_ca(pem)).raw, STACK)
    assert [w for w in config_warnings(cfg) if not w.startswith("alertEmails[")] == []
    import datetime

    from gpu_platform.data.versions_calendar import today

    later = (today() + datetime.timedelta(days=40)).isoformat()
    monkeypatch.setenv("GPU_PLATFORM_TODAY", later)
    (warning,) = [w for w in config_warnings(cfg) if "caBundle" in w]
    assert "certificate 1 (CN=onprem-s3-ca) is valid" in warning and "not today" in warning


# ---------------------------------------------------------------------------------------------
# A cluster other teams share: their GPU pods, the autoscaler that removes nodes, GPU isolation
# ---------------------------------------------------------------------------------------------

VAP_TYPES = ("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy",
             "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


def _admission_objects(plan: Plan) -> list[dict[str, Any]]:
    """The policies and bindings the plan registers, as the API server would hold them."""
    from gpu_platform.preflight.fit.render import _plain_object

    return [_plain_object(r) for t in VAP_TYPES for r in plan.by_type(t)]


def _inference_pod() -> dict[str, Any]:
    """Another team's GPU Deployment's pod, as the ReplicaSet controller creates it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "llm-7d9-abc", "namespace": "inference", "labels": {"app": "llm"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llm-7d9", "uid": "y",
                             "controller": True}]},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def test_other_teams_gpu_pods_are_theirs_on_a_shared_cluster_and_refused_on_the_stacks_own(plan):
    """Before: the GPU pod policy was bound cluster-wide on cloud kubernetes too, refusing every other tenant's GPU
    Deployment and a preinstalled GPU operator's validator pod (gpu-operator validator/manifests/
    plugin-workload-validation.yaml asks for one nvidia.com/gpu). Evaluated as preflight's fit evaluates the plan."""
    from gpu_platform.preflight.fit import admission_policy

    objects = _admission_objects(plan)
    inference = {"kubernetes.io/metadata.name": "inference"}
    assert admission_policy.refusal(objects, _inference_pod(), "pods", inference, REPLICASET_CONTROLLER) is None
    validator = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nvidia-device-plugin-validator-x",
                                                                 "namespace": "gpu-operator"},
                 "spec": {"initContainers": [{"name": "plugin-validation", "image": "x",
                                              "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                          "containers": [{"name": "c", "image": "x"}]}}
    assert admission_policy.refusal(objects, validator, "pods", {"kubernetes.io/metadata.name": "gpu-operator"},
                                    "system:serviceaccount:gpu-operator:nvidia-operator-validator") is None
    # In the platform's own namespaces the queue still decides: an unqueued GPU pod in `jupyterhub` is refused.
    mine = copy.deepcopy(_inference_pod())
    mine["metadata"]["namespace"] = "jupyterhub"
    said = admission_policy.refusal(objects, mine, "pods", {"kubernetes.io/metadata.name": "jupyterhub",
                                                            "gpu-platform.io/queue": "enabled"}, REPLICASET_CONTROLLER)
    assert said and "gpu-pods-through-the-queue" in said and "not queued by Kueue" in said
    # On a cluster the stack creates nothing else asks for GPUs: the same pod is refused.
    gcp = _admission_objects(plan_stack("gcp-prod"))
    said = admission_policy.refusal(gcp, _inference_pod(), "pods", inference, REPLICASET_CONTROLLER)
    assert said and "namespace inference is not queued" in said, said


def _runtime_annotations(plan: Plan) -> list[dict[str, str]]:
    (runtime,) = plan.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime")
    return [rj["template"]["spec"]["template"].get("metadata", {}).get("annotations", {})
            for rj in runtime.plain_inputs["spec"]["template"]["spec"]["replicatedJobs"]]


def _training_job(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "j", "namespace": "training", "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {"template": {"metadata": {"annotations": annotations}, "spec": {"restartPolicy": "Never", "containers": [
            {"name": "t", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                      "limits": {"nvidia.com/gpu": "1"}}}]}}}}


def test_on_karpenter_the_trainers_carry_do_not_disrupt_and_a_job_must_too(plan):
    """Before: the runtime and the policy knew only cluster-autoscaler's safe-to-evict, which Karpenter ignores
    (karpenter.sh "Well-Known Annotations": karpenter.sh/do-not-disrupt alone blocks consolidation of the pod's
    node), so Karpenter consolidated a node under a running trainer."""
    from gpu_platform.components.platform.training import render_training_namespace
    from gpu_platform.preflight.fit import admission_policy

    training = render_training_namespace()["metadata"]["labels"]
    assert _runtime_annotations(plan) == [{"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}]
    karpenter = plan_of(config(kubernetes=section(autoscaler="karpenter")))
    assert _runtime_annotations(karpenter) == [{"karpenter.sh/do-not-disrupt": "true"}]
    objects = _admission_objects(karpenter)
    said = admission_policy.refusal(objects, _training_job({"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}),
                                    "jobs", training)
    assert said and 'karpenter.sh/do-not-disrupt: "true"' in said and "Karpenter's consolidation" in said, said
    assert admission_policy.refusal(objects, _training_job({"karpenter.sh/do-not-disrupt": "true"}), "jobs",
                                    training) is None
    # none: nothing removes a node on its own; no annotation is asked for
    none = plan_of(config(kubernetes=section(autoscaler="none")))
    names = {o["metadata"]["name"] for o in _admission_objects(none)}
    assert "training-pods-survive-scale-down" not in names and "gpu-pods-through-the-queue" in names
    assert admission_policy.refusal(_admission_objects(none), _training_job({}), "jobs", training) is None


def test_fit_judges_the_trainers_by_the_stacks_autoscaler_and_names_what_the_cluster_owner_must_set(plan):
    """Fit's scale-down check asks for the annotation the stated autoscaler honours (before: safe-to-evict and
    "cluster-autoscaler keeps their nodes" whatever the stack said), and its notes say what a shared cluster
    leaves to its owner: other tenants' GPU pods, and GPU isolation with a preinstalled device plugin."""
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.fit.render import _plain_object
    from tests.fit_support import need_charts, rendered_copy

    need_charts()
    cfg = parse_config(stack_input_from_mapping(STACK, config()).raw, STACK)
    report = check_fit(cluster_model(cfg, plan), rendered_copy(STACK))
    assert not report.problems, [(p.check, p.object, p.reason) for p in report.problems]
    assert any("cluster-autoscaler.kubernetes.io/safe-to-evict=false: cluster-autoscaler keeps" in n for n in report.notes)
    isolation = [n for n in report.notes if "gpuDevicePlugin preinstalled" in n]
    assert isolation and "DEVICE_LIST_STRATEGY=volume-mounts" in isolation[0] and \
        "accept-nvidia-visible-devices-envvar-when-unprivileged=false" in isolation[0]
    assert any("GPU pool(s) a100 carry only the taint nvidia.com/gpu=present:NoSchedule" in n for n in report.notes)

    # Karpenter: the shipped runtime (safe-to-evict) does not keep the node; the karpenter plan's runtime does.
    kcfg_map = config(kubernetes=section(autoscaler="karpenter", gpuDevicePlugin="install",
                                         pools={"a100": {"taints": [{"key": "gpu-platform.io/reserved", "value": "true",
                                                                     "effect": "NoSchedule"}]}}))
    kcfg = parse_config(stack_input_from_mapping(STACK, kcfg_map).raw, STACK)
    kplan = plan_of(kcfg_map)
    model = cluster_model(kcfg, kplan)
    found = [p for p in check_fit(model, rendered_copy(STACK)).problems
             if p.check == "scale-down"]
    assert found and 'karpenter.sh/do-not-disrupt: "true"' in found[0].reason and "Karpenter" in found[0].reason
    (runtime,) = [_plain_object(r) for r in kplan.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime")]
    releases = rendered_copy(STACK)
    for rel in releases:
        rel.objects = [runtime if o.get("kind") == "ClusterTrainingRuntime" else o for o in rel.objects]
    report = check_fit(model, releases)
    assert not [p for p in report.problems if p.check == "scale-down"]
    assert any("karpenter.sh/do-not-disrupt=true: Karpenter keeps their nodes" in n for n in report.notes)
    assert not any("gpuDevicePlugin preinstalled" in n for n in report.notes)  # the platform's own device plugin
    assert not any("carry only the taint" in n for n in report.notes)  # a taint only the platform tolerates


def test_missing_checkpoint_credentials_stop_the_program_before_any_resource(monkeypatch):
    """The engine run (issue 36) found onprem-dev without checkpoint-store:accessKeyId stopping with
    'Missing required configuration variable' only after its Namespace and ConfigMap were created: the
    credentials were read after them. Now they are read before anything is registered."""
    import pulumi

    registered: list[str] = []
    real_init = pulumi.CustomResource.__init__

    def recording_init(self, t, name, *a, **kw):
        registered.append(f"{t} {name}")
        return real_init(self, t, name, *a, **kw)

    real_require = pulumi.Config.require_secret

    def missing(self, key):
        if self.name == "checkpoint-store":
            raise pulumi.ConfigMissingError(f"checkpoint-store:{key}", True)
        return real_require(self, key)

    monkeypatch.setattr(pulumi.CustomResource, "__init__", recording_init)
    monkeypatch.setattr(pulumi.Config, "require_secret", missing)
    with pytest.raises(ProgramError, match="checkpoint-store:accessKeyId"):
        plan_of(config())
    assert registered == []


def test_the_quickstart_names_every_namespace_and_priority_class_the_platform_creates_on_an_existing_cluster():
    """On a cluster the stack does not create, `pulumi up` stops with AlreadyExists on an object the cluster already
    has (pulumi-kubernetes 4.29+): docs/quickstart-kubernetes.md lists the cluster-wide names that must not exist
    yet, and this keeps the list the plan's."""
    import re

    from tests.conftest import ROOT, shipped_plan

    made = {(r.type.rsplit(":", 1)[-1], ((r.inputs or {}).get("metadata") or {}).get("name"))
            for r in shipped_plan("onprem-dev").resources if r.type in ("kubernetes:core/v1:Namespace",
                                                                        "kubernetes:scheduling.k8s.io/v1:PriorityClass")}
    text = (ROOT / "docs" / "quickstart-kubernetes.md").read_text()
    section = re.search(r"The namespaces it\s+creates \((.*?)\) and its PriorityClass `([^`]+)`", text, re.S)
    assert section, "the quickstart no longer lists the names that must not exist"
    listed = {("Namespace", n) for n in re.findall(r"`([^`]+)`", section.group(1))} | {("PriorityClass", section.group(2))}
    assert listed == made, (sorted(listed - made), sorted(made - listed))
