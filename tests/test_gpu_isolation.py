"""A pod sees no more GPUs than it requested, on every cloud's configuration (issue 34 item 4).

Before: the NVIDIA device plugin passed each allocation as NVIDIA_VISIBLE_DEVICES (its default
`envvar` strategy) and the toolkit on Linode's and EKS's GPU nodes kept its default
accept-nvidia-visible-devices-envvar-when-unprivileged = true, so an unprivileged pod that asked for
one GPU and set NVIDIA_VISIBLE_DEVICES=all itself (every CUDA base image does) got every GPU of the
node, and a pod that asked for none got them all too.

What decides which GPUs a container gets, modelled from the pinned upstream sources and fed with what
this program configures (the rendered device plugin chart, the GPU nodes' boot scripts):
- the device plugin's Allocate response (k8s-device-plugin v0.20.0 internal/plugin/server.go
  getAllocateResponse: strategy `envvar` -> env NVIDIA_VISIBLE_DEVICES=<ids>; `volume-mounts` -> env
  NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices and a mount of /dev/null at
  /var/run/nvidia-container-devices/<id> per device);
- the kubelet puts the device plugin's env and the pod's own env in the container, the pod's after
  (which one the runtime sees when both name the variable is not something to rely on: both orders
  are checked);
- the toolkit's runtime hook (nvidia-container-toolkit v1.17.8 cmd/nvidia-container-runtime-hook/
  container_config.go getDevices): with accept-nvidia-visible-devices-as-volume-mounts, devices from
  mounts under /var/run/nvidia-container-devices first; else from the variable, but for an
  unprivileged container only with accept-nvidia-visible-devices-envvar-when-unprivileged
  (defaults: envvar true, volume mounts false, api/config/v1/config.go); "all" means every GPU;
- GKE runs no NVIDIA toolkit: Google's device plugin hands the container the device nodes of its
  allocation and nothing reads the variable (gpu_platform/components/platform/gpu.py docstring).
"""

from __future__ import annotations

import base64
import email
import re
import shlex
from typing import Optional

import pytest

from gpu_platform.components.aws.gpu_asg import render_gpu_node_script
from gpu_platform.components.linode import render as linode_render
from tests.fit_support import need_charts, rendered, stack_plan

NODE_GPUS = ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]  # a 4-GPU node
MOUNT_ROOT = "/var/run/nvidia-container-devices"
TOOLKIT_DEFAULTS = {"accept-nvidia-visible-devices-envvar-when-unprivileged": True,
                    "accept-nvidia-visible-devices-as-volume-mounts": False}


def allocate(strategy: str, ids: list[str]) -> tuple[dict[str, str], list[str]]:
    """The device plugin's answer for a container allocated `ids`: env, mount paths in the container."""
    envs: dict[str, str] = {}
    mounts: list[str] = []
    strategies = strategy.split(",")
    if "envvar" in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(ids)
    if "volume-mounts" in strategies:
        envs["NVIDIA_VISIBLE_DEVICES"] = MOUNT_ROOT
        mounts += [f"{MOUNT_ROOT}/{i}" for i in ids]
    return envs, mounts


def toolkit_devices(config: dict[str, bool], env: dict[str, str], mounts: list[str], privileged: bool) -> set[str]:
    """The GPUs the toolkit's hook injects (getDevices), as node GPU ids."""
    if config["accept-nvidia-visible-devices-as-volume-mounts"]:
        from_mounts = [m[len(MOUNT_ROOT) + 1:] for m in mounts if m.startswith(MOUNT_ROOT + "/")]
        if from_mounts:
            return set(from_mounts)
    value = env.get("NVIDIA_VISIBLE_DEVICES", "")
    requested = [d.strip() for d in value.split(",") if d.strip()]
    if not requested or "void" in requested or "none" in requested:
        return set()
    if not (privileged or config["accept-nvidia-visible-devices-envvar-when-unprivileged"]):
        return set()
    if "all" in requested:
        return set(NODE_GPUS)
    return {d for d in requested if d in NODE_GPUS}


def toolkit_config(script: str) -> dict[str, bool]:
    """The toolkit settings a node boot script leaves: the defaults, then each
    `nvidia-ctk config ... --set key=value` it runs (a bare key is true, as nvidia-ctk reads it)."""
    config = dict(TOOLKIT_DEFAULTS)
    for line in script.splitlines():
        if not line.startswith("nvidia-ctk config"):
            continue
        words = shlex.split(line, comments=True)
        for flag, value in zip(words, words[1:]):
            if flag == "--set":
                key, _, val = value.partition("=")
                config[key] = (val or "true").lower() == "true"
    return config


