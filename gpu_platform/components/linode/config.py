"""The `linode` section of the stack config and the rules only Linode has."""

from __future__ import annotations

import datetime

import ipaddress
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

import yaml
from pydantic import Field, field_validator, model_validator

from gpu_platform.components.config_base import (SYSTEM_POOL_DEFAULTS, Cidr, ConfigIssue, Model, SystemPool, pool_issue_capacity,
                                    validate_system_pool)
from gpu_platform.components.versions_calendar import today as calendar_today

if TYPE_CHECKING:
    from gpu_platform.components.config import StackConfig
    from gpu_platform.costs.catalog import Catalog

# Object Storage bucket names are global across all Linode customers: <prefix>-ckpt-<owner>-<random>.
BUCKET_SUFFIX_LENGTH = 8
_BUCKET_LABEL = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def bucket_label(prefix: str, owner: str, suffix: str, check: bool = True) -> str:
    """The checkpoint bucket's label within Linode's rules (3-63 characters of lower-case letters,
    digits and dashes, starting and ending with a letter or digit, not an IP address); the owner part
    is shortened when needed, the random suffix never is."""
    base = f"{prefix}-ckpt-{owner}"
    label = f"{base[:63 - len(suffix) - 1].rstrip('-')}-{suffix}"
    if check and (not _BUCKET_LABEL.fullmatch(label) or "--" in label):
        raise ValueError(f"bucket label {label!r} breaks Linode's bucket naming rules")
    return label


SSH_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/=]+( .*)?$")


class LinodeControlPlane(Model):
    type: str = "g6-standard-4"
    # 1 for dev; 3 for HA behind a NodeBalancer (etcd needs an odd quorum).
    count: Literal[1, 3] = 1


# The cluster-autoscaler externalgrpc proto this project's node-group provider speaks carries the
# template node as `nodeBytes` (field 2); releases before 1.34 only read the older `nodeInfo` field
# (kubernetes/autoscaler cluster-autoscaler/cloudprovider/externalgrpc/protos/externalgrpc.proto at
# cluster-autoscaler-1.33.6 vs 1.34.5), so autoscaled Linode pools need the 1.34+ autoscaler.
AUTOSCALING_MIN_KUBERNETES = (1, 34)


class LinodeNodeGroups(Model):
    """The node-group provider that scales autoscaled Linode GPU pools (minNodes < maxNodes):
    gpu_platform/controllers/linode_node_groups, docs/linode-autoscaling.md."""

    # Its image by digest, as published by .github/workflows/linode-node-groups-image.yml on a release tag:
    # ghcr.io/<owner>/gpu-platform-linode-node-groups@sha256:<64 hex>. Unset: no provider and no
    # autoscaler are deployed, and autoscaled pools stay at minNodes (a warning says so).
    image: Optional[str] = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)+(:[\w][\w.-]{0,127})?@sha256:[0-9a-f]{64}$")
    # A new node that has not registered after this long is deleted (its boot failed); the pool
    # recovers on the autoscaler's next scale-up. The node's bootstrap token expires at the same time.
    join_deadline_minutes: int = Field(default=40, ge=15, le=180)


