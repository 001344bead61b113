"""Issue #32 item 5, upgrading: a cluster created by the previous flow (the program's pulumi-tls CAs) keeps it
with `linode.pki: program`, and its plan is main's, resource for resource; without that key the CA read-back
refuses such a cluster with a message that names it."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from gpu_platform.components.linode import cluster_info
from gpu_platform.config.stack import ConfigError, config_warnings, parse_config
from tests.conftest import plan_config, stack_config
from tests.pki_plan_summary import STACKS, cluster_layer, plans

MAIN = json.loads((Path(__file__).parent / "data" / "linode_pki_program_main.json").read_text())
COMMAND = "command:local:Command"


@pytest.fixture(scope="module")
def program_plans():
    return plans("program")


@pytest.fixture(scope="module")
def default_plans():
    return plans(None)


@pytest.mark.parametrize("stack", STACKS)
def test_program_pki_registers_what_main_registered(program_plans, stack):
    """The Linode cluster layer (what `linode.pki` can change: instances, their user data, the PKI resources) is
    main's, resource for resource. The platform layer is not compared with the recording: it changes with every
    platform release (e.g. the NetworkPolicies added after it), and `linode.pki` cannot touch it
    (test_program_pki_leaves_the_platform_layer_alone)."""
    mine, main = program_plans[stack], MAIN[stack]
    mine_cluster, main_cluster = cluster_layer(mine["resources"], stack), cluster_layer(main["resources"], stack)
    assert main_cluster, "the recording has the cluster layer"
    assert sorted(mine_cluster - main_cluster) == [], "resources main did not register"
    assert sorted(main_cluster - mine_cluster) == [], "resources main registered, gone now"
    assert mine["pki_inputs"] == main["pki_inputs"]
    for label, files in main["boot_files"].items():
        changed = sorted(p for p in set(files) | set(mine["boot_files"][label])
                         if files.get(p) != mine["boot_files"][label].get(p))
        assert changed == [], f"{label}: boot files that differ from main's: {changed}"


@pytest.mark.parametrize("stack", STACKS)
def test_program_pki_leaves_the_platform_layer_alone(program_plans, default_plans, stack):
    """Everything outside the cluster layer is the same with `linode.pki: program` as with today's default."""
    mine, default = program_plans[stack]["resources"], default_plans[stack]["resources"]
    assert sorted(set(mine) - cluster_layer(mine, stack)) == sorted(set(default) - cluster_layer(default, stack))


@pytest.mark.parametrize("stack", STACKS)
def test_the_default_cluster_pki_drops_the_program_cas(stack):
    """The other side: a new stack (no linode.pki) has no CA key resource and reads the CA back."""
    plan = plan_config(stack_config(stack), stack)
    names = {r.name for r in plan.resources}
    prefix = "gpu-dev" if stack == "linode-dev" else "gpu-staging"
    assert f"{prefix}-ca-key" not in names and f"{prefix}-etcd-ca-key" not in names
    assert any(r.type == COMMAND and r.name == f"{prefix}-cluster-ca" for r in plan.resources)


def _raw(**linode):
    raw = {k.split(":", 1)[1]: v for k, v in stack_config("linode-dev").items() if k.startswith("gpu-platform:")}
    raw["linode"] = {**raw["linode"], **linode}
    return raw


def test_a_wrong_pki_value_is_a_config_error_naming_the_key_and_the_choices():
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(pki="programme"), "linode-dev")
    message = str(err.value)
    assert "linode.pki" in message and "'program'" in message and "'cluster'" in message


def _cluster_info(created: str, signed_for: str = "") -> dict:
    kubeconfig = ("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: "
                  + base64.b64encode(b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n").decode()
                  + "\n    server: https://10.0.0.2:6443\n  name: ''\n")
    data = {"kubeconfig": kubeconfig}
    if signed_for:
        token_id, _, secret = signed_for.partition(".")
        data[f"jws-kubeconfig-{token_id}"] = cluster_info.detached_signature(kubeconfig, token_id, secret)
    return {"metadata": {"creationTimestamp": created}, "data": data}


TOKENS = ["abcdef.0123456789abcdef", "ghijkl.0123456789abcdef"]
NOW = time.mktime((2026, 11, 28, 12, 0, 0, 0, 0, 0)) - time.timezone


def test_a_cluster_info_signed_for_none_of_the_tokens_and_older_than_a_day_names_the_key():
    old = _cluster_info("2026-06-01T10:00:00Z", signed_for="zzzzzz.0123456789abcdef")
    with pytest.raises(cluster_info.UnsignedClusterError) as err:
        cluster_info.checked_cluster_ca("198.51.100.7", old, TOKENS, now=NOW)
    message = str(err.value)
    assert "linode.pki: program" in message and "gpu-platform:linode.pki" in message
    assert "abcdef, ghijkl" in message and "0123456789abcdef" not in message  # token ids only, never a secret
    assert "changed nothing" in message


def test_a_young_unsigned_cluster_info_is_retried_and_a_signed_one_read():
    young = _cluster_info("2026-11-28T11:50:00Z")
    with pytest.raises(cluster_info.NotSignedError):
        cluster_info.checked_cluster_ca("198.51.100.7", young, TOKENS, now=NOW)
    signed = _cluster_info("2026-06-01T10:00:00Z", signed_for=TOKENS[1])
    assert "BEGIN CERTIFICATE" in cluster_info.checked_cluster_ca("198.51.100.7", signed, TOKENS, now=NOW)


def test_read_ca_fails_at_once_on_an_old_unsigned_cluster_and_names_the_key_on_timeout(monkeypatch, capsys):
    answers = {"info": _cluster_info("2026-06-01T10:00:00Z")}
    calls = []

    def fake_get(host, path, context):
        calls.append(path)
        return answers["info"]

    monkeypatch.setattr(cluster_info, "_get", fake_get)
    monkeypatch.setenv("API_HOST", "198.51.100.7")
    monkeypatch.setenv("TOKENS", "\n".join(TOKENS))
    assert cluster_info.main(["cluster_info.py", "ca"]) == 1
    assert len(calls) == 1, "an old cluster-info signed for none of the tokens is final, not polled for 30 minutes"
    assert "linode.pki: program" in capsys.readouterr().err
    # A young one is polled; when time runs out, the message names the key too.
    answers["info"] = _cluster_info(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with pytest.raises(cluster_info.ClusterInfoError) as err:
        cluster_info.read_ca("198.51.100.7", TOKENS, timeout=0, interval=0)
    assert "linode.pki: program" in str(err.value)


def test_preflight_warns_that_program_pki_puts_ca_keys_in_user_data():
    assert not [w for w in config_warnings(parse_config(_raw(), "linode-dev")) if "linode.pki" in w]
    warned = [w for w in config_warnings(parse_config(_raw(pki="program"), "linode-dev")) if "linode.pki" in w]
    assert warned and "user data" in warned[0] and "Pulumi state" in warned[0]
