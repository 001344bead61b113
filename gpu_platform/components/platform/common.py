"""Helpers shared by the platform parts: namespaces, Helm releases, applying rendered objects.

Rendering stays pure (dicts in, dicts out); `apply_object` turns one rendered manifest into the
matching typed pulumi_kubernetes resource, so what the tests validate is exactly what is deployed.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from gpu_platform.components.cluster import ClusterHandle
from gpu_platform.data.chart import Chart
from gpu_platform.components.helm import helm_release as shared_helm_release

MANAGED_BY = {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "gpu-platform"}

# Namespaces of the platform parts (the Kubeflow one is fixed by the upstream kustomizations).
GPU_NAMESPACE = "gpu-system"
KUEUE_NAMESPACE = "kueue-system"
TRAINER_NAMESPACE = "kubeflow-system"
KUBEFLOW_NAMESPACE = "kubeflow"
JUPYTERHUB_NAMESPACE = "jupyterhub"
# The labels KubeSpawner gives every notebook server (z2jh 4.4.0 files/hub/jupyterhub_config.py common_labels
# app=jupyterhub, KubeSpawner's component_label singleuser-server; templates/singleuser/netpol.yaml selects them).
NOTEBOOK_POD_LABELS = {"app": "jupyterhub", "component": "singleuser-server"}
MONITORING_NAMESPACE = "monitoring"

# Katib's pod webhook injects its metrics collector into trials only in namespaces with this label
# (katib-standalone v0.19.0, MutatingWebhookConfiguration katib.kubeflow.org namespaceSelector).
KATIB_METRICS_COLLECTOR_LABEL = "katib.kubeflow.org/metrics-collector-injection"
# The cloud metadata address on Linode, EKS and GKE.
CLOUD_METADATA_CIDR = "169.254.169.254/32"

# The platform's own controllers on the system nodes (Kueue, the Prometheus operator, Prometheus,
# Alertmanager, Grafana, kube-state-metrics; and what users' jobs and notebooks depend on: Katib, the
# Trainer and JobSet controllers, Pipelines' servers, JupyterHub's hub and proxy, see kubeflow.py and
# notebooks.py) run at this priority, set through each pinned chart's documented value where it has one: when user pods (CPU notebooks, unqueued pipeline steps, CPU jobs) fill the system
# nodes, the scheduler preempts user pods (priority 0) to place a controller, instead of leaving the
# queue's webhooks or the alerts down. Below system-cluster-critical (2e9), which the cloud's own
# agents keep; not globalDefault, so user pods stay at 0.
PLATFORM_PRIORITY_CLASS = "gpu-platform-controllers"
PLATFORM_PRIORITY = 1_000_000


def render_namespace(name: str, pod_security: str, labels: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """A Namespace with Pod Security Admission enforced at `pod_security` (restricted | baseline |
    privileged: only where node agents need host access)."""
    if pod_security not in ("restricted", "baseline", "privileged"):
        raise ValueError(f"pod_security must be restricted, baseline or privileged, not {pod_security!r}")
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {
                **MANAGED_BY,
                **(labels or {}),
                "pod-security.kubernetes.io/enforce": pod_security,
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/warn": "restricted",
                "pod-security.kubernetes.io/warn-version": "latest",
            },
        },
    }


def render_metadata_block_policy(namespace: str, name: str) -> dict[str, Any]:
    """A NetworkPolicy for every pod of `namespace`: egress to any pod in the cluster (DNS, services,
    peers of a distributed job) and to any address but the cloud metadata server. Kubernetes
    NetworkPolicies only allow; selecting the pods for Egress denies what no rule allows."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {"to": [{"namespaceSelector": {}}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [CLOUD_METADATA_CIDR]}}]},
            ],
        },
    }


def boot_minutes(cluster: ClusterHandle) -> float:
    """Minutes from a scale-up to a schedulable GPU node on this cluster: what the stack states (cloud kubernetes),
    else the cloud's figure (gpu_platform/costs/node_boot.py)."""
    from gpu_platform.costs.node_boot import node_boot_minutes

    return cluster.node_boot_minutes if cluster.node_boot_minutes is not None else node_boot_minutes(cluster.cloud)


