"""Security guardrails: no SSH or Kubernetes API open to the internet, hardened AWS launch templates,
Linode disk encryption, hardened GKE nodes, container images by digest."""

from __future__ import annotations

import re
from typing import Any, Optional

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationPolicy,
    StackValidationPolicy,
)

from gpu_platform.config.linode_network import LINODE_SHARED_PRIVATE_RANGE
from gpu_platform.data.platform_versions import KUSTOMIZE_DIRECTORY_NAMES
from gpu_platform.policies.pools import GKE_CLUSTER, GKE_NODE_POOL, stack_nodes
from gpu_platform.policies.props import (
    as_int,
    as_list,
    covers,
    get,
    is_false,
    is_true,
    linode_shared_private,
    port_ranges,
    too_open,
)

DEFAULT_SSH_PORTS = [22]
DEFAULT_KUBE_API_PORTS = [443, 6443]


# ---------------------------------------------------------------------------------------------
# Network exposure
# ---------------------------------------------------------------------------------------------


def _opened(args: Any, cidrs: list) -> str:
    """What a set of source ranges opens, in words; empty when it is narrow enough (props.too_open)."""
    cfg = args.get_config() or {}
    reasons = too_open(cidrs, {4: int(cfg.get("minPrefixV4", 16)), 6: int(cfg.get("minPrefixV6", 32))},
                       {4: int(cfg.get("maxUnionPrefixV4", 12)), 6: int(cfg.get("maxUnionPrefixV6", 28))})
    return "; ".join(reasons)


def _protected(args: Any) -> dict[int, str]:
    cfg = args.get_config() or {}
    ports = {int(p): "the Kubernetes API" for p in cfg.get("kubeApiPorts", DEFAULT_KUBE_API_PORTS)}
    ports.update({int(p): "SSH" for p in cfg.get("sshPorts", DEFAULT_SSH_PORTS)})
    return ports


def _exposed(ranges: Optional[list[tuple[int, int]]], protected: dict[int, str]) -> list[str]:
    return [f"{what} (port {port})" for port, what in sorted(protected.items()) if covers(ranges, port)]


def _aws_ranges(protocol: Any, from_port: Any, to_port: Any) -> Optional[list[tuple[int, int]]]:
    """Port ranges an AWS rule opens to TCP; [] when it opens no TCP port; None for every port."""
    proto = str(protocol if protocol is not None else "tcp").lower()
    if proto in ("-1", "all"):
        return None
    if proto not in ("tcp", "6"):
        return []
    lo, hi = as_int(from_port), as_int(to_port)
    if lo is None and hi is None:
        return None
    if lo in (0, -1) and hi in (0, -1, 65535):
        return None
    return [(lo if lo is not None else hi, hi if hi is not None else lo)]


def _check_linode_firewall(args, props, protected, report) -> None:
    if str(get(props, "inboundPolicy", "")).upper() == "ACCEPT":
        report("inboundPolicy is ACCEPT: every port (SSH and the Kubernetes API included) is open to the "
               "internet unless a rule drops it; use DROP and allow adminCidrs only.")
    for rule in as_list(get(props, "inbounds")):
        if str(get(rule, "action", "")).upper() != "ACCEPT":
            continue
        if str(get(rule, "protocol", "TCP")).upper() != "TCP":
            continue
        world = _opened(args, as_list(get(rule, "ipv4s")) + as_list(get(rule, "ipv6s")))
        exposed = _exposed(port_ranges(get(rule, "ports")), protected)
        if world and exposed:
            report(f"inbound rule '{get(rule, 'label', '?')}' opens {', '.join(exposed)} to {world}; "
                   "allow adminCidrs only.")
        shared = linode_shared_private(as_list(get(rule, "ipv4s")))
        if shared and exposed:
            report(f"inbound rule '{get(rule, 'label', '?')}' opens {', '.join(exposed)} to {', '.join(shared)}, which "
                   f"reaches into {LINODE_SHARED_PRIVATE_RANGE}: Linode's private network shared by every customer's Linodes "
                   "in the region; allow adminCidrs outside it only.")


