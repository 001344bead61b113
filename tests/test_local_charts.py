"""The air-gapped option, $GPU_PLATFORM_LOCAL_CHARTS (components/helm.py): every Helm release the program makes
installs the folder's archive and names no repository, so `pulumi up` in deploy.yml installs the very archives
preflight checked, and preflight itself renders those archives when the variable is set.

Adopter review of 9f3f48b: the AWS cluster-autoscaler, aws-node-termination-handler and the Linode node groups'
autoscaler releases bypassed helm_release and fetched from their repositories whatever the variable said; and
preflight run with the variable set stopped at cluster fit ("chart /…/aws-node-termination-handler-0.27.6.tgz
… is in none of the chart directories")."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.components.helm import LOCAL_CHARTS_ENV
from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
from tests.cli_support import preflight_in_process
from tests.conftest import stack_config
from tests.fit_support import CHARTS, need_charts

RELEASE = "kubernetes:helm.sh/v3:Release"


def _linode_with_node_group_image() -> dict:
    """linode-dev with a published node-group provider image: the plan then holds the autoscaler's release."""
    config = stack_config("linode-dev")
    config["gpu-platform:linode"]["nodeGroups"]["image"] = (
        "ghcr.io/example/gpu-platform-linode-node-groups@sha256:" + "a" * 64)
    return config


@pytest.mark.parametrize("stack", ["aws-prod", "gcp-prod", "linode-dev"])
def test_every_release_installs_the_folders_archive_and_names_no_repository(stack, monkeypatch):
    need_charts()
    monkeypatch.setenv(LOCAL_CHARTS_ENV, str(CHARTS))
    config = _linode_with_node_group_image() if stack == "linode-dev" else stack_config(stack)
    plan = run_program(stack_input_from_mapping(stack, config))
    releases = {r.name: r.plain_inputs for r in plan.resources if r.type == RELEASE}
    assert releases
    if stack == "aws-prod":
        charts = {Path(i["chart"]).name for i in releases.values()}
        assert {"cluster-autoscaler-9.47.0.tgz", "aws-node-termination-handler-0.27.6.tgz"} <= charts, charts
    if stack == "linode-dev":
        assert any(Path(i["chart"]).name.startswith("cluster-autoscaler-") for i in releases.values()), releases
    for name, inputs in releases.items():
        assert Path(inputs["chart"]).parent == CHARTS.resolve(), (name, inputs["chart"])
        assert Path(inputs["chart"]).is_file(), (name, inputs["chart"])
        assert not inputs.get("repositoryOpts"), (name, inputs.get("repositoryOpts"))


def test_preflight_with_the_variable_set_renders_the_folders_archives(tmp_path):
    need_charts()
    run = preflight_in_process("aws-prod", "--no-policies", "--quiet", "--out", str(tmp_path),
                               env={LOCAL_CHARTS_ENV: str(CHARTS), "NO_COLOR": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "none of the chart directories" not in run.stdout + run.stderr
