"""Deletes the node-group provider's instances of a stack: the `delete` hook of the
LinodeNodeGroups component (gpu_platform/components/linode/node_groups.py), so `pulumi destroy`
leaves no autoscaled GPU instance behind and can then delete the VPC subnet and firewall.

    LINODE_TOKEN=... STACK_TAG=node-group-stack:<cluster> python3 delete_autoscaled.py

Deletes every instance carrying STACK_TAG *and* a `node-group:` tag (the provider's; the
program's own instances carry neither pool tag form). Standard library only (run by pulumi-command).
429 waits Retry-After; other failures fail the hook and name the instance, so a destroy never
silently leaves a billed GPU behind.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request

POOL_TAG_PREFIX = "node-group:"


def _call(base: str, token: str, method: str, path: str, x_filter: "dict | None" = None, attempts: int = 8) -> dict:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if x_filter is not None:
        headers["X-Filter"] = json.dumps(x_filter)
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(urllib.request.Request(base + path, method=method, headers=headers), timeout=30) as r:
                raw = r.read()
                return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as err:
            if err.code == 404 and method == "DELETE":
                return {}
            if (err.code == 429 or err.code >= 500) and attempt + 1 < attempts:
                time.sleep(min(float(err.headers.get("Retry-After") or 2 ** attempt), 60))
                continue
            raise RuntimeError(f"Linode API {method} {path}: {err.code} {err.read()[:300]!r}") from None
    raise RuntimeError(f"Linode API {method} {path}: no answer after {attempts} attempts")


def autoscaled_instances(base: str, token: str, stack_tag: str) -> list[dict]:
    out, page, pages = [], 1, 1
    while page <= pages:
        doc = _call(base, token, "GET", f"/linode/instances?page={page}&page_size=500", {"tags": stack_tag})
        out += [i for i in doc.get("data", []) if stack_tag in i.get("tags", [])
                and any(t.startswith(POOL_TAG_PREFIX) for t in i.get("tags", []))]
        pages = int(doc.get("pages", 1))
        page += 1
    return out


def main() -> int:
    token, tag = os.environ.get("LINODE_TOKEN", ""), os.environ.get("STACK_TAG", "")
    base = os.environ.get("LINODE_API_URL", "https://api.linode.com/v4").rstrip("/")
    if not token or not tag.startswith("node-group-stack:"):
        print("LINODE_TOKEN and STACK_TAG=node-group-stack:<cluster> are required", file=sys.stderr)
        return 2
    for inst in autoscaled_instances(base, token, tag):
        _call(base, token, "DELETE", f"/linode/instances/{int(inst['id'])}")
        print(f"deleted autoscaled instance {inst['label']} ({inst['id']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