def _check_aws_rule(args, label: str, protocol, from_port, to_port, cidrs: list, protected, report) -> None:
    world = _opened(args, cidrs)
    exposed = _exposed(_aws_ranges(protocol, from_port, to_port), protected) if world else []
    if world and exposed:
        report(f"{label} opens {', '.join(exposed)} to {world}; allow adminCidrs only.")


def _check_gcp_firewall(args, props, protected, report) -> None:
    if str(get(props, "direction", "INGRESS")).upper() != "INGRESS" or is_true(get(props, "disabled")):
        return
    world = _opened(args, as_list(get(props, "sourceRanges")))
    if not world:
        return
    for allow in as_list(get(props, "allows")):
        proto = str(get(allow, "protocol", "")).lower()
        if proto not in ("tcp", "all", "6"):
            continue
        exposed = _exposed(port_ranges(get(allow, "ports")), protected)
        if exposed:
            report(f"firewall rule opens {', '.join(exposed)} to {world}; allow adminCidrs only.")


def _validate_network(args, report_violation) -> None:
    props, t = args.props, args.resource_type
    protected = _protected(args)

    def report(msg: str) -> None:
        report_violation(msg, None)

    if t == "linode:index/firewall:Firewall":
        _check_linode_firewall(args, props, protected, report)
    elif t == "aws:ec2/securityGroup:SecurityGroup":
        for i, rule in enumerate(as_list(get(props, "ingress"))):
            _check_aws_rule(args, f"ingress[{i}]", get(rule, "protocol"), get(rule, "fromPort"), get(rule, "toPort"),
                            as_list(get(rule, "cidrBlocks")) + as_list(get(rule, "ipv6CidrBlocks")), protected, report)
    elif t == "aws:ec2/securityGroupRule:SecurityGroupRule":
        if str(get(props, "type", "")).lower() == "ingress":
            _check_aws_rule(args, "the ingress rule", get(props, "protocol"), get(props, "fromPort"), get(props, "toPort"),
                            as_list(get(props, "cidrBlocks")) + as_list(get(props, "ipv6CidrBlocks")), protected, report)
    elif t == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        _check_aws_rule(args, "the ingress rule", get(props, "ipProtocol"), get(props, "fromPort"), get(props, "toPort"),
                        [c for c in (get(props, "cidrIpv4"), get(props, "cidrIpv6")) if c], protected, report)
    elif t == "aws:eks/cluster:Cluster":
        vpc = get(props, "vpcConfig", {})
        if not is_false(get(vpc, "endpointPublicAccess")):
            cidrs = as_list(get(vpc, "publicAccessCidrs"))
            if not cidrs:
                report("the EKS API endpoint is public with no publicAccessCidrs (AWS then allows 0.0.0.0/0); "
                       "set publicAccessCidrs to adminCidrs or disable public access.")
            elif _opened(args, cidrs):
                report(f"the EKS API endpoint is open to {_opened(args, cidrs)}; "
                       "set publicAccessCidrs to adminCidrs.")
    elif t == GKE_CLUSTER:
        if is_true(get(props, "privateClusterConfig.enablePrivateEndpoint")):
            return
        man = get(props, "masterAuthorizedNetworksConfig")
        if man is None:
            report("the GKE control plane has no masterAuthorizedNetworksConfig, so any address may reach it; "
                   "authorize adminCidrs only.")
            return
        cidrs = [get(b, "cidrBlock") for b in as_list(get(man, "cidrBlocks"))]
        if _opened(args, cidrs):
            report(f"masterAuthorizedNetworksConfig authorizes {_opened(args, cidrs)}; authorize adminCidrs only.")
        if is_true(get(man, "gcpPublicCidrsAccessEnabled")):
            report("gcpPublicCidrsAccessEnabled lets any Google Cloud VM's public address reach the control plane.")
    elif t == "gcp:compute/firewall:Firewall":
        _check_gcp_firewall(args, props, protected, report)


