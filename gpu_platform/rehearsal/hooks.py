"""The container of a Helm hook Job, stood in for on a KWOK node (the engine run, gpu_platform/rehearsal/engine.py).

A KWOK node runs no container, so a hook Job's pod stays Running and Helm (pulumi-kubernetes' helm.v3.Release) waits
for it until the release times out. `HookRunner` does, for the hook containers it knows, what the container would
have done, with the credentials of the pod's own ServiceAccount (a TokenRequest token: the chart's hook RBAC is what
allows or refuses it), then writes the pod's status as the kubelet would (Succeeded with exit code 0, or Failed with
exit code 1 and the refusal), so the Job controller completes or fails the Job and Helm goes on. A pod of any other
Job is left alone (it stays Running, as a training pod does in the rehearsal's scenarios).

Known containers:
- kube-webhook-certgen (ghcr.io/jkroepke/kube-webhook-certgen, kube-prometheus-stack's admission-create and
  admission-patch hooks): `create --host=H1,H2 --namespace=NS --secret-name=S` makes, unless Secret NS/S exists, a CA
  and a serving certificate for the hosts and creates the Secret with `ca`, `cert` and `key` (the defaults of its
  --ca-name, --cert-name and --key-name; the operator's Deployment reads /cert/cert and /cert/key from it);
  `patch --webhook-name=W --namespace=NS --secret-name=S [--patch-failure-policy=P]` sets the Secret's CA as the
  caBundle of every webhook of the ValidatingWebhookConfiguration and the MutatingWebhookConfiguration W (and their
  failurePolicy when P is Fail, as its Patch() does: "" and Ignore leave it), by a server-side apply with field
  manager kube-webhook-certgen. Source read: github.com/jkroepke/kube-webhook-certgen cmd/create.go, cmd/patch.go,
  pkg/k8s/k8s.go (the module is not served by the Go proxy here, so the binary cannot be built and run instead).
"""

from __future__ import annotations

import base64
import datetime
from typing import Callable, Optional

from gpu_platform.rehearsal import pki
from gpu_platform.rehearsal.kube import ApiError, Client, PollingLoop

CERTGEN_IMAGE = "kube-webhook-certgen"
CERTGEN_MANAGER = "kube-webhook-certgen"
# The Secret keys of `create` (its --ca-name, --cert-name and --key-name defaults).
CA_KEY, CERT_KEY, KEY_KEY = "ca", "cert", "key"
# What `patch` reads the CA from: `ca`, or `ca.crt` where a release of the tool wrote that.
CA_KEYS = (CA_KEY, "ca.crt")


class HookFailed(Exception):
    """The container would have exited non-zero: the message is its last words."""


def _flags(args: list[str]) -> tuple[str, dict[str, str]]:
    command = next((a for a in args if not a.startswith("-")), "")
    flags = {}
    for a in args:
        if a.startswith("--"):
            key, _, value = a[2:].partition("=")
            flags[key] = value
    return command, flags


def certgen(client: Client, args: list[str]) -> str:
    """What kube-webhook-certgen `args` does, as `client` (the pod's ServiceAccount); returns its log line."""
    command, flags = _flags(args)
    ns, secret_name = flags.get("namespace", ""), flags.get("secret-name", "")
    if not ns or not secret_name:
        raise HookFailed(f"{command}: --namespace and --secret-name are required")
    try:
        secret = client.get("v1", "Secret", secret_name, ns)
    except ApiError as exc:
        raise HookFailed(f"failed to get secret: {exc}") from None
    if command == "create":
        hosts = [h for h in flags.get("host", "").split(",") if h]
        if not hosts:
            raise HookFailed("create: --host is required")
        if secret is not None:
            return f"create: secret {ns}/{secret_name} already exists"
        ca = pki.CA.new(f"{hosts[0]}-ca", days=365)
        cert, key = ca.issue(hosts[0], dns=hosts, days=365)
        data = {CA_KEY: ca.cert_pem, CERT_KEY: cert, KEY_KEY: key}
        try:
            client.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret_name, "namespace": ns},
                           "type": flags.get("secret-type") or "Opaque",
                           "data": {k: base64.b64encode(v).decode() for k, v in data.items()}})
        except ApiError as exc:
            raise HookFailed(f"failed to save certs to secret: {exc}") from None
        return f"create: secret {ns}/{secret_name} with a CA and a certificate for {', '.join(hosts)}"
    if command == "patch":
        webhook = flags.get("webhook-name", "")
        data = (secret or {}).get("data") or {}
        ca_b64 = next((data[k] for k in CA_KEYS if data.get(k)), None)
        if ca_b64 is None:
            raise HookFailed(f"no secret with a CA at {ns}/{secret_name}")
        policy = flags.get("patch-failure-policy", "")
        if policy not in ("", "Ignore", "Fail"):
            raise HookFailed(f"patch-failure-policy {policy} is not valid")
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            try:
                current = client.get("admissionregistration.k8s.io/v1", kind, webhook)
                if current is None:
                    raise HookFailed(f"failed getting {kind} {webhook}: not found")
                hooks = [{"name": h["name"], "clientConfig": {"caBundle": ca_b64},
                          **({"failurePolicy": policy} if policy == "Fail" else {})} for h in current.get("webhooks") or []]
                client.apply({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                              "metadata": {"name": webhook}, "webhooks": hooks}, manager=CERTGEN_MANAGER, force=True)
            except ApiError as exc:
                raise HookFailed(f"failed patching {kind} {webhook}: {exc}") from None
        return f"patch: caBundle of {secret_name}'s CA on the webhooks of {webhook} (validating and mutating)"
    raise HookFailed(f"unknown command {command!r}")


