"""Upgrade a Linode kubeadm cluster in place, with no SSH: `pulumi up` runs one privileged Job per node,
pinned to it by `nodeName`, one after another, the way kubeadm documents it ("Upgrading kubeadm
clusters", kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/, and "Upgrading Linux
nodes"): the first control plane runs `kubeadm upgrade apply`, the other control planes `kubeadm upgrade
node`, then every node in turn gets the new kubeadm, is drained, gets the new kubelet and kubectl
(unhold, exact version, hold) and is uncordoned; workers one at a time.

What triggers it: the Jobs' names carry the target release (the pinned patch of `kubernetesVersion`,
versions.KUBERNETES_PATCH), so a new minor in the stack, or a new patch pin in versions.py, is a new set
of Jobs; an unchanged one changes nothing. On a cluster already at the target (a first deploy), each Job
finds the node there and exits at once. The CNI chart moves with the minor before the Jobs run (the
add-ons come first; config validation requires the chart to be tested on both minors).

Version skew (kubernetes.io/releases/version-skew-policy/): one minor at a time, never down. Checked
twice: by config validation against `linode.controlPlaneVersion` (check_upgrade, before anything is
registered) and by each Job's script against what the node and the API server actually run.

Autoscaled GPU pools (node_groups.py): their nodes are the node-group provider's, not the program's, so
no Job can name them at plan time. One Job per such pool, after the program's workers, finds the pool's
nodes at run time (by the pool label) and, one at a time, creates for each node below the target the
same worker Job the program's own nodes get (pinned by nodeName, drained, kubelet moved, uncordoned),
waiting for each to complete. It runs on the first control plane (already upgraded), whose root holds the
cluster CA keys anyway: the right to create Jobs in kube-system that its service account needs never
reaches a machine that could not already do more. A node the autoscaler creates after the control plane
moved boots at the target on its own (the boot script installs what the API server runs); one it removes
mid-run is skipped. Why in place rather than drain-and-replace: the same path the fixed GPU workers take
(drain with each pod's own termination grace, for checkpoints; PodDisruptionBudgets apply), no new
instance with a 16-minute boot and a second NVIDIA install, and no reliance on the autoscaler deleting a
cordoned node.

Preflight's plan lists the Jobs a change creates, in order. The rendering is pure (tested, and the scripts executed in tests/boot_harness.py); cluster.py creates
the objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from gpu_platform.components.cluster import POOL_LABEL
from gpu_platform.data import linode_versions as versions
# The skew rules live with the config checks (config must not import components); re-exported here.
from gpu_platform.config.checks.linode import UpgradeError, check_upgrade  # noqa: F401  (re-exported)

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "gpu-platform-node-upgrade"
# The autoscaled pools' Jobs: their own account, which may also create the per-node Jobs (kube-system).
POOL_SERVICE_ACCOUNT = "gpu-platform-pool-upgrade"
# Labels the per-node Jobs a pool's Job creates carry (which pool they belong to).
POOL_JOB_LABEL = "gpu-platform.io/upgrade-pool"
# Finished per-node Jobs of a pool go after a day (the program does not own them; a rerun skips
# nodes already at the target).
POOL_NODE_JOB_TTL_SECONDS = 24 * 3600
# The node-name placeholder in the per-node Job template a pool's script fills in.
NODE_PLACEHOLDER = "__NODE__"
# The Job's pod carries this label; the drain leaves it alone (it runs on the node it drains).
POD_LABEL = "gpu-platform.io/node-upgrade"
# Host directory where the Job hands its service-account token and script to the host's namespaces.
HANDOFF_DIR = "/var/lib/gpu-platform/upgrade"
SCRIPT_FILE = "upgrade.sh"
ROLES = ("apply", "control-plane", "worker")
# How long one node may take (drain 30 min at most, packages, kubeadm) before `pulumi up` fails.
JOB_TIMEOUT_MINUTES = 60


# ---------------------------------------------------------------------------------------------
# What runs on the node (in the host's namespaces, as root)
# ---------------------------------------------------------------------------------------------


def _prelude(endpoint: str, extra_cleanup: str = "") -> str:
    """What every upgrade script starts with: a kubeconfig for the Job's service-account token (removed on
    exit), kubectl with retries, and the API server's version."""
    return f"""handoff={HANDOFF_DIR}
kubeconfig="$handoff/kubeconfig"
trap 'rm -f "$handoff/token" "$kubeconfig"{extra_cleanup}' EXIT
umask 077
# The Job's service account (drain, uncordon), verified with the cluster CA kubeadm put on every node.
cat > "$kubeconfig" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: https://{endpoint}
    certificate-authority: /etc/kubernetes/pki/ca.crt
users:
- name: node-upgrade
  user:
    tokenFile: $handoff/token
contexts:
- name: node-upgrade
  context:
    cluster: cluster
    user: node-upgrade
current-context: node-upgrade
KUBECONFIG
kc() {{
  kubectl --kubeconfig "$kubeconfig" "$@"
}}
# The API server restarts during `kubeadm upgrade apply`: calls after it retry for 5 minutes.
kc_retry() {{
  local attempt
  for attempt in $(seq 30); do
    if kc "$@"; then
      return 0
    fi
    echo "kubectl $1 failed (attempt $attempt): retrying" >&2
    sleep 10
  done
  return 1
}}
server_version() {{
  kc_retry version -o json | sed -n 's/.*"gitVersion": *"\\(v[0-9][0-9.]*\\)".*/\\1/p' | tail -n 1
}}"""