no_public_admin_access = ResourceValidationPolicy(
    name="no-public-admin-access",
    description="Neither SSH nor the Kubernetes API is open to a large part of the internet: no public source range "
                "shorter than /16 (IPv4) or /32 (IPv6), and no set of ranges whose union is larger than one /12 "
                "(IPv4) or /28 (IPv6) (Linode firewalls, AWS security groups, EKS public access CIDRs, GKE master "
                "authorized networks, GCP firewalls).",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={
        "sshPorts": {"type": "array", "items": {"type": "integer"}, "default": DEFAULT_SSH_PORTS,
                     "description": "TCP ports treated as SSH."},
        "kubeApiPorts": {"type": "array", "items": {"type": "integer"}, "default": DEFAULT_KUBE_API_PORTS,
                         "description": "TCP ports treated as the Kubernetes API."},
        "minPrefixV4": {"type": "integer", "minimum": 8, "maximum": 32, "default": 16,
                        "description": "Shortest public IPv4 prefix a rule may open SSH or the API to."},
        "minPrefixV6": {"type": "integer", "minimum": 16, "maximum": 128, "default": 32,
                        "description": "Shortest public IPv6 prefix a rule may open SSH or the API to."},
        "maxUnionPrefixV4": {"type": "integer", "minimum": 8, "maximum": 32, "default": 12,
                             "description": "The public IPv4 ranges of one rule together cover at most one prefix "
                                            "of this length."},
        "maxUnionPrefixV6": {"type": "integer", "minimum": 16, "maximum": 128, "default": 28,
                             "description": "The same for IPv6."},
    }),
    validate=_validate_network,
)


# ---------------------------------------------------------------------------------------------
# AWS instances: IMDSv2 and encrypted volumes
# ---------------------------------------------------------------------------------------------


def _imds_problem(props) -> Optional[str]:
    meta = get(props, "metadataOptions", {})
    if str(get(meta, "httpEndpoint", "enabled")).lower() == "disabled":
        return None
    if str(get(meta, "httpTokens", "")).lower() != "required":
        return "instance metadata allows IMDSv1; set metadataOptions.httpTokens: required (IMDSv2)."
    return None


def _validate_aws_instances(args, report_violation) -> None:
    props, t = args.props, args.resource_type
    problems: list[str] = []
    if t == "aws:ec2/launchTemplate:LaunchTemplate":
        problems.append(_imds_problem(props))
        disks = [m for m in as_list(get(props, "blockDeviceMappings")) if get(m, "ebs") is not None]
        if not disks:
            problems.append("no block device mapping declares the root volume, so its encryption is left to the AMI; "
                            "declare it with ebs.encrypted: true.")
        for m in disks:
            if not is_true(get(m, "ebs.encrypted")):
                problems.append(f"EBS volume {get(m, 'deviceName', '?')} is not encrypted; set ebs.encrypted: true.")
    elif t == "aws:ec2/instance:Instance":
        problems.append(_imds_problem(props))
        if not is_true(get(props, "rootBlockDevice.encrypted")):
            problems.append("the root volume is not encrypted; set rootBlockDevice.encrypted: true.")
        for d in as_list(get(props, "ebsBlockDevices")):
            if not is_true(get(d, "encrypted")):
                problems.append(f"EBS volume {get(d, 'deviceName', '?')} is not encrypted.")
    for p in problems:
        if p:
            report_violation(p, None)


aws_imdsv2_encrypted_volumes = ResourceValidationPolicy(
    name="aws-imdsv2-encrypted-volumes",
    description="EC2 launch templates and instances require IMDSv2 (httpTokens: required) and encrypt every "
                "EBS volume they declare.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_aws_instances,
)


# ---------------------------------------------------------------------------------------------
# Linode disk encryption
# ---------------------------------------------------------------------------------------------


