"""A cloud stack's platform layer deployed by the real Pulumi engine onto a rehearsal control plane, its cloud layer
supplied by a named shim (gpu_platform/rehearsal/shims.py; issue 36 item 3). No cloud provider plugin can be built
here, and each cloud program makes its cluster and installs the platform on it in one program, so the engine run
starts the program from a `__main__.py` that first replaces the cloud module's `create_cluster` with the shim's
(the handle the cloud component would return, with the rehearsal's API server behind its Kubernetes provider) and
`create_billing_alerts` with nothing: what runs through the engine is MlPlatform on that handle; what does not is
every resource of the cloud itself (the shim's docstring lists them).

gcp-prod: GkeClusterShim; aws-prod: EksClusterShim. Each its own control plane (one up, second up, destroy for the module): the session's shared
cluster of the stack has the platform installed by the rehearsal's own installer. Needs `make engine-build`,
`make engine-venv` and the chart folder."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from gpu_platform.components.cluster import TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT
from gpu_platform.rehearsal import engine, shims
from tests.conftest import ROOT
from tests.fit_support import CHARTS
from tests.test_engine_deploy import _need_engine


def test_a_cloud_without_a_shim_is_refused_naming_the_clouds_that_have_one():
    with pytest.raises(engine.EngineError, match=r"no cloud-layer shim for cloud 'linode' .*has gcp, aws"):
        engine.shim_prelude("linode")
    assert engine.shim_prelude("kubernetes") == ""
    assert "shims.install('gcp')" in engine.shim_prelude("gcp") and "shims.install('aws')" in engine.shim_prelude("aws")
    with pytest.raises(ValueError, match="no cloud-layer shim for cloud 'linode'"):
        shims.install("linode")


def _up_second_up_destroy(stack: str, tmp_path_factory) -> SimpleNamespace:
    """One engine run of the stack on its own control plane: up, the training ServiceAccount read, a second up,
    destroy; the report written beside it."""
    _need_engine()
    from tests.rehearsal_support import prepared

    tmp = tmp_path_factory.mktemp(f"engine-{stack.split('-')[0]}")
    cfg, _plan, fit = prepared(stack)
    t0 = time.monotonic()
    with engine.EngineRun(stack, cfg, fit.model, tmp / "run", ROOT, CHARTS) as run:
        run.up()
        sa = run.cp.client.get("v1", "ServiceAccount", TRAINING_SERVICE_ACCOUNT, TRAINING_NAMESPACE)
        second = run.second_up()
        run.destroy()
    (tmp / "engine.json").write_text(json.dumps(run.report.to_json(), indent=1))
    return SimpleNamespace(report=run.report, second=second, sa=sa, cfg=cfg, wall=time.monotonic() - t0)


def _shim_and_releases_from_the_folder(report, shim: str, cloud: str) -> dict:
    """The run's Helm releases by name, after checking the shim stood in for the cloud layer (no resource of the
    cloud's provider) and that every release is deployed from the local chart folder."""
    types = {r["type"] for r in report.resources}
    assert f"gpu-platform:rehearsal:{shim}" in types and not any(t.startswith(f"{cloud}:") for t in types), types
    releases = {r["name"]: r for r in report.resources if r["type"] == "kubernetes:helm.sh/v3:Release"}
    assert releases and all(r["status"] == "deployed" and r["chart"].startswith(str(CHARTS.resolve()))
                            for r in releases.values()), releases
    return releases


@pytest.fixture(scope="module")
def gcp(tmp_path_factory):
    return _up_second_up_destroy("gcp-prod", tmp_path_factory)


