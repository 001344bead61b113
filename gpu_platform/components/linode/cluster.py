"""A self-managed kubeadm GPU cluster on Linode, joined declaratively through cloud-init (no SSH).

Linode's managed Kubernetes has no GPU nodes, so this builds what LKE would: cp-0 generates the CAs
(`kubeadm init --upload-certs`; no private key in any user data or in Pulumi state), the program reads the
CA back from the signed `cluster-info` and pins it in every later join (with `linode.pki: program`, kept for
clusters created before 0.3.0: the program's pulumi-tls CAs, exactly as that flow registered them), a bootstrap token per node the
program keeps as a `bootstrap.kubernetes.io/token` Secret whose expiry every run renews, control planes (1, or 3
behind a NodeBalancer with private-IP backends), untainted system workers and GPU workers on a VPC
behind a DROP-by-default firewall, the add-ons a cloud cluster needs (CNI, Linode CCM and CSI, NVIDIA
device plugin, a default StorageClass), and a readiness gate that fails `pulumi up` naming any node
that did not join.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import json
import os
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pulumi_linode as linode
import pulumi_random as random
import pulumi_tls as tls

from gpu_platform.config.base import approval_tags
from gpu_platform.components.cluster import (
    CheckpointStore,
    ClusterHandle,
    GpuPoolSpec,
    SystemPoolSpec,
    common_labels,
    gpu_pool_specs,
)
from gpu_platform.config.model import StackConfig
from gpu_platform.config.bucket_lifecycle import BucketDeletion
from gpu_platform.components.read_only import keep_from_state
from gpu_platform.config.checks.linode import node_groups_deployed
from gpu_platform.components.images import LINODE_NODE_GROUPS, training_image
from gpu_platform.components.linode import addons, node_groups, render, upgrade
from gpu_platform.components.linode.registry import NamedRegistry
from gpu_platform.data import linode_versions as versions
from gpu_platform.config.linode import (
    BUCKET_SUFFIX_LENGTH, LINODE_NODEBALANCER_BACKENDS, LINODE_SHARED_PRIVATE_RANGE, bucket_label,
)
from gpu_platform.components.paths import program_relative

API_PORT = 6443
NODE_PORTS = "30000-32767"
# Worker join tokens stay valid until the end of the rotation window after the last `pulumi up`
# (this many days after the current window ends); then the token cleaner deletes them.
TOKEN_ROTATION_DAYS = 7
# Control planes snapshot etcd every 6 hours into the bucket; the bucket keeps each snapshot this long.
ETCD_SNAPSHOT_RETENTION_DAYS = 14
# The program reads the admin certificate back this often (control planes renew it 60 days before expiry).
ADMIN_CERT_READ_DAYS = 28
# Node inputs the Linode provider can only change by re-creating the node (ForceNew in
# terraform-provider-linode's instance schema): later edits apply to new nodes only, never silently
# replace a running one. `metadatas` = first-boot user data (also ForceNew).
NODE_IGNORE_CHANGES = ["metadatas", "authorizedKeys", "image", "diskEncryption", "firewallId"]
# The read-back commands (cluster_info.py, its source on stdin): no path in them, so the same text wherever the
# package is installed.
READ_BACK_CA = "python3 - ca"
READ_ADMIN_CERT = "python3 - admin"


@dataclass(frozen=True)
class LinodeClusterArgs:
    config: StackConfig
    # Token for the in-cluster CCM and CSI driver (a secret): scoped to Linodes, NodeBalancers,
    # Volumes, VPCs and IPs (docs/quickstart-linode.md, "Linode API tokens").
    api_token: pulumi.Input[str]
    # The deployer's token (linode:token), for the object-storage provider that uses temporary keys.
    deploy_token: Optional[pulumi.Input[str]] = None
    # The node-group provider's token (linodes:read_write; autoscaled GPU pools only).
    node_groups_token: Optional[pulumi.Input[str]] = None
    # linode.imageRegistry's passwords (linode-registry:password, :pullPassword), where images are built into it.
    registry_password: Optional[pulumi.Input[str]] = None
    registry_pull_password: Optional[pulumi.Input[str]] = None


def linode_tags(cfg: StackConfig, **extra: str) -> list[str]:
    """Linode tags are flat strings: owner:ml-platform, cost-center:research, ..."""
    labels = {**common_labels(cfg), **extra}
    return [f"{k}:{v}" for k, v in labels.items()]


def _split(cidrs: list[str]) -> tuple[list[str], list[str]]:
    return ([c for c in cidrs if ipaddress.ip_network(c).version == 4],
            [c for c in cidrs if ipaddress.ip_network(c).version == 6])


def firewall_rules(admin_cidrs: list[str], vpc_cidr: str, pod_cidr: str, ssh_enabled: bool,
                   api_balancer: bool = False) -> list[dict]:
    """Inbound rules of the node firewall (policy DROP). Pure, so tests check it directly."""
    v4, v6 = _split(admin_cidrs)
    rules: list[dict] = [
        # Nodes talk to each other (kubelet, etcd, CNI) only over the VPC.
        {"label": "vpc-tcp", "action": "ACCEPT", "protocol": "TCP", "ipv4s": [vpc_cidr, pod_cidr]},
        {"label": "vpc-udp", "action": "ACCEPT", "protocol": "UDP", "ipv4s": [vpc_cidr, pod_cidr]},
        {"label": "vpc-icmp", "action": "ACCEPT", "protocol": "ICMP", "ipv4s": [vpc_cidr, pod_cidr]},
        # NodeBalancers (LoadBalancer Services; the HA API) reach backends on their private IPs.
        {"label": "nodebalancer-nodeports", "action": "ACCEPT", "protocol": "TCP", "ports": NODE_PORTS,
         "ipv4s": [str(LINODE_NODEBALANCER_BACKENDS)]},
    ]
    if api_balancer:
        rules.append({"label": "nodebalancer-kube-api", "action": "ACCEPT", "protocol": "TCP",
                      "ports": str(API_PORT), "ipv4s": [str(LINODE_NODEBALANCER_BACKENDS)]})
    if v4 or v6:
        rules.append({"label": "admin-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": str(API_PORT),
                      **({"ipv4s": v4} if v4 else {}), **({"ipv6s": v6} if v6 else {})})
        if ssh_enabled:
            rules.append({"label": "admin-ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22",
                          **({"ipv4s": v4} if v4 else {}), **({"ipv6s": v6} if v6 else {})})
    return rules


def public_ipv4(ipv4s: list[str]) -> str:
    """The instance's public IPv4 out of the provider's `ipv4` set, which also holds the private
    192.168.128.0/17 address (`private_ip=True`) in hash order, not the API's. terraform-provider-linode
    fills `ip_address` from the same answer, but that attribute is deprecated (pulumi-linode 6.x warns on
    every read). Several public addresses (extra IPs): the lowest, so every run picks the same."""
    public = sorted((ip for ip in ipv4s or [] if ipaddress.ip_address(ip) not in LINODE_SHARED_PRIVATE_RANGE),
                    key=ipaddress.ip_address)
    if not public:
        raise ValueError(f"no public IPv4 among {sorted(ipv4s or [])}")
    return public[0]


def balancer_rules(admin_cidrs: list[str], node_cidrs: list[str]) -> list[dict]:
    """Inbound rules of the API NodeBalancer's firewall (policy DROP)."""
    v4, v6 = _split(admin_cidrs)
    v4 = v4 + list(node_cidrs)
    return [{"label": "kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": str(API_PORT),
             **({"ipv4s": v4} if v4 else {}), **({"ipv6s": v6} if v6 else {})}]