def _validate_linode_encryption(args, report_violation) -> None:
    if args.resource_type == "linode:index/instance:Instance":
        if str(get(args.props, "diskEncryption", "")).lower() == "disabled":
            report_violation("diskEncryption is disabled; remove linode.diskEncryption: false from the stack.", None)
    elif args.resource_type == "linode:index/volume:Volume":
        if str(get(args.props, "encryption", "")).lower() == "disabled":
            report_violation("the block storage volume has encryption disabled.", None)


linode_disk_encryption = ResourceValidationPolicy(
    name="linode-disk-encryption",
    description="Linode instances and volumes do not disable disk encryption.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_linode_encryption,
)


# ---------------------------------------------------------------------------------------------
# GKE nodes
# ---------------------------------------------------------------------------------------------


def _node_config_problems(cfg: Any) -> list[str]:
    problems = []
    if str(get(cfg, "workloadMetadataConfig.mode", "")) != "GKE_METADATA":
        problems.append("nodes do not use the GKE metadata server (workloadMetadataConfig.mode: GKE_METADATA), "
                        "so pods can read the node's credentials instead of using Workload Identity")
    if not is_true(get(cfg, "shieldedInstanceConfig.enableSecureBoot")):
        problems.append("nodes are not Shielded VMs with Secure Boot (shieldedInstanceConfig.enableSecureBoot: true)")
    if is_false(get(cfg, "shieldedInstanceConfig.enableIntegrityMonitoring")):
        problems.append("integrity monitoring is off (shieldedInstanceConfig.enableIntegrityMonitoring)")
    return problems


def _validate_gke(args, report_violation) -> None:
    nodes = stack_nodes(args.resources)
    clusters = {n.urn: n for n in nodes if n.type == GKE_CLUSTER}
    for c in clusters.values():
        if not get(c.props, "workloadIdentityConfig.workloadPool"):
            report_violation(f"GKE cluster {c.name} has no Workload Identity (workloadIdentityConfig.workloadPool).", c.urn)
        if is_false(get(c.props, "enableShieldedNodes")):
            report_violation(f"GKE cluster {c.name} turns shielded nodes off (enableShieldedNodes: false).", c.urn)
        if not is_true(get(c.props, "removeDefaultNodePool")):
            for p in _node_config_problems(get(c.props, "nodeConfig", {})):
                report_violation(f"GKE cluster {c.name}'s default node pool: {p}.", c.urn)
    for n in nodes:
        if n.type != GKE_NODE_POOL:
            continue
        problems = _node_config_problems(get(n.props, "nodeConfig", {}))
        cluster = next((d for d in n.dependencies if d.urn in clusters), None)
        if cluster is None and len(clusters) == 1:
            cluster = next(iter(clusters.values()))
        private = is_true(get(n.props, "networkConfig.enablePrivateNodes")) or (
            cluster is not None and is_true(get(cluster.props, "privateClusterConfig.enablePrivateNodes"))
            and not is_false(get(n.props, "networkConfig.enablePrivateNodes")))
        if not private:
            problems.append("nodes get public IP addresses (enable private nodes on the cluster or the pool)")
        for p in problems:
            report_violation(f"GKE node pool {n.name}: {p}.", n.urn)


gke_node_hardening = StackValidationPolicy(
    name="gke-node-hardening",
    description="GKE clusters use Workload Identity; every node pool uses the GKE metadata server, Shielded VMs "
                "(Secure Boot, integrity monitoring) and private nodes.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_gke,
)


# ---------------------------------------------------------------------------------------------
# Images by digest
# ---------------------------------------------------------------------------------------------

