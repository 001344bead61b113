"""The project's own images built at `pulumi up` (issue 32 item 2, issue 33 item 2): pulumi-docker-build
pushes the Linode node-group provider, the EKS scale-in controller and the example training image to a
registry the stack owns (ECR, Artifact Registry) or names (linode.imageRegistry), and the cluster runs the
pushed digest. Config errors, what the plan holds (the image, the registry, the Deployment on the built
digest), and a published digest that still wins. Planned offline under preflight's mocks."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from gpu_platform.components import images
from gpu_platform.components.aws.registry import lifecycle_policy
from gpu_platform.components.linode import node_groups
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import config_warnings, parse_config
from gpu_platform.preflight.runner import ProgramError, run_program, stack_input_from_mapping
from tests.conftest import plan_config, plan_stack, stack_config

IMAGE = "docker-build:index:Image"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PUBLISHED = "ghcr.io/example-org/gpu-platform-linode-node-groups@sha256:" + "ab" * 32
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
REGISTRY = {"server": "registry.example.com", "repository": "ml-platform/gpu-platform", "username": "ml-platform-ci"}


def bare(config: dict[str, Any]) -> dict[str, Any]:
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpu-platform:")}


def builds(plan) -> dict[str, Any]:
    """Image name -> its docker-build Image resource."""
    return {r.plain_inputs["labels"]["org.opencontainers.image.title"]: r for r in plan.by_type(IMAGE)}


def deployment(plan, name: str) -> dict[str, Any]:
    (dep,) = [r for r in plan.by_type(DEPLOYMENT) if r.plain_inputs["metadata"]["name"] == name]
    return dep.plain_inputs["spec"]["template"]["spec"]


def pushed(image) -> str:
    """What the build pushed, as the program deploys it: <repository>@<digest the provider reported>."""
    tag = image.plain_inputs["tags"][0]
    return f"{tag.rsplit(':', 1)[0]}@{image.outputs['digest']}"


# ---------------------------------------------------------------------------------------------
# Config: where the image comes from, refused before anything is created
# ---------------------------------------------------------------------------------------------


def test_an_autoscaled_linode_pool_without_registry_or_digest_is_a_config_error_naming_the_key():
    """Before: linode-dev planned (PASS with a warning) and its only GPU pool never got a node."""
    raw = bare(stack_config("linode-dev"))
    raw["linode"].pop("imageRegistry")
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "linode-dev")
    text = str(err.value)
    assert "gpu-platform:linode.imageRegistry" in text and "stacks/Pulumi.linode-dev.yaml" in text
    assert "gpuPools[0] (ada, minNodes 0 < maxNodes 1)" in text
    assert "linode-registry:password" in text and "linode.nodeGroups.image" in text


def test_a_fixed_pool_needs_no_registry_and_the_missing_training_image_is_a_warning():
    raw = bare(stack_config("linode-ha"))
    raw["linode"].pop("imageRegistry")
    cfg = parse_config(raw, "linode-ha")
    assert any(w.startswith("linode.imageRegistry is not set: the example training image is not built")
               for w in config_warnings(cfg))


@pytest.mark.parametrize("key,value", [("server", "https://ghcr.io"), ("server", "Registry.Example.com"),
                                       ("repository", "/ml"), ("repository", "ML/Platform"),
                                       ("username", "two words")])
def test_a_malformed_registry_is_refused_naming_its_key(key, value):
    raw = bare(stack_config("linode-dev"))
    raw["linode"]["imageRegistry"] = {**REGISTRY, key: value}
    with pytest.raises(ConfigError, match=rf"linode\.imageRegistry\.{key}"):
        parse_config(raw, "linode-dev")


@pytest.mark.parametrize("key", ["linode.nodeGroups.image", "aws.scaleInController.image", "platform.trainingImage.image"])
def test_a_published_image_must_be_by_digest(key):
    stack = {"linode": "linode-dev", "aws": "aws-prod", "platform": "linode-dev"}[key.split(".")[0]]
    raw = bare(stack_config(stack))
    section, sub, _ = key.split(".")
    raw.setdefault(section, {})[sub] = {"image": "ghcr.io/example-org/gpu-platform-training:v1.2.0"}
    with pytest.raises(ConfigError, match=re.escape(key)):
        parse_config(raw, stack)


def _without(stack: str, key: str, config: dict[str, Any]):
    """The stack's input as the CLI would pass it, less one run-time credential preflight would stand in for."""
    stack_input = stack_input_from_mapping(stack, config)
    stack_input.config.pop(key, None)
    stack_input.secret_keys.discard(key)
    return stack_input