@pytest.mark.rehearsal
def test_gcp_prod_platform_is_deployed_by_pulumi_up_on_the_gke_shim(gcp):
    """On the module fixture's own control plane (`gcp`: the engine must deploy onto a cluster without the platform)."""
    report = gcp.report
    releases = _shim_and_releases_from_the_folder(report, "GkeClusterShim", "gcp")
    # The GKE handle's own values reach the platform: GKE runs the device plugin (none installed), and the training
    # ServiceAccount is bound to the checkpoint bucket's service account by Workload Identity.
    assert not [n for n in releases if "device-plugin" in n], sorted(releases)
    assert gcp.sa is not None, "no training ServiceAccount"
    email = (gcp.sa["metadata"].get("annotations") or {}).get("iam.gke.io/gcp-service-account", "")
    assert email.endswith(f"@{gcp.cfg.gcp.project}.iam.gserviceaccount.com"), gcp.sa["metadata"]
    assert set(report.not_deployed) == set(engine.NOT_DEPLOYABLE)


@pytest.mark.rehearsal
def test_a_second_up_of_gcp_prod_changes_nothing_and_destroy_leaves_nothing(gcp):
    """On the module fixture's own control plane (`gcp`: the engine must deploy onto a cluster without the platform)."""
    second = gcp.second
    assert second.returncode == 0 and "unchanged" in gcp.report.second_up and "to update" not in gcp.report.second_up, \
        (second.stdout + second.stderr)[-4000:]
    assert gcp.report.left_behind == [], gcp.report.left_behind


def test_the_engine_option_goes_with_rehearse_and_names_the_two_engines():
    import subprocess
    import sys

    from gpu_platform.preflight.verdict import EXIT_USAGE

    proc = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "onprem-dev", "--engine", "pulumi"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_USAGE and "--engine goes with --rehearse" in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "onprem-dev", "--rehearse", "--engine", "terraform"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_USAGE and "invalid choice: 'terraform' (choose from 'rehearsal', 'pulumi')" in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def aws(tmp_path_factory):
    return _up_second_up_destroy("aws-prod", tmp_path_factory)


@pytest.mark.rehearsal
def test_aws_prod_platform_is_deployed_by_pulumi_up_on_the_eks_shim(aws):
    """On the module fixture's own control plane (`aws`: the engine must deploy onto a cluster without the platform)."""
    report = aws.report
    releases = _shim_and_releases_from_the_folder(report, "EksClusterShim", "aws")
    # The EKS handle's own values reach the platform: the AL2023 AMI has no device plugin (the platform installs
    # it), and the training ServiceAccount carries the IRSA role annotation.
    assert [n for n in releases if "device-plugin" in n], sorted(releases)
    assert (aws.sa["metadata"].get("annotations") or {}).get("eks.amazonaws.com/role-arn", "").startswith(
        f"arn:aws:iam::{shims.STANDIN_AWS_ACCOUNT}:role/"), aws.sa["metadata"]
    assert set(report.not_deployed) == set(engine.NOT_DEPLOYABLE)


@pytest.mark.rehearsal
def test_a_second_up_of_aws_prod_changes_nothing_and_destroy_leaves_nothing(aws):
    """On the module fixture's own control plane (`aws`: the engine must deploy onto a cluster without the platform)."""
    second = aws.second
    assert second.returncode == 0 and "unchanged" in aws.report.second_up and "to update" not in aws.report.second_up, \
        (second.stdout + second.stderr)[-4000:]
    assert aws.report.left_behind == [], aws.report.left_behind


def test_rehearse_with_the_pulumi_engine_runs_the_engine_path_after_preflight(tmp_path):
    """`make rehearse STACK=onprem-dev ENGINE=pulumi`'s command, with a component cache that lacks the engine: preflight
    runs, then the engine path (not the rehearsal's installer) stops naming what is missing and how to build it."""
    import os
    import subprocess
    import sys

    from gpu_platform.rehearsal.binaries import CACHE_ENV
    from gpu_platform.rehearsal.cli import EXIT_FAILED

    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "onprem-dev", "--rehearse", "--engine", "pulumi",
                           "--out", str(tmp_path / "build"), "--quiet"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == EXIT_FAILED, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"the engine is not built: {tmp_path / 'cache'}/bin/pulumi" in proc.stderr, proc.stderr[-2000:]
    assert "`make engine-build engine-venv`" in proc.stderr and "Rehearsal of" not in proc.stdout
