"""What a kubeadm cluster on Linode needs before workloads run: a CNI, the Linode cloud controller
manager (node lifecycle, LoadBalancer Services), the block-storage CSI driver with a default
encrypted StorageClass, and the NVIDIA device plugin on the GPU nodes. Charts pinned in versions.py."""

from __future__ import annotations

import datetime
import hashlib
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from gpu_platform.components.cluster import DEVICE_LIST_STRATEGY, GPU_TAINT, POOL_LABEL
from gpu_platform.data.chart import Chart
from gpu_platform.components.helm import helm_release
from gpu_platform.components.read_only import SECRET_CONTENT, keep_from_state
from gpu_platform.components.linode import render
from gpu_platform.data import linode_versions as versions

TOKEN_SECRET = "linode-api"
DEFAULT_STORAGE_CLASS = "linode-block-storage-encrypted"
CSI_PROVISIONER = "linodebs.csi.linode.com"


@dataclass(frozen=True)
class AddonsArgs:
    cni: str  # cilium | calico
    pod_cidr: str
    kubernetes_minor: str
    region: str
    api_token: pulumi.Input[str]
    api_host: str
    vpc_label: str = ""
    subnet_label: str = ""
    # The minor the cluster runs before this update, when `kubernetes_minor` is the next one (an upgrade):
    # the CNI chart must be tested on both, since it moves before the control plane.
    running_minor: Optional[str] = None


def cni_values(cni: str, pod_cidr: str) -> dict[str, Any]:
    if cni == "cilium":
        return {
            "ipam": {"mode": "cluster-pool", "operator": {"clusterPoolIPv4PodCIDRList": [pod_cidr]}},
            "routingMode": "tunnel",
            "tunnelProtocol": "vxlan",
            "operator": {"replicas": 1},
            # CIDR rules may select nodes and the kube-apiserver (hostNetwork on the control planes):
            # without it an ipBlock egress rule to the API server's address (JupyterHub's hub, KubeSpawner)
            # never matches and notebooks never spawn (cilium#20550, zero-to-jupyterhub-k8s#3202).
            "policyCIDRMatchMode": ["nodes"],
            # Cilium must run everywhere, the tainted GPU nodes included.
            "tolerations": [{"operator": "Exists"}],
        }
    return {"installation": {"calicoNetwork": {"ipPools": [{"cidr": pod_cidr, "encapsulation": "VXLAN"}]}}}


def token_secret_name(api_token: str) -> str:
    """The API token Secret's name carries a digest of the token: a rotated token is a new Secret, and
    the CCM's and CSI driver's values name it, so both roll out and read the new token (they read it
    from env at start; a Secret updated in place would restart nothing). A SHA-256 prefix of a random
    API token reveals nothing about it."""
    return f"{TOKEN_SECRET}-{hashlib.sha256(api_token.encode()).hexdigest()[:10]}"


def ccm_values(vpc_label: str, subnet_label: str, secret_name: Any = TOKEN_SECRET) -> dict[str, Any]:
    """Nodes register with their VPC address (kubelet --node-ip): the CCM must know the VPC to report
    it (ccm-linode v0.7.1 --vpc-names/--subnet-names). LoadBalancer Services then get NodeBalancer
    backends on each node's private IPv4, which the CCM annotates (node.k8s.linode.com/private-ip):
    no VPC-backend NodeBalancers (a limited-availability, v4beta feature) are needed."""
    return {
        "secretRef": {"name": secret_name, "apiTokenRef": "apiToken", "regionRef": "region"},
        # The chart's own default is `latest` (appVersion is only set when Linode publishes it): pin the
        # image of the chart's release tag, so a pod restart never pulls a different CCM.
        "image": {"tag": versions.LINODE_CCM_CHART.version},
        "vpcNames": vpc_label,
        "subnetNames": subnet_label,
        # Nodes start tainted "uninitialized" until the CCM runs: it must tolerate everything.
        "tolerations": [{"operator": "Exists"}],
    }


def csi_values(secret_name: Any = TOKEN_SECRET) -> dict[str, Any]:
    return {
        "secretRef": {"name": secret_name, "apiTokenRef": "apiToken", "regionRef": "region"},
        # Pinned like the CCM: the plugin image of the chart's release tag, not the chart's `latest`.
        "csiLinodePlugin": {"tag": versions.LINODE_CSI_CHART.version},
        # We ship our own default (encrypted, deleted with its claim) class below.
        "defaultStorageClass": "",
        # The chart's controller tolerates every NoSchedule/NoExecute taint and selects no node: without a
        # selector the scheduler may put it on a GPU node (seen in the rehearsal), where it holds the node
        # up against scale-down. The system nodes run it (the chart's own `controller.tolerations` value
        # renders the wrong object in v1.0.6, so the taints stay the chart's).
        "controller": {"nodeSelector": {render.ROLE_LABEL: render.SYSTEM_ROLE}},
    }


