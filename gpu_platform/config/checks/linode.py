"""The rules only Linode has that read the whole stack: regions, the VPC address plan, versions and pools."""

from __future__ import annotations

import datetime
import ipaddress
from typing import TYPE_CHECKING, Optional, Sequence

from gpu_platform.config.base import RFC1918_TEXT, ConfigIssue, is_rfc1918
from gpu_platform.data.versions_calendar import today as calendar_today
from gpu_platform.config.checks.pools import pool_issue_capacity
from gpu_platform.config.linode import (AUTOSCALING_MIN_KUBERNETES, GPU_POOL_BLOCK, GPU_POOLS_FIRST_HOST, MAX_SYSTEM_NODES,
                                        LINODE_POOL_LABEL_BYTES_MAX, LINODE_SHARED_PRIVATE_RANGE, REGISTRY_SECRET_NAMESPACE,
                                        LinodeSection, region_capabilities, required_capabilities)

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog


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
                                  f"{GPU_POOL_BLOCK} per pool), e.g. a /{_prefix_for_hosts(needed)}"))
    issues += _cluster_range_issues(cfg)
    return issues


def _prefix_for_hosts(hosts: int) -> int:
    """The longest IPv4 prefix whose subnet has `hosts` usable addresses (network and broadcast excluded)."""
    return 32 - (hosts + 1).bit_length()


# Cilium's cluster-pool IPAM gives each node a block of this size (chart value
# ipam.operator.clusterPoolIPv4MaskSize, default 24, which addons.cni_values keeps).
CILIUM_NODE_MASK = 24
# The Service range must hold the platform's own Services (about 60 in the rendered charts) and kubeadm's
# cluster DNS address, the range's 10th (kubeadm constants.GetDNSIP).
MIN_SERVICE_ADDRESSES = 256
# kubeadm refuses a Service subnet with more than 20 host bits (an IPv4 range wider than /12): "specified
# service subnet is too large" (kubernetes/kubernetes cmd/kubeadm/app/apis/kubeadm/validation/validation.go,
# ValidateServiceSubnetSize; cmd/kubeadm/app/constants/constants.go MaximumBitsForServiceSubnet = 20), the
# same bound as kube-apiserver's --service-cluster-ip-range (the allocator's bitmap is kept in etcd).
MAX_SERVICE_HOST_BITS = 20


def _cluster_range_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """Pod and Service ranges the cluster can run in (attacker review: a /30 of each planned fine)."""
    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    issues = []
    nodes = section.control_plane.count + section.system_pool.max_nodes + sum(p.max_nodes for p in cfg.gpu_pools)
    pods = ipaddress.ip_network(section.pod_cidr)
    blocks = 2 ** (CILIUM_NODE_MASK - pods.prefixlen) if pods.version == 4 and pods.prefixlen <= CILIUM_NODE_MASK else 0
    if section.cni == "cilium" and blocks < nodes:
        need = CILIUM_NODE_MASK - max(0, (nodes - 1).bit_length())
        issues.append(ConfigIssue("linode.podCidr", section.pod_cidr,
                                  f"an IPv4 range of /{need} or larger: Cilium gives each node a /{CILIUM_NODE_MASK} and "
                                  f"the cluster can have {nodes} nodes (control planes, system nodes and GPU pools at "
                                  "maxNodes)"))
    services = ipaddress.ip_network(section.service_cidr)
    if services.num_addresses < MIN_SERVICE_ADDRESSES:
        issues.append(ConfigIssue("linode.serviceCidr", section.service_cidr,
                                  f"a range of at least {MIN_SERVICE_ADDRESSES} addresses (a /24 or larger): the "
                                  "platform creates about 60 Services and kubeadm puts cluster DNS at the range's "
                                  "10th address"))
    if services.max_prefixlen - services.prefixlen > MAX_SERVICE_HOST_BITS:
        widest = services.max_prefixlen - MAX_SERVICE_HOST_BITS
        issues.append(ConfigIssue("linode.serviceCidr", section.service_cidr,
                                  f"a range of /{widest} or smaller (e.g. the default 10.96.0.0/12): kubeadm init "
                                  f"refuses a Service subnet wider than /{widest} (at most {MAX_SERVICE_HOST_BITS} "
                                  "host bits), so the first control plane would never come up"))
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


