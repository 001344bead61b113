"""When cluster-autoscaler may remove the node a running pod is on: the node's utilisation and the threshold.

Read from the autoscaler's source (kubernetes/autoscaler, tags cluster-autoscaler-1.35.2 and -1.36.1, the same
logic in both):
- core/scaledown/eligibility/eligibility.go, `unremovableReasonAndNodeUtilization`: a node is a scale-down
  candidate only if `isNodeAtOrBelowUtilizationThreshold` holds, which compares with
  `GetScaleDownGpuUtilizationThreshold` on a node the cloud provider calls a GPU node (`GetNodeGpuConfig` non-nil)
  and with `GetScaleDownUtilizationThreshold` on any other, and says "not underutilized" only when
  `utilInfo.Utilization > threshold`: a node exactly at the threshold is a candidate (1 of 2 GPUs at 0.5).
- simulator/utilization/info.go, `Calculate`: on a GPU node the utilisation is the GPU's alone (the sum of the
  pods' GPU requests over the node's allocatable GPUs: `CalculateUtilizationOfResource`), CPU and memory ignored;
  on another node, the larger of CPU's and memory's.
- utils/gpu/gpu.go, `GetNodeGPUFromCloudProvider` / `NodeHasGpu` (what aws, externalgrpc (Linode) and gce return
  from `GetNodeGpuConfig`): a node is a GPU node when it carries the provider's GPU label or allocates a
  non-zero nvidia.com/gpu.
- config/const.go: both thresholds default to 0.5 (flags `--scale-down-utilization-threshold`,
  `--scale-down-gpu-utilization-threshold`, config/flags/flags.go); per node group they can be overridden by
  the cloud provider's `GetOptions` (AWS: the ASG tag `.../autoscaling-options/scaledowngpuutilizationthreshold`,
  cloudprovider/aws/aws_manager.go `GetAsgOptions`; the platform's GPU groups carry only `scaledownunneededtime`,
  components/aws/scale_down.py; externalgrpc: `NodeGroupGetOptions`, which the platform's Linode provider leaves
  unimplemented, so the flags apply, processors/nodegroupconfig `GetScaleDownGpuUtilizationThreshold`).

A pod is judged alone on its node: the other pods there come and go, so the utilisation a node can fall to while
the pod runs is the pod's own. Daemon pods are left out (they would only raise it). Not judged: info.go answers 0
for a GPU node whose allocatable GPUs read 0 (its device plugin gone: "This will guarantee we can still scale down a
node with unready GPU"), a candidate whatever runs there; only the pod's safe-to-evict annotation keeps such a node,
which is why the platform's admission policy (components/platform/queue.py SCALE_DOWN_POLICY) still asks it of every
Job in `training`. Pure: no Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from gpu_platform.preflight.fit.model import NodeGroup

GPU = "nvidia.com/gpu"
DEFAULT_THRESHOLD = 0.5  # config/const.go DefaultScaleDownUtilizationThreshold, DefaultScaleDownGpuUtilizationThreshold
CPU_FLAG = "scale-down-utilization-threshold"
GPU_FLAG = "scale-down-gpu-utilization-threshold"


@dataclass(frozen=True)
class Thresholds:
    """The utilisation thresholds cluster-autoscaler runs with, and where they were read."""
    cpu: float
    gpu: float
    source: str  # e.g. "the rendered Deployment kube-system/cluster-autoscaler (release cluster-autoscaler)"


def _is_autoscaler(container: dict[str, Any]) -> bool:
    words = [str(w) for w in (container.get("command") or [])[:1] or (container.get("args") or [])[:1]]
    image = str(container.get("image") or "").split("@")[0].rsplit(":", 1)[0]
    return (bool(words) and words[0].rsplit("/", 1)[-1] == "cluster-autoscaler") or image.endswith("/cluster-autoscaler")


def flag_value(words: list[str], name: str) -> Optional[str]:
    """The last value of a Go/pflag flag among command-line words: --name=v, -name=v, or --name v."""
    value = None
    for i, w in enumerate(words):
        for prefix in (f"--{name}", f"-{name}"):
            if w == prefix and i + 1 < len(words):
                value = words[i + 1]
            elif w.startswith(prefix + "="):
                value = w[len(prefix) + 1:]
    return value


def rendered_thresholds(releases: Iterable[Any]) -> Optional[Thresholds]:
    """The thresholds of the cluster-autoscaler the stack deploys (the container running the
    `cluster-autoscaler` binary in a rendered Deployment), from its flags, else the defaults. None when the
    stack deploys none (GKE runs its own, cloud kubernetes someone else's: their thresholds are not known here).
    Several (there should be one): the highest, under which most nodes are candidates."""
    found: list[Thresholds] = []
    for rel in releases:
        for obj in getattr(rel, "objects", []) or []:
            if not isinstance(obj, dict) or obj.get("kind") != "Deployment":
                continue
            spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in spec.get("containers") or []:
                if not isinstance(c, dict) or not _is_autoscaler(c):
                    continue
                words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
                meta = obj.get("metadata") or {}
                where = f"the rendered Deployment {meta.get('namespace')}/{meta.get('name')} (release {rel.name})"
                try:
                    cpu = float(flag_value(words, CPU_FLAG) or DEFAULT_THRESHOLD)
                    gpu = float(flag_value(words, GPU_FLAG) or DEFAULT_THRESHOLD)
                except ValueError as exc:
                    raise ValueError(f"{where}: a scale-down utilisation threshold is not a number: {exc}") from None
                found.append(Thresholds(cpu, gpu, where))
    if not found:
        return None
    return Thresholds(max(t.cpu for t in found), max(t.gpu for t in found), "; ".join(t.source for t in found))


@dataclass(frozen=True)
class NodeUse:
    """A pod alone on a node of `group`: what the autoscaler measures there and how much of it the pod requests."""
    group: NodeGroup
    resource: str  # nvidia.com/gpu on a GPU node, else cpu or memory (the larger share)
    requested: int
    allocatable: int

    @property
    def utilisation(self) -> float:
        return self.requested / self.allocatable if self.allocatable else 0.0

    @property
    def gpu_node(self) -> bool:
        return self.resource == GPU


def node_use(group: NodeGroup, requests: dict[str, int]) -> NodeUse:
    """info.go `Calculate` for a node of `group` running only this pod."""
    a = group.allocatable
    if a.gpus > 0:
        return NodeUse(group, GPU, int(requests.get(GPU, 0)), a.gpus)
    cpu = NodeUse(group, "cpu", int(requests.get("cpu", 0)), a.cpu_millis)
    mem = NodeUse(group, "memory", int(requests.get("memory", 0)), a.memory_bytes)
    return cpu if cpu.utilisation > mem.utilisation else mem


def removable(use: NodeUse, thresholds: Optional[Thresholds]) -> bool:
    """Whether the node can be a scale-down candidate while the pod runs on it (eligibility.go
    `isNodeAtOrBelowUtilizationThreshold`: at or below the threshold). Thresholds not known (an autoscaler the
    stack does not deploy): assumed below 1, so only a pod that requests all of its node's measured resource
    keeps the node off the list."""
    if thresholds is None:
        return use.utilisation < 1.0
    return use.utilisation <= (thresholds.gpu if use.gpu_node else thresholds.cpu)


def describe(use: NodeUse, thresholds: Optional[Thresholds]) -> str:
    """`a10g (us-east-1a): 1 of 8 GPUs (12 %), at or below the 0.5 threshold`."""
    g = use.group
    where = f"{g.name} ({g.zone})" if g.zone else g.name
    if use.gpu_node:
        amount = f"{use.requested} of {use.allocatable} GPUs"
    elif use.resource == "cpu":
        amount = f"{use.requested}m of {use.allocatable}m CPU"
    else:
        amount = f"{use.requested / 2**30:.1f} of {use.allocatable / 2**30:.1f} GiB memory"
    if thresholds is None:
        limit = "less than all of it (the autoscaler's threshold is not known here)"
    else:
        limit = f"at or below the {thresholds.gpu if use.gpu_node else thresholds.cpu:g} threshold"
    return f"{where}: {amount} ({use.utilisation:.0%}), {limit}"