def device_plugin_values() -> dict[str, Any]:
    return {
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [GPU_TAINT.toleration(), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": POOL_LABEL, "operator": "Exists"}]}]}}},
        "priorityClassName": "system-node-critical",
        # Allocations as volume mounts, which the nodes' toolkit alone trusts (install_nvidia_script).
        "deviceListStrategy": DEVICE_LIST_STRATEGY,
    }


METADATA_CIDR = "169.254.169.254/32"


def metadata_deny_policy() -> dict[str, Any]:
    """Every pod in every namespace (kubeflow, kube-system, the ones users create) is denied egress to the
    Linode metadata service, where each node's user data stays readable. A clusterwide deny rule, enforced
    by Cilium per endpoint; `enableDefaultDeny: false` so selecting every pod denies nothing else
    (CiliumClusterwideNetworkPolicy, cilium.io/v2; deny rules take precedence over any allow)."""
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumClusterwideNetworkPolicy",
        "metadata": {"name": "deny-instance-metadata"},
        "spec": {
            "description": "No pod reaches the Linode metadata service (node user data lives there)",
            "endpointSelector": {},
            "enableDefaultDeny": {"egress": False, "ingress": False},
            "egressDeny": [{"toCIDR": [METADATA_CIDR]}],
        },
    }


TOKEN_EXPIRY_RULE = "linode-api-token-expiry"
# One series per token, labelled token=<its config namespace>.
TOKEN_EXPIRY_RECORD = "gpu_platform:linode_api_token_expiry_timestamp_seconds"


@dataclass(frozen=True)
class ApiToken:
    """A Linode API token the cluster holds, and what its expiry alert says."""
    namespace: str  # its Pulumi config namespace (<namespace>:token), also the series' `token` label
    expiry_key: str  # the stack key stating its expiry
    readers: str
    restarts: str  # what `pulumi up` restarts when the token changes
    breaks: str
    # (alert, days before the expiry, severity)
    alerts: tuple[tuple[str, int, str], ...]


CLUSTER_TOKEN = ApiToken(
    "linode-cluster", "linode.apiTokenExpires", "the CCM and CSI driver", "the CCM and CSI driver restart with it",
    "LoadBalancers, volumes and node lifecycle stop working",
    (("LinodeApiTokenExpiresSoon", 30, "warning"), ("LinodeApiTokenExpiresVerySoon", 7, "critical")))
NODE_GROUPS_TOKEN = ApiToken(
    "linode-node-groups", "linode.nodeGroups.apiTokenExpires", "the node-group provider",
    "the node-group provider restarts with it (its pod template carries the token's digest)",
    "autoscaled GPU pools can neither create nor delete nodes (a scaled-up GPU node keeps billing)",
    (("LinodeNodeGroupsTokenExpiresSoon", 30, "warning"), ("LinodeNodeGroupsTokenExpiresVerySoon", 7, "critical")))
# The CCM/CSI token's alerts (kept for callers that name them).
TOKEN_EXPIRY_ALERTS = CLUSTER_TOKEN.alerts


def token_expiry_rule(expires: Optional[datetime.date], node_groups_expires: Optional[datetime.date] = None
                      ) -> dict[str, Any]:
    """PrometheusRule (no namespace: the platform's monitoring places it): each stated token expiry
    (linode.apiTokenExpires for the CCM/CSI token, linode.nodeGroups.apiTokenExpires for the node-group
    provider's) as a recorded constant at midnight UTC, and alerts 30 and 7 days before it. The Linode
    API's expiry is not readable offline, so the stack states it."""
    rules: list[dict[str, Any]] = []
    for token, date in ((CLUSTER_TOKEN, expires), (NODE_GROUPS_TOKEN, node_groups_expires)):
        if date is None:
            continue
        at = int(datetime.datetime.combine(date, datetime.time(), tzinfo=datetime.timezone.utc).timestamp())
        rules.append({"record": TOKEN_EXPIRY_RECORD,
                      "expr": f'label_replace(vector({at}), "token", "{token.namespace}", "", "")'})
        for alert, days, severity in token.alerts:
            rules.append({
                "alert": alert,
                "expr": f'{TOKEN_EXPIRY_RECORD}{{token="{token.namespace}"}} - time() < {days * 86400}',
                "labels": {"severity": severity},
                "annotations": {
                    "summary": f"The Linode API token of {token.readers} expires within {days} days",
                    "description": (
                        f"{token.namespace}:token expires in {{{{ $value | humanizeDuration }}}} "
                        f"(on {date.isoformat()}, {token.expiry_key}). Then {token.breaks}. Create a new token, set "
                        f"{token.namespace}:token and {token.expiry_key}, and run `pulumi up`: {token.restarts}."),
                },
            })
    if not rules:
        raise ValueError("no token expiry stated: nothing to alert on")
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": TOKEN_EXPIRY_RULE, "labels": {"app.kubernetes.io/managed-by": "gpu-platform"}},
        "spec": {"groups": [{"name": TOKEN_EXPIRY_RULE, "interval": "5m", "rules": rules}]},
    }