class UpgradeError(ValueError):
    """A version change kubeadm refuses (a skipped minor, a downgrade) or one without a pinned release."""


def _minor(v: str) -> tuple[int, int]:
    try:
        major, minor = v.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise UpgradeError(f"{v!r} is not a Kubernetes minor such as 1.35") from None


def check_upgrade(current: str, target: str, allowed: Optional[Sequence[str]] = None) -> None:
    """kubeadm upgrades one minor at a time and never downgrades (version skew policy: kubelets may be
    older than the API server, never newer). `allowed`: the minors the version calendar allows today.
    current == target is no upgrade (patch releases move with the pins) and passes."""
    from gpu_platform.data import linode_versions as versions

    cur, tgt = _minor(current), _minor(target)
    if tgt == cur:
        return
    if tgt < cur:
        raise UpgradeError(f"{target} is older than the running {current}: kubeadm cannot downgrade")
    if tgt[0] != cur[0] or tgt[1] != cur[1] + 1:
        raise UpgradeError(f"{current} -> {target} skips a minor: upgrade to {cur[0]}.{cur[1] + 1} first "
                           "(kubeadm upgrades one minor at a time)")
    if target not in versions.KUBERNETES_PATCH:
        raise UpgradeError(f"no pinned kubeadm release for {target} in gpu_platform/data/linode_versions.py "
                           f"(pinned: {', '.join(versions.KUBERNETES_PATCH)})")
    if allowed is not None and target not in allowed:
        raise UpgradeError(f"{target} is not allowed on Linode today by the version calendar "
                           f"(gpu_platform/costs/catalog/kubernetes-versions.yaml): {', '.join(allowed)}")


def upgrade_step_out_of_support(cfg: "StackConfig", running: Optional[str]) -> bool:
    """Whether kubernetesVersion is the one-minor step up from a control plane whose minor is itself out of
    upstream support, towards the supported minors: kubeadm upgrades one minor at a time, so a cluster on
    1.33 reaches 1.35 only through 1.34, even after 1.34's end of life."""
    from gpu_platform.data.versions_calendar import load_calendar, minor_key

    cal = load_calendar()
    allowed = cal.allowed_minors("linode")
    target = cfg.kubernetes_version
    if running is None or not allowed or target in allowed or running in allowed:
        return False
    try:
        cur, tgt = _minor(running), _minor(target)
    except UpgradeError:
        return False
    row = cal.row("linode", target)
    return (tgt == (cur[0], cur[1] + 1) and row is not None and row.status() != "unreleased"
            and minor_key(target) < minor_key(allowed[0]))


def support_issues(cfg: "StackConfig", running: Optional[str]) -> list[ConfigIssue]:
    """kubernetesVersion against upstream Kubernetes' dated support calendar (kubeadm has no extended
    support): refused past its end of patch support, like GKE's and EKS's minors past theirs (attacker
    review: 1.31, 1.33 and 1.34 planned on Linode). `running`: linode.controlPlaneVersion when the upgrade
    to kubernetesVersion is valid. A one-minor step up from a running minor that is itself out of support
    passes (upgrade_step_out_of_support, a warning says so): kubeadm cannot skip the minor in between."""
    from gpu_platform.config.kubernetes_version import version_issues
    from gpu_platform.data.versions_calendar import allowed_minors

    issues = version_issues(cfg)
    if not issues or upgrade_step_out_of_support(cfg, running):
        return []
    allowed = allowed_minors("linode")
    section = cfg.linode
    cp = section.control_plane_version if section is not None else None
    try:
        behind = cp is not None and bool(allowed) and _minor(cp) < _minor(allowed[0])
    except UpgradeError:
        behind = False
    if behind:
        major, minor = _minor(cp)  # type: ignore[arg-type]
        hint = (f". The control plane runs {cp} (linode.controlPlaneVersion): upgrade it one minor per `pulumi up`, "
                f"kubernetesVersion {major}.{minor + 1} first, until it runs {allowed[0]} (docs/kubernetes-versions.md)")
        issues = [ConfigIssue(i.key, i.value, i.allowed + hint) for i in issues]
    return issues


