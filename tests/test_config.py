"""The stack config contract: shipped stacks parse; bad stack files get one clear message naming
the key, the value and what is allowed (exit 2, no traceback, nothing registered)."""

from __future__ import annotations

import json

import re
import subprocess
import sys
import typing

import pytest
import yaml

from gpu_platform.config.model import STRUCTURED_KEYS, StackConfig
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.runner import ProgramError, stack_input_from_mapping
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
    ("cloud", "azure", "gpu-platform:cloud", "'linode', 'gcp', 'aws' or 'kubernetes'"),
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
    ("gpuPools", "rtx6000", "gpu-platform:gpuPools", "a list (YAML sequence), not a string"),
    ("gpuPools.0.maxNodes", "two", "gpuPools[0].maxNodes", "valid integer"),
    ("gpuPools.0.name", "RTX_6000", "gpuPools[0].name", "DNS-1123 label"),
    ("linode", None, "gpu-platform:linode", "required when cloud is linode"),
    ("linode.region", "us-east", "linode.region", "a region offering g2-gpu-rtx4000a1-m"),
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
    run = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "--stack-file", str(bad), "--no-policies"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    # The file actually read, not stacks/Pulumi.<name>.yaml.
    assert f"invalid configuration in {bad} " in run.stderr
    assert "gpu-platform:gpuPools[0].minNodes: 5" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout


def test_unknown_stack_name_exits_4():
    # Issue 16's exit codes: an unknown stack is a usage error (4), not a bad config (2).
    run = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "no-such-stack"], cwd=ROOT,
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
    """Every scalar or list key of the model is typed in Pulumi.yaml with the model's default, except the
    optional ones the model computes when unset (nameSuffix, kubernetesVersion): the CLI treats a typed key
    without a default as required and refuses a stack that lacks it (pulumi/pulumi v3.259.0,
    pkg/workspace/config.go mergeConfig: "Stack '<stack>' is missing configuration value"), so typing them
    would make every stack that leaves them unset undeployable. tests/test_workflow_commands.py runs the CLI
    on the shipped stacks."""
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
        if not field.is_required() and field.get_default(call_default_factory=True) is None:
            # Optional, computed when unset (kubernetesVersion: from the version calendar; nameSuffix: none).
            assert alias not in schema, (f"{alias} is optional without a static default: typed in Pulumi.yaml, "
                                         "the CLI would require it of every stack")
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
            assert decl["default"] == field.get_default(call_default_factory=True), alias


def test_unknown_key_under_a_mapping_of_sections_lists_the_allowed_keys():
    cfg = stack_config("aws-prod")
    pools = cfg["gpu-platform:aws"]["pools"]
    pools[next(iter(pools))]["bogus"] = 1
    with pytest.raises(ConfigError) as err:
        parse_config(bare(cfg), "aws-prod")
    assert "bogus: 1 -> unknown key; allowed keys here: instanceTypes" in str(err.value)


# --- Derived cloud names (gpu_platform/config/names.py) -------------------------------------------------

def _raw(stack: str, **changes) -> dict:
    raw = {k.split(":", 1)[1]: v for k, v in stack_config(stack).items() if k.startswith("gpu-platform:")}
    raw.update(changes)
    return raw


def _issue(stack: str, **changes) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(stack, **changes), stack)
    return str(err.value)


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha", "gcp-prod", "aws-prod"])
def test_every_derived_name_is_the_name_the_program_registers(stack):
    """names.py computes names as the components do: each must appear among the registered names/labels,
    so a component that changes its naming without names.py fails here."""
    from gpu_platform.config.names import K8S_NODE_NAME, derived_names
    from tests.conftest import plan_stack

    cfg = parse_config(_raw(stack), stack)
    plan = plan_stack(stack)
    registered = {str(r.inputs.get(k)) for r in plan.resources
                  for k in ("label", "name", "bucketPrefix", "accountId") if r.inputs.get(k) is not None}
    # Autoscaled Linode pools: the node-group provider labels its instances <cluster>-<pool>-<slot>
    # (gpu_platform/controllers/linode_node_groups/service.py) for the slots of its pools.json.
    for r in plan.resources:
        if r.type == "kubernetes:core/v1:ConfigMap" and r.inputs["metadata"].get("name") == "linode-node-groups":
            doc = json.loads(r.inputs["data"]["pools.json"])
            registered |= {f"{doc['cluster']}-{p['name']}-{i}" for p in doc["pools"] for i in range(p["maxNodes"])}
    registered |= {t for r in plan.resources for t in (r.inputs.get("tags") or []) if isinstance(t, str)}
    # The Linode bucket label ends in a random suffix; names.py stands it in with x's of its length.
    registered |= {re.sub(r"-[a-z0-9]{8}$", "-" + "x" * 8, r.inputs["label"]) for r in plan.resources
                   if r.type == "linode:index/objectStorageBucket:ObjectStorageBucket"}
    missing = [n.value for n in derived_names(cfg) if n.rule is not K8S_NODE_NAME and not (
        n.value in registered if not n.random_suffix
        else any(r[:-n.random_suffix] == n.value[:-n.random_suffix] and len(r) == len(n.value) for r in registered))]
    assert not missing, f"derived names the program does not register: {missing}"