def k8s_opts(cluster: ClusterHandle, parent: pulumi.Resource,
             depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
    """Options of every Kubernetes child: the cluster's provider, after the cluster is ready."""
    return pulumi.ResourceOptions(provider=cluster.provider, parent=parent,
                                  depends_on=list(cluster.ready) + list(depends_on))


def apply_object(name: str, obj: Mapping[str, Any], opts: pulumi.ResourceOptions,
                 **extra: Any) -> pulumi.CustomResource:
    """Register one rendered manifest as the typed resource for its kind (CRs as CustomResource).
    `extra` sets fields that are Outputs (secret data, bucket URLs) on top of the rendered ones."""
    kind, meta = obj["kind"], obj["metadata"]
    if kind == "Namespace":
        return k8s.core.v1.Namespace(name, metadata=meta, opts=opts)
    if kind == "ServiceAccount":
        return k8s.core.v1.ServiceAccount(name, metadata=meta, opts=opts,
                                          automount_service_account_token=obj.get("automountServiceAccountToken"),
                                          image_pull_secrets=obj.get("imagePullSecrets"))
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=meta, data=extra.get("data", obj.get("data")), opts=opts)
    if kind == "Secret":
        return k8s.core.v1.Secret(name, metadata=meta, type=obj.get("type"),
                                  string_data=extra.get("string_data", obj.get("stringData")), opts=opts)
    if kind == "ResourceQuota":
        return k8s.core.v1.ResourceQuota(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "LimitRange":
        return k8s.core.v1.LimitRange(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "NetworkPolicy":
        return k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "Role":
        return k8s.rbac.v1.Role(name, metadata=meta, rules=obj["rules"], opts=opts)
    if kind == "ClusterRole":
        return k8s.rbac.v1.ClusterRole(name, metadata=meta, rules=obj["rules"], opts=opts)
    if kind == "RoleBinding":
        return k8s.rbac.v1.RoleBinding(name, metadata=meta, role_ref=obj["roleRef"], subjects=obj["subjects"], opts=opts)
    if kind == "ClusterRoleBinding":
        return k8s.rbac.v1.ClusterRoleBinding(name, metadata=meta, role_ref=obj["roleRef"], subjects=obj["subjects"],
                                              opts=opts)
    if kind == "PriorityClass":
        return k8s.scheduling.v1.PriorityClass(name, metadata=meta, value=obj["value"],
                                               global_default=obj.get("globalDefault"),
                                               preemption_policy=obj.get("preemptionPolicy"),
                                               description=obj.get("description"), opts=opts)
    if kind == "ValidatingAdmissionPolicy":
        return k8s.admissionregistration.v1.ValidatingAdmissionPolicy(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "ValidatingAdmissionPolicyBinding":
        return k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(name, metadata=meta, spec=obj["spec"],
                                                                             opts=opts)
    if set(obj) - {"apiVersion", "kind", "metadata", "spec"}:
        raise ValueError(f"{kind} {meta.get('name')}: only apiVersion/kind/metadata/spec are supported for custom resources")
    return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=kind,
                                            metadata=meta, spec=obj.get("spec"), opts=opts)


def render_priority_class() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PLATFORM_PRIORITY_CLASS, "labels": dict(MANAGED_BY)},
        "value": PLATFORM_PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "gpu-platform's own controllers on the system nodes: they preempt user pods, never the reverse",
    }


def helm_release(name: str, release_name: str, chart: Chart, namespace: str, values: Any,
                 opts: pulumi.ResourceOptions, timeout_s: int = 900) -> k8s.helm.v3.Release:
    """A platform release: named after the part, namespace created by the platform itself."""
    return shared_helm_release(name, chart, namespace, values, opts, release_name=release_name, timeout_s=timeout_s)


def pool_node_affinity(pools) -> dict[str, Any]:
    """Required node affinity matching any of the GPU pools' node selectors (terms are ORed)."""
    terms = [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]}
                                   for k, v in sorted(p.node_selector.items())]}
             for p in pools]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def unique_tolerations(pools) -> list[dict[str, str]]:
    """The tolerations of every pool's taints, each once."""
    seen: list[dict[str, str]] = []
    for p in pools:
        for t in p.tolerations():
            if t not in seen:
                seen.append(t)
    return seen
