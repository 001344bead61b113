"""Job-aware scale-in protection for GPU Auto Scaling groups.

A GPU node is *busy* while a pod that requests `nvidia.com/gpu` is bound to it and not finished.
Each cycle the controller:

1. lists the cluster's GPU nodes and pods and marks every busy node
   `cluster-autoscaler.kubernetes.io/scale-down-disabled=true` first: the cluster-autoscaler removes
   nodes with TerminateInstanceInAutoScalingGroup, which instance scale-in protection does not stop,
   but it never picks a node carrying that annotation. This step needs no AWS call, so a failing AWS
   API never leaves a busy node unguarded;
2. lists the instances of its Auto Scaling groups (DescribeAutoScalingGroups) and considers only
   those InService (Pending, Terminating:Wait, Standby, ... are left alone: AWS refuses to change
   their protection, and a node that is already going needs none);
3. keeps busy instances protected from scale-in (which stops the group's own scale-in: a lowered
   desired capacity, AZ rebalancing) and releases an instance, and removes the annotation, only once
   its node has been idle for the grace period (the clock starts when the controller first sees it
   idle, so a restart never shortens a grace period);
4. calls SetInstanceProtection in batches of at most 50 instances per group (the API's limit),
   retrying throttled calls with backoff and re-reading the group when an instance has left it or
   stopped being InService. A group whose calls still fail is reported and skipped: the other groups
   and the annotations are still reconciled, and an instance whose release failed keeps its annotation.

Runs in-cluster from the image built by gpu_platform/controllers/scale_in_protection/Dockerfile: the standard
library and boto3 only. Configuration from the environment: ASG_NAMES (comma-separated),
GRACE_SECONDS, INTERVAL_SECONDS, AWS_REGION, NODE_SELECTOR; the Kubernetes API in-cluster
(KUBERNETES_SERVICE_HOST/PORT and the pod's mounted service account; SERVICE_ACCOUNT_DIR, the folder of
its `token` and `ca.crt`, points elsewhere, as for the Linode node-group provider: the rehearsal runs the
controller as a process with a TokenRequest's token of its ServiceAccount). AWS: boto3's own chain
(IRSA's web identity in the pod; the SDK's AWS_ENDPOINT_URL variables are honoured).
"""

from __future__ import annotations

import json
import logging
import os
import random
import ssl
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Protocol

GPU_RESOURCE = "nvidia.com/gpu"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
MAX_BATCH = 50  # SetInstanceProtection accepts at most 50 instance IDs per call
TERMINAL_PHASES = {"Succeeded", "Failed"}
IN_SERVICE = "InService"  # the only lifecycle state whose protection the controller changes
RETRYABLE_CODES = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
                   "RequestThrottled", "ServiceUnavailable", "InternalFailure"}
HEARTBEAT_FILE = "/tmp/heartbeat"

log = logging.getLogger("scale-in-protection")


# ---------------------------------------------------------------------------------------------
# Reading the cluster
# ---------------------------------------------------------------------------------------------


class KubeReader(Protocol):
    """The little of the Kubernetes API the controller uses."""

    def list_pods(self) -> list[dict[str, Any]]: ...

    def list_nodes(self) -> list[dict[str, Any]]: ...

    def set_node_annotation(self, node: str, key: str, value: Optional[str]) -> None: ...


def _quantity_positive(value: Any) -> bool:
    try:
        return float(str(value)) > 0
    except ValueError:
        return False


