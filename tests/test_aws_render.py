"""What the AWS components render, checked by parsing it back and by real validators
(shellcheck, kubernetes-validate strict), without running Pulumi."""

from __future__ import annotations

import email
import ipaddress
import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gpu_platform.data import aws_versions as versions
from gpu_platform.components.aws.autoscaler import autoscaler_policy, helm_values as ca_values
from gpu_platform.components.aws.billing import (alerts_key_policy, billing_thresholds, budget_notifications, idle_evaluation_periods,
                                    topic_policy)
from gpu_platform.components.aws.bucket import tls_only_policy, trainer_policy
from gpu_platform.components.aws.eks import render_kubeconfig
from gpu_platform.components.aws.gpu_asg import (ACCELERATOR_LABEL, ACCELERATOR_VALUES, accelerator_value, asg_tag_list, autoscaler_tags,
                                    gpu_launch_template_args, node_labels, render_cloudwatch_agent_config,
                                    render_cloudwatch_agent_script, render_nodeadm_config, render_user_data)
from gpu_platform.components.aws.iam import irsa_trust_policy, partition
from gpu_platform.components.aws.network import plan_subnets
from gpu_platform.components.aws.nth import EVENT_RULES, handler_policy, helm_values as nth_values, queue_policy, termination_timing
from gpu_platform.components.aws.protection import cluster_role_rules, protection_policy, render_deployment
from gpu_platform.components.aws.scale_down import UNNEEDED_TIME_TAG, scale_down_timing
from gpu_platform.components.cluster import GPU_TAINT, GpuPoolSpec

ROOT = Path(__file__).resolve().parent.parent
ENDPOINT = "https://ABC.gr7.us-east-1.eks.amazonaws.com"
IMAGE = "ghcr.io/example-org/gpu-platform-scale-in@sha256:" + "ab" * 32  # a well-formed reference for rendering
SPEC = GpuPoolSpec(name="a10g", instance_type="g5.xlarge", gpu_model="NVIDIA A10G", gpus_per_node=1, min_nodes=0, max_nodes=8,
                   capacity="spot", node_labels={"gpu-platform.io/pool": "a10g", "nvidia.com/gpu.present": "true", "team": "nlp"})


