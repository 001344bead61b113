"""Issue 33 item 8: `gcp.gpuDriverVersion: INSTALLATION_DISABLED` planned and passed fit, yet GKE then
installs no NVIDIA driver and the platform has no driver installer of its own on GKE (no driver DaemonSet, no
GPU operator): the nodes advertise no nvidia.com/gpu and every GPU job waits for ever. Refused by the config
check, naming the key; and should such a pool reach the node model, its nodes have no GPUs in fit."""

from __future__ import annotations

import pytest

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit import nodes
from gpu_platform.preflight.runner import Plan, PlannedResource
from tests.conftest import stack_config


def _raw(**gcp):
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("gcp-prod").items() if k.startswith("gpu-platform:")}
    raw["gcp"] = {**raw["gcp"], **gcp}
    return raw


def test_installation_disabled_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(gpuDriverVersion="INSTALLATION_DISABLED"), "gcp-prod")
    text = str(err.value)
    assert "gcp.gpuDriverVersion" in text and "LATEST or DEFAULT" in text and "no driver installer" in text
    for ok in ("LATEST", "DEFAULT"):
        parse_config(_raw(gpuDriverVersion=ok), "gcp-prod")


def _res(type_, name, inputs):
    return PlannedResource(urn=f"urn:{name}", type=type_, name=name, parent=None, custom=True, provider=None,
                           dependencies=[], wire_inputs=inputs)


@pytest.mark.parametrize("driver, gpus", [("LATEST", 1), ("DEFAULT", 1), ("INSTALLATION_DISABLED", 0)])
def test_a_pool_without_a_driver_has_no_gpus_in_fit(driver, gpus):
    class Cfg:
        cloud = "gcp"
        kubernetes_version = "1.35"
        gpu_pools = ()

    cluster = _res("gcp:container/cluster:Cluster", "c", {"privateClusterConfig": {"enablePrivateNodes": False}})
    pool = _res("gcp:container/nodePool:NodePool", "a100", {
        "name": "a100", "nodeLocations": ["z1"], "autoscaling": {"totalMinNodeCount": 0, "totalMaxNodeCount": 2},
        "nodeConfig": {"machineType": "a2-highgpu-1g", "spot": True, "guestAccelerators": [
            {"type": "nvidia-tesla-a100", "count": 1, "gpuDriverInstallationConfig": {"gpuDriverVersion": driver}}]}})
    model = nodes.cluster_model(Cfg(), Plan("t", [cluster, pool], {}))
    (group,) = model.node_groups
    assert group.allocatable.gpus == gpus
    assert (gpus == 0) == any("has no GPU driver" in n for n in model.notes)