ETCD_BACKUP_RULE = "linode-etcd-backups"
ETCD_BACKUP_ALERTS = ("EtcdSnapshotTooOld", "EtcdSnapshotMissing", "EtcdSnapshotUploadFailed")


def etcd_backup_rule() -> dict[str, Any]:
    """PrometheusRule (no namespace: the platform's monitoring places it) on what each control plane's
    snapshot script leaves for node-exporter's textfile collector (render.etcd_snapshot_script):
    EtcdSnapshotTooOld when the newest snapshot of the cluster is older than twice the interval (none at all
    for that long included: the timer, the script or the metrics stopped); EtcdSnapshotUploadFailed when a
    control plane's last run failed after its last success."""
    ok, failed = render.ETCD_SNAPSHOT_SUCCESS_METRIC, render.ETCD_SNAPSHOT_FAILURE_METRIC
    limit_s = 2 * render.ETCD_SNAPSHOT_INTERVAL_HOURS * 3600
    hours = 2 * render.ETCD_SNAPSHOT_INTERVAL_HOURS
    restore = "docs/linode.md, Etcd snapshots"
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": ETCD_BACKUP_RULE, "labels": {"app.kubernetes.io/managed-by": "gpu-platform"}},
        "spec": {"groups": [{"name": ETCD_BACKUP_RULE, "interval": "5m", "rules": [
            {"alert": "EtcdSnapshotTooOld",
             "expr": f"time() - max({ok}) > {limit_s}",
             "for": "15m",
             "labels": {"severity": "critical"},
             "annotations": {
                 "summary": f"No etcd snapshot in the last {hours} hours",
                 "description": (f"The newest etcd snapshot of the cluster is older than {hours} hours (snapshots run "
                                 f"every {render.ETCD_SNAPSHOT_INTERVAL_HOURS} hours on every control plane): a lost "
                                 "control plane would lose everything since. Look at `journalctl -u "
                                 f"{render.ETCD_SNAPSHOT_UNIT}` on the control planes ({restore})."),
             }},
            # No snapshot ever (a new cluster's first comes within one interval), or node-exporter no longer
            # reads them: for as long as a snapshot may be old.
            {"alert": "EtcdSnapshotMissing",
             "expr": f"absent({ok})",
             "for": f"{hours}h",
             "labels": {"severity": "critical"},
             "annotations": {
                 "summary": f"No etcd snapshot recorded for {hours} hours",
                 "description": (f"No control plane has recorded a successful etcd snapshot for {hours} hours (the "
                                 f"metric {ok}, from node-exporter's textfile collector). Look at `journalctl -u "
                                 f"{render.ETCD_SNAPSHOT_UNIT}` on the control planes and at node-exporter there "
                                 f"({restore})."),
             }},
            {"alert": "EtcdSnapshotUploadFailed",
             "expr": (f"max by (node) ({failed}) > max by (node) ({ok}) "
                      f"or (max by (node) ({failed}) unless on (node) max by (node) ({ok}))"),
             "labels": {"severity": "warning"},
             "annotations": {
                 "summary": "An etcd snapshot failed on {{ $labels.node }}",
                 "description": ("The last etcd snapshot run on {{ $labels.node }} failed (taking, encrypting or "
                                 f"uploading it) and none succeeded since. `journalctl -u {render.ETCD_SNAPSHOT_UNIT}` "
                                 f"on that node says why ({restore})."),
             }},
        ]}]},
    }