@pytest.mark.parametrize("stack,changes,fragment", [
    # Linode: instance label gpu-<env>-<pool>-<i> over 64 characters
    ("linode-dev", {"environment": "e" * 30, "gpuPools": [{"name": "p" * 30, "instanceType": "g2-gpu-rtx4000a1-m",
                                                          "capacity": "on-demand", "minNodes": 1, "maxNodes": 1}]},
     "gpu-platform:gpuPools[0].name"),
    ("linode-dev", {"owner": "ml_platform"}, "gpu-platform:owner: \"ml_platform\" -> a value that gives the checkpoint bucket"),
    ("linode-dev", {"environment": "abcdefghijklmnopqrstuvwxyz"}, "a Linode Firewall label must have 3 to 32"),
    ("linode-ha", {"environment": "abcdefghijklmnopqrstuvwxyz"}, "a Linode Firewall label must have 3 to 32"),
    ("aws-prod", {"environment": "abcdefghijklmnopqrstuvwxyz"}, "an S3 bucket_prefix must have 1 to 37"),
])
def test_names_the_cloud_refuses_are_config_errors_naming_the_key(stack, changes, fragment):
    assert fragment in _issue(stack, **changes)


def test_longest_environment_on_gcp_gives_names_within_every_limit():
    """GCP names are shortened where needed (service accounts, bucket): a 30-character environment fits."""
    from gpu_platform.config.names import derived_names

    cfg = parse_config(_raw("gcp-prod", environment="e" * 30), "gcp-prod")
    assert [n.value for n in derived_names(cfg) if n.rule.problem(n.value)] == []


def test_gcs_bucket_name_may_not_contain_google():
    gcp = {**stack_config("gcp-prod")["gpu-platform:gcp"], "project": "google-ml-proj"}
    assert "gpu-platform:gcp.project: \"google-ml-proj\"" in _issue("gcp-prod", gcp=gcp)


@pytest.mark.parametrize("key,value", [
    ("environment", "dev\n"), ("alertEmails", ["ops@example.com\n"]), ("owner", "ml-platform\n"),
])
def test_a_trailing_newline_is_refused(key, value):
    """Patterns are matched with fullmatch: `$` alone also matches before a final newline."""
    assert f"gpu-platform:{key}" in _issue("linode-dev", **{key: value})


def test_a_trailing_newline_in_gcp_project_and_zones_is_refused():
    base = stack_config("gcp-prod")["gpu-platform:gcp"]
    assert "gcp.project" in _issue("gcp-prod", gcp={**base, "project": "my-ml-project\n"})
    assert "gcp.zones[0]" in _issue("gcp-prod", gcp={**base, "zones": ["us-central1-a\n"]})


def test_smarthost_port_in_range_and_image_not_empty():
    platform = {**stack_config("linode-dev")["gpu-platform:platform"],
                "alertSmtp": {"smarthost": "smtp.example.com:99999", "from": "a@example.com"}}
    assert "1 to 65535" in _issue("linode-dev", platform=platform)
    linode = {**stack_config("linode-dev")["gpu-platform:linode"], "image": ""}
    assert "gpu-platform:linode.image" in _issue("linode-dev", linode=linode)


@pytest.mark.parametrize("key,value,fragment", [
    ("monthlyBudgetUsd", True, "a number, not true/false"),
    ("gpuPools", [{"name": "rtx6000", "instanceType": "g1-gpu-rtx6000-1", "capacity": "on-demand",
                   "minNodes": 1, "maxNodes": True}], "gpu-platform:gpuPools[0].maxNodes: true"),
    ("kubernetesVersion", 1.3, "quoted version string"),
    ("priceOverrides", {"g1-gpu-rtx6000-1": {"onDemand": float("inf")}}, "finite number"),
])
def test_bool_as_number_nonfinite_and_ambiguous_versions_are_refused(key, value, fragment):
    assert fragment in _issue("linode-dev", **{key: value})


def test_unquoted_kubernetes_version_is_read_as_its_text():
    # 1.35: the minor linode-dev's control plane runs (linode.controlPlaneVersion must agree).
    cfg = parse_config(_raw("linode-dev", kubernetesVersion=1.35), "linode-dev")
    assert cfg.kubernetes_version == "1.35"


def test_a_secret_gpu_platform_key_is_refused_without_showing_it():
    err = str(_secret_issue())
    assert "gpu-platform:owner: (a secret value) -> a plain value, not a secret" in err
    assert "s3cr3t" not in err


def _secret_issue():
    with pytest.raises(ConfigError) as err:
        parse_config(_raw("linode-dev", owner="s3cr3t"), "linode-dev", secret_keys={"owner"})
    return err.value


def test_the_program_refuses_a_key_the_cli_marks_secret():
    """Under the CLI a `--secret` key reaches the program in PULUMI_CONFIG_SECRET_KEYS (in-process:
    set_all_config's list); the program must not read it as a plain value."""
    si = stack_input_from_mapping("linode-dev", stack_config("linode-dev"))
    si.secret_keys.add("gpu-platform:costCenter")
    from gpu_platform.preflight.runner import run_program

    with pytest.raises(ProgramError, match=r"gpu-platform:costCenter: \(a secret value\)"):
        run_program(si)
