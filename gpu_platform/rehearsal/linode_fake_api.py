"""A local fake of the Linode API v4 instance endpoints the node-group provider
(gpu_platform/controllers/linode_node_groups) calls, served on 127.0.0.1: create (POST), list (GET,
paginated, X-Filter on tags), delete and a plan (GET /linode/types/{id}), built from recorded real responses (linode_api_data/, each
naming its linodego fixture). Faults on demand: an answer instead of the endpoint (429 with
Retry-After, 5xx), a create that succeeds but whose response is lost (500), a create that succeeds and
whose answer is held until released (a caller killed mid-request).

Used by tests/test_linode_node_groups.py and by the rehearsal's autoscaling drill
(gpu_platform/rehearsal/autoscale.py); not part of any deployed program.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

DATA = Path(__file__).resolve().parent / "linode_api_data"
TOKEN = "fake-linode-token"


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


class _Server:
    def __init__(self, handler_factory):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_factory)
        # A short poll: shutdown() waits for serve_forever's next poll (0.5 s by default), and tests start
        # and stop dozens of these.
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeLinodeApi(_Server):
    def __init__(self, clock: Callable[[], datetime.datetime], page_size_cap: int = 500):
        self.clock = clock
        self.page_size_cap = page_size_cap
        self.instances: dict[int, dict] = {}
        self.requests: list[tuple[str, str, Optional[dict]]] = []
        # Faults, consumed in order: ("status", code, headers) answers instead of the endpoint;
        # ("lost", 500) performs the request, then answers 500 (the response is lost); ("hold", event)
        # performs the request, then answers only once `event` is set (the caller may be gone by then).
        self.faults: dict[str, list[tuple]] = {"POST": [], "GET": [], "DELETE": []}
        self.held = 0  # requests performed whose answer is being held ("hold" faults)
        self._ids = itertools.count(recorded("instance_create.json")["response"]["id"])
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: dict, headers: Optional[dict] = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, {"errors": [{"reason": "Invalid Token"}]})
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urllib.parse.urlsplit(self.path)
                with fake._lock:
                    fake.requests.append((method, url.path, body))
                    fault = fake.faults[method].pop(0) if fake.faults[method] else None
                if fault and fault[0] == "status":
                    return self._send(fault[1], {"errors": [{"reason": "fault injected"}]}, fault[2] if len(fault) > 2 else None)
                status, doc = fake.dispatch(method, url.path, dict(urllib.parse.parse_qsl(url.query)),
                                            self.headers.get("X-Filter"), body)
                if fault and fault[0] == "lost":
                    return self._send(fault[1], {"errors": [{"reason": "Please try again"}]})
                if fault and fault[0] == "hold":
                    with fake._lock:
                        fake.held += 1
                    fault[1].wait(300)
                try:
                    self._send(status, doc)
                except OSError:  # the caller died while its answer was held
                    pass

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_DELETE(self):
                self._handle("DELETE")

        super().__init__(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v4"

    # --- endpoints ---------------------------------------------------------------------------

    def dispatch(self, method: str, path: str, query: dict, x_filter: Optional[str], body: Optional[dict]):
        errors = recorded("errors.json")
        with self._lock:
            if method == "POST" and path == "/v4/linode/instances":
                missing = [k for k in ("region", "type") if not (body or {}).get(k)]
                if missing:
                    return 400, {"errors": [{"reason": f"{k} is required", "field": k} for k in missing]}
                if any(i["label"] == body.get("label") for i in self.instances.values()):
                    return errors["label_taken"]["status"], errors["label_taken"]["body"]
                inst = copy.deepcopy(recorded("instance_create.json")["response"])
                now = self.clock().strftime("%Y-%m-%dT%H:%M:%S")
                inst.update(id=next(self._ids), label=body.get("label"), region=body["region"], type=body["type"],
                            image=body.get("image"), tags=list(body.get("tags") or []), created=now, updated=now,
                            status="provisioning", has_user_data=bool((body.get("metadata") or {}).get("user_data")),
                            disk_encryption=body.get("disk_encryption", inst["disk_encryption"]))
                inst["_request"] = body
                self.instances[inst["id"]] = inst
                return 200, _public(inst)
            if method == "GET" and path == "/v4/linode/instances":
                items = sorted(self.instances.values(), key=lambda i: i["id"])
                if x_filter:
                    f = json.loads(x_filter)
                    if set(f) - {"tags"}:
                        return 400, {"errors": [{"reason": f"Cannot filter on {sorted(set(f) - {'tags'})[0]}", "field": "X-Filter"}]}
                    items = [i for i in items if f["tags"] in i["tags"]]
                size = min(int(query.get("page_size", 100)), self.page_size_cap)
                page = int(query.get("page", 1))
                pages = max(1, -(-len(items) // size))
                chunk = items[(page - 1) * size: page * size]
                return 200, {"data": [_public(i) for i in chunk], "page": page, "pages": pages, "results": len(items)}
            if method == "GET" and path.startswith("/v4/linode/types/"):
                found = plan_type(urllib.parse.unquote(path.rsplit("/", 1)[1]))
                if found is None:
                    return errors["not_found"]["status"], errors["not_found"]["body"]
                return 200, found
            if method == "DELETE" and path.startswith("/v4/linode/instances/"):
                iid = int(path.rsplit("/", 1)[1])
                if iid not in self.instances:
                    return errors["not_found"]["status"], errors["not_found"]["body"]
                del self.instances[iid]
                return recorded("instance_delete.json")["status"], recorded("instance_delete.json")["response"]
        return 404, {"errors": [{"reason": "Not found"}]}

    # --- test helpers --------------------------------------------------------------------------

    def by_label(self) -> dict[str, dict]:
        with self._lock:
            return {i["label"]: i for i in self.instances.values()}

    def set_status(self, label: str, status: str) -> None:
        with self._lock:
            for i in self.instances.values():
                if i["label"] == label:
                    i["status"] = status

    def instances_tagged(self, tag: str) -> list[dict]:
        with self._lock:
            return [_public(i) for i in sorted(self.instances.values(), key=lambda i: i["id"]) if tag in i["tags"]]

    def request_of(self, instance_id: int) -> dict:
        """The create request that made this instance (its boot document among it)."""
        with self._lock:
            return copy.deepcopy(self.instances[instance_id]["_request"])

    def calls(self, method: str) -> list[tuple[str, str, Optional[dict]]]:
        return [r for r in self.requests if r[0] == method]


# A plan the recording does not hold (linodego's recorded type list predates the RTX 4000 Ada plans) is
# answered from the price catalog's vcpus, memory and GPUs with this disk: the fake's stand-in value, not a
# fact about the plan (in a cluster the provider reads the real API's `disk`).
STAND_IN_DISK_MIB = 512000


def plan_type(type_id: str) -> Optional[dict]:
    """GET /v4/linode/types/{id}: the recorded plan, else one shaped like it from the catalog, else None."""
    for t in recorded("types_list.json")["response"]["data"]:
        if t["id"] == type_id:
            return copy.deepcopy(t)
    from gpu_platform.costs.catalog import load_catalog

    itype = load_catalog().instance("linode", type_id)
    if itype is None:
        return None
    shape = copy.deepcopy(recorded("types_list.json")["response"]["data"][-1])
    shape.update(id=type_id, label=type_id, vcpus=itype.vcpus, memory=int(itype.memory_gib * 1024), gpus=itype.gpus,
                 disk=STAND_IN_DISK_MIB, **{"class": "gpu" if itype.gpus else "standard"})
    return shape


def _public(inst: dict) -> dict:
    return {k: v for k, v in inst.items() if not k.startswith("_")}