# Every Job after the first control plane's: wait until an API server answers the target.
_WAIT_FOR_UPGRADED_SERVER = """for attempt in $(seq "${SERVER_WAIT_ATTEMPTS:-30}"); do
  [ "$server" = "$target" ] && break
  sleep "${SERVER_WAIT_SECONDS:-10}"
  server=$(server_version)
done
if [ "$server" != "$target" ]; then
  echo "the API server runs $server, not $target yet: the control plane is upgraded first" >&2
  exit 1
fi"""


def node_upgrade_script(role: str, patch: str, endpoint: str) -> str:
    """The script one node's Job runs. role: apply (the first control plane) | control-plane | worker.
    `patch`: the exact release (1.36.4); `endpoint`: host:port of the API server as nodes reach it.
    Idempotent: a node already at `patch` (kubelet and API server) exits 0 without draining."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    minor = ".".join(patch.split(".")[:2])
    pkg = f"{patch}-{versions.KUBERNETES_DEB_REVISION}"
    if role == "apply":
        control_plane = f"""if [ "$server" != "$target" ]; then
  kubeadm upgrade plan "$target"
  kubeadm upgrade apply -y "$target"
fi"""
        server_check = """if (( $(minor_of "$server") > $(minor_of "$target") )) || (( $(minor_of "$target") > $(minor_of "$server") + 1 )); then
  echo "the API server runs $server: $target is not the same minor or the next one" >&2
  exit 1
fi"""
    else:
        control_plane = "kubeadm upgrade node"
        # On an HA cluster the endpoint is the NodeBalancer over every API server, and only cp-0's runs the
        # target until the others' own `kubeadm upgrade node`: any one answering the target means the first
        # control plane is upgraded (asked again for a while; one old answer proves nothing).
        server_check = _WAIT_FOR_UPGRADED_SERVER
    return f"""#!/usr/bin/env bash
