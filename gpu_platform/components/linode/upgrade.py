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

Preflight's plan lists the Jobs a change creates, in order. The rendering is pure (tested, and the scripts executed in tests/boot_harness.py); cluster.py creates
the objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from gpu_platform.components.linode import versions
# The skew rules live with the config checks (config must not import components); re-exported here.
from gpu_platform.config.checks.linode import UpgradeError, check_upgrade  # noqa: F401  (re-exported)

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "gpu-platform-node-upgrade"
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
        server_check = """for attempt in $(seq "${SERVER_WAIT_ATTEMPTS:-30}"); do
  [ "$server" = "$target" ] && break
  sleep "${SERVER_WAIT_SECONDS:-10}"
  server=$(server_version)
done
if [ "$server" != "$target" ]; then
  echo "the API server runs $server, not $target yet: the control plane is upgraded first" >&2
  exit 1
fi"""
    return f"""#!/usr/bin/env bash
# Upgrades this node ({role}) to Kubernetes v{patch}; run by its gpu-platform node-upgrade Job.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
node=${{NODE_NAME:?the Job sets NODE_NAME}}
target=v{patch}
minor={minor}
pkg={pkg}
handoff={HANDOFF_DIR}
kubeconfig="$handoff/kubeconfig"
trap 'rm -f "$handoff/token" "$kubeconfig"' EXIT
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
minor_of() {{
  local v=${{1#v}}
  v=${{v#*.}}
  echo "${{v%%.*}}"
}}
server_version() {{
  kc_retry version -o json | sed -n 's/.*"gitVersion": *"\\(v[0-9][0-9.]*\\)".*/\\1/p' | tail -n 1
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


# ---------------------------------------------------------------------------------------------
# The Kubernetes objects
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeUpgrade:
    node: str
    role: str  # apply | control-plane | worker


def upgrade_order(control_planes: Sequence[str], workers: Sequence[str]) -> list[NodeUpgrade]:
    """control_planes[0] applies; the other control planes follow; then each worker, one at a time."""
    if not control_planes:
        raise UpgradeError("no control plane to upgrade")
    return ([NodeUpgrade(control_planes[0], "apply")] + [NodeUpgrade(n, "control-plane") for n in control_planes[1:]]
            + [NodeUpgrade(n, "worker") for n in workers])


def _release_slug(patch: str) -> str:
    return "v" + patch.replace(".", "-")


def job_name(node: str, patch: str) -> str:
    """Unique per node and release: a new release is a new Job (Pulumi replaces it, the Job runs)."""
    name = f"upgrade-{node}-{_release_slug(patch)}"
    if len(name) > 63:
        raise ValueError(f"Job name {name!r} is longer than 63 characters")
    return name


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


def script_config_map(patch: str, endpoint: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": script_config_map_name(patch), "namespace": NAMESPACE},
            "data": {f"{role}.sh": node_upgrade_script(role, patch, endpoint) for role in ROLES}}


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
        "metadata": {"name": job_name(step.node, patch), "namespace": NAMESPACE, "labels": labels,
                     # A failed upgrade is replaced (run again) by the next `pulumi up`, not waited on.
                     "annotations": {"pulumi.com/replaceUnready": "true"}},
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": JOB_TIMEOUT_MINUTES * 60,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": step.node,
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "hostPID": True,
                    "restartPolicy": "Never",
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "upgrade",
                        "image": image,
                        "command": ["sh", "-ec", _WRAPPER],
                        "env": [{"name": "ROLE", "value": step.role},
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
                      image: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the objects every Job needs, the Jobs in the order they must run one after another)."""
    patch = versions.KUBERNETES_PATCH[minor]
    shared = [*rbac_manifests(), script_config_map(patch, endpoint)]
    return shared, [job_manifest(step, patch, image) for step in upgrade_order(control_planes, workers)]
