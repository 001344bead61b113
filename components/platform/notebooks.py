"""Notebooks that keep their work: JupyterHub with a persistent volume per user, a CPU profile and a
GPU profile per GPU pool (tolerating its taint, asking for one GPU), and idle culling so a forgotten
GPU notebook stops costing money.

Secure defaults: the hub is reachable only inside the cluster (ClusterIP; `kubectl port-forward` or
an Ingress you add), sign-up needs an admin's approval (NativeAuthenticator), network policies on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi

from components.cluster import ClusterHandle, GpuPoolSpec
from components.platform import versions
from components.platform.common import JUPYTERHUB_NAMESPACE, apply_object, helm_release, k8s_opts, render_namespace

GPU_RESOURCE = "nvidia.com/gpu"


def cpu_profile() -> dict[str, Any]:
    image, tag = versions.NOTEBOOK_CPU_IMAGE
    return {
        "display_name": "CPU notebook (up to 2 vCPU, 8 GiB)",
        "slug": "cpu",
        "description": "Data exploration and small experiments; no GPU is billed.",
        "default": True,
        "kubespawner_override": {
            "image": f"{image}:{tag}",
            "cpu_guarantee": 0.5, "cpu_limit": 2,
            "mem_guarantee": "2G", "mem_limit": "8G",
        },
    }


def gpu_profile(pool: GpuPoolSpec) -> dict[str, Any]:
    """One GPU of `pool`: the pod lands on the pool's nodes and tolerates their taints."""
    image, tag = versions.NOTEBOOK_GPU_IMAGE
    return {
        "display_name": f"GPU notebook: 1x {pool.gpu_model} ({pool.name} pool)",
        "slug": f"gpu-{pool.name}",
        "description": "Billed per hour while running; stopped automatically when idle.",
        "kubespawner_override": {
            "image": f"{image}:{tag}",
            "cpu_guarantee": 1, "cpu_limit": 4,
            "mem_guarantee": "8G", "mem_limit": "24G",
            "extra_resource_guarantees": {GPU_RESOURCE: "1"},
            "extra_resource_limits": {GPU_RESOURCE: "1"},
            "node_selector": dict(pool.node_selector),
            "tolerations": pool.tolerations(),
        },
    }


def jupyterhub_values(pools: Sequence[GpuPoolSpec], storage_class: str, storage_gib: int = 20,
                      idle_cull_minutes: int = 60, admin_users: Sequence[str] = ("admin",)) -> dict[str, Any]:
    if idle_cull_minutes < 1:
        raise ValueError("idle_cull_minutes must be at least 1")
    return {
        "hub": {
            "config": {
                "JupyterHub": {"authenticator_class": "nativeauthenticator.NativeAuthenticator", "admin_access": False},
                "Authenticator": {"admin_users": list(admin_users)},
                "NativeAuthenticator": {"open_signup": False, "minimum_password_length": 12,
                                        "check_common_password": True},
            },
            "networkPolicy": {"enabled": True},
        },
        "proxy": {"service": {"type": "ClusterIP"}, "chp": {"networkPolicy": {"enabled": True}}},
        "singleuser": {
            "storage": {
                "type": "dynamic",
                "capacity": f"{storage_gib}Gi",
                "dynamic": {"storageClass": storage_class, "storageAccessModes": ["ReadWriteOnce"]},
            },
            "profileList": [cpu_profile()] + [gpu_profile(p) for p in pools],
            "networkPolicy": {"enabled": True},
            "allowPrivilegeEscalation": False,
            "startTimeout": 600,  # GPU images are large
        },
        "cull": {
            "enabled": True,
            "timeout": idle_cull_minutes * 60,
            "every": min(300, idle_cull_minutes * 30),
            "users": False,
            "adminUsers": True,
            "removeNamedServers": False,
        },
        # No userPlaceholder pods, no image pulling on every node: nothing reserves capacity unasked.
        "scheduling": {"userScheduler": {"enabled": False}, "userPlaceholder": {"enabled": False},
                       "podPriority": {"enabled": False}},
        "prePuller": {"hook": {"enabled": False}, "continuous": {"enabled": False}},
    }


@dataclass
class NotebooksArgs:
    cluster: ClusterHandle
    storage_gib: int = 20
    idle_cull_minutes: int = 60
    admin_users: Sequence[str] = ("admin",)


class Notebooks(pulumi.ComponentResource):
    def __init__(self, name: str, args: NotebooksArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:Notebooks", name, None, opts)
        cluster = args.cluster
        ns = apply_object(f"{name}-namespace", render_namespace(JUPYTERHUB_NAMESPACE, "baseline"),
                          k8s_opts(cluster, self))
        values = jupyterhub_values(cluster.gpu_pools, cluster.default_storage_class, args.storage_gib,
                                   args.idle_cull_minutes, args.admin_users)
        self.jupyterhub = helm_release(f"{name}-jupyterhub", "jupyterhub", versions.JUPYTERHUB,
                                       JUPYTERHUB_NAMESPACE, values, k8s_opts(cluster, self, [ns]))
        self.register_outputs({"namespace": JUPYTERHUB_NAMESPACE,
                               "profiles": [p["slug"] for p in values["singleuser"]["profileList"]]})