# Upgrades this node ({role}) to Kubernetes v{patch}; run by its gpu-platform node-upgrade Job.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
node=${{NODE_NAME:?the Job sets NODE_NAME}}
target=v{patch}
minor={minor}
pkg={pkg}
{_prelude(endpoint)}
minor_of() {{
  local v=${{1#v}}
  v=${{v#*.}}
  echo "${{v%%.*}}"
}}

running=$(kubelet --version | awk '{{print $2}}')
server=$(server_version)
echo "$node: kubelet $running, API server $server, target $target"
if [ "$running" = "$target" ] && [ "$server" = "$target" ]; then
  # A run that failed after its new kubelet may have left the node cordoned: never report it done so.
  kc_retry uncordon "$node"
  echo "$node already runs $target"
  exit 0
fi
# Version skew: never down, one minor at a time (dpkg compares the release numbers).
if dpkg --compare-versions "${{running#v}}" gt "${{target#v}}"; then
  echo "refusing to downgrade $node from $running to $target" >&2
  exit 1
fi
if (( $(minor_of "$target") > $(minor_of "$running") + 1 )); then
  echo "refusing $running -> $target on $node: it skips a minor (kubeadm upgrades one minor at a time)" >&2
  exit 1
fi
{server_check}

# pkgs.k8s.io has one repository per minor: point apt at the target's.
sed -i "s#/v[0-9]*\\.[0-9]*/deb/#/v${{minor}}/deb/#" /etc/apt/sources.list.d/kubernetes.list
curl -fsSL "https://pkgs.k8s.io/core:/stable:/v${{minor}}/deb/Release.key" \\
  | gpg --dearmor --batch --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
apt-get update -q
apt-mark unhold kubeadm
apt-get install -y -q "kubeadm=${{pkg}}"
apt-mark hold kubeadm
{control_plane}

# Drain (the Job's own pod stays: it is running the upgrade), new kubelet and kubectl, uncordon.
# --force: notebook servers are bare pods (KubeSpawner); evicted like the rest (their volumes stay,
# PodDisruptionBudgets still apply), as nodeops.py drains a removed node.
kc drain "$node" --ignore-daemonsets --delete-emptydir-data --force --pod-selector '!{POD_LABEL}' --timeout=30m
apt-mark unhold kubelet kubectl
apt-get install -y -q "kubelet=${{pkg}}" "kubectl=${{pkg}}"
apt-mark hold kubelet kubectl
systemctl daemon-reload
systemctl restart kubelet
kc_retry uncordon "$node"
kc_retry wait --for=condition=Ready "node/$node" --timeout=10m
echo "$node upgraded to $target"
"""


def pool_upgrade_script(pool: str, patch: str, endpoint: str, node_job: dict[str, Any]) -> str:
    """The script an autoscaled pool's Job runs (on the first control plane, in the host's namespaces):
    list the pool's nodes (label gpu-platform.io/pool), and for each whose kubelet is not at `patch`
    create `node_job` (the worker Job, NODE_PLACEHOLDER for the node) and wait for it; a node that leaves
    the cluster meanwhile (the autoscaler removed it) is skipped. Lists again afterwards, since a node
    that was still booting at the old version registers later; done when a pass finds nothing to do."""
    template = json.dumps(node_job, sort_keys=True)
    name = f"upgrade-{NODE_PLACEHOLDER}-{_release_slug(patch)}"
    return f"""#!/usr/bin/env bash
# Upgrades the nodes of the autoscaled GPU pool {pool} to Kubernetes v{patch}, one at a time, with the
# same per-node Job the program's workers get; run by the pool's gpu-platform node-upgrade Job.
set -euo pipefail
target=v{patch}
pool={pool}
{_prelude(endpoint, ' "$handoff/node-job.json"')}

server=$(server_version)
echo "pool $pool: API server $server, target $target"
{_WAIT_FOR_UPGRADED_SERVER}

# The worker Job of the program's own nodes, for {NODE_PLACEHOLDER} (a quoted here-document: nothing expands).
template=$(cat <<'JOB'
{template}
JOB
)
job_state() {{
  kc get job "$1" -n {NAMESPACE} --ignore-not-found -o jsonpath='{{.status.conditions[?(@.status=="True")].type}}'
}}
node_present() {{
  # Unsure (the API did not answer): present, so the wait goes on.
  [ -n "$(kc get node "$1" --ignore-not-found -o name 2>/dev/null || echo unknown)" ]
}}
upgrade_node() {{
  local node=$1 job state attempt
  job="{name}"
  job=${{job//{NODE_PLACEHOLDER}/$node}}
  if (( ${{#job}} > 63 )); then
    echo "the upgrade Job name $job is longer than 63 characters" >&2
    return 1
  fi
  # A Job from an earlier run whose node is still below the target (it failed, or was cut off): again.
  kc_retry delete job "$job" -n {NAMESPACE} --ignore-not-found --wait=true
  printf '%s\n' "${{template//{NODE_PLACEHOLDER}/$node}}" > "$handoff/node-job.json"
  kc_retry create -f "$handoff/node-job.json"
  echo "$node: created $job"
  for attempt in $(seq "${{NODE_WAIT_ATTEMPTS:-{JOB_TIMEOUT_MINUTES * 4}}}"); do
    state=$(job_state "$job" || true)
    case " $state " in
      *" Complete "*)
        echo "$node upgraded to $target"
        return 0 ;;
      *" Failed "*)
        echo "the upgrade Job $job of $node failed: kubectl -n {NAMESPACE} logs job/$job" >&2
        return 1 ;;
    esac
    if ! node_present "$node"; then
      echo "$node left the cluster (the autoscaler removed it): nothing to upgrade there"
      kc delete job "$job" -n {NAMESPACE} --ignore-not-found || true
      return 0
    fi
    sleep "${{NODE_WAIT_SECONDS:-15}}"
  done
  echo "the upgrade Job $job of $node did not finish within {JOB_TIMEOUT_MINUTES} minutes" >&2
  return 1
}}

for pass in 1 2 3; do
  listing=$(kc_retry get nodes -l "{POOL_LABEL}=$pool" \
    -o jsonpath='{{range .items[*]}}{{.metadata.name}}{{" "}}{{.status.nodeInfo.kubeletVersion}}{{"\n"}}{{end}}')
  behind=()
  while read -r node version; do
    [ -n "$node" ] || continue
    if [ "$version" = "$target" ]; then
      echo "$node already runs $target"
    else
      behind+=("$node")
    fi
  done <<< "$listing"
  if (( ${{#behind[@]}} == 0 )); then
    echo "pool $pool: every node runs $target (pass $pass)"
    exit 0
  fi
  for node in "${{behind[@]}}"; do
    upgrade_node "$node"
  done
done
echo "pool $pool: nodes below $target keep appearing after 3 passes; run \`pulumi up\` again" >&2
exit 1
"""


# ---------------------------------------------------------------------------------------------
# The Kubernetes objects
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeUpgrade:
    node: str  # where the Job runs (for a pool: the first control plane)
    role: str  # apply | control-plane | worker | pool
    pool: str = ""  # role pool: the autoscaled pool whose nodes it upgrades
    pool_size: int = 0  # role pool: its maxNodes (bounds how long the Job may take)

    @property
    def script(self) -> str:
        """The script's key in the ConfigMap (without .sh), the Job's ROLE."""
        return f"pool-{self.pool}" if self.role == "pool" else self.role


@dataclass(frozen=True)
class AutoscaledPool:
    name: str
    max_nodes: int


def upgrade_order(control_planes: Sequence[str], workers: Sequence[str],
                  pools: Sequence[AutoscaledPool] = ()) -> list[NodeUpgrade]:
    """control_planes[0] applies; the other control planes follow; then each worker, one at a time; then
    each autoscaled pool's nodes (found at run time), from a Job on the first control plane."""
    if not control_planes:
        raise UpgradeError("no control plane to upgrade")
    return ([NodeUpgrade(control_planes[0], "apply")] + [NodeUpgrade(n, "control-plane") for n in control_planes[1:]]
            + [NodeUpgrade(n, "worker") for n in workers]
            + [NodeUpgrade(control_planes[0], "pool", p.name, p.max_nodes) for p in pools])


def _release_slug(patch: str) -> str:
    return "v" + patch.replace(".", "-")


def job_name(node: str, patch: str) -> str:
    """Unique per node and release: a new release is a new Job (Pulumi replaces it, the Job runs)."""
    name = f"upgrade-{node}-{_release_slug(patch)}"
    if len(name) > 63:
        raise ValueError(f"Job name {name!r} is longer than 63 characters")
    return name


def step_job_name(step: NodeUpgrade, patch: str) -> str:
    return job_name(f"pool-{step.pool}" if step.role == "pool" else step.node, patch)


def timeout_minutes(step: NodeUpgrade) -> int:
    """How long a step's Job may run: one node's time, or a pool's (each of its nodes in turn)."""
    return JOB_TIMEOUT_MINUTES * max(1, step.pool_size) + (10 if step.role == "pool" else 0)


def script_config_map_name(patch: str) -> str:
    return f"gpu-platform-node-upgrade-{_release_slug(patch)}"


def rbac_manifests() -> list[dict[str, Any]]:
    """What the Job's kubectl needs: drain (list pods, evict, read DaemonSets to skip theirs), cordon and
    uncordon (patch nodes), the server's version, and waiting for the node (get/watch nodes)."""
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SERVICE_ACCOUNT},
         "rules": [
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
             {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
             {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SERVICE_ACCOUNT},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]},
    ]


def pool_rbac_manifests() -> list[dict[str, Any]]:
    """What an autoscaled pool's Job needs: find the pool's nodes (list nodes; get one to see it is still
    there) and run the per-node Jobs in kube-system (create, read their status, delete a stale one).
    Nothing else: no pods, no evictions (the per-node Jobs drain with their own account)."""
    subjects = [{"kind": "ServiceAccount", "name": POOL_SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": POOL_SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": POOL_SERVICE_ACCOUNT},
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": POOL_SERVICE_ACCOUNT},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": POOL_SERVICE_ACCOUNT},
         "subjects": subjects},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": POOL_SERVICE_ACCOUNT, "namespace": NAMESPACE},
         # list/watch: `kubectl delete --wait` watches the Job until it is gone.
         "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "create", "delete"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": POOL_SERVICE_ACCOUNT, "namespace": NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": POOL_SERVICE_ACCOUNT},
         "subjects": subjects},
    ]


def pool_node_job(pool: str, patch: str, image: str) -> dict[str, Any]:
    """The per-node Job a pool's script creates for each of its nodes: the worker Job the program's own
    nodes get, NODE_PLACEHOLDER for the node, gone a day after it finished (the program does not own it)."""
    job = job_manifest(NodeUpgrade(NODE_PLACEHOLDER, "worker"), patch, image)
    job["metadata"]["labels"] = {**job["metadata"]["labels"], POOL_JOB_LABEL: pool}
    job["metadata"].pop("annotations", None)  # Pulumi's: this Job is not a Pulumi resource
    job["spec"]["ttlSecondsAfterFinished"] = POOL_NODE_JOB_TTL_SECONDS
    return job


def script_config_map(patch: str, endpoint: str, pools: Sequence[AutoscaledPool] = (), image: str = "") -> dict[str, Any]:
    data = {f"{role}.sh": node_upgrade_script(role, patch, endpoint) for role in ROLES}
    for pool in pools:
        data[f"pool-{pool.name}.sh"] = pool_upgrade_script(pool.name, patch, endpoint, pool_node_job(pool.name, patch, image))
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": script_config_map_name(patch), "namespace": NAMESPACE},
            "data": data}


# In the container: hand the token and the script to the host, then run the script in the host's
# namespaces (PID 1's), where kubeadm, apt and systemd are. The same nsenter the Cilium chart's own
# init containers use in this image (templates/cilium-agent/daemonset.yaml, mount-cgroup).
_WRAPPER = (f"install -d -m 0700 /handoff && install -m 0600 /var/run/secrets/kubernetes.io/serviceaccount/token /handoff/token"
            f" && install -m 0700 /scripts/$ROLE.sh /handoff/{SCRIPT_FILE}"
            f" && exec nsenter --target 1 --mount --uts --ipc --net --pid -- /bin/bash {HANDOFF_DIR}/{SCRIPT_FILE}")


def job_manifest(step: NodeUpgrade, patch: str, image: str) -> dict[str, Any]:
    """A privileged Job pinned to one node by nodeName (no scheduler: it runs on a cordoned node and on
    tainted GPU nodes alike). `image`: one every node already has (the CNI agent's, by digest)."""
    labels = {POD_LABEL: "true", "app.kubernetes.io/managed-by": "gpu-platform"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": step_job_name(step, patch), "namespace": NAMESPACE, "labels": labels,
                     # A failed upgrade is replaced (run again) by the next `pulumi up`, not waited on.
                     "annotations": {"pulumi.com/replaceUnready": "true"}},
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": timeout_minutes(step) * 60,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": step.node,
                    "serviceAccountName": POOL_SERVICE_ACCOUNT if step.role == "pool" else SERVICE_ACCOUNT,
                    "hostPID": True,
                    "restartPolicy": "Never",
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "upgrade",
                        "image": image,
                        "command": ["sh", "-ec", _WRAPPER],
                        "env": [{"name": "ROLE", "value": step.script},
                                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "handoff", "mountPath": "/handoff"},
                                         {"name": "scripts", "mountPath": "/scripts", "readOnly": True}],
                    }],
                    "volumes": [{"name": "handoff", "hostPath": {"path": HANDOFF_DIR, "type": "DirectoryOrCreate"}},
                                {"name": "scripts", "configMap": {"name": script_config_map_name(patch)}}],
                },
            },
        },
    }


def upgrade_manifests(control_planes: Sequence[str], workers: Sequence[str], minor: str, endpoint: str,
                      image: str, pools: Sequence[AutoscaledPool] = ()) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the objects every Job needs, the Jobs in the order they must run one after another)."""
    patch = versions.KUBERNETES_PATCH[minor]
    shared = [*rbac_manifests(), *(pool_rbac_manifests() if pools else []), script_config_map(patch, endpoint, pools, image)]
    return shared, [job_manifest(step, patch, image) for step in upgrade_order(control_planes, workers, pools)]