class LinodeSection(Model):
    region: str = Field(min_length=2)
    control_plane: LinodeControlPlane = Field(default_factory=LinodeControlPlane)
    # Untainted CPU workers for ordinary pods (Kueue, Kubeflow controllers, monitoring, JupyterHub): control
    # planes carry the control-plane taint and GPU workers the GPU taint. Fixed size: minNodes == maxNodes.
    system_pool: SystemPool = Field(default_factory=lambda: SystemPool(**SYSTEM_POOL_DEFAULTS["linode"]))
    # A Linode image ID: a public image (linode/...) or one of the account's own (private/<id>).
    image: str = Field(default="linode/ubuntu24.04", pattern=r"^(linode/[a-z0-9][a-z0-9._-]{0,62}|private/[0-9]{1,12})$")
    # Node-to-node traffic (kubelet, etcd, CNI) stays on this VPC subnet.
    subnet_cidr: Cidr = "10.0.0.0/24"
    pod_cidr: Cidr = "10.244.0.0/16"
    service_cidr: Cidr = "10.96.0.0/12"
    cni: Literal["cilium", "calico"] = "cilium"
    # SSH stays closed unless keys are given; then it opens to adminCidrs only.
    ssh_authorized_keys: list[str] = Field(default_factory=list)
    disk_encryption: bool = True
    checkpoint_bucket_versioning: bool = True
    # A single control plane's public API address: a Linode Reserved IP (kept when cp-0 is replaced;
    # not every account can reserve IPs) or, false, cp-0's own address.
    reserved_api_ip: bool = False
    # `protect` on control-plane instances: `pulumi destroy` and replacements stop until unprotected.
    protect_control_planes: bool = True
    # The minor the running control plane has. kubernetesVersion may equal it or be the next minor: then
    # `pulumi up` upgrades the cluster (node-upgrade Jobs, upgrade.py); set this to the new minor after.
    control_plane_version: Optional[str] = Field(default=None, pattern=r"^1\.\d{1,2}$")
    # When the CCM/CSI token (linode-cluster:token) expires: the date Cloud Manager shows for it (API tokens
    # last up to a year; the program cannot read it offline). Renders an alert 30 and 7 days before, and
    # preflight warns within 30 days. Unset: a warning, no alert.
    api_token_expires: Optional[datetime.date] = None
    # Autoscaled GPU pools: an idle GPU node is removed after this long (the same knob as
    # aws.scaleDownGraceMinutes; cluster-autoscaler's scale-down-unneeded-time).
    scale_down_grace_minutes: int = Field(default=15, ge=1, le=24 * 60)
    node_groups: LinodeNodeGroups = Field(default_factory=LinodeNodeGroups)

    @field_validator("ssh_authorized_keys")
    @classmethod
    def _ssh_keys(cls, keys: list[str]) -> list[str]:
        from gpu_platform.components.approvals import ssh_key_problem

        for k in keys:
            if not SSH_KEY.fullmatch(k.strip()) or ssh_key_problem(k):
                raise ValueError("OpenSSH public keys (ssh-ed25519 AAAA..., ssh-rsa AAAA...) that parse as keys, one "
                                 f"per entry without control characters: {ssh_key_problem(k) or 'an unknown key type'}")
        return keys

    @model_validator(mode="wrap")
    @classmethod
    def _system_pool_shape(cls, data: Any, handler: Any) -> "LinodeSection":
        return validate_system_pool("linode", data, handler)


# The VPC addressing plan (render.vpc_addresses) has room for this many system workers.
MAX_SYSTEM_NODES = 20


REGIONS_FILE = Path(__file__).resolve().parent / "regions.yaml"


