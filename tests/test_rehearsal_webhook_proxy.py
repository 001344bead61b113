"""The rehearsal's webhook proxy (gpu_platform/rehearsal/webhook_proxy.py): kube-apiserver's egress selector sends a
Service-referenced admission webhook through it to a server on the host, the webhook configuration unchanged."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpu_platform.rehearsal import binaries, pki
from gpu_platform.rehearsal.kube import ApiError
from gpu_platform.rehearsal.webhook_proxy import WebhookProxy, egress_selector_config

needs_components = pytest.mark.skipif(
    not binaries.bin_dir().is_dir(),
    reason=f"no component cache at {binaries.bin_dir()}: build it with `{binaries.BUILD_COMMAND}`")

NS, SERVICE = "judged", "judge"
REFUSAL = "the judge refuses ConfigMaps named forbidden"


class _Services:
    """What the proxy asks the API server: the Services (a test without a control plane)."""

    def __init__(self, services):
        self.services = services

    def list(self, api_version, kind, namespace=None, selector=None):
        assert (api_version, kind) == ("v1", "Service")
        return self.services


def _connect(path, target: str) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(path))
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        return s.recv(4096)


def test_the_proxy_tunnels_a_registered_services_cluster_ip_and_refuses_anything_else(tmp_path):
    echo = socket.create_server(("127.0.0.1", 0))
    port = echo.getsockname()[1]

    def serve():
        conn, _ = echo.accept()
        with conn:
            conn.sendall(b"hello " + conn.recv(100))

    threading.Thread(target=serve, daemon=True).start()
    svc = {"metadata": {"namespace": NS, "name": SERVICE},
           "spec": {"clusterIP": "10.96.7.7", "clusterIPs": ["10.96.7.7"], "ports": [{"port": 443, "targetPort": 9443}]}}
    other = {"metadata": {"namespace": "x", "name": "unregistered"},
             "spec": {"clusterIP": "10.96.8.8", "ports": [{"port": 443}]}}
    with WebhookProxy(_Services([svc, other]), tmp_path / "p.sock") as proxy:
        proxy.register(NS, SERVICE, port)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(str(proxy.path))
            s.sendall(b"CONNECT 10.96.7.7:443 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200 ")
            s.sendall(b"through")
            assert s.recv(100) == b"hello through"
        assert _connect(proxy.path, "10.96.7.7:8443").startswith(b"HTTP/1.1 502 ")  # not a port of the Service
        refused = _connect(proxy.path, "10.96.8.8:443")
        assert refused.startswith(b"HTTP/1.1 502 ") and b"x/unregistered" in refused
        proxy.unregister(NS, SERVICE)
        assert _connect(proxy.path, "10.96.7.7:443").startswith(b"HTTP/1.1 502 ")
        assert proxy.refused == [
            "CONNECT 10.96.7.7:8443: no Service has cluster IP and port 10.96.7.7:8443",
            "CONNECT 10.96.8.8:443: Service x/unregistered (10.96.8.8:443) has no local address registered in the rehearsal",
            f"CONNECT 10.96.7.7:443: Service {NS}/{SERVICE} (10.96.7.7:443) has no local address registered in the rehearsal"]
        assert proxy.tunnelled == [f"10.96.7.7:443 -> Service {NS}/{SERVICE} -> 127.0.0.1:{port}"]
    echo.close()


def test_the_egress_selector_configuration_sends_only_the_cluster_context_through_the_socket(tmp_path):
    import yaml

    doc = yaml.safe_load(egress_selector_config(tmp_path / "s.sock"))
    assert doc == {"apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
                   "egressSelections": [{"name": "cluster", "connection": {
                       "proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(tmp_path / "s.sock")}}}}]}


class _Judge(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        name = (req.get("object") or {}).get("metadata", {}).get("name")
        type(self).seen.append(name)
        allowed = name != "forbidden"
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": req["uid"], "allowed": allowed, **({} if allowed else {"status": {"code": 403, "message": REFUSAL}})}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"a": "b"}}


@needs_components
@pytest.mark.rehearsal
def test_a_service_referenced_webhook_is_called_through_the_proxy_and_fails_closed_without_it(tmp_path):
    """Needs its own control plane: kube-apiserver started with the egress selector configuration (the shared
    clusters' are not)."""
    from gpu_platform.rehearsal.controlplane import ControlPlane

    ca = pki.CA.new("judge CA")
    crt, key = ca.issue(f"{SERVICE}.{NS}.svc", dns=[f"{SERVICE}.{NS}.svc"])
    pki.write(tmp_path / "tls.crt", crt)
    pki.write(tmp_path / "tls.key", key, private=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    _Judge.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with ControlPlane(tmp_path / "logs", webhook_proxy=True) as cp:
            client, proxy = cp.client, cp.webhook_proxy
            client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            svc = client.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NS},
                                 "spec": {"ports": [{"port": 443, "targetPort": 9443}], "selector": {"app": SERVICE}}})
            proxy.register(NS, SERVICE, server.server_address[1])
            client.create({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "judge"},
                "webhooks": [{"name": "judge.rehearsal.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                              "failurePolicy": "Fail", "timeoutSeconds": 5,
                              "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
                              "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                         "resources": ["configmaps"]}],
                              "clientConfig": {"service": {"namespace": NS, "name": SERVICE, "path": "/validate", "port": 443},
                                               "caBundle": base64.b64encode(ca.cert_pem).decode()}}]})
            # The API server picks the configuration up from its informer: until then a ConfigMap is not judged.
            deadline, n = time.monotonic() + 30, 0
            while not _Judge.seen:
                assert time.monotonic() < deadline, f"the webhook was never called; the proxy refused {proxy.refused}"
                client.create(_configmap(f"probe-{n}"))
                n += 1
                time.sleep(0.3)
            with pytest.raises(ApiError) as refused:
                client.create(_configmap("forbidden"))
            assert REFUSAL in str(refused.value) and "judge.rehearsal.test" in str(refused.value)
            assert client.get("v1", "ConfigMap", "forbidden", NS) is None
            ip = svc["spec"]["clusterIP"]
            assert f"{ip}:443 -> Service {NS}/{SERVICE} -> 127.0.0.1:{server.server_address[1]}" in proxy.tunnelled

            proxy.unregister(NS, SERVICE)  # nobody serves the Service: failurePolicy Fail refuses every ConfigMap
            with pytest.raises(ApiError) as closed:
                client.create(_configmap("allowed-but-unjudged"))
            assert "failed calling webhook" in str(closed.value) and "judge.rehearsal.test" in str(closed.value), closed.value
            assert client.get("v1", "ConfigMap", "allowed-but-unjudged", NS) is None
            assert any(line.startswith(f"CONNECT {ip}:443: Service {NS}/{SERVICE}") for line in proxy.refused), proxy.refused
    finally:
        server.shutdown()


