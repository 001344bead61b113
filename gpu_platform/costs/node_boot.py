"""Minutes from a scale-up to a schedulable GPU node, per cloud: one figure, used by the cost
simulator (billed boot time, gpu_platform/costs/report.py) and by the job queue (how long Kueue
waits for a job's pods: gpu_platform/components/platform/queue.py), so neither can drift from the other.

GKE and EKS boot images with the driver baked in. A Linode node boots stock Ubuntu and its bootstrap
(gpu_platform/components/linode/render.py bootstrap_script) installs kubeadm and the NVIDIA driver and
container toolkit from apt, checks nvidia-smi, then joins: an assumption (not measured) of twice the
baked-image boot."""

from __future__ import annotations

NODE_BOOT_MINUTES: dict[str, float] = {"gcp": 8.0, "aws": 8.0, "linode": 16.0}


def node_boot_minutes(cloud: str) -> float:
    try:
        return NODE_BOOT_MINUTES[cloud]
    except KeyError:
        raise ValueError(f"no node boot time for cloud {cloud!r} (known: {', '.join(sorted(NODE_BOOT_MINUTES))})") from None
