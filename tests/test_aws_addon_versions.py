"""EKS managed add-on versions pinned per Kubernetes minor (issue 33 item 6): the table's rules, the planned
add-ons of every shipped AWS stack, the config error for a minor without a row, and the docs.

Before: eks.py asked EKS for its default version of each add-on at every deploy, so an add-on moved whenever
AWS changed its default and vpc-cni could jump more than one minor between deploys (EKS refuses that:
"Updating VPC-CNI can only go up or down 1 minor version at a time"). Tests run on 2026-11-23
(tests/conftest.py GPU_PLATFORM_TODAY).

GKE/EKS review of 2026-11-28: a row for 1.36 (without it, from 2027-03-28 a STANDARD stack had no minor
preflight accepts), each row's source date (`as_of`) beside the day it was read."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from pathlib import Path

import pytest
import yaml

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.data import aws_versions
from gpu_platform.data.eks_addon_versions import ADDONS, FILE, ROWS, UnknownMinor, addon_versions, parse_version, recorded_minors
from gpu_platform.data import versions_calendar
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
        assert row.source and " @ " in row.source and len(row.retrieved) == 10 and len(row.as_of) == 10


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
    bad["1.35"] = dataclasses.replace(row, versions={**row.versions, "vpc-cni": "v1.22.0-eksbuild.1"})
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


HORIZON_DAYS = 180


def days_without_a_standard_minor_with_a_row(rows, horizon=HORIZON_DAYS) -> list[tuple[str, tuple[str, ...]]]:
    """The days of the next `horizon` days (from the version calendar's today) on which no minor in EKS
    standard support has an add-on row, each with the minors in standard support that day."""
    cal, start = load_calendar(), versions_calendar.today()
    gaps = []
    for offset in range(horizon):
        day = start + dt.timedelta(days=offset)
        standard = cal.allowed_minors("aws", day)
        if not any(m in rows for m in standard):
            gaps.append((day.isoformat(), standard))
    return gaps


def test_a_standard_support_minor_has_pinned_addons_on_every_day_of_the_next_180_days():
    """Review finding (MAJOR): from 2027-03-28 1.35 is out of EKS standard support and 1.36 had no row, so a
    STANDARD aws-prod had no minor preflight accepts, while EKS itself upgrades a STANDARD cluster to 1.36 when
    1.35's standard support ends (the daily drift check then shows a 1.36 -> 1.35 diff EKS cannot apply).
    For every day of the next 180 days some minor in standard support must have an add-on row."""
    gaps = days_without_a_standard_minor_with_a_row(ROWS)
    assert gaps == [], f"first day without one: {gaps[0]} (standard minors that day, none with a row in {FILE})"


def test_the_horizon_check_catches_a_missing_row(monkeypatch):
    """The property can fail: without 1.36's row the gap opens on 2027-03-27, the day 1.35 leaves standard
    support (test day 2026-11-23 + 180 days reaches 2027-05-22)."""
    without = {m: r for m, r in ROWS.items() if m != "1.36"}
    gaps = days_without_a_standard_minor_with_a_row(without)
    assert gaps and gaps[0] == ("2027-03-27", ("1.36",))


_ISO_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")


@pytest.mark.parametrize("minor", sorted(ROWS, key=minor_key))
def test_as_of_is_the_oldest_date_the_source_names_and_not_after_retrieved(minor):
    """Review finding: every row said retrieved 2026-11-28 while its source commit was dated 2026-05-06, so
    the data looked six months fresher than it is. Each row carries its source's own date (`as_of`), the
    oldest date its source string names, no later than the day it was read."""
    row = ROWS[minor]
    named = sorted(_ISO_DATE.findall(row.source))
    assert named, f"{minor}: the source names no date"
    for day in (*named, row.as_of, row.retrieved):
        dt.date.fromisoformat(day)
    assert row.as_of == named[0], (minor, row.as_of, named)
    assert row.as_of <= row.retrieved, (minor, row.as_of, row.retrieved)


def test_the_1_36_row_names_a_source_for_every_value():
    """1.36: each add-on's value is named in the row's source with where it comes from (AWS's tables for
    kube-proxy and coredns, the dated upstream releases for vpc-cni and the EBS CSI driver)."""
    row = ROWS["1.36"]
    parts = dict(part.split(": ", 1) for part in row.source.split("; "))
    assert set(parts) == set(ADDONS)
    assert "managing-kube-proxy" in parts["kube-proxy"] and "managing-coredns" in parts["coredns"]
    assert "v1.22.3" in parts["vpc-cni"] and "v1.63.1" in parts["aws-ebs-csi-driver"]
    for addon, text in parts.items():
        assert _ISO_DATE.search(text), addon


def test_a_minor_after_the_table_is_refused_naming_the_key_and_file(monkeypatch, tmp_path):
    """The newest row is 1.36: when the calendar gains 1.37 (in standard support) before the table does, a 1.37
    stack is a config error naming kubernetesVersion and this table, not a KeyError at `pulumi up`."""
    doc = yaml.safe_load(versions_calendar.CALENDAR_FILE.read_text())
    doc["eks"].append({**doc["eks"][-1], "minor": "1.37", "release": "2026-10-01"})
    doc["upstream"].append({**doc["upstream"][-1], "minor": "1.37", "release": "2026-08-01"})
    calendar = tmp_path / "kubernetes-versions.yaml"
    calendar.write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setattr(versions_calendar, "CALENDAR_FILE", calendar)
    load_calendar.cache_clear()
    try:
        assert "1.37" in load_calendar().allowed_minors("aws") and "1.37" not in ROWS
        base = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
        with pytest.raises(ConfigError) as err:
            parse_config({**base, "kubernetesVersion": "1.37"}, "aws-prod")
        message = str(err.value)
        assert "kubernetesVersion" in message and FILE in message and "no row for 1.37" in message
    finally:
        monkeypatch.undo()
        load_calendar.cache_clear()


# ---------------------------------------------------------------------------------------------
# plans and preflight
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", aws_stacks())
def test_each_shipped_aws_stack_plans_its_minor_s_pinned_versions(stack):
    minor = str(stack_config(stack)["gpu-platform:kubernetesVersion"])
    planned = {a.inputs["addonName"]: a.inputs.get("addonVersion") for a in plan_stack(stack).by_type(ADDON)}
    assert planned == ROWS[minor].versions


def _stack_copy(tmp_path, minor: str) -> Path:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.aws-prod.yaml").read_text())
    doc["config"]["gpu-platform:kubernetesVersion"] = minor
    stack_file = tmp_path / f"Pulumi.aws-{minor.replace('.', '')}.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    return stack_file


def test_preflight_refuses_a_minor_without_pinned_addons_with_exit_2(tmp_path, monkeypatch):
    """A minor in EKS standard support without a row (1.36, were its row missing): exit 2 (config error),
    naming the key and the file, before anything is planned."""
    monkeypatch.delitem(ROWS, "1.36")
    assert "1.36" in load_calendar().allowed_minors("aws")
    stack_file = _stack_copy(tmp_path, "1.36")
    result = preflight_in_process("--stack-file", str(stack_file), "--no-policies", "--out", str(tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "kubernetesVersion" in result.stderr and FILE in result.stderr and "Traceback" not in result.stderr


def test_a_1_36_stack_plans_its_row_and_reports_where_each_version_comes_from():
    """aws-prod moved to 1.36 plans 1.36's pinned add-ons, and the readable plan reports each version with the
    row that pins it and its source's date (as_of)."""
    from gpu_platform.preflight.report import highlights
    from gpu_platform.preflight.runner import run_program, stack_input_from_mapping

    config = {**stack_config("aws-prod"), "gpu-platform:kubernetesVersion": "1.36"}
    plan = run_program(stack_input_from_mapping("aws-136", config))
    addons = plan.by_type(ADDON)
    assert {a.inputs["addonName"]: a.inputs.get("addonVersion") for a in addons} == ROWS["1.36"].versions
    lines = [line for a in addons for line in highlights(a)]
    for addon, version in ROWS["1.36"].versions.items():
        assert (f"addon={addon}@{version} (pinned for 1.36 in {FILE}, source as of {ROWS['1.36'].as_of} "
                f"(retrieved {ROWS['1.36'].retrieved}))") in lines


# ---------------------------------------------------------------------------------------------
# docs
# ---------------------------------------------------------------------------------------------


def test_versions_doc_lists_every_pin_and_the_upgrade_rule():
    text = (ROOT / "docs" / "versions.md").read_text()
    [row] = [line for line in text.splitlines() if line.startswith("|") and FILE in line]
    for r in ROWS.values():
        for version in r.versions.values():
            assert version in row, version
        assert f"{r.minor} (source as of {r.as_of})" in row, r.minor
    section = text.split("## EKS managed add-on versions", 1)[1].split("\n## ", 1)[0]
    assert "one minor" in section and "kubernetesVersion" in section and "1.37" in section
    assert all(r.as_of in section for r in ROWS.values())
    guide = (ROOT / "docs" / "kubernetes-versions.md").read_text().split("## AWS (EKS)")[1].split("## Linode")[0]
    assert FILE in guide and "EKS's default" not in guide
