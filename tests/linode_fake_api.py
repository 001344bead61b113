"""Local fakes of the two APIs the Linode node-group provider talks to, served on 127.0.0.1.

FakeLinodeApi (gpu_platform/rehearsal/linode_fake_api.py, shared with the rehearsal's autoscaling drill):
the Linode API's instance endpoints, built from recorded real responses.
FakeKubeApi: the Secrets, Nodes and Pods calls of kube_api.KubeClient.
"""

from __future__ import annotations

import json
import urllib.parse
from http.server import BaseHTTPRequestHandler

from gpu_platform.rehearsal.linode_fake_api import TOKEN, FakeLinodeApi, _Server, recorded

__all__ = ["TOKEN", "FakeKubeApi", "FakeLinodeApi", "recorded"]


class FakeKubeApi(_Server):
    def __init__(self):
        self.secrets: list[dict] = []
        self.nodes: list[dict] = []
        self.pods: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body: dict) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                if url.path == "/api/v1/namespaces/kube-system/secrets" and body.get("kind") == "Secret":
                    fake.secrets.append(body)
                    return self._send(201, body)
                self._send(404, {"kind": "Status", "code": 404})

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                if url.path == "/api/v1/nodes":
                    key, _, value = q.get("labelSelector", "").partition("=")
                    items = [n for n in fake.nodes if not key or n["metadata"].get("labels", {}).get(key) == value]
                    return self._send(200, {"kind": "NodeList", "items": items})
                if url.path == "/api/v1/pods":
                    _, _, node = q.get("fieldSelector", "").partition("=")
                    return self._send(200, {"kind": "PodList", "items": [p for p in fake.pods if p["spec"].get("nodeName") == node]})
                self._send(404, {"kind": "Status", "code": 404})

        super().__init__(Handler)

    def join(self, name: str, pool: str) -> None:
        self.nodes.append({"metadata": {"name": name, "labels": {"gpu-platform.io/pool": pool}}})