def pod_requests_gpu(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        # For extended resources a limit without a request implies an equal request.
        for section in ("requests", "limits"):
            if _quantity_positive((res.get(section) or {}).get(GPU_RESOURCE, 0)):
                return True
    return False


def busy_node_names(pods: Iterable[dict[str, Any]]) -> set[str]:
    """Nodes running (or about to run) a pod that holds GPUs."""
    busy = set()
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in TERMINAL_PHASES and pod_requests_gpu(pod):
            busy.add(node)
    return busy


def instance_id(node: dict[str, Any]) -> Optional[str]:
    """aws:///us-east-1a/i-0123456789abcdef0 -> i-0123456789abcdef0"""
    provider_id = (node.get("spec") or {}).get("providerID") or ""
    if not provider_id.startswith("aws://"):
        return None
    last = provider_id.rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


class InClusterKube:
    """KubeReader over the API server with the pod's service-account token (standard library only)."""

    SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

    def __init__(self, base_url: Optional[str] = None, token_file: Optional[str] = None, ca_file: Optional[str] = None,
                 urlopen: Optional[Callable[..., Any]] = None, node_selector: str = ""):
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.base_url = base_url or f"https://{host}:{port}"
        self.token_file = token_file or f"{self.SA_DIR}/token"
        self.ca_file = ca_file or f"{self.SA_DIR}/ca.crt"
        self.node_selector = node_selector
        self._urlopen = urlopen

    def _open(self, req: urllib.request.Request) -> Any:
        if self._urlopen is not None:
            return self._urlopen(req)
        return urllib.request.urlopen(req, context=ssl.create_default_context(cafile=self.ca_file), timeout=30)

    def _request(self, method: str, path: str, body: Optional[dict] = None, content_type: str = "application/json") -> dict:
        with open(self.token_file, encoding="utf-8") as f:  # projected tokens rotate: read every time
            token = f.read().strip()
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}", "Accept": "application/json",
                                              **({"Content-Type": content_type} if data else {})})
        with self._open(req) as resp:
            return json.loads(resp.read().decode())

    def _list(self, path: str, params: dict[str, str]) -> list[dict]:
        items, cont = [], None
        while True:
            q = dict(params, limit="500", **({"continue": cont} if cont else {}))
            doc = self._request("GET", f"{path}?{urllib.parse.urlencode(q)}")
            items += doc.get("items") or []
            cont = (doc.get("metadata") or {}).get("continue")
            if not cont:
                return items

    def list_pods(self) -> list[dict]:
        return self._list("/api/v1/pods", {"fieldSelector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"})

    def list_nodes(self) -> list[dict]:
        return self._list("/api/v1/nodes", {"labelSelector": self.node_selector} if self.node_selector else {})

    def set_node_annotation(self, node: str, key: str, value: Optional[str]) -> None:
        self._request("PATCH", f"/api/v1/nodes/{urllib.parse.quote(node)}",
                      {"metadata": {"annotations": {key: value}}}, content_type="application/merge-patch+json")


# ---------------------------------------------------------------------------------------------
# The controller
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupInstance:
    instance_id: str
    group: str
    protected: bool
    lifecycle_state: str


@dataclass
class CycleResult:
    protected: list[str] = field(default_factory=list)
    unprotected: list[str] = field(default_factory=list)
    left_group: list[str] = field(default_factory=list)  # left the group or stopped being InService mid-cycle
    annotated: dict[str, Optional[str]] = field(default_factory=dict)  # node -> annotation value set (None = removed)
    errors: dict[str, str] = field(default_factory=dict)  # group, "describe" or node -> what failed this cycle


def _error_code(exc: Exception) -> Optional[str]:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return (response.get("Error") or {}).get("Code")
    return None


def batches(items: list[str], size: int = MAX_BATCH) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