def test_nodeadm_config_joins_with_labels_and_gpu_taint():
    doc = yaml.safe_load(render_nodeadm_config("gpu-prod", ENDPOINT, "Q0E=", "172.20.0.0/16", SPEC.node_labels, SPEC.taints))
    assert doc["apiVersion"] == "node.eks.aws/v1alpha1" and doc["kind"] == "NodeConfig"
    assert doc["spec"]["cluster"] == {"name": "gpu-prod", "apiServerEndpoint": ENDPOINT, "certificateAuthority": "Q0E=",
                                      "cidr": "172.20.0.0/16"}
    assert doc["spec"]["kubelet"]["config"]["registerWithTaints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    (flag,) = doc["spec"]["kubelet"]["flags"]
    labels = dict(kv.split("=") for kv in flag.removeprefix("--node-labels=").split(","))
    assert labels == SPEC.node_labels
    assert set(doc["spec"]) == {"cluster", "kubelet"}


def test_user_data_is_mime_multipart_with_nodeadm_and_script():
    nodeadm = render_nodeadm_config("gpu-prod", ENDPOINT, "Q0E=", "172.20.0.0/16", SPEC.node_labels, SPEC.taints)
    msg = email.message_from_string(render_user_data(nodeadm, render_cloudwatch_agent_script()))
    assert msg.is_multipart() and msg.get_content_type() == "multipart/mixed"
    parts = {p.get_content_type(): p.get_payload() for p in msg.get_payload()}
    assert set(parts) == {"application/node.eks.aws", "text/x-shellscript"}
    assert yaml.safe_load(parts["application/node.eks.aws"])["kind"] == "NodeConfig"
    assert parts["text/x-shellscript"].startswith("#!/bin/bash\n")


def test_embedded_shell_passes_shellcheck(tmp_path):
    script = tmp_path / "cloudwatch-agent.sh"
    script.write_text(render_cloudwatch_agent_script())
    out = subprocess.run(["shellcheck", "--severity=style", "--shell=bash", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_gpu_nodes_register_with_the_accelerator_label():
    labels = node_labels(SPEC)
    assert labels[ACCELERATOR_LABEL] == "nvidia-a10g" and {k: labels[k] for k in SPEC.node_labels} == SPEC.node_labels
    doc = yaml.safe_load(render_nodeadm_config("gpu-prod", ENDPOINT, "Q0E=", "172.20.0.0/16", labels, SPEC.taints))
    assert "k8s.amazonaws.com/accelerator=nvidia-a10g" in doc["spec"]["kubelet"]["flags"][0].split("=", 1)[1].split(",")


def test_every_catalog_gpu_model_has_an_accelerator_value():
    from gpu_platform.costs.catalog import load_catalog
    models = {t.gpu_model for t in load_catalog().gpu_instances("aws") if t.gpu_model}
    assert models and models <= set(ACCELERATOR_VALUES)
    assert accelerator_value("NVIDIA L4") == "nvidia-l4" and accelerator_value("NVIDIA V100 32GB") == "nvidia-tesla-v100"
    with pytest.raises(ValueError, match="ACCELERATOR_VALUES"):
        accelerator_value("NVIDIA B200")


def test_gpu_launch_template_blocks_pods_from_imds():
    meta = gpu_launch_template_args(200, {"owner": "ml"})["metadata_options"]
    assert meta["http_put_response_hop_limit"] == 1 and meta["http_tokens"] == "required"


def test_controller_liveness_probe_shell_passes_shellcheck(tmp_path):
    manifest = render_deployment(IMAGE, "arn:aws:iam::1:role/r", ["g"], "us-east-1", scale_down_timing(900))
    probe = manifest["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["exec"]["command"]
    assert probe[:2] == ["sh", "-c"]
    script = tmp_path / "probe.sh"
    script.write_text("#!/bin/sh\n" + probe[2] + "\n")
    out = subprocess.run(["shellcheck", "--severity=style", "--shell=sh", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_cloudwatch_agent_config_is_the_json_the_script_writes():
    script = render_cloudwatch_agent_script()
    body = re.search(r"<<'JSON'\n(.*)\nJSON\n", script, re.S).group(1)
    config = json.loads(body)
    assert config == render_cloudwatch_agent_config()
    assert config["metrics"]["aggregation_dimensions"] == [["AutoScalingGroupName"]]
    assert "utilization_gpu" in config["metrics"]["metrics_collected"]["nvidia_gpu"]["measurement"]


def test_autoscaler_tags_describe_the_node_for_scale_from_zero():
    tags = autoscaler_tags("gpu-prod", SPEC, "2m0s")
    p = "k8s.io/cluster-autoscaler/node-template"
    assert tags["k8s.io/cluster-autoscaler/enabled"] == "true" and tags["k8s.io/cluster-autoscaler/gpu-prod"] == "owned"
    assert tags[f"{p}/label/gpu-platform.io/pool"] == "a10g" and tags[f"{p}/label/team"] == "nlp"
    assert tags[f"{p}/taint/{GPU_TAINT.key}"] == "present:NoSchedule"
    assert tags[f"{p}/resources/nvidia.com/gpu"] == "1"
    # the GPU model before the device plugin reports GPUs: no overshoot while a new node starts
    assert tags[f"{p}/label/k8s.amazonaws.com/accelerator"] == "nvidia-a10g"
    assert tags[f"{p}/autoscaling-options/scaledownunneededtime"] == "2m0s" == tags[UNNEEDED_TIME_TAG]
    listed = asg_tag_list({"owner": "ml"}, "gpu-prod", SPEC, approved_on_demand=False, unneeded_time="2m0s")
    by_key = {t["key"]: t for t in listed}
    assert by_key["on-demand-approved"]["value"] == "false" and by_key["gpu-pool"]["propagate_at_launch"]
    assert not by_key[f"{p}/resources/nvidia.com/gpu"]["propagate_at_launch"]
    assert by_key["aws-node-termination-handler/managed"]["propagate_at_launch"]


def test_too_many_tags_are_refused():
    many = GpuPoolSpec(**{**SPEC.__dict__, "node_labels": {f"l{i}": "x" for i in range(45)}})
    with pytest.raises(ValueError, match="at most 50"):
        asg_tag_list({}, "gpu-prod", many, False, "2m0s")


def test_kubeconfig_uses_aws_eks_get_token():
    doc = yaml.safe_load(render_kubeconfig("gpu-prod", ENDPOINT, "Q0E=", "eu-west-1"))
    (user,) = doc["users"]
    assert user["user"]["exec"]["command"] == "aws"
    assert user["user"]["exec"]["args"] == ["eks", "get-token", "--cluster-name", "gpu-prod", "--region", "eu-west-1", "--output", "json"]
    assert doc["clusters"][0]["cluster"] == {"server": ENDPOINT, "certificate-authority-data": "Q0E="}
    assert doc["current-context"] == "gpu-prod"
    assert "token" not in json.dumps(doc).replace("get-token", "")


def test_irsa_trust_is_scoped_to_one_service_account():
    doc = irsa_trust_policy("arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/ABC",
                            "https://oidc.eks.us-east-1.amazonaws.com/id/ABC", "training", "trainer")
    (st,) = doc["Statement"]
    assert st["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert st["Condition"]["StringEquals"] == {
        "oidc.eks.us-east-1.amazonaws.com/id/ABC:sub": "system:serviceaccount:training:trainer",
        "oidc.eks.us-east-1.amazonaws.com/id/ABC:aud": "sts.amazonaws.com"}


def test_least_privilege_policies():
    arns = ["arn:aws:autoscaling:us-east-1:1:autoScalingGroup:x:autoScalingGroupName/a"]
    prot = protection_policy(arns)["Statement"]
    assert prot[0]["Action"] == ["autoscaling:SetInstanceProtection"] and prot[0]["Resource"] == arns
    assert all(s["Resource"] != "*" for s in prot if any("Set" in a for a in s["Action"]))
    nth = handler_policy("arn:q", arns)["Statement"]
    assert nth[0]["Resource"] == ["arn:q"] and nth[1]["Resource"] == arns
    ca = autoscaler_policy("gpu-prod")["Statement"][0]
    assert ca["Condition"] == {"StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/gpu-prod": "owned"}}
    trainer = trainer_policy("arn:aws:s3:::b")["Statement"]
    assert {tuple(s["Resource"]) for s in trainer} == {("arn:aws:s3:::b",), ("arn:aws:s3:::b/*",)}
    assert tls_only_policy("arn:aws:s3:::b")["Statement"][0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    q = queue_policy("arn:q", ["arn:r1"])["Statement"][0]
    assert q["Condition"] == {"ArnEquals": {"aws:SourceArn": ["arn:r1"]}}


def test_event_rules_cover_the_five_event_kinds():
    kinds = {p["detail-type"][0] for p in EVENT_RULES.values()}
    assert kinds == {"EC2 Instance-terminate Lifecycle Action", "EC2 Spot Instance Interruption Warning",
                     "EC2 Instance Rebalance Recommendation", "EC2 Instance State-change Notification", "AWS Health Event"}
    assert EVENT_RULES["scheduled-change"]["detail"] == {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}


def test_billing_thresholds_and_budget_notifications():
    assert billing_thresholds(5000) == [(25, 1250.0), (50, 2500.0), (75, 3750.0), (100, 5000.0)]
    notes = budget_notifications("arn:t")
    assert [(n["notification_type"], n["threshold"]) for n in notes] == [
        ("ACTUAL", 25.0), ("ACTUAL", 50.0), ("ACTUAL", 75.0), ("ACTUAL", 100.0), ("FORECASTED", 100.0)]
    key = alerts_key_policy("123456789012", "aws")["Statement"][1]
    assert set(key["Principal"]["Service"]) == {"cloudwatch.amazonaws.com", "budgets.amazonaws.com"}
    assert topic_policy("arn:t", "123456789012")["Statement"][1]["Action"] == "SNS:Publish"
    assert idle_evaluation_periods(120) == 24 and idle_evaluation_periods(7) == 2


@pytest.mark.parametrize("cidr,zones", [("10.40.0.0/16", ["a", "b", "c"]), ("10.0.0.0/22", ["a", "b", "c", "d", "e", "f"])])
def test_subnet_plan_does_not_overlap(cidr, zones):
    plan = plan_subnets(cidr, zones)
    nets = [ipaddress.ip_network(n) for _, priv, pub in plan for n in (priv, pub)]
    vpc = ipaddress.ip_network(cidr)
    assert all(n.subnet_of(vpc) and n.prefixlen <= 28 for n in nets)
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])


def test_partition_follows_region():
    assert (partition("us-east-1"), partition("us-gov-west-1")) == ("aws", "aws-us-gov")


def test_controller_deployment_is_valid_hardened_and_installs_nothing():
    timing = scale_down_timing(900)
    manifest = render_deployment(IMAGE, "arn:aws:iam::1:role/r", ["gpu-prod-gpu-a10g", "gpu-prod-gpu-l4x4"], "us-east-1", timing)
    kubernetes_validate.validate(manifest, "1.33.0", strict=True)
    pod = manifest["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert "initContainers" not in pod and c["image"] == IMAGE and "@sha256:" in c["image"]
    # no install step: the image's entrypoint runs the controller
    assert "command" not in c and "args" not in c
    assert not re.search(r"pip|install|requirements", json.dumps(manifest))
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["ASG_NAMES"] == "gpu-prod-gpu-a10g,gpu-prod-gpu-l4x4"
    assert env["GRACE_SECONDS"] == str(timing.controller_grace_seconds) == "780"
    for rule in cluster_role_rules():
        kubernetes_validate.validate({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                      "metadata": {"name": "x"}, "rules": [rule]}, "1.33.0", strict=True)
        assert set(rule["verbs"]) <= {"list", "patch"}


def test_controller_pod_meets_the_restricted_pod_security_standard():
    """The "restricted" profile's checks (kubernetes.io/docs/concepts/security/pod-security-standards)."""
    pod = render_deployment(IMAGE, "arn:r", ["g"], "us-east-1", scale_down_timing(900))["spec"]["template"]["spec"]
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert all(set(v) <= {"name", "emptyDir", "configMap", "secret", "projected", "persistentVolumeClaim"} for v in pod["volumes"])
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"]["type"] == "RuntimeDefault"
        assert not sc.get("privileged") and "ports" not in c


@pytest.mark.parametrize("bad", ["python:3.12.8-slim-bookworm", "ghcr.io/o/i:v1", "ghcr.io/o/i@sha256:abc",
                                 "gpu-platform-scale-in@sha256:" + "a" * 64, "ghcr.io/o/i:ü@sha256:" + "a" * 64])
def test_controller_image_must_be_a_digest_reference(bad):
    with pytest.raises(ValueError, match="by digest"):
        render_deployment(bad, "arn:r", ["g"], "us-east-1", scale_down_timing(900))


def test_helm_values():
    n = nth_values("https://sqs/q", "us-east-1", "arn:role", termination_timing(600))
    assert n["enableSqsTerminationDraining"] is True and n["queueURL"] == "https://sqs/q"
    assert n["serviceAccount"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:role"}
    assert (n["nodeTerminationGracePeriod"], n["heartbeatInterval"], n["heartbeatUntil"]) == (660, 60, 720)
    c = ca_values("gpu-prod", "us-east-1", "arn:role", "1.33")
    assert c["autoDiscovery"] == {"clusterName": "gpu-prod"}
    assert c["image"]["tag"] == versions.CLUSTER_AUTOSCALER_IMAGE_TAGS["1.33"]
    # the default for untagged groups (system nodes); GPU groups carry their own tag
    assert c["extraArgs"]["scale-down-unneeded-time"] == "10m"


def test_docs_list_the_aws_pins_and_quickstart():
    pins = (ROOT / "docs" / "versions.md").read_text()
    rows = [line for line in pins.splitlines() if line.startswith("|") and "gpu_platform/data/aws_versions.py" in line]
    table = "\n".join(rows)
    base = re.search(r"^FROM (\S+) AS deps$", (ROOT / "gpu_platform/controllers/scale_in_protection/Dockerfile").read_text(), re.M).group(1)
    boto3_pin = re.search(r"^boto3==(\S+) ", (ROOT / "gpu_platform/controllers/scale_in_protection/requirements.txt").read_text(), re.M).group(1)
    for pin in (versions.NTH_CHART_VERSION, versions.NTH_CHART, versions.NTH_APP_VERSION, versions.CLUSTER_AUTOSCALER_CHART_VERSION,
                *versions.CLUSTER_AUTOSCALER_IMAGE_TAGS.values(), base.split("@")[0], base.split("@")[1][:19], boto3_pin):
        assert pin in table, f"docs/versions.md pinned-versions table lacks {pin}"
    quickstart = (ROOT / "docs" / "quickstart-aws.md").read_text().split("# Quickstart: AWS", 1)[1].split("\n## ", 1)[0]
    assert "pulumi up -s aws-prod" in quickstart and "billing alerts" in quickstart.lower() and "Quotas" in quickstart


def test_zonal_groups_split_the_pool_exactly():
    from gpu_platform.config.names import zonal_groups

    assert zonal_groups(0, 8, ["a", "b", "c"]) == [("a", 0, 3), ("b", 0, 3), ("c", 0, 2)]
    # fewer maxNodes than zones: groups only in the first maxNodes zones
    assert zonal_groups(1, 2, ["a", "b", "c"]) == [("a", 1, 1), ("b", 0, 1)]
    for lo, hi in ((0, 1), (2, 5), (5, 5), (0, 0)):
        groups = zonal_groups(lo, hi, ["a", "b", "c"])
        assert sum(g[1] for g in groups) == lo and sum(g[2] for g in groups) == hi
        assert all(g[1] <= g[2] for g in groups)


def test_gpu_groups_tell_the_autoscaler_the_ephemeral_storage_a_node_gives_pods():
    """EKS drill (rehearsal, 2026-11-28): cluster-autoscaler 1.35's AWS template node has no ephemeral
    storage unless a node-template tag gives it, so a Katib trial (its metrics collector asks 500Mi) never
    scaled a GPU group from zero. The tag is the node's allocatable: the 200 GiB root volume less 1 GiB of
    filesystem margin, nodeadm's 1 GiB kubeReserved and the 10 % nodefs eviction share (rounded up)."""
    from gpu_platform.components.aws.gpu_asg import template_ephemeral_storage_gib

    p = "k8s.io/cluster-autoscaler/node-template"
    assert f"{p}/resources/ephemeral-storage" not in autoscaler_tags("gpu-prod", SPEC, "2m0s")
    tags = autoscaler_tags("gpu-prod", SPEC, "2m0s", root_volume_gib=200)
    assert tags[f"{p}/resources/ephemeral-storage"] == "178Gi"  # 199 - 1 - 20
    assert template_ephemeral_storage_gib(20) == 16 and template_ephemeral_storage_gib(1) == 0
    listed = {t["key"]: t for t in asg_tag_list({}, "gpu-prod", SPEC, False, "2m0s", root_volume_gib=100)}
    assert listed[f"{p}/resources/ephemeral-storage"] == {"key": f"{p}/resources/ephemeral-storage", "value": "88Gi",
                                                          "propagate_at_launch": False}


def test_aws_prod_plans_the_ephemeral_storage_tag_on_every_gpu_group():
    from tests.conftest import plan_stack

    groups = plan_stack("aws-prod").by_type("aws:autoscaling/group:Group")
    assert groups
    for g in groups:
        tags = {t["key"]: t["value"] for t in g.plain_inputs.get("tags") or []}
        if "k8s.io/cluster-autoscaler/enabled" in tags:
            assert tags["k8s.io/cluster-autoscaler/node-template/resources/ephemeral-storage"].endswith("Gi"), g.name
