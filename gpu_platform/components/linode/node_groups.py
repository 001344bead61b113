"""Autoscaled Linode GPU pools: the node-group provider service and cluster-autoscaler (externalgrpc).

A pool with minNodes < maxNodes is not a set of Pulumi instances: the program owns its definition
(rendered here into the provider's pools.json), the provider (gpu_platform/controllers/linode_node_groups,
its own image, deployed by digest: linode.nodeGroups.image, or built from this repository at `pulumi up` and
pushed to linode.imageRegistry, components/images.py) owns its instances, creating and
deleting them when cluster-autoscaler asks. The two talk gRPC over mutual TLS (certificates from
pulumi-tls). `pulumi destroy` deletes the provider's instances through a delete hook that runs before
the VPC subnet and firewall they sit on are deleted. docs/linode-autoscaling.md has the whole story.

Pure rendering functions first (tests call them directly), the component last.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pulumi_tls as tls
import yaml

from gpu_platform.components import autoscaler_rbac
from gpu_platform.components.helm import helm_release
from gpu_platform.data import aws_versions as aws_versions
from gpu_platform.components.capacity import GI, allocatable, linode_ephemeral_storage_reservation
from gpu_platform.components.cluster import GpuPoolSpec
from gpu_platform.components.images import PULL_SECRET
from gpu_platform.config.model import StackConfig
from gpu_platform.components.paths import program_relative
from gpu_platform.components.read_only import SECRET_CONTENT, keep_from_state
from gpu_platform.policies.cost_rules import DEFAULT_MAX_GPUS
from gpu_platform.project import find_project

NAMESPACE = "kube-system"
NAME = "linode-node-groups"
PORT = 8086
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpu-platform"}
RUN_AS = 65532  # the image's USER (gpu_platform/controllers/linode_node_groups/Dockerfile)
IMAGE_NAME = "gpu-platform-linode-node-groups"
# The label carrying a node's GPU model: cluster-autoscaler's GPULabel (a node with it but no
# nvidia.com/gpu yet is a GPU node whose device plugin has not started, not an idle CPU node).
GPU_LABEL = "gpu-platform.io/accelerator"
AUTOSCALER_SECRET = "cluster-autoscaler-externalgrpc"
AUTOSCALER_RELEASE = "cluster-autoscaler"
# Named, not the chart's generated name, so the program's extra ClusterRoleBinding can bind it
# (components/autoscaler_rbac.py): the same name the EKS autoscaler's ServiceAccount has.
AUTOSCALER_SERVICE_ACCOUNT = "cluster-autoscaler"
AUTOSCALER_CONFIG_DIR = "/etc/externalgrpc"
# The externalgrpc client's per-call deadline (--cloud-config grpc_timeout): IncreaseSize creates the
# instances before it answers (several API calls per node).
GRPC_TIMEOUT_SECONDS = 60
# cluster-autoscaler's --scan-interval: neither these values nor the pinned chart set it, so the flag's
# default (cluster-autoscaler 1.35.2 config/const.go DefaultScanInterval).
AUTOSCALER_SCAN_INTERVAL_SECONDS = 10
# The provider deletes an instance that never registered this long after the join deadline, as a backstop.
# The autoscaler must act first: it starts a scale-up's clock (ExpectedAddTime = now + max-node-provision-time,
# clusterstate/clusterstate.go registerOrUpdateScaleUpNoLock) only when IncreaseSize has answered, up to
# GRPC_TIMEOUT_SECONDS after the instance was created, and it times the scale-up out (ScaleUpTimedOut, the
# group backed off) in the first loop past it; an unregistered node's clock (UnregisteredSince) starts in the
# first loop that lists the instance (the loop after the scale-up, at most a scan interval and a loop's run
# later), and it deletes it through NodeGroupDeleteNodes in the first loop past that + max-node-provision-time
# (core/static_autoscaler.go removeOldUnregisteredNodes). So the autoscaler's removal comes at most
# GRPC_TIMEOUT_SECONDS + 2 scan intervals + 2 loops' run time after the join deadline; the provider reaps at
# each loop's Refresh, or every minute on its own. 300 s leaves each loop more than 100 s to run. An instance
# the provider reaps first is one the autoscaler never times out: it sees the group at its target and logs
# the scale-up "finished successfully", with no backoff (clusterstate.go updateScaleRequests).
JOIN_BACKSTOP_SECONDS = 300
# The stack's policy config, beside its stack file (gpu_platform/preflight/analyzer.py policy_config_path).
POLICY_FILE = "policy.{stack}.yaml"


def autoscaled(pool: GpuPoolSpec) -> bool:
    return pool.min_nodes < pool.max_nodes


def gpu_type(model: str) -> str:
    """A GPU model as a label value ([A-Za-z0-9._-], at most 63 characters)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-._")[:63] or "unknown"


