"""A self-managed kubeadm GPU cluster on Linode, joined declaratively through cloud-init (no SSH).

Linode's managed Kubernetes has no GPU nodes, so this builds what LKE would: a PKI from pulumi-tls,
a bootstrap token from pulumi-random, control planes (1, or 3 behind a NodeBalancer) and GPU
workers on a VPC behind a DROP-by-default firewall, then the add-ons a cloud cluster needs (CNI,
Linode CCM and CSI, NVIDIA device plugin, a default StorageClass).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import pulumi_linode as linode
import pulumi_random as random
import pulumi_tls as tls

from components.cluster import (
    CheckpointStore,
    ClusterHandle,
    common_labels,
    gpu_pool_specs,
)
from components.config import StackConfig
from components.linode import addons, render

API_PORT = 6443


@dataclass(frozen=True)
class LinodeClusterArgs:
    config: StackConfig
    # The Linode API token for the in-cluster CCM and CSI driver (a secret).
    api_token: pulumi.Input[str]


def linode_tags(cfg: StackConfig, **extra: str) -> list[str]:
    """Linode tags are flat strings: owner:ml-platform, cost-center:research, ..."""
    labels = {**common_labels(cfg), **extra}
    return [f"{k}:{v}" for k, v in labels.items()]


def firewall_rules(admin_cidrs: list[str], vpc_cidr: str, pod_cidr: str, ssh_enabled: bool) -> list[dict]:
    """Inbound rules of the node firewall (policy DROP). Pure, so tests check it directly."""
    v4 = [c for c in admin_cidrs if ipaddress.ip_network(c).version == 4]
    v6 = [c for c in admin_cidrs if ipaddress.ip_network(c).version == 6]
    rules: list[dict] = [
        # Nodes talk to each other (kubelet, etcd, CNI, NodeBalancer backends) only over the VPC.
        {"label": "vpc-tcp", "action": "ACCEPT", "protocol": "TCP", "ipv4s": [vpc_cidr, pod_cidr]},
        {"label": "vpc-udp", "action": "ACCEPT", "protocol": "UDP", "ipv4s": [vpc_cidr, pod_cidr]},
        {"label": "vpc-icmp", "action": "ACCEPT", "protocol": "ICMP", "ipv4s": [vpc_cidr, pod_cidr]},
    ]
    if v4 or v6:
        rules.append({"label": "admin-kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": str(API_PORT),
                      **({"ipv4s": v4} if v4 else {}), **({"ipv6s": v6} if v6 else {})})
        if ssh_enabled:
            rules.append({"label": "admin-ssh", "action": "ACCEPT", "protocol": "TCP", "ports": "22",
                          **({"ipv4s": v4} if v4 else {}), **({"ipv6s": v6} if v6 else {})})
    return rules


def balancer_rules(admin_cidrs: list[str], node_cidrs: list[str]) -> list[dict]:
    """Inbound rules of the API NodeBalancer's firewall (policy DROP)."""
    v4 = [c for c in admin_cidrs if ipaddress.ip_network(c).version == 4] + list(node_cidrs)
    v6 = [c for c in admin_cidrs if ipaddress.ip_network(c).version == 6]
    return [{"label": "kube-api", "action": "ACCEPT", "protocol": "TCP", "ports": str(API_PORT),
             **({"ipv4s": v4} if v4 else {}), **({"ipv6s": v6} if v6 else {})}]


