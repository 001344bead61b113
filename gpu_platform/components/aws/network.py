"""A VPC for the cluster: private subnets (nodes) and public subnets (NAT, load balancers) per zone.

Only built when the stack gives no existing VPC. Nodes get no public IPs; they reach the internet
(image pulls, AWS APIs) through NAT: one gateway by default (cost), one per zone on request.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_aws as aws
from pulumi_aws import ec2

# A new VPC without aws.availabilityZones spans the region's first three zones (two where it has two).
DEFAULT_ZONE_COUNT = 3


def default_zones(provider: pulumi.ProviderResource) -> list[str]:
    """The region's first zones that need no opt-in (no Local or Wavelength Zones), asked of AWS at
    deploy time so a stack need not name them; sorted, so the choice is stable between runs."""
    found = aws.get_availability_zones(
        state="available", filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}],
        opts=pulumi.InvokeOptions(provider=provider))
    zones = sorted(found.names)[:DEFAULT_ZONE_COUNT]
    if len(zones) < 2:
        raise ValueError(f"EKS needs subnets in two zones; the region offers {zones}: set aws.vpcId and "
                         "aws.privateSubnetIds, or another aws.region")
    return zones


def plan_subnets(vpc_cidr: str, zones: Sequence[str]) -> list[tuple[str, str, str]]:
    """(zone, private CIDR, public CIDR) per zone. The VPC is cut in eighths: the first six are the
    private subnets (big: every pod gets a VPC IP with the VPC CNI), the last eighth is cut again in
    eighths for the small public subnets."""
    net = ipaddress.ip_network(vpc_cidr)
    eighths = list(net.subnets(prefixlen_diff=3))
    public = list(eighths[7].subnets(prefixlen_diff=3))
    if len(zones) > 6:
        raise ValueError("at most six zones")
    return [(z, str(eighths[i]), str(public[i])) for i, z in enumerate(zones)]


@dataclass
class NetworkArgs:
    cluster_name: str
    vpc_cidr: str
    zones: Sequence[str]
    nat_per_zone: bool
    tags: Mapping[str, str]
    # The S3 gateway endpoint's service name needs it (com.amazonaws.<region>.s3).
    region: str = "us-east-1"


def s3_gateway_service(region: str) -> str:
    """The S3 gateway endpoint service of a region: checkpoint reads/writes and ECR image layers (ECR
    serves layers from S3) then go from the private subnets to S3 without the NAT gateway, which
    charges per GB processed (gateway endpoints themselves are free)."""
    return f"com.amazonaws.{region}.s3"


class Network(pulumi.ComponentResource):
    """Outputs: vpc_id, private_subnet_ids."""

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        shared = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = ec2.Vpc(f"{name}-vpc", cidr_block=args.vpc_cidr, enable_dns_hostnames=True, enable_dns_support=True,
                      tags={**tags, "Name": f"{args.cluster_name}-vpc"}, opts=child)
        # The default security group of a new VPC allows all traffic between its members: empty it.
        ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, tags={**tags, "Name": f"{args.cluster_name}-default-closed"},
                                 opts=child)
        igw = ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{args.cluster_name}-igw"}, opts=child)
        public_rt = ec2.RouteTable(f"{name}-public-rt", vpc_id=vpc.id,
                                   routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
                                   tags={**tags, "Name": f"{args.cluster_name}-public"}, opts=child)

        plan = plan_subnets(args.vpc_cidr, args.zones)
        public_subnets, nats = [], []
        for zone, _, public_cidr in plan:
            sn = ec2.Subnet(f"{name}-public-{zone}", vpc_id=vpc.id, cidr_block=public_cidr, availability_zone=zone,
                            map_public_ip_on_launch=False,
                            tags={**tags, **shared, "Name": f"{args.cluster_name}-public-{zone}", "kubernetes.io/role/elb": "1"},
                            opts=child)
            ec2.RouteTableAssociation(f"{name}-public-{zone}-rta", subnet_id=sn.id, route_table_id=public_rt.id, opts=child)
            public_subnets.append(sn)
            if args.nat_per_zone or not nats:
                eip = ec2.Eip(f"{name}-nat-{zone}-eip", domain="vpc", tags={**tags, "Name": f"{args.cluster_name}-nat-{zone}"}, opts=child)
                nats.append(ec2.NatGateway(f"{name}-nat-{zone}", allocation_id=eip.id, subnet_id=sn.id,
                                           tags={**tags, "Name": f"{args.cluster_name}-nat-{zone}"},
                                           opts=pulumi.ResourceOptions(parent=self, depends_on=[igw])))

        private_ids, private_rts = [], []
        for i, (zone, private_cidr, _) in enumerate(plan):
            nat = nats[i] if args.nat_per_zone else nats[0]
            rt = ec2.RouteTable(f"{name}-private-{zone}-rt", vpc_id=vpc.id,
                                routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                                tags={**tags, "Name": f"{args.cluster_name}-private-{zone}"}, opts=child)
            sn = ec2.Subnet(f"{name}-private-{zone}", vpc_id=vpc.id, cidr_block=private_cidr, availability_zone=zone,
                            map_public_ip_on_launch=False,
                            tags={**tags, **shared, "Name": f"{args.cluster_name}-private-{zone}", "kubernetes.io/role/internal-elb": "1"},
                            opts=child)
            ec2.RouteTableAssociation(f"{name}-private-{zone}-rta", subnet_id=sn.id, route_table_id=rt.id, opts=child)
            private_ids.append(sn.id)
            private_rts.append(rt.id)

        self.s3_endpoint = ec2.VpcEndpoint(f"{name}-s3-endpoint", vpc_id=vpc.id,
                                           service_name=s3_gateway_service(args.region), vpc_endpoint_type="Gateway",
                                           route_table_ids=private_rts,
                                           tags={**tags, "Name": f"{args.cluster_name}-s3"}, opts=child)

        self.vpc_id: pulumi.Output[str] = vpc.id
        self.private_subnet_ids: list[pulumi.Output[str]] = private_ids
        self.register_outputs({"vpcId": vpc.id, "privateSubnetIds": private_ids})


def existing_vpc_s3_endpoint(name: str, vpc_id: str, subnet_ids: Sequence[str], region: str, cluster_name: str,
                             tags: Mapping[str, str], opts: pulumi.ResourceOptions) -> ec2.VpcEndpoint:
    """An existing VPC's S3 gateway endpoint (aws.s3GatewayEndpoint: create), on the route tables of the
    stack's private subnets, each once, as a new VPC's: checkpoints and image layers then bypass the NAT.
    The tables are looked up at deploy time (aws.ec2.get_route_table by subnet_id, EC2's association.subnet-id
    filter): a subnet must be explicitly associated with its route table, or the lookup fails at `pulumi up`.
    A route table that has an S3 gateway endpoint already makes EC2 refuse a second one (RouteAlreadyExists):
    say `existing` then."""
    tables = [ec2.get_route_table_output(subnet_id=sid, opts=pulumi.InvokeOutputOptions(parent=opts.parent)).route_table_id
              for sid in subnet_ids]
    return ec2.VpcEndpoint(name, vpc_id=vpc_id, service_name=s3_gateway_service(region), vpc_endpoint_type="Gateway",
                           route_table_ids=pulumi.Output.all(*tables).apply(lambda ids: sorted(set(ids))),
                           tags={**tags, "Name": f"{cluster_name}-s3"}, opts=opts)
