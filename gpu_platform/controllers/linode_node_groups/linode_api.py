"""A small client for the Linode API v4 instance endpoints the node-group provider needs.

Endpoints and shapes: https://techdocs.akamai.com/linode-api/reference/post-linode-instance (create),
get-linode-instances (list: paginated `{"data", "page", "pages", "results"}`, filterable with the
X-Filter header, `{"tags": "<tag>"}` as terraform-provider-linode's linode_instances data source
filters), delete-linode-instance, get-linode-type (a plan's size: `disk` in MB, what the template node's
ephemeral storage is computed from); errors are `{"errors": [{"reason", "field"?}]}`. Retries
follow linodego's (linode/linodego retries.go): 429 waits the Retry-After seconds; 503 is retried
unless X-Maintenance-Mode is set; 408 and other 5xx, and connection errors, back off exponentially.
A POST retried after a lost response cannot duplicate an instance: labels are unique per account,
so the second create is refused ("Label must be unique") and the caller finds the first by label.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.linode.com/v4"
PAGE_SIZE = 500  # the API's maximum page_size


class LinodeApiError(RuntimeError):
    def __init__(self, status: int, reasons: list[str], fields: list[str]):
        self.status = status
        self.reasons = reasons
        self.fields = fields
        super().__init__(f"Linode API {status}: {'; '.join(reasons) or 'no reason given'}")

    @property
    def label_taken(self) -> bool:
        return self.status == 400 and "label" in self.fields and any("unique" in r.lower() for r in self.reasons)


@dataclass
class LinodeClient:
    token: str
    base_url: str = DEFAULT_BASE_URL
    max_attempts: int = 6
    max_wait_seconds: float = 60.0
    timeout_seconds: float = 30.0
    sleep: Callable[[float], None] = time.sleep

    def _request(self, method: str, path: str, body: Optional[dict] = None,
                 query: Optional[dict] = None, x_filter: Optional[dict] = None) -> Any:
        url = self.base_url.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                   "User-Agent": "gpu-platform-linode-node-groups"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if x_filter is not None:
            headers["X-Filter"] = json.dumps(x_filter)
        backoff = 1.0
        for attempt in range(1, self.max_attempts + 1):
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_seconds) as resp:
                    raw = resp.read()
                    return json.loads(raw) if raw else {}
            except urllib.error.HTTPError as err:
                raw = err.read()
                wait = self._retry_wait(err)
                if wait is False or attempt == self.max_attempts:
                    raise _api_error(err.code, raw) from None
                log.warning("Linode API %s %s: %s, retrying in %.1fs (attempt %d/%d)", method, path, err.code,
                            backoff if wait is None else wait, attempt, self.max_attempts)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt == self.max_attempts:
                    raise
                wait = None
                log.warning("Linode API %s %s: %s, retrying in %.1fs", method, path, err, backoff)
            if wait is None:  # no Retry-After: exponential backoff
                self.sleep(backoff)
                backoff = min(backoff * 2, self.max_wait_seconds)
            else:
                self.sleep(wait)
        raise AssertionError("unreachable")

    def _retry_wait(self, err: urllib.error.HTTPError) -> "float | None | bool":
        """Seconds the server asked for (429 Retry-After), None to back off, False not to retry."""
        if err.code == 429:
            try:
                return min(float(err.headers.get("Retry-After") or ""), self.max_wait_seconds)
            except ValueError:
                return None
        if err.code == 503 and err.headers.get("X-Maintenance-Mode"):
            return False  # a maintenance window: retrying only burns the budget (linodego does the same)
        if err.code == 408 or err.code >= 500:
            return None
        return False

    # --- instances -----------------------------------------------------------------------

    def list_instances(self, tag: str) -> list[dict]:
        """Every instance carrying `tag`, across all pages."""
        return list(self._pages("/linode/instances", {"tags": tag}))

    def _pages(self, path: str, x_filter: dict) -> Iterator[dict]:
        page, pages = 1, 1
        while page <= pages:
            doc = self._request("GET", path, query={"page": page, "page_size": PAGE_SIZE}, x_filter=x_filter)
            yield from doc.get("data", [])
            pages = int(doc.get("pages", 1))
            page += 1

    def create_instance(self, body: dict) -> dict:
        return self._request("POST", "/linode/instances", body=body)

    def get_type(self, type_id: str) -> dict:
        """The plan `type_id` (`GET /linode/types/{id}`: vcpus, memory and disk in MB, gpus, ...)."""
        return self._request("GET", f"/linode/types/{urllib.parse.quote(type_id, safe='')}")

    def delete_instance(self, instance_id: int) -> None:
        """Deletes; an instance that is already gone counts as deleted."""
        try:
            self._request("DELETE", f"/linode/instances/{int(instance_id)}")
        except LinodeApiError as err:
            if err.status != 404:
                raise


def _api_error(status: int, raw: bytes) -> LinodeApiError:
    try:
        errors = json.loads(raw or b"{}").get("errors", [])
    except (ValueError, AttributeError):
        errors = []
    return LinodeApiError(status, [str(e.get("reason", "")) for e in errors if isinstance(e, dict)],
                          [str(e.get("field", "")) for e in errors if isinstance(e, dict)])
