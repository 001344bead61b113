"""The real program for GCP stacks under preflight's mocks: what it would ask GCP to create."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import plan_config, plan_stack, stack_config
from gpu_platform.preflight.runner import Plan, run_program, stack_input_from_mapping

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
BUDGET = "gcp:billing/budget:Budget"
CHANNEL = "gcp:monitoring/notificationChannel:NotificationChannel"
BUCKET = "gcp:storage/bucket:Bucket"
COMMON = {"owner": "ml-platform", "cost-center": "research", "environment": "prod", "managed-by": "pulumi",
          "app": "gpu-platform", "cluster": "gpu-prod"}


@pytest.fixture(scope="module")
def prod() -> Plan:
    return plan_stack("gcp-prod")


def gcp_prod_with(**changes: Any) -> dict[str, Any]:
    config = stack_config("gcp-prod")
    for key, value in changes.items():
        config[f"gpu-platform:{key}"] = value
    return config


# ---------------------------------------------------------------------------------------------
# gcp-prod: what the "How it is checked" names
# ---------------------------------------------------------------------------------------------


def test_cluster_is_private_and_control_plane_restricted_to_admin_cidrs(prod):
    c = prod.one(CLUSTER).inputs
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    assert c["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert c["privateClusterConfig"]["masterIpv4CidrBlock"] == "172.16.0.16/28"
    mans = c["masterAuthorizedNetworksConfig"]
    assert [b["cidrBlock"] for b in mans["cidrBlocks"]] == ["203.0.113.0/24"]
    assert mans["gcpPublicCidrsAccessEnabled"] is False


def test_cluster_settings(prod):
    c = prod.one(CLUSTER).inputs
    assert c["name"] == "gpu-prod" and c["location"] == "us-central1" and c["project"] == "my-ml-project"
    assert c["removeDefaultNodePool"] is True
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    assert c["workloadIdentityConfig"] == {"workloadPool": "my-ml-project.svc.id.goog"}
    assert c["enableShieldedNodes"] is True
    assert c["clusterAutoscaling"]["autoscalingProfile"] == "OPTIMIZE_UTILIZATION"
    assert c["deletionProtection"] is True  # environment: prod
    assert c["networkingMode"] == "VPC_NATIVE"
    assert c["ipAllocationPolicy"] == {"clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"}
    assert c["masterAuth"]["clientCertificateConfig"]["issueClientCertificate"] is False
    assert c["nodeLocations"] == ["us-central1-a", "us-central1-b", "us-central1-c"]
    # Even the short-lived default pool does not run as the Compute Engine default account.
    assert c["nodeConfig"]["serviceAccount"] == "gpu-prod-nodes@my-ml-project.iam.gserviceaccount.com"


def test_system_pool_is_small_on_demand_and_autoscaling(prod):
    p = prod.one(NODE_POOL, "system").inputs
    assert p["name"] == "system"
    assert p["autoscaling"]["totalMinNodeCount"] == 1 and p["autoscaling"]["totalMaxNodeCount"] == 3
    node = p["nodeConfig"]
    assert node["machineType"] == "e2-standard-4"
    assert not node.get("spot") and not node.get("preemptible")
    assert "guestAccelerators" not in node and "taints" not in node


def test_a100_pool_is_spot_scales_0_to_8_and_is_tainted(prod):
    """gcp-prod uses Spot (issue 22): preemptible's price without its 24 h limit."""
    p = prod.one(NODE_POOL, "a100").inputs
    node = p["nodeConfig"]
    assert node["machineType"] == "a2-highgpu-1g"
    assert node["spot"] is True and node["preemptible"] is False
    assert node["guestAccelerators"] == [{"type": "nvidia-tesla-a100", "count": 1,
                                          "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}]
    assert p["autoscaling"] == {"totalMinNodeCount": 0, "totalMaxNodeCount": 8, "locationPolicy": "ANY"}
    assert p["initialNodeCount"] == 0
    assert node["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert node["labels"]["gpu-platform.io/pool"] == "a100"
    assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert node["shieldedInstanceConfig"] == {"enableSecureBoot": True, "enableIntegrityMonitoring": True}
    assert node["serviceAccount"] == "gpu-prod-nodes@my-ml-project.iam.gserviceaccount.com"
    assert node["resourceLabels"] == {**COMMON, "gpu-pool": "a100", "on-demand-approved": "false"}
    assert p["management"] == {"autoRepair": True, "autoUpgrade": True}


def test_cluster_is_created_through_the_release_channel_with_the_pinned_supported_minor(prod):
    c = prod.one(CLUSTER).inputs
    assert c["releaseChannel"] == {"channel": "REGULAR"}
    # gcp-prod pins 1.35, inside GKE standard support on 2026-11-23 (gpu_platform/costs/catalog/kubernetes-versions.yaml).
    assert c["minMasterVersion"] == "1.35"


def test_unpinned_stack_sends_no_version_and_lets_the_channel_pick():
    config = stack_config("gcp-prod")
    config.pop("gpu-platform:kubernetesVersion")
    c = run_program(stack_input_from_mapping("gcp-prod", config)).one(CLUSTER).inputs
    assert "minMasterVersion" not in c and c["releaseChannel"] == {"channel": "REGULAR"}


def test_upgrades_only_in_the_weekend_window_and_gpu_nodes_replaced_first(prod):
    policy = prod.one(CLUSTER).inputs["maintenancePolicy"]
    assert policy == {"recurringWindow": {"startTime": "2026-01-03T00:00:00Z", "endTime": "2026-01-04T00:00:00Z",
                                          "recurrence": "FREQ=WEEKLY;BYDAY=SA,SU"}}
    gpu = next(p.inputs for p in prod.by_type(NODE_POOL) if p.inputs["name"] == "a100")
    assert gpu["upgradeSettings"] == {"strategy": "SURGE", "maxSurge": 1, "maxUnavailable": 0}


def test_maintenance_exclusions_reach_the_cluster():
    config = stack_config("gcp-prod")
    config["gpu-platform:gcp"]["maintenance"] = {"days": ["FR", "SA"], "startHourUTC": 20, "hours": 10, "exclusions": [
        {"name": "paper-deadline", "start": "2026-12-01T00:00:00Z", "end": "2026-12-20T00:00:00Z", "scope": "NO_UPGRADES"},
        {"name": "hold-nodes", "start": "2027-01-01T00:00:00Z"}]}
    policy = run_program(stack_input_from_mapping("gcp-prod", config)).one(CLUSTER).inputs["maintenancePolicy"]
    assert policy["recurringWindow"] == {"startTime": "2026-01-03T20:00:00Z", "endTime": "2026-01-04T06:00:00Z",
                                         "recurrence": "FREQ=WEEKLY;BYDAY=FR,SA"}
    assert policy["maintenanceExclusions"] == [
        {"exclusionName": "paper-deadline", "startTime": "2026-12-01T00:00:00Z", "endTime": "2026-12-20T00:00:00Z",
         "exclusionOptions": {"scope": "NO_UPGRADES"}},
        {"exclusionName": "hold-nodes", "startTime": "2027-01-01T00:00:00Z",
         "exclusionOptions": {"scope": "NO_MINOR_OR_NODE_UPGRADES", "endTimeBehavior": "UNTIL_END_OF_SUPPORT"}}]


def test_budget_has_its_five_thresholds_and_emails_the_alert_addresses(prod):
    b = prod.one(BUDGET).inputs
    assert sorted((r["thresholdPercent"], r["spendBasis"]) for r in b["thresholdRules"]) == sorted([
        (0.25, "CURRENT_SPEND"), (0.5, "CURRENT_SPEND"), (0.75, "CURRENT_SPEND"), (1.0, "CURRENT_SPEND"),
        (1.0, "FORECASTED_SPEND")])
    assert b["amount"]["specifiedAmount"]["units"] == "5000"
    assert b["amount"]["specifiedAmount"]["currencyCode"] == "USD"
    assert b["billingAccount"] == "012345-6789AB-CDEF01"
    [project] = b["budgetFilter"]["projects"]
    assert project.startswith("projects/") and project[len("projects/"):].isdigit()  # the number, looked up
    channels = prod.by_type(CHANNEL)
    assert [c.inputs["labels"] for c in channels] == [{"email_address": "ml-platform-alerts@example.com"}]
    assert all(c.inputs["type"] == "email" for c in channels)
    assert b["allUpdatesRule"]["monitoringNotificationChannels"] == [c.outputs["name"] for c in channels]


def test_network_is_vpc_native_with_nat(prod):
    subnet = prod.one("gcp:compute/subnetwork:Subnetwork").inputs
    assert subnet["ipCidrRange"] == "10.10.0.0/20"
    assert {r["rangeName"]: r["ipCidrRange"] for r in subnet["secondaryIpRanges"]} == {
        "pods": "10.16.0.0/14", "services": "10.20.0.0/20"}
    assert subnet["privateIpGoogleAccess"] is True
    nat = prod.one("gcp:compute/routerNat:RouterNat").inputs
    assert nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert prod.one("gcp:compute/network:Network").inputs["autoCreateSubnetworks"] is False
    fw = prod.one("gcp:compute/firewall:Firewall").inputs
    assert fw["sourceRanges"] == ["172.16.0.16/28"] and fw["targetTags"] == ["gpu-prod-node"]


def test_checkpoint_bucket_is_private_with_lifecycle_and_workload_identity(prod):
    b = prod.one(BUCKET).inputs
    assert b["name"] == "my-ml-project-gpu-prod-checkpoints"
    assert b["uniformBucketLevelAccess"] is True and b["publicAccessPrevention"] == "enforced"
    assert {"action": {"type": "Delete"},
            "condition": {"daysSinceNoncurrentTime": 30, "withState": "ARCHIVED"}} in b["lifecycleRules"]
    assert b["versioning"] == {"enabled": True}
    assert b["forceDestroy"] is False  # checkpointBucket.onDestroy defaults to retain
    grant = prod.one("gcp:storage/bucketIAMMember:BucketIAMMember").inputs
    assert grant["role"] == "roles/storage.objectUser"
    assert grant["bucket"] == "my-ml-project-gpu-prod-checkpoints"
    assert grant["member"] == "serviceAccount:gpu-prod-trainer@my-ml-project.iam.gserviceaccount.com"
    wi = prod.one("gcp:serviceaccount/iAMMember:IAMMember").inputs
    assert wi["role"] == "roles/iam.workloadIdentityUser"
    assert wi["member"] == "serviceAccount:my-ml-project.svc.id.goog[training/trainer]"
    assert wi["serviceAccountId"].endswith("gpu-prod-trainer@my-ml-project.iam.gserviceaccount.com")


def test_identities_get_least_privilege(prod):
    project_grants = prod.by_type("gcp:projects/iAMMember:IAMMember")
    assert {g.inputs["role"] for g in project_grants} == {
        "roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader"}
    assert {g.inputs["member"] for g in project_grants} == {
        "serviceAccount:gpu-prod-nodes@my-ml-project.iam.gserviceaccount.com"}
    # The trainer has no project-wide role; only the bucket grant above.
    assert all("trainer" not in g.inputs["member"] for g in project_grants)


def test_kubeconfig_and_provider_stay_secret(prod):
    provider = prod.one("pulumi:providers:kubernetes", "k8s")
    assert provider.inputs["kubeconfig"] == "[secret]"
    assert provider.inputs["enableServerSideApply"] in (True, "true")
    text = json.dumps(prod.to_json())
    assert "gke-gcloud-auth-plugin" not in text and "certificate-authority-data" not in text
    assert prod.to_json()["outputs"]["kubeconfig"] == "[secret]"
    # It is there, though, for the provider: the exec credential and the cluster's endpoint.
    raw = provider.plain_inputs["kubeconfig"]
    assert "command: gke-gcloud-auth-plugin" in raw and "server: https://198.51.100.10" in raw


def test_billable_resources_carry_the_cost_labels(prod):
    labelled = [prod.one(CLUSTER).inputs["resourceLabels"], prod.one(BUCKET).inputs["labels"]]
    labelled += [p.inputs["nodeConfig"]["resourceLabels"] for p in prod.by_type(NODE_POOL)]
    labelled += [c.inputs["userLabels"] for c in prod.by_type(CHANNEL)]
    for labels in labelled:
        assert {k: labels[k] for k in COMMON} == COMMON
        assert all(k == k.lower() and v == v.lower() for k, v in labels.items())


def test_every_resource_is_a_child_of_a_gcp_component_named_after_it(prod):
    by_urn = {r.urn: r for r in prod.resources}
    ours = [r for r in prod.resources
            if r.type.startswith(("gcp:", "pulumi:providers:gcp", "gpu-platform:gcp:")) or r.name == "gpu-prod-k8s"]
    top = {r.name for r in ours if r.type.startswith("gpu-platform:gcp:") and r.parent not in by_urn}
    assert top == {"gpu-prod", "gpu-prod-billing"}
    assert len(ours) > 20
    for r in ours:
        if r.name in top:
            continue
        parent = by_urn.get(r.parent or "")
        assert parent is not None and parent.type.startswith("gpu-platform:gcp:"), (r.type, r.name)
        assert r.name.startswith(parent.name + "-"), (r.name, parent.name)


def test_gcp_resources_use_the_explicit_provider_for_the_stack_project(prod):
    providers = prod.by_type("pulumi:providers:gcp")
    assert {p.inputs["project"] for p in providers} == {"my-ml-project"}
    billing = prod.one("pulumi:providers:gcp", "billing").inputs
    assert billing["userProjectOverride"] in (True, "true") and billing["billingProject"] == "my-ml-project"
    provider_urns = {p.urn for p in providers}
    for r in prod.resources:
        if r.type.startswith("gcp:"):
            assert r.provider and r.provider.rsplit("::", 1)[0] in provider_urns, r.name


def test_platform_on_gke_uses_workload_identity_and_gkes_device_plugin(prod):
    """The platform layer (not this component) creates training/trainer from the handle's annotation."""
    [trainer] = [r for r in prod.by_type("kubernetes:core/v1:ServiceAccount")
                 if r.inputs["metadata"].get("name") == "trainer" and r.inputs["metadata"].get("namespace") == "training"]
    gsa = prod.one("gcp:serviceaccount/account:Account", "checkpoints-gsa").outputs["email"]
    assert trainer.inputs["metadata"]["annotations"]["iam.gke.io/gcp-service-account"] == gsa
    wi = prod.one("gcp:serviceaccount/iAMMember:IAMMember").inputs
    assert wi["member"].endswith(f"[{trainer.inputs['metadata']['namespace']}/{trainer.inputs['metadata']['name']}]")
    charts = [str(r.inputs.get("chart")) for r in prod.by_type("kubernetes:helm.sh/v3:Release")]
    assert charts and not [c for c in charts if "device-plugin" in c]  # GKE runs its own


def test_stack_outputs(prod):
    out = prod.to_json()["outputs"]
    assert out["cloud"] == "gcp" and out["clusterName"] == "gpu-prod"
    assert out["checkpointBucket"] == "gs://my-ml-project-gpu-prod-checkpoints"
    assert out["gpuPools"][0]["capacity"] == "spot"


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------


def test_spot_l4_and_on_demand_h100_pools_side_by_side():
    plan = plan_config(gcp_prod_with(gpuPools=[
        {"name": "l4", "instanceType": "g2-standard-24", "capacity": "spot", "minNodes": 0, "maxNodes": 4},
        {"name": "h100", "instanceType": "a3-highgpu-8g", "capacity": "on-demand", "approvedOnDemand": True,
         "minNodes": 0, "maxNodes": 1},
        {"name": "a100-80", "instanceType": "a2-ultragpu-1g", "capacity": "preemptible", "minNodes": 1, "maxNodes": 2},
    ]))
    l4 = plan.one(NODE_POOL, "gpu-l4").inputs
    assert l4["nodeConfig"]["spot"] is True and l4["nodeConfig"]["preemptible"] is False
    assert l4["nodeConfig"]["guestAccelerators"][0]["type"] == "nvidia-l4"
    assert l4["nodeConfig"]["guestAccelerators"][0]["count"] == 2
    assert l4["autoscaling"]["locationPolicy"] == "ANY"
    assert l4["nodeConfig"]["resourceLabels"]["on-demand-approved"] == "false"

    h100 = plan.one(NODE_POOL, "gpu-h100").inputs
    assert h100["nodeConfig"]["spot"] is False and h100["nodeConfig"]["preemptible"] is False
    assert h100["nodeConfig"]["guestAccelerators"][0] == {
        "type": "nvidia-h100-80gb", "count": 8, "gpuDriverInstallationConfig": {"gpuDriverVersion": "LATEST"}}
    assert h100["nodeConfig"]["gvnic"] == {"enabled": True}
    assert h100["autoscaling"] == {"totalMinNodeCount": 0, "totalMaxNodeCount": 1, "locationPolicy": "BALANCED"}
    assert h100["nodeConfig"]["resourceLabels"]["on-demand-approved"] == "true"
    assert h100["nodeConfig"]["resourceLabels"]["gpu-pool"] == "h100"

    a100 = plan.one(NODE_POOL, "gpu-a100-80").inputs
    assert a100["nodeConfig"]["guestAccelerators"][0]["type"] == "nvidia-a100-80gb"
    assert a100["nodeLocations"] == ["us-central1-a", "us-central1-c"]  # where A100 80GB is offered
    assert a100["initialNodeCount"] == 1
    assert len(plan.by_type(NODE_POOL)) == 4  # system + three GPU pools


def test_dev_environment_without_deletion_protection_and_with_options():
    config = gcp_prod_with(environment="dev")
    config["gpu-platform:gcp"] = {**config["gpu-platform:gcp"], "releaseChannel": "RAPID",
                                  "gpuDriverVersion": "DEFAULT", "checkpointRetentionDays": 7,
                                  "systemPool": {"instanceType": "n2-standard-4", "minNodes": 2, "maxNodes": 5}}
    plan = plan_config(config)
    c = plan.one(CLUSTER).inputs
    assert c["deletionProtection"] is False and c["name"] == "gpu-dev"
    assert c["releaseChannel"] == {"channel": "RAPID"}
    # The bucket follows checkpointBucket.onDestroy (default retain), not the environment (tests/test_destroy.py).
    assert plan.one(BUCKET).inputs["forceDestroy"] is False and plan.one(BUCKET).options["retainOnDelete"] is True
    assert {"action": {"type": "Delete"},
            "condition": {"daysSinceNoncurrentTime": 7, "withState": "ARCHIVED"}} in plan.one(BUCKET).inputs["lifecycleRules"]
    system = plan.one(NODE_POOL, "system").inputs
    assert system["nodeConfig"]["machineType"] == "n2-standard-4"
    assert (system["autoscaling"]["totalMinNodeCount"], system["autoscaling"]["totalMaxNodeCount"]) == (2, 5)
    gpu = plan.one(NODE_POOL, "a100").inputs["nodeConfig"]["guestAccelerators"][0]
    assert gpu["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "DEFAULT"}


def test_private_endpoint_uses_the_private_address():
    config = gcp_prod_with(adminCidrs=["10.200.0.0/24"])
    config["gpu-platform:gcp"] = {**config["gpu-platform:gcp"], "privateEndpoint": True}
    plan = plan_config(config)
    assert plan.one(CLUSTER).inputs["privateClusterConfig"]["enablePrivateEndpoint"] is True
    kubeconfig = plan.one("pulumi:providers:kubernetes", "k8s").plain_inputs["kubeconfig"]
    assert "server: https://172.16.0.18" in kubeconfig  # the mock's private endpoint


def test_several_alert_emails_each_get_a_channel_on_the_budget():
    plan = plan_config(gcp_prod_with(alertEmails=["a@example.com", "b@example.com", "c@example.com"]))
    channels = plan.by_type(CHANNEL)
    assert sorted(c.inputs["labels"]["email_address"] for c in channels) == ["a@example.com", "b@example.com", "c@example.com"]
    assert len(plan.one(BUDGET).inputs["allUpdatesRule"]["monitoringNotificationChannels"]) == 3


def test_switching_cloud_from_linode_to_gcp_needs_only_the_cloud_key_and_a_gcp_section():
    """A Linode stack's shared keys (owner, budget, alerts, admin ranges, platform) carry over as they
    are; the user sets cloud: gcp, adds the gcp section and names GCP machine types in gpuPools."""
    linode = stack_config("linode-dev")
    gcp = stack_config("gcp-prod")
    switched = copy.deepcopy(linode)
    switched["gpu-platform:cloud"] = "gcp"
    switched["gpu-platform:gcp"] = gcp["gpu-platform:gcp"]
    switched["gpu-platform:gpuPools"] = gcp["gpu-platform:gpuPools"]  # instance types are per cloud
    # Supported minors are per cloud too (the version calendar): GKE's release channel picks when unset.
    switched.pop("gpu-platform:kubernetesVersion", None)
    plan = plan_config(switched, stack="linode-dev")
    assert not [r for r in plan.resources if r.type.startswith("linode:")]
    c = plan.one(CLUSTER).inputs
    assert [b["cidrBlock"] for b in c["masterAuthorizedNetworksConfig"]["cidrBlocks"]] == \
        linode["gpu-platform:adminCidrs"]
    assert c["resourceLabels"]["environment"] == linode["gpu-platform:environment"]
    assert plan.one(BUDGET).inputs["amount"]["specifiedAmount"]["units"] == str(linode["gpu-platform:monthlyBudgetUsd"])
    assert [ch.inputs["labels"]["email_address"] for ch in plan.by_type(CHANNEL)] == linode["gpu-platform:alertEmails"]
    # The linode section may stay in the file: only the selected cloud's section is used.
    assert "gpu-platform:linode" in switched


# ---------------------------------------------------------------------------------------------
# The cluster handle the platform layer receives
# ---------------------------------------------------------------------------------------------


def test_cluster_handle_for_the_platform_layer():
    from gpu_platform.config.stack import parse_config
    from gpu_platform.components.gcp import create_cluster

    config = stack_config("gcp-prod")
    stack_input = stack_input_from_mapping("gcp-prod", config)
    cfg = parse_config(stack_input.raw, "gcp-prod")
    seen: dict[str, Any] = {}

    def program() -> None:
        handle = create_cluster(cfg)
        seen["handle"] = handle
        handle.checkpoint.url.apply(lambda v: seen.__setitem__("url", v))
        handle.checkpoint.service_account_annotations["iam.gke.io/gcp-service-account"].apply(
            lambda v: seen.__setitem__("gsa", v))
        handle.kubeconfig.apply(lambda v: seen.__setitem__("kubeconfig", v))

    run_program(stack_input, program=program)
    handle = seen["handle"]
    assert handle.cloud == "gcp" and handle.name == "gpu-prod"
    assert handle.gpu_device_plugin_installed is True
    assert handle.default_storage_class == "standard-rwo"
    assert seen["url"] == "gs://my-ml-project-gpu-prod-checkpoints"
    assert seen["gsa"] == "gpu-prod-trainer@my-ml-project.iam.gserviceaccount.com"
    assert "gke-gcloud-auth-plugin" in seen["kubeconfig"]
    [pool] = handle.gpu_pools
    assert (pool.name, pool.instance_type, pool.gpus_per_node, pool.min_nodes, pool.max_nodes, pool.capacity) == (
        "a100", "a2-highgpu-1g", 1, 0, 8, "spot")
    assert pool.node_selector == {"gpu-platform.io/pool": "a100"}
    assert pool.tolerations() == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                   "effect": "NoSchedule"}]
    assert len(handle.ready) == 2 and handle.provider is not None


# ---------------------------------------------------------------------------------------------
# Control plane -> node ports: derived from the pinned charts as rendered (issue 10)
# ---------------------------------------------------------------------------------------------


def _control_plane_backends(objects: list[dict]) -> dict[str, int]:
    """'<kind>/<name>' -> the node (container) port the API server calls, for every webhook, CRD conversion
    webhook and aggregated APIService backed by an in-cluster Service."""
    services = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects if o.get("kind") == "Service"}
    workloads = [o for o in objects if o.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")]

    def node_port(ref: dict) -> int:
        svc = services[(ref["namespace"], ref["name"])]
        port = next(p for p in svc["spec"]["ports"] if p["port"] == ref.get("port", 443))
        target = port.get("targetPort", port["port"])
        if isinstance(target, int) or str(target).isdigit():
            return int(target)
        selector = svc["spec"]["selector"]
        for w in workloads:
            labels = w["spec"]["template"]["metadata"].get("labels") or {}
            if w["metadata"].get("namespace") == ref["namespace"] and all(labels.get(k) == v for k, v in selector.items()):
                for c in w["spec"]["template"]["spec"]["containers"]:
                    for cp in c.get("ports") or []:
                        if cp.get("name") == target:
                            return int(cp["containerPort"])
        raise AssertionError(f"named port {target} of Service {ref['namespace']}/{ref['name']} not found")

    out: dict[str, int] = {}
    for o in objects:
        kind, name = o.get("kind"), o.get("metadata", {}).get("name")
        refs = []
        if kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            refs = [w["clientConfig"].get("service") for w in o.get("webhooks") or []]
        elif kind == "APIService":
            refs = [o["spec"].get("service")]
        elif kind == "CustomResourceDefinition" and (o["spec"].get("conversion") or {}).get("strategy") == "Webhook":
            refs = [o["spec"]["conversion"]["webhook"]["clientConfig"].get("service")]
        for ref in refs:
            if ref:
                out[f"{kind}/{name}"] = node_port(ref)
    return out


def test_firewall_admits_every_port_the_control_plane_calls_in_the_rendered_charts(prod):
    from gpu_platform.components.gcp.network import CONTROL_PLANE_TO_NODE_PORTS
    from tests.fit_support import need_charts, rendered

    need_charts()
    objects = [o for r in rendered("gcp-prod") for o in r.objects]
    backends = _control_plane_backends(objects)
    assert backends["APIService/v1beta1.visibility.kueue.x-k8s.io"] == 8082  # the port issue 10 found closed
    needed = set(backends.values()) - {443}  # 443: GKE's own rule
    # Exactly the ports the charts need: a chart update that adds one fails here, and no port stays open for nothing.
    assert needed == {int(p) for p in CONTROL_PLANE_TO_NODE_PORTS}, backends
    fw = prod.one("gcp:compute/firewall:Firewall").inputs
    assert fw["allows"] == [{"protocol": "tcp", "ports": list(CONTROL_PLANE_TO_NODE_PORTS)}]
    assert fw["sourceRanges"] == ["172.16.0.16/28"] and fw["direction"] == "INGRESS"


def test_network_policy_is_enforced_by_dataplane_v2(prod):
    c = prod.one(CLUSTER).inputs
    # Dataplane V2 enforces NetworkPolicy itself; the legacy Calico add-on (networkPolicy) must stay off with it.
    assert c["datapathProvider"] == "ADVANCED_DATAPATH"
    assert "networkPolicy" not in c or not c["networkPolicy"].get("enabled")


def test_spot_pool_gives_pods_the_120_s_graceful_shutdown_where_the_minor_allows(prod):
    """Before: GKE's default graceful node shutdown (30 s, 15 s for pods): a preempted Spot node's
    training pod had 15 s of the runtime's 60 s checkpoint grace. GKE allows 120 s for Spot pools from
    1.35.0-gke.1171000; gcp-prod pins 1.35, so its Spot pool asks for it; pods get 120 - 15 s."""
    kubelet = prod.one(NODE_POOL, "a100").inputs["nodeConfig"].get("kubeletConfig")
    assert kubelet == {"shutdownGracePeriodSeconds": 120, "shutdownGracePeriodCriticalPodsSeconds": 15}
    from gpu_platform.components.gcp.nodepool import spot_shutdown_grace
    from gpu_platform.components.platform.training import CHECKPOINT_GRACE_SECONDS

    assert kubelet["shutdownGracePeriodSeconds"] - kubelet["shutdownGracePeriodCriticalPodsSeconds"] >= CHECKPOINT_GRACE_SECONDS
    # Not where GKE keeps its default: preemptible and on-demand pools, a minor before 1.35, none pinned.
    assert spot_shutdown_grace("preemptible", "1.36") is None
    assert spot_shutdown_grace("on-demand", "1.36") is None
    assert spot_shutdown_grace("spot", "1.34") is None
    assert spot_shutdown_grace("spot", None) is None


def _unpinned_a100(monkeypatch, channel="REGULAR", today=None):
    from gpu_platform.data.versions_calendar import TODAY_ENV

    if today:
        monkeypatch.setenv(TODAY_ENV, today)
    config = stack_config("gcp-prod")
    config.pop("gpu-platform:kubernetesVersion")
    config["gpu-platform:gcp"] = {**config["gpu-platform:gcp"], "releaseChannel": channel}
    raw = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpu-platform:")}
    from gpu_platform.config.stack import config_warnings, parse_config

    warnings = [w for w in config_warnings(parse_config(raw, "gcp-prod")) if w.startswith("gpuPools[0]")]
    pool = run_program(stack_input_from_mapping("gcp-prod", config)).one(NODE_POOL, "a100").inputs
    return pool["nodeConfig"].get("kubeletConfig"), warnings


def test_spot_grace_when_the_version_is_left_to_the_channel(monkeypatch):
    """Issue 33 item 9. Before: with kubernetesVersion unset no kubeletConfig was planned at all, so Spot
    pods got GKE's 15 s against the runtime's 60 s. Now the oldest minor the channel can still run today
    decides (the version calendar): on 2026-11-23 every Regular-channel cluster runs 1.35 or later (1.34 left
    standard support on 2026-10-01, and GKE upgrades clusters off it), so the pool asks for 120 s."""
    kubelet, warnings = _unpinned_a100(monkeypatch)
    assert kubelet == {"shutdownGracePeriodSeconds": 120, "shutdownGracePeriodCriticalPodsSeconds": 15}
    assert warnings == []


@pytest.mark.parametrize("channel, today", [("EXTENDED", None), ("REGULAR", "2026-09-01")])
def test_spot_pool_that_may_run_a_minor_before_1_35_is_warned_with_the_grace_it_gets(monkeypatch, channel, today):
    """The Extended channel still runs 1.33 (extended support); on 2026-09-01 Regular still ran 1.34: GKE
    would refuse the 120 s setting there, so none is planned and the stack is warned with what pods get."""
    kubelet, warnings = _unpinned_a100(monkeypatch, channel, today)
    assert kubelet is None
    (w,) = warnings
    assert "its pods get 15 s" in w and "less than the 60 s" in w and 'pin kubernetesVersion: "1.35"' in w


def test_a_preemptible_pool_is_warned_with_the_grace_it_gets():
    from gpu_platform.components.platform.training import CHECKPOINT_GRACE_SECONDS
    from gpu_platform.config.gcp import TRAINING_CHECKPOINT_GRACE_SECONDS
    from gpu_platform.config.stack import config_warnings, parse_config

    assert TRAINING_CHECKPOINT_GRACE_SECONDS == CHECKPOINT_GRACE_SECONDS
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items() if k.startswith("gpu-platform:")}
    raw["gpuPools"] = [{**raw["gpuPools"][0], "capacity": "preemptible"}]
    (w,) = [w for w in config_warnings(parse_config(raw, "gcp-prod")) if w.startswith("gpuPools[0]")]
    assert "preemptible" in w and "its pods get 15 s" in w and "use capacity: spot" in w
    assert not [w for w in config_warnings(parse_config(
        {**raw, "gpuPools": [{**raw["gpuPools"][0], "capacity": "spot"}]}, "gcp-prod")) if w.startswith("gpuPools[0]")]


def test_the_gke_quota_step_counts_the_upgrade_surge_node():
    """Issue 33 item 9: the quickstart's quota step said Σ maxNodes; an upgrade's surge node (max_surge 1,
    max_unavailable 0) needs one more node's GPUs per pool, or the upgrade stalls."""
    from gpu_platform.components.gcp.nodepool import gpu_upgrade_settings
    from gpu_platform.costs.catalog import load_catalog
    from tests.conftest import ROOT

    assert gpu_upgrade_settings()["max_surge"] == 1
    cat = load_catalog()
    pools = stack_config("gcp-prod")["gpu-platform:gpuPools"]
    need = sum((p["maxNodes"] + 1) * cat.instance("gcp", p["instanceType"]).gpus for p in pools)
    text = " ".join((ROOT / "docs" / "quickstart-gcp.md").read_text().split())
    assert "Σ (`maxNodes` + 1) × GPUs per node" in text and f"(gcp-prod: {need})" in text
