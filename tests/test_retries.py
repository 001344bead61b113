"""Jobs stop retrying only when they cannot run (issue 22): Kueue's waitForPodsReady waits longer than a GPU
node takes to boot, per cloud, from the same boot figures the cost simulator bills, so a preempted job whose
replacement node comes up is never evicted or counted; a job that can never become Ready stops after
platform.maxRequeues (the rehearsal's never-ready drill shows it on a real Kueue)."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.components.platform.queue import kueue_manager_config
from gpu_platform.config.platform import PlatformSection
from gpu_platform.costs.node_boot import NODE_BOOT_MINUTES, node_boot_minutes
from gpu_platform.costs.report import SCALE_UP_MINUTES
from tests.conftest import plan_config, plan_stack, stack_config

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


@pytest.mark.parametrize("stack, boot", [("gcp-prod", 8.0), ("aws-prod", 8.0), ("linode-ha", 16.0)])
def test_the_program_renders_the_stacks_cloud_boot_into_kueue(stack, boot):
    """Clusters whose node groups have no join deadline of the program's (GKE's own autoscaler, EKS's at its
    default, Linode's fixed pools): the boot decides."""
    values = plan_stack(stack).one(RELEASE, "platform-queue-kueue").inputs["values"]
    conf = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])["waitForPodsReady"]
    assert minutes(conf["timeout"]) == boot + 10
    assert minutes(conf["recoveryTimeout"]) == boot + 12


def _kueue_and_deadline(plan) -> tuple[dict, float]:
    values = plan.one(RELEASE, "platform-queue-kueue").inputs["values"]
    conf = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])["waitForPodsReady"]
    args = plan.one(RELEASE, "cluster-autoscaler").inputs["values"]["extraArgs"]
    return conf, minutes(args["max-node-provision-time"])


def test_on_linode_dev_kueue_outlasts_the_autoscalers_join_deadline():
    """Issue 35 review: on linode-dev Kueue evicted a job at 26 minutes (boot 16 + 10) while the autoscaler
    waited 40 for its node to join (--max-node-provision-time): a slow node that joined in time cost the job a
    requeue, and a node that never joined cost two (Kueue evicted again before the replacement had booted),
    leaving one before the job was deactivated although the pool recovered. Kueue now waits for the deadline,
    the lag of the autoscaler's clock and a registered node's start, then pull and start."""
    plan = plan_stack("linode-dev")
    conf, deadline = _kueue_and_deadline(plan)
    pull = PlatformSection().pods_ready_timeout_minutes
    assert minutes(conf["timeout"]) >= deadline + pull, (conf, deadline)

    from gpu_platform.components.platform.queue import NODE_JOIN_LAG_MINUTES

    assert minutes(conf["timeout"]) >= deadline + NODE_JOIN_LAG_MINUTES + pull, (conf, deadline)
    assert minutes(conf["recoveryTimeout"]) >= minutes(conf["timeout"])  # a lost node's replacement joins the same way
    assert deadline > node_boot_minutes("linode")  # and the deadline leaves a boot room
    # A GPU notebook from the pool at zero waits as long (JupyterHub's start timeout).
    hub = [r for r in plan.by_type(RELEASE) if "jupyterhub" in r.name][0]
    assert hub.inputs["values"]["singleuser"]["startTimeout"] == 60 * minutes(conf["timeout"])


def test_kueue_follows_a_longer_join_deadline_the_stack_sets():
    from gpu_platform.components.platform.queue import NODE_JOIN_LAG_MINUTES

    raw = stack_config("linode-dev")
    raw["gpu-platform:linode"]["nodeGroups"]["joinDeadlineMinutes"] = 90
    conf, deadline = _kueue_and_deadline(plan_config(raw, "linode-dev"))
    assert deadline == 90
    assert minutes(conf["timeout"]) == 90 + NODE_JOIN_LAG_MINUTES + PlatformSection().pods_ready_timeout_minutes


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(boot=st.floats(min_value=1, max_value=60), pull=st.integers(min_value=1, max_value=24 * 60),
       deadline=st.one_of(st.none(), st.integers(min_value=1, max_value=180)))
def test_kueue_never_gives_up_before_a_node_could_have_joined_and_started(boot, pull, deadline):
    """Property: the timeout outlasts the boot, and the join deadline where there is one, plus pull and start;
    the recovery timeout is longer still."""
    from gpu_platform.components.platform.queue import NODE_JOIN_LAG_MINUTES, pods_ready_timeouts

    timeout, recovery = pods_ready_timeouts(boot, pull, deadline)
    assert timeout >= boot + pull
    if deadline is not None:
        assert timeout >= deadline + NODE_JOIN_LAG_MINUTES + pull
    assert recovery >= timeout and isinstance(timeout, int)


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