class Controller:
    def __init__(self, autoscaling: Any, kube: KubeReader, group_names: Iterable[str], grace_seconds: float,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 max_attempts: int = 6, backoff_base: float = 0.5, backoff_cap: float = 20.0):
        self.autoscaling = autoscaling
        self.kube = kube
        self.group_names = sorted(set(group_names))
        if not self.group_names:
            raise ValueError("no Auto Scaling groups to manage")
        self.grace_seconds = grace_seconds
        self.clock = clock
        self.sleep = sleep
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.idle_since: dict[str, float] = {}  # instance -> when the controller first saw it idle

    # --- AWS calls -----------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Call an AWS API, retrying throttling and transient server errors with capped, jittered backoff."""
        for attempt in range(self.max_attempts):
            try:
                return fn(**kwargs)
            except Exception as exc:  # botocore.exceptions.ClientError (not imported: tests need no botocore)
                code = _error_code(exc)
                if code not in RETRYABLE_CODES or attempt == self.max_attempts - 1:
                    raise
                delay = min(self.backoff_cap, self.backoff_base * 2 ** attempt) * (0.5 + random.random() / 2)
                log.warning("%s: %s, retrying in %.1fs", getattr(fn, "__name__", "call"), code, delay)
                self.sleep(delay)
        raise AssertionError("unreachable")

    def describe(self, names: Optional[list[str]] = None) -> dict[str, GroupInstance]:
        out: dict[str, GroupInstance] = {}
        names = names or self.group_names
        for chunk in batches(names, 50):
            token = None
            while True:
                kwargs: dict[str, Any] = {"AutoScalingGroupNames": chunk, "MaxRecords": 100}
                if token:
                    kwargs["NextToken"] = token
                page = self._call(self.autoscaling.describe_auto_scaling_groups, **kwargs)
                for g in page.get("AutoScalingGroups", []):
                    for inst in g.get("Instances", []):
                        out[inst["InstanceId"]] = GroupInstance(inst["InstanceId"], g["AutoScalingGroupName"],
                                                                bool(inst.get("ProtectedFromScaleIn")), inst.get("LifecycleState", ""))
                token = page.get("NextToken")
                if not token:
                    break
        return out

    def _set_protection(self, group: str, ids: list[str], protect: bool, result: CycleResult) -> list[str]:
        """Apply protection in batches; returns the IDs actually changed. AWS rejects a whole batch
        (ValidationError) when one instance has left the group or is no longer InService (e.g.
        Terminating:Wait after a Spot interruption): re-read the group and retry with the instances
        still InService in it; if that is refused too, go one by one so one bad instance costs only
        itself."""
        done: list[str] = []
        for batch in batches(ids):
            try:
                self._call(self.autoscaling.set_instance_protection, InstanceIds=batch, AutoScalingGroupName=group,
                           ProtectedFromScaleIn=protect)
                done += batch
                continue
            except Exception as exc:
                if _error_code(exc) != "ValidationError":
                    raise
            current = self.describe([group])
            still = [i for i in batch if i in current and current[i].group == group
                     and current[i].lifecycle_state == IN_SERVICE]
            gone = [i for i in batch if i not in still]
            result.left_group += gone
            log.info("%s: %s left the group or service; retrying the rest", group, ", ".join(gone) or "(none)")
            if not still:
                continue
            try:
                self._call(self.autoscaling.set_instance_protection, InstanceIds=still, AutoScalingGroupName=group,
                           ProtectedFromScaleIn=protect)
                done += still
            except Exception as exc:
                if _error_code(exc) != "ValidationError":
                    raise
                for iid in still:  # the state changed again between the two calls
                    try:
                        self._call(self.autoscaling.set_instance_protection, InstanceIds=[iid],
                                   AutoScalingGroupName=group, ProtectedFromScaleIn=protect)
                        done.append(iid)
                    except Exception as one:
                        if _error_code(one) != "ValidationError":
                            raise
                        result.left_group.append(iid)
                        log.info("%s: %s refused (%s); skipped this cycle", group, iid, one)
        return done

    def _annotate(self, node: dict[str, Any], desired: Optional[str], result: CycleResult) -> None:
        name = node["metadata"]["name"]
        current = (node["metadata"].get("annotations") or {}).get(SCALE_DOWN_DISABLED)
        if current == desired:
            return
        try:
            self.kube.set_node_annotation(name, SCALE_DOWN_DISABLED, desired)
        except Exception as exc:  # one node's failed patch must not stop the others
            result.errors[name] = f"annotation: {exc}"
            log.warning("%s: could not set %s=%s: %s", name, SCALE_DOWN_DISABLED, desired, exc)
            return
        node["metadata"].setdefault("annotations", {})[SCALE_DOWN_DISABLED] = desired
        result.annotated[name] = desired

    # --- one cycle -----------------------------------------------------------------------------

    def reconcile(self) -> CycleResult:
        now = self.clock()
        result = CycleResult()
        node_list = self.kube.list_nodes()
        busy_nodes = busy_node_names(self.kube.list_pods())

        # 1. The real guard first, from the Kubernetes API alone.
        for node in node_list:
            if node["metadata"]["name"] in busy_nodes:
                self._annotate(node, "true", result)

        # 2. The groups' instances; only InService ones are ours to change.
        try:
            described = self.describe()
        except Exception as exc:
            result.errors["describe"] = str(exc)
            log.warning("DescribeAutoScalingGroups failed (%s); busy nodes are annotated, the rest waits a cycle", exc)
            return result
        instances = {i: g for i, g in described.items() if g.lifecycle_state == IN_SERVICE}
        nodes = {iid: n for n in node_list if (iid := instance_id(n))}

        want: dict[str, bool] = {}
        for iid, inst in instances.items():
            node = nodes.get(iid)
            busy = node is not None and node["metadata"]["name"] in busy_nodes
            if busy:
                self.idle_since.pop(iid, None)
            else:
                self.idle_since.setdefault(iid, now)
            idle_for = 0.0 if busy else now - self.idle_since[iid]
            want[iid] = busy or (inst.protected and idle_for < self.grace_seconds)

        for gone in set(self.idle_since) - set(instances):
            del self.idle_since[gone]

        # 3. Instance protection, group by group; a group that fails is reported, not fatal.
        final = {iid: inst.protected for iid, inst in instances.items()}
        for group in self.group_names:
            to_protect = sorted(i for i, w in want.items() if w and not instances[i].protected and instances[i].group == group)
            to_release = sorted(i for i, w in want.items() if not w and instances[i].protected and instances[i].group == group)
            for ids, protect, record in ((to_protect, True, result.protected), (to_release, False, result.unprotected)):
                if not ids:
                    continue
                try:
                    changed = self._set_protection(group, ids, protect, result)
                except Exception as exc:
                    result.errors[group] = str(exc)
                    log.warning("%s: SetInstanceProtection failed (%s); retrying next cycle", group, exc)
                    continue
                record += changed
                final.update({i: protect for i in changed})
        for iid in result.left_group:
            final.pop(iid, None)
            want.pop(iid, None)
            self.idle_since.pop(iid, None)

        # 4. The annotation follows: kept while wanted (busy or in grace) or while the instance is
        #    still protected because its release failed; removed only once the node may go.
        for iid, protected in final.items():
            node = nodes.get(iid)
            if node is not None:
                self._annotate(node, "true" if (want.get(iid) or protected) else None, result)
        if result.protected or result.unprotected:
            log.info("protected %s; released %s", result.protected, result.unprotected)
        return result


