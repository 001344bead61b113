"""Linode stack rules: bad combinations are rejected before anything is registered, naming the key."""

from __future__ import annotations

import copy

import pytest

from components.config import ConfigError, parse_config
from preflight.runner import stack_input_from_mapping
from tests.conftest import stack_config


def _linode(**changes) -> dict:
    cfg = copy.deepcopy(stack_config("linode-dev"))
    cfg["gpu-platform:linode"].update(changes)
    return cfg


def _reject(cfg: dict, stack: str = "linode-dev") -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping(stack, cfg).raw, stack)
    message = str(err.value)
    assert f"stacks/Pulumi.{stack}.yaml" in message
    return message


@pytest.mark.parametrize("pool,key,allowed", [
    ({"type": "g1-gpu-rtx6000-1", "count": 1}, "linode.systemPool.type", "non-GPU Linode plan"),
    ({"type": "g6-nonexistent", "count": 1}, "linode.systemPool.type", "g6-standard-4"),
    ({"type": "g6-standard-4", "count": 0}, "linode.systemPool.count", "greater than or equal to 1"),
    ({"type": "g6-standard-4", "size": 2}, "linode.systemPool.size", "unknown key"),
])
def test_bad_system_pool_is_rejected_naming_the_key(pool, key, allowed):
    message = _reject(_linode(systemPool=pool))
    assert key in message and allowed in message, message


def test_shipped_linode_stacks_have_a_system_pool():
    for stack in ("linode-dev", "linode-ha"):
        cfg = parse_config(stack_input_from_mapping(stack, stack_config(stack)).raw, stack)
        assert cfg.linode.system_pool.count >= 1
