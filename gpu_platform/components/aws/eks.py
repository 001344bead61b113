"""The EKS control plane, its identity plumbing and the small on-demand system node group.

API authentication mode with access entries (no aws-auth ConfigMap), Kubernetes secrets encrypted
with a customer-managed KMS key, every control-plane log type to CloudWatch, the public endpoint
limited to adminCidrs (or none), an OIDC provider for IRSA, the managed add-ons (VPC CNI with NetworkPolicy
enforcement and its own IRSA role, kube-proxy, CoreDNS, EBS CSI driver) and the default `gp3` StorageClass.
Node roles carry no CNI permissions and nodes answer IMDS only to the host (hop limit 1): a pod cannot borrow
the node's credentials to manage the VPC's network interfaces.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_aws import cloudwatch, ec2, eks, iam, kms

from gpu_platform.data import aws_versions as versions
from gpu_platform.data import eks_addon_versions
from gpu_platform.config.names import zonal_groups
from gpu_platform.components.aws.iam import irsa_role, managed_policy_arn, partition, service_trust_policy

CONTROL_PLANE_LOGS = ("api", "audit", "authenticator", "controllerManager", "scheduler")
STORAGE_CLASS = "gp3"
# The cluster's default StorageClass, which the program creates (EKS 1.30+ marks none default): encrypted gp3 on
# the EBS CSI add-on, bound where the pod lands.
GP3_STORAGE_CLASS = dict(
    metadata={"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
    provisioner="ebs.csi.aws.com",
    parameters={"type": "gp3", "encrypted": "true", "csi.storage.k8s.io/fstype": "ext4"},
    volume_binding_mode="WaitForFirstConsumer",
    allow_volume_expansion=True,
    reclaim_policy="Delete",
)
EBS_CSI_SERVICE_ACCOUNT = ("kube-system", "ebs-csi-controller-sa")
# The VPC CNI's own identity (the aws-node DaemonSet's service account), not the node role's: AWS recommends it
# (EKS user guide, "Configure Amazon VPC CNI plugin to use IRSA") so that pods cannot use ENI permissions.
VPC_CNI_SERVICE_ACCOUNT = ("kube-system", "aws-node")
VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
# Node roles: join the cluster, pull images, SSM. No AmazonEKS_CNI_Policy (see VPC_CNI_SERVICE_ACCOUNT).
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonSSMManagedInstanceCore")
# vpc-cni add-on configuration (schema: `aws eks describe-addon-configuration --addon-name vpc-cni`, add-on
# v1.14.0-eksbuild.3 or later): the network policy agent enforces Kubernetes NetworkPolicies.
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}


def ebs_csi_configuration(tags: Mapping[str, str]) -> dict:
    """aws-ebs-csi-driver add-on configuration (schema: `aws eks describe-addon-configuration --addon-name
    aws-ebs-csi-driver`, controller.extraVolumeTags): every volume the driver creates (PVCs: databases,
    Prometheus, notebook homes) carries the stack's tags, `cluster` among them, which the stack's AWS Budget
    filters on (billing.stack_cost_filter). Without it the driver tags only its own keys (CSIVolumeName,
    ebs.csi.aws.com/cluster, kubernetes.io/created-for/*) and those volumes' cost was outside the budget.
    The driver tags a volume when it creates it: volumes made before keep their tags."""
    return {"controller": {"extraVolumeTags": dict(tags)}}


# IMDSv2 answers are not forwarded past the node's own network namespace: pods (one hop further) get no
# node credentials. Nothing on these nodes needs IMDS from a pod (add-ons use IRSA).
IMDS_HOP_LIMIT = 1


def render_kubeconfig(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with `aws eks get-token` (the caller's AWS credentials)."""
    user = f"{cluster_name}-aws"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "users": [{"name": user, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
            "interactiveMode": "Never",
        }}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }
    return yaml.safe_dump(doc, sort_keys=False)


def secure_launch_template_args(root_gib: int, tags: Mapping[str, str], hop_limit: int = IMDS_HOP_LIMIT) -> dict:
    """Launch-template settings every node gets: IMDSv2 only, reachable from the host only (hop limit 1),
    encrypted gp3 root volume, tagged instances."""
    return {
        "metadata_options": {"http_endpoint": "enabled", "http_tokens": "required",
                             "http_put_response_hop_limit": hop_limit, "instance_metadata_tags": "disabled"},
        "block_device_mappings": [{"device_name": "/dev/xvda", "ebs": {
            "volume_size": root_gib, "volume_type": "gp3", "encrypted": "true", "delete_on_termination": "true"}}],
        "tag_specifications": [{"resource_type": rt, "tags": dict(tags)} for rt in ("instance", "volume", "network-interface")],
        "tags": dict(tags),
        "update_default_version": True,
    }


_STS_ROLE = re.compile(r"^arn:(?P<part>aws[a-z-]*):sts::(?P<acct>\d{12}):assumed-role/(?P<role>[^/]+)/.+$")
_IAM_PRINCIPAL = re.compile(r"^arn:(?P<part>aws[a-z-]*):iam::(?P<acct>\d{12}):(?P<kind>role|user)/(?:.*/)?(?P<name>[^/]+)$")