# Where each workload kind the program registers keeps its pod spec (Pulumi's camelCase properties).
POD_SPEC_PATHS = {
    "kubernetes:apps/v1:Deployment": "spec.template.spec",
    "kubernetes:apps/v1:DaemonSet": "spec.template.spec",
    "kubernetes:apps/v1:StatefulSet": "spec.template.spec",
    "kubernetes:apps/v1:ReplicaSet": "spec.template.spec",
    "kubernetes:batch/v1:Job": "spec.template.spec",
    "kubernetes:batch/v1:CronJob": "spec.jobTemplate.spec.template.spec",
    "kubernetes:core/v1:Pod": "spec",
}
_BY_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


# Their patch resources (server-side apply of some fields of an existing object): a patch that sets a container's
# image sets what runs, so it is judged too; a container a patch names without an image keeps the image it has.
PATCH_POD_SPEC_PATHS = {f"{kind}Patch": path for kind, path in POD_SPEC_PATHS.items()}


def images_not_by_digest(pod_spec: Any, patch: bool = False) -> list[str]:
    """Every container (init and ephemeral ones too) whose image names no sha256 digest: `name: image`. In a
    patch (`patch`), only the containers whose image it sets."""
    out = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in as_list(get(pod_spec, field)):
            image = str(get(c, "image", "") or "")
            if patch and not image:
                continue
            if not _BY_DIGEST.search(image):
                out.append(f"{get(c, 'name', '?')}: {image or '(no image)'}")
    return out


# The program's pinned upstream installs whose objects the engine registers one by one: Kubeflow's kustomize
# installs (Pipelines, Katib: platform_versions.KUSTOMIZE_OVERLAYS, pinned by release tag). Their workloads run the
# images the pinned release names, by tag, as a Helm release's run the pinned chart's (which the pack never sees:
# a Release is one resource). Only a workload whose own parent is such a Directory, named as the Kubeflow component
# names its installs and itself a child of that component, is the install's: the same Deployment anywhere else in
# a program (at its top, under another component, under another Directory) is judged.
PINNED_INSTALL_PARENTS = (("gpu-platform:platform:Kubeflow", "kubernetes:kustomize/v2:Directory"),)


def from_a_pinned_install(parent_urn: Optional[str]) -> bool:
    """True for a resource whose parent (its URN) is one of PINNED_INSTALL_PARENTS with a name of
    KUSTOMIZE_DIRECTORY_NAMES. A URN's qualified type ends with the resource's parents' types:
    `...$gpu-platform:platform:Kubeflow$kubernetes:kustomize/v2:Directory` for the Directory (the engine writes the
    whole chain; Pulumi's mocks only the direct parent's, enough here)."""
    parts = str(parent_urn or "").split("::", 3)
    if len(parts) < 4:
        return False
    named = any(parts[3].endswith(f"-{suffix}") for suffix in KUSTOMIZE_DIRECTORY_NAMES.values())
    return named and tuple(parts[2].split("$")[-2:]) in PINNED_INSTALL_PARENTS


def _validate_images(args, report_violation) -> None:
    patch = args.resource_type in PATCH_POD_SPEC_PATHS
    path = PATCH_POD_SPEC_PATHS.get(args.resource_type) if patch else POD_SPEC_PATHS.get(args.resource_type)
    if path is None or from_a_pinned_install(getattr(args.opts, "parent", None)):
        return
    bad = images_not_by_digest(get(args.props, path), patch)
    if bad:
        report_violation(f"container image(s) not by digest: {'; '.join(bad)}. Deploy the digest the build pushed "
                         "(registry/repository@sha256:<64 hex>), never a tag: a tag can be moved to other content.", None)


images_by_digest = ResourceValidationPolicy(
    name="images-by-digest",
    description="Workloads the program registers (Deployments, DaemonSets, StatefulSets, ReplicaSets, Jobs, CronJobs, "
                "Pods) run every container image by digest (@sha256:...), as the images the program builds are; "
                "a pinned upstream install's (Helm chart, Kubeflow's kustomize installs) run the images its release names.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_images,
)


POLICIES = [no_public_admin_access, aws_imdsv2_encrypted_volumes, linode_disk_encryption, gke_node_hardening,
            images_by_digest]
