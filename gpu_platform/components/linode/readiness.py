"""The readiness gate of `pulumi up` on Linode: wait until every node the stack created has joined and
is Ready, and every GPU node advertises its `nvidia.com/gpu`; otherwise fail naming each node and why.

Runs on the operator's machine as a pulumi-command `local.Command` (`python3 gpu_platform/components/linode/readiness.py`),
so it uses the standard library only. Inputs (environment, set by the program; secrets stay secrets):
  GATE_SERVER         https://<public API address>:6443
  GATE_CA_PEM         cluster CA (the API certificate is verified against it, server name "kubernetes")
  GATE_CLIENT_CERT_PEM / GATE_CLIENT_KEY_PEM   the admin client certificate
  GATE_EXPECTED       JSON [{"name": "<node>", "gpus": <n>}, ...]
  GATE_TIMEOUT_SECONDS  default 2400 (first boot installs the driver and Kubernetes)
The decision is the pure `problems()`; tests call it directly.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import tempfile
import time
from typing import Any, Optional

# The API server certificate always names "kubernetes" (kubeadm's default SANs); the public address
# may not be known when the certificate is made (no reserved IP), so clients verify that name.
TLS_SERVER_NAME = "kubernetes"


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", []))


def problems(nodes: list[dict[str, Any]], expected: list[dict[str, Any]]) -> list[str]:
    """One line per expected node that is missing, not Ready, or (GPU node) short of GPUs."""
    by_name = {n.get("metadata", {}).get("name"): n for n in nodes}
    out = []
    for want in expected:
        name, gpus = want["name"], int(want.get("gpus", 0))
        node = by_name.get(name)
        if node is None:
            out.append(f"{name}: has not joined the cluster (check `journalctl -u gpu-platform-bootstrap` "
                       f"on the node through the Lish console)")
            continue
        if not _ready(node):
            out.append(f"{name}: joined but not Ready (CNI or kubelet not running)")
            continue
        have = int(str(node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", "0")) or 0)
        if have < gpus:
            out.append(f"{name}: GPU node advertises {have} nvidia.com/gpu, expected {gpus} "
                       f"(driver not loaded or device plugin not running: `nvidia-smi` on the node)")
    return out


def _context(ca_pem: str, cert_pem: str, key_pem: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca_pem)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = os.path.join(tmp, "c.pem"), os.path.join(tmp, "k.pem")
        with open(cert, "w") as f:
            f.write(cert_pem)
        with os.fdopen(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(key_pem)
        ctx.load_cert_chain(cert, key)
    return ctx


def list_nodes(server: str, ctx: ssl.SSLContext) -> list[dict[str, Any]]:
    """GET /api/v1/nodes, verifying the server as TLS_SERVER_NAME whatever address it is reached at."""
    import http.client
    import socket
    from urllib.parse import urlparse

    url = urlparse(server)
    host, port = url.hostname or "", url.port or 443
    conn = http.client.HTTPConnection(host, port, timeout=15)
    # Connect to the address, verify the certificate for the name.
    conn.sock = ctx.wrap_socket(socket.create_connection((host, port), 15), server_hostname=TLS_SERVER_NAME)
    conn.request("GET", "/api/v1/nodes")
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"GET /api/v1/nodes: HTTP {resp.status}")
    return json.loads(body).get("items", [])


def main(env: Optional[dict[str, str]] = None) -> int:
    env = dict(os.environ if env is None else env)
    expected = json.loads(env["GATE_EXPECTED"])
    deadline = time.monotonic() + int(env.get("GATE_TIMEOUT_SECONDS", "2400"))
    ctx = _context(env["GATE_CA_PEM"], env["GATE_CLIENT_CERT_PEM"], env["GATE_CLIENT_KEY_PEM"])
    last: list[str] = ["API server not reachable yet"]
    while time.monotonic() < deadline:
        try:
            last = problems(list_nodes(env["GATE_SERVER"], ctx), expected)
        except (OSError, RuntimeError, ValueError) as exc:
            last = [f"API server not answering: {exc}"]
        if not last:
            print(f"all {len(expected)} nodes Ready", file=sys.stderr)
            return 0
        time.sleep(15)
    print("cluster not ready:\n  " + "\n  ".join(last), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