def upgrade_step_warnings(cfg: "StackConfig") -> list[str]:
    """The one-minor step through a minor out of upstream support that support_issues lets pass."""
    section = cfg.linode
    if cfg.cloud != "linode" or section is None or section.control_plane_version is None:
        return []
    running = section.control_plane_version
    try:
        check_upgrade(running, cfg.kubernetes_version)
    except UpgradeError:
        return []
    if not upgrade_step_out_of_support(cfg, running):
        return []
    from gpu_platform.data.versions_calendar import allowed_minors, load_calendar

    row = load_calendar().row("linode", cfg.kubernetes_version)
    allowed = allowed_minors("linode")
    return [f"kubernetesVersion {cfg.kubernetes_version} reached the end of upstream support on "
            f"{row.end_of_standard.isoformat()}: allowed only as the one-minor upgrade step from the running "
            f"{running} (linode.controlPlaneVersion); once it has run, record it and upgrade again until the "
            f"cluster is on {' or '.join(allowed)}"]  # type: ignore[union-attr]


# Preflight and `pulumi up` warn this many days before a Linode API token expires (the alert fires then too).
TOKEN_EXPIRY_WARN_DAYS = 30


def node_groups_deployed(cfg: "StackConfig") -> bool:
    """Whether the cluster runs the node-group provider, and so holds its Linode API token: every stack with
    an autoscaled pool (its image published, or built into linode.imageRegistry; image_registry_issues)."""
    section = cfg.linode
    return (section is not None and (section.node_groups.image is not None or section.image_registry is not None)
            and any(p.min_nodes < p.max_nodes for p in cfg.gpu_pools))


def image_registry_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """An autoscaled pool gets nodes only from the node-group provider, whose image is either published
    (linode.nodeGroups.image) or built at `pulumi up` and pushed to the registry the stack names. With
    neither the pool could never get a node: refused here, before anything is created."""
    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    if section.node_groups.image is not None or section.image_registry is not None:
        return []
    scaled = [f"gpuPools[{i}] ({p.name}, minNodes {p.min_nodes} < maxNodes {p.max_nodes})"
              for i, p in enumerate(cfg.gpu_pools) if p.min_nodes < p.max_nodes]
    if not scaled:
        return []
    return [ConfigIssue("linode.imageRegistry", None,
                        f"a registry for the node-group provider's image, which `pulumi up` builds from this "
                        f"repository for the autoscaled pool(s) {', '.join(scaled)}: {{server, repository, username}} "
                        f"and its password as a secret (`pulumi config set --secret {REGISTRY_SECRET_NAMESPACE}:password "
                        "<token>`; docs/quickstart-linode.md, \"Images\"). Or linode.nodeGroups.image, a published image "
                        "by digest (nothing built), or minNodes equal to maxNodes (fixed pools need no provider)")]


def join_deadline_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """linode.nodeGroups.joinDeadlineMinutes against the boot of every autoscaled pool. The deadline is the
    autoscaler's --max-node-provision-time: a node not registered by then is deleted, its scale-up counted as
    failed and its pool backed off (cluster-autoscaler 1.35.2 clusterstate/clusterstate.go updateScaleRequests,
    core/static_autoscaler.go removeOldUnregisteredNodes), and its bootstrap token expires. A deadline at or
    under the boot gives up on every healthy node: the pool never scales up, and each attempt bills a GPU
    node's boot. So it must leave a slow boot room: at least JOIN_DEADLINE_BOOT_FACTOR times the pool's boot
    (costs/node_boot.py, where the margin is argued). Kueue's timeout follows the deadline
    (platform/queue.py pods_ready_timeouts), so no upper bound beyond the key's own 180 is needed here."""
    from gpu_platform.costs.node_boot import JOIN_DEADLINE_BOOT_FACTOR, min_join_deadline_minutes, node_boot_minutes

    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    deadline = section.node_groups.join_deadline_minutes
    short = [(i, pool, node_boot_minutes("linode")) for i, pool in enumerate(cfg.gpu_pools)
             if pool.min_nodes < pool.max_nodes]
    short = [(i, pool, boot) for i, pool, boot in short if deadline < min_join_deadline_minutes(boot)]
    if not short:
        return []
    need = max(min_join_deadline_minutes(boot) for _, _, boot in short)
    pools = "; ".join(f"gpuPools[{i}] ({pool.name}, minNodes {pool.min_nodes} < maxNodes {pool.max_nodes}) boots in "
                      f"{boot:g} minutes (gpu_platform/costs/node_boot.py)" for i, pool, boot in short)
    return [ConfigIssue("linode.nodeGroups.joinDeadlineMinutes", deadline,
                        f"at least {need} minutes (at most 180): {JOIN_DEADLINE_BOOT_FACTOR:g} times the boot of each "
                        f"autoscaled pool, and {pools}. A node that has not registered by the deadline "
                        "is deleted and its pool backed off, so a shorter one gives up on healthy nodes that boot "
                        "slowly, or on every node: the pool never scales up (docs/linode-autoscaling.md, \"How long "
                        "the deadline is, and Kueue's timeout with it\")")]