def test_kueue_manager_under_the_engine_keeps_the_charts_certificate_management_and_leader_election(tmp_path):
    """controller_host.py starts kueue-manager with prepare(as_rendered=True): the program's Configuration keeps its
    internal certificate management (cert-controller makes the Secret and injects the CA) and leader election; only
    the listening addresses, the certDir (where the rehearsal mounts the Secret) and the leader election namespace
    (read from the ServiceAccount mount in a pod) change, each listed."""
    import yaml

    from gpu_platform.components.platform.queue import kueue_manager_config
    from gpu_platform.rehearsal.controllers import Controller, prepare

    ctl = Controller("kueue-manager", "kueue/kueue:", "kueue", "kueue-system", "kueue-controller-manager",
                     "kueue-controller-manager", {"args": ["--config=/controller_manager_config.yaml", "--zap-log-level=2"]},
                     kueue_manager_config(), "kueue-manager-config", stack_timing=True)
    argv = prepare(ctl, tmp_path, tmp_path / "certs", as_rendered=True)
    cfg = yaml.safe_load((tmp_path / "kueue-manager.config.yaml").read_text())
    assert cfg["leaderElection"] == {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io",
                                     "resourceNamespace": "kueue-system"}
    assert "internalCertManagement" not in cfg  # Kueue's default: enabled
    assert cfg["webhook"] == {"port": ctl.webhook_port, "host": "127.0.0.1", "certDir": str(tmp_path / "certs")}
    assert cfg["health"]["healthProbeBindAddress"] == f"127.0.0.1:{ctl.health_port}"
    assert cfg["waitForPodsReady"] == kueue_manager_config()["waitForPodsReady"]  # stack timing: nothing is queued
    assert "--zap-log-level=2" in argv
    changed = {c.split(":", 1)[0] for c in ctl.changes}
    assert changed == {"leaderElection.resourceNamespace", "webhook.port", "webhook.host", "metrics.bindAddress",
                       "health.healthProbeBindAddress", "webhook.certDir",
                       "--feature-gates=VisibilityOnDemand=false (the visibility API server is not rehearsed)"}, ctl.changes

def test_kwok_leaves_the_pods_of_a_held_image_pending_and_readies_every_other():
    """ControlPlane(held_images=...): KWOK's pod-ready Stage gets one more selector (a gojq query, DoesNotExist)."""
    import yaml

    from gpu_platform.rehearsal.controlplane import kwok_stages

    plain = {d["metadata"]["name"]: d for d in yaml.safe_load_all(kwok_stages()) if d}
    held = {d["metadata"]["name"]: d for d in yaml.safe_load_all(kwok_stages(("kueue/kueue:",))) if d}
    assert set(plain) == set(held)
    extra = held["pod-ready"]["spec"]["selector"]["matchExpressions"][len(plain["pod-ready"]["spec"]["selector"]["matchExpressions"]):]
    assert extra == [{"key": '.spec.containers.[] | select(.image | contains("kueue/kueue:")) | .image',
                      "operator": "DoesNotExist"}]
    assert {k: v for k, v in held.items() if k != "pod-ready"} == {k: v for k, v in plain.items() if k != "pod-ready"}


def test_the_engines_snapshot_skips_an_aggregated_api_nobody_serves():
    """With Kueue deployed, the chart's visibility APIServices point at a server the rehearsal does not run, and their
    discovery answers 503: the engine's snapshot of the cluster (taken before every `up`) lists the rest instead of
    failing the run (it did, on the second `up` of tests/test_engine_deploy.py's planted run)."""
    from gpu_platform.rehearsal.engine import snapshot

    class Cluster:
        def request(self, method, path):
            answers = {
                "/apis": {"groups": [{"name": "visibility.kueue.x-k8s.io", "preferredVersion": {"version": "v1beta2"}},
                                     {"name": "kueue.x-k8s.io", "preferredVersion": {"version": "v1beta2"}}]},
                "/api/v1": {"resources": []},
                "/apis/kueue.x-k8s.io/v1beta2": {"resources": [{"name": "clusterqueues", "kind": "ClusterQueue",
                                                               "verbs": ["list"]}]},
                "/apis/kueue.x-k8s.io/v1beta2/clusterqueues": {"items": [{"metadata": {"name": "gpu-training"}}]},
            }
            if path == "/apis/visibility.kueue.x-k8s.io/v1beta2":
                raise ApiError(503, "service unavailable")
            return answers[path]

    assert snapshot(Cluster()) == {"kueue.x-k8s.io/v1beta2 ClusterQueue /gpu-training"}