def test_a_build_without_the_registry_password_stops_pulumi_up_naming_the_key():
    with pytest.raises(ProgramError) as err:
        run_program(_without("linode-dev", "linode-registry:password", stack_config("linode-dev")), preview=False)
    text = str(err.value)
    assert "linode-registry:password is not set" in text and "pulumi config set --secret linode-registry:password" in text


def test_a_preview_without_the_registry_password_plans_and_warns():
    """CI's previews hold no deploy credential (docs/ci.md) and a preview builds nothing: it goes on."""
    plan = run_program(_without("linode-dev", "linode-registry:password", stack_config("linode-dev")), preview=True)
    assert builds(plan) and any(w.startswith("linode-registry:password is not set") for w in plan.warnings)


def test_a_pull_user_without_its_password_stops_the_program_naming_the_key():
    config = stack_config("linode-dev")
    config["gpu-platform:linode"]["imageRegistry"]["pullUsername"] = "ml-platform-pull"
    with pytest.raises(ProgramError, match=r"linode-registry:pullPassword is not set"):
        run_program(stack_input_from_mapping("linode-dev", config), preview=False)


# ---------------------------------------------------------------------------------------------
# Linode: the named registry
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linode_dev():
    return plan_stack("linode-dev")


def test_linode_dev_builds_the_provider_and_runs_the_pushed_digest(linode_dev):
    image = builds(linode_dev)["gpu-platform-linode-node-groups"]
    inputs = image.plain_inputs
    assert inputs["push"] is True and inputs["buildOnPreview"] is False and inputs["platforms"] == ["linux/amd64"]
    assert image.options["retainOnDelete"] is True  # destroy never asks the registry to delete a manifest
    assert inputs["context"] == {"location": "."}  # the folder holding gpu_platform/ (the Dockerfile copies from it)
    assert inputs["dockerfile"] == {"location": "gpu_platform/controllers/linode_node_groups/Dockerfile"}
    (tag,) = inputs["tags"]
    assert tag == ("registry.example.com/ml-platform/gpu-platform/gpu-platform-linode-node-groups:"
                   + images.source_tag(images.LINODE_NODE_GROUPS, "registry.example.com", "ml-platform-ci"))
    (login,) = image.inputs["registries"]
    assert login == {"address": "registry.example.com", "username": "ml-platform-ci", "password": "[secret]"}
    pod = deployment(linode_dev, node_groups.NAME)
    assert pod["containers"][0]["image"] == pushed(image) and DIGEST.search(pushed(image))
    assert pod["imagePullSecrets"] == [{"name": images.PULL_SECRET}]
    (secret,) = [r for r in linode_dev.by_type("kubernetes:core/v1:Secret")
                 if r.plain_inputs["metadata"] == {"name": images.PULL_SECRET, "namespace": "kube-system",
                                                   "labels": node_groups.LABELS}]
    assert secret.plain_inputs["type"] == "kubernetes.io/dockerconfigjson"
    assert secret.inputs["stringData"] == "[secret]"  # the registry password never shows


def test_linode_dev_builds_the_training_image_and_training_pods_can_pull_it(linode_dev):
    image = builds(linode_dev)["gpu-platform-training"]
    assert image.plain_inputs["context"] == {"location": "examples/training"}
    assert linode_dev.outputs["trainingImage"] == pushed(image)
    accounts = [r.plain_inputs for r in linode_dev.by_type("kubernetes:core/v1:ServiceAccount")
                if r.plain_inputs["metadata"]["name"] == "trainer"]
    assert accounts and accounts[0]["imagePullSecrets"] == [{"name": images.PULL_SECRET}]
    (secret,) = [r for r in linode_dev.by_type("kubernetes:core/v1:Secret")
                 if r.plain_inputs["metadata"]["name"] == images.PULL_SECRET
                 and r.plain_inputs["metadata"]["namespace"] == "training"]
    doc = json.loads(secret.plain_inputs["stringData"][".dockerconfigjson"])
    auth = doc["auths"]["registry.example.com"]
    assert auth["username"] == "ml-platform-ci"
    assert base64.b64decode(auth["auth"]).decode() == f"ml-platform-ci:{auth['password']}"