def policy_max_gpus(stack: str, default: int = DEFAULT_MAX_GPUS, stacks_dir: Optional[Path] = None) -> int:
    """The GPU ceiling the policy pack enforces for this stack: gpu-count-ceiling.maxGpus of
    stacks/policy.<stack>.yaml when it sets one, else the policy's default."""
    path = (stacks_dir or find_project().stacks_dir) / POLICY_FILE.format(stack=stack)
    if not path.exists():
        return default
    doc = yaml.safe_load(path.read_text()) or {}
    entry = doc.get("gpu-count-ceiling")
    if isinstance(entry, dict) and entry.get("maxGpus") is not None:
        return int(entry["maxGpus"])
    return default


def pool_settings(cfg: StackConfig, pool: GpuPoolSpec, addresses: Sequence[str], tags: Sequence[str]) -> dict:
    """One pool of pools.json: size limits, where its nodes go, and what a node looks like
    (labels and taints as the kubelet registers them; capacity and allocatable from the catalog and
    the Linode kubelet reservations, gpu_platform/components/capacity.py)."""
    from gpu_platform.costs.catalog import load_catalog

    catalog = load_catalog(cfg.catalog_overrides() or None)
    itype = catalog.instance("linode", pool.instance_type)
    assert itype is not None, "validated by gpu_platform.config.stack"
    alloc = allocatable("linode", pool.instance_type, catalog)
    price = itype.price(pool.capacity)
    return {
        "name": pool.name,
        "instanceType": pool.instance_type,
        "minNodes": pool.min_nodes,
        "maxNodes": pool.max_nodes,
        "gpusPerNode": pool.gpus_per_node,
        "gpuType": gpu_type(pool.gpu_model),
        "addresses": list(addresses),
        "labels": {**dict(pool.node_labels), GPU_LABEL: gpu_type(pool.gpu_model)},
        "taints": [t.as_k8s() for t in pool.taints],
        "capacity": {"cpu": str(itype.vcpus), "memory": str(int(itype.memory_gib * GI)), "pods": str(alloc.pods),
                     "nvidia.com/gpu": str(itype.gpus)},
        "allocatable": {"cpu": f"{alloc.cpu_millis}m", "memory": str(alloc.memory_bytes), "pods": str(alloc.pods),
                        "nvidia.com/gpu": str(alloc.gpus)},
        "hourlyPriceUsd": price.usd_per_hour if price is not None else 0.0,
        "tags": list(tags),
    }


