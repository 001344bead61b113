"""Minutes from a scale-up to a schedulable GPU node, per cloud: one figure, used by the cost
simulator (billed boot time, gpu_platform/costs/report.py) and by the job queue (how long Kueue
waits for a job's pods: gpu_platform/components/platform/queue.py), so neither can drift from the other.

GKE and EKS boot images with the driver baked in. A Linode node boots stock Ubuntu and its bootstrap
(gpu_platform/components/linode/render.py bootstrap_script) installs kubeadm and the NVIDIA driver and
container toolkit from apt, checks nvidia-smi, then joins: an assumption (not measured) of twice the
baked-image boot."""

from __future__ import annotations

import math

NODE_BOOT_MINUTES: dict[str, float] = {"gcp": 8.0, "aws": 8.0, "linode": 16.0}


def node_boot_minutes(cloud: str) -> float:
    try:
        return NODE_BOOT_MINUTES[cloud]
    except KeyError:
        raise ValueError(f"no node boot time for cloud {cloud!r} (known: {', '.join(sorted(NODE_BOOT_MINUTES))})") from None


# A node group's join deadline (cluster-autoscaler's --max-node-provision-time: a node not registered by then
# is deleted and its group backed off; on Linode linode.nodeGroups.joinDeadlineMinutes) must be at least this
# many times the pool's boot. The figures above are assumptions, not measurements, and a boot varies: on
# Linode with Linode's provisioning and the apt downloads of the bootstrap (kubeadm, the NVIDIA driver and
# container toolkit). A deadline at the boot itself deletes every node slower than the assumption, after
# billing its boot, and backs the pool off: the pool may never scale up. Half a boot more (8 minutes on
# Linode) is the least the program accepts; cluster-autoscaler's own default, 15 minutes
# (cluster-autoscaler 1.35.2 config/flags/flags.go `max-node-provision-time`), is nearly twice the
# 8-minute baked-image boot above.
JOIN_DEADLINE_BOOT_FACTOR = 1.5


def min_join_deadline_minutes(boot_minutes: float) -> int:
    """The shortest join deadline, in whole minutes, a pool booting in `boot_minutes` is given."""
    return math.ceil(boot_minutes * JOIN_DEADLINE_BOOT_FACTOR)
