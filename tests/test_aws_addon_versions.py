"""EKS managed add-on versions pinned per Kubernetes minor (issue 33 item 6): the table's rules, the planned
add-ons of every shipped AWS stack, the config error for a minor without a row, and the docs.

Before: eks.py asked EKS for its default version of each add-on at every deploy, so an add-on moved whenever
AWS changed its default and vpc-cni could jump more than one minor between deploys (EKS refuses that:
"Updating VPC-CNI can only go up or down 1 minor version at a time"). Tests run on 2026-11-23
(tests/conftest.py GPU_PLATFORM_TODAY)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.data import aws_versions
from gpu_platform.data.eks_addon_versions import ADDONS, FILE, ROWS, UnknownMinor, addon_versions, parse_version, recorded_minors
from gpu_platform.data.versions_calendar import load_calendar, minor_key
from tests.cli_support import preflight_in_process
from tests.conftest import plan_stack, stack_config

ROOT = Path(__file__).resolve().parents[1]
ADDON = "aws:eks/addon:Addon"


def aws_stacks() -> list[str]:
    names = []
    for f in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        doc = yaml.safe_load(f.read_text()) or {}
        if (doc.get("config") or {}).get("gpu-platform:cloud") == "aws":
            names.append(f.name[len("Pulumi."):-len(".yaml")])
    return names


def neighbours() -> list[tuple[str, str]]:
    minors = recorded_minors()
    return list(zip(minors, minors[1:]))


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------


def test_every_row_pins_every_addon_with_a_source_and_date():
    assert aws_versions.EKS_ADDONS == ADDONS
    for minor, row in ROWS.items():
        assert set(row.versions) == set(ADDONS), minor
        for addon, version in row.versions.items():
            parse_version(version)  # vX.Y.Z-eksbuild.N, or ValueError
        assert row.source and " @ " in row.source and len(row.retrieved) == 10


def test_rows_are_consecutive_minors_the_eks_calendar_knows():
    cal = load_calendar()
    minors = recorded_minors()
    assert all(m in cal.minors("aws") for m in minors)
    keys = [minor_key(m) for m in minors]
    assert all(b == (a[0], a[1] + 1) for a, b in zip(keys, keys[1:])), minors


@pytest.mark.parametrize("old,new", neighbours())
def test_a_kubernetes_minor_upgrade_moves_vpc_cni_at_most_one_minor(old, new):
    """The upgrade path: EKS moves the control plane one minor per update, and the add-ons follow in the
    same `pulumi up`; vpc-cni must then move at most one of its own minors (AWS: one minor at a time)."""
    a, b = parse_version(ROWS[old].versions["vpc-cni"]), parse_version(ROWS[new].versions["vpc-cni"])
    assert a[0] == b[0] and 0 <= b[1] - a[1] <= 1, (old, a, new, b)


@pytest.mark.parametrize("old,new", neighbours())
def test_no_addon_goes_down_on_a_minor_upgrade(old, new):
    for addon in ADDONS:
        assert parse_version(ROWS[new].versions[addon]) >= parse_version(ROWS[old].versions[addon]), (addon, old, new)


def test_kube_proxy_is_built_for_its_row_s_minor():
    for minor, row in ROWS.items():
        major, kminor, *_ = parse_version(row.versions["kube-proxy"])
        assert f"{major}.{kminor}" == minor


def test_the_step_check_would_catch_a_two_minor_jump(monkeypatch):
    """The property test can fail: a table whose 1.35 row jumps vpc-cni from v1.20 to v1.22 is caught."""
    import sys

    bad = dict(ROWS)
    row = ROWS["1.35"]
    bad["1.35"] = type(row)(row.minor, {**row.versions, "vpc-cni": "v1.22.0-eksbuild.1"}, row.source, row.retrieved)
    monkeypatch.setattr(sys.modules[__name__], "ROWS", bad)
    with pytest.raises(AssertionError):
        test_a_kubernetes_minor_upgrade_moves_vpc_cni_at_most_one_minor("1.34", "1.35")


def test_every_minor_the_calendar_allows_is_pinned_or_refused_naming_the_key_and_file():
    """Every minor a new EKS cluster may use today (standard, or extended when chosen) either has a row or is a
    config error naming kubernetesVersion and this table, never a KeyError at `pulumi up`."""
    base = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
    extended = {**base, "aws": {**base["aws"], "supportType": "EXTENDED"}}
    allowed = load_calendar().allowed_minors("aws", extended=True)
    assert {"1.32", "1.33", "1.34", "1.35"} <= set(allowed)
    for minor in allowed:
        if minor in ROWS:
            assert addon_versions(minor) == ROWS[minor].versions
            parse_config({**extended, "kubernetesVersion": minor}, "aws-prod")
            continue
        with pytest.raises(UnknownMinor):
            addon_versions(minor)
        with pytest.raises(ConfigError) as err:
            parse_config({**extended, "kubernetesVersion": minor}, "aws-prod")
        message = str(err.value)
        assert "kubernetesVersion" in message and FILE in message and f"no row for {minor}" in message


# ---------------------------------------------------------------------------------------------
# plans and preflight
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", aws_stacks())
def test_each_shipped_aws_stack_plans_its_minor_s_pinned_versions(stack):
    minor = str(stack_config(stack)["gpu-platform:kubernetesVersion"])
    planned = {a.inputs["addonName"]: a.inputs.get("addonVersion") for a in plan_stack(stack).by_type(ADDON)}
    assert planned == ROWS[minor].versions


def test_preflight_refuses_a_minor_without_pinned_addons_with_exit_2(tmp_path):
    """1.36 is in EKS standard support on the test day but has no row: exit 2 (config error), naming the key
    and the file, before anything is planned."""
    assert "1.36" in load_calendar().allowed_minors("aws") and "1.36" not in ROWS
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.aws-prod.yaml").read_text())
    doc["config"]["gpu-platform:kubernetesVersion"] = "1.36"
    stack_file = tmp_path / "Pulumi.aws-136.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    result = preflight_in_process("--stack-file", str(stack_file), "--no-policies", "--out", str(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "kubernetesVersion" in result.stderr and FILE in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------------------------
# docs
# ---------------------------------------------------------------------------------------------


def test_versions_doc_lists_every_pin_and_the_upgrade_rule():
    text = (ROOT / "docs" / "versions.md").read_text()
    [row] = [line for line in text.splitlines() if line.startswith("|") and FILE in line]
    for r in ROWS.values():
        for version in r.versions.values():
            assert version in row, version
    section = text.split("## EKS managed add-on versions", 1)[1]
    assert "one minor" in section and "kubernetesVersion" in section and "1.36" in section
    guide = (ROOT / "docs" / "kubernetes-versions.md").read_text().split("## AWS (EKS)")[1].split("## Linode")[0]
    assert FILE in guide and "EKS's default" not in guide
