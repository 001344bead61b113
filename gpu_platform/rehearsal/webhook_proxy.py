"""The pod network's part for a Service-referenced admission webhook, without changing the webhook's configuration.

kube-apiserver dials a webhook whose clientConfig names a Service through its egress selector's `cluster` network
context (k8s.io/apiserver v0.35.4 pkg/util/webhook/authentication.go, pkg/server/egressselector/egress_selector.go):
with an EgressSelectorConfiguration (apiserver.k8s.io/v1beta1) whose `cluster` selection is `proxyProtocol:
HTTPConnect` over `transport.uds`, it connects to the Unix socket, sends `CONNECT <ClusterIP>:<port> HTTP/1.1`, reads
the response (anything but 200 fails the dial with "proxy error from ... code N") and then speaks TLS to the webhook
server through the tunnel, checking its certificate for `<service>.<namespace>.svc` under the configuration's caBundle.
(Over TCP the selection needs a tlsConfig: with an http:// URL kube-apiserver v1.35.4 panics at start,
egressselector.getTLSConfig; so the UDS transport.)

`WebhookProxy` is that proxy: it resolves the CONNECT target to the Service whose spec.clusterIP (or one of
spec.clusterIPs) and one of whose ports match, through the API server, and tunnels to the local address the
rehearsal registered for that Service (`register(namespace, name, port)`: a controller process on the host serving
the Service's webhooks). A target that matches no Service, or a Service nobody registered, is refused with a
`502 Bad Gateway` naming why, logged in `refused`: kube-apiserver then fails the call, which the webhook's
failurePolicy decides (Fail refuses the object, Ignore admits it).
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from typing import Optional

from gpu_platform.rehearsal.kube import ApiError, Client

MAX_REQUEST = 16384  # kube-apiserver's CONNECT request is one line and a Host header


def egress_selector_config(uds: Path) -> str:
    """An EgressSelectorConfiguration (apiserver.k8s.io/v1beta1, kubernetes v1.35.4 staging/src/k8s.io/apiserver/
    pkg/apis/apiserver/v1beta1/types.go) sending the `cluster` network context, and only it, through HTTP CONNECT
    on the Unix socket `uds` (`controlplane` and `etcd` stay direct)."""
    return ("apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n"
            "- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n"
            f"        udsName: {uds}\n")


class WebhookProxy:
    """An HTTP CONNECT proxy on a Unix socket: `<ClusterIP>:<port>` -> the Service's registered local address."""

    def __init__(self, client: Client, socket_path: Path):
        self.client, self.path = client, Path(socket_path)
        self.table: dict[tuple[str, str], tuple[str, int]] = {}  # (namespace, service) -> (host, port)
        self.tunnelled: list[str] = []  # one line per tunnel opened: target -> service -> address
        self.refused: list[str] = []  # one line per CONNECT refused, with why
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None

    # --- the table -------------------------------------------------------------------------------------

    def register(self, namespace: str, service: str, port: int, host: str = "127.0.0.1") -> None:
        with self._lock:
            self.table[(namespace, service)] = (host, port)

    def unregister(self, namespace: str, service: str) -> None:
        with self._lock:
            self.table.pop((namespace, service), None)

    def resolve(self, target: str) -> tuple[Optional[tuple[str, int]], str]:
        """(local address, what it is) for a CONNECT target `host:port`; (None, why) when there is none."""
        host, sep, port_s = target.rpartition(":")
        host = host.strip("[]")
        if not sep or not port_s.isdigit() or not host:
            return None, f"{target!r} is not host:port"
        port = int(port_s)
        try:
            services = self.client.list("v1", "Service")
        except (ApiError, OSError) as exc:
            return None, f"listing Services failed: {exc}"
        for svc in services:
            spec, meta = svc.get("spec") or {}, svc["metadata"]
            ips = set(spec.get("clusterIPs") or []) | {spec.get("clusterIP")}
            if host not in ips or not any(p.get("port") == port for p in spec.get("ports") or []):
                continue
            key = (meta["namespace"], meta["name"])
            with self._lock:
                address = self.table.get(key)
            if address is None:
                return None, f"Service {key[0]}/{key[1]} ({target}) has no local address registered in the rehearsal"
            return address, f"Service {key[0]}/{key[1]}"
        return None, f"no Service has cluster IP and port {target}"

    # --- the server ------------------------------------------------------------------------------------

    def start(self) -> "WebhookProxy":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.listen(64)
        sock.settimeout(0.5)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="rehearsal-webhook-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        try:
            self.path.unlink()
        except OSError:
            pass

    def __enter__(self) -> "WebhookProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        upstream = None
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
                if len(head) > MAX_REQUEST:
                    self._refuse(conn, "?", "request head too long", status="400 Bad Request")
                    return
            head, _, rest = head.partition(b"\r\n\r\n")
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) != 3 or parts[0] != "CONNECT":
                self._refuse(conn, " ".join(parts), "only CONNECT is served", status="405 Method Not Allowed")
                return
            target = parts[1]
            address, what = self.resolve(target)
            if address is None:
                self._refuse(conn, target, what)
                return
            try:
                upstream = socket.create_connection(address, timeout=10)
            except OSError as exc:
                self._refuse(conn, target, f"{what}: {address[0]}:{address[1]} refused the connection ({exc})")
                return
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with self._lock:
                self.tunnelled.append(f"{target} -> {what} -> {address[0]}:{address[1]}")
            if rest:
                upstream.sendall(rest)
            conn.settimeout(None)
            upstream.settimeout(None)
            pump = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
            pump.start()
            _pump(conn, upstream)
            pump.join(30)
        except OSError:
            pass
        finally:
            for s in (conn, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def _refuse(self, conn: socket.socket, target: str, why: str, status: str = "502 Bad Gateway") -> None:
        with self._lock:
            self.refused.append(f"CONNECT {target}: {why}")
        body = f"rehearsal webhook proxy: {why}\n".encode()
        try:
            conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + body)
        except OSError:
            pass


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Bytes from src to dst until src closes; then dst's write side is shut, so the other direction ends too."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
