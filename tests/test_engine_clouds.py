"""A cloud stack's platform layer deployed by the real Pulumi engine onto a rehearsal control plane, its cloud layer
supplied by a named shim (gpu_platform/rehearsal/shims.py; issue 36 item 3). No cloud provider plugin can be built
here, and each cloud program makes its cluster and installs the platform on it in one program, so the engine run
starts the program from a `__main__.py` that first replaces the cloud module's `create_cluster` with the shim's
(the handle the cloud component would return, with the rehearsal's API server behind its Kubernetes provider) and
`create_billing_alerts` with nothing: what runs through the engine is MlPlatform on that handle; what does not is
every resource of the cloud itself (the shim's docstring lists them).

gcp-prod: GkeClusterShim; aws-prod: EksClusterShim; linode-dev: LinodeClusterShim (its add-ons through the engine
too). Each its own control plane (one up, second up, destroy for the module): the session's shared
cluster of the stack has the platform installed by the rehearsal's own installer. Needs `make engine-build` and
the chart folder."""

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


def test_every_cloud_that_creates_its_cluster_has_a_shim_and_another_is_refused_by_name():
    from gpu_platform.config.base import CLOUDS

    assert set(shims.SHIMMED_CLOUDS) == set(CLOUDS) - {"kubernetes"} == set(shims.SHIMS)
    assert engine.shim_prelude("kubernetes") == ""
    for cloud in shims.SHIMMED_CLOUDS:
        assert f"shims.install({cloud!r})" in engine.shim_prelude(cloud)
    with pytest.raises(engine.EngineError, match=r"no cloud-layer shim for cloud 'azure' .*has gcp, aws, linode"):
        engine.shim_prelude("azure")
    with pytest.raises(ValueError, match="no cloud-layer shim for cloud 'azure'"):
        shims.install("azure")


def test_only_what_helm_uninstall_keeps_by_design_is_left_by_helm_anything_else_is_left_behind():
    from gpu_platform.data.platform_versions import KUBE_PROMETHEUS_STACK

    releases = [{"type": "kubernetes:helm.sh/v3:Release", "namespace": "made", "createNamespace": True},
                {"type": "kubernetes:helm.sh/v3:Release", "namespace": "given", "createNamespace": False}]
    left = ["v1 Namespace /made", "v1 ConfigMap made/kube-root-ca.crt", "v1 ServiceAccount made/default",
            "v1 ConfigMap made/the-charts-own", "v1 Namespace /given", "v1 ServiceAccount given/default"]
    behind, by_helm = engine.split_left_by_helm(left, releases)
    assert by_helm == left[:3]
    assert behind == ["v1 ConfigMap made/the-charts-own", "v1 Namespace /given", "v1 ServiceAccount given/default"]
    # A chart's crds/ CRDs (kube-prometheus-stack's crds subchart) and their group's APIServices; nothing else of it.
    stack = [{"type": "kubernetes:helm.sh/v3:Release", "namespace": "monitoring",
              "chart": str(CHARTS / KUBE_PROMETHEUS_STACK.archive_name)}]
    left = ["apiextensions.k8s.io/v1 CustomResourceDefinition /prometheusrules.monitoring.coreos.com",
            "apiregistration.k8s.io/v1 APIService /v1.monitoring.coreos.com",
            "apiregistration.k8s.io/v1 APIService /v2.monitoring.coreos.com",
            "apiextensions.k8s.io/v1 CustomResourceDefinition /widgets.example.com", "v1 Namespace /monitoring"]
    behind, by_helm = engine.split_left_by_helm(left, stack)
    assert by_helm == left[:2] and behind == left[2:]


def _up_second_up_destroy(stack: str, tmp_path_factory, read=None, also_off: tuple[str, ...] = ()) -> SimpleNamespace:
    """One engine run of the stack on its own control plane: up, the training ServiceAccount read (and `read(client)`'s
    values after up), a second up, destroy; the report written beside it. `also_off`: parts left out for time."""
    _need_engine()
    from tests.rehearsal_support import ENGINE_RUN, heavy, prepared

    tmp = tmp_path_factory.mktemp(f"engine-{stack.split('-')[0]}")
    cfg, _plan, fit = prepared(stack)
    t0 = time.monotonic()
    with heavy(alone=ENGINE_RUN), engine.EngineRun(stack, cfg, fit.model, tmp / "run", ROOT, CHARTS, also_off=also_off) as run:
        run.up()
        sa = run.cp.client.get("v1", "ServiceAccount", TRAINING_SERVICE_ACCOUNT, TRAINING_NAMESPACE)
        extra = read(run.cp.client) if read is not None else {}
        second = run.second_up()
        run.destroy()
    (tmp / "engine.json").write_text(json.dumps(run.report.to_json(), indent=1))
    return SimpleNamespace(report=run.report, second=second, sa=sa, cfg=cfg, wall=time.monotonic() - t0, **extra)


