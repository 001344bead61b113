"""The `linode` section of the stack config: its keys, their types and limits, and the dated region table.

The rules that read the rest of the stack are in checks/linode.py, which imports this section, never the reverse.
"""

from __future__ import annotations

import datetime
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import Field, field_validator, model_validator

from gpu_platform.config.linode_network import LINODE_NODEBALANCER_BACKENDS, LINODE_SHARED_PRIVATE_RANGE  # noqa: F401
from gpu_platform.config.base import IMAGE_BY_DIGEST, SYSTEM_POOL_DEFAULTS, Cidr, Model, SystemPool, validate_system_pool

# Object Storage bucket names are global across all Linode customers: <prefix>-ckpt-<owner>-<random>.
BUCKET_SUFFIX_LENGTH = 8
_BUCKET_LABEL = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def bucket_label(prefix: str, owner: str, suffix: str, check: bool = True, kind: str = "ckpt") -> str:
    """A bucket's label within Linode's rules (3-63 characters of lower-case letters, digits and dashes,
    starting and ending with a letter or digit, not an IP address): <prefix>-<kind>-<owner>-<suffix>, kind
    `ckpt` (checkpoints) or `etcd` (etcd snapshots); the owner part is shortened when needed, the random
    suffix never is."""
    base = f"{prefix}-{kind}-{owner}"
    label = f"{base[:63 - len(suffix) - 1].rstrip('-')}-{suffix}"
    if check and (not _BUCKET_LABEL.fullmatch(label) or "--" in label):
        raise ValueError(f"bucket label {label!r} breaks Linode's bucket naming rules")
    return label


SSH_KEY = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/=]+( .*)?$")


# Public images the node scripts (components/linode/render.py) run on: they use apt, Ubuntu's signed
# precompiled NVIDIA modules (linux-modules-nvidia-<branch>-server-<kernel>), systemd cgroups and curl's
# SigV4, and tests/boot_harness.py executes them against a recorded Ubuntu 24.04 image. Another release
# (or another distribution) is untested: a node that never joins, found 40 minutes into `pulumi up`.
SUPPORTED_IMAGES = ("linode/ubuntu24.04",)
# cloud-init's Akamai datasource decoded base64 user data to text until 24.4 (canonical/cloud-init
# cloudinit/sources/DataSourceAkamai.py: `b64decode(self.userdata_raw).decode()` at 24.3.1, the bytes kept at
# 24.4, "fix(akamai): handle non-string user data in base64 decoding" #5751): gzip-compressed user data
# raised UnicodeDecodeError and the node never ran its boot document.
IMAGE_CLOUD_INIT_MIN = (24, 4)


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

    # A published image by digest (ghcr.io/<owner>/gpu-platform-linode-node-groups@sha256:<64 hex>, as
    # .github/workflows/linode-node-groups-image.yml publishes it on a release tag): deployed as given, nothing
    # built. Unset: `pulumi up` builds the image from gpu_platform/controllers/linode_node_groups/Dockerfile
    # and pushes it to linode.imageRegistry (required then, a config error otherwise).
    image: Optional[str] = Field(default=None, pattern=IMAGE_BY_DIGEST)
    # A new node that has not registered after this long is given up on (its boot failed): the autoscaler
    # (--max-node-provision-time) times the scale-up out, backs the pool off and deletes the instance; the
    # node-group provider deletes it itself 5 minutes later if the autoscaler has not (docs/linode-autoscaling.md,
    # "A node that never joins"). The node's bootstrap token expires at the deadline. With an autoscaled pool it
    # must be at least 1.5 times the pool's boot (24 minutes for Linode's 16: checks/linode.py
    # join_deadline_issues, costs/node_boot.py min_join_deadline_minutes), and Kueue's waitForPodsReady timeout
    # follows it (deadline + 3 + platform.podsReadyTimeoutMinutes: platform/queue.py pods_ready_timeouts), so a
    # longer deadline also holds a job that can never start longer. The default, 30, is the ratio
    # cluster-autoscaler's own default keeps to a baked-image boot (15 minutes to 8), leaving a slow Linode
    # boot 14 minutes. It was 40 while Kueue's timeout did not follow the deadline; now that it does, a longer
    # deadline also holds a job that can never start longer (above), so the default is the shorter 30.
    join_deadline_minutes: int = Field(default=30, ge=1, le=180)
    # When the provider's own Linode API token (linode-node-groups:token; it creates and deletes the
    # pools' instances) expires: the date Cloud Manager shows. Renders alerts 30 and 7 days before, and
    # preflight warns within 30 days, like linode.apiTokenExpires. Without linode-node-groups:token the
    # provider runs on linode-cluster:token: then the same date as linode.apiTokenExpires.
    api_token_expires: Optional[datetime.date] = None


# Config namespace of the registry's passwords (Pulumi secrets; never in the gpu-platform namespace, whose
# values end up in clear in names, tags and labels): `password` pushes, `pullPassword` (optional) pulls.
REGISTRY_SECRET_NAMESPACE = "linode-registry"


