"""A small Kubernetes API client over HTTPS (http.client + ssl): discovery, server-side apply, get,
list, watch, create, delete, status patches. The Python `kubernetes` client is not a dependency of the
project; this is all the rehearsal needs."""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from typing import Any, Iterable, Optional

FIELD_MANAGER = "gpu-platform-rehearsal"


class ApiError(Exception):
    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.body = status, message, body


class UnknownKind(Exception):
    pass


def _message(status: int, data: bytes) -> tuple[str, Any]:
    try:
        body = json.loads(data)
    except ValueError:
        return data.decode(errors="replace")[:2000], None
    if isinstance(body, dict) and body.get("kind") == "Status":
        return body.get("message") or body.get("reason") or str(status), body
    return str(body)[:2000], body


class Client:
    def __init__(self, host: str, port: int, ca_file: str, token: str, timeout: float = 30.0):
        self.host, self.port, self._bearer, self.timeout = host, port, token, timeout
        self.ctx = ssl.create_default_context(cafile=ca_file)
        self._local = threading.local()
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}  # groupVersion -> kind -> (plural, namespaced)
        self._lock = threading.Lock()

    # --- transport --------------------------------------------------------------------------------

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                query: Optional[dict] = None, parse: bool = True) -> Any:
        if query:
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Authorization": f"Bearer {self._bearer}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(3):
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
                time.sleep(0.2)
        if resp.status >= 400:
            msg, parsed = _message(resp.status, raw)
            raise ApiError(resp.status, msg, parsed)
        if not raw or not parse:
            return None
        try:
            return json.loads(raw)
        except ValueError:  # /readyz, /healthz answer plain text
            return raw.decode(errors="replace")

    # --- discovery ---------------------------------------------------------------------------------

    def _group_version(self, api_version: str) -> dict[str, tuple[str, bool]]:
        with self._lock:
            cached = self._resources.get(api_version)
        if cached is not None:
            return cached
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            doc = self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                raise UnknownKind(f"the API server serves no {api_version}") from None
            raise
        kinds = {r["kind"]: (r["name"], bool(r["namespaced"])) for r in doc.get("resources", []) if "/" not in r["name"]}
        with self._lock:
            self._resources[api_version] = kinds
        return kinds

    def forget(self, api_version: Optional[str] = None) -> None:
        with self._lock:
            if api_version is None:
                self._resources.clear()
            else:
                self._resources.pop(api_version, None)

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        kinds = self._group_version(api_version)
        if kind not in kinds:
            self.forget(api_version)
            kinds = self._group_version(api_version)
        if kind not in kinds:
            raise UnknownKind(f"the API server serves no kind {kind} in {api_version}")
        return kinds[kind]

    def path(self, api_version: str, kind: str, namespace: Optional[str] = None, name: Optional[str] = None,
             subresource: Optional[str] = None) -> str:
        plural, namespaced = self.resource(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base

    def namespaced(self, api_version: str, kind: str) -> bool:
        return self.resource(api_version, kind)[1]

    # --- verbs -------------------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any], manager: str = FIELD_MANAGER, force: bool = True, subresource: Optional[str] = None) -> Any:
        """Server-side apply (PATCH application/apply-patch+yaml; JSON is YAML)."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") if self.namespaced(obj["apiVersion"], obj["kind"]) else None
        path = self.path(obj["apiVersion"], obj["kind"], ns, meta["name"], subresource)
        return self.request("PATCH", path, obj, "application/apply-patch+yaml",
                            {"fieldManager": manager, "force": "true" if force else "false"}, parse=False)

    def get(self, api_version: str, kind: str, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        try:
            return self.request("GET", self.path(api_version, kind, namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: Optional[str] = None, selector: Optional[str] = None,
             field_selector: Optional[str] = None) -> list[dict]:
        query = {}
        if selector:
            query["labelSelector"] = selector
        if field_selector:
            query["fieldSelector"] = field_selector
        doc = self.request("GET", self.path(api_version, kind, namespace), query=query or None)
        return doc.get("items", [])

    def resource_version(self, api_version: str, kind: str, namespace: Optional[str] = None,
                         selector: Optional[str] = None) -> str:
        """The collection's resourceVersion now: where a `watch` that must miss nothing starts."""
        query = {"labelSelector": selector} if selector else None
        return self.request("GET", self.path(api_version, kind, namespace), query=query)["metadata"]["resourceVersion"]

    def watch(self, api_version: str, kind: str, resource_version: str, namespace: Optional[str] = None,
              selector: Optional[str] = None, seconds: int = 1) -> list[dict]:
        """Every watch event ({type, object}) of the collection after `resource_version`, as the API server
        replays and streams them for `seconds` (it ends the stream then): what happened in between, objects
        created and deleted again included, which a later list cannot show. An ERROR event (the version is
        too old) raises ApiError."""
        query = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": str(seconds),
                 "allowWatchBookmarks": "false"}
        if selector:
            query["labelSelector"] = selector
        path = self.path(api_version, kind, namespace) + "?" + urllib.parse.urlencode(query)
        # A connection of its own: the stream occupies it until the server ends it.
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=seconds + self.timeout)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self._bearer}", "Accept": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if resp.status >= 400:
            raise ApiError(resp.status, *_message(resp.status, raw))
        events = [json.loads(line) for line in raw.splitlines() if line.strip()]
        for e in events:
            if e.get("type") == "ERROR":
                status = e.get("object") or {}
                raise ApiError(int(status.get("code") or 500), status.get("message") or str(status), status)
        return events

    def create(self, obj: dict[str, Any], subresource: Optional[str] = None) -> Any:
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") if self.namespaced(obj["apiVersion"], obj["kind"]) else None
        name = meta.get("name") if subresource else None
        return self.request("POST", self.path(obj["apiVersion"], obj["kind"], ns, name, subresource), obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: Optional[str] = None,
               grace_seconds: Optional[int] = None) -> bool:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            self.request("DELETE", self.path(api_version, kind, namespace, name), body)
            return True
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise

    def merge_patch(self, api_version: str, kind: str, name: str, patch: dict, namespace: Optional[str] = None,
                    subresource: Optional[str] = None) -> Any:
        return self.request("PATCH", self.path(api_version, kind, namespace, name, subresource), patch,
                            "application/merge-patch+json")

    def token(self, namespace: str, service_account: str, seconds: int = 7200) -> str:
        doc = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": {"expirationSeconds": seconds}})
        return doc["status"]["token"]

    def with_token(self, token: str) -> "Client":
        c = Client(self.host, self.port, "", token, self.timeout)
        c.ctx = self.ctx
        return c


