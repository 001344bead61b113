"""onprem-dev's Kubernetes layer deployed by the real Pulumi engine onto a rehearsal control plane (issue 36
item 3, the slice that runs today: gpu_platform/rehearsal/engine.py says which platform parts the engine cannot
deploy onto KWOK nodes yet, and why). Needs `make engine-build`, `make engine-venv` and the chart folder."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_platform.components.helm import LOCAL_CHARTS_ENV
from gpu_platform.data.chart import Chart
from gpu_platform.rehearsal import engine
from tests.conftest import ROOT
from tests.fit_support import CHARTS, need_charts
from tests.test_rehearsal_engine import _engine_bin


def test_a_chart_missing_from_the_local_folder_stops_the_program_naming_both(tmp_path, monkeypatch):
    import pulumi

    from gpu_platform.components.helm import local_chart

    chart = Chart("kueue", "0.14.4", "oci://registry.k8s.io/kueue/charts")
    monkeypatch.delenv(LOCAL_CHARTS_ENV, raising=False)
    assert local_chart(chart) is None  # unset: the chart's repository, as before
    monkeypatch.setenv(LOCAL_CHARTS_ENV, str(tmp_path))
    with pytest.raises(pulumi.RunError, match=rf"{tmp_path}, which has no kueue-0.14.4.tgz .*charts pull --dest"):
        local_chart(chart)
    (tmp_path / "kueue-0.14.4.tgz").write_bytes(b"archive")
    assert local_chart(chart) == str(tmp_path / "kueue-0.14.4.tgz")


def _need_engine() -> None:
    _engine_bin()
    if not (ROOT / ".venv-engine" / "bin" / "python").is_file():
        pytest.skip("no .venv-engine: run `make engine-venv` (requirements-engine.txt)")
    need_charts()


# One chart's pinned version moved, before the program runs: dcgm-exporter (a release onprem-dev deploys) to 4.8.3, an
# archive the test's chart folder holds (4.8.2's, with that version in its Chart.yaml: what `charts pull` would save).
MOVED = ("from dataclasses import replace as _replace\n\n"
         "from gpu_platform.data import platform_versions as _versions\n\n"
         "_versions.DCGM_EXPORTER = _replace(_versions.DCGM_EXPORTER, version='4.8.3')\n")


def _charts_with_a_moved_version(tmp) -> Path:
    """The chart folder (links to every archive and the kustomize builds) plus dcgm-exporter-4.8.3.tgz."""
    folder = tmp / "charts"
    folder.mkdir()
    for entry in CHARTS.iterdir():
        (folder / entry.name).symlink_to(entry.resolve())
    with tarfile.open(CHARTS / "dcgm-exporter-4.8.2.tgz") as src, \
            tarfile.open(folder / "dcgm-exporter-4.8.3.tgz", "w:gz") as dst:
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name == "dcgm-exporter/Chart.yaml":
                data = re.sub(rb"(?m)^version: 4\.8\.2$", b"version: 4.8.3", data)
                assert b"version: 4.8.3" in data
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return folder


@pytest.fixture(scope="module")
def onprem(tmp_path_factory):
    """onprem-dev through the engine once, every assertion below on its record: the policy preview, `up`, a second
    `up --refresh --expect-no-changes`, a preview with one chart's version moved, `destroy`. Starts its own control
    plane: the session's shared cluster of a stack (tests/rehearsal_support.py shared()) has the platform installed
    by the rehearsal's own installer, and the engine must deploy onto a cluster that does not have it yet."""
    _need_engine()
    from tests.rehearsal_support import prepared

    tmp = tmp_path_factory.mktemp("engine-onprem")
    cfg, _plan, fit = prepared("onprem-dev")
    t0 = time.monotonic()
    with engine.EngineRun("onprem-dev", cfg, fit.model, tmp / "run", ROOT, _charts_with_a_moved_version(tmp),
                          policy_config=_policy_config(tmp)) as run:
        policy = run.policy_preview
        run.up()
        client = run.cp.client
        admission = {"secret": client.get("v1", "Secret", "kube-prometheus-stack-admission", "monitoring"),
                     **{kind: client.get("admissionregistration.k8s.io/v1", kind, "kube-prometheus-stack-admission")
                        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")},
                     "service": client.get("v1", "Service", "kube-prometheus-stack-operator", "monitoring")}
        second = run.second_up()
        run.replant(None, prelude=MOVED)
        moved = run.preview_changes()
        run.replant(PLANT_PROVIDER + KATIB_FROM_THE_FOLDER, prelude="")
        katib = run.preview_changes(check=False)
        katib_errors = list(run.preview_errors)
        run.replant(None, prelude="")
        run.destroy()
    (tmp / "engine.json").write_text(json.dumps(run.report.to_json(), indent=1))
    return SimpleNamespace(report=run.report, policy=policy, second=second, moved=moved, katib=katib, katib_errors=katib_errors,
                           admission=admission, wall=time.monotonic() - t0)


@pytest.mark.rehearsal
def test_the_policy_pack_run_by_the_engine_finds_no_violation_in_onprem_dev_as_shipped(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    # The stack as shipped less engine.NOT_PREVIEWABLE (Kubeflow: its docstring says what the engine found).
    out = onprem.policy.stdout + onprem.policy.stderr
    assert onprem.policy.returncode == 0 and onprem.report.policy_violations == [], out[-4000:]


@pytest.mark.rehearsal
def test_onprem_dev_is_deployed_by_pulumi_up_with_every_chart_from_the_local_folder(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    report = onprem.report
    types = {r["type"] for r in report.resources}
    assert {"kubernetes:core/v1:Namespace", "kubernetes:scheduling.k8s.io/v1:PriorityClass",
            "kubernetes:core/v1:ResourceQuota", "kubernetes:networking.k8s.io/v1:NetworkPolicy"} <= types, types
    releases = [r for r in report.resources if r["type"] == "kubernetes:helm.sh/v3:Release"]
    assert releases and all(r["status"] == "deployed" and r["chart"].startswith(str(CHARTS.resolve())) for r in releases), releases
    assert set(report.not_deployed) == set(engine.NOT_DEPLOYABLE)
    assert onprem.wall < 900


@pytest.mark.rehearsal
def test_a_second_up_of_onprem_dev_changes_nothing(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    second = onprem.second
    assert second.returncode == 0 and "unchanged" in onprem.report.second_up and "to update" not in onprem.report.second_up, \
        (second.stdout + second.stderr)[-4000:]


@pytest.mark.rehearsal
def test_one_charts_pinned_version_moved_previews_as_an_update_of_that_release_only(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    assert onprem.moved == [{"op": "update", "type": "kubernetes:helm.sh/v3:Release", "name": "platform-gpu-dcgm-exporter",
                             "diffKeys": ["chart", "version"]}], onprem.moved


@pytest.mark.rehearsal
def test_katibs_kustomize_install_from_the_local_folder_is_built_by_the_engines_provider(onprem):
    """On the module fixture's own control plane (`onprem`). The program's own overlay, as it passes it with
    $GPU_PLATFORM_LOCAL_CHARTS set, previewed through pulumi-resource-kubernetes' kustomize (krusty): every object of
    the pinned release, the overlay's patches applied, and nothing cloned (any HTTP request goes to a closed port).
    Without the fix the provider tries to clone github.com/kubeflow/katib and the preview registers no child."""
    creates = {(c["type"], c["name"]) for c in onprem.katib if c["op"] == "create"}
    assert ("kubernetes:kustomize/v2:Directory", "planted-katib") in creates, onprem.katib
    assert ("kubernetes:apps/v1:Deployment", "planted-katib:kubeflow/katib-controller") in creates, onprem.katib
    assert ("kubernetes:core/v1:Namespace", "planted-katib:kubeflow") not in creates  # the overlay deletes it
    planted = [c for c in onprem.katib if c["type"] != "pulumi:providers:kubernetes"]  # the plant's own provider
    assert all(c["op"] == "create" and c["name"].startswith("planted-katib") for c in planted), onprem.katib
    # The one error: the pinned SDK's type for the Directory's `resources` (engine.NOT_PREVIEWABLE), raised only after
    # the provider built the install. Any other error, or none once the SDK is fixed, is news.
    sdk_bug = "AssertionError: Unexpected type. Expected 'list' got '<class 'str'>'"
    assert [e for e in onprem.katib_errors if sdk_bug not in e] == [], onprem.katib_errors


@pytest.mark.rehearsal
def test_destroy_of_onprem_dev_leaves_no_object_behind_but_the_crds_helm_keeps(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform).
    kube-prometheus-stack's CRDs come from its chart's crds/ directory, which `helm uninstall` never deletes (the
    chart's README, "Uninstall Helm Chart": to be cleaned up by hand; docs/destroy.md says how): they, and the
    APIServices kube-apiserver keeps for their group's versions, are all that is left, and are reported apart."""
    assert onprem.report.left_behind == [], onprem.report.left_behind
    crds = ["alertmanagerconfigs", "alertmanagers", "podmonitors", "probes", "prometheusagents", "prometheuses",
            "prometheusrules", "scrapeconfigs", "servicemonitors", "thanosrulers"]
    assert onprem.report.left_by_helm == [
        *[f"apiextensions.k8s.io/v1 CustomResourceDefinition /{c}.monitoring.coreos.com" for c in crds],
        "apiregistration.k8s.io/v1 APIService /v1.monitoring.coreos.com",
        "apiregistration.k8s.io/v1 APIService /v1alpha1.monitoring.coreos.com"], onprem.report.left_by_helm


@pytest.mark.rehearsal
def test_kube_prometheus_stacks_certificate_hooks_ran_in_their_pods_place_and_did_their_work(onprem):
    """On the module fixture's own control plane (`onprem`). kube-prometheus-stack deploys through the engine because
    the rehearsal runs its two hook containers in their pods' place (hooks.py): after `up`, the operator's webhook
    certificate Secret holds a CA and a certificate for the operator Service's names signed by it, and every webhook
    of both configurations trusts that CA. Were the hooks completed without their work, the Secret would be missing
    (on a cluster the operator's pod could not mount it and would never start) and the webhooks would trust nothing."""
    import base64

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    hooks = [line for line in onprem.report.stood_in if "kube-webhook-certgen" in line]
    assert len(hooks) == 2 and "admission-create" in hooks[0] and "admission-patch" in hooks[1], onprem.report.stood_in
    assert not any("(exit 1)" in line for line in hooks), hooks
    secret = onprem.admission["secret"]
    assert secret is not None, "no kube-prometheus-stack-admission Secret after up"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca, cert = x509.load_pem_x509_certificate(data["ca"]), x509.load_pem_x509_certificate(data["cert"])
    key = ca.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm)
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    service = onprem.admission["service"]["metadata"]
    assert f"{service['name']}.{service['namespace']}.svc" in names, names
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        webhooks = onprem.admission[kind]["webhooks"]
        assert webhooks and all(base64.b64decode(w["clientConfig"].get("caBundle", "")) == data["ca"] for w in webhooks), kind


# Katib's overlay as the program passes it with $GPU_PLATFORM_LOCAL_CHARTS set (kubeflow.py install_apps).
KATIB_FROM_THE_FOLDER = (
    "from pulumi_kubernetes.kustomize import v2 as _kustomize\n"
    "from gpu_platform.components.helm import local_kustomize\n"
    "from gpu_platform.components.paths import PACKAGE_DIR\n"
    "from gpu_platform.data import platform_versions as _v\n\n"
    "_kustomize.Directory('planted-katib', directory=local_kustomize(PACKAGE_DIR / _v.KUSTOMIZE_OVERLAYS['katib-standalone']),\n"
    "                     opts=_p)\n")
PLANT_PROVIDER = (
    "import os\nimport pulumi\nimport pulumi_kubernetes as k8s\n\n"
    "_kc = open(os.environ['KUBECONFIG']).read()\n"
    "_p = pulumi.ResourceOptions(provider=k8s.Provider('planted', kubeconfig=_kc))\n")


def _planted_run(tmp_path, plant: str):
    _need_engine()
    from tests.rehearsal_support import prepared

    cfg, _plan, fit = prepared("onprem-dev")
    # The plants need none of the platform: monitoring (deployed by the module fixture's run) is left out here, after
    # the policy preview, for the module's time.
    return engine.EngineRun("onprem-dev", cfg, fit.model, tmp_path / "run", ROOT, CHARTS, plant=PLANT_PROVIDER + plant,
                            policy_config=_policy_config(tmp_path), also_off=("monitoring",))


def _policy_config(tmp_path) -> Path:
    """The stack's policy pack config as preview.yml and deploy.yml write it."""
    path = tmp_path / "policy-config.json"
    path.write_text(subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "policy-config", "onprem-dev"],
                                   cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    return path


# A perpetual diff: an input that differs on every run (a timestamp in a ConfigMap). A value the API server only
# rewrites (a LimitRange's "1000m" read back as "1") was planted first and is NOT a diff for this provider:
# pulumi-kubernetes v4.25.0's server-side apply compares quantities as quantities, also after --refresh.
PERPETUAL = ("import time\n"
             # and an image by tag, which the mandatory images-by-digest policy refuses
             "k8s.apps.v1.Deployment('planted-web', metadata={'name': 'web', 'namespace': 'default'},\n"
             "    spec={'selector': {'matchLabels': {'app': 'web'}}, 'template': {'metadata': {'labels': {'app': 'web'}},\n"
             "          'spec': {'containers': [{'name': 'web', 'image': 'nginx:1.27'}]}}}, opts=_p)\n"
             "k8s.core.v1.ConfigMap('planted-stamp', metadata={'name': 'planted-stamp', 'namespace': 'default'},\n"
             "                      data={'renderedAt': str(time.time_ns())}, opts=_p)\n")
# A custom resource ordered before its CRD (the CRD depends on it).
CR_BEFORE_CRD = (
    "_cr = k8s.apiextensions.CustomResource('planted-widget', api_version='example.com/v1', kind='Widget',\n"
    "    metadata={'name': 'w', 'namespace': 'default'}, spec={'size': 1}, opts=_p)\n"
    "k8s.apiextensions.v1.CustomResourceDefinition('planted-crd', metadata={'name': 'widgets.example.com'},\n"
    "    spec={'group': 'example.com', 'scope': 'Namespaced',\n"
    "          'names': {'kind': 'Widget', 'plural': 'widgets', 'singular': 'widget'},\n"
    "          'versions': [{'name': 'v1', 'served': True, 'storage': True,\n"
    "                        'schema': {'openAPIV3Schema': {'type': 'object', 'x-kubernetes-preserve-unknown-fields': True}}}]},\n"
    "    opts=pulumi.ResourceOptions.merge(_p, pulumi.ResourceOptions(depends_on=[_cr])))\n")


@pytest.mark.rehearsal
def test_a_perpetual_diff_and_a_custom_resource_before_its_crd_fail_the_engine_checks(tmp_path):
    """Starts its own control plane (as the test above, and one for both plants: the second is planted after the
    first is caught). The program with a perpetual diff deploys, and the second `up --refresh --expect-no-changes`
    fails naming the resource (and the pack, run by the engine, refuses its image by tag); then with a custom resource ordered before its CRD, `up` fails naming its kind;
    `destroy` still leaves nothing."""
    run = _planted_run(tmp_path, PERPETUAL)
    with run:
        assert run.policy_preview.returncode != 0, (run.policy_preview.stdout + run.policy_preview.stderr)[-4000:]
        assert run.report.policy_violations == ["[mandatory]  images-by-digest  (kubernetes:apps/v1:Deployment: planted-web)"]
        run.up()
        second = run.second_up()
        out = second.stdout + second.stderr
        assert second.returncode != 0 and "planted-stamp" in out and "renderedAt" in out, out[-4000:]
        assert "no changes were expected for update but changes were proposed" in out, out[-4000:]
        run.replant(PLANT_PROVIDER + CR_BEFORE_CRD)
        with pytest.raises(engine.EngineError, match=r'no matches for kind "Widget" in version "example.com/v1"'):
            run.up()
        run.destroy()
    assert run.report.left_behind == [], run.report.left_behind