def image_registry_warnings(cfg: "StackConfig") -> list[str]:
    """What a Linode stack's images leave to the user: a training image nobody builds, pull credentials that
    can push."""
    section = cfg.linode
    if cfg.cloud != "linode" or section is None:
        return []
    out = []
    training = cfg.platform.training_image
    if section.image_registry is None and training.build and training.image is None:
        out.append("linode.imageRegistry is not set: the example training image is not built (no trainingImage "
                   "output); name a registry, set platform.trainingImage.image to a published digest, or build and "
                   "push it yourself (docs/first-training-job.md)")
    if section.image_registry is not None and section.image_registry.pull_username is None:
        out.append("linode.imageRegistry.pullUsername is not set: the cluster's image pull Secrets hold the push "
                   f"credentials ({REGISTRY_SECRET_NAMESPACE}:password); give a read-only token "
                   f"(pullUsername and {REGISTRY_SECRET_NAMESPACE}:pullPassword) so a leaked Secret cannot "
                   "replace images")
    return out


def api_token_expiries(cfg: "StackConfig") -> list[tuple[str, str, str, Optional[datetime.date]]]:
    """Every Linode API token the cluster holds: (expiry key, token config key, who reads it, expiry date)."""
    section = cfg.linode
    if section is None:
        return []
    tokens = [("linode.apiTokenExpires", "linode-cluster:token", "the CCM/CSI token", section.api_token_expires)]
    # Every autoscaled pool needs the provider, so its token's expiry is asked for with or without the image
    # (linode.nodeGroups.image or linode.imageRegistry, whose absence image_registry_issues reports in the same run):
    # both come in one run, not the expiry only after the registry is given.
    autoscaled = any(p.min_nodes < p.max_nodes for p in cfg.gpu_pools)
    if node_groups_deployed(cfg) or autoscaled or section.node_groups.api_token_expires is not None:
        tokens.append(("linode.nodeGroups.apiTokenExpires", "linode-node-groups:token", "the node-group provider's token",
                       section.node_groups.api_token_expires))
    return tokens


_RESTARTS = {"linode-cluster:token": "the CCM and CSI restart with it",
             "linode-node-groups:token": "the node-group provider restarts with it"}


def pki_warnings(cfg: "StackConfig") -> list[str]:
    """linode.pki: program keeps gpu-platform 0.2.0's PKI for a cluster it created: say what that costs."""
    section = cfg.linode
    if section is None or section.pki != "program":
        return []
    return ["linode.pki is `program`: the cluster's CA private keys (cluster, front-proxy, etcd) and the "
            "service-account key travel in every control plane's Linode user data (readable from the node's "
            "metadata service for its whole life) and sit in Pulumi state. "
            "Kept for clusters gpu-platform 0.2.0 created; a new cluster (`cluster`, the default) holds no "
            "private key there (docs/linode.md, \"Upgrading a 0.2.0 cluster\")"]


