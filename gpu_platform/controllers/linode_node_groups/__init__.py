"""Linode node-group provider: cluster-autoscaler's externalgrpc CloudProvider for the stack's
Linode GPU pools (scale to zero on a self-managed kubeadm cluster). Built into its own image
(Dockerfile here), deployed by digest (gpu_platform/components/linode/node_groups.py); see
docs/linode-autoscaling.md.
"""
