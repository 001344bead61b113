"""The hostile corpus of issue 23 (tests/data/hostile/cases.yaml, written by tests/data/hostile/generate.py):
every case gets its expected exit code and message, none crashes, none slips past a guardrail.

Config cases are validated in-process (what preflight does before anything runs: exit 2 is a ConfigError);
policy cases run through the real pack process, one per stack config; command lines run preflight's main
in-process. The end-to-end subprocess runs live in tests/test_preflight_exits.py and test_hostile_input.py."""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, shipped_plan, stack_config

CORPUS = ROOT / "tests" / "data" / "hostile"
CASES = yaml.safe_load((CORPUS / "cases.yaml").read_text())


def test_the_corpus_is_large_grouped_and_generated():
    import importlib.util

    assert len(CASES) >= 300
    assert len({c["id"] for c in CASES}) == len(CASES)
    assert {c["exit"] for c in CASES} == {0, 2, 3, 4}
    assert {"spelling", "numbers", "dates", "labels", "tags", "cidrs", "regions", "emails", "smtp", "ssh", "images",
            "approvals", "secrets", "control", "weakening", "exceptions", "budget", "accepted", "cli"} <= {c["group"] for c in CASES}
    spec = importlib.util.spec_from_file_location("hostile_generate", CORPUS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert json.loads(json.dumps(module.CASES)) == json.loads(json.dumps(CASES)), "run tests/data/hostile/generate.py"


def _config(case: dict) -> dict[str, Any]:
    config = copy.deepcopy(stack_config(case["base"]))
    for keys, value in case.get("set", []):
        node = config
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    for keys in case.get("delete", []):
        node = config
        for k in keys[:-1]:
            node = node[k]
        node.pop(keys[-1], None)
    return config


def _resolve(value: Any) -> Any:
    """'+30d' in a policy config: a date 30 days from today (an exception valid whenever the test runs)."""
    if isinstance(value, dict):
        return {k: _resolve(v) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("+") and value.endswith("d"):
        return (dt.datetime.now(dt.timezone.utc).date() + dt.timedelta(days=int(value[1:-1]))).isoformat()
    return value


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "config"], ids=lambda c: c["id"])
def test_config_case(case):
    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.runner import stack_input_from_mapping

    si = stack_input_from_mapping(case["base"], _config(case), source=f"Pulumi.{case['id']}.yaml")
    try:
        parse_config(si.raw, si.stack, source=si.source, secret_keys=si.bare_secret_keys)
    except ConfigError as exc:
        text = str(exc)
        assert case["exit"] == 2, f"refused a right value:\n{text}"
        assert case["message"] in text, text
        assert "AAABAHIDDENCIPHERTEXT" not in text
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\x9b" not in text
        return
    assert case["exit"] == 0, f"accepted what the cloud or the kubelet refuses: {case['id']}"


_ANALYZERS: dict[str, Any] = {}
_PLANS: dict[str, Any] = {}


@pytest.fixture(scope="module")
def analyzers():
    yield _ANALYZERS
    for a in _ANALYZERS.values():
        a.close()
    _ANALYZERS.clear()
    _PLANS.clear()


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "policy"], ids=lambda c: c["id"])
def test_policy_case(case, analyzers):
    from gpu_platform.preflight.analyzer import Analyzer
    from gpu_platform.preflight.runner import load_stack, run_program, stack_input_from_mapping

    si = stack_input_from_mapping(case["base"], _config(case))
    key = json.dumps(si.config, sort_keys=True)
    if key not in analyzers:
        analyzers[key] = Analyzer(stack=si.stack, stack_config=si.config)
        analyzers[key].start()
        # Most cases weaken the policy config of a shipped stack as it is: its plan is the process's shared one.
        _PLANS[key] = (shipped_plan(si.stack, os.environ.get("GPU_PLATFORM_TODAY"))
                       if si.config == load_stack(si.stack).config else run_program(si))
    report = analyzers[key].analyze(_PLANS[key], _resolve(case.get("policy_config")))
    if case["exit"] == 0:
        assert report.mandatory_violations == 0, report.render()
        return
    mandatory = [m.message for m in report.result(case["policy"]).messages if m.level == "mandatory"]
    assert any(case["message"] in m for m in mandatory), report.render()


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "cli"], ids=lambda c: c["id"])
def test_command_line_case(case, tmp_path, capsys):
    from tests.test_hostile_input import run_main

    stack = tmp_path / "Pulumi.corpus.yaml"
    stack.write_text(yaml.safe_dump({"config": _config(case)}))
    for name, text in case["files"].items():
        path = tmp_path / name
        if text == "<dir>":
            path.mkdir()
        elif text == "<dangling>":
            path.symlink_to(tmp_path / "gone")
        else:
            path.write_text(text)
    argv = [a.replace("{stack}", str(stack)).replace("{tmp}", str(tmp_path)) for a in case["argv"]]
    try:
        code, text, _ = run_main(argv + ["--quiet"] if argv else argv, capsys)
    except SystemExit as exc:  # argparse's usage errors
        code, text = exc.code, capsys.readouterr().err
    assert code == case["exit"], text
    assert case["message"] in text, text
    assert "Traceback" not in text and "preflight None" not in text
