"""Linode's shared private address ranges: plain constants with no model behind them, so the policy pack's rules read
them without importing the config models (the pack loads those in its read-ahead thread, while it waits for its first
call: gpu_platform/policies/__main__.py)."""

import ipaddress

# Linode's regional private network: every Linode with a private IP, any customer's, in the region has an
# address here ("The regional private IP address range, 192.168.128.0/17, is shared by all Linode Instances
# in a region": pulumi_linode Instance.private_ip_address docstring). Admin ranges overlapping it would open
# SSH and the API to other customers, and a VPC subnet may not overlap it (Linode API v4, POST
# /vpcs/{vpcId}/subnets, `ipv4`: "must belong to a private address space as defined in RFC1918 ... must not
# overlap with 192.168.128.0/17").
LINODE_SHARED_PRIVATE_RANGE = ipaddress.ip_network("192.168.128.0/17")
# NodeBalancers reach their backends from this range over the private network (Akamai/Linode LKE firewall
# docs: "allowed-nodebalancers" rules accept 192.168.255.0/24): the only part of the shared network a node
# firewall admits.
LINODE_NODEBALANCER_BACKENDS = ipaddress.ip_network("192.168.255.0/24")