# kube-prometheus-stack under the engine (its hooks stood in for, its CRDs left by Helm) is deployed by onprem-dev's run
# (test_engine_deploy) and linode-dev's below, where the cluster's own alert rules go through it; the GKE and EKS
# runs leave it out for the suite's time (about 60 CPU-seconds each: the chart's CRDs through the API server).
MONITORING_ELSEWHERE = ("monitoring",)


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
    return _up_second_up_destroy("gcp-prod", tmp_path_factory, also_off=MONITORING_ELSEWHERE)


@pytest.mark.rehearsal(group="engine-gcp-prod")
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
    assert set(report.not_deployed) == set(engine.not_deployable())
    assert report.claims_unprovisioned == [] and report.taken_over == [], (report.claims_unprovisioned, report.taken_over)


@pytest.mark.rehearsal(group="engine-gcp-prod")
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
    return _up_second_up_destroy("aws-prod", tmp_path_factory, also_off=MONITORING_ELSEWHERE)


@pytest.mark.rehearsal(group="engine-aws-prod")
def test_aws_prod_platform_is_deployed_by_pulumi_up_on_the_eks_shim(aws):
    """On the module fixture's own control plane (`aws`: the engine must deploy onto a cluster without the platform)."""
    report = aws.report
    releases = _shim_and_releases_from_the_folder(report, "EksClusterShim", "aws")
    # The EKS handle's own values reach the platform: the AL2023 AMI has no device plugin (the platform installs
    # it), and the training ServiceAccount carries the IRSA role annotation.
    assert [n for n in releases if "device-plugin" in n], sorted(releases)
    assert (aws.sa["metadata"].get("annotations") or {}).get("eks.amazonaws.com/role-arn", "").startswith(
        f"arn:aws:iam::{shims.STANDIN_AWS_ACCOUNT}:role/"), aws.sa["metadata"]
    assert set(report.not_deployed) == set(engine.not_deployable())
    assert report.claims_unprovisioned == [] and report.taken_over == [], (report.claims_unprovisioned, report.taken_over)


@pytest.mark.rehearsal(group="engine-aws-prod")
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
    assert "`make engine-build venv`" in proc.stderr and "Rehearsal of" not in proc.stdout


@pytest.fixture(scope="module")
def linode(tmp_path_factory):
    def read(client):
        secrets = client.list("v1", "Secret", "kube-system")
        return {"token_secrets": sorted(s["metadata"]["name"] for s in secrets
                                        if s["metadata"]["name"].startswith(f"{addons.TOKEN_SECRET}-"))}

    from gpu_platform.components.linode import addons

    return _up_second_up_destroy("linode-dev", tmp_path_factory, read)


@pytest.mark.rehearsal(group="engine-linode-dev")
def test_linode_dev_platform_and_add_ons_are_deployed_by_pulumi_up_on_the_linode_shim(linode):
    """On the module fixture's own control plane (`linode`: the engine must deploy onto a cluster without the platform)."""
    from gpu_platform.components.linode import addons
    from gpu_platform.components.linode.cluster import addons_args
    from gpu_platform.data import linode_versions

    report = linode.report
    releases = _shim_and_releases_from_the_folder(report, "LinodeClusterShim", "linode")
    # LinodeKubeadmCluster's in-cluster half went through the engine too: the CNI, CCM, CSI and device plugin
    # releases at their pins, the metadata-deny policy (a Cilium CR, after the release), the default StorageClass
    # and the token Secret the CCM and CSI driver read (named by the token's digest).
    args = addons_args(linode.cfg, "")
    by_chart = {r["chart"].rsplit("/", 1)[-1]: r for r in releases.values()}
    for chart in (linode_versions.cni_chart(args.cni, args.kubernetes_minor, also=args.running_minor),
                  linode_versions.LINODE_CCM_CHART, linode_versions.LINODE_CSI_CHART,
                  linode_versions.NVIDIA_DEVICE_PLUGIN_CHART):
        assert chart.archive_name in by_chart, (chart.archive_name, sorted(by_chart))
    kinds = {(r["type"], r["name"]) for r in report.resources}
    assert ("kubernetes:cilium.io/v2:CiliumClusterwideNetworkPolicy", "gpu-dev-addons-deny-instance-metadata") in kinds
    assert ("kubernetes:storage.k8s.io/v1:StorageClass", "gpu-dev-addons-default-storage") in kinds
    assert linode.token_secrets == [addons.token_secret_name(shims.STANDIN_LINODE_TOKEN)], linode.token_secrets
    assert report.stood_in and "cilium-operator" in report.stood_in[0], report.stood_in
    # The Linode handle's own values reach the platform: the training pods' checkpoint keys as a Secret (not
    # identity-based as on GKE and EKS), the ServiceAccount without a cloud identity annotation.
    assert linode.sa is not None and not (linode.sa["metadata"].get("annotations") or {}), linode.sa["metadata"]
    # and the cluster's own alert rules (etcd snapshots, the API tokens' stated expiry) through the platform's monitoring.
    rules = {r["name"] for r in report.resources if r["type"] == "kubernetes:monitoring.coreos.com/v1:PrometheusRule"}
    assert {f"platform-monitoring-{addons.ETCD_BACKUP_RULE}", f"platform-monitoring-{addons.TOKEN_EXPIRY_RULE}"} <= rules, rules
    assert set(report.not_deployed) == set(engine.not_deployable())
    assert report.claims_unprovisioned == [] and report.taken_over == [], (report.claims_unprovisioned, report.taken_over)