def test_linode_ha_plans_only_the_training_image_build():
    plan = plan_stack("linode-ha")
    assert set(builds(plan)) == {"gpu-platform-training"}
    assert not [r for r in plan.by_type(DEPLOYMENT) if r.plain_inputs["metadata"]["name"] == node_groups.NAME]


def test_a_read_only_pull_user_is_what_the_cluster_holds():
    config = stack_config("linode-dev")
    config["gpu-platform:linode"]["imageRegistry"]["pullUsername"] = "ml-platform-pull"
    config["linode-registry:pullPassword"] = "read-only-token"
    plan = plan_config(config, "linode-dev")
    for r in plan.by_type("kubernetes:core/v1:Secret"):
        if r.plain_inputs["metadata"]["name"] == images.PULL_SECRET:
            auth = json.loads(r.plain_inputs["stringData"][".dockerconfigjson"])["auths"]["registry.example.com"]
            assert (auth["username"], auth["password"]) == ("ml-platform-pull", "read-only-token")
    assert not [w for w in plan.warnings if "pullUsername is not set" in w]


def test_a_published_provider_digest_wins_no_build_no_pull_secret():
    config = stack_config("linode-dev")
    config["gpu-platform:linode"].setdefault("nodeGroups", {})["image"] = PUBLISHED
    plan = plan_config(config, "linode-dev")
    assert "gpu-platform-linode-node-groups" not in builds(plan)
    pod = deployment(plan, node_groups.NAME)
    assert pod["containers"][0]["image"] == PUBLISHED and "imagePullSecrets" not in pod
    # and with no registry at all: the provider still deploys, nothing is built, the training image is not offered
    del config["gpu-platform:linode"]["imageRegistry"]
    plan = plan_config(config, "linode-dev")
    assert not plan.by_type(IMAGE) and "trainingImage" not in plan.outputs
    assert deployment(plan, node_groups.NAME)["containers"][0]["image"] == PUBLISHED
    assert any("example training image is not built" in w for w in plan.warnings)


# ---------------------------------------------------------------------------------------------
# AWS: ECR repositories of the stack
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def aws_prod():
    return plan_stack("aws-prod")


def test_aws_prod_builds_the_scale_in_controller_into_its_own_ecr_and_runs_the_digest(aws_prod):
    repos = {r.plain_inputs["name"]: r for r in aws_prod.by_type("aws:ecr/repository:Repository")}
    assert set(repos) == {"gpu-prod/gpu-platform-scale-in", "gpu-prod/gpu-platform-training"}
    for repo in repos.values():
        inputs = repo.plain_inputs
        assert inputs["imageTagMutability"] == "IMMUTABLE"
        assert inputs["imageScanningConfiguration"] == {"scanOnPush": True}
        assert inputs["encryptionConfigurations"] == [{"encryptionType": "AES256"}]
        assert inputs["forceDelete"] is True and inputs["tags"]["owner"] == "ml-platform"
    policies = [json.loads(r.plain_inputs["policy"]) for r in aws_prod.by_type("aws:ecr/lifecyclePolicy:LifecyclePolicy")]
    assert policies == [lifecycle_policy()] * 2
    image = builds(aws_prod)["gpu-platform-scale-in"]
    url = repos["gpu-prod/gpu-platform-scale-in"].outputs["repositoryUrl"]
    assert image.plain_inputs["tags"] == [f"{url}:{images.source_tag(images.SCALE_IN_PROTECTION)}"]
    assert image.plain_inputs["context"] == {"location": "gpu_platform/controllers/scale_in_protection"}
    # No registry login in the program: the deployer's Docker credentials push (deploy.yml logs in to ECR), so no
    # ECR authorization token is in the state that the preview environment's token decrypts (issue 37).
    assert not image.inputs.get("registries")
    assert repos["gpu-prod/gpu-platform-scale-in"].urn in image.dependencies
    pod = deployment(aws_prod, "gpu-scale-in-protection")
    assert pod["containers"][0]["image"] == pushed(image) and "imagePullSecrets" not in pod  # the node role pulls
    assert aws_prod.outputs["trainingImage"] == pushed(builds(aws_prod)["gpu-platform-training"])


