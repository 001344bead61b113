"""Jobs stop retrying only when they cannot run (issue 22): Kueue's waitForPodsReady waits longer than a GPU
node takes to boot, per cloud, from the same boot figures the cost simulator bills, so a preempted job whose
replacement node comes up is never evicted or counted; a job that can never become Ready stops after
platform.maxRequeues (the rehearsal's never-ready drill shows it on a real Kueue)."""

from __future__ import annotations

import re

import pytest
import yaml

from gpu_platform.components.platform.queue import kueue_manager_config
from gpu_platform.costs.node_boot import NODE_BOOT_MINUTES, node_boot_minutes
from gpu_platform.costs.report import SCALE_UP_MINUTES
from tests.conftest import plan_stack

RELEASE = "kubernetes:helm.sh/v3:Release"


def minutes(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(s|m|h)", duration)
    assert m, duration
    return int(m.group(1)) * {"s": 1 / 60, "m": 1, "h": 60}[m.group(2)]


@pytest.mark.parametrize("cloud", sorted(NODE_BOOT_MINUTES))
def test_kueue_waits_for_a_node_boot_before_it_evicts_or_counts(cloud):
    """Before: recoveryTimeout 3m, shorter than any GPU node's boot (8 min GKE/EKS, 16 Linode): every
    preemption whose replacement needed a new node was evicted and counted against maxRequeues, and
    the count never resets (Kueue v0.19.2), so a long spot job preempted 4 times was deactivated."""
    boot = node_boot_minutes(cloud)
    conf = kueue_manager_config(10, 3, boot)["waitForPodsReady"]
    timeout, recovery = minutes(conf["timeout"]), minutes(conf["recoveryTimeout"])
    assert timeout >= boot + 10  # scale-from-zero boot, then pull and start
    assert recovery >= timeout  # a replacement needs a new node too, after the old pod's shutdown
    assert conf["requeuingStrategy"]["backoffLimitCount"] == 3


def test_queue_and_cost_simulator_share_one_boot_figure():
    assert SCALE_UP_MINUTES is NODE_BOOT_MINUTES
    with pytest.raises(ValueError, match="no node boot time for cloud 'azure'"):
        node_boot_minutes("azure")


@pytest.mark.parametrize("stack, boot", [("gcp-prod", 8.0), ("linode-dev", 16.0)])
def test_the_program_renders_the_stacks_cloud_boot_into_kueue(stack, boot):
    values = plan_stack(stack).one(RELEASE, "platform-queue-kueue").inputs["values"]
    conf = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])["waitForPodsReady"]
    assert minutes(conf["timeout"]) == boot + 10
    assert minutes(conf["recoveryTimeout"]) == boot + 12


@pytest.mark.parametrize("stack", ["gcp-prod", "linode-dev"])
def test_a_notebook_waits_as_long_as_kueue_waits_for_a_node_from_zero(stack):
    """Platform review: KubeSpawner gave up after 600 s while a GPU node from a pool at zero boots in 8
    (GKE/EKS) or 16 (Linode) minutes plus the image pull: every first GPU notebook on linode-dev failed,
    and the node it asked for came up idle."""
    plan = plan_stack(stack)
    values = plan.one(RELEASE, "platform-queue-kueue").inputs["values"]
    conf = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])["waitForPodsReady"]
    hub = [r for r in plan.by_type(RELEASE) if "jupyterhub" in r.name][0]
    assert hub.inputs["values"]["singleuser"]["startTimeout"] == 60 * minutes(conf["timeout"])
    cloud = "gcp" if stack.startswith("gcp") else "linode"
    assert hub.inputs["values"]["singleuser"]["startTimeout"] > 60 * node_boot_minutes(cloud)