def kube_from_env(environ: Optional[dict[str, str]] = None) -> InClusterKube:
    """The Kubernetes API the controller reads and patches, from its environment: the pod's service account
    unless SERVICE_ACCOUNT_DIR names another folder holding `token` and `ca.crt` (an empty value is the pod's)."""
    env = os.environ if environ is None else environ
    sa_dir = env.get("SERVICE_ACCOUNT_DIR") or InClusterKube.SA_DIR
    host, port = env.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc"), env.get("KUBERNETES_SERVICE_PORT", "443")
    return InClusterKube(base_url=f"https://{host}:{port}", token_file=f"{sa_dir}/token", ca_file=f"{sa_dir}/ca.crt",
                         node_selector=env.get("NODE_SELECTOR", ""))


def main() -> int:  # pragma: no cover - the in-cluster entry point
    import boto3
    from botocore.config import Config

    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    groups = [g for g in os.environ["ASG_NAMES"].split(",") if g]
    grace = float(os.environ.get("GRACE_SECONDS", "900"))
    interval = float(os.environ.get("INTERVAL_SECONDS", "30"))
    client = boto3.client("autoscaling", region_name=os.environ["AWS_REGION"],
                          config=Config(retries={"total_max_attempts": 1}))  # Controller._call owns retries
    controller = Controller(client, kube_from_env(), groups, grace)
    log.info("managing %s, grace %ss, every %ss", groups, grace, interval)
    while True:
        try:
            controller.reconcile()
            with open(HEARTBEAT_FILE, "w", encoding="utf-8") as f:
                f.write(str(time.time()))
        except Exception:
            log.exception("cycle failed; retrying next interval")
        time.sleep(interval)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