def test_the_lifecycle_policy_expires_only_the_programs_tags_beyond_the_newest():
    (rule,) = lifecycle_policy(10)["rules"]
    assert rule["selection"] == {"tagStatus": "tagged", "tagPrefixList": [images.TAG_PREFIX],
                                 "countType": "imageCountMoreThan", "countNumber": 10}
    assert rule["action"] == {"type": "expire"}


def test_a_published_controller_digest_wins_and_no_ecr_repository_is_made_for_it():
    digest = "ghcr.io/example-org/gpu-platform-scale-in@sha256:" + "0123456789abcdef" * 4
    config = stack_config("aws-prod")
    config["gpu-platform:aws"]["scaleInController"] = {"image": digest}
    config.setdefault("gpu-platform:platform", {})["trainingImage"] = {"build": False}
    plan = plan_config(config, "aws-prod")
    assert not plan.by_type(IMAGE) and not plan.by_type("aws:ecr/repository:Repository")
    assert deployment(plan, "gpu-scale-in-protection")["containers"][0]["image"] == digest
    assert "trainingImage" not in plan.outputs


# ---------------------------------------------------------------------------------------------
# GCP: the stack's Artifact Registry repository
# ---------------------------------------------------------------------------------------------


def test_gcp_prod_builds_the_training_image_into_its_artifact_registry():
    plan = plan_stack("gcp-prod")
    (repo,) = plan.by_type("gcp:artifactregistry/repository:Repository")
    inputs = repo.plain_inputs
    assert (inputs["format"], inputs["repositoryId"], inputs["location"]) == ("DOCKER", "gpu-prod-images", "us-central1")
    assert inputs["dockerConfig"] == {"immutableTags": True} and inputs["cleanupPolicyDryRun"] is False
    assert {p["action"] for p in inputs["cleanupPolicies"]} == {"KEEP", "DELETE"}
    assert inputs["labels"]["cost-center"] == "research"
    image = builds(plan)["gpu-platform-training"]
    assert image.plain_inputs["tags"][0].startswith(repo.outputs["registryUri"] + "/gpu-platform-training:src-")
    # No registry login in the program: the deployer's Docker credentials push (`gcloud auth configure-docker`),
    # so no OAuth access token is in the state that the preview environment's token decrypts (issue 37).
    assert not image.inputs.get("registries")
    assert plan.outputs["trainingImage"] == pushed(image)


def test_gcp_with_a_published_training_image_creates_no_registry():
    digest = "us-docker.pkg.dev/example/images/gpu-platform-training@sha256:" + "cd" * 32
    config = stack_config("gcp-prod")
    config.setdefault("gpu-platform:platform", {})["trainingImage"] = {"image": digest}
    plan = plan_config(config, "gcp-prod")
    assert not plan.by_type(IMAGE) and not plan.by_type("gcp:artifactregistry/repository:Repository")
    assert plan.outputs["trainingImage"] == digest


# ---------------------------------------------------------------------------------------------
# The source tag: one push per content (immutable tags)
# ---------------------------------------------------------------------------------------------