def principal_key(arn: str) -> Optional[tuple[str, str, str, str]]:
    """(partition, account, kind, name) of an IAM role/user ARN or of an STS assumed-role session ARN (the form
    sts:GetCallerIdentity returns for a role; it has no role path, so paths are ignored)."""
    m = _STS_ROLE.match(arn)
    if m:
        return m["part"], m["acct"], "role", m["role"]
    m = _IAM_PRINCIPAL.match(arn)
    if m:
        return m["part"], m["acct"], m["kind"], m["name"]
    return None


def admin_principals(admin_arns: Sequence[str], creator_arn: Optional[str] = None) -> tuple[list[str], list[str]]:
    """(ARNs that get an admin access entry, ARNs skipped because they created the cluster).

    The program creates the cluster with bootstrap_cluster_creator_admin_permissions false, so every
    listed principal gets its own entry, whoever runs `pulumi up`: a second deployer changes nothing. A
    cluster an earlier release created with it true has an entry EKS made for its creator
    (`aws.clusterCreatorArn`), and a second one for the same principal fails with ResourceInUseException:
    that one is skipped. Not the current caller: that made the entries depend on who deploys (a second
    deployer's run deleted its own entry and tried to create the first deployer's)."""
    creator = principal_key(creator_arn) if creator_arn else None
    kept, skipped = [], []
    for arn in admin_arns:
        (skipped if creator is not None and principal_key(arn) == creator else kept).append(arn)
    return kept, skipped


def access_config() -> dict:
    """The cluster's access config: access entries only (API), and no implicit admin entry for whoever
    creates it (bootstrap_cluster_creator_admin_permissions false; the EKS API's default is true, AWS
    "Grant IAM users access to Kubernetes with EKS access entries"). The field forces a new cluster in
    the provider (terraform-provider-aws internal/service/eks/cluster.go: ForceNew), so EksCluster ignores
    its changes: a cluster created with true keeps it."""
    return {"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": False}


# Changing it replaces the cluster (ForceNew); a cluster created with true by an earlier release keeps it.
ACCESS_CONFIG_IGNORED = ("accessConfig.bootstrapClusterCreatorAdminPermissions",)


# The zone of a per-zone system node group, as a tag on the group (preflight's node model reads it).
SYSTEM_ZONE_TAG = "node-group-zone"


def system_node_groups(min_nodes: int, max_nodes: int, zones: Sequence[str]) -> list[tuple[str, int, int]]:
    """(zone, minSize, maxSize) of the system node groups: the pool's totals split over its zones the way
    the GPU pools' are (gpu_asg.zonal_groups), so cost, quota and policy see the configured numbers."""
    return zonal_groups(min_nodes, max_nodes, zones)


@dataclass
class EksClusterArgs:
    cluster_name: str
    region: str
    kubernetes_version: str
    subnet_ids: Sequence[pulumi.Input[str]]
    public_access_cidrs: Sequence[str]  # empty: no public endpoint
    admin_principal_arns: Sequence[str]
    system_instance_type: str
    system_min: int
    system_max: int
    log_retention_days: int
    tags: Mapping[str, str]
    support_type: str = "STANDARD"  # upgrade_policy.support_type: STANDARD | EXTENDED (aws.supportType)
    # (zone, private subnet) pairs: one system node group per zone (system_node_groups). Empty: the
    # subnets in order, named subnet1, subnet2, ... (an existing VPC's subnets are one zone each).
    system_subnets: Sequence[tuple[str, pulumi.Input[str]]] = ()
    # A cluster an earlier release created (bootstrap_cluster_creator_admin_permissions true): its creator
    # has EKS's admin entry already (aws.clusterCreatorArn).
    cluster_creator_arn: Optional[str] = None
    # An existing VPC: the node label naming each system group's subnet (cluster.SUBNET_LABEL), whose value
    # is the group's key in system_subnets; None in a new VPC (the zone label says it).
    zone_node_label: Optional[str] = None