def reachable_pools(pools: list[GpuPoolSpec], provider: bool) -> list[GpuPoolSpec]:
    """The GPU pools as the platform may count on them: an autoscaled pool with no node-group provider
    (nothing creates its nodes) at its minNodes, so Kueue offers no quota for nodes that never come."""
    return [p if provider or not node_groups.autoscaled(p) else dataclasses.replace(p, max_nodes=p.min_nodes)
            for p in pools]


def now_utc() -> datetime.datetime:
    """Wall-clock time for token rotation; GPU_PLATFORM_TODAY (ISO date) pins it for tests and previews."""
    from gpu_platform.data.versions_calendar import TODAY_ENV, today

    if os.environ.get(TODAY_ENV, "").strip():  # checked by today(): a real date, or CalendarError naming it
        return datetime.datetime.combine(today(), datetime.time(), tzinfo=datetime.timezone.utc)
    return datetime.datetime.now(datetime.timezone.utc)


def _ca(name: str, common_name: str, opts: pulumi.ResourceOptions) -> tuple[tls.PrivateKey, tls.SelfSignedCert]:
    """linode.pki: program: one of the program's CAs (gpu-platform 0.2.0's resources, names and inputs unchanged)."""
    key = tls.PrivateKey(f"{name}-key", algorithm="ECDSA", ecdsa_curve="P256", opts=opts)
    cert = tls.SelfSignedCert(
        name,
        private_key_pem=key.private_key_pem,
        is_ca_certificate=True,
        validity_period_hours=10 * 365 * 24,
        allowed_uses=["cert_signing", "crl_signing", "digital_signature", "key_encipherment"],
        subject={"common_name": common_name, "organization": "gpu-platform"},
        opts=opts,
    )
    return key, cert


