"""The Kubernetes upgrade path on Linode: one minor at a time, control plane first, then every node
drained, upgraded and uncordoned in turn; refused version changes name the key."""

from __future__ import annotations

import pytest

from gpu_platform.components.linode import upgrade, versions
from gpu_platform.components.linode.upgrade import LOCAL, UpgradeError, check_upgrade, upgrade_plan

CPS = ["gpu-staging-cp-0", "gpu-staging-cp-1", "gpu-staging-cp-2"]
WORKERS = ["gpu-staging-ada-0", "gpu-staging-ada-1", "gpu-staging-system-0"]


@pytest.mark.parametrize("current,target,fragment", [
    ("1.34", "1.36", "skips a minor: upgrade to 1.35 first"),
    ("1.36", "1.35", "cannot downgrade"),
    ("1.35", "1.35", "already 1.35"),
    ("1.36", "1.37", "no pinned kubeadm release for 1.37"),
    ("1.35", "2.0", "skips a minor"),
    ("1.35", "latest", "not a Kubernetes minor"),
])
def test_version_changes_kubeadm_refuses_are_refused(current, target, fragment):
    with pytest.raises(UpgradeError, match=fragment):
        check_upgrade(current, target)


def test_a_minor_the_calendar_no_longer_allows_is_refused():
    with pytest.raises(UpgradeError, match="not allowed on Linode today"):
        check_upgrade("1.33", "1.34", allowed=("1.35", "1.36"))


def test_plan_upgrades_the_control_plane_first_then_each_node_in_turn():
    steps = upgrade_plan("linode-ha", "1.35", "1.36", CPS, WORKERS)
    text = [f"{s.where}: {s.command}" for s in steps]
    patch = "v" + versions.KUBERNETES_PATCH["1.36"]
    apply = text.index(f"gpu-staging-cp-0: kubeadm upgrade apply -y {patch}")
    assert text.index(f"gpu-staging-cp-0: kubeadm upgrade plan {patch}") < apply
    # The other control planes follow with `kubeadm upgrade node`, before any kubelet moves.
    nodes_upgrade = [i for i, t in enumerate(text) if t.endswith("kubeadm upgrade node")]
    kubelets = [i for i, t in enumerate(text) if "kubelet=" in t]
    assert all(apply < i for i in nodes_upgrade) and apply < min(kubelets)
    assert [t.split(":")[0] for t in text if t.endswith("kubeadm upgrade node")][:2] == CPS[1:]
    # Every node: drained before its kubelet changes, uncordoned and Ready before the next is drained.
    drains = [i for i, s in enumerate(steps) if s.where == LOCAL and s.command.startswith("kubectl drain")]
    assert len(drains) == len(CPS) + len(WORKERS)
    for node in CPS + WORKERS:
        d = text.index(f"local: {upgrade.DRAIN.format(node=node)}")
        k = next(i for i, t in enumerate(text) if t.startswith(f"{node}: ") and "kubelet=" in t)
        u = text.index(f"local: kubectl uncordon {node}")
        w = text.index(f"local: kubectl wait --for=condition=Ready node/{node} --timeout=10m")
        assert d < k < u < w
        later = [i for i in drains if i > d]
        assert not later or w < later[0], node
    pkg = versions.kubernetes_package_version("1.36")
    assert f"kubelet={pkg}" in text[kubelets[0]] and "apt-mark hold kubelet kubectl" in text[kubelets[0]]
    assert [s.command for s in steps[-2:]] == [
        "pulumi config set --path gpu-platform:linode.controlPlaneVersion 1.36 -s linode-ha",
        "pulumi config set gpu-platform:kubernetesVersion 1.36 -s linode-ha"]


def test_cli_prints_the_plan_and_refuses_a_skip_naming_the_key(capsys):
    assert upgrade.main(["--stack", "linode-dev", "--to", "1.36"]) == 0
    out = capsys.readouterr().out
    assert "[gpu-dev-cp-0] kubeadm upgrade apply -y v" + versions.KUBERNETES_PATCH["1.36"] in out
    assert "[local] kubectl drain gpu-dev-ada-0" in out and "[local] kubectl drain gpu-dev-system-0" in out
    assert upgrade.main(["--stack", "linode-dev", "--to", "1.37"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kubernetesVersion: 1.35 -> 1.37 skips a minor")


def test_a_hand_edited_kubernetes_version_is_refused_before_anything_is_registered():
    """kubernetesVersion ahead of what the control plane runs would give new nodes a newer kubelet."""
    import copy

    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.runner import stack_input_from_mapping
    from tests.conftest import stack_config

    cfg = copy.deepcopy(stack_config("linode-dev"))
    assert cfg["gpu-platform:linode"]["controlPlaneVersion"] == cfg["gpu-platform:kubernetesVersion"]
    cfg["gpu-platform:kubernetesVersion"] = "1.36"
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")
    message = str(err.value)
    assert "gpu-platform:kubernetesVersion: \"1.36\" -> 1.35" in message and "linode.controlPlaneVersion" in message
    assert "python -m gpu_platform.components.linode.upgrade" in message
    # What the upgrade tool writes (both keys) is no longer a version-skew problem; 1.36 is still refused
    # because no pinned Cilium's compatibility table lists it yet (the calendar's cni: rows).
    cfg["gpu-platform:linode"]["controlPlaneVersion"] = "1.36"
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")
    message = str(err.value)
    assert "1 problem(s)" in message and "linode.cni" in message and "controlPlaneVersion" not in message, message