class EksCluster(pulumi.ComponentResource):
    """Outputs: cluster_name, endpoint, ca_data, service_cidr, cluster_security_group_id,
    oidc_provider_arn, oidc_issuer_url, gpu_node_role, gpu_instance_profile, kubeconfig (secret),
    k8s_provider, ready (resources the platform waits on)."""

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        region = args.region

        key = kms.Key(f"{name}-secrets-key", description=f"Kubernetes secrets of EKS cluster {args.cluster_name}",
                      enable_key_rotation=True, deletion_window_in_days=30, tags=tags, opts=child)
        kms.Alias(f"{name}-secrets-key-alias", name=f"alias/{args.cluster_name}-eks-secrets", target_key_id=key.key_id, opts=child)
        # Created before the cluster so retention is ours, not "never expire".
        logs = cloudwatch.LogGroup(f"{name}-control-plane-logs", name=f"/aws/eks/{args.cluster_name}/cluster",
                                   retention_in_days=args.log_retention_days, tags=tags, opts=child)

        role = iam.Role(f"{name}-control-plane-role", assume_role_policy=json.dumps(service_trust_policy("eks.amazonaws.com")),
                        description=f"EKS control plane of {args.cluster_name}", tags=tags, opts=child)
        attach = iam.RolePolicyAttachment(f"{name}-control-plane-policy", role=role.name,
                                          policy_arn=managed_policy_arn(region, "AmazonEKSClusterPolicy"), opts=child)

        public = bool(args.public_access_cidrs)
        cluster = eks.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            version=args.kubernetes_version,
            role_arn=role.arn,
            vpc_config={
                "subnet_ids": list(args.subnet_ids),
                "endpoint_private_access": True,
                "endpoint_public_access": public,
                **({"public_access_cidrs": list(args.public_access_cidrs)} if public else {}),
            },
            access_config=access_config(),
            encryption_config={"provider": {"key_arn": key.arn}, "resources": ["secrets"]},
            enabled_cluster_log_types=list(CONTROL_PLANE_LOGS),
            # STANDARD unless the stack chose EXTENDED (aws.supportType): the config admits a version past the end
            # of standard support only with EXTENDED, which AWS requires for such a version (and bills).
            upgrade_policy={"support_type": args.support_type},
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach, logs], ignore_changes=list(ACCESS_CONFIG_IGNORED)),
        )
        self.cluster = cluster
        self.cluster_name = cluster.name
        self.endpoint = cluster.endpoint
        self.ca_data = cluster.certificate_authority.apply(lambda c: c.data)
        self.service_cidr = cluster.kubernetes_network_config.apply(lambda c: c.service_ipv4_cidr)
        self.cluster_security_group_id = cluster.vpc_config.apply(lambda v: v.cluster_security_group_id)
        self.oidc_issuer_url = cluster.identities.apply(lambda ids: ids[0].oidcs[0].issuer)

        oidc = iam.OpenIdConnectProvider(f"{name}-oidc", url=self.oidc_issuer_url, client_id_lists=["sts.amazonaws.com"],
                                         tags=tags, opts=child)
        self.oidc_provider_arn = oidc.arn

        # One admin access entry per listed principal, the same whoever deploys (admin_principals).
        admins, skipped = admin_principals(args.admin_principal_arns, args.cluster_creator_arn)
        for arn in skipped:
            pulumi.log.info(f"aws.adminPrincipalArns: {arn} created the cluster (aws.clusterCreatorArn): EKS gave it its "
                            "admin access entry then, so no second one is created", resource=self)
        self.admin_access = []
        for i, arn in enumerate(admins):
            entry = eks.AccessEntry(f"{name}-admin-{i}", cluster_name=cluster.name, principal_arn=arn, type="STANDARD",
                                    tags=tags, opts=child)
            self.admin_access.append(eks.AccessPolicyAssociation(
                f"{name}-admin-{i}-policy", cluster_name=cluster.name, principal_arn=arn,
                policy_arn=f"arn:{partition(region)}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                access_scope={"type": "cluster"}, opts=pulumi.ResourceOptions(parent=self, depends_on=[entry])))

        # --- node identities -------------------------------------------------------------------
        system_role = self._node_role(f"{name}-system-node-role", region, tags, extra=())
        gpu_role = self._node_role(f"{name}-gpu-node-role", region, tags, extra=("CloudWatchAgentServerPolicy",))
        self.gpu_node_role = gpu_role
        self.gpu_instance_profile = iam.InstanceProfile(f"{name}-gpu-node-profile", role=gpu_role.name, tags=tags, opts=child)
        # Self-managed GPU nodes join through an access entry of type EC2_LINUX (managed node groups get theirs from EKS).
        gpu_entry = eks.AccessEntry(f"{name}-gpu-node-access", cluster_name=cluster.name, principal_arn=gpu_role.arn,
                                    type="EC2_LINUX", tags=tags, opts=child)
        self.gpu_node_access = gpu_entry

        # --- add-ons that nodes need before they are Ready -------------------------------------
        addon_opts = pulumi.ResourceOptions(parent=self)

        # Each add-on's version is pinned per Kubernetes minor (gpu_platform/data/eks_addon_versions.py, dated
        # and sourced), not EKS's default asked at each deploy: a deploy moves an add-on only when
        # kubernetesVersion or the table moves, and the table moves vpc-cni one minor per Kubernetes minor
        # (EKS: "Updating VPC-CNI can only go up or down 1 minor version at a time"). config/checks/aws.py
        # refuses a minor without a row before anything is registered. A changed addon_version is an
        # in-place UpdateAddon (aws:eks/Addon replaces only on a new addonName or clusterName); the
        # add-ons are created after the cluster and so updated after its version change.
        addon_versions = eks_addon_versions.addon_versions(args.kubernetes_version)

        def addon_version(addon: str) -> str:
            return addon_versions[addon]

        cni_role = irsa_role(f"{name}-vpc-cni-role", self.oidc_provider_arn, self.oidc_issuer_url, *VPC_CNI_SERVICE_ACCOUNT,
                             tags=tags, opts=child)
        cni_policy = iam.RolePolicyAttachment(f"{name}-vpc-cni-policy", role=cni_role.name,
                                              policy_arn=managed_policy_arn(region, VPC_CNI_POLICY), opts=child)
        self.vpc_cni_role = cni_role
        vpc_cni = eks.Addon(f"{name}-addon-vpc-cni", cluster_name=cluster.name, addon_name="vpc-cni", addon_version=addon_version("vpc-cni"),
                            service_account_role_arn=cni_role.arn,
                            configuration_values=json.dumps(VPC_CNI_CONFIGURATION),
                            resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE", tags=tags,
                            opts=pulumi.ResourceOptions(parent=self, depends_on=[cni_policy]))
        kube_proxy = eks.Addon(f"{name}-addon-kube-proxy", cluster_name=cluster.name, addon_name="kube-proxy", addon_version=addon_version("kube-proxy"),
                               resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE", tags=tags, opts=addon_opts)

        # --- system node group -----------------------------------------------------------------
        system_lt = ec2.LaunchTemplate(
            f"{name}-system-launch-template",
            description=f"System nodes of {args.cluster_name}: IMDSv2, encrypted gp3 root",
            **secure_launch_template_args(50, {**tags, "Name": f"{args.cluster_name}-system"}),
            opts=child)
        # One managed node group per zone, like the GPU groups (gpu_asg.zonal_groups): the platform's
        # databases, Prometheus and CPU notebooks' homes are zonal EBS volumes on these nodes, and
        # cluster-autoscaler plans a new node of a multi-zone group in one zone only (AWS README, "Common
        # Notes and Gotchas"): a replaced node in another zone would leave those pods Pending for good.
        system_subnets = list(args.system_subnets) or [(f"subnet{i + 1}", s) for i, s in enumerate(args.subnet_ids)]
        subnet_of = dict(system_subnets)
        node_groups = []
        for zone, lo, hi in system_node_groups(args.system_min, args.system_max, [z for z, _ in system_subnets]):
            node_groups.append(eks.NodeGroup(
                f"{name}-system-nodes-{zone}",
                cluster_name=cluster.name,
                node_role_arn=system_role.arn,
                subnet_ids=[subnet_of[zone]],
                instance_types=[args.system_instance_type],
                capacity_type="ON_DEMAND",
                ami_type=versions.SYSTEM_AMI_TYPE,
                # Follow the control plane: without a value the provider never updates the group, and a
                # control-plane upgrade would leave the system nodes a minor behind (until skew breaks them).
                version=cluster.version,
                scaling_config={"min_size": lo, "max_size": hi, "desired_size": lo},
                update_config={"max_unavailable": 1},
                launch_template={"id": system_lt.id, "version": system_lt.latest_version.apply(str)},
                labels={"gpu-platform.io/role": "system", **({args.zone_node_label: zone} if args.zone_node_label else {})},
                tags={**tags, SYSTEM_ZONE_TAG: zone},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[vpc_cni, kube_proxy],
                                            ignore_changes=["scalingConfig.desiredSize"]),
            ))
        self.system_node_groups = node_groups

        coredns = eks.Addon(f"{name}-addon-coredns", cluster_name=cluster.name, addon_name="coredns", addon_version=addon_version("coredns"),
                            resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE", tags=tags,
                            opts=pulumi.ResourceOptions(parent=self, depends_on=node_groups))
        ebs_role = irsa_role(f"{name}-ebs-csi-role", self.oidc_provider_arn, self.oidc_issuer_url, *EBS_CSI_SERVICE_ACCOUNT,
                             tags=tags, opts=child)
        iam.RolePolicyAttachment(f"{name}-ebs-csi-policy", role=ebs_role.name,
                                 policy_arn=managed_policy_arn(region, "service-role/AmazonEBSCSIDriverPolicy"), opts=child)
        ebs = eks.Addon(f"{name}-addon-aws-ebs-csi-driver", cluster_name=cluster.name, addon_name="aws-ebs-csi-driver", addon_version=addon_version("aws-ebs-csi-driver"),
                        service_account_role_arn=ebs_role.arn,
                        configuration_values=json.dumps(ebs_csi_configuration(tags)), resolve_conflicts_on_create="OVERWRITE",
                        resolve_conflicts_on_update="OVERWRITE", tags=tags,
                        opts=pulumi.ResourceOptions(parent=self, depends_on=node_groups))

        # --- kubeconfig and the Kubernetes provider --------------------------------------------
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(pulumi.Output.all(
            cluster.name, cluster.endpoint, self.ca_data).apply(lambda a: render_kubeconfig(a[0], a[1], a[2], region)))
        # The deployer reaches the API through its own access entry (no implicit creator entry): after it.
        self.k8s_provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, enable_server_side_apply=True,
                                         opts=pulumi.ResourceOptions(parent=self, depends_on=[*node_groups, *self.admin_access]))
        storage_class = k8s.storage.v1.StorageClass(
            f"{name}-storage-class-gp3", **GP3_STORAGE_CLASS,
            opts=pulumi.ResourceOptions(parent=self, provider=self.k8s_provider, depends_on=[ebs]),
        )
        self.ready = [*node_groups, coredns, ebs, storage_class]
        self.register_outputs({"clusterName": cluster.name, "endpoint": cluster.endpoint, "kubeconfig": self.kubeconfig,
                               "oidcProviderArn": oidc.arn})

    def _node_role(self, rname: str, region: str, tags: Mapping[str, str], extra: Sequence[str]) -> iam.Role:
        role = iam.Role(rname, assume_role_policy=json.dumps(service_trust_policy("ec2.amazonaws.com")), tags=dict(tags),
                        description="EKS worker nodes", opts=pulumi.ResourceOptions(parent=self))
        for policy in (*NODE_POLICIES, *extra):
            iam.RolePolicyAttachment(f"{rname}-{policy.lower().replace('_', '-')}", role=role.name,
                                     policy_arn=managed_policy_arn(region, policy), opts=pulumi.ResourceOptions(parent=self))
        return role
