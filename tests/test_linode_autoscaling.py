"""Autoscaled Linode GPU pools wired into the program: config rules, the plan (pool definition,
provider, cluster-autoscaler on externalgrpc with mutual TLS, the destroy hook), the policy pack and
the cost model, run offline under preflight's mocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.components.linode import node_groups
from gpu_platform.controllers.linode_node_groups import settings as service_settings
from gpu_platform.preflight.fit.render import render_plan
from tests.conftest import plan_config, stack_config

ROOT = Path(__file__).resolve().parent.parent
CHARTS = ROOT.parent / "shared" / "charts"
IMAGE = "ghcr.io/example/gpu-platform-linode-node-groups@sha256:" + "ab" * 32
INSTANCE = "linode:index/instance:Instance"


def gp(raw: dict) -> dict:
    return {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpu-platform:")}


def with_image(raw: dict, image: str = IMAGE) -> dict:
    # The provider's token expiry is required once it runs (linode.nodeGroups.apiTokenExpires).
    raw["gpu-platform:linode"]["nodeGroups"] = {"image": image, "apiTokenExpires": "2027-05-03"}
    return raw


@pytest.fixture(scope="module")
def plan():
    return plan_config(with_image(stack_config("linode-dev")), "linode-dev")


@pytest.fixture(scope="module")
def plan_without_image():
    """linode-dev as shipped: no published digest, so the provider's image is built into its registry."""
    return plan_config(stack_config("linode-dev"), "linode-dev")


def test_linode_dev_ships_a_gpu_pool_that_scales_to_zero():
    cfg = parse_config(gp(stack_config("linode-dev")), "linode-dev")
    assert [(p.min_nodes, p.max_nodes) for p in cfg.gpu_pools] == [(0, 1)]
    assert cfg.linode.scale_down_grace_minutes == 15


def test_autoscaled_linode_pools_need_an_autoscaler_that_reads_node_bytes():
    raw = gp(stack_config("linode-dev"))
    raw["kubernetesVersion"] = "1.33"
    raw["linode"]["controlPlaneVersion"] = "1.33"
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "linode-dev")
    text = str(err.value)
    assert "gpuPools[0].minNodes" in text and "1.34" in text and "stacks/Pulumi.linode-dev.yaml" in text


def test_autoscaled_pools_behind_the_ha_api_balancer_are_refused():
    raw = gp(stack_config("linode-dev"))
    raw["linode"]["controlPlane"]["count"] = 3
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "linode-dev")
    assert "gpuPools[0].minNodes" in str(err.value) and "NodeBalancer" in str(err.value)


def test_a_provider_image_not_by_digest_is_refused_with_the_key():
    raw = gp(stack_config("linode-dev"))
    raw["linode"]["nodeGroups"] = {"image": "ghcr.io/example/gpu-platform-linode-node-groups:latest"}
    with pytest.raises(ConfigError, match=r"linode\.nodeGroups\.image"):
        parse_config(raw, "linode-dev")


def test_autoscaled_pools_have_no_pulumi_instances_only_their_definition(plan):
    labels = [r.inputs.get("label") for r in plan.by_type(INSTANCE)]
    assert not any("-ada-" in str(label) for label in labels), "the provider owns the pool's instances"
    cm = next(r for r in plan.by_type("kubernetes:core/v1:ConfigMap") if r.plain_inputs["metadata"]["name"] == node_groups.NAME)
    doc = json.loads(cm.plain_inputs["data"]["pools.json"])
    settings = service_settings.parse(doc, {"LINODE_FIREWALL_ID": "1", "LINODE_SUBNET_ID": "2",
                                            "CONTROL_PLANE_ENDPOINT": "10.0.0.2:6443"})
    pool = settings.pool("ada")
    assert (pool.min_nodes, pool.max_nodes, pool.instance_type) == (0, 1, "g2-gpu-rtx4000a1-m")
    assert pool.addresses == ("10.0.0.100",), "the pool's block of the VPC address plan"
    assert {"owner:ml-platform", "gpu-pool:ada", "on-demand-approved:true"} <= set(pool.tags)
    assert settings.max_gpus == 64, "linode-dev has no policy config: the policy pack's default ceiling"


