"""The few Kubernetes API calls the provider makes, with the pod's service-account credentials.

RBAC (gpu_platform/components/linode/node_groups.py): create Secrets in kube-system (a bootstrap
token per new node; no get/list, so it cannot read any), list nodes (did a node join?), list pods
(is a node still running GPU work?).
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class KubeClient:
    server: str
    token_file: Path = SA_DIR / "token"
    ca_file: Optional[Path] = SA_DIR / "ca.crt"
    timeout_seconds: float = 15.0

    def _request(self, method: str, path: str, body: Optional[dict] = None, query: Optional[dict] = None) -> dict:
        url = self.server.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        # The token is re-read every call: kubelet rotates projected service-account tokens.
        headers = {"Authorization": f"Bearer {self.token_file.read_text().strip()}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file and url.startswith("https") else None
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout_seconds, context=context) as resp:
            return json.loads(resp.read() or b"{}")

    def create_secret(self, namespace: str, manifest: dict) -> None:
        self._request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=manifest)

    def node_names(self, label_selector: str) -> set[str]:
        doc = self._request("GET", "/api/v1/nodes", query={"labelSelector": label_selector})
        return {item["metadata"]["name"] for item in doc.get("items", [])}

    def pods_on_node(self, node_name: str) -> list[dict]:
        doc = self._request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node_name}"})
        return list(doc.get("items", []))

    def cluster_ca_pem(self) -> str:
        assert self.ca_file is not None
        return self.ca_file.read_text()