class LinodeKubeadmCluster(pulumi.ComponentResource):
    """Outputs: `handle` (ClusterHandle), `api_endpoint`, `kubeconfig` (secret), `user_data` (per node)."""

    def __init__(self, name: str, args: LinodeClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:linode:KubeadmCluster", name, None, opts)
        cfg = args.config
        section = cfg.linode
        assert section is not None, "validated by gpu_platform.config.stack"
        child = pulumi.ResourceOptions(parent=self)
        tags = linode_tags(cfg)
        pools = gpu_pool_specs(cfg)
        cp_count = section.control_plane.count
        addresses = render.vpc_addresses(section.subnet_cidr, cp_count, section.system_pool.max_nodes,
                                         [p.max_nodes for p in pools])
        cp_ips = addresses.control_planes

        # --- Control-plane keys -----------------------------------------------------------------
        # linode.pki: cluster (the default): cp-0's kubeadm generates the CAs; the program holds no CA key.
        # linode.pki: program (clusters created by gpu-platform 0.2.0): the program's pulumi-tls CAs, in user
        # data and state, exactly as 0.2.0 registered them, so `pulumi up` of such a stack changes nothing.
        program_pki = section.pki == "program"
        pki: Optional[pulumi.Output[render.ControlPlanePki]] = None
        if program_pki:
            ca_key, ca_cert = _ca(f"{name}-ca", "kubernetes", child)
            fp_key, fp_cert = _ca(f"{name}-front-proxy-ca", "front-proxy-ca", child)
            etcd_key, etcd_cert = _ca(f"{name}-etcd-ca", "etcd-ca", child)
            sa_key = tls.PrivateKey(f"{name}-service-account-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
            secrets_key = random.RandomBytes(f"{name}-secrets-encryption-key", length=32, opts=child)
            pki = pulumi.Output.all(ca_cert.cert_pem, ca_key.private_key_pem, fp_cert.cert_pem, fp_key.private_key_pem,
                                    etcd_cert.cert_pem, etcd_key.private_key_pem, sa_key.private_key_pem,
                                    sa_key.public_key_pem, secrets_key.base64).apply(lambda v: render.ControlPlanePki(*v))
        else:
            # The certificate key (kubeadm --upload-certs) decrypts the kubeadm-certs Secret; only control planes get it.
            certificate_key = random.RandomBytes(f"{name}-kubeadm-certificate-key", length=32, opts=child)
            # Secrets at rest: the API server's encryption key (render.encryption_configuration).
            secrets_key = random.RandomBytes(f"{name}-secrets-encryption-key", length=32, opts=child)

        # Bootstrap tokens: one per node, written once into its user data (kept as first written,
        # ignore_changes), and renewed by every `pulumi up`: the Secret's expiry is the end of the next
        # rotation window. A node the program replaces boots with that same user data while the token is
        # valid; one whose stack is left alone for a window can no longer join.
        _, window_end = render.token_window(now_utc(), TOKEN_ROTATION_DAYS)
        expiration = render.token_expiration(window_end, TOKEN_ROTATION_DAYS)
        join_tokens: list[tuple[str, random.RandomString, random.RandomString]] = []

        def node_token(role_name: str) -> pulumi.Output[str]:
            token_id = random.RandomString(f"{name}-{role_name}-join-token-id", length=6, upper=False,
                                           special=False, opts=child)
            token_secret = random.RandomString(f"{name}-{role_name}-join-token-secret", length=16, upper=False,
                                               special=False, opts=child)
            join_tokens.append((role_name, token_id, token_secret))
            return pulumi.Output.secret(pulumi.Output.all(token_id.result, token_secret.result)
                                        .apply(lambda t: render.bootstrap_token(t[0], t[1])))

        # cp-0's init token (kubeadm creates it, 24 h): the program checks cluster-info's signature with it.
        init_token: pulumi.Output[str] = pulumi.Output.from_input("")
        if not program_pki:
            init_id = random.RandomString(f"{name}-init-token-id", length=6, upper=False, special=False, opts=child)
            init_secret = random.RandomString(f"{name}-init-token-secret", length=16, upper=False, special=False,
                                              opts=child)
            init_token = pulumi.Output.secret(pulumi.Output.all(init_id.result, init_secret.result)
                                              .apply(lambda t: render.bootstrap_token(t[0], t[1])))
        # The read-back token (render.READBACK_TOKEN_PATH): cp-0 creates its Secret after kubeadm init, with no expiry
        # and the signing usage only (it authenticates nobody), so the program and a replaced cp-0 can always check
        # cluster-info, however long the stack was left alone.
        readback_token: pulumi.Output[str] = pulumi.Output.from_input("")
        if not program_pki:
            rb_id = random.RandomString(f"{name}-readback-token-id", length=6, upper=False, special=False, opts=child)
            rb_secret = random.RandomString(f"{name}-readback-token-secret", length=16, upper=False, special=False,
                                            opts=child)
            readback_token = pulumi.Output.secret(pulumi.Output.all(rb_id.result, rb_secret.result)
                                                  .apply(lambda t: render.bootstrap_token(t[0], t[1])))

        # Admin access: the key stays in Pulumi state; control planes get only the CSR and sign it
        # (render.admin_cert_script), or, with linode.pki: program, the program signs it with its CA.
        admin_key = tls.PrivateKey(f"{name}-admin-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        admin_csr = tls.CertRequest(
            f"{name}-admin-csr", private_key_pem=admin_key.private_key_pem,
            # kubeadm binds this group to cluster-admin (kubeadm >= 1.29).
            subject={"common_name": "gpu-platform-admin", "organization": "kubeadm:cluster-admins"}, opts=child)
        admin_cert: Optional[tls.LocallySignedCert] = None
        if program_pki:
            admin_cert = tls.LocallySignedCert(
                f"{name}-admin-cert", cert_request_pem=admin_csr.cert_request_pem,
                ca_cert_pem=ca_cert.cert_pem, ca_private_key_pem=ca_key.private_key_pem,
                validity_period_hours=365 * 24, early_renewal_hours=30 * 24,
                allowed_uses=["digital_signature", "key_encipherment", "client_auth"], opts=child)

        def cp_keys(join_token: pulumi.Output[str], init: bool) -> pulumi.Output[render.ControlPlaneKeys]:
            return pulumi.Output.all(certificate_key.hex, secrets_key.base64, join_token, admin_csr.cert_request_pem,
                                     init_token if init else "", readback_token if init else "").apply(
                lambda v: render.ControlPlaneKeys(certificate_key=v[0], secrets_encryption_key=v[1], join_token=v[2],
                                                  admin_csr=v[3], init_token=v[4], readback_token=v[5]))

        # --- Network -------------------------------------------------------------------------
        vpc = linode.Vpc(f"{name}-vpc", label=f"{cfg.name_prefix}-vpc", region=section.region,
                         description=f"gpu-platform {cfg.environment} node network", opts=child)
        subnet = linode.VpcSubnet(f"{name}-subnet", vpc_id=vpc.id.apply(int), label=f"{cfg.name_prefix}-nodes",
                                  ipv4=section.subnet_cidr, opts=child)
        ssh_enabled = bool(section.ssh_authorized_keys)
        firewall = linode.Firewall(
            f"{name}-firewall",
            label=f"{cfg.name_prefix}-nodes",
            inbound_policy="DROP",
            outbound_policy="ACCEPT",
            inbounds=firewall_rules(cfg.admin_cidrs, section.subnet_cidr, section.pod_cidr, ssh_enabled,
                                    api_balancer=cp_count > 1),
            tags=tags,
            opts=child,
        )

        # --- API endpoint --------------------------------------------------------------------
        # HA: a NodeBalancer whose backends are the control planes' private IPs (works on every
        # account; VPC backends need the v4beta API and account access). Single control plane: a
        # reserved IP if the account has them (linode.reservedApiIp), else cp-0's own address.
        balancer: Optional[linode.NodeBalancer] = None
        reserved_ip: Optional[linode.ReservedIp] = None
        if cp_count > 1:
            balancer = linode.NodeBalancer(
                f"{name}-api-lb", label=f"{cfg.name_prefix}-api", region=section.region,
                client_conn_throttle=20, tags=tags, opts=child)
            endpoint_host: pulumi.Output[str] = balancer.ipv4
        elif section.reserved_api_ip:
            reserved_ip = linode.ReservedIp(f"{name}-api-ip", region=section.region, tags=tags, opts=child)
            endpoint_host = reserved_ip.address
        else:
            endpoint_host = pulumi.Output.from_input(cp_ips[0])

        def cluster_spec(host: str) -> render.ClusterSpec:
            # Nodes use the VPC address of a single control plane (the firewall keeps 6443 off the
            # internet) and the NodeBalancer of an HA one. Admin clients verify the name
            # "kubernetes" (always in the certificate), so the public address need not be a SAN.
            endpoint = f"{host}:{API_PORT}" if balancer is not None else f"{cp_ips[0]}:{API_PORT}"
            sans = [host, *cp_ips] if host not in cp_ips else list(cp_ips)
            return render.ClusterSpec(
                name=cfg.name_prefix, kubernetes_minor=cfg.kubernetes_version, control_plane_endpoint=endpoint,
                pod_cidr=section.pod_cidr, service_cidr=section.service_cidr, cert_sans=sans)

        def instance(role_name: str, label: str, plan: str, vpc_ip: str, user_data: pulumi.Output[str],
                     extra_tags: dict[str, str], depends: list[pulumi.Resource], control_plane: bool) -> linode.Instance:
            pinned_ipv4 = reserved_ip is not None and role_name == "cp-0"
            return linode.Instance(
                f"{name}-{role_name}",
                label=label,
                region=section.region,
                type=plan,
                image=section.image,
                tags=linode_tags(cfg, **extra_tags),
                disk_encryption="enabled" if section.disk_encryption else "disabled",
                firewall_id=firewall.id.apply(int),
                authorized_keys=section.ssh_authorized_keys or None,
                # A private IPv4: NodeBalancer backends (API, LoadBalancer Services via the CCM).
                private_ip=True,
                ipv4s=[reserved_ip.address] if pinned_ipv4 else None,
                interfaces=[
                    {"purpose": "public"},
                    {"purpose": "vpc", "subnet_id": subnet.id.apply(int), "ipv4": {"vpc": vpc_ip}},
                ],
                metadatas=[{"user_data": pulumi.Output.secret(user_data.apply(render.encode_user_data))}],
                booted=True,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=depends,
                    # `ipv4s` with a reserved address: the provider reads back [reserved, private]
                    # (Optional+Computed, ForceNew); compared with [reserved] it would replace cp-0.
                    ignore_changes=NODE_IGNORE_CHANGES + (["ipv4s"] if pinned_ipv4 else []),
                    # Label and VPC address are fixed per node: the old node must go first.
                    delete_before_replace=True,
                    protect=control_plane and section.protect_control_planes),
            )

        # --- Checkpoint bucket ---------------------------------------------------------------
        # Versioning and lifecycle rules need object-storage keys: a provider that makes temporary
        # keys at apply time from the deployer's token (pulumi-linode `obj_use_temp_keys`).
        # checkpointBucket.onDestroy (gpu_platform/config/bucket_lifecycle.py): `retain` keeps the bucket out of the
        # provider's hands at destroy; `delete` lets the provider empty it (objects and versions) first.
        deletion = BucketDeletion.of(cfg.checkpoint_bucket.on_destroy)
        # A read-only run (drift.yml) keeps the state's token: another token would be an update of this provider,
        # reported by `--expect-no-changes` every day (components/read_only.py).
        objects = linode.Provider(f"{name}-objects", token=args.deploy_token, obj_use_temp_keys=True,
                                  obj_bucket_force_delete=deletion.force_destroy,
                                  opts=pulumi.ResourceOptions(parent=self, ignore_changes=keep_from_state("token")))
        suffix = random.RandomString(f"{name}-bucket-suffix", length=BUCKET_SUFFIX_LENGTH, upper=False, special=False, opts=child)
        bucket = linode.ObjectStorageBucket(
            f"{name}-checkpoints", region=section.region,
            label=suffix.result.apply(lambda s: bucket_label(cfg.name_prefix, cfg.owner, s)),
            acl="private", versioning=section.checkpoint_bucket_versioning,
            lifecycle_rules=[{"id": "expire-old-checkpoint-versions", "enabled": True,
                              "noncurrent_version_expiration": {"days": 30},
                              "abort_incomplete_multipart_upload_days": 7},
                             # Snapshots earlier releases put here (now in the etcd bucket below) still expire.
                             {"id": "expire-etcd-snapshots", "enabled": True, "prefix": f"{render.ETCD_SNAPSHOT_PREFIX}/",
                              "expiration": {"days": ETCD_SNAPSHOT_RETENTION_DAYS}}],
            opts=pulumi.ResourceOptions(parent=self, provider=objects, retain_on_delete=deletion.retain_on_delete))
        # What training pods use: a key limited to this bucket.
        bucket_key = linode.ObjectStorageKey(
            f"{name}-checkpoints-key", label=f"{cfg.name_prefix}-checkpoints",
            bucket_accesses=[{"bucket_name": bucket.label, "region": section.region, "permissions": "read_write"}],
            opts=child)

        # --- Etcd snapshots: a bucket and a key of their own (every Secret of the cluster is in a snapshot;
        # the checkpoint bucket's key is in every training pod). Each snapshot is encrypted on the control
        # plane to a certificate whose private key only Pulumi state holds (stack output etcdBackupKey).
        etcd_bucket = linode.ObjectStorageBucket(
            f"{name}-etcd-backups", region=section.region,
            label=suffix.result.apply(lambda s: bucket_label(cfg.name_prefix, cfg.owner, s, kind="etcd")),
            acl="private",
            # Snapshots only: the cluster record (render.CLUSTER_RECORD_KEY) must outlive them.
            lifecycle_rules=[{"id": "expire-etcd-snapshots", "enabled": True, "prefix": f"{render.ETCD_SNAPSHOT_PREFIX}/",
                              "expiration": {"days": ETCD_SNAPSHOT_RETENTION_DAYS},
                              "abort_incomplete_multipart_upload_days": 1}],
            opts=pulumi.ResourceOptions(parent=self, provider=objects, retain_on_delete=deletion.retain_on_delete))
        etcd_key = linode.ObjectStorageKey(
            f"{name}-etcd-backup-key", label=f"{cfg.name_prefix}-etcd-backup",
            bucket_accesses=[{"bucket_name": etcd_bucket.label, "region": section.region, "permissions": "read_write"}],
            opts=child)
        backup_key = tls.PrivateKey(f"{name}-etcd-backup-recipient-key", algorithm="RSA", rsa_bits=4096, opts=child)
        backup_cert = tls.SelfSignedCert(
            f"{name}-etcd-backup-recipient", private_key_pem=backup_key.private_key_pem,
            validity_period_hours=10 * 365 * 24, allowed_uses=["key_encipherment", "data_encipherment"],
            subject={"common_name": f"{cfg.name_prefix} etcd backups", "organization": "gpu-platform"}, opts=child)
        pulumi.export("etcdBackupKey", pulumi.Output.secret(backup_key.private_key_pem))
        pulumi.export("etcdBackupBucket", etcd_bucket.label)
        etcd_backup = pulumi.Output.secret(pulumi.Output.all(etcd_bucket.label, etcd_bucket.s3_endpoint, etcd_key.access_key,
                                                             etcd_key.secret_key, backup_cert.cert_pem).apply(
            lambda v: render.EtcdBackup(bucket=v[0], endpoint=v[1], region=section.region, access_key=v[2],
                                        secret_key=v[3], recipient_cert=v[4])))

        # --- Control planes ------------------------------------------------------------------
        self.user_data: dict[str, pulumi.Output[str]] = {}
        control_planes: list[linode.Instance] = []
        ca_read: Optional[command.local.Command] = None
        cp_names = [f"{cfg.name_prefix}-cp-{i}" for i in range(cp_count)]

        # The read-back's source on stdin: the command's text names no path, so it is the same wherever the package
        # is installed (a changed path would re-run it: pulumi-command runs `create` again on any input change).
        cluster_info_source = render.cluster_info_script()

        def public_api_address(cp0: linode.Instance) -> pulumi.Output[str]:
            """Where the program reaches the API: the NodeBalancer, the reserved IP, or cp-0's public IPv4."""
            return (balancer.ipv4 if balancer is not None else
                    reserved_ip.address if reserved_ip is not None else cp0.ipv4s.apply(public_ipv4))

        if program_pki:
            assert pki is not None
            # gpu-platform 0.2.0's control planes: every one holds the CAs and joins on its own, any time.
            for i in range(cp_count):
                node = render.NodeSpec(name=cp_names[i], vpc_ip=cp_ips[i])
                if i == 0:
                    peers = cp_ips[1:]
                    doc = pulumi.Output.all(endpoint_host, pki, etcd_backup).apply(
                        lambda v, node=node, peers=peers: render.node_user_data(
                            "init", node, render.kubeadm_init_config(cluster_spec(v[0]), node), cfg.kubernetes_version,
                            gpu=False, endpoint=cluster_spec(v[0]).control_plane_endpoint, peers=peers, pki=v[1],
                            join_config=render.kubeadm_control_plane_join_config(cluster_spec(v[0]), node,
                                                                                 program_pki=True),
                            etcd_backup=v[2]))
                else:
                    peers = [ip for j, ip in enumerate(cp_ips) if j != i]
                    doc = pulumi.Output.all(endpoint_host, pki, etcd_backup).apply(
                        lambda v, node=node, peers=peers: render.node_user_data(
                            "join-control-plane", node,
                            render.kubeadm_control_plane_join_config(cluster_spec(v[0]), node, program_pki=True),
                            cfg.kubernetes_version, gpu=False, endpoint=cluster_spec(v[0]).control_plane_endpoint,
                            peers=peers, pki=v[1], etcd_backup=v[2]))
                doc = pulumi.Output.secret(doc)
                self.user_data[f"control-plane-{i}"] = doc
                # Later control planes retry their join until cp-0 answers (systemd unit).
                control_planes.append(instance(f"cp-{i}", cp_names[i], section.control_plane.type, cp_ips[i], doc,
                                               {"role": "control-plane"}, control_planes[:1], control_plane=True))
            ca_pem: pulumi.Output[str] = ca_cert.cert_pem
            ca_hash = ca_cert.cert_pem.apply(render.discovery_hash)
            joins_after: list[pulumi.Resource] = control_planes[:1]
            public_api_ip = public_api_address(control_planes[0])
        else:
            # cp-0 first; the others once the program has read the CA back from cp-0's signed cluster-info
            # (their joins pin its hash), below.
            cp_tokens = [node_token(f"cp-{i}") for i in range(cp_count)]
            node0 = render.NodeSpec(name=cp_names[0], vpc_ip=cp_ips[0])
            doc0 = pulumi.Output.secret(pulumi.Output.all(endpoint_host, cp_keys(cp_tokens[0], init=True), etcd_backup).apply(
                lambda v: render.node_user_data(
                    "init", node0,
                    render.kubeadm_init_config(cluster_spec(v[0]), node0, v[1].init_token, v[1].certificate_key),
                    cfg.kubernetes_version, gpu=False, endpoint=cluster_spec(v[0]).control_plane_endpoint,
                    peers=cp_ips[1:], keys=v[1], etcd_backup=v[2], peer_names=cp_names[1:],
                    join_config=render.kubeadm_control_plane_join_config(cluster_spec(v[0]), node0, v[1].join_token,
                                                                         render.CA_HASH_FROM_PEERS,
                                                                         v[1].certificate_key))))
            self.user_data["control-plane-0"] = doc0
            control_planes.append(instance("cp-0", cp_names[0], section.control_plane.type, cp_ips[0], doc0,
                                           {"role": "control-plane"}, [], control_plane=True))
            public_api_ip = public_api_address(control_planes[0])

            # The CA, read back from cp-0 (cluster_info.py: cluster-info signed for the init token, or cp-0's
            # own token once a replaced cp-0 joined the survivors). Run again when cp-0 is replaced. A cluster
            # whose cluster-info is signed for neither (one gpu-platform 0.2.0 created: linode.pki: program)
            # fails here, naming that key, before anything else changes.
            ca_read = command.local.Command(
                f"{name}-cluster-ca",
                create=READ_BACK_CA,
                stdin=cluster_info_source,
                environment={"API_HOST": public_api_ip,
                             "TOKENS": pulumi.Output.secret(pulumi.Output.all(init_token, readback_token, cp_tokens[0])
                                                            .apply("\n".join))},
                triggers=[control_planes[0].id],
                opts=pulumi.ResourceOptions(parent=self, depends_on=control_planes[:1]))
            ca_pem = ca_read.stdout.apply(render.checked_ca_pem)
            ca_hash = ca_pem.apply(render.discovery_hash)
            # The record a new cp-0 reads at boot (render.cluster_record_script): this cluster exists, never
            # initialise another. Every further node is created after it.
            record = linode.ObjectStorageObject(
                f"{name}-cluster-record", bucket=etcd_bucket.label, region=section.region,
                key=render.CLUSTER_RECORD_KEY, content=ca_pem, content_type="application/x-pem-file",
                opts=pulumi.ResourceOptions(parent=self, provider=objects, depends_on=[ca_read]))
            joins_after = [record]

            for i in range(1, cp_count):
                node = render.NodeSpec(name=cp_names[i], vpc_ip=cp_ips[i])
                peers = [ip for j, ip in enumerate(cp_ips) if j != i]
                peer_names = [n for j, n in enumerate(cp_names) if j != i]
                doc = pulumi.Output.secret(pulumi.Output.all(endpoint_host, cp_keys(cp_tokens[i], init=False),
                                                             etcd_backup, ca_pem, ca_hash).apply(
                    lambda v, node=node, peers=peers, peer_names=peer_names: render.node_user_data(
                        "join-control-plane", node,
                        render.kubeadm_control_plane_join_config(cluster_spec(v[0]), node, v[1].join_token, v[4],
                                                                 v[1].certificate_key),
                        cfg.kubernetes_version, gpu=False, endpoint=cluster_spec(v[0]).control_plane_endpoint,
                        peers=peers, keys=v[1], etcd_backup=v[2], cluster_ca_pem=v[3], peer_names=peer_names)))
                self.user_data[f"control-plane-{i}"] = doc
                # They retry their join until their token's Secret exists and the kubeadm-certs Secret is there.
                control_planes.append(instance(f"cp-{i}", cp_names[i], section.control_plane.type, cp_ips[i], doc,
                                               {"role": "control-plane"}, joins_after, control_plane=True))

        if balancer is not None:
            api_config = linode.NodeBalancerConfig(
                f"{name}-api-lb-6443", nodebalancer_id=balancer.id.apply(int), port=API_PORT, protocol="tcp",
                algorithm="leastconn", check="connection", check_interval=10, check_timeout=5, check_attempts=3,
                opts=child)
            for i, cp in enumerate(control_planes):
                linode.NodeBalancerNode(
                    f"{name}-api-lb-cp-{i}", nodebalancer_id=balancer.id.apply(int), config_id=api_config.id.apply(int),
                    label=f"cp-{i}", address=cp.private_ip_address.apply(lambda ip: f"{ip}:{API_PORT}"),
                    mode="accept", opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))

        # --- Workers: system (untainted CPU) and GPU -----------------------------------------
        def worker_doc(node: render.NodeSpec, gpu: bool, role_name: str) -> pulumi.Output[str]:
            token = node_token(role_name)
            return pulumi.Output.secret(pulumi.Output.all(endpoint_host, token, ca_hash, ca_pem).apply(
                lambda v: render.node_user_data(
                    "join", node, render.kubeadm_worker_join_config(cluster_spec(v[0]), node, v[1], v[2]),
                    cfg.kubernetes_version, gpu=gpu, endpoint=cluster_spec(v[0]).control_plane_endpoint,
                    cluster_ca_pem=v[3], program_pki=program_pki)))

        workers: list[linode.Instance] = []
        expected: list[dict] = [{"name": f"{cfg.name_prefix}-cp-{i}", "gpus": 0} for i in range(cp_count)]
        for i, ip in enumerate(addresses.system):
            label = f"{cfg.name_prefix}-system-{i}"
            node = render.NodeSpec(name=label, vpc_ip=ip, labels={render.ROLE_LABEL: render.SYSTEM_ROLE})
            doc = worker_doc(node, gpu=False, role_name=f"system-{i}")
            self.user_data[f"system-{i}"] = doc
            workers.append(instance(f"system-{i}", label, section.system_pool.instance_type, ip, doc,
                                    {"role": "system-worker"}, joins_after, control_plane=False))
            expected.append({"name": label, "gpus": 0})

        scaled: list[tuple[GpuPoolSpec, list[str], dict[str, str]]] = []  # autoscaled pools (node_groups.py)
        for pool, ips in zip(pools, addresses.gpu_pools):
            pool_tags = {"role": "gpu-worker", "gpu-pool": pool.name, "capacity": pool.capacity,
                         **approval_tags(next(p.approved_on_demand for p in cfg.gpu_pools if p.name == pool.name), "linode")}
            if node_groups.autoscaled(pool):
                scaled.append((pool, ips, pool_tags))  # the node-group provider creates these
                continue
            for i, ip in enumerate(ips):
                label = f"{cfg.name_prefix}-{pool.name}-{i}"
                node = render.NodeSpec(name=label, vpc_ip=ip, labels=dict(pool.node_labels), taints=list(pool.taints))
                doc = worker_doc(node, gpu=True, role_name=f"{pool.name}-{i}")
                self.user_data[f"gpu-{pool.name}-{i}"] = doc
                workers.append(instance(
                    f"{pool.name}-{i}", label, pool.instance_type, ip, doc, pool_tags,
                    joins_after, control_plane=False))
                expected.append({"name": label, "gpus": pool.gpus_per_node})

        if balancer is not None:
            # The NodeBalancer proxies, so the node firewall cannot see who called: it gets its own
            # firewall with the admins and the nodes themselves (kubelets use the balanced endpoint).
            # Each node's public address: it calls the balancer's public IPv4 from there.
            nodes = control_planes + workers
            node_ips = pulumi.Output.all(*[n.ipv4s.apply(public_ipv4) for n in nodes]).apply(lambda ips: [f"{ip}/32" for ip in ips])
            lb_firewall = linode.Firewall(
                f"{name}-api-lb-firewall",
                label=f"{cfg.name_prefix}-api-lb",
                inbound_policy="DROP",
                outbound_policy="ACCEPT",
                inbounds=node_ips.apply(lambda ips: balancer_rules(cfg.admin_cidrs, ips)),
                tags=tags,
                opts=child,
            )
            linode.FirewallDevice(f"{name}-api-lb-firewall-attach", firewall_id=lb_firewall.id.apply(int),
                                  entity_id=balancer.id.apply(int), entity_type="nodebalancer", opts=child)

        # --- Kubeconfig, API wait, provider --------------------------------------------------
        server = public_api_ip.apply(lambda ip: f"https://{ip}:{API_PORT}")
        api_after: list[pulumi.Resource] = list(control_planes)
        if admin_cert is not None:
            # linode.pki: program: the program signed the admin certificate with its own CA.
            admin_cert_pem: pulumi.Output[str] = admin_cert.cert_pem
        else:
            # The admin certificate cp-0 signed for the program's key, read over TLS verified with the CA; read
            # again each renewal window (control planes re-sign it ADMIN_CERT_RENEW_DAYS before it expires).
            assert ca_read is not None
            renew_window, _ = render.token_window(now_utc(), ADMIN_CERT_READ_DAYS)
            admin_read = command.local.Command(
                f"{name}-admin-cert",
                create=READ_ADMIN_CERT,
                stdin=cluster_info_source,
                environment={"API_HOST": public_api_ip, "CLUSTER_CA_PEM": ca_pem,
                             "ADMIN_PUBLIC_KEY_PEM": admin_key.public_key_pem},
                triggers=[ca_pem, renew_window],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ca_read]))
            admin_cert_pem = pulumi.Output.all(admin_read.stdout, admin_key.public_key_pem, ca_pem).apply(
                lambda v: render.checked_admin_cert(v[0], v[1], v[2]))
            api_after.append(admin_read)
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(server, ca_pem, admin_cert_pem,
                                                                 admin_key.private_key_pem).apply(
            lambda v: render.admin_kubeconfig(cfg.name_prefix, v[0], v[1], v[2], v[3])))
        api_ready = command.local.Command(
            f"{name}-wait-for-api",
            create=render.wait_for_api_script(),
            interpreter=["/bin/bash", "-c"],
            environment={"API_HOST": public_api_ip, "CLUSTER_CA_PEM": ca_pem},
            opts=pulumi.ResourceOptions(parent=self, depends_on=api_after),
        )
        gate_env = {
            "GATE_SERVER": server,
            "GATE_CA_PEM": ca_pem,
            "GATE_CLIENT_CERT_PEM": admin_cert_pem,
            "GATE_CLIENT_KEY_PEM": pulumi.Output.secret(admin_key.private_key_pem),
        }
        # Removing a worker (a smaller pool, a replaced node) drains it and deletes its Node first:
        # the hook runs before Linode deletes the instance, while the control planes still run.
        nodeops = program_relative("components/linode/nodeops.py")
        for worker in workers:
            label = worker.label
            command.local.Command(
                f"{worker.pulumi_resource_name}-leave",
                delete=label.apply(lambda n: f"python3 {nodeops} leave {n}"),
                environment=gate_env,
                triggers=[worker.id],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[worker, *control_planes]),
            )
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(parent=self, depends_on=[api_ready]))

        # Each node's join token, as kubeadm reads it: a Secret whose expiry each `pulumi up` renews.
        self.join_tokens: list[k8s.core.v1.Secret] = []
        for role_name, token_id, token_secret in join_tokens:
            token_doc = pulumi.Output.all(token_id.result, token_secret.result).apply(
                lambda t: render.bootstrap_token_secret(t[0], t[1], expiration))
            self.join_tokens.append(k8s.core.v1.Secret(
                f"{name}-{role_name}-join-token",
                metadata=token_doc.apply(lambda d: d["metadata"]),
                type="bootstrap.kubernetes.io/token",
                string_data=pulumi.Output.secret(token_doc.apply(lambda d: d["stringData"])),
                opts=pulumi.ResourceOptions(parent=self, provider=provider),
            ))

        # --- Add-ons, then the readiness gate ------------------------------------------------
        installed = addons.LinodeAddons(
            f"{name}-addons", addons_args(cfg, args.api_token),
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[api_ready, vpc, subnet]),
        )
        expected_json = json.dumps(expected, sort_keys=True)
        nodes_ready = command.local.Command(
            f"{name}-nodes-ready",
            create=f"python3 {program_relative('components/linode/readiness.py')}",
            environment={**gate_env, "GATE_EXPECTED": expected_json},
            # Runs again whenever the set of nodes changes (scaling, replacement).
            triggers=[expected_json, *[n.id for n in control_planes + workers]],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*workers, *installed.ready, *self.join_tokens]),
        )

        # --- In-place upgrades: one node-upgrade Job per node, one after another (upgrade.py) ---------
        # Named by the target release: a new kubernetesVersion (or patch pin) runs them, after the CNI,
        # CCM and CSI have moved; on a cluster already there each exits at once. The autoscaled pools'
        # nodes (the node-group provider's) last: one Job per pool finds them at run time.
        upgrades: list[pulumi.Resource] = []
        control_plane_upgrades: list[pulumi.Resource] = []
        image = versions.NODE_TOOLS_IMAGES.get(installed.cni_chart.version)
        if image is None:
            pulumi.log.warn(f"no node-upgrade image for the {section.cni} chart {installed.cni_chart.version}: "
                            "kubernetesVersion changes will not upgrade running nodes")
        else:
            cp_names = [f"{cfg.name_prefix}-cp-{i}" for i in range(cp_count)]
            worker_names = [n["name"] for n in expected if n["name"] not in set(cp_names)]
            pool_defs = [upgrade.AutoscaledPool(p.name, p.max_nodes) for p, _, _ in scaled]
            steps = upgrade.upgrade_order(cp_names, worker_names, pool_defs)
            shared, jobs = upgrade.upgrade_manifests(cp_names, worker_names, cfg.kubernetes_version, "ENDPOINT", image,
                                                     pool_defs)
            on_cluster = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[nodes_ready])
            rbac: list[pulumi.Resource] = []
            for obj in shared[:-1]:
                kind, meta = obj["kind"], obj["metadata"]
                suffix = "node-upgrade" if meta["name"] == upgrade.SERVICE_ACCOUNT else "pool-upgrade"
                if kind == "ServiceAccount":
                    rbac.append(k8s.core.v1.ServiceAccount(f"{name}-{suffix}", metadata=meta, opts=on_cluster))
                elif kind == "ClusterRole":
                    rbac.append(k8s.rbac.v1.ClusterRole(f"{name}-{suffix}", metadata=meta, rules=obj["rules"], opts=on_cluster))
                elif kind == "ClusterRoleBinding":
                    rbac.append(k8s.rbac.v1.ClusterRoleBinding(f"{name}-{suffix}", metadata=meta, role_ref=obj["roleRef"],
                                                               subjects=obj["subjects"], opts=on_cluster))
                elif kind == "Role":
                    rbac.append(k8s.rbac.v1.Role(f"{name}-{suffix}", metadata=meta, rules=obj["rules"], opts=on_cluster))
                elif kind == "RoleBinding":
                    rbac.append(k8s.rbac.v1.RoleBinding(f"{name}-{suffix}", metadata=meta, role_ref=obj["roleRef"],
                                                        subjects=obj["subjects"], opts=on_cluster))
                else:
                    raise ValueError(f"unexpected upgrade object {kind}")
            endpoint = endpoint_host.apply(lambda h: cluster_spec(h).control_plane_endpoint)
            patch = versions.KUBERNETES_PATCH[cfg.kubernetes_version]
            scripts = k8s.core.v1.ConfigMap(
                f"{name}-node-upgrade-scripts", metadata=shared[-1]["metadata"],
                data=endpoint.apply(lambda e: upgrade.script_config_map(patch, e, pool_defs, image)["data"]),
                opts=on_cluster)
            previous: list[pulumi.Resource] = [nodes_ready, *installed.ready, *rbac, scripts]
            for step, job in zip(steps, jobs):
                timeout = f"{upgrade.timeout_minutes(step)}m"
                created = k8s.batch.v1.Job(
                    f"{name}-upgrade-{'pool-' + step.pool if step.role == 'pool' else step.node}",
                    metadata=job["metadata"], spec=job["spec"],
                    opts=pulumi.ResourceOptions(
                        parent=self, provider=provider, depends_on=previous,
                        custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout)))
                upgrades.append(created)
                if step.role in ("apply", "control-plane"):
                    control_plane_upgrades.append(created)
                previous = [created]

        # --- Autoscaled GPU pools: the node-group provider and cluster-autoscaler (node_groups.py) ----
        # After the control planes' upgrade Jobs: cluster-autoscaler supports only its own Kubernetes minor
        # (kubernetes/autoscaler cluster-autoscaler/README.md, "Releases"), and its image and the provider's
        # pools.json follow kubernetesVersion, so neither may move before the control plane has.
        scaler_deployed = node_groups_deployed(cfg)
        # The provider's image: the published digest linode.nodeGroups.image, else built from this repository
        # into linode.imageRegistry (config/checks/linode.py refuses an autoscaled pool with neither).
        registries: list[NamedRegistry] = []

        def registry() -> NamedRegistry:
            if not registries:
                assert section.image_registry is not None and args.registry_password is not None, \
                    "validated by config/checks/linode.py and components/linode/__init__.py"
                registries.append(NamedRegistry(f"{name}-images", section.image_registry, args.registry_password,
                                                args.registry_pull_password, opts=child))
            return registries[0]

        provider_image: Optional[pulumi.Input[str]] = section.node_groups.image
        provider_pull: Optional[pulumi.Output[str]] = None
        if scaled and provider_image is None:
            provider_image = registry().image(LINODE_NODE_GROUPS)
            provider_pull = registry().pull_config
        if scaled:
            node_groups.LinodeNodeGroups(f"{name}-node-groups", node_groups.LinodeNodeGroupsArgs(
                config=cfg, pools=[p for p, _, _ in scaled], pool_addresses=[a for _, a, _ in scaled],
                pool_tags=[linode_tags(cfg, **t) for _, _, t in scaled], common_tags=tags,
                image=provider_image, image_pull_config=provider_pull,
                # Its own token, never the CCM/CSI one (create_cluster requires linode-node-groups:token).
                api_token=args.node_groups_token,
                fixed_gpus=sum(p.max_gpus for p in pools if not node_groups.autoscaled(p)),
                deploy_token=args.deploy_token or args.api_token, firewall_id=firewall.id, subnet_id=subnet.id,
                control_plane_endpoint=endpoint_host.apply(lambda h: cluster_spec(h).control_plane_endpoint),
                k8s_provider=provider, network=[firewall, subnet], after=control_plane_upgrades),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*installed.ready]))

        training = training_image(cfg, registry if section.image_registry is not None else None)
        self.api_endpoint = server
        self.handle = cluster_handle(
            cfg, kubeconfig=self.kubeconfig, provider=provider,
            checkpoint=checkpoint_store(section.region, bucket.label, bucket.s3_endpoint, bucket_key.access_key,
                                        bucket_key.secret_key),
            ready=[*installed.ready, nodes_ready, *upgrades[-1:]], endpoint=server, scaler_deployed=scaler_deployed,
            training_image=training,
            # Pods in `training` pull the built training image with the registry's pull Secret (platform/training.py).
            image_pull_config=(registries[0].pull_config if training is not None and registries
                               and cfg.platform.training_image.image is None else None),
        )
        self.register_outputs({"apiEndpoint": server, "kubeconfig": self.kubeconfig})