class LinodeImageRegistry(Model):
    """The container registry a Linode stack names (Linode has no registry service of its own): `pulumi up`
    pushes the images it builds from this repository to <server>/<repository>/<image> and the cluster pulls
    them from there by digest (docs/quickstart-linode.md, "Images")."""

    # The registry's host, with a port if it is not 443: ghcr.io, registry.example.com:5000.
    server: str = Field(pattern=r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:[0-9]{1,5})?$")
    # The path under the server the images go to: <owner>/<name> on GHCR (an organisation or user the
    # push token can write to), a Harbor project, ...
    repository: str = Field(pattern=r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*){0,4}$", max_length=200)
    # Who pushes; the password is `pulumi config set --secret linode-registry:password <token>`.
    username: str = Field(pattern=r"^[^\s:]{1,255}$")
    # Who pulls, when a read-only token exists (its password: linode-registry:pullPassword): the cluster
    # keeps pull credentials in image pull Secrets (kube-system, training). Unset: the push credentials.
    pull_username: Optional[str] = Field(default=None, pattern=r"^[^\s:]{1,255}$")

    def address(self, image: str) -> str:
        """Where an image of this registry lives: <server>/<repository>/<image>."""
        return f"{self.server}/{self.repository}/{image}"


class LinodeSection(Model):
    region: str = Field(min_length=2)
    control_plane: LinodeControlPlane = Field(default_factory=LinodeControlPlane)
    # Untainted CPU workers for ordinary pods (Kueue, Kubeflow controllers, monitoring, JupyterHub): control
    # planes carry the control-plane taint and GPU workers the GPU taint. Fixed size: minNodes == maxNodes.
    system_pool: SystemPool = Field(default_factory=lambda: SystemPool(**SYSTEM_POOL_DEFAULTS["linode"]))
    # A public image the node scripts support (SUPPORTED_IMAGES) or one of the account's own images
    # (private/<id>), which must be built from one of them: the program cannot look inside it offline.
    image: str = Field(default="linode/ubuntu24.04", pattern=r"^(linode/[a-z0-9][a-z0-9._-]{0,62}|private/[0-9]{1,12})$")
    # The cloud-init release a private/<id> image ships (`cloud-init --version` on an instance of it): the
    # program cannot look inside the image, and before 24.4 cloud-init's Linode (Akamai) datasource cannot
    # read compressed user data (IMAGE_CLOUD_INIT_MIN). Required with a private image.
    image_cloud_init: Optional[str] = Field(default=None, pattern=r"^[0-9]{1,3}\.[0-9]{1,2}(\.[0-9]{1,3})?$")
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
    # Where the cluster's CAs come from. `cluster` (new stacks): cp-0's `kubeadm init --upload-certs` generates
    # them and no private key is in any node's user data or in Pulumi state. `program`: gpu-platform 0.2.0's
    # flow, kept for clusters it created (their PKI is the program's pulumi-tls CAs, and their nodes join
    # with them): the CA keys travel in control planes' user data and sit in state; preflight warns. A
    # running cluster cannot move from one to the other (docs/linode.md, "Upgrading a 0.2.0 cluster").
    pki: Literal["cluster", "program"] = "cluster"
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
    # Where `pulumi up` pushes the images it builds (the node-group provider's, the example training image).
    # Needed by autoscaled GPU pools unless linode.nodeGroups.image names a published image.
    image_registry: Optional[LinodeImageRegistry] = None

    @field_validator("image")
    @classmethod
    def _supported_image(cls, value: str) -> str:
        if value.startswith("linode/") and value not in SUPPORTED_IMAGES:
            raise ValueError(f"an image the node scripts support: {', '.join(SUPPORTED_IMAGES)} (or private/<id>, an "
                             "image of your own built from it); the scripts install Kubernetes and the NVIDIA driver "
                             "with apt from Ubuntu's archive and are tested against that release only")
        return value

    @field_validator("ssh_authorized_keys")
    @classmethod
    def _ssh_keys(cls, keys: list[str]) -> list[str]:
        from gpu_platform.config.approvals import ssh_key_problem

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


# Linode refuses user data over 16,384 bytes (decoded; gpu_platform/components/linode/render.py,
# USER_DATA_LIMIT_BYTES), and each GPU node's boot document (gzip-compressed) carries its pool's labels in the
# kubelet's --node-labels. The document without user labels takes about 4.2 KB compressed; labels of at most
# this many bytes (written key=value,key=value) leave it room even when they do not compress
# (tests/test_config_hostile_values.py renders a pool at this size and checks the limit holds).
LINODE_POOL_LABEL_BYTES_MAX = 8192

REGIONS_FILE = Path(__file__).resolve().parent / "linode_regions.yaml"


@lru_cache(maxsize=1)
def region_capabilities() -> dict[str, frozenset[str]]:
    """Region id -> capabilities, from the dated region table (linode_regions.yaml, see its header)."""
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


# The node address plan of gpu_platform/components/linode/render.vpc_addresses: GPU pools get blocks of this many
# fixed VPC addresses from host .100 on, in the order of gpuPools.
GPU_POOL_BLOCK = 50
GPU_POOLS_FIRST_HOST = 100