def service_settings(cfg: StackConfig, pools: Sequence[dict], max_gpus: int, fixed_gpus: int = 0) -> dict:
    """pools.json: everything the provider needs that the program knows at plan time. `max_gpus` is the
    stack's ceiling over every pool; `fixed_gpus` what the fixed pools (the program's own instances) hold of it."""
    section = cfg.linode
    assert section is not None
    return {
        "cluster": cfg.name_prefix,
        "region": section.region,
        "image": section.image,
        "kubernetesMinor": cfg.kubernetes_version,
        "podCidr": section.pod_cidr,
        "serviceCidr": section.service_cidr,
        "maxGpus": max_gpus,
        "fixedGpus": fixed_gpus,
        "joinDeadlineSeconds": section.node_groups.join_deadline_minutes * 60,
        "joinBackstopSeconds": JOIN_BACKSTOP_SECONDS,
        # The template node's ephemeral storage: the plan's disk (the provider reads it from the Linode API)
        # less these (capacity.linode_ephemeral_storage_reservation).
        "ephemeralStorage": linode_ephemeral_storage_reservation(),
        "gpuLabel": GPU_LABEL,
        "diskEncryption": section.disk_encryption,
        "authorizedKeys": list(section.ssh_authorized_keys),
        "pools": list(pools),
    }


def service_address() -> str:
    return f"{NAME}.{NAMESPACE}.svc:{PORT}"


def autoscaler_cloud_config() -> str:
    """cluster-autoscaler's --cloud-config for externalgrpc (cloudprovider/externalgrpc/README.md):
    the service address and the client's mutual-TLS files, mounted from AUTOSCALER_SECRET."""
    return yaml.safe_dump({
        "address": service_address(),
        "key": f"{AUTOSCALER_CONFIG_DIR}/tls.key",
        "cert": f"{AUTOSCALER_CONFIG_DIR}/tls.crt",
        "cacert": f"{AUTOSCALER_CONFIG_DIR}/ca.crt",
        "grpc_timeout": f"{GRPC_TIMEOUT_SECONDS}s",
    }, sort_keys=False)


def autoscaler_values(cluster_name: str, kubernetes_version: str, grace_minutes: int, join_deadline_minutes: int) -> dict:
    """Values of the pinned cluster-autoscaler chart (the same chart and image pins as EKS,
    gpu_platform/data/aws_versions.py) for the externalgrpc provider."""
    return {
        "cloudProvider": "externalgrpc",
        # The chart renders its Deployment only with some discovery setting; externalgrpc ignores it.
        "autoDiscovery": {"clusterName": cluster_name},
        "image": {"repository": aws_versions.CLUSTER_AUTOSCALER_IMAGE,
                  "tag": aws_versions.cluster_autoscaler_image_tag(kubernetes_version)},
        "extraArgs": {
            "cloud-config": f"{AUTOSCALER_CONFIG_DIR}/cloud-config.yaml",
            "balance-similar-node-groups": True,
            "expander": "least-waste",
            # scaleDownGraceMinutes: an idle GPU node goes after this long, as on the other clouds.
            "scale-down-unneeded-time": f"{grace_minutes}m",
            "scale-down-delay-after-add": "10m",
            # A node that has not registered by the join deadline is given up on: the autoscaler times the
            # scale-up out, backs the group off and deletes the instance through the provider (which deletes
            # it itself only JOIN_BACKSTOP_SECONDS later, when the autoscaler is away).
            "max-node-provision-time": f"{join_deadline_minutes}m",
            "enforce-node-group-min-size": True,
            "skip-nodes-with-local-storage": False,
            "skip-nodes-with-system-pods": True,
        },
        "extraVolumeSecrets": {"externalgrpc": {"name": AUTOSCALER_SECRET, "mountPath": AUTOSCALER_CONFIG_DIR}},
        "rbac": {"serviceAccount": {"name": AUTOSCALER_SERVICE_ACCOUNT}},
        "nodeSelector": {"gpu-platform.io/role": "system"},
        "resources": {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "600Mi"}},
    }


def autoscaler_release_values(cluster_name: str, kubernetes_version: str, grace_minutes: int, join_deadline_minutes: int,
                              client_cert_pem: str) -> dict:
    """The cluster-autoscaler release's values as the component passes them: autoscaler_values plus the
    client certificate's digest on the pod (a renewed certificate restarts it: it loads it at start)."""
    return {**autoscaler_values(cluster_name, kubernetes_version, grace_minutes, join_deadline_minutes),
            "podAnnotations": {"gpu-platform.io/tls-sha256": hashlib.sha256(client_cert_pem.encode()).hexdigest()}}


