"""Every cloud name the program derives from the stack config, checked against the cloud's own rules.

A name the cloud refuses (a Linode instance label of 67 characters, a bucket label with an underscore)
would otherwise fail an hour into `pulumi up`, after the resources before it exist. Here one function per
cloud computes each derived name exactly as the components do (tests compare them with what the
program registers), and `name_issues` reports every name that breaks a rule, naming the config keys
that produced it.

Sources of the rules (checked 2026-11-23):
- Linode API v4 (techdocs.akamai.com/linode-api): instance labels 3-64 of [A-Za-z0-9-_.], alphanumeric
  at both ends, no `--`, `__` or `..`; Firewall labels the same rule with 3-32 characters; NodeBalancer
  labels `[a-zA-Z0-9-_]{3,32}`; VPC and VPC subnet labels "only ASCII letters, digits and dashes"
  (pulumi_linode Vpc/VpcSubnet docstrings), at most 64; Object Storage bucket labels follow S3's
  rule: 3-63 lowercase letters, digits and hyphens, alphanumeric at both ends.
- GCP: GKE cluster names 1-40 lowercase letters, digits and hyphens, a letter first, no hyphen last
  (container API, Cluster.name); node pool names the same rule; Compute Engine names RFC 1035, at
  most 63 (networks, subnetworks, routers, firewalls); service account IDs 6-30 `[a-z]([-a-z0-9]*[a-z0-9])`
  (pulumi_gcp serviceaccount.Account docstring); Cloud Storage bucket names 3-63 lowercase letters,
  digits, `-`, `_`, `.`, alphanumeric at both ends, not starting with "goog" nor containing "google"
  (pulumi_gcp storage.Bucket docstring and cloud.google.com/storage/docs/buckets#naming); label values at
  most 63 lowercase letters, digits, `-` and `_` (international characters allowed;
  cloud.google.com/resource-manager/docs/labels-overview#requirements).
- AWS: EKS cluster names 1-100 `^[0-9A-Za-z][A-Za-z0-9\\-_]*$` (pulumi_aws eks.Cluster docstring);
  S3 `bucket_prefix` at most 37 lowercase characters (pulumi_aws s3.Bucket docstring: the provider
  appends a 26-character unique suffix); Auto Scaling group names at most 255; SNS topic names 1-256
  of [A-Za-z0-9-_]; budget names at most 100 (AWS Budgets API). IAM roles are auto-named by Pulumi
  (the provider truncates auto-names to IAM's 64), so no role name is derived here.
- Kubernetes: node names are DNS-1123 subdomains (at most 253, lowercase alphanumerics, '-' and '.').
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

from gpu_platform.config.base import ConfigIssue

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig


# Digits read as the letters they resemble (0 o, 1 l, 3 e, 6 and 9 g): "g00gle", "goog1e", "9oogle".
LOOKALIKE_DIGITS = str.maketrans("01369", "oleg" "g")


@dataclass(frozen=True)
class Rule:
    what: str
    min_len: int
    max_len: int
    pattern: re.Pattern[str]  # used with fullmatch
    allowed: str  # the character rule in words
    forbidden: tuple[str, ...] = ()  # substrings the cloud refuses
    forbidden_prefixes: tuple[str, ...] = ()
    # Also refuse `forbidden` spelled with look-alike digits (Cloud Storage: "cannot contain google or close
    # misspellings, such as g00gle", cloud.google.com/storage/docs/buckets#naming).
    lookalikes: bool = False

    def holds_forbidden(self, text: str) -> bool:
        """Whether `text` (one key's value) holds a forbidden string itself, or a look-alike of one: the key to
        name when the name built from it is refused for that."""
        return any(bad in text or (self.lookalikes and bad in text.translate(LOOKALIKE_DIGITS))
                   for bad in self.forbidden)

    def problem(self, name: str) -> Optional[str]:
        if not self.min_len <= len(name) <= self.max_len:
            return f"{len(name)} characters; {self.what} must have {self.min_len} to {self.max_len}"
        if not self.pattern.fullmatch(name):
            return f"{self.what} must be {self.allowed}"
        for bad in self.forbidden:
            if bad in name:
                return f"{self.what} must not contain {bad!r}"
            if self.lookalikes and bad in name.translate(LOOKALIKE_DIGITS):
                return (f"{self.what} must not contain {bad!r} or a close misspelling of it (digits for letters, "
                        "such as g00gle)")
        for bad in self.forbidden_prefixes:
            if name.startswith(bad):
                return f"{self.what} must not start with {bad!r}"
            if self.lookalikes and name.translate(LOOKALIKE_DIGITS).startswith(bad):
                return f"{self.what} must not start with {bad!r} or a close misspelling of it (such as g00g)"
        return None


_LINODE_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
LINODE_INSTANCE_LABEL = Rule("a Linode instance label", 3, 64, _LINODE_LABEL,
                             "letters, digits, '-', '_' or '.', alphanumeric at both ends", ("--", "__", ".."))
LINODE_FIREWALL_LABEL = Rule("a Linode Firewall label", 3, 32, _LINODE_LABEL,
                             "letters, digits, '-', '_' or '.', alphanumeric at both ends", ("--", "__", ".."))
LINODE_NODEBALANCER_LABEL = Rule("a Linode NodeBalancer label", 3, 32, re.compile(r"[A-Za-z0-9_-]+"),
                                 "letters, digits, '-' or '_'")
LINODE_VPC_LABEL = Rule("a Linode VPC label", 1, 64, re.compile(r"[A-Za-z0-9-]+"), "ASCII letters, digits and '-'")
# Linode tags are single strings ("owner:ml-platform") of 3 to 50 characters (Cloud Manager's tag
# validation, linode/manager: "Tags must be between 3 and 50 characters").
LINODE_TAG = Rule("a Linode tag (key:value)", 3, 50, re.compile(r"[^\x00-\x1f]+"), "printable characters")
LINODE_BUCKET_LABEL = Rule("a Linode Object Storage bucket label", 3, 63, re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"),
                           "lowercase letters, digits and '-', alphanumeric at both ends")
GCP_LABEL_VALUE = Rule("a GCP label value", 0, 63, re.compile(r"[-_a-z0-9\u00c0-\uffff]*"),
                       "lowercase letters, digits, '-' and '_'")
GKE_NAME = Rule("a GKE cluster or node pool name", 1, 40, re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?"),
                "lowercase letters, digits and '-', starting with a letter, not ending with '-'")
GCE_NAME = Rule("a Compute Engine resource name", 1, 63, re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?"),
                "lowercase letters, digits and '-', starting with a letter, not ending with '-' (RFC 1035)")
GCP_SERVICE_ACCOUNT_ID = Rule("a GCP service account ID", 6, 30, re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?"),
                              "lowercase letters, digits and '-', starting with a letter")
GCS_BUCKET = Rule("a Cloud Storage bucket name", 3, 63, re.compile(r"[a-z0-9](?:[-a-z0-9_.]*[a-z0-9])?"),
                  "lowercase letters, digits, '-', '_' or '.', alphanumeric at both ends", ("google",), ("goog",),
                  lookalikes=True)
EKS_CLUSTER_NAME = Rule("an EKS cluster name", 1, 100, re.compile(r"[0-9A-Za-z][A-Za-z0-9_-]*"),
                        "letters, digits, '-' and '_', alphanumeric first")
S3_BUCKET_PREFIX = Rule("an S3 bucket_prefix", 1, 37, re.compile(r"[a-z0-9][a-z0-9.-]*"),
                        "lowercase letters, digits, '-' and '.'")
AWS_ASG_NAME = Rule("an Auto Scaling group name", 1, 255, re.compile(r"[^:]+"), "any characters but ':'")
SNS_TOPIC_NAME = Rule("an SNS topic name", 1, 256, re.compile(r"[A-Za-z0-9_-]+"), "letters, digits, '-' and '_'")
AWS_BUDGET_NAME = Rule("an AWS budget name", 1, 100, re.compile(r"[^:\\]+"), "any characters but ':' and '\\'")
K8S_NODE_NAME = Rule("a Kubernetes node name", 1, 253,
                     re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"),
                     "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.'")


@dataclass(frozen=True)
class DerivedName:
    value: str
    rule: Rule
    keys: tuple[str, ...]  # the config keys the name is made of (as the user writes them)
    resource: str  # what carries it, for the message
    random_suffix: int = 0  # trailing characters chosen at deploy time (a stand-in of that length here)


# ---------------------------------------------------------------------------------------------
# Names the resource modules build with (gcp/bucket.py, aws/gpu_asg.py, aws/cluster.py): one definition,
# so what is checked here is what they register
# ---------------------------------------------------------------------------------------------


def _shorten(text: str, limit: int) -> str:
    """`text` if it fits, else its head plus a short hash of the whole (stable across runs)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"{text[:limit - 7].rstrip('-')}-{digest}"


def account_id(prefix: str, role: str) -> str:
    """A service account ID (6 to 30 of [a-z0-9-], starting with a letter) for `<prefix>-<role>`."""
    head = _shorten(prefix, 30 - len(role) - 1)
    return f"{head}-{role}"


def bucket_name(project: str, prefix: str) -> str:
    """Bucket names are global: the project ID (itself globally unique) keeps ours from colliding."""
    return _shorten(f"{project}-{prefix}-checkpoints", 63)


def asg_name(cluster_name: str, pool: str, zone: Optional[str] = None) -> str:
    """Deterministic, so alarms and the protection controller can name the group before it exists.
    One group per pool and zone: `<cluster>-gpu-<pool>-<zone>`."""
    return f"{cluster_name}-gpu-{pool}" + (f"-{zone}" if zone else "")


def zonal_groups(min_nodes: int, max_nodes: int, zones: Sequence[str]) -> list[tuple[str, int, int]]:
    """(zone, minSize, maxSize) of a pool's groups, one per zone, whose sizes add up to the pool's.

    Why one group per zone: cluster-autoscaler plans a new node of a multi-zone group as if it were
    in one zone, so a pod bound to a zonal EBS volume (a notebook's home, the hub database) may wait
    forever or get a node in the wrong zone; its AWS README prescribes "an ASG-per-AZ while enabling
    --balance-similar-node-groups" (cloudprovider/aws/README.md, Common Notes and Gotchas), which
    the autoscaler here runs with (autoscaler.py). The split keeps the pool's totals exact (quota,
    cost and policy see the same numbers): the first zones get the remainder, and a zone whose
    share of maxNodes is 0 gets no group (a pool with fewer maxNodes than zones lives in its first
    maxNodes zones)."""
    if not zones:
        raise ValueError("a GPU pool needs at least one zone")
    n = len(zones)
    out = []
    for i, zone in enumerate(zones):
        hi = max_nodes // n + (1 if i < max_nodes % n else 0)
        lo = min_nodes // n + (1 if i < min_nodes % n else 0)
        if hi > 0:
            out.append((zone, min(lo, hi), hi))
    return out


# ---------------------------------------------------------------------------------------------
# One function per cloud: the names exactly as the components build them
# ---------------------------------------------------------------------------------------------


def linode_names(cfg: "StackConfig") -> list[DerivedName]:
    """gpu_platform/components/linode/cluster.py: labels of instances, network, firewalls, balancer and bucket."""
    from gpu_platform.config.linode import BUCKET_SUFFIX_LENGTH, bucket_label as linode_bucket_label

    prefix, env = cfg.name_prefix, ("environment",)
    section = cfg.linode
    out = [
        DerivedName(f"{prefix}-vpc", LINODE_VPC_LABEL, env, "the VPC"),
        DerivedName(f"{prefix}-nodes", LINODE_VPC_LABEL, env, "the VPC subnet"),
        DerivedName(f"{prefix}-nodes", LINODE_FIREWALL_LABEL, env, "the node firewall"),
        # The bucket label ends in a random suffix (bucket names are global across customers):
        # checked here with a stand-in of the suffix's length.
        DerivedName(linode_bucket_label(prefix, cfg.owner, "x" * BUCKET_SUFFIX_LENGTH, check=False), LINODE_BUCKET_LABEL,
                    ("environment", "owner"), "the checkpoint bucket", random_suffix=BUCKET_SUFFIX_LENGTH),
    ]
    # Tags on every instance, volume and firewall (gpu_platform.components.cluster.common_labels as key:value).
    out += [DerivedName(f"owner:{cfg.owner}", LINODE_TAG, ("owner",), "the owner tag"),
            DerivedName(f"cost-center:{cfg.cost_center}", LINODE_TAG, ("costCenter",), "the cost-center tag"),
            DerivedName(f"environment:{cfg.environment}", LINODE_TAG, ("environment",), "the environment tag"),
            DerivedName(f"cluster:{prefix}", LINODE_TAG, ("environment",), "the cluster tag")]
    cp_count = section.control_plane.count if section is not None else 1
    if cp_count > 1:
        out += [DerivedName(f"{prefix}-api", LINODE_NODEBALANCER_LABEL, env, "the API NodeBalancer"),
                DerivedName(f"{prefix}-api-lb", LINODE_FIREWALL_LABEL, env, "the API NodeBalancer's firewall")]
    labels = [(f"{prefix}-cp-{i}", env) for i in range(cp_count)]
    system = getattr(section, "system_pool", None)
    labels += [(f"{prefix}-system-{i}", env) for i in range(system.max_nodes if system is not None else 0)]
    for p, pool in enumerate(cfg.gpu_pools):
        for i in range(pool.max_nodes):
            labels.append((f"{prefix}-{pool.name}-{i}", ("environment", f"gpuPools[{p}].name", f"gpuPools[{p}].maxNodes")))
    for label, keys in labels:
        out.append(DerivedName(label, LINODE_INSTANCE_LABEL, keys, "a Linode instance"))
        out.append(DerivedName(label, K8S_NODE_NAME, keys, "a kubeadm node (named after its instance)"))
    return out


def gcp_names(cfg: "StackConfig") -> list[DerivedName]:
    """gpu_platform/components/gcp: cluster, node pools, network, service accounts and the checkpoint bucket."""
    from gpu_platform.config.gcp import SYSTEM_POOL_NAME

    prefix, env = cfg.name_prefix, ("environment",)
    out = [DerivedName(prefix, GKE_NAME, env, "the GKE cluster"),
           DerivedName(SYSTEM_POOL_NAME, GKE_NAME, (), "the system node pool")]
    out += [DerivedName(p.name, GKE_NAME, (f"gpuPools[{i}].name",), "a GKE node pool") for i, p in enumerate(cfg.gpu_pools)]
    for suffix, what in (("vpc", "the VPC network"), ("nodes", "the node subnetwork"), ("router", "the Cloud Router"),
                         ("nat", "the Cloud NAT"), ("master-webhooks", "the webhook firewall rule")):
        out.append(DerivedName(f"{prefix}-{suffix}", GCE_NAME, env, what))
    for role in ("nodes", "trainer"):
        out.append(DerivedName(account_id(prefix, role), GCP_SERVICE_ACCOUNT_ID, env, f"the {role} service account"))
    project = cfg.gcp.project if cfg.gcp is not None else ""
    out.append(DerivedName(bucket_name(project, prefix), GCS_BUCKET, ("gcp.project", "environment"),
                           "the checkpoint bucket"))
    # common_labels' `cluster` label on every resource (components/cluster.py).
    out.append(DerivedName(prefix, GCP_LABEL_VALUE, env, "the cluster label's value"))
    return out


def _aws_zone_labels(cfg: "StackConfig") -> list[str]:
    """The zone part of the GPU groups' names (aws/cluster.py): the configured zones, an existing VPC's
    subnets by position, or (zones asked of AWS at deploy time) the longest a zone name of the region
    can be, so the length check holds for whichever zones AWS returns."""
    section = cfg.aws
    if section is None:
        return []
    if section.private_subnet_ids:
        return [f"subnet{i + 1}" for i in range(len(section.private_subnet_ids))]
    return list(section.availability_zones) or [f"{section.region}a"]


def aws_names(cfg: "StackConfig") -> list[DerivedName]:
    """gpu_platform/components/aws: the EKS cluster, GPU Auto Scaling groups, the checkpoint bucket, alerts, budget."""
    cluster, env = cfg.name_prefix, ("environment",)
    out = [DerivedName(cluster, EKS_CLUSTER_NAME, env, "the EKS cluster"),
           DerivedName(f"{cluster}-checkpoints-", S3_BUCKET_PREFIX, env, "the checkpoint bucket (bucket_prefix)"),
           DerivedName(f"{cluster}-billing-alerts", SNS_TOPIC_NAME, env, "the billing alert topic"),
           DerivedName(f"{cluster}-idle-gpu-alerts", SNS_TOPIC_NAME, env, "the idle-GPU alert topic"),
           DerivedName(f"{cluster}-monthly", AWS_BUDGET_NAME, env, "the monthly budget")]
    out += [DerivedName(asg_name(cluster, p.name, zone), AWS_ASG_NAME, ("environment", f"gpuPools[{i}].name"),
                        "a GPU Auto Scaling group") for i, p in enumerate(cfg.gpu_pools)
            for zone, _, _ in zonal_groups(p.min_nodes, p.max_nodes, _aws_zone_labels(cfg))]
    return out


def kubernetes_names(cfg: "StackConfig") -> list[DerivedName]:
    """gpu_platform/components/kubernetes: no cloud resource; the Kubernetes objects' names come from pool names
    (DNS labels, checked by the model) and fixed names."""
    return []


def derived_names(cfg: "StackConfig") -> list[DerivedName]:
    return {"linode": linode_names, "gcp": gcp_names, "aws": aws_names, "kubernetes": kubernetes_names}[cfg.cloud](cfg)


def name_issues(cfg: "StackConfig") -> list[ConfigIssue]:
    """One issue per broken rule (the first name that breaks it), keyed by the first config key."""
    issues: list[ConfigIssue] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for n in derived_names(cfg):
        problem = n.rule.problem(n.value)
        if problem is None or (n.rule.what, n.keys) in seen:
            continue
        seen.add((n.rule.what, n.keys))
        keys = ", ".join(n.keys) if n.keys else "(fixed)"
        # The key whose own value holds the forbidden text (environment `g00gle` in the bucket name), else the
        # first key that is not the environment (a name too long is everyone's, the section's key says where).
        carriers = [k for k in n.keys if isinstance(v := _value_at(cfg, k), str) and n.rule.holds_forbidden(v.lower())]
        key = carriers[0] if carriers else next((k for k in n.keys if k != "environment"), "environment")
        issues.append(ConfigIssue(key, _value_at(cfg, key),
                                  f"a value that gives {n.resource} a valid name; it would be {n.value!r}: {problem} "
                                  f"(built from {keys})"))
    return issues


def _value_at(cfg: "StackConfig", key: str) -> object:
    """The config value at a user-facing key path such as gpuPools[0].name or gcp.project."""
    cur: object = cfg.model_dump(by_alias=True)
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if part.startswith("["):
            cur = cur[int(part[1:-1])] if isinstance(cur, list) else None
        else:
            cur = cur.get(part) if isinstance(cur, dict) else None
    return cur