def wait_for(what: str, check, timeout: float, interval: float = 0.5, on_timeout=None):
    """Poll `check()` until it returns a truthy value; TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    while True:
        try:
            value = check()
            if value:
                return value
        except (ApiError, OSError, UnknownKind) as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            detail = on_timeout() if on_timeout else (f" (last error: {last_exc})" if last_exc else "")
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail or ''}")
        time.sleep(interval)


def kubeconfig(server: str, ca_file: str, token: str, user: str = "rehearsal") -> str:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "rehearsal",
           "clusters": [{"name": "rehearsal", "cluster": {"server": server, "certificate-authority": ca_file}}],
           "users": [{"name": user, "user": {"token": token}}],
           "contexts": [{"name": "rehearsal", "context": {"cluster": "rehearsal", "user": user}}]}
    return json.dumps(doc, indent=1)


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def items_of(objs: Iterable[dict], kind: str) -> list[dict]:
    return [o for o in objs if o.get("kind") == kind]


class PollingLoop:
    """A stand-in's background loop over the API server: `once()` every `interval` seconds in a daemon thread until
    `stop()`; an API error or a refused connection in one pass is retried at the next (the Provisioner's volumes,
    the HookRunner's hook pods)."""

    name = "rehearsal-loop"

    def __init__(self, client: Client, interval: float = 1.0):
        self.client, self.interval = client, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def once(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.once()
            except (ApiError, UnknownKind, OSError):
                continue