def test_the_source_tag_changes_with_what_the_image_is_built_from_and_nothing_else(tmp_path, monkeypatch):
    (tmp_path / "ctx" / "pkg").mkdir(parents=True)
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "ctx" / "Dockerfile.dockerignore").write_text("*\n!pkg\n")
    (tmp_path / "ctx" / "pkg" / "a.py").write_text("A = 1\n")
    monkeypatch.chdir(tmp_path)
    source = images.ImageSource("t", "project", "ctx", "ctx/Dockerfile", ("pkg",))
    first = images.source_tag(source)
    assert re.fullmatch(r"src-[0-9a-f]{16}", first) and images.source_tag(source) == first
    (tmp_path / "ctx" / "README.md").write_text("not in the image\n")
    (tmp_path / "ctx" / "pkg" / "__pycache__").mkdir()
    (tmp_path / "ctx" / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert images.source_tag(source) == first
    (tmp_path / "ctx" / "pkg" / "a.py").write_text("A = 2\n")
    second = images.source_tag(source)
    assert second != first
    # what else makes the provider rebuild makes a new tag too: a file's mode, the registry login
    (tmp_path / "ctx" / "pkg" / "a.py").chmod(0o664)
    assert images.source_tag(source) != second
    assert images.source_tag(source, "registry.example.com", "someone-else") != images.source_tag(source)


# ---------------------------------------------------------------------------------------------
# What preflight shows a reviewer: the builds in the verdict, the registry on the bill
# ---------------------------------------------------------------------------------------------


def test_preflights_verdict_names_each_build_and_where_it_is_pushed(aws_prod):
    from gpu_platform.preflight import verdict

    cfg = parse_config(bare(stack_config("aws-prod")), "aws-prod")
    doc = verdict.document("aws-prod", cfg, 0, plan=aws_prod)
    verdict.validate(doc)
    assert [i["name"] for i in doc["plan"]["images"]] == ["gpu-platform-scale-in", "gpu-platform-training"]
    assert doc["plan"]["images"][0]["repository"].endswith(".dkr.ecr.us-east-1.amazonaws.com/gpu-prod/gpu-platform-scale-in")
    (row,) = [text for label, text, _ in verdict.summary_lines(doc) if label == "images"]
    assert "built at `pulumi up`" in row and "Docker" in row and "gpu-platform-scale-in -> " in row


@pytest.mark.parametrize("stack,where", [("aws-prod", "ECR"), ("gcp-prod", "Artifact Registry"),
                                         ("linode-dev", "linode.imageRegistry")])
def test_the_bill_names_the_registry_the_images_go_to_and_its_price(stack, where):
    from gpu_platform.costs.estimator import estimate
    from gpu_platform.preflight.costs import stack_shape

    cfg = parse_config(bare(stack_config(stack)), stack)
    notes = [n for n in estimate(stack_shape(cfg, plan_stack(stack))).not_modelled if "the program builds into" in n]
    assert len(notes) == 1 and where in notes[0] and "gpu-platform-training" in notes[0]
    if stack != "linode-dev":
        assert "$0.1/GiB-month" in notes[0]


def test_the_rendered_pull_secret_is_what_the_api_server_accepts_and_numbers_are_integers(linode_dev):
    """Preflight's render (what the cluster fit, checkov and the rehearsal read) stands in for secret values:
    a kubernetes.io/dockerconfigjson Secret whose document were the plain stand-in string would be refused by
    the API server (its .dockerconfigjson must be JSON), and runAsUser 65532.0 (the engine's doubles) read by
    checkov as no high UID."""
    from pathlib import Path

    from gpu_platform.preflight.fit.render import render_plan

    rendered = render_plan(linode_dev, [Path(__file__).resolve().parents[2] / "shared" / "charts"],
                           kubernetes_version="1.35", example=None)
    objects = [o for rel in rendered if rel.source == "manifest" for o in rel.objects]
    pulls = [o for o in objects if o["kind"] == "Secret" and o.get("type") == "kubernetes.io/dockerconfigjson"]
    assert {o["metadata"]["namespace"] for o in pulls} == {"kube-system", "training"}
    for secret in pulls:
        assert "auths" in json.loads(secret["stringData"][".dockerconfigjson"])
    (dep,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == node_groups.NAME]
    ctx = dep["spec"]["template"]["spec"]["securityContext"]
    assert ctx["runAsUser"] == 65532 and isinstance(ctx["runAsUser"], int) and isinstance(dep["spec"]["replicas"], int)
