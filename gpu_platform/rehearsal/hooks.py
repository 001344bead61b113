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
- The Kubeflow Trainer chart's runtimes installer (kubeflow-trainer 2.3.0 templates/runtimes/installer-job.yaml, the
  post-install and post-upgrade hook) and its cleanup (cleanup-job.yaml, the pre-delete hook), recognised by their
  `/bin/sh -c` script, whatever image runs it (alpine, which installs kubectl with apk first: not done here, nothing
  is downloaded). The file the script names is read from the ConfigMap the pod mounts there (as the kubelet mounts
  it, with the rehearsal's own credentials; until that ConfigMap exists the pod is left Running, as a pod whose volume
  cannot mount never starts). Then, as the pod's ServiceAccount, the requests kubectl makes for each line (kubectl
  v0.35.4 pkg/cmd/apply/apply.go, label/label.go, delete/delete.go, wait/delete.go):
  `kubectl apply --server-side --force-conflicts -f F` a server-side apply of every object of F (field manager
  `kubectl`, force, fieldValidation Strict; kubectl goes on past a refused object and exits 1 at the end);
  `kubectl label --overwrite -f F K=V` a GET of each, then a JSON merge patch of the label (field manager
  `kubectl-label`); the prune loop a GET of each object of F (`apply --dry-run=client -o name`), a LIST of
  ClusterTrainingRuntimes labelled K=V and a DELETE (propagation Background) of each one F does not name;
  `kubectl delete clustertrainingruntime --selector=K=V --ignore-not-found` the LIST and a DELETE of each. kubectl
  delete then waits for each deleted object to be gone (a GET of each): while a finalizer holds one the pod stays
  Running, the runner checking again every round. The shell's own rules are kept: `set -e` stops the script at
  the first failed line, but a refused LIST in the prune loop's `for ... in $(...)` only prints its error (the loop
  runs no iteration and the script exits 0).