def device_plugin_strategy(stack: str) -> Optional[str]:
    """DEVICE_LIST_STRATEGY of the NVIDIA device plugin's DaemonSet as the pinned chart renders it for
    `stack` (the plugin's default, envvar, when unset); None where the stack installs no such plugin."""
    found = []
    for release in rendered(stack):
        for obj in release.objects:
            if obj.get("kind") != "DaemonSet":
                continue
            for c in obj["spec"]["template"]["spec"]["containers"]:
                if c.get("command") == ["nvidia-device-plugin"]:
                    env = {e["name"]: e.get("value") for e in c.get("env") or []}
                    found.append(env.get("DEVICE_LIST_STRATEGY") or "envvar")
    assert len(set(found)) <= 1, found
    return found[0] if found else None


def aws_gpu_node_script() -> str:
    """The shell part of an aws-prod GPU launch template's user data, as planned."""
    lt = stack_plan("aws-prod").one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-a10g-us-east-1a").inputs
    msg = email.message_from_string(base64.b64decode(lt["userData"]).decode())
    return next(p.get_payload() for p in msg.get_payload() if p.get_content_type() == "text/x-shellscript")


def gpus_seen(cloud_config: Optional[dict[str, bool]], strategy: Optional[str], requested: int,
              pod_env: dict[str, str], pod_env_last: bool, privileged: bool = False) -> set[str]:
    allocated = NODE_GPUS[:requested]
    if cloud_config is None:  # GKE: the allocation's device nodes, whatever the env says
        return set(allocated)
    plugin_env, mounts = allocate(strategy or "envvar", allocated) if requested else ({}, [])
    env = {**plugin_env, **pod_env} if pod_env_last else {**pod_env, **plugin_env}
    return toolkit_devices(cloud_config, env, mounts, privileged)


CLOUDS = {
    "linode": ("linode-dev", lambda: toolkit_config(linode_render.install_nvidia_script())),
    "aws": ("aws-prod", lambda: toolkit_config(aws_gpu_node_script())),
    "gcp": ("gcp-prod", lambda: None),
}


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
@pytest.mark.parametrize("requested", [0, 1, 2])
@pytest.mark.parametrize("pod_env_last", [True, False])
@pytest.mark.parametrize("value", ["all", "GPU-3", "GPU-0,GPU-1,GPU-2,GPU-3"])
def test_an_unprivileged_pod_naming_gpus_itself_gets_only_what_it_requested(cloud, requested, pod_env_last, value):
    need_charts()
    stack, config = CLOUDS[cloud]
    seen = gpus_seen(config(), device_plugin_strategy(stack), requested, {"NVIDIA_VISIBLE_DEVICES": value}, pod_env_last)
    assert seen == set(NODE_GPUS[:requested]), (cloud, seen)


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_a_pod_that_names_no_gpu_still_gets_the_ones_it_was_allocated(cloud):
    """The fix must not take GPUs from the pods that asked for them (the training image sets nothing)."""
    need_charts()
    stack, config = CLOUDS[cloud]
    assert gpus_seen(config(), device_plugin_strategy(stack), 2, {}, True) == {"GPU-0", "GPU-1"}


def test_the_gpu_nodes_configure_the_toolkit_and_gke_installs_no_nvidia_plugin():
    """Each cloud's half of the fix is where its GPU nodes get it: the toolkit settings in Linode's
    NVIDIA step and in EKS's GPU user data, the volume-mounts strategy in both device plugin
    releases; GKE's plan has no NVIDIA device plugin release (its own runs)."""
    need_charts()
    safe = {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
            "accept-nvidia-visible-devices-as-volume-mounts": True}
    assert toolkit_config(linode_render.install_nvidia_script()) == safe
    assert toolkit_config(aws_gpu_node_script()) == safe
    assert aws_gpu_node_script() == render_gpu_node_script()
    assert device_plugin_strategy("linode-dev") == device_plugin_strategy("aws-prod") == "volume-mounts"
    assert device_plugin_strategy("gcp-prod") is None
    # Linode: the settings are written before containerd restarts (the hook reads the file per container anyway).
    script = linode_render.install_nvidia_script()
    assert script.index("nvidia-ctk config --in-place") < script.index("systemctl restart containerd")
    assert re.search(r"^set -euo pipefail$", aws_gpu_node_script(), re.M)


def test_the_model_reproduces_the_defect_with_the_upstream_defaults():
    """The same model fed the defaults (no toolkit settings, the plugin's envvar strategy) shows the
    defect the issue reports: one GPU requested, every GPU seen; none requested, every GPU seen."""
    assert gpus_seen(dict(TOOLKIT_DEFAULTS), "envvar", 1, {"NVIDIA_VISIBLE_DEVICES": "all"}, True) == set(NODE_GPUS)
    assert gpus_seen(dict(TOOLKIT_DEFAULTS), "envvar", 0, {"NVIDIA_VISIBLE_DEVICES": "all"}, True) == set(NODE_GPUS)
    # Either half alone is not enough: volume mounts with the envvar still accepted let a pod without a
    # GPU request name them all.
    half = {**TOOLKIT_DEFAULTS, "accept-nvidia-visible-devices-as-volume-mounts": True}
    assert gpus_seen(half, "volume-mounts", 0, {"NVIDIA_VISIBLE_DEVICES": "all"}, True) == set(NODE_GPUS)
