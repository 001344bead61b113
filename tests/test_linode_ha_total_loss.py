"""Review (issue #32 item 5): an HA cluster that lost every control plane. The recreated cp-0 finds the cluster
record and no peer; it waits (never a second cluster) until the operator creates the init-new-control-plane
file (docs/linode.md "Losing every control plane"), then initialises a new control plane to restore into."""
from __future__ import annotations

from gpu_platform.components.linode import render
from gpu_platform.data import linode_versions as versions
from tests.test_linode_ca_keys import (INIT_NEW_CONTROL_PLANE, _ca, _no_wait, _record, _root, ha_files,  # noqa: F401
                                       needs_namespaces, plans)


@needs_namespaces
def test_ha_cp0_waits_then_initialises_when_the_operator_says_so_after_total_loss(tmp_path, plans, ha_files):
    files = ha_files["gpu-staging-cp-0"]
    root = _root(tmp_path, files, versions.KUBERNETES_PATCH["1.35"])
    _record(root, _ca(plans))
    script = _no_wait(files[render.BOOTSTRAP_SCRIPT_PATH])
    waiting = root.run(script)
    assert waiting.returncode == 1 and "never a second cluster" in waiting.stderr
    assert '"Losing every control plane"' in waiting.stderr and INIT_NEW_CONTROL_PLANE in waiting.stderr
    assert not [line for line in root.log() if " init --config" in line]
    marker = root.root / INIT_NEW_CONTROL_PLANE.lstrip("/")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    proc = root.run(script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line for line in root.log() if " init --config" in line]
    assert (root.root / render.JOINED_MARKER.lstrip("/")).exists()
