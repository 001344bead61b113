"""onprem-dev's Kubernetes layer deployed by the real Pulumi engine onto a rehearsal control plane (issue 36
item 3, the slice that runs today: gpu_platform/rehearsal/engine.py says which platform parts the engine cannot
deploy onto KWOK nodes yet, and why). Needs `make engine-build` and the chart folder."""

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
    `up --refresh --expect-no-changes`, a preview with one chart's version moved, Katib's overlay previewed, then the
    planted defects on the deployed platform (_plants), `destroy`. Starts its own control plane: the session's shared
    cluster of a stack (tests/rehearsal_support.py shared()) has the platform installed by the rehearsal's own
    installer, and the engine must deploy onto a cluster that does not have it yet. The plants ran on a second control
    plane of their own until 2026-11-30: its `up` of the platform and its `destroy` repeated this run's (about four
    minutes of `make test`'s critical path, engine runs taking turns)."""
    _need_engine()
    from tests.rehearsal_support import ENGINE_RUN, heavy, prepared

    tmp = tmp_path_factory.mktemp("engine-onprem")
    cfg, _plan, fit = prepared("onprem-dev")
    charts, policy_config = _charts_with_a_moved_version(tmp), _policy_config(tmp)  # before the turn: no engine work
    t0 = time.monotonic()
    with heavy(alone=ENGINE_RUN), engine.EngineRun("onprem-dev", cfg, fit.model, tmp / "run", ROOT, charts,
                                                   policy_config=policy_config) as run:
        policy = run.policy_preview
        run.up()
        client = run.cp.client
        admission = {"secret": client.get("v1", "Secret", "kube-prometheus-stack-admission", "monitoring"),
                     **{kind: client.get("admissionregistration.k8s.io/v1", kind, "kube-prometheus-stack-admission")
                        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")},
                     "service": client.get("v1", "Service", "kube-prometheus-stack-operator", "monitoring")}
        kueue = {"clusterQueues": client.list("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
                 "localQueues": client.list("kueue.x-k8s.io/v1beta2", "LocalQueue"),
                 "secret": client.get("v1", "Secret", "kueue-webhook-server-cert", "kueue-system"),
                 **{kind: client.get("admissionregistration.k8s.io/v1", kind, f"kueue-{kind[:-len('WebhookConfiguration')].lower()}-webhook-configuration")
                    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")},
                 "pods": client.list("v1", "Pod", "kueue-system")}
        kubeflow = {"runtimes": client.list("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
                    **{f"{name}-secret": client.get("v1", "Secret", secret, "kubeflow-system")
                       for name, secret in (("trainer", "kubeflow-trainer-webhook-cert"),
                                            ("jobset", "jobset-webhook-server-cert"))},
                    **{f"{name}-{kind}": client.get("admissionregistration.k8s.io/v1", kind, config)
                       for name, kind, config in (
                           ("trainer", "ValidatingWebhookConfiguration", "validator.trainer.kubeflow.org"),
                           ("trainer", "MutatingWebhookConfiguration", "defaulter.trainer.kubeflow.org"),
                           ("jobset", "ValidatingWebhookConfiguration", "jobset-validating-webhook-configuration"),
                           ("jobset", "MutatingWebhookConfiguration", "jobset-mutating-webhook-configuration"))},
                    "pods": client.list("v1", "Pod", "kubeflow-system"),
                    "kubeflowPods": client.list("v1", "Pod", "kubeflow"),
                    "claims": client.list("v1", "PersistentVolumeClaim", "kubeflow")}
        second = run.second_up()
        run.replant(None, prelude=MOVED)
        moved = run.preview_changes()
        run.replant(PLANT_PROVIDER + KATIB_FROM_THE_FOLDER, prelude="")
        katib = run.preview_changes(check=False)
        katib_errors = list(run.preview_errors)
        # What the shipped run's tests read, before the plants add to the record.
        shipped = SimpleNamespace(taken_over=list(run.report.taken_over), second_up=run.report.second_up,
                                  policy_violations=list(run.report.policy_violations))
        try:
            planted = _plants(run, policy_config)
        except Exception as exc:  # noqa: BLE001  # the planted test's failure; the shipped run's tests keep their own
            planted = exc
        run.replant(None, prelude="")
        run.destroy()
    (tmp / "engine.json").write_text(json.dumps(run.report.to_json(), indent=1))
    return SimpleNamespace(report=run.report, shipped=shipped, planted=planted, policy=policy, second=second, moved=moved,
                           katib=katib, katib_errors=katib_errors, admission=admission, kueue=kueue, kubeflow=kubeflow,
                           wall=time.monotonic() - t0)


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_the_policy_pack_run_by_the_engine_finds_no_violation_in_onprem_dev_as_shipped(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    # The stack as shipped, Kubeflow's installs expanded object by object (their upstream images are the releases'
    # own: security_rules.PINNED_INSTALL_PARENTS; before, images-by-digest refused 16 Deployments here).
    out = onprem.policy.stdout + onprem.policy.stderr
    assert onprem.policy.returncode == 0 and onprem.shipped.policy_violations == [], out[-4000:]


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_onprem_dev_is_deployed_by_pulumi_up_with_every_chart_from_the_local_folder(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    report = onprem.report
    types = {r["type"] for r in report.resources}
    assert {"kubernetes:core/v1:Namespace", "kubernetes:scheduling.k8s.io/v1:PriorityClass",
            "kubernetes:core/v1:ResourceQuota", "kubernetes:networking.k8s.io/v1:NetworkPolicy"} <= types, types
    releases = [r for r in report.resources if r["type"] == "kubernetes:helm.sh/v3:Release"]
    assert releases and all(r["status"] == "deployed" and r["chart"].startswith(str(CHARTS.resolve())) for r in releases), releases
    assert set(report.not_deployed) == set(engine.not_deployable())
    # Every claim on a class the cluster has (onprem-dev's cluster has no default StorageClass), and nothing the
    # cluster had taken over (users' provider would fail with AlreadyExists there).
    assert report.claims_unprovisioned == [], report.claims_unprovisioned
    assert onprem.shipped.taken_over == [], onprem.shipped.taken_over


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_a_second_up_of_onprem_dev_changes_nothing(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    second, summary = onprem.second, onprem.shipped.second_up
    assert second.returncode == 0 and "unchanged" in summary and "to update" not in summary and "updated" not in summary, \
        (second.stdout + second.stderr)[-4000:]


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_one_charts_pinned_version_moved_previews_as_an_update_of_that_release_only(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform)."""
    assert onprem.moved == [{"op": "update", "type": "kubernetes:helm.sh/v3:Release", "name": "platform-gpu-dcgm-exporter",
                             "diffKeys": ["chart", "version"]}], onprem.moved


@pytest.mark.rehearsal(group="engine-onprem-dev")
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
    # No error: pulumi-kubernetes 4.25.0's SDK typed the Directory's `resources` output as a string and stopped the
    # program here (AssertionError "Unexpected type. Expected 'list'", pulumi/pulumi-kubernetes#3389); the program's
    # own SDK (4.34.2) reads the built provider's list.
    assert onprem.katib_errors == [], onprem.katib_errors


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_destroy_of_onprem_dev_leaves_no_object_behind_but_the_crds_helm_keeps(onprem):
    """On the module fixture's own control plane (`onprem`: the engine must deploy onto a cluster without the platform).
    kube-prometheus-stack's CRDs come from its chart's crds/ directory, which `helm uninstall` never deletes (the
    chart's README, "Uninstall Helm Chart": to be cleaned up by hand; docs/destroy.md says how): they, and the
    APIServices kube-apiserver keeps for their group's versions, are all that is left, and are reported apart."""
    assert onprem.report.left_behind == [], onprem.report.left_behind
    crds = ["alertmanagerconfigs", "alertmanagers", "podmonitors", "probes", "prometheusagents", "prometheuses",
            "prometheusrules", "scrapeconfigs", "servicemonitors", "thanosrulers"]
    # and JobSet's CRD, from the crds/ directory of the Trainer chart's jobset subchart
    assert onprem.report.left_by_helm == sorted([
        *[f"apiextensions.k8s.io/v1 CustomResourceDefinition /{c}.monitoring.coreos.com" for c in crds],
        "apiregistration.k8s.io/v1 APIService /v1.monitoring.coreos.com",
        "apiregistration.k8s.io/v1 APIService /v1alpha1.monitoring.coreos.com",
        "apiextensions.k8s.io/v1 CustomResourceDefinition /jobsets.jobset.x-k8s.io",
        "apiregistration.k8s.io/v1 APIService /v1alpha2.jobset.x-k8s.io"]), onprem.report.left_by_helm


@pytest.mark.rehearsal(group="engine-onprem-dev")
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


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_kueue_is_deployed_by_the_engine_its_webhooks_served_by_kueue_manager_on_the_host(onprem):
    """On the module fixture's own control plane (`onprem`). The queue part is deployed as the program renders it: the
    rehearsal runs kueue-manager in its pods' place (controller_host.py) with the chart's Configuration, whose internal
    certificate management made the webhook Secret and put its CA in both webhook configurations; kube-apiserver called
    those webhooks (clientConfig.service, unchanged) through the webhook proxy; the pods were Ready only once the
    process answered its readinessProbe. Were the webhooks not served, `up` would fail on the program's ClusterQueues
    (failurePolicy Fail); were the pods Ready before, the ClusterQueues would race the webhook."""
    import base64

    kueue = onprem.kueue
    assert sorted(q["metadata"]["name"] for q in kueue["clusterQueues"]) == ["cpu-work", "gpu-training"], kueue["clusterQueues"]
    assert kueue["localQueues"], "no LocalQueue after up"
    ca = base64.b64decode(kueue["secret"]["data"]["ca.crt"])
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        hooks = kueue[kind]["webhooks"]
        assert hooks and all(base64.b64decode(h["clientConfig"]["caBundle"]) == ca
                             and h["clientConfig"]["service"]["name"] == "kueue-webhook-service" for h in hooks), kind
    assert kueue["pods"] and all(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
                                 for p in kueue["pods"]), kueue["pods"]
    stood_in = "\n".join(onprem.report.stood_in)
    assert "kueue-manager run on the host in the place of Deployment kueue-system/kueue-controller-manager's pods" in stood_in
    assert "Secret kueue-system/kueue-webhook-server-cert (ca.crt, ca.key, tls.crt, tls.key) mounted into" in stood_in
    assert re.search(r"webhook proxy .*\b\d+ connection\(s\) to Service kueue-system/kueue-webhook-service", stood_in), stood_in
    assert "not hosted" not in stood_in, stood_in


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_kubeflow_is_deployed_by_the_engine_the_trainers_and_jobsets_webhooks_served_on_the_host(onprem):
    """On the module fixture's own control plane (`onprem`). The Kubeflow part is deployed as the program renders it:
    trainer-manager and jobset-manager run in their pods' place (controller_host.py), each with its pod's volumes at
    the pod's paths (podmounts.py: the fixed certificate folder and the ServiceAccount's namespace), so their charts'
    own certificate management made each webhook Secret and put its CA in the webhook configurations; kube-apiserver
    called the Trainer's validating webhook (failurePolicy Fail) for the program's ClusterTrainingRuntime through the
    webhook proxy; the chart's post-install hook applied the eight built-in runtimes (hooks.py) and its pre-delete
    hook deleted them; Pipelines' and Katib's Deployments came up, their claims bound. Without the Trainer served, `up`
    fails on torch-checkpointed; without the hook, Helm waits for the Job until it times out."""
    import base64

    from gpu_platform.components.platform.kubeflow import CHECKPOINTED_RUNTIME, DEFAULT_RUNTIMES

    assert "kubeflow" not in onprem.report.not_deployed, onprem.report.not_deployed
    kf = onprem.kubeflow
    runtimes = {r["metadata"]["name"]: r for r in kf["runtimes"]}
    assert set(runtimes) == {*DEFAULT_RUNTIMES, CHECKPOINTED_RUNTIME}, sorted(runtimes)
    assert all(runtimes[r]["metadata"]["labels"]["trainer.kubeflow.org/managed-by"] == "runtimes-installer"
               for r in DEFAULT_RUNTIMES)
    for name in ("trainer", "jobset"):
        ca = base64.b64decode(kf[f"{name}-secret"]["data"]["ca.crt"])
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            hooks = kf[f"{name}-{kind}"]["webhooks"]
            assert hooks and all(base64.b64decode(h["clientConfig"]["caBundle"]) == ca for h in hooks), (name, kind)
    for pods in (kf["pods"], kf["kubeflowPods"]):
        assert pods and all(any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
                            for p in pods if not p["metadata"]["name"].startswith("kubeflow-trainer-runtimes")), pods
    assert kf["claims"] and all(c["status"]["phase"] == "Bound" for c in kf["claims"]), kf["claims"]
    stood_in = "\n".join(onprem.report.stood_in)
    for binary, deployment in (("trainer-manager", "kubeflow-trainer-controller-manager"), ("jobset-manager", "jobset-controller")):
        assert (f"{binary} run on the host in the place of Deployment kubeflow-system/{deployment}'s pods" in stood_in
                and "/tmp/k8s-webhook-server/serving-certs <- " in stood_in), stood_in
    assert re.search(r"\d+ connection\(s\) to Service kubeflow-system/kubeflow-trainer-controller-manager", stood_in), stood_in
    assert "the Trainer's runtimes installer script): kubectl apply --server-side" in stood_in, stood_in
    assert re.search(r"the Trainer's runtimes cleanup script\): kubectl delete .*torch-distributed", stood_in), stood_in
    assert "not hosted" not in stood_in and "(exit 1)" not in stood_in, stood_in


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
# A Namespace of the program that the cluster already has (created by the test before this `up`).
EXISTING_NAMESPACE = "k8s.core.v1.Namespace('planted-existing', metadata={'name': 'planted-existing'}, opts=_p)\n"
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


# A ClusterQueue only Kueue's validating webhook refuses (a negative quota: the CRD's schema and CEL rules allow it;
# kueue v0.19.2 pkg/webhooks/clusterqueue_webhook.go validateResourceQuantity).
REFUSED_BY_KUEUE = (
    "k8s.apiextensions.CustomResource('planted-queue', api_version='kueue.x-k8s.io/v1beta2', kind='ClusterQueue',\n"
    "    metadata={'name': 'planted-negative'}, spec={'resourceGroups': [{'coveredResources': ['cpu'],\n"
    "        'flavors': [{'name': 'system', 'resources': [{'name': 'cpu', 'nominalQuota': '-1'}]}]}]}, opts=_p)\n")


# A ClusterTrainingRuntime only the Trainer's validating webhook refuses: its trainer step (the ancestor label) with two
# replicas (kubeflow/trainer v2.3.0 pkg/webhooks/trainingruntime_webhook.go validateReplicatedJobs).
REFUSED_BY_TRAINER = (
    "k8s.apiextensions.CustomResource('planted-runtime', api_version='trainer.kubeflow.org/v1alpha1',\n"
    "    kind='ClusterTrainingRuntime', metadata={'name': 'planted-two-trainers'}, spec={'mlPolicy': {'numNodes': 1},\n"
    "    'template': {'spec': {'replicatedJobs': [{'name': 'node', 'replicas': 2, 'template': {\n"
    "        'metadata': {'labels': {'trainer.kubeflow.org/trainjob-ancestor-step': 'trainer'}},\n"
    "        'spec': {'template': {'spec': {'containers': [{'name': 'node', 'image': 'busybox'}]}}}}}]}}}, opts=_p)\n")


def _plants(run: engine.EngineRun, policy_config: Path) -> SimpleNamespace:
    """The planted defects, one after another on the run's deployed platform (each planted once the one before is
    caught), the program's own resources unchanged: the policy preview and `up` with a perpetual diff, then its second
    `up --refresh --expect-no-changes`; `up` with a custom resource ordered before its CRD; with a Namespace the cluster
    already has; with a ClusterQueue only Kueue's webhook refuses; with a ClusterTrainingRuntime only the Trainer's
    refuses. Each `up` that fails is recorded with its error, not raised, so that the run's `destroy` still follows."""

    def failed_up() -> str:
        try:
            run.up()
        except engine.EngineError as exc:
            return str(exc)
        return ""

    run.replant(PLANT_PROVIDER + PERPETUAL, prelude="")
    policy = run.preview_with_policies(policy_config)
    violations = list(run.report.policy_violations)
    run.up()
    second = run.second_up()
    run.replant(PLANT_PROVIDER + CR_BEFORE_CRD, prelude="")
    cr_before_crd = failed_up()
    # A Namespace the cluster already has: the built provider (4.25.0) takes it over where users' (4.29 and later)
    # fails with AlreadyExists; the run reports it (the review of 2026-11-29 found the engine silent).
    run.cp.client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "planted-existing"}})
    taken_before = len(run.report.taken_over)
    run.replant(PLANT_PROVIDER + EXISTING_NAMESPACE, prelude="")
    existing = failed_up()
    taken_over = run.report.taken_over[taken_before:]
    run.replant(PLANT_PROVIDER + REFUSED_BY_KUEUE, prelude="")
    kueue = failed_up()
    run.replant(PLANT_PROVIDER + REFUSED_BY_TRAINER, prelude="")
    trainer = failed_up()
    return SimpleNamespace(policy=policy, violations=violations, second=second, cr_before_crd=cr_before_crd,
                           existing=existing, taken_over=taken_over, kueue=kueue, trainer=trainer)


@pytest.mark.rehearsal(group="engine-onprem-dev")
def test_a_perpetual_diff_a_custom_resource_before_its_crd_and_a_queue_kueue_refuses_fail_the_engine_checks(onprem):
    """On the module fixture's own control plane (`onprem`), after the shipped run's checks (_plants). The program with
    a perpetual diff deploys, and the second `up --refresh --expect-no-changes` fails naming the resource (and the
    pack, run by the engine, refuses its image by tag); then with a custom resource ordered before its CRD, `up` fails
    naming its kind; a Namespace the cluster already has is reported taken over; then a ClusterQueue with a negative
    quota makes `up` fail with Kueue's own webhook's refusal (kueue-manager on the host, called by kube-apiserver
    through the webhook proxy); then a ClusterTrainingRuntime with two trainer replicas makes it fail with the
    Trainer's (trainer-manager on the host at its pod's paths); `destroy` still leaves nothing
    (test_destroy_of_onprem_dev_leaves_no_object_behind_but_the_crds_helm_keeps)."""
    planted = onprem.planted
    if isinstance(planted, Exception):
        raise planted
    assert planted.policy.returncode != 0, (planted.policy.stdout + planted.policy.stderr)[-4000:]
    assert planted.violations == ["[mandatory]  images-by-digest  (kubernetes:apps/v1:Deployment: planted-web)"]
    out = planted.second.stdout + planted.second.stderr
    assert planted.second.returncode != 0 and "planted-stamp" in out and "renderedAt" in out, out[-4000:]
    assert "no changes were expected for update but changes were proposed" in out, out[-4000:]
    assert re.search(r'no matches for kind "Widget" in version "example.com/v1"', planted.cr_before_crd), planted.cr_before_crd
    assert planted.existing == "" and planted.taken_over == [" Namespace /planted-existing"], (planted.existing,
                                                                                             planted.taken_over)
    assert re.search(r'admission webhook "vclusterqueue.kb.io" denied the request: '
                     r'spec.resourceGroups\[0\].flavors\[0\].resources\[0\].nominalQuota: '
                     r'Invalid value: "-1": must be greater than or equal to 0', planted.kueue), planted.kueue
    assert re.search(r'admission webhook "validator.clustertrainingruntime.trainer.kubeflow.org" '
                     r'denied the request: .*replicas: Invalid value: 2: always must be 1', planted.trainer), planted.trainer
