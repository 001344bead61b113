"""A worker leaving the cluster cleanly: cordon, evict its pods (PodDisruptionBudgets respected), delete
its Node. Run by the pulumi-command `delete` hook registered with every Linode worker, so shrinking a
GPU pool (gpuPools[].maxNodes) or removing a node drains it before Linode deletes the instance.

    python3 gpu_platform/components/linode/nodeops.py leave <node>

Same environment as the readiness gate (GATE_SERVER, GATE_CA_PEM, GATE_CLIENT_CERT_PEM,
GATE_CLIENT_KEY_PEM). An API server that does not answer (the whole cluster is being destroyed) is a
warning, not a failure. GPU_PLATFORM_SKIP_DRAIN=1 skips draining; NODEOPS_DRAIN_SECONDS (default 1800)
bounds it: a drain that cannot finish (a PodDisruptionBudget, a job that will not stop) fails the
`pulumi up` and names the pods, instead of killing them. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable, Optional

try:  # run as a script (python3 gpu_platform/components/linode/nodeops.py) or imported as a package module
    import readiness  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - the package path
    from gpu_platform.components.linode import readiness  # type: ignore[no-redef]

Request = Callable[[str, str, Optional[dict]], tuple[int, Any]]


def evictable(pods: list[dict]) -> list[dict]:
    """Pods a drain must evict: not DaemonSet-owned, not static (mirror) pods, not already finished
    (kubectl drain --ignore-daemonsets semantics)."""
    out = []
    for pod in pods:
        meta = pod.get("metadata", {})
        if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            continue
        if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
            continue
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        out.append(pod)
    return out


def eviction(pod: dict) -> dict:
    meta = pod["metadata"]
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}


def drain(request: Request, node: str, deadline_s: float, sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Cordon, then evict until nothing evictable is left; returns the pods still there at the deadline."""
    status, _ = request("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    if status == 404:
        return []
    end = clock() + deadline_s
    while True:
        status, body = request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}", None)
        left = evictable(body.get("items", []) if status == 200 else [])
        if not left:
            return []
        for pod in left:
            meta = pod["metadata"]
            # 429: a PodDisruptionBudget says not now; 404: already gone. Both: try again next round.
            request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction", eviction(pod))
        if clock() >= end:
            return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in left]
        sleep(10)


def leave(request: Request, node: str, deadline_s: float, skip_drain: bool = False,
          sleep: Callable[[float], None] = time.sleep) -> int:
    if not skip_drain:
        stuck = drain(request, node, deadline_s, sleep=sleep)
        if stuck:
            print(f"{node}: drain did not finish; still running: {', '.join(stuck)}. Stop them or set "
                  "GPU_PLATFORM_SKIP_DRAIN=1 to remove the node anyway.", file=sys.stderr)
            return 1
    status, _ = request("DELETE", f"/api/v1/nodes/{node}", None)
    if status not in (200, 202, 404):
        print(f"{node}: deleting the Node object failed (HTTP {status})", file=sys.stderr)
        return 1
    print(f"{node}: drained and removed from the cluster", file=sys.stderr)
    return 0


def _client(env: dict[str, str]) -> Request:
    import http.client
    import socket
    from urllib.parse import urlparse

    ctx = readiness._context(env["GATE_CA_PEM"], env["GATE_CLIENT_CERT_PEM"], env["GATE_CLIENT_KEY_PEM"])
    url = urlparse(env["GATE_SERVER"])
    host, port = url.hostname or "", url.port or 443

    def request(method: str, path: str, body: Optional[dict]) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(host, port, timeout=30)
        conn.sock = ctx.wrap_socket(socket.create_connection((host, port), 15),
                                    server_hostname=readiness.TLS_SERVER_NAME)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw) if raw else {}
        except ValueError:
            return resp.status, {}
    return request


def main(argv: Optional[list[str]] = None, env: Optional[dict[str, str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ if env is None else env)
    if len(argv) != 2 or argv[0] != "leave":
        print("usage: nodeops.py leave <node>", file=sys.stderr)
        return 2
    try:
        request = _client(env)
        request("GET", "/version", None)
    except (OSError, KeyError) as exc:
        print(f"{argv[1]}: API server not reachable ({exc}); not draining (cluster being destroyed?)", file=sys.stderr)
        return 0
    return leave(request, argv[1], float(env.get("NODEOPS_DRAIN_SECONDS", "1800")),
                 skip_drain=env.get("GPU_PLATFORM_SKIP_DRAIN") == "1")


if __name__ == "__main__":
    sys.exit(main())