# --- What the cluster hands the platform, and the add-ons' arguments: pure of any Linode resource, so the engine run's
# cloud-layer shim (gpu_platform/rehearsal/shims.py LinodeClusterShim) builds them from the same functions. ----------

def addons_args(cfg: StackConfig, api_token: pulumi.Input[str]) -> addons.AddonsArgs:
    """LinodeAddons' arguments for the stack (the CNI, the CCM and CSI driver with the cluster's token, the device
    plugin): from the stack file alone."""
    section = cfg.linode
    assert section is not None, "validated by gpu_platform.config.stack"
    cp_ips = render.vpc_addresses(section.subnet_cidr, section.control_plane.count, section.system_pool.max_nodes,
                                  [p.max_nodes for p in gpu_pool_specs(cfg)]).control_planes
    return addons.AddonsArgs(cni=section.cni, pod_cidr=section.pod_cidr, kubernetes_minor=cfg.kubernetes_version,
                             region=section.region,
                             running_minor=section.control_plane_version
                             if section.control_plane_version != cfg.kubernetes_version else None,
                             api_token=api_token, api_host=cp_ips[0],
                             vpc_label=f"{cfg.name_prefix}-vpc", subnet_label=f"{cfg.name_prefix}-nodes")


def checkpoint_store(region: str, bucket_label: pulumi.Input[str], s3_endpoint: Optional[pulumi.Input[str]],
                     access_key: pulumi.Input[str], secret_key: pulumi.Input[str]) -> CheckpointStore:
    """The checkpoint bucket as training pods reach it: its s3:// URL, the endpoint and region, and the bucket's own
    key as secret environment."""
    env: dict[str, pulumi.Input[str]] = {"AWS_REGION": region}
    if s3_endpoint is not None:
        env = {"AWS_ENDPOINT_URL_S3": pulumi.Output.from_input(s3_endpoint).apply(lambda e: f"https://{e}"), **env}
    return CheckpointStore(
        url=pulumi.Output.from_input(bucket_label).apply(lambda b: f"s3://{b}"), env=env,
        credentials=pulumi.Output.secret(pulumi.Output.all(access_key, secret_key).apply(
            lambda k: {"AWS_ACCESS_KEY_ID": k[0], "AWS_SECRET_ACCESS_KEY": k[1]})))