@lru_cache(maxsize=1)
def region_capabilities() -> dict[str, frozenset[str]]:
    """Region id -> capabilities, from the dated region table (regions.yaml, see its header)."""
    doc = yaml.load(REGIONS_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not doc.get("source") or not doc.get("retrieved"):
        raise ValueError(f"{REGIONS_FILE}: the region table must name its source and retrieval date")
    return {r["id"]: frozenset(r["capabilities"]) for r in doc["regions"]}


def required_capabilities(section: "LinodeSection") -> dict[str, str]:
    """Capability -> why this stack needs it."""
    need = {
        "Metadata": "cloud-init user data bootstraps every node",
        "VPCs": "nodes talk over a VPC subnet (linode.subnetCidr)",
        "Block Storage Encryption": "the default StorageClass asks the CSI driver for encrypted volumes",
        "Object Storage": "the checkpoint bucket",
        "Cloud Firewall": "the node firewall",
    }
    if section.disk_encryption:
        need["Disk Encryption"] = "linode.diskEncryption is true"
    if section.control_plane.count > 1:
        need["NodeBalancers"] = "linode.controlPlane.count 3 puts the API behind a NodeBalancer"
    return need


def region_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    table = region_capabilities()
    caps = table.get(section.region)
    if caps is None:
        return [ConfigIssue("linode.region", section.region, f"a Linode core region: {', '.join(sorted(table))}")]
    issues = []
    need = required_capabilities(section)
    if cfg.gpu_pools:
        need["GPU Linodes"] = "gpuPools"
    for cap, why in need.items():
        if cap not in caps:
            ok = sorted(r for r, c in table.items() if set(need) <= c)
            issues.append(ConfigIssue("linode.region", section.region,
                                      f"a region with {cap} ({why}); regions with everything this stack needs: "
                                      f"{', '.join(ok) or 'none'}"))
    return issues


# The node address plan of gpu_platform/components/linode/render.vpc_addresses: GPU pools get blocks of this many
# fixed VPC addresses from host .100 on, in the order of gpuPools.
GPU_POOL_BLOCK = 50
GPU_POOLS_FIRST_HOST = 100


def address_plan_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """What the fixed VPC address plan can hold, checked before any resource exists (otherwise the
    program would fail half-way with a bare ValueError from the address plan)."""
    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    issues = [ConfigIssue(f"gpuPools[{i}].maxNodes", pool.max_nodes,
                          f"at most {GPU_POOL_BLOCK} nodes per Linode GPU pool (each pool has a block of "
                          f"{GPU_POOL_BLOCK} fixed VPC addresses)")
              for i, pool in enumerate(cfg.gpu_pools) if pool.max_nodes > GPU_POOL_BLOCK]
    hosts = ipaddress.ip_network(section.subnet_cidr).num_addresses - 2
    needed = GPU_POOLS_FIRST_HOST + GPU_POOL_BLOCK * len(cfg.gpu_pools)
    if hosts < needed:
        issues.append(ConfigIssue("linode.subnetCidr", section.subnet_cidr,
                                  f"a subnet with at least {needed} host addresses for {len(cfg.gpu_pools)} GPU pools "
                                  f"(control planes and system nodes below .{GPU_POOLS_FIRST_HOST}, then "
                                  f"{GPU_POOL_BLOCK} per pool), e.g. a /23"))
    return issues


def _usable_regions(cfg: "StackConfig") -> set[str]:
    """Regions with every capability the stack needs (VPCs, firewalls, GPUs, ...)."""
    need = set(required_capabilities(cfg.linode)) | ({"GPU Linodes"} if cfg.gpu_pools else set())
    return {r for r, caps in region_capabilities().items() if need <= caps}


def _missing_everywhere(section: "LinodeSection", regions: tuple[str, ...]) -> str:
    table = region_capabilities()
    gaps = [set(required_capabilities(section)) - table.get(r, set()) for r in regions]
    common = sorted(set.intersection(*gaps)) if gaps else []
    return f"{' and '.join(common)} are missing" if common else "some region lacks a capability this cluster needs"


def _gpu_alternatives(catalog: "Catalog", usable: set[str]) -> str:
    plans = [(t.name, sorted(set(t.regions) & usable)) for t in catalog.instances("linode")
             if t.is_gpu and t.regions is not None and set(t.regions) & usable]
    return "; ".join(f"{name} (in {', '.join(regions)})" for name, regions in sorted(plans)) or "none in the catalog"


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    issues = pool_issue_capacity(cfg, ("on-demand",), "Linode has no spot or preemptible capacity")
    issues += region_issues(cfg)
    issues += address_plan_issues(cfg)
    if section.ssh_authorized_keys and not cfg.admin_cidrs:
        issues.append(ConfigIssue("linode.sshAuthorizedKeys", f"{len(section.ssh_authorized_keys)} key(s)",
                                  "empty unless gpu-platform:adminCidrs names who may reach SSH (the firewall "
                                  "opens port 22 to adminCidrs only)"))
    from gpu_platform.components.linode import versions

    expires = section.api_token_expires
    if expires is not None and expires <= calendar_today():
        issues.append(ConfigIssue("linode.apiTokenExpires", expires.isoformat(),
                                  f"a date after today ({calendar_today().isoformat()}): the CCM/CSI token has expired, so "
                                  "LoadBalancers, volumes and node lifecycle stop working. Create a new token, set "
                                  "linode-cluster:token and this date, then `pulumi up` (the CCM and CSI restart with it)"))
    from gpu_platform.components.linode.upgrade import UpgradeError, check_upgrade

    running = section.control_plane_version
    try:
        if running is not None:
            check_upgrade(running, cfg.kubernetes_version)
    except UpgradeError as exc:
        issues.append(ConfigIssue("kubernetesVersion", cfg.kubernetes_version,
                                  f"{running} (linode.controlPlaneVersion, the minor the control plane runs) or the next "
                                  f"minor: {exc}. `pulumi up` upgrades the running cluster by one minor (node-upgrade Jobs, "
                                  "docs/linode.md); set linode.controlPlaneVersion to the new minor once it has run"))
        running = None
    also = running if running is not None and running != cfg.kubernetes_version else None
    if versions.cni_chart(section.cni, cfg.kubernetes_version, also=also) is None:
        from gpu_platform.components.versions_calendar import load_calendar

        calendar = load_calendar()
        tested = [f"{section.cni} {versions.cni_minor(c)} ({', '.join(calendar.cni_kubernetes(section.cni, versions.cni_minor(c))) or 'no published table'})"
                  for c in versions.CNI_CHARTS[section.cni]]
        supported = [n for n in versions.CNI_CHARTS
                     if versions.cni_chart(n, cfg.kubernetes_version, also=also) is not None]
        minors = f"{also} and {cfg.kubernetes_version} (the CNI moves first, so it runs on both during the upgrade)" \
            if also else cfg.kubernetes_version
        issues.append(ConfigIssue(
            "linode.cni", section.cni,
            f"a CNI whose pinned chart is tested on Kubernetes {minors} by its own compatibility table "
            f"(gpu_platform/costs/catalog/kubernetes-versions.yaml, cni:): pinned {'; '.join(tested)}"
            + (f"; use {' or '.join(supported)}" if supported else "; or a kubernetesVersion one of them is tested on")))
    if cfg.kubernetes_version not in versions.KUBERNETES_PATCH:
        issues.append(ConfigIssue("kubernetesVersion", cfg.kubernetes_version,
                                  f"a minor with a pinned Linode (kubeadm) release: {', '.join(versions.KUBERNETES_PATCH)}"))
    autoscaled_ok = tuple(int(x) for x in cfg.kubernetes_version.split(".")) >= AUTOSCALING_MIN_KUBERNETES
    for i, pool in enumerate(cfg.gpu_pools):
        if pool.min_nodes != pool.max_nodes and section.control_plane.count > 1:
            # cluster.py balancer_rules: the NodeBalancer's firewall lists the program's nodes' addresses.
            issues.append(ConfigIssue(
                f"gpuPools[{i}].minNodes", pool.min_nodes,
                f"equal to maxNodes ({pool.max_nodes}) with linode.controlPlane.count 3: the API NodeBalancer's "
                "firewall admits the program's own nodes only, so nodes the node-group provider creates could not "
                "reach the API (autoscaled Linode pools need a single control plane for now)"))
        elif pool.min_nodes != pool.max_nodes and not autoscaled_ok:
            minimum = ".".join(map(str, AUTOSCALING_MIN_KUBERNETES))
            issues.append(ConfigIssue(
                f"gpuPools[{i}].minNodes", pool.min_nodes,
                f"equal to maxNodes ({pool.max_nodes}) on kubernetesVersion {cfg.kubernetes_version}: autoscaled "
                f"Linode GPU pools need cluster-autoscaler {minimum} or newer (kubernetesVersion >= {minimum})"))
        itype = catalog.instance("linode", pool.instance_type)
        usable = _usable_regions(cfg)
        if itype is not None and itype.regions is not None and not set(itype.regions) & usable:
            # RTX 6000 (g1-gpu-rtx6000-*): only in regions without VPCs. The cluster's nodes talk over a
            # VPC (fixed addresses, the firewall's VPC rules, the CCM's --vpc-names); a VLAN variant would
            # be a second, untested network design for a GPU generation Linode no longer expands. Say
            # what works instead.
            issues.append(ConfigIssue(
                f"gpuPools[{i}].instanceType", pool.instance_type,
                f"a GPU plan offered in a region with everything this cluster needs (VPCs among it): "
                f"{_gpu_alternatives(catalog, usable)}; {pool.instance_type} is only offered in "
                f"{', '.join(itype.regions)}, where {_missing_everywhere(section, itype.regions)}"))
        elif itype is not None and itype.regions is not None and section.region not in itype.regions:
            issues.append(ConfigIssue(
                "linode.region", section.region,
                f"a region offering {pool.instance_type} (gpuPools[{i}]): {', '.join(itype.regions)}"))
    cp = catalog.instance("linode", section.control_plane.type)
    if cp is None or cp.is_gpu:
        plans = sorted(t.name for t in catalog.instances("linode") if not t.is_gpu and t.name.startswith("g6-"))
        issues.append(ConfigIssue("linode.controlPlane.type", section.control_plane.type,
                                  f"a non-GPU Linode plan in the catalog: {', '.join(plans)}"))
    elif cp.vcpus < 2 or cp.memory_gib < 4:
        issues.append(ConfigIssue("linode.controlPlane.type", section.control_plane.type,
                                  "a plan with at least 2 vCPUs and 4 GiB (kubeadm's minimum for a control plane)"))
    system = section.system_pool
    if system.min_nodes != system.max_nodes:
        issues.append(ConfigIssue(
            "linode.systemPool.minNodes", system.min_nodes,
            f"equal to linode.systemPool.maxNodes ({system.max_nodes}): the system pool of a kubeadm cluster is a "
            "fixed set of Linodes and does not autoscale"))
    if system.max_nodes > MAX_SYSTEM_NODES:
        issues.append(ConfigIssue("linode.systemPool.maxNodes", system.max_nodes,
                                  f"at most {MAX_SYSTEM_NODES} (the VPC subnet's address plan reserves that many system workers)"))
    sys_plan = catalog.instance("linode", system.instance_type)
    if sys_plan is None or sys_plan.is_gpu:
        plans = sorted(t.name for t in catalog.instances("linode") if not t.is_gpu and t.name.startswith("g6-"))
        issues.append(ConfigIssue("linode.systemPool.instanceType", system.instance_type,
                                  f"a non-GPU Linode plan in the catalog: {', '.join(plans)}"))
    elif sys_plan.vcpus < 2 or sys_plan.memory_gib < 4:
        issues.append(ConfigIssue("linode.systemPool.instanceType", system.instance_type,
                                  "a plan with at least 2 vCPUs and 4 GiB (the platform's controllers run there)"))
    nets = {k: ipaddress.ip_network(getattr(section, a)) for k, a in
            (("linode.subnetCidr", "subnet_cidr"), ("linode.podCidr", "pod_cidr"), ("linode.serviceCidr", "service_cidr"))}
    keys = list(nets)
    for a in range(len(keys)):
        for b in range(a + 1, len(keys)):
            if nets[keys[a]].overlaps(nets[keys[b]]):
                issues.append(ConfigIssue(keys[b], str(nets[keys[b]]), f"a range that does not overlap {keys[a]} ({nets[keys[a]]})"))
    if nets["linode.subnetCidr"].version != 4 or not nets["linode.subnetCidr"].is_private:
        issues.append(ConfigIssue("linode.subnetCidr", section.subnet_cidr, "a private IPv4 range (RFC 1918), as Linode VPCs require"))
    return issues


# Preflight and `pulumi up` warn this many days before the CCM/CSI token expires (the alert fires then too).
TOKEN_EXPIRY_WARN_DAYS = 30


def token_expiry_warnings(cfg: "StackConfig") -> list[str]:
    section = cfg.linode
    if section is None:
        return []
    if section.api_token_expires is None:
        return ["linode.apiTokenExpires is not set: nothing warns before the CCM/CSI token (linode-cluster:token) "
                "expires (Linode API tokens last up to a year). Set it to the expiry date Cloud Manager shows."]
    left = (section.api_token_expires - calendar_today()).days
    if 0 < left <= TOKEN_EXPIRY_WARN_DAYS:
        return [f"the CCM/CSI token (linode-cluster:token) expires in {left} day(s), on "
                f"{section.api_token_expires.isoformat()} (linode.apiTokenExpires): create a new one, set it and the "
                "date, and run `pulumi up` (the CCM and CSI restart with it)"]
    return []