def storage_class_manifest() -> dict[str, Any]:
    """The default StorageClass: encrypted Linode volumes, deleted with their claim. A claim outlives its
    pods (a notebook's work survives server restarts and culling); Retain would leave a billed volume behind
    every deleted claim and every `pulumi destroy` (docs/destroy.md: delete the claims first)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": DEFAULT_STORAGE_CLASS,
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": CSI_PROVISIONER,
        "parameters": {"linodebs.csi.linode.com/encrypted": "true"},
        "reclaimPolicy": "Delete",
        "allowVolumeExpansion": True,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def _release(name: str, chart: Chart, namespace: str, values: dict[str, Any],
             opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    """Add-ons roll back as a whole if an install fails: a half-installed CNI or CCM breaks every node. A namespace
    of their own is Helm's (--create-namespace), which `helm uninstall` leaves (helm/helm#1464): `pulumi destroy`
    leaves it empty, and the cluster's instances go in the same destroy. Not a Namespace resource of the program:
    on the clusters that have it, creating it fails (AlreadyExists) from pulumi-kubernetes 4.29."""
    return helm_release(name, chart, namespace, values, opts, atomic=True,
                        create_namespace=namespace not in ("kube-system", "default"))


class LinodeAddons(pulumi.ComponentResource):
    """Outputs: `ready` (what the platform layer waits for)."""

    def __init__(self, name: str, args: AddonsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:linode:Addons", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        cni_chart = versions.cni_chart(args.cni, args.kubernetes_minor, also=args.running_minor)
        # Config validation refuses a CNI without a pin tested on the minor (linode.cni).
        assert cni_chart is not None, (args.cni, args.kubernetes_minor)
        cni = _release(f"{name}-cni", cni_chart, "kube-system" if args.cni == "cilium" else "tigera-operator",
                       cni_values(args.cni, args.pod_cidr), child)

        ready_extra: list[pulumi.Resource] = []
        if args.cni == "cilium":
            policy = metadata_deny_policy()
            # After the release: the Cilium operator registers the CRD, and the atomic install waits for it.
            ready_extra.append(k8s.apiextensions.CustomResource(
                f"{name}-deny-instance-metadata", api_version=policy["apiVersion"], kind=policy["kind"],
                metadata=policy["metadata"], spec=policy["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[cni])))
        # Not secret: a digest prefix of the token (token_secret_name).
        secret_name = pulumi.Output.unsecret(pulumi.Output.from_input(args.api_token).apply(token_secret_name))
        token = k8s.core.v1.Secret(
            f"{name}-linode-api",
            metadata={"name": secret_name, "namespace": "kube-system"},
            type="Opaque",
            string_data={"apiToken": pulumi.Output.secret(args.api_token), "region": args.region},
            # A read-only run (drift.yml) holds no linode-cluster:token: the Secret, its name and the releases'
            # reference to it stay as the state has them (components/read_only.py; a Secret's whole content).
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=keep_from_state("metadata.name", *SECRET_CONTENT)),
        )
        kept_name = keep_from_state("values.secretRef.name")
        after_token = pulumi.ResourceOptions(parent=self, depends_on=[cni, token], ignore_changes=kept_name)
        ccm = _release(f"{name}-ccm", versions.LINODE_CCM_CHART, "kube-system", ccm_values(args.vpc_label, args.subnet_label, secret_name), after_token)
        csi = _release(f"{name}-csi", versions.LINODE_CSI_CHART, "kube-system", csi_values(secret_name),
                       pulumi.ResourceOptions(parent=self, depends_on=[ccm], ignore_changes=kept_name))
        storage = k8s.storage.v1.StorageClass(
            f"{name}-default-storage",
            **_storage_class_args(storage_class_manifest()),
            # reclaimPolicy is immutable: a change replaces the class, and its fixed name must be free first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[csi], delete_before_replace=True),
        )
        device_plugin = _release(f"{name}-nvidia-device-plugin", versions.NVIDIA_DEVICE_PLUGIN_CHART,
                                 "nvidia-device-plugin", device_plugin_values(),
                                 pulumi.ResourceOptions(parent=self, depends_on=[cni]))
        self.cni_chart = cni_chart
        self.ready = [cni, ccm, csi, storage, device_plugin, *ready_extra]
        self.register_outputs({})


def _storage_class_args(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": manifest["metadata"],
        "provisioner": manifest["provisioner"],
        "parameters": manifest["parameters"],
        "reclaim_policy": manifest["reclaimPolicy"],
        "allow_volume_expansion": manifest["allowVolumeExpansion"],
        "volume_binding_mode": manifest["volumeBindingMode"],
    }
