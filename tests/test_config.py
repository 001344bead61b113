"""The stack config contract: shipped stacks parse; bad stack files get one clear message naming
the key, the value and what is allowed (exit 2, no traceback, nothing registered)."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest
import yaml

from components.config import STRUCTURED_KEYS, ConfigError, StackConfig, parse_config
from preflight.runner import ProgramError, stack_input_from_mapping
from tests.conftest import ROOT, plan_config, stack_config


def bare(config: dict) -> dict:
    """Stack-file mapping -> the bare `gpu-platform` keys parse_config takes."""
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpu-platform:")}


@pytest.mark.parametrize("stack", sorted(p.name[7:-5] for p in (ROOT / "stacks").glob("Pulumi.*.yaml")))
def test_shipped_stacks_parse(stack):
    cfg = parse_config(stack_input_from_mapping(stack, stack_config(stack)).raw, stack)
    assert cfg.gpu_pools and cfg.cloud_section is not None


def _set(cfg: dict, path: str, value):
    """Set a dotted/indexed path (gpuPools.0.capacity) in a stack mapping; value None deletes."""
    parts = path.split(".")
    node = cfg
    key = "gpu-platform:" + parts[0]
    if len(parts) == 1:
        if value is None:
            node.pop(key, None)
        else:
            node[key] = value
        return cfg
    node = node[key]
    for p in parts[1:-1]:
        node = node[int(p)] if p.isdigit() else node[p]
    last = parts[-1]
    if value is None:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return cfg


# (change to linode-dev, key the message must name, a fragment of what is allowed)
MALFORMED = [
    ("cloud", "azure", "gpu-platform:cloud", "'linode', 'gcp' or 'aws'"),
    ("gpuPools.0.minNodes", 3, "gpuPools[0].minNodes", "at most maxNodes"),
    ("gpuPools.0.capacity", "spot", "gpuPools[0].capacity", "on-demand"),
    ("gpuPools.0.capacity", "cheap", "gpuPools[0].capacity", "'spot', 'preemptible' or 'on-demand'"),
    ("gpuPools.0.instanceType", "g6-standard-4", "gpuPools[0].instanceType", "has no GPU"),
    ("gpuPools.0.instanceType", "a2-highgpu-1g", "gpuPools[0].instanceType", "g1-gpu-rtx6000-1"),
    ("monthlyBudgetUsd", None, "gpu-platform:monthlyBudgetUsd", "required"),
    ("monthlyBudgetUsd", "lots", "gpu-platform:monthlyBudgetUsd", "valid integer"),
    ("monthlyBudgetUsd", -5, "gpu-platform:monthlyBudgetUsd", "greater than 0"),
    ("adminCidrs", ["203.0.113.7/24"], "adminCidrs[0]", "no host bits"),
    ("adminCidrs", ["not-a-cidr"], "adminCidrs[0]", "CIDR block"),
    ("gpuPool", [], "gpu-platform:gpuPool", "unknown key"),
    ("gpuPools.0.gpus", 2, "gpuPools[0].gpus", "unknown key; allowed keys here"),
    ("linode.zone", "a", "linode.zone", "unknown key"),
    ("gpuPools", "rtx6000", "gpu-platform:gpuPools", "structured value"),
    ("gpuPools.0.maxNodes", "two", "gpuPools[0].maxNodes", "valid integer"),
    ("gpuPools.0.name", "RTX_6000", "gpuPools[0].name", "DNS-1123 label"),
    ("linode", None, "gpu-platform:linode", "required when cloud is linode"),
    ("linode.region", "us-ord", "linode.region", "a region offering g1-gpu-rtx6000-1"),
    ("linode.controlPlane.count", 2, "linode.controlPlane.count", "1 or 3"),
    ("linode.controlPlane.type", "g1-gpu-rtx6000-1", "linode.controlPlane.type", "non-GPU Linode plan"),
    ("linode.podCidr", "10.0.0.0/16", "linode.podCidr", "does not overlap"),
    ("linode.sshAuthorizedKeys", ["hunter2"], "linode.sshAuthorizedKeys", "OpenSSH public keys"),
    ("kubernetesVersion", "1.20", "gpu-platform:kubernetesVersion", "'1.33'"),
    ("alertEmails", ["ops-at-example"], "alertEmails[0]", "e-mail address"),
    ("environment", "Prod", "gpu-platform:environment", "DNS-1123 label"),
    ("owner", None, "gpu-platform:owner", "required"),
    ("gpuPools.0.labels", {"bad key!": "x"}, "gpuPools[0].labels", "label keys"),
    ("priceOverrides", {"g9-unknown": {"onDemand": 1.0}}, "priceOverrides.g9-unknown", "instance type in the catalog"),
]


@pytest.mark.parametrize("path,value,key,allowed", MALFORMED, ids=[f"{m[0]}={m[1]!r}" for m in MALFORMED])
def test_malformed_linode_stack_is_rejected_naming_the_key(path, value, key, allowed):
    cfg = _set(stack_config("linode-dev"), path, value)
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")
    message = str(err.value)
    assert "stacks/Pulumi.linode-dev.yaml" in message
    assert key in message, message
    assert allowed in message, message


def test_duplicate_pool_names_rejected():
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:gpuPools"].append(dict(cfg["gpu-platform:gpuPools"][0]))
    with pytest.raises(ConfigError, match=r"gpuPools\[1\]\.name.*unique"):
        parse_config(bare(cfg), "x")


def test_every_problem_is_reported_at_once():
    cfg = _set(_set(stack_config("linode-dev"), "cloud", "azure"), "monthlyBudgetUsd", None)
    with pytest.raises(ConfigError) as err:
        parse_config(bare(cfg), "linode-dev")
    assert len(err.value.issues) == 2


def test_values_as_the_cli_passes_them_parse_like_yaml():
    """The CLI hands the program strings (JSON for structures); the result must be the same."""
    si = stack_input_from_mapping("linode-dev", stack_config("linode-dev"))
    as_cli = {k.split(":", 1)[1]: v for k, v in si.config.items() if k.startswith("gpu-platform:")}
    assert all(isinstance(v, str) for v in as_cli.values())
    assert parse_config(as_cli, "linode-dev") == parse_config(si.raw, "linode-dev")


def test_program_with_bad_config_registers_nothing():
    cfg = _set(stack_config("linode-dev"), "gpuPools.0.capacity", "spot")
    with pytest.raises(ProgramError, match=r"gpuPools\[0\]\.capacity"):
        plan_config(cfg)


def test_preflight_cli_exits_2_with_one_message_and_no_traceback(tmp_path):
    cfg = _set(stack_config("linode-dev"), "gpuPools.0.minNodes", 5)
    bad = tmp_path / "Pulumi.broken.yaml"
    bad.write_text(yaml.safe_dump({"config": cfg}))
    run = subprocess.run([sys.executable, "-m", "preflight", "--stack-file", str(bad), "--no-policies"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    # The file actually read, not stacks/Pulumi.<name>.yaml.
    assert f"invalid configuration in {bad} " in run.stderr
    assert "gpu-platform:gpuPools[0].minNodes: 5" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout


def test_unknown_stack_name_exits_4():
    # Issue 16's exit codes: an unknown stack is a usage error (4), not a bad config (2).
    run = subprocess.run([sys.executable, "-m", "preflight", "no-such-stack"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 4 and "linode-dev" in run.stderr


# --- Pulumi.yaml's config schema and the model agree ------------------------------------------

SCHEMA_TYPES = {str: "string", int: "integer", bool: "boolean"}


def _schema_type(annotation) -> dict:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _schema_type(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return {"type": SCHEMA_TYPES[type(typing.get_args(annotation)[0])]}
    if origin is list:
        return {"type": "array", "items": _schema_type(typing.get_args(annotation)[0])}
    return {"type": SCHEMA_TYPES[annotation]}


def test_pulumi_yaml_schema_matches_the_model():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "gpu-platform" and project["stackConfigDir"] == "stacks"
    assert project["runtime"]["name"] == "python" and project["runtime"]["options"]["virtualenv"] == ".venv"
    schema = project["config"]
    model_keys = {}
    for name, field in StackConfig.model_fields.items():
        alias = field.alias or name
        if alias in STRUCTURED_KEYS and alias not in ("alertEmails", "adminCidrs"):
            assert alias not in schema, f"{alias} is structured: Pulumi.yaml cannot type it"
            continue
        model_keys[alias] = field
    assert set(schema) == set(model_keys)
    for alias, field in model_keys.items():
        decl = schema[alias]
        assert decl.get("description"), alias
        expected = _schema_type(field.annotation)
        assert {k: decl[k] for k in expected} == expected, alias
        if field.is_required():
            assert "default" not in decl, f"{alias} is required: no default"
        else:
            default = field.get_default(call_default_factory=True)
            if default is None:  # computed when unset (kubernetesVersion: from the version calendar)
                assert "default" not in decl, f"{alias} is computed when unset: no static default"
                continue
            assert decl["default"] == default, alias


def test_unknown_key_under_a_mapping_of_sections_lists_the_allowed_keys():
    cfg = stack_config("aws-prod")
    pools = cfg["gpu-platform:aws"]["pools"]
    pools[next(iter(pools))]["bogus"] = 1
    with pytest.raises(ConfigError) as err:
        parse_config(bare(cfg), "aws-prod")
    assert "bogus: 1 -> unknown key; allowed keys here: instanceTypes" in str(err.value)
