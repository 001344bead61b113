"""Secrets in stack files (attacker review, secret handling): a credential in clear is refused naming the key and
the file; config errors never print a secret's value; the policy pack is handed no credential, on disk or in its
environment; the pack judges the config the CLI hands it, not a file a variable names; a kubeconfig's server URL
carries no user info and no metadata address.

The stack files are the reviewer's shapes: a shipped stack with one key set (tests/conftest.py stack_config).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, stack_config

SEKRET = "SEKRETa1b2c3"


def _stack_file(tmp_path: Path, base: str, changes: dict, name: str = "x") -> Path:
    config = stack_config(base)
    for key, value in changes.items():
        full = key if ":" in key else f"gpu-platform:{key}"
        if "." in key and ":" not in key.split(".", 1)[0]:
            top, rest = key.split(".", 1)
            section = config.setdefault(f"gpu-platform:{top}", {})
            *path, last = rest.split(".")
            for p in path:
                section = section.setdefault(p, {})
            section[last] = value
        else:
            config[full] = value
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


def _preflight(path: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    from gpu_platform.preflight.__main__ import main

    code = main(["--stack-file", str(path), "--quiet", "--no-policies", "--out", str(tmp_path / "build")])
    out = capsys.readouterr()
    return code, out.err + out.out


# --- 1. a credential in clear is refused (it reached the program and the pack's temporary file) -----------------

CLEAR = [
    ("linode-dev", {"linode:token": SEKRET}, "linode:token"),
    ("linode-dev", {"linode-cluster:token": SEKRET}, "linode-cluster:token"),
    ("linode-dev", {"linode-registry:password": SEKRET}, "linode-registry:password"),
    ("aws-prod", {"aws:secretKey": SEKRET, "aws:accessKey": "AKIAEXAMPLESEKRET"}, "aws:secretKey"),
    ("gcp-prod", {"gcp:credentials": '{"type":"service_account","private_key":"' + SEKRET + '"}'}, "gcp:credentials"),
    ("onprem-dev", {"checkpoint-store:secretAccessKey": SEKRET}, "checkpoint-store:secretAccessKey"),
    ("onprem-dev", {"kubernetes:kubeconfig": f"apiVersion: v1\nusers:\n- name: a\n  user: {{token: {SEKRET}}}\n"},
     "kubernetes:kubeconfig"),
]


@pytest.mark.parametrize("base,changes,key", CLEAR, ids=[c[2] for c in CLEAR])
def test_a_credential_in_clear_is_a_config_error_naming_the_key_and_the_file(base, changes, key, tmp_path, capsys):
    path = _stack_file(tmp_path, base, changes)
    code, text = _preflight(path, tmp_path, capsys)
    assert code == 2, text
    assert f"{key}: a credential in clear in {path}" in text, text
    assert f"pulumi config set --secret {key}" in text
    assert SEKRET not in text and "Traceback" not in text
    assert not (tmp_path / "build").exists() or not any((tmp_path / "build").rglob("*")), "nothing written"


def test_secure_credentials_and_absent_ones_still_plan(tmp_path):
    """`secure:` values (Pulumi encrypts them) and absent keys (CI passes them at run time) are accepted: the
    program gets the stand-in, marked secret."""
    from gpu_platform.config.base import UNDECRYPTABLE
    from gpu_platform.preflight.runner import load_stack_file

    path = _stack_file(tmp_path, "linode-dev", {"linode:token": {"secure": "v1:" + SEKRET}})
    si = load_stack_file(path)
    assert si.config["linode:token"] == UNDECRYPTABLE and "linode:token" in si.secret_keys
    assert si.config["linode-cluster:token"] == UNDECRYPTABLE and "linode-cluster:token" in si.secret_keys
    aws = load_stack_file(_stack_file(tmp_path, "aws-prod", {"aws:accessKey": "AKIAEXAMPLE"}, name="a"))
    assert aws.config["aws:accessKey"] == "AKIAEXAMPLE", "an access key id is an identifier, accepted in clear"


def test_a_kubeconfig_path_to_a_file_that_is_not_one_is_a_config_error_naming_the_file(tmp_path, capsys):
    garbage = tmp_path / "fake-kubeconfig"
    garbage.write_text(f"token: {SEKRET}\n: bad yaml [\n")
    path = _stack_file(tmp_path, "onprem-dev", {"kubernetes:kubeconfig": str(garbage)})
    code, text = _preflight(path, tmp_path, capsys)
    assert code == 2, text  # was 1: "the program failed", naming stacks/Pulumi.x.yaml
    assert f"kubernetes:kubeconfig in {path} (the file {garbage}): not YAML or JSON" in text, text
    assert SEKRET not in text and "the program failed" not in text


def test_a_kubeconfig_path_to_no_file_is_a_config_error(tmp_path, capsys):
    path = _stack_file(tmp_path, "onprem-dev", {"kubernetes:kubeconfig": str(tmp_path / "nowhere.yaml")})
    code, text = _preflight(path, tmp_path, capsys)
    assert code == 2, text
    assert f"kubernetes:kubeconfig in {path}: names the file {tmp_path / 'nowhere.yaml'}, which does not exist" in text


# --- 5. a kubeconfig's server URL: no user info, no link-local or metadata address ------------------------------

def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(textwrap.dedent(f"""\
        apiVersion: v1
        kind: Config
        clusters: [{{name: c, cluster: {{server: "{server}"}}}}]
        contexts: [{{name: onprem-a-admin, context: {{cluster: c, user: u}}}}]
        users: [{{name: u, user: {{token: {SEKRET}}}}}]
        current-context: onprem-a-admin
        """))
    return path


@pytest.mark.parametrize("server,problem", [
    (f"https://{SEKRET}@169.254.169.254:443", "holds user info"),
    (f"https://admin:{SEKRET}@k8s.example.internal:6443", "holds user info"),
    ("https://169.254.169.254:443", "points at 169.254.169.254, a link-local or cloud metadata address"),
    ("https://[fe80::1]:6443", "points at fe80::1, a link-local or cloud metadata address"),
    ("https://[fd00:ec2::254]:443", "points at fd00:ec2::254, a link-local or cloud metadata address"),
    ("https://metadata.google.internal", "points at metadata.google.internal, a link-local or cloud metadata address"),
])
def test_a_kubeconfig_server_with_user_info_or_at_a_metadata_address_is_refused(server, problem, tmp_path, capsys):
    kubeconfig = _kubeconfig(tmp_path, server)
    path = _stack_file(tmp_path, "onprem-dev", {"kubernetes:kubeconfig": str(kubeconfig)})
    code, text = _preflight(path, tmp_path, capsys)
    assert code == 2, text
    assert f"kubernetes:kubeconfig in {path} (the file {kubeconfig}): cluster 'c': its server URL {problem}" in text, text
    assert SEKRET not in text


def test_a_kubeconfig_server_the_provider_can_reach_is_accepted(tmp_path):
    from gpu_platform.config.kubernetes import KubeconfigSource, check_kubeconfig

    for server in ("https://10.0.0.10:6443", "https://k8s.example.internal", "https://127.0.0.1:6443"):
        text = _kubeconfig(tmp_path, server).read_text()
        assert check_kubeconfig(KubeconfigSource("x", text), None, "ctx").server == server


# --- 2. config errors never print a secret's value ---------------------------------------------------------------

MASKED = [
    ("onprem-dev", {"kubernetes.checkpointStore.endpoint": f"https://minio:{SEKRET}@s3.example.internal:9000"},
     'gpu-platform:kubernetes.checkpointStore.endpoint: "https://minio:***@s3.example.internal:9000"'),
    ("onprem-dev", {"kubernetes.checkpointStore.endpoint": f"https://{SEKRET}@s3.example.internal:9000"},
     'gpu-platform:kubernetes.checkpointStore.endpoint: "https://***@s3.example.internal:9000"'),
    ("linode-dev", {"linode.sshAuthorizedKeys": [f"-----BEGIN OPENSSH PRIVATE KEY-----\n{SEKRET}\n"
                                                "-----END OPENSSH PRIVATE KEY-----"]},
     "gpu-platform:linode.sshAuthorizedKeys: (value not shown: it holds a private key)"),
    ("linode-dev", {"linode.imageRegistry.username": f"ci:{SEKRET}"},
     'gpu-platform:linode.imageRegistry.username: "ci:***"'),
    ("linode-dev", {"gpu-platform:dbPassword": SEKRET},
     "gpu-platform:dbPassword: (value not shown: the key's name says it may hold a secret) -> unknown key"),
    ("linode-dev", {"gpu-platform:apiToken": {"value": SEKRET}}, "gpu-platform:apiToken: (value not shown"),
    ("linode-dev", {"platform.alertSmtp": {"smarthost": "smtp.example.com:587", "from": "a@example.com",
                                           "secure": SEKRET}},
     "gpu-platform:platform.alertSmtp.secure: (value not shown"),
    ("linode-dev", {"platform.alertSmtp": {"smarthost": "smtp.example.com:587", "from": "a@example.com",
                                           "secure": {"secure": "v1:" + SEKRET}, "x": 1}},
     "gpu-platform:platform: (a secret value)"),
    ("linode-dev", {"gpu-platform:extra": {"password": SEKRET, "url": f"https://u:{SEKRET}@h"}},
     'gpu-platform:extra: {"password": "***", "url": "https://u:***@h"}'),
]


@pytest.mark.parametrize("base,changes,shown", MASKED, ids=range(len(MASKED)))
def test_a_config_error_names_the_key_without_printing_a_secret(base, changes, shown, tmp_path, capsys):
    path = _stack_file(tmp_path, base, changes)
    code, text = _preflight(path, tmp_path, capsys)
    assert code == 2, text
    assert shown in text, text
    assert SEKRET not in text, text


# --- 3. the pack is handed no credential: not on disk, not in its environment ------------------------------------

# Stands in for the pack's interpreter: records what the pack would be handed (its PULUMI_CONFIG and the config
# file's content, read at once, as the pack's start-up does) and exits.
RECORDER = """#!{python}
import json, os, sys
path = os.environ.get("GPU_PLATFORM_STACK_CONFIG_FILE")
doc = {{"env": os.environ.get("PULUMI_CONFIG"), "file": open(path).read() if path else None}}
open({out!r}, "w").write(json.dumps(doc))
"""


@pytest.mark.parametrize("padding", [0, 110_000], ids=["in-env", "in-file"])
def test_the_pack_is_handed_no_credential_in_its_environment_or_a_file(padding, tmp_path):
    from gpu_platform.preflight.analyzer import Analyzer, PolicyPackError

    out = tmp_path / "handed.json"
    fake = tmp_path / "python"
    fake.write_text(RECORDER.format(python=sys.executable, out=str(out)))
    fake.chmod(0o755)
    config = {"gpu-platform:cloud": "linode", "gpu-platform:monthlyBudgetUsd": "5000", "linode:token": SEKRET,
              "aws:secretKey": SEKRET, "kubernetes:kubeconfig": f"users: [{{user: {{token: {SEKRET}}}}}]"}
    if padding:
        config["gpu-platform:padding"] = "x" * padding  # past what preflight puts in one environment string
    analyzer = Analyzer(stack="x", stack_config=config, python=str(fake), startup_timeout=30)
    with pytest.raises(PolicyPackError):
        analyzer.start()  # the recorder serves nothing
    analyzer.close()
    handed = json.loads(out.read_text())
    seen = handed["file"] if padding else handed["env"]
    assert seen and json.loads(seen)["gpu-platform:monthlyBudgetUsd"] == "5000"
    assert SEKRET not in json.dumps(handed), "a credential reached the pack's environment or a file on disk"
    assert (handed["file"] is None) == (not padding), "a file only when the config does not fit in PULUMI_CONFIG"


# --- 4. the pack judges the config the CLI hands it, not a file a variable names ---------------------------------

def _cli_config(stack: str, **changes: str) -> dict[str, str]:
    from gpu_platform.preflight.runner import stack_input_from_mapping

    config = stack_input_from_mapping(stack, stack_config(stack)).config
    config.update({f"gpu-platform:{k}": v for k, v in changes.items()})
    return config


def test_a_config_file_variable_cannot_swap_the_budget_the_cli_hands_the_pack(tmp_path, monkeypatch):
    from gpu_platform.policies import stack_settings as settings

    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(_cli_config("gcp-prod", monthlyBudgetUsd="10000000")))
    monkeypatch.setattr(settings, "_taken", None)
    monkeypatch.setenv(settings.CONFIG_FILE_ENV, str(forged))
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(_cli_config("gcp-prod")))
    assert settings.stack_settings().monthly_budget_usd == 5000
    # Without PULUMI_CONFIG, a file the pack's lifeline did not take at start-up counts for nothing either.
    monkeypatch.delenv("PULUMI_CONFIG")
    assert settings.stack_settings().monthly_budget_usd is None
    assert forged.exists(), "a file the pack was not handed by preflight is neither read nor deleted"


def test_the_file_preflight_hands_its_pack_is_read_once_and_deleted(tmp_path, monkeypatch):
    from gpu_platform.policies import stack_settings as settings

    handed = tmp_path / "stack-config.json"
    handed.write_text(json.dumps(_cli_config("gcp-prod")))
    monkeypatch.setattr(settings, "_taken", None)
    monkeypatch.delenv("PULUMI_CONFIG", raising=False)
    monkeypatch.setenv(settings.CONFIG_FILE_ENV, str(handed))
    settings.take_config_file()  # what the lifeline does at the pack's start-up
    assert not handed.exists()
    assert settings.stack_settings().monthly_budget_usd == 5000


@pytest.mark.skipif(not (ROOT / "stacks" / "Pulumi.gcp-prod.yaml").is_file(), reason="shipped stack")
def test_a_pack_started_like_the_cli_ignores_a_forged_config_file(tmp_path):
    """End to end: the pack in its own process, PULUMI_CONFIG as the CLI sets it, the variable naming a copy with
    a $10,000,000 budget: the pack reads 5000."""
    import subprocess

    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(_cli_config("gcp-prod", monthlyBudgetUsd="10000000")))
    env = {**os.environ, "PULUMI_CONFIG": json.dumps(_cli_config("gcp-prod")),
           "GPU_PLATFORM_STACK_CONFIG_FILE": str(forged), "GPU_PLATFORM_PACK_LIFELINE": "1"}
    # stdin a pipe held open, as preflight holds its pack's (the lifeline exits at its end of file)
    proc = subprocess.Popen([sys.executable, "-c", "from gpu_platform.policies.stack_settings import stack_settings; "
                             "print(stack_settings().monthly_budget_usd, flush=True)"], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert line.strip() == "5000", line + proc.stderr.read()