def rbac_rules() -> tuple[list[dict], list[dict]]:
    """(Role in kube-system, ClusterRole): create bootstrap-token Secrets (no read), see Nodes and Pods."""
    role = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}]
    cluster_role = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    return role, cluster_role


def render_deployment(image: str, settings_hash: str, pull_secret: Optional[str] = None) -> dict:
    """The provider's Deployment (Pod Security "restricted"; the image by digest; `pull_secret`: the image
    pull Secret the kubelet pulls it with, when the registry needs one)."""
    from gpu_platform.config.base import IMAGE_BY_DIGEST

    if not re.fullmatch(IMAGE_BY_DIGEST, image):
        raise ValueError(f"node-group provider image {image!r}: a reference by digest, registry/repository@sha256:<64 hex>")
    hardened = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"}}
    env_from_secret = [
        {"name": "LINODE_TOKEN", "valueFrom": {"secretKeyRef": {"name": f"{NAME}-token", "key": "token"}}},
        {"name": "LINODE_FIREWALL_ID", "valueFrom": {"configMapKeyRef": {"name": f"{NAME}-deploy", "key": "firewallId"}}},
        {"name": "LINODE_SUBNET_ID", "valueFrom": {"configMapKeyRef": {"name": f"{NAME}-deploy", "key": "subnetId"}}},
        {"name": "CONTROL_PLANE_ENDPOINT",
         "valueFrom": {"configMapKeyRef": {"name": f"{NAME}-deploy", "key": "controlPlaneEndpoint"}}},
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer of the pools' instances at a time
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS), "annotations": {"gpu-platform.io/settings-sha256": settings_hash}},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": True,
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"gpu-platform.io/role": "system"},
                    "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    **({"imagePullSecrets": [{"name": pull_secret}]} if pull_secret else {}),
                    "containers": [{
                        "name": "provider",
                        "image": image,
                        "ports": [{"name": "grpc", "containerPort": PORT}],
                        "env": [
                            {"name": "SETTINGS_FILE", "value": "/etc/linode-node-groups/pools.json"},
                            {"name": "TLS_DIR", "value": "/etc/linode-node-groups/tls"},
                            {"name": "LISTEN", "value": f"0.0.0.0:{PORT}"},
                            *env_from_secret,
                        ],
                        "securityContext": hardened,
                        "resources": {"requests": {"cpu": "20m", "memory": "128Mi"},
                                      "limits": {"cpu": "500m", "memory": "384Mi"}},
                        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 10},
                        "livenessProbe": {
                            "exec": {"command": ["sh", "-c", "test $(( $(date +%s) - $(stat -c %Y /tmp/heartbeat) )) -lt 600"]},
                            "initialDelaySeconds": 120, "periodSeconds": 60,
                        },
                        "volumeMounts": [
                            {"name": "settings", "mountPath": "/etc/linode-node-groups", "readOnly": True},
                            {"name": "tls", "mountPath": "/etc/linode-node-groups/tls", "readOnly": True},
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }],
                    "volumes": [
                        {"name": "settings", "configMap": {"name": NAME}},
                        {"name": "tls", "secret": {"secretName": f"{NAME}-tls"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }


TOKEN_DIGEST_ANNOTATION = "gpu-platform.io/linode-token-sha256"


def token_digest(token: str) -> str:
    """What the pod template carries of the provider's Linode token: a SHA-256 prefix (of a random API
    token it reveals nothing), so a new token is a new template and the Deployment rolls."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def stack_tag(cluster: str) -> str:
    # The same form as gpu_platform/controllers/linode_node_groups/settings.py STACK_TAG.
    return f"node-group-stack:{cluster}"


# ---------------------------------------------------------------------------------------------
# Component
# ---------------------------------------------------------------------------------------------


@dataclass
class LinodeNodeGroupsArgs:
    config: StackConfig
    pools: Sequence[GpuPoolSpec]  # the autoscaled ones
    pool_addresses: Sequence[Sequence[str]]
    pool_tags: Sequence[Sequence[str]]
    common_tags: Sequence[str]
    # By digest (linode.nodeGroups.image, or the image built into linode.imageRegistry). None: only the pool
    # definition (no provider, no autoscaler; pools stay at minNodes).
    image: Optional[pulumi.Input[str]]
    api_token: Optional[pulumi.Input[str]]  # the provider's own token (linode-node-groups:token, Linodes read/write only)
    deploy_token: pulumi.Input[str]  # the deployer's, for the destroy hook
    firewall_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    control_plane_endpoint: pulumi.Input[str]
    k8s_provider: k8s.Provider
    # GPUs of the stack's fixed pools: they count against the ceiling too.
    fixed_gpus: int = 0
    # Deleted after the destroy hook has removed the provider's instances (they sit on these).
    network: Sequence[pulumi.Resource] = ()
    # Created or updated only after these (the control planes' upgrade Jobs): the autoscaler's image and
    # the provider's pools.json follow kubernetesVersion, and cluster-autoscaler supports only its own
    # minor, so they must not move before the control plane has.
    after: Sequence[pulumi.Resource] = ()
    # A kubernetes.io/dockerconfigjson document (a secret) the kubelet pulls the image with: the registry's
    # pull credentials where the image was built into linode.imageRegistry. None: the image needs none.
    image_pull_config: Optional[pulumi.Output[str]] = None


def _server_cert(name: str, ca_key: tls.PrivateKey, ca: tls.SelfSignedCert, common_name: str,
                 dns: list[str], use: str, opts: pulumi.ResourceOptions) -> tuple[tls.PrivateKey, tls.LocallySignedCert]:
    key = tls.PrivateKey(f"{name}-key", algorithm="ECDSA", ecdsa_curve="P256", opts=opts)
    csr = tls.CertRequest(f"{name}-csr", private_key_pem=key.private_key_pem,
                          subject={"common_name": common_name, "organization": "gpu-platform"},
                          dns_names=dns or None, opts=opts)
    cert = tls.LocallySignedCert(
        name, cert_request_pem=csr.cert_request_pem, ca_cert_pem=ca.cert_pem, ca_private_key_pem=ca_key.private_key_pem,
        validity_period_hours=365 * 24, early_renewal_hours=30 * 24,
        allowed_uses=["digital_signature", "key_encipherment", use], opts=opts)
    return key, cert


class LinodeNodeGroups(pulumi.ComponentResource):
    def __init__(self, name: str, args: LinodeNodeGroupsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:linode:NodeGroups", name, None, opts)
        cfg = args.config
        section = cfg.linode
        assert section is not None
        child = pulumi.ResourceOptions(parent=self)
        kube = pulumi.ResourceOptions(parent=self, provider=args.k8s_provider)
        max_gpus = policy_max_gpus(pulumi.get_stack())
        pools = [pool_settings(cfg, p, a, t) for p, a, t in zip(args.pools, args.pool_addresses, args.pool_tags)]
        settings = service_settings(cfg, pools, max_gpus, args.fixed_gpus)
        settings["tags"] = list(args.common_tags)
        settings_json = json.dumps(settings, indent=1, sort_keys=True)

        # --- destroy: the provider's instances go before the network they sit on --------------
        # No create step: at `pulumi destroy` (or when autoscaling is switched off) the hook deletes
        # every instance tagged with this stack and a pool tag, i.e. the provider's, never the program's.
        cleanup = command.local.Command(
            f"{name}-delete-autoscaled-instances",
            delete=f"python3 {program_relative('components/linode/delete_autoscaled.py')}",
            environment={"LINODE_TOKEN": pulumi.Output.secret(args.deploy_token), "STACK_TAG": stack_tag(cfg.name_prefix)},
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.network),
                                        ignore_changes=keep_from_state("environment.LINODE_TOKEN")))
        after_cleanup = pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=[cleanup])
        after_upgrade = pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=list(args.after))
        meta = {"namespace": NAMESPACE, "labels": dict(LABELS)}
        # The pool definition (pools.json), known at plan time: the provider reads it, and so do the
        # policy pack and preflight's cluster fit (they see the pools without any instance).
        k8s.core.v1.ConfigMap(f"{name}-settings", metadata={**meta, "name": NAME}, data={"pools.json": settings_json},
                              opts=after_upgrade)
        self.register_outputs({"maxGpus": max_gpus})
        if args.image is None:
            return
        if args.api_token is None:
            raise ValueError("the node-group provider needs a Linode API token of its own (linode-node-groups:token)")

        # --- mutual TLS between the autoscaler and the provider ---------------------------------
        ca_key = tls.PrivateKey(f"{name}-ca-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        ca = tls.SelfSignedCert(f"{name}-ca", private_key_pem=ca_key.private_key_pem, is_ca_certificate=True,
                                validity_period_hours=10 * 365 * 24, allowed_uses=["cert_signing", "digital_signature"],
                                subject={"common_name": f"{NAME}-ca", "organization": "gpu-platform"}, opts=child)
        host = service_address().rsplit(":", 1)[0]
        server_key, server_cert = _server_cert(f"{name}-server", ca_key, ca, host,
                                               [host, f"{host}.cluster.local", NAME], "server_auth", child)
        client_key, client_cert = _server_cert(f"{name}-autoscaler", ca_key, ca, "cluster-autoscaler", [], "client_auth", child)

        k8s.core.v1.Secret(f"{name}-token", metadata={**meta, "name": f"{NAME}-token"},
                           string_data={"token": pulumi.Output.secret(args.api_token)},
                           opts=pulumi.ResourceOptions.merge(kube, pulumi.ResourceOptions(
                               ignore_changes=keep_from_state(*SECRET_CONTENT))))
        k8s.core.v1.Secret(f"{name}-tls", metadata={**meta, "name": f"{NAME}-tls"}, type="Opaque",
                           string_data=pulumi.Output.secret(pulumi.Output.all(server_cert.cert_pem, server_key.private_key_pem, ca.cert_pem)
                                                            .apply(lambda v: {"tls.crt": v[0], "tls.key": v[1], "ca.crt": v[2]})),
                           opts=kube)
        autoscaler_secret = k8s.core.v1.Secret(
            f"{name}-autoscaler-config", metadata={**meta, "name": AUTOSCALER_SECRET}, type="Opaque",
            string_data=pulumi.Output.secret(pulumi.Output.all(client_cert.cert_pem, client_key.private_key_pem, ca.cert_pem)
                                             .apply(lambda v: {"tls.crt": v[0], "tls.key": v[1], "ca.crt": v[2],
                                                               "cloud-config.yaml": autoscaler_cloud_config()})),
            opts=kube)
        k8s.core.v1.ConfigMap(f"{name}-deploy", metadata={**meta, "name": f"{NAME}-deploy"},
                              data={"firewallId": pulumi.Output.from_input(args.firewall_id).apply(str),
                                    "subnetId": pulumi.Output.from_input(args.subnet_id).apply(str),
                                    "controlPlaneEndpoint": args.control_plane_endpoint}, opts=kube)

        role_rules, cluster_rules = rbac_rules()
        sa = k8s.core.v1.ServiceAccount(f"{name}-service-account", metadata={**meta, "name": NAME}, opts=kube)
        role = k8s.rbac.v1.Role(f"{name}-role", metadata={**meta, "name": NAME}, rules=role_rules, opts=kube)
        rb = k8s.rbac.v1.RoleBinding(f"{name}-role-binding", metadata={**meta, "name": NAME},
                                     role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
                                     subjects=[{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}], opts=kube)
        cr = k8s.rbac.v1.ClusterRole(f"{name}-cluster-role", metadata={"name": NAME, "labels": dict(LABELS)},
                                     rules=cluster_rules, opts=kube)
        crb = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-role-binding", metadata={"name": NAME, "labels": dict(LABELS)},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            subjects=[{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}], opts=kube)
        # Both sides load their certificates at start: a renewed certificate (pulumi-tls early renewal,
        # 30 days before expiry, on the next `pulumi up`) must restart them, or the old one expires in use.
        # The provider reads its Linode token from its environment at start too: a rotated token (the
        # Secret updated in place) restarts it through the token's digest on the pod template.
        def _rolled(spec: dict, pem: str, token: str) -> dict:
            annotations = spec["template"]["metadata"]["annotations"]
            annotations["gpu-platform.io/tls-sha256"] = hashlib.sha256(pem.encode()).hexdigest()
            annotations[TOKEN_DIGEST_ANNOTATION] = token_digest(token)
            return spec

        pulled_with: list[pulumi.Resource] = []
        if args.image_pull_config is not None:
            pulled_with.append(k8s.core.v1.Secret(
                f"{name}-pull", metadata={**meta, "name": PULL_SECRET}, type="kubernetes.io/dockerconfigjson",
                string_data={".dockerconfigjson": pulumi.Output.secret(args.image_pull_config)},
                opts=pulumi.ResourceOptions.merge(kube, pulumi.ResourceOptions(
                    ignore_changes=keep_from_state(*SECRET_CONTENT)))))
        settings_hash = hashlib.sha256(settings_json.encode()).hexdigest()
        pull_secret = PULL_SECRET if pulled_with else None
        # Not secret: a digest prefix of the token (token_digest); the image is a registry address and digest.
        spec = pulumi.Output.unsecret(pulumi.Output.all(server_cert.cert_pem, args.api_token, args.image).apply(
            lambda v: _rolled(render_deployment(v[2], settings_hash, pull_secret)["spec"], v[0], v[1])))
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata={"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, provider=args.k8s_provider,
                                        depends_on=[cleanup, sa, role, rb, cr, crb, *pulled_with, *args.after],
                                        ignore_changes=keep_from_state(
                                            f'spec.template.metadata.annotations["{TOKEN_DIGEST_ANNOTATION}"]')))
        k8s.core.v1.Service(f"{name}-service", metadata={**meta, "name": NAME},
                            spec={"selector": dict(LABELS), "ports": [{"name": "grpc", "port": PORT, "targetPort": PORT}]},
                            opts=kube)

        # What the image of this minor lists and watches beyond the pinned chart's ClusterRole (resource.k8s.io
        # from 1.35): without it the autoscaler never syncs its informers and never scales.
        extra_rbac = autoscaler_rbac.register(f"{name}-autoscaler", NAMESPACE, AUTOSCALER_SERVICE_ACCOUNT,
                                              cfg.kubernetes_version, pulumi.ResourceOptions.merge(after_cleanup, pulumi.ResourceOptions(
                                                  depends_on=[cleanup, *args.after])))
        self.autoscaler = helm_release(
            f"{name}-cluster-autoscaler", aws_versions.CLUSTER_AUTOSCALER, NAMESPACE,
            client_cert.cert_pem.apply(lambda pem: autoscaler_release_values(
                cfg.name_prefix, cfg.kubernetes_version, section.scale_down_grace_minutes,
                section.node_groups.join_deadline_minutes, pem)),
            pulumi.ResourceOptions.merge(after_cleanup, pulumi.ResourceOptions(
                depends_on=[cleanup, deployment, autoscaler_secret, *extra_rbac, *args.after])),
            release_name=AUTOSCALER_RELEASE, atomic=True)