def test_the_provider_runs_by_digest_hardened_with_a_narrow_role(plan):
    dep = next(r for r in plan.by_type("kubernetes:apps/v1:Deployment") if r.plain_inputs["metadata"]["name"] == node_groups.NAME)
    spec = dep.plain_inputs["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == IMAGE
    assert container["securityContext"]["readOnlyRootFilesystem"] is True and spec["nodeSelector"] == {"gpu-platform.io/role": "system"}
    role = next(r for r in plan.by_type("kubernetes:rbac.authorization.k8s.io/v1:Role") if r.plain_inputs["metadata"]["name"] == node_groups.NAME)
    assert role.plain_inputs["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    token = next(r for r in plan.by_type("kubernetes:core/v1:Secret") if r.plain_inputs["metadata"]["name"] == f"{node_groups.NAME}-token")
    assert "token" in json.dumps(token.inputs)


def test_cluster_autoscaler_runs_externalgrpc_with_mutual_tls_and_the_stacks_grace(plan):
    release = next(r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == "cluster-autoscaler")
    values = release.plain_inputs["values"]
    assert values["cloudProvider"] == "externalgrpc"
    assert values["extraArgs"]["scale-down-unneeded-time"] == "15m"
    # A renewed client/server certificate restarts both pods (each loads its certificate at start).
    assert len(values["podAnnotations"]["gpu-platform.io/tls-sha256"]) == 64
    dep = next(r for r in plan.by_type("kubernetes:apps/v1:Deployment") if r.plain_inputs["metadata"]["name"] == node_groups.NAME)
    assert len(dep.plain_inputs["spec"]["template"]["metadata"]["annotations"]["gpu-platform.io/tls-sha256"]) == 64
    rendered = [r for r in render_plan(plan, [CHARTS], kubernetes_version="1.35", example=None) if r.name == "cluster-autoscaler"]
    deploy = next(o for o in rendered[0].objects if o["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    args = pod["containers"][0]["command"]
    assert "--cloud-provider=externalgrpc" in args
    assert f"--cloud-config={node_groups.AUTOSCALER_CONFIG_DIR}/cloud-config.yaml" in args
    assert "--scale-down-unneeded-time=15m" in args
    assert pod["containers"][0]["image"].endswith(":v1.35.2")
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[node_groups.AUTOSCALER_CONFIG_DIR])
    assert volume["secret"]["secretName"] == node_groups.AUTOSCALER_SECRET
    cloud_config = yaml.safe_load(node_groups.autoscaler_cloud_config())
    assert cloud_config["address"] == "linode-node-groups.kube-system.svc:8086"
    assert {cloud_config[k] for k in ("key", "cert", "cacert")} == {
        f"{node_groups.AUTOSCALER_CONFIG_DIR}/{f}" for f in ("tls.key", "tls.crt", "ca.crt")}
    server_csr = next(r for r in plan.by_type("tls:index/certRequest:CertRequest") if "node-groups-server" in r.name)
    assert "linode-node-groups.kube-system.svc" in server_csr.plain_inputs["dnsNames"]


def test_destroy_deletes_the_providers_instances_before_their_network(plan):
    hook = next(r for r in plan.by_type("command:local:Command") if r.name.endswith("delete-autoscaled-instances"))
    assert "delete_autoscaled.py" in hook.plain_inputs["delete"] and "create" not in hook.plain_inputs
    deps = " ".join(hook.dependencies)
    assert "linode:index/firewall:Firewall" in deps and "linode:index/vpcSubnet:VpcSubnet" in deps
    release = next(r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.inputs.get("name") == "cluster-autoscaler")
    assert hook.urn in release.dependencies, "the autoscaler goes first, so nothing re-creates an instance"


def test_without_a_published_image_the_provider_and_autoscaler_still_deploy_from_the_built_image(plan_without_image):
    """Before (issue 32 item 2): no digest meant no provider and no autoscaler, a warning, and a GPU pool that
    never got a node. Now the image is built at `pulumi up` and the whole autoscaling path is deployed."""
    names = [r.inputs.get("name") for r in plan_without_image.by_type("kubernetes:helm.sh/v3:Release")]
    assert "cluster-autoscaler" in names
    (dep,) = [r for r in plan_without_image.by_type("kubernetes:apps/v1:Deployment")
              if r.plain_inputs["metadata"]["name"] == node_groups.NAME]
    image = dep.plain_inputs["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("registry.example.com/ml-platform/gpu-platform/gpu-platform-linode-node-groups@sha256:")
    assert not any("linode.nodeGroups.image is not set" in w for w in plan_without_image.warnings)


def test_policy_file_sets_the_providers_gpu_ceiling(tmp_path):
    (tmp_path / "policy.s.yaml").write_text("gpu-count-ceiling:\n  maxGpus: 3\n")
    assert node_groups.policy_max_gpus("s", 64, tmp_path) == 3
    assert node_groups.policy_max_gpus("other", 64, tmp_path) == 64


def test_the_policy_pack_counts_and_holds_autoscaled_linode_pools(plan):
    from gpu_platform.preflight.analyzer import analyze_plan

    def messages(report, policy):
        return [m.message for r in report.results if r.name == policy for m in r.messages]

    report = analyze_plan(plan, {"gpu-count-ceiling": {"maxGpus": 0}})
    ceiling = messages(report, "gpu-count-ceiling")
    assert ceiling and "ada: 1 x 1" in ceiling[0], "the autoscaled pool's GPUs count against the ceiling"
    assert not messages(report, "gpu-pools-scale-to-zero")
    warm = with_image(stack_config("linode-dev"))
    warm["gpu-platform:gpuPools"][0].update(minNodes=1, maxNodes=2)
    report = analyze_plan(plan_config(warm, "linode-dev"))
    assert any("keeps at least 1 node(s)" in m for m in messages(report, "gpu-pools-scale-to-zero"))


def test_costs_treat_the_autoscaled_pool_like_gke_and_eks(tmp_path):
    """Idle floor at minNodes (control plane, system node, storage: under $200), full capacity at
    maxNodes, and the autoscaler overhead simulated with Linode's boot path and the stack's grace."""
    from gpu_platform.preflight.__main__ import main

    stack = tmp_path / "Pulumi.linode-dev.yaml"  # with a provider: without one the pool never scales (exit 3)
    stack.write_text(yaml.safe_dump({"config": with_image(stack_config("linode-dev"))}, sort_keys=False))
    assert main(["--stack-file", str(stack), "--out", str(tmp_path), "--no-policies", "--quiet",
                 "--allow-missing-chart", "cilium"]) == 0
    cost = json.loads((tmp_path / "linode-dev" / "cost.json").read_text())
    assert cost["idleMonthlyUsd"] < 200 and cost["idleGpus"] == 0
    assert cost["fullMonthlyUsd"] > 500 and cost["fullGpus"] == 1
    assert "boot 16 min, scale-down after 15 min idle" in json.dumps(cost)


# --- a pool that can never get a node (issue 32 item 2) ---------------------------------------------------


def _preflight(tmp_path, config: dict, capsys) -> tuple[int, str, dict]:
    from gpu_platform.preflight.__main__ import main

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "Pulumi.linode-dev.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    out = tmp_path / "build"
    code = main(["--stack-file", str(path), "--no-policies", "--out", str(out)])
    text = capsys.readouterr()
    doc = json.loads((out / "linode-dev" / "preflight.json").read_text())
    return code, text.out + text.err, doc


def _gpu_quota(plan) -> dict[str, object]:
    cq = next(r for r in plan.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
              if r.plain_inputs["metadata"]["name"] == "gpu-training")
    return {f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == "nvidia.com/gpu")
            for g in cq.plain_inputs["spec"]["resourceGroups"] for f in g["flavors"]}


def test_a_gpu_pool_nothing_scales_from_zero_is_refused_naming_the_pool(tmp_path, capsys):
    """minNodes 0 and no node-group provider: nothing ever creates the pool's node. Preflight said PASS with a
    warning, and every GPU TrainJob and notebook waited for ever after `pulumi up`. With the provider built at
    `pulumi up` (issue 32 item 2), such a stack names neither a registry nor a published image: a config error
    naming the key and the pool, before anything is planned."""
    config = stack_config("linode-dev")
    config["gpu-platform:linode"].pop("nodeGroups", None)
    config["gpu-platform:linode"].pop("imageRegistry", None)
    from gpu_platform.preflight.__main__ import main

    path = tmp_path / "Pulumi.linode-dev.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    code = main(["--stack-file", str(path), "--no-policies", "--out", str(tmp_path / "build")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert "linode.imageRegistry" in text and "ada" in text, text


def test_kueue_offers_no_quota_for_nodes_that_never_come(plan):
    """The GPU ClusterQueue's quota for a pool is what the pool can reach: its maxNodes with a provider, its
    minNodes without one (0 here: Kueue admits nothing there, so no job waits admitted for a node). The config
    refuses a stack without a provider image; the component's own rule still holds for any caller."""
    from gpu_platform.components.linode.cluster import reachable_pools

    assert _gpu_quota(plan) == {"ada": "1"}
    from gpu_platform.components.cluster import gpu_pool_specs

    pools = gpu_pool_specs(parse_config(gp(stack_config("linode-dev")), "linode-dev"))
    assert [(p.name, p.max_nodes) for p in reachable_pools(pools, provider=False)] == [("ada", 0)]
    assert [(p.name, p.max_nodes) for p in reachable_pools(pools, provider=True)] == [("ada", 1)]


def test_with_a_provider_the_pool_is_not_reported(tmp_path, capsys):
    code, text, doc = _preflight(tmp_path, with_image(stack_config("linode-dev")), capsys)
    assert not [p for p in doc["clusterFit"]["problems"] if "can never get a node" in p["reason"]], text
    a_fixed_pool = stack_config("linode-dev")
    a_fixed_pool["gpu-platform:gpuPools"][0].update(minNodes=1, maxNodes=1)
    code, text, doc = _preflight(tmp_path / "fixed", a_fixed_pool, capsys)
    assert not [p for p in doc["clusterFit"]["problems"] if "can never get a node" in p["reason"]], text