class LinodeKubeadmCluster(pulumi.ComponentResource):
    """Outputs: `handle` (ClusterHandle), `api_endpoint`, `kubeconfig` (secret)."""

    def __init__(self, name: str, args: LinodeClusterArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:linode:KubeadmCluster", name, None, opts)
        cfg = args.config
        section = cfg.linode
        assert section is not None, "validated by components.config"
        child = pulumi.ResourceOptions(parent=self)
        tags = linode_tags(cfg)
        pools = gpu_pool_specs(cfg)
        cp_count = section.control_plane.count
        addresses = render.vpc_addresses(section.subnet_cidr, cp_count, section.system_pool.count,
                                         [p.max_nodes for p in pools])
        cp_ips, pool_ips = addresses.control_planes, addresses.gpu_pools

        # --- PKI and join secrets ------------------------------------------------------------
        ca_key = tls.PrivateKey(f"{name}-ca-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        ca_cert = tls.SelfSignedCert(
            f"{name}-ca",
            private_key_pem=ca_key.private_key_pem,
            is_ca_certificate=True,
            validity_period_hours=10 * 365 * 24,
            allowed_uses=["cert_signing", "crl_signing", "digital_signature", "key_encipherment"],
            subject={"common_name": "kubernetes", "organization": "gpu-platform"},
            opts=child,
        )
        token_id = random.RandomString(f"{name}-token-id", length=6, upper=False, special=False, opts=child)
        token_secret = random.RandomString(f"{name}-token-secret", length=16, upper=False, special=False, opts=child)
        # kubeadm's --certificate-key: 32 random bytes, hex, encrypting the uploaded control-plane certs.
        certificate_key = random.RandomId(f"{name}-certificate-key", byte_length=32, opts=child)
        token = pulumi.Output.secret(pulumi.Output.all(token_id.result, token_secret.result)
                                     .apply(lambda t: render.bootstrap_token(t[0], t[1])))
        ca_hash = ca_cert.cert_pem.apply(render.discovery_hash)

        admin_key = tls.PrivateKey(f"{name}-admin-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        admin_csr = tls.CertRequest(
            f"{name}-admin-csr", private_key_pem=admin_key.private_key_pem,
            # kubeadm binds this group to cluster-admin (kubeadm >= 1.29).
            subject={"common_name": "gpu-platform-admin", "organization": "kubeadm:cluster-admins"}, opts=child)
        admin_cert = tls.LocallySignedCert(
            f"{name}-admin-cert", cert_request_pem=admin_csr.cert_request_pem,
            ca_cert_pem=ca_cert.cert_pem, ca_private_key_pem=ca_key.private_key_pem,
            validity_period_hours=365 * 24, early_renewal_hours=30 * 24,
            allowed_uses=["digital_signature", "key_encipherment", "client_auth"], opts=child)

        # --- Network -------------------------------------------------------------------------
        vpc = linode.Vpc(f"{name}-vpc", label=f"{cfg.name_prefix}-vpc", region=section.region,
                         description=f"gpu-platform {cfg.environment} node network", opts=child)
        subnet = linode.VpcSubnet(f"{name}-subnet", vpc_id=vpc.id, label=f"{cfg.name_prefix}-nodes",
                                  ipv4=section.subnet_cidr, opts=child)
        ssh_enabled = bool(section.ssh_authorized_keys)
        firewall = linode.Firewall(
            f"{name}-firewall",
            label=f"{cfg.name_prefix}-nodes",
            inbound_policy="DROP",
            outbound_policy="ACCEPT",
            inbounds=firewall_rules(cfg.admin_cidrs, section.subnet_cidr, section.pod_cidr, ssh_enabled),
            tags=tags,
            opts=child,
        )

        # --- API endpoint --------------------------------------------------------------------
        balancer: Optional[linode.NodeBalancer] = None
        if cp_count > 1:
            balancer = linode.NodeBalancer(
                f"{name}-api-lb", label=f"{cfg.name_prefix}-api", region=section.region,
                client_conn_throttle=20, tags=tags,
                vpcs=[{"subnet_id": subnet.id.apply(int)}], opts=child)
            public_api_ip = balancer.ipv4
            reserved_ip = None
        else:
            reserved_ip = linode.ReservedIp(f"{name}-api-ip", region=section.region, tags=tags, opts=child)
            public_api_ip = reserved_ip.address
        # Nodes reach the API inside the VPC (the firewall keeps 6443 off the internet); admins
        # use the public address, which the certificate also names.
        internal_endpoint = f"{cp_ips[0]}:{API_PORT}"

        def cluster_spec(public_ip: str) -> render.ClusterSpec:
            endpoint = f"{public_ip}:{API_PORT}" if balancer is not None else internal_endpoint
            return render.ClusterSpec(
                name=cfg.name_prefix, kubernetes_minor=cfg.kubernetes_version,
                control_plane_endpoint=endpoint, pod_cidr=section.pod_cidr, service_cidr=section.service_cidr,
                cert_sans=[public_ip, *cp_ips])

        def instance(role_name: str, label: str, plan: str, vpc_ip: str, user_data: pulumi.Output[str],
                     extra_tags: dict[str, str], depends: list[pulumi.Resource]) -> linode.Instance:
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
                ipv4s=[reserved_ip.address] if (reserved_ip is not None and role_name == "cp-0") else None,
                interfaces=[
                    {"purpose": "public"},
                    {"purpose": "vpc", "subnet_id": subnet.id.apply(int), "ipv4": {"vpc": vpc_ip}},
                ],
                metadatas=[{"user_data": pulumi.Output.secret(user_data.apply(render.encode_user_data))}],
                booted=True,
                # First-boot data only: later edits must not silently re-create a node.
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends, ignore_changes=["metadatas"]),
            )

        # --- Control planes ------------------------------------------------------------------
        self.user_data: dict[str, pulumi.Output[str]] = {}
        control_planes: list[linode.Instance] = []
        for i in range(cp_count):
            label = f"{cfg.name_prefix}-cp-{i}"
            node = render.NodeSpec(name=label, vpc_ip=cp_ips[i])
            if i == 0:
                doc = pulumi.Output.all(public_api_ip, token, certificate_key.hex, ca_cert.cert_pem, ca_key.private_key_pem).apply(
                    lambda v, node=node: render.node_user_data(
                        "init", node, render.kubeadm_init_config(cluster_spec(v[0]), node, v[1], v[2]),
                        cfg.kubernetes_version, gpu=False, ca_cert_pem=v[3], ca_key_pem=v[4]))
            else:
                doc = pulumi.Output.all(public_api_ip, token, ca_hash, certificate_key.hex).apply(
                    lambda v, node=node: render.node_user_data(
                        "join-control-plane", node,
                        render.kubeadm_join_config(cluster_spec(v[0]), node, v[1], v[2], v[3]),
                        cfg.kubernetes_version, gpu=False))
            doc = pulumi.Output.secret(doc)
            self.user_data[f"control-plane-{i}"] = doc
            # Later control planes join once the first has uploaded the certificates.
            control_planes.append(instance(f"cp-{i}", label, section.control_plane.type, cp_ips[i], doc,
                                           {"role": "control-plane"}, control_planes[:1]))

        if balancer is not None:
            api_config = linode.NodeBalancerConfig(
                f"{name}-api-lb-6443", nodebalancer_id=balancer.id.apply(int), port=API_PORT, protocol="tcp",
                algorithm="leastconn", check="connection", check_interval=10, check_timeout=5, check_attempts=3,
                opts=child)
            for i, cp in enumerate(control_planes):
                linode.NodeBalancerNode(
                    f"{name}-api-lb-cp-{i}", nodebalancer_id=balancer.id.apply(int), config_id=api_config.id.apply(int),
                    label=f"cp-{i}", address=f"{cp_ips[i]}:{API_PORT}", subnet_id=subnet.id.apply(int), mode="accept",
                    opts=child)

        # --- System (CPU) workers: untainted, where ordinary platform pods run -----------------
        workers: list[linode.Instance] = []
        for i, ip in enumerate(addresses.system):
            label = f"{cfg.name_prefix}-system-{i}"
            node = render.NodeSpec(name=label, vpc_ip=ip, labels={render.ROLE_LABEL: render.SYSTEM_ROLE})
            doc = pulumi.Output.secret(pulumi.Output.all(public_api_ip, token, ca_hash).apply(
                lambda v, node=node: render.node_user_data(
                    "join", node, render.kubeadm_join_config(cluster_spec(v[0]), node, v[1], v[2]),
                    cfg.kubernetes_version, gpu=False)))
            self.user_data[f"system-{i}"] = doc
            workers.append(instance(f"system-{i}", label, section.system_pool.type, ip, doc,
                                    {"role": "system-worker"}, control_planes[:1]))

        # --- GPU workers ---------------------------------------------------------------------
        for pool, ips in zip(pools, pool_ips):
            for i, ip in enumerate(ips):
                label = f"{cfg.name_prefix}-{pool.name}-{i}"
                node = render.NodeSpec(name=label, vpc_ip=ip, labels=dict(pool.node_labels), taints=list(pool.taints))
                doc = pulumi.Output.secret(pulumi.Output.all(public_api_ip, token, ca_hash).apply(
                    lambda v, node=node: render.node_user_data(
                        "join", node, render.kubeadm_join_config(cluster_spec(v[0]), node, v[1], v[2]),
                        cfg.kubernetes_version, gpu=True)))
                self.user_data[f"gpu-{pool.name}-{i}"] = doc
                workers.append(instance(
                    f"{pool.name}-{i}", label, pool.instance_type, ip, doc,
                    {"role": "gpu-worker", "gpu-pool": pool.name, "capacity": pool.capacity,
                     "on-demand-approved": str(next(p.approved_on_demand for p in cfg.gpu_pools if p.name == pool.name)).lower()},
                    control_planes[:1]))

        if balancer is not None:
            # The NodeBalancer proxies, so the node firewall cannot see who called: it gets its own
            # firewall with the admins and the nodes themselves (kubelets use the balanced endpoint).
            nodes = control_planes + workers
            node_ips = pulumi.Output.all(*[n.ipv4s.apply(lambda ips: ips[0]) for n in nodes]).apply(lambda ips: [f"{ip}/32" for ip in ips])
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

        # --- Kubeconfig, readiness, provider -------------------------------------------------
        server = public_api_ip.apply(lambda ip: f"https://{ip}:{API_PORT}")
        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(server, ca_cert.cert_pem, admin_cert.cert_pem,
                                                                 admin_key.private_key_pem).apply(
            lambda v: render.admin_kubeconfig(cfg.name_prefix, v[0], v[1], v[2], v[3])))
        api_ready = command.local.Command(
            f"{name}-wait-for-api",
            create=render.wait_for_api_script(),
            interpreter=["/bin/bash", "-c"],
            environment={"API_HOST": public_api_ip, "CLUSTER_CA_PEM": ca_cert.cert_pem},
            opts=pulumi.ResourceOptions(parent=self, depends_on=control_planes),
        )
        provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(parent=self, depends_on=[api_ready]))

        # --- Checkpoint bucket ---------------------------------------------------------------
        bucket = linode.ObjectStorageBucket(
            f"{name}-checkpoints", region=section.region, label=f"{cfg.name_prefix}-checkpoints-{cfg.owner}",
            acl="private", versioning=section.checkpoint_bucket_versioning,
            lifecycle_rules=[{"id": "expire-old-checkpoint-versions", "enabled": True,
                              "noncurrent_version_expiration": {"days": 30},
                              "abort_incomplete_multipart_upload_days": 7}],
            opts=child)
        bucket_key = linode.ObjectStorageKey(
            f"{name}-checkpoints-key", label=f"{cfg.name_prefix}-checkpoints",
            bucket_accesses=[{"bucket_name": bucket.label, "region": section.region, "permissions": "read_write"}],
            opts=child)
        endpoint_url = bucket.s3_endpoint.apply(lambda e: f"https://{e}") if bucket.s3_endpoint is not None else None

        # --- Add-ons ---------------------------------------------------------------------------
        installed = addons.LinodeAddons(
            f"{name}-addons",
            addons.AddonsArgs(cni=section.cni, pod_cidr=section.pod_cidr, region=section.region,
                              api_token=args.api_token, api_host=cp_ips[0]),
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=workers + [api_ready]),
        )

        self.api_endpoint = server
        self.handle = ClusterHandle(
            cloud="linode",
            name=cfg.name_prefix,
            kubeconfig=self.kubeconfig,
            provider=provider,
            gpu_pools=pools,
            default_storage_class=addons.DEFAULT_STORAGE_CLASS,
            checkpoint=CheckpointStore(
                url=bucket.label.apply(lambda b: f"s3://{b}"),
                env={"AWS_ENDPOINT_URL_S3": endpoint_url, "AWS_REGION": section.region} if endpoint_url is not None
                else {"AWS_REGION": section.region},
                credentials=pulumi.Output.secret(pulumi.Output.all(bucket_key.access_key, bucket_key.secret_key).apply(
                    lambda k: {"AWS_ACCESS_KEY_ID": k[0], "AWS_SECRET_ACCESS_KEY": k[1]})),
            ),
            gpu_device_plugin_installed=True,
            ready=installed.ready,
            endpoint=server,
        )
        self.register_outputs({"apiEndpoint": server, "kubeconfig": self.kubeconfig})