def token_expiry_warnings(cfg: "StackConfig") -> list[str]:
    out = []
    for key, token, who, expires in api_token_expiries(cfg):
        if expires is None:
            continue  # a config error (token_expiry_issues)
        left = (expires - calendar_today()).days
        if 0 < left <= TOKEN_EXPIRY_WARN_DAYS:
            out.append(f"{who} ({token}) expires in {left} day(s), on {expires.isoformat()} ({key}): create a new "
                       f"one, set it and the date, and run `pulumi up` ({_RESTARTS[token]})")
    return out


def token_expiry_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """A token without a stated expiry, or whose stated expiry is today or past: a config error naming the key.
    Linode cannot tell the program a token's expiry offline, and without it no alert warns before the token
    stops working (then LoadBalancers, volumes and node lifecycle, or autoscaling, stop with it)."""
    issues = []
    for key, token, who, expires in api_token_expiries(cfg):
        if expires is None:
            issues.append(ConfigIssue(key, None,
                                      f"the date {who} ({token}) expires, as Cloud Manager shows it (YYYY-MM-DD): the "
                                      "platform's Prometheus alerts 30 and 7 days before it and preflight warns. The "
                                      "program cannot read it offline, and a token created without an expiry is a "
                                      "credential that never ends: create it with one"))
            continue
        if expires <= calendar_today():
            breaks = ("LoadBalancers, volumes and node lifecycle stop working" if token == "linode-cluster:token"
                      else "autoscaled GPU pools can neither create nor delete nodes")
            issues.append(ConfigIssue(key, expires.isoformat(),
                                      f"a date after today ({calendar_today().isoformat()}): {who} has expired, so "
                                      f"{breaks}. Create a new token, set {token} and this date, then `pulumi up` "
                                      f"({_RESTARTS[token]})"))
    return issues


def upgrade_job_name_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """Run after the cloud's own name rules (config/names.py: the instance label comes first, a shorter pool
    name fixes both). Each node's upgrade Job is named upgrade-<node>-v<release> (components/linode/upgrade.py), at most 63
    characters; an autoscaled pool's nodes are <prefix>-<pool>-<slot>, named at run time by its pool's Job,
    so a name too long must be refused here rather than fail an upgrade half-way."""
    from gpu_platform.data import linode_versions as versions

    patch = versions.KUBERNETES_PATCH.get(cfg.kubernetes_version)
    if cfg.cloud != "linode" or patch is None:
        return []
    issues = []
    for i, pool in enumerate(cfg.gpu_pools):
        longest = f"upgrade-{cfg.name_prefix}-{pool.name}-{max(pool.max_nodes - 1, 0)}-v{patch.replace('.', '-')}"
        if len(longest) > 63:
            issues.append(ConfigIssue(f"gpuPools[{i}].name", pool.name,
                                      f"a name {len(pool.name) - (len(longest) - 63)} characters or shorter: its nodes' "
                                      f"upgrade Jobs ({longest}) must fit Kubernetes' 63-character name limit"))
    return issues


def label_size_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """A pool's labels must leave its nodes' boot documents inside Linode's 16 KiB of user data: they were
    found only when the program encoded a fixed pool's document (a traceback), or when the node-group
    provider failed to create an autoscaled pool's node."""
    issues = []
    for i, pool in enumerate(cfg.gpu_pools):
        size = len(",".join(f"{k}={v}" for k, v in pool.labels.items()).encode())
        if size > LINODE_POOL_LABEL_BYTES_MAX:
            issues.append(ConfigIssue(f"gpuPools[{i}].labels", f"{len(pool.labels)} labels, {size} bytes",
                                      f"labels of at most {LINODE_POOL_LABEL_BYTES_MAX} bytes on Linode (written "
                                      "key=value,key=value, as the kubelet's --node-labels): every node's boot document "
                                      "carries them, and Linode refuses user data over 16,384 bytes"))
    return issues