# image substring -> what the container does, as the pod's ServiceAccount
KNOWN: dict[str, Callable[[Client, list[str]], str]] = {CERTGEN_IMAGE: certgen}


class HookRunner(PollingLoop):
    """Polls the Running pods of Jobs; runs each one whose container is KNOWN once, then writes its status."""

    name = "rehearsal-hook-runner"

    def __init__(self, client: Client, interval: float = 1.0):
        super().__init__(client, interval)
        self.ran: list[str] = []  # one line per pod: namespace/name, what it did, or why it failed
        self._done: set[str] = set()

    def _as(self, namespace: str, service_account: str) -> Client:
        return self.client.with_token(self.client.token(namespace, service_account))

    def once(self) -> None:
        for pod in self.client.list("v1", "Pod"):
            meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
            if meta["uid"] in self._done or status.get("phase") != "Running" or meta.get("deletionTimestamp"):
                continue
            if not any(o.get("kind") == "Job" for o in meta.get("ownerReferences") or []):
                continue
            containers = spec.get("containers") or []
            run = next(((c, fn) for c in containers for image, fn in KNOWN.items() if image in str(c.get("image"))), None)
            if run is None or len(containers) != 1:
                continue
            container, fn = run
            where = f"{meta['namespace']}/{meta['name']}"
            try:
                said, code = fn(self._as(meta["namespace"], spec.get("serviceAccountName") or "default"),
                                [str(a) for a in container.get("args") or []]), 0
            except HookFailed as exc:
                said, code = str(exc), 1
            except Exception as exc:  # noqa: BLE001 - a fault of the stand-in fails the pod, naming itself
                said, code = f"the rehearsal's stand-in failed: {type(exc).__name__}: {exc}", 1
            # Once its status is written: were that refused, the next round runs it again (create and patch are
            # idempotent, as a restarted container's would be).
            self._complete(pod, container, code, said)
            self._done.add(meta["uid"])
            self.ran.append(f"{where} ({container.get('image')}): {said}" + ("" if code == 0 else " (exit 1)"))

    def _complete(self, pod: dict, container: dict, code: int, message: str) -> None:
        """The pod's status as the kubelet writes it when its only container exits."""
        now = _now()
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "startedAt": now,
                      "finishedAt": now, **({} if code == 0 else {"message": message[-1000:]})}
        ready = [{"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
                 for t in ("Ready", "ContainersReady")]
        self.client.apply({"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
                           "status": {"phase": "Succeeded" if code == 0 else "Failed", "conditions": ready,
                                      "containerStatuses": [{"name": container["name"], "image": container.get("image"),
                                                             "imageID": "", "ready": False, "restartCount": 0,
                                                             "started": False, "state": {"terminated": terminated}}]}},
                          manager="rehearsal-hook-runner", subresource="status")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stood_in(runner: Optional[HookRunner]) -> list[str]:
    return [f"hook container run in the pod's place: {line}" for line in (runner.ran if runner else [])]