@pytest.mark.rehearsal(group="engine-linode-dev")
def test_a_second_up_of_linode_dev_changes_nothing_and_destroy_leaves_nothing(linode):
    """On the module fixture's own control plane (`linode`: the engine must deploy onto a cluster without the platform)."""
    second = linode.second
    assert second.returncode == 0 and "unchanged" in linode.report.second_up and "to update" not in linode.report.second_up, \
        (second.stdout + second.stderr)[-4000:]
    assert linode.report.left_behind == [], linode.report.left_behind
    # What Helm's --create-namespace made for the device plugin's release, which `helm uninstall` leaves (the cluster
    # itself goes in the same destroy on Linode: addons._release), and kube-prometheus-stack's CRDs (its crds/
    # directory, test_engine_deploy says more), and nothing else.
    namespace = ["v1 ConfigMap nvidia-device-plugin/kube-root-ca.crt", "v1 Namespace /nvidia-device-plugin",
                 "v1 ServiceAccount nvidia-device-plugin/default"]
    # With Kubeflow deployed, JobSet's CRD too (the crds/ directory of the Trainer chart's jobset subchart).
    jobset = (["apiextensions.k8s.io/v1 CustomResourceDefinition /jobsets.jobset.x-k8s.io",
               "apiregistration.k8s.io/v1 APIService /v1alpha2.jobset.x-k8s.io"]
              if "kubeflow" not in linode.report.not_deployed else [])
    others = [x for x in linode.report.left_by_helm if x not in namespace + jobset]
    assert set(namespace + jobset) <= set(linode.report.left_by_helm), linode.report.left_by_helm
    assert len(others) == 12 and all(x.endswith(".monitoring.coreos.com") for x in others), others


@pytest.fixture(scope="module")
def linode_ha(tmp_path_factory):
    return _up_second_up_destroy("linode-ha", tmp_path_factory, also_off=MONITORING_ELSEWHERE)


@pytest.mark.rehearsal(group="engine-linode-ha")
def test_linode_ha_platform_is_deployed_by_pulumi_up_and_a_second_up_and_destroy_leave_nothing(linode_ha):
    """Every shipped stack through the engine (issue 36 item 3): linode-ha, on the same shim as linode-dev (its
    Kubernetes layer differs in its pools: fixed GPU nodes, Kueue's quotas and the fit that follow). On the module
    fixture's own control plane; monitoring left out for time (linode-dev's run deploys it)."""
    report = linode_ha.report
    releases = _shim_and_releases_from_the_folder(report, "LinodeClusterShim", "linode")
    assert [n for n in releases if "device-plugin" in n], sorted(releases)  # the cluster's add-ons through the engine
    assert set(report.not_deployed) == set(engine.not_deployable())
    assert report.claims_unprovisioned == [] and report.taken_over == [], (report.claims_unprovisioned, report.taken_over)
    second = linode_ha.second
    assert second.returncode == 0 and "unchanged" in report.second_up and "to update" not in report.second_up, \
        (second.stdout + second.stderr)[-4000:]
    assert report.left_behind == [], report.left_behind


def test_an_object_key_names_what_up_creates_and_nothing_it_only_reads_or_patches():
    """engine.object_key, which takenOver compares with the cluster before `up`: a read (`.get`, external in the
    state) of an object the cluster has is not a take-over (the first version flagged onprem-dev's reads of
    kube-system/cilium-config, the kubernetes EndpointSlice and its StorageClass); neither is a patch or a release."""
    ns = {"type": "kubernetes:core/v1:Namespace", "custom": True,
          "outputs": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}}
    assert engine.object_key(ns) == " Namespace /monitoring"
    deployment = {"type": "kubernetes:apps/v1:Deployment", "custom": True,
                  "outputs": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "namespace": "d"}}}
    assert engine.object_key(deployment) == "apps Deployment d/w"
    assert engine.unversioned("apps/v1 Deployment d/w") == "apps Deployment d/w"
    assert engine.unversioned("v1 Namespace /monitoring") == " Namespace /monitoring"
    assert engine.object_key({**ns, "external": True}) is None
    assert engine.object_key({**deployment, "type": "kubernetes:apps/v1:DeploymentPatch"}) is None
    assert engine.object_key({"type": "kubernetes:helm.sh/v3:Release", "custom": True, "outputs": {"name": "x"}}) is None