def image_cloud_init_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """A node reads a boot document larger than Linode's 16 KiB only gzip-compressed (control planes' are
    about 22-24 KB; render.encode_user_data sends smaller ones uncompressed), and cloud-init reads compressed
    Linode user data from 24.4 on. The program cannot look inside a private image: the stack declares its
    cloud-init (linode.imageCloudInit)."""
    from gpu_platform.config.linode import IMAGE_CLOUD_INIT_MIN

    section = cfg.linode
    if section is None or not section.image.startswith("private/"):
        return []
    need = ".".join(map(str, IMAGE_CLOUD_INIT_MIN))
    why = (f"cloud-init {need} or later, as the image ships it (`cloud-init --version` on an instance of it): "
           f"before {need} cloud-init's Linode datasource cannot read gzip-compressed user data "
           "(canonical/cloud-init#5751), and a control plane's boot document only fits Linode's 16 KiB compressed; "
           "rebuild the image from one with a newer cloud-init")
    if section.image_cloud_init is None:
        return [ConfigIssue("linode.imageCloudInit", None, f"set with a private image ({section.image}): {why}")]
    if tuple(int(x) for x in section.image_cloud_init.split(".")[:2]) < IMAGE_CLOUD_INIT_MIN:
        return [ConfigIssue("linode.imageCloudInit", section.image_cloud_init, why)]
    return []


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    section: LinodeSection = cfg.linode  # type: ignore[assignment]
    issues = pool_issue_capacity(cfg, ("on-demand",), "Linode has no spot or preemptible capacity")
    issues += image_cloud_init_issues(cfg)
    issues += region_issues(cfg)
    issues += address_plan_issues(cfg)
    issues += label_size_issues(cfg)
    issues += image_registry_issues(cfg)
    issues += join_deadline_issues(cfg)
    if not cfg.alert_emails:
        # AWS and GCP mail their own budget alerts to the billing account's contacts; Linode has no budget API.
        issues.append(ConfigIssue("alertEmails", [],
                                  "at least one address on Linode: Linode has no budget or billing-alert API, so "
                                  "Alertmanager's GPU spend run-rate alert, mailed to alertEmails, is the only budget "
                                  f"alert (monthlyBudgetUsd {cfg.monthly_budget_usd}); with none it reaches nobody"))
    for i, cidr in enumerate(cfg.admin_cidrs):
        net = ipaddress.ip_network(cidr)
        if net.version == 4 and net.overlaps(LINODE_SHARED_PRIVATE_RANGE):  # type: ignore[arg-type]
            issues.append(ConfigIssue(
                f"adminCidrs[{i}]", cidr,
                f"a range that does not overlap {LINODE_SHARED_PRIVATE_RANGE}: on Linode that is the region's shared "
                "private network, where any Linode customer's instances in the region have addresses, so the node "
                "firewall would open the Kubernetes API and SSH to them; give your own public ranges (or a VPN's)"))
    if section.ssh_authorized_keys and not cfg.admin_cidrs:
        issues.append(ConfigIssue("linode.sshAuthorizedKeys", f"{len(section.ssh_authorized_keys)} key(s)",
                                  "empty unless gpu-platform:adminCidrs names who may reach SSH (the firewall "
                                  "opens port 22 to adminCidrs only)"))
    from gpu_platform.data import linode_versions as versions

    issues += token_expiry_issues(cfg)
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
    issues += support_issues(cfg, running)
    also = running if running is not None and running != cfg.kubernetes_version else None
    if versions.cni_chart(section.cni, cfg.kubernetes_version, also=also) is None:
        from gpu_platform.data.versions_calendar import load_calendar

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
    for key in ("linode.podCidr", "linode.serviceCidr"):
        if nets[key].overlaps(LINODE_SHARED_PRIVATE_RANGE):  # type: ignore[arg-type]
            issues.append(ConfigIssue(key, str(nets[key]),
                                      f"a range that does not overlap {LINODE_SHARED_PRIVATE_RANGE}, Linode's shared "
                                      "private network (any customer's Linodes in the region): the node firewall "
                                      "trusts the pod range, and cluster routes would hide that network"))
    subnet = nets["linode.subnetCidr"]
    if not is_rfc1918(subnet) or subnet.overlaps(LINODE_SHARED_PRIVATE_RANGE):  # type: ignore[arg-type]
        issues.append(ConfigIssue("linode.subnetCidr", section.subnet_cidr,
                                  f"an RFC 1918 IPv4 range ({RFC1918_TEXT}) that does not overlap "
                                  f"{LINODE_SHARED_PRIVATE_RANGE} (Linode's shared private network), as Linode VPC "
                                  "subnets require, e.g. 10.0.0.0/24"))
    return issues