def cluster_handle(cfg: StackConfig, *, kubeconfig: pulumi.Output[str], provider: k8s.Provider,
                   checkpoint: CheckpointStore, ready: list[pulumi.Resource], endpoint: Optional[pulumi.Output[str]],
                   scaler_deployed: bool, training_image: Optional[pulumi.Output[str]] = None,
                   image_pull_config: Optional[pulumi.Output[str]] = None) -> ClusterHandle:
    """The ClusterHandle a Linode cluster hands the platform: its pools as Kueue may count on them, the default
    StorageClass the add-ons install, the alert rules (etcd snapshots, the API tokens' stated expiry), the
    node-exporter textfile folder, the system pool."""
    section = cfg.linode
    assert section is not None, "validated by gpu_platform.config.stack"
    return ClusterHandle(
        cloud="linode",
        name=cfg.name_prefix,
        kubeconfig=kubeconfig,
        provider=provider,
        # What Kueue may offer: a pool nothing scales stays at minNodes (reachable_pools).
        gpu_pools=reachable_pools(gpu_pool_specs(cfg), scaler_deployed),
        default_storage_class=addons.DEFAULT_STORAGE_CLASS,
        checkpoint=checkpoint,
        gpu_device_plugin_installed=True,
        ready=ready,
        endpoint=endpoint,
        alert_rules=[addons.etcd_backup_rule(),
                     *([addons.token_expiry_rule(section.api_token_expires, section.node_groups.api_token_expires)]
                       if section.api_token_expires or section.node_groups.api_token_expires else [])],
        # node-exporter reads what the etcd snapshot script records there (render.NODE_METRICS_DIR).
        node_textfile_dir=render.NODE_METRICS_DIR,
        system_pool=SystemPoolSpec(section.system_pool.instance_type, section.system_pool.min_nodes,
                                   section.system_pool.max_nodes),
        training_image=training_image,
        image_pull_config=image_pull_config,
        # The autoscaler's --max-node-provision-time (node_groups.autoscaler_values): Kueue waits longer.
        node_join_deadline_minutes=float(section.node_groups.join_deadline_minutes) if scaler_deployed else None,
    )
