"""docs/first-training-job.md, followed as written, runs (issue 22 items 3 and 7): the image it applies
is one the reader built (nothing is published under the example's name), and the timings it quotes
are the ones the platform configures."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gpu_platform.config.linode import LinodeNodeGroups
from gpu_platform.config.platform import PlatformSection
from gpu_platform.components.platform.queue import kueue_manager_config

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "first-training-job.md").read_text()
EXAMPLE = ROOT / "examples" / "training" / "trainjob-checkpointed.yaml"


def example_image() -> str:
    job = yaml.safe_load(EXAMPLE.read_text())
    images = {c["image"] for rj in job["spec"].get("podTemplateOverrides", []) for c in
              rj.get("spec", {}).get("containers", [])}
    images |= {job["spec"]["trainer"]["image"]} if "image" in job["spec"].get("trainer", {}) else set()
    assert len(images) == 1, images
    return images.pop()


def test_the_doc_builds_the_image_it_applies() -> None:
    """Before: the doc applied ghcr.io/gpu-platform/gpu-platform-training:1.0.0, never published:
    ImagePullBackOff, and Kueue re-admitted the job forever."""
    image = example_image()
    assert not image.startswith("ghcr.io/gpu-platform/"), image
    assert "docker build -t \"$IMAGE\" examples/training" in DOC and "docker push \"$IMAGE\"" in DOC
    assert (ROOT / "examples" / "training" / "Dockerfile").is_file()
    # the substitution replaces exactly the example's image, and every apply uses its output
    sub = re.search(r'sed "s#([^#]+)#\$IMAGE#" examples/training/trainjob-checkpointed.yaml > (\S+)', DOC)
    assert sub and sub.group(1) == image, (sub and sub.group(1), image)
    applies = re.findall(r"kubectl (?:apply|delete) -f (\S+)", DOC)
    assert applies and set(applies) == {sub.group(2)}, applies


def test_the_timings_the_doc_quotes_are_the_configured_ones() -> None:
    """Before: the doc said a preempted job is evicted after 10 min, then 3 min (recoveryTimeout, shorter
    than a GPU node's boot); the timeouts now come from each cloud's node boot time."""
    from gpu_platform.costs.node_boot import node_boot_minutes

    defaults = PlatformSection()
    conf = {cloud: kueue_manager_config(defaults.pods_ready_timeout_minutes, defaults.max_requeues,
                                        node_boot_minutes(cloud))["waitForPodsReady"] for cloud in ("gcp", "aws", "linode")}
    # An autoscaled Linode pool: its node group's join deadline (the default) takes the boot's place.
    conf["autoscaled"] = kueue_manager_config(defaults.pods_ready_timeout_minutes, defaults.max_requeues,
                                              node_boot_minutes("linode"),
                                              LinodeNodeGroups().join_deadline_minutes)["waitForPodsReady"]
    assert conf["gcp"] == conf["aws"]
    mins = {c: (int(v["timeout"].rstrip("m")), int(v["recoveryTimeout"].rstrip("m"))) for c, v in conf.items()}
    preemption = " ".join(DOC.split("## 4.")[1].split("## 5.")[0].split())  # whitespace as one space
    assert f"{mins['gcp'][1]} minutes on GKE and EKS, {mins['linode'][1]} on Linode" in preemption
    assert f"{mins['autoscaled'][1]} with an autoscaled Linode pool" in preemption
    assert "recoveryTimeout" in preemption
    assert f"`platform.podsReadyTimeoutMinutes`, {defaults.pods_ready_timeout_minutes} by" in preemption
    assert f"`platform.maxRequeues` ({defaults.max_requeues})" in preemption
    never = " ".join(DOC.split("### Jobs that can never run stop")[1].split("### Availability")[0].split())
    assert f"{mins['gcp'][0]} minutes on GKE and EKS and {mins['linode'][0]} on Linode" in never
    assert f"{mins['autoscaled'][0]} with an autoscaled Linode pool" in never
    assert f"({mins['gcp'][1]} / {mins['linode'][1]} / {mins['autoscaled'][1]} minutes)" in never
    assert f"admitted {defaults.max_requeues + 1} times" in never
    assert "no retry limit" not in DOC


def test_the_doc_runs_the_image_the_stack_built() -> None:
    """Issue 32 item 2: the example training image is built at `pulumi up` and offered as the stack output
    trainingImage, by digest; the doc applies that image (building it by hand only where no stack builds it)."""
    import re as _re

    from tests.conftest import plan_stack

    assert "IMAGE=$(pulumi stack output trainingImage)" in DOC
    for stack in ("gcp-prod", "aws-prod", "linode-dev"):
        image = plan_stack(stack).outputs["trainingImage"]
        assert _re.fullmatch(r"\S+/gpu-platform-training@sha256:[0-9a-f]{64}", image), (stack, image)
