"""The scale-in protection controller as an image: its Dockerfile, its hash-pinned dependencies, the
workflow that publishes it, and the stack config that deploys it by digest (built into ECR at `pulumi up`
unless a published digest is given: tests/test_built_images.py has the build)."""

from __future__ import annotations

import json
import re
import subprocess
from importlib.metadata import version

import pytest
import yaml

from gpu_platform.components.aws import protection
from gpu_platform.config.aws import ScaleInController
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from tests.conftest import ROOT, stack_config
from tests.test_platform_validate import checkov_bin

CTL = ROOT / "gpu_platform" / "controllers" / "scale_in_protection"
DIGEST = "ghcr.io/example-org/gpu-platform-scale-in@sha256:" + "0123456789abcdef" * 4
WORKFLOW = ROOT / ".github" / "workflows" / "controller-image.yml"


def requirements() -> dict[str, tuple[str, str]]:
    out = {}
    for line in (CTL / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            m = re.fullmatch(r"([a-z0-9-]+)==([\w.]+) --hash=sha256:([0-9a-f]{64})", line)
            assert m, f"not pinned by version and hash: {line}"
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (CTL / "Dockerfile").read_text().replace("\\\n", " ")
    return [tuple(line.split(" ", 1)) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_dependencies_are_hash_pinned_and_the_ones_the_tests_run_with():
    pins = requirements()
    assert {"boto3", "botocore"} <= set(pins)
    for name, (pinned, _) in pins.items():
        assert version(name) == pinned, f"{name}: tests ran against {version(name)}, the image installs {pinned}"


def test_controller_needs_nothing_but_the_standard_library_and_boto3():
    source = (CTL / "controller.py").read_text()
    imports = set(re.findall(r"^\s*(?:import|from) ([a-z_0-9]+)", source, re.M))
    assert imports <= {"__future__", "json", "logging", "os", "random", "ssl", "sys", "time", "urllib", "dataclasses",
                       "typing", "boto3", "botocore"}


def test_dockerfile_pins_the_base_by_digest_installs_at_build_time_and_runs_as_non_root():
    steps = dockerfile_instructions()
    froms = [arg for op, arg in steps if op == "FROM"]
    bases = {f.split(" AS ")[0] for f in froms}
    assert len(froms) == 2 and len(bases) == 1, "both stages on the same pinned base"
    (base,) = bases
    assert re.fullmatch(r"python:3\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base)
    runs = [arg for op, arg in steps if op == "RUN"]
    assert runs == ["python -m pip install --require-hashes --only-binary=:all: --target /opt/deps -r /tmp/requirements.txt"]
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]
    assert ("USER", f"{protection.RUN_AS}:{protection.RUN_AS}") in final
    assert ("COPY", "controller.py /app/controller.py") in final
    assert ("ENTRYPOINT", '["python", "/app/controller.py"]') in final
    assert not any(op == "RUN" for op, _ in final), "nothing is installed in the runtime stage"


@pytest.mark.sidevenv  # checkov, from .venv-checkov
def test_dockerfile_passes_checkov():
    proc = subprocess.run([checkov_bin(), "-f", str(CTL / "Dockerfile"), "--framework", "dockerfile", "-o", "json",
                           "--quiet", "--compact", "--skip-download"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["summary"]["passed"] > 20 and report["summary"]["parsing_errors"] == 0
    assert report["summary"]["failed"] == 0, [c["check_id"] for c in report["results"]["failed_checks"]]


def test_workflow_publishes_on_release_tags_with_pinned_actions_and_minimal_permissions():
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert doc["permissions"] == {}
    on = doc[True] if True in doc else doc["on"]  # YAML 1.1 reads the key `on` as true
    assert on["push"] == {"tags": ["v*"]} and "branches" not in on["push"]
    build, publish = doc["jobs"]["build"], doc["jobs"]["publish"]
    assert build["if"] == "github.event_name == 'pull_request'" and build["permissions"] == {"contents": "read"}
    assert publish["if"] == "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"
    assert publish["permissions"] == {"contents": "read", "packages": "write"}  # only the job that pushes
    for job, push in ((build, False), (publish, True)):
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", step["uses"]), f"{step['uses']}: pin actions by commit"
        step = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
        assert step["with"]["context"] == "gpu_platform/controllers/scale_in_protection"
        assert step["with"]["file"] == "gpu_platform/controllers/scale_in_protection/Dockerfile"
        assert step["with"]["push"] is push
    meta = next(s for s in publish["steps"] if s.get("uses", "").startswith("docker/metadata-action@"))
    assert meta["with"]["images"].endswith("/gpu-platform-scale-in")


def raw_config() -> dict:
    return {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}


def test_the_controller_is_on_by_default_with_an_image_built_at_pulumi_up_and_no_warning():
    """Issue 33 item 2: aws-prod documented scale-in protection that stayed off until someone published a
    digest nobody published. Now it is on by default and its image is built into the stack's ECR."""
    from gpu_platform.config.stack import config_warnings

    raw = raw_config()
    raw["aws"].pop("scaleInController", None)
    cfg = parse_config(raw, "aws-prod")
    assert cfg.aws.scale_in_controller.on and cfg.aws.scale_in_controller.built
    assert not [w for w in config_warnings(cfg) if "scaleInController" in w]
    raw["aws"]["scaleInController"] = {"enabled": True}  # what used to be refused for want of a digest
    assert parse_config(raw, "aws-prod").aws.scale_in_controller.built


def test_enabled_false_turns_the_controller_and_its_build_off():
    raw = raw_config()
    raw["aws"]["scaleInController"] = {"enabled": False}
    controller = parse_config(raw, "aws-prod").aws.scale_in_controller
    assert not controller.on and not controller.built


# The last: a tag's letters are ASCII (distribution/reference's [\w], Go's \w); the Unicode \w of pydantic's Rust
# regex took it.
@pytest.mark.parametrize("bad", ["ghcr.io/o/gpu-platform-scale-in:v1.2.0", "python:3.12.8-slim-bookworm",
                                 "ghcr.io/o/i@sha256:0123", "gpu-platform-scale-in@sha256:" + "a" * 64,
                                 "ghcr.io/o/i:v1-é@sha256:" + "a" * 64])
def test_a_controller_image_not_by_digest_is_refused(bad):
    raw = raw_config()
    raw["aws"]["scaleInController"] = {"image": bad}
    with pytest.raises(ConfigError, match="scaleInController.image"):
        parse_config(raw, "aws-prod")


def test_a_digest_reference_is_accepted_and_config_and_renderer_agree_on_the_form():
    raw = raw_config()
    raw["aws"]["scaleInController"] = {"image": DIGEST}
    cfg = parse_config(raw, "aws-prod")
    assert cfg.aws.scale_in_controller.on and cfg.aws.scale_in_controller.image == DIGEST
    assert not cfg.aws.scale_in_controller.built, "a published digest wins: nothing is built"
    pattern = ScaleInController.model_fields["image"].metadata[0].pattern
    assert pattern == protection.IMAGE_BY_DIGEST


def test_the_plan_deploys_the_controller_by_digest_and_splits_the_grace():
    """aws-prod with the controller on: what `pulumi up` would create (preflight's mocks)."""
    from tests.conftest import plan_config

    config = stack_config("aws-prod")
    config["gpu-platform:aws"]["scaleInController"] = {"image": DIGEST}
    plan = plan_config(config, "aws-prod")
    dep = plan.one("kubernetes:apps/v1:Deployment", "scale-in-protection").inputs
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == DIGEST and "initContainers" not in pod and "command" not in c
    env = {e["name"]: e["value"] for e in c["env"]}
    # one group per pool and zone (issue 22): a10g over three zones, l4x4 (max 2) over two
    zonal = ["gpu-prod-gpu-a10g-us-east-1a", "gpu-prod-gpu-a10g-us-east-1b", "gpu-prod-gpu-a10g-us-east-1c",
             "gpu-prod-gpu-l4x4-us-east-1a", "gpu-prod-gpu-l4x4-us-east-1b"]
    assert env["ASG_NAMES"] == ",".join(zonal) and env["GRACE_SECONDS"] == "780"
    assert not [m for m in plan.by_type("kubernetes:core/v1:ConfigMap") if "scale-in-protection" in m.urn]
    policy = json.loads(plan.one("aws:iam/rolePolicy:RolePolicy", "scale-in-protection").inputs["policy"])
    protect = next(s for s in policy["Statement"] if s["Action"] == ["autoscaling:SetInstanceProtection"])
    assert sorted(r.rsplit("/", 1)[1] for r in protect["Resource"]) == zonal
    asg = plan.one("aws:autoscaling/group:Group", "gpu-a10g-us-east-1a").inputs
    tags = {t["key"]: t["value"] for t in asg["tags"]}
    assert asg["protectFromScaleIn"] is True
    # 13 min with the controller + 2 min the autoscaler = the stack's 15 min grace, once
    assert tags["k8s.io/cluster-autoscaler/node-template/autoscaling-options/scaledownunneededtime"] == "2m0s"