"""

from __future__ import annotations

import base64
import datetime
import re
from dataclasses import dataclass
from typing import Callable, Optional

from gpu_platform.rehearsal import pki
from gpu_platform.rehearsal.kube import ApiError, Client, PollingLoop, UnknownKind

CERTGEN_IMAGE = "kube-webhook-certgen"
CERTGEN_MANAGER = "kube-webhook-certgen"
# The Secret keys of `create` (its --ca-name, --cert-name and --key-name defaults).
CA_KEY, CERT_KEY, KEY_KEY = "ca", "cert", "key"
# What `patch` reads the CA from: `ca`, or `ca.crt` where a release of the tool wrote that.
CA_KEYS = (CA_KEY, "ca.crt")


class HookFailed(Exception):
    """The container would have exited non-zero: the message is its last words."""


class NotYet(Exception):
    """The container has not finished (its volume cannot be mounted yet, or kubectl still waits for a deletion): the
    pod stays Running, and next round the runner calls `resume` (as the pod's ServiceAccount) where there is one, else
    starts the container's work again."""

    def __init__(self, message: str, resume: Optional[Callable[["Client"], str]] = None):
        super().__init__(message)
        self.resume = resume


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


# --- the Kubeflow Trainer chart's runtimes installer and cleanup ----------------------------------------------------

KUBECTL_APPLY_MANAGER = "kubectl"  # kubectl apply --server-side's default --field-manager (apply.go)
KUBECTL_LABEL_MANAGER = "kubectl-label"  # kubectl label's (label.go)
_LABEL = r"(?P<key>[A-Za-z0-9./_-]+)=(?P<value>[A-Za-z0-9._-]*)"
# The scripts of kubeflow-trainer 2.3.0's hook containers, comments and blank lines left out, each line stripped.
RUNTIMES_INSTALLER = re.compile("\n".join([
    r"set -e",
    r"apk add --no-cache kubectl",
    r"kubectl apply --server-side --force-conflicts -f (?P<file>/\S+)",
    rf"kubectl label --overwrite -f (?P=file) {_LABEL}",
    r'desired="\$\(kubectl apply -f (?P=file) --dry-run=client -o name\)"',
    r"for res in \$\(kubectl get clustertrainingruntime -l (?P=key)=(?P=value) -o name\); do",
    r'echo "\$desired" \| grep -qx "\$res" \|\| kubectl delete "\$res" --ignore-not-found',
    r"done"]))
RUNTIMES_CLEANUP = re.compile("\n".join([
    r"set -e",
    r"apk add --no-cache kubectl",
    rf"kubectl delete clustertrainingruntime --selector={_LABEL} --ignore-not-found"]))
TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_KIND, RUNTIME_RESOURCE = "ClusterTrainingRuntime", "clustertrainingruntimes"


def shell_script(container: dict) -> Optional[str]:
    """The script of a `/bin/sh -c SCRIPT` container (command and args together), comments and blank lines left out
    and each line stripped; None for any other container."""
    argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    if len(argv) != 3 or argv[0] not in ("/bin/sh", "sh", "/bin/bash", "bash") or argv[1] != "-c":
        return None
    lines = (line.strip() for line in argv[2].splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#"))


def mounted_file(client: Client, pod: dict, container: dict, path: str) -> str:
    """The text of `path` in `container` where it lies on a ConfigMap volume of `pod` (the volume's items mapping
    honoured), read as the kubelet reads it; NotYet while the ConfigMap or the key is missing (the kubelet would not
    start the container), HookFailed where no ConfigMap volume is mounted there (the file does not exist)."""
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        root = str(mount.get("mountPath", "")).rstrip("/")
        source = (volumes.get(mount.get("name")) or {}).get("configMap")
        if not root or not path.startswith(root + "/") or not source:
            continue
        rel = path[len(root) + 1:]
        items = source.get("items")
        key = next((i["key"] for i in items if i.get("path") == rel), None) if items else rel
        ns = pod["metadata"]["namespace"]
        cm = client.get("v1", "ConfigMap", source.get("name", ""), ns)
        if cm is None and not source.get("optional"):
            raise NotYet(f"ConfigMap {ns}/{source.get('name')} is not there to mount at {root}")
        data = (cm or {}).get("data") or {}
        if key is None or key not in data:
            break  # the volume holds no such file
        return data[key]
    raise HookFailed(f"error: the path \"{path}\" does not exist")


def _manifest_objects(text: str, path: str, namespace: str) -> list[dict]:
    """The objects of a manifest file as kubectl's builder reads them (Go's YAML, empty documents skipped); a
    namespaced object without a namespace goes to the pod's (kubectl's in-cluster default)."""
    from gpu_platform.preflight.fit.render import parse_yaml_docs

    objs = []
    for _text, doc in parse_yaml_docs(text):
        if not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion"):
            raise HookFailed(f"error: error validating \"{path}\": apiVersion and kind are required")
        meta = doc.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        objs.append(doc)
    return objs


def _where(client: Client, obj: dict) -> tuple[str, str, Optional[str]]:
    """(resource path of the object, `-o name` of it, its namespace or None); UnknownKind as kubectl's mapping error."""
    api_version, kind, meta = obj["apiVersion"], obj["kind"], obj["metadata"]
    try:
        plural, namespaced = client.resource(api_version, kind)
    except UnknownKind:
        raise UnknownKind(f"resource mapping not found for name: \"{meta.get('name')}\": no matches for kind "
                          f"\"{kind}\" in version \"{api_version}\"\nensure CRDs are installed first") from None
    ns = meta.get("namespace") if namespaced else None
    group = api_version.rpartition("/")[0]
    return client.path(api_version, kind, ns, meta["name"]), f"{plural}{'.' + group if group else ''}/{meta['name']}", ns


def _runtimes_version(client: Client) -> str:
    """The served version of trainer.kubeflow.org kubectl would pick (the group's preferred one), as discovery says;
    kubectl's error where the API server has no such resource type."""
    for group in client.request("GET", "/apis").get("groups", []):
        if group["name"] == TRAINER_GROUP:
            api_version = group["preferredVersion"]["groupVersion"]
            try:
                client.resource(api_version, RUNTIME_KIND)
                return api_version
            except UnknownKind:
                break
    raise HookFailed('error: the server doesn\'t have a resource type "clustertrainingruntime"')


def _delete_and_wait(client: Client, api_version: str, names: list[str], done: str) -> str:
    """`kubectl delete` of each ClusterTrainingRuntime in `names` (--ignore-not-found), then its wait; `done` once all
    are gone. A refused DELETE fails the container (with what was deleted before)."""
    said, errors = [], []
    for name in names:
        try:
            if client.delete(api_version, RUNTIME_KIND, name):
                said.append(f"{RUNTIME_RESOURCE}.{TRAINER_GROUP} \"{name}\" deleted")
        except ApiError as exc:
            errors.append(f"Error from server: {exc.message}")
    if errors:
        raise HookFailed("\n".join(said + errors))
    return _gone(client, api_version, names, done)


def _gone(client: Client, api_version: str, names: list[str], done: str) -> str:
    """kubectl delete's wait (wait/delete.go IsDeleted: a GET of each; a refused GET fails it): `done` once every one
    of `names` is gone, else NotYet, which the runner resumes here next round (the pod stays Running meanwhile)."""
    errors, waiting = [], []
    for name in names:
        try:
            if client.get(api_version, RUNTIME_KIND, name) is not None:
                waiting.append(name)
        except ApiError as exc:
            errors.append(f"Error from server: {exc.message}")
    if errors:
        raise HookFailed("\n".join(errors))
    if waiting:
        raise NotYet(f"kubectl delete waits for {', '.join(waiting)} to be gone (finalizers)",
                     resume=lambda as_sa: _gone(as_sa, api_version, waiting, done))
    return done


def runtimes_installer(client: Client, read: Callable[[str], str], match: re.Match, namespace: str) -> str:
    """The Trainer chart's installer script as `client` (the pod's ServiceAccount), `read` giving the mounted file."""
    path, key, value = match["file"], match["key"], match["value"]
    objs = _manifest_objects(read(path), path, namespace)
    # kubectl apply --server-side --force-conflicts -f F
    out, errors = [], []
    for obj in objs:
        try:
            where, name, _ns = _where(client, obj)
            client.request("PATCH", where, obj, "application/apply-patch+yaml",
                           {"fieldManager": KUBECTL_APPLY_MANAGER, "force": "true", "fieldValidation": "Strict"}, parse=False)
            out.append(f"{name} serverside-applied")
        except UnknownKind as exc:
            errors.append(f"error: {exc}")
        except ApiError as exc:
            errors.append(f"Error from server: {exc.message}")
    if errors:
        raise HookFailed("\n".join(out + errors))
    # kubectl label --overwrite -f F K=V (the builder's Latest(): a GET of each, then the merge patch of the difference)
    for obj in objs:
        where, name, _ns = _where(client, obj)
        try:
            current = client.request("GET", where)
            labels = ((current or {}).get("metadata") or {}).get("labels") or {}
            patch = {} if labels.get(key) == value else {"metadata": {"labels": {key: value}}}
            client.request("PATCH", where, patch, "application/merge-patch+json", {"fieldManager": KUBECTL_LABEL_MANAGER},
                           parse=False)
            out.append(f"{name} labeled" if patch else f"{name} not labeled")
        except ApiError as exc:
            errors.append(f"Error from server: {exc.message}")
    if errors:
        raise HookFailed("\n".join(out + errors))
    # desired="$(kubectl apply -f F --dry-run=client -o name)": a GET of each (not found is fine: "created (dry run)")
    desired = set()
    for obj in objs:
        where, name, _ns = _where(client, obj)
        try:
            client.request("GET", where)
        except ApiError as exc:
            if exc.status != 404:
                raise HookFailed("\n".join(out + [f"Error from server: {exc.message}"])) from None
        desired.add(name)
    # for res in $(kubectl get clustertrainingruntime -l K=V -o name): a refused LIST prints its error; the loop runs
    # no iteration and `set -e` does not stop the script there.
    api_version = _runtimes_version(client)
    done = (f"kubectl apply --server-side (field manager {KUBECTL_APPLY_MANAGER}) of the {len(objs)} object(s) of "
            f"{path}, each labelled {key}={value}")
    try:
        listed = client.list(api_version, RUNTIME_KIND, selector=f"{key}={value}")
    except ApiError as exc:
        return f"{done}; the prune loop's list refused, so no prune (the script still exits 0): {exc.message}"
    stale = [o["metadata"]["name"] for o in listed
             if f"{RUNTIME_RESOURCE}.{TRAINER_GROUP}/{o['metadata']['name']}" not in desired]
    try:
        return _delete_and_wait(client, api_version, stale, f"{done}; pruned {', '.join(stale) if stale else 'none'}")
    except HookFailed as exc:
        raise HookFailed("\n".join(out + [str(exc)])) from None


def runtimes_cleanup(client: Client, match: re.Match) -> str:
    """The Trainer chart's pre-delete cleanup script as `client` (the pod's ServiceAccount)."""
    api_version = _runtimes_version(client)
    try:
        listed = client.list(api_version, RUNTIME_KIND, selector=f"{match['key']}={match['value']}")
    except ApiError as exc:
        raise HookFailed(f"Error from server: {exc.message}") from None
    names = [o["metadata"]["name"] for o in listed]
    return _delete_and_wait(client, api_version, names,
                            f"kubectl delete of the ClusterTrainingRuntimes labelled {match['key']}={match['value']}: "
                            f"{', '.join(names) if names else 'none found'}")


@dataclass(frozen=True)
class Known:
    """A hook container the runner stands in for: `what` it is (for the report) and `run(as_sa)`, what it does."""
    what: str
    run: Callable[[Client], str]


def known(client: Client, pod: dict, container: dict) -> Optional[Known]:
    """What `container` of `pod` is, if the runner knows it: by its image (kube-webhook-certgen) or by its script
    (the Trainer's runtimes hooks); `client` reads what the kubelet would mount."""
    if CERTGEN_IMAGE in str(container.get("image")):
        args = [str(a) for a in container.get("args") or []]
        return Known(str(container.get("image")), lambda as_sa: certgen(as_sa, args))
    script = shell_script(container)
    if script is None:
        return None
    ns = pod["metadata"]["namespace"]
    if (m := RUNTIMES_INSTALLER.fullmatch(script)) is not None:
        return Known("the Trainer's runtimes installer script",
                     lambda as_sa: runtimes_installer(as_sa, lambda path: mounted_file(client, pod, container, path), m, ns))
    if (m := RUNTIMES_CLEANUP.fullmatch(script)) is not None:
        return Known("the Trainer's runtimes cleanup script", lambda as_sa: runtimes_cleanup(as_sa, m))
    return None


class HookRunner(PollingLoop):
    """Polls the Running pods of Jobs; runs each one whose container it knows (`known`) once, then writes its status."""

    name = "rehearsal-hook-runner"

    def __init__(self, client: Client, interval: float = 1.0):
        super().__init__(client, interval)
        self.ran: list[str] = []  # one line per pod: namespace/name, what it did, or why it failed
        self._done: set[str] = set()
        self._resume: dict[str, Callable[[Client], str]] = {}  # pod uid -> where its container waits (NotYet)

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
            if len(containers) != 1:
                continue
            container = containers[0]
            hook = known(self.client, pod, container)
            if hook is None:
                continue
            where = f"{meta['namespace']}/{meta['name']}"
            run = self._resume.pop(meta["uid"], None) or hook.run
            try:
                said, code = run(self._as(meta["namespace"], spec.get("serviceAccountName") or "default")), 0
            except NotYet as exc:  # still running: the next round goes on where it stopped, or starts again
                if exc.resume is not None:
                    self._resume[meta["uid"]] = exc.resume
                continue
            except HookFailed as exc:
                said, code = str(exc), 1
            except Exception as exc:  # noqa: BLE001 - a fault of the stand-in fails the pod, naming itself
                said, code = f"the rehearsal's stand-in failed: {type(exc).__name__}: {exc}", 1
            # Once its status is written: were that refused, the next round runs it again (every known container is
            # idempotent, as a restarted container's would be).
            self._complete(pod, container, code, said)
            self._done.add(meta["uid"])
            self.ran.append(f"{where} ({hook.what}): {said}" + ("" if code == 0 else " (exit 1)"))

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

