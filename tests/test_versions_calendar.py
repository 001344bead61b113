"""The Kubernetes version calendar: sourced, dated rows and the rules derived from them."""

from __future__ import annotations

import copy
import datetime as dt

import pytest
import yaml

from gpu_platform.data import versions_calendar as vc

DAY = "2026-11-23"  # the day the shipped stacks were reviewed


@pytest.fixture(scope="module")
def raw() -> dict:
    with open(vc.CALENDAR_FILE, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=yaml.BaseLoader)


def test_every_row_has_a_source_and_iso_dates(raw):
    assert vc.validate_document(vc._numbers(raw)) == []
    rows = [r for s in ("upstream", "eks", "gke") for r in raw[s]]
    assert len(rows) >= 14
    for r in rows:
        assert r["source"].startswith("http"), r
        dt.date.fromisoformat(r["retrieved"])
        for k, v in r.items():
            if k not in ("minor", "source", "retrieved", "derived", "note") and v != "null":
                dt.date.fromisoformat(v)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["eks"][0].pop("source"), "eks[0].source"),
    (lambda d: d["gke"][1].__setitem__("retrieved", "23 Nov 2026"), "gke[1].retrieved"),
    (lambda d: d["upstream"][0].__setitem__("endOfLife", "2025-13-01x"), "upstream[0].endOfLife"),
    (lambda d: d["eks"].append(dict(d["eks"][0])), "appears twice"),
    (lambda d: d["eks"][2].__setitem__("endOfExtended", d["eks"][2]["release"]), "must not follow"),
    (lambda d: d["fees"]["eks"].pop("retrieved"), "fees.eks.retrieved"),
    (lambda d: d["cni"][0].pop("source"), "cni[0].source"),
    (lambda d: d["cni"][1].__setitem__("kubernetes", ["1.35", 1.36]), "cni[1].kubernetes"),
    (lambda d: d["cni"][0].__setitem__("cni", "flannel"), "cni[0].cni"),
    (lambda d: d.pop("cni"), "cni: a non-empty list"),
])
def test_a_broken_row_is_refused(raw, mutate, message):
    doc = copy.deepcopy(vc._numbers(raw))
    mutate(doc)
    with pytest.raises(vc.CalendarError, match=message.replace("[", r"\[").replace("]", r"\]")):
        vc.parse_calendar(doc)


def test_allowed_minors_today():
    cal = vc.load_calendar()
    # EKS: 1.33 left standard support on 2026-07-29; 1.34 is still inside it (until 2026-12-02).
    assert cal.allowed_minors("aws", DAY) == ("1.34", "1.35", "1.36")
    assert "1.33" in cal.allowed_minors("aws", DAY, extended=True)
    # GKE: 1.34 ended standard support on 2026-10-01; 1.33 too.
    assert cal.allowed_minors("gcp", DAY) == ("1.35", "1.36")
    # kubeadm follows upstream patch support: 1.34 reached end of life on 2026-10-27.
    assert cal.allowed_minors("linode", DAY) == ("1.35", "1.36")
    assert cal.allowed_minors("linode", DAY, extended=True) == ("1.35", "1.36")


def test_status_moves_with_the_date():
    cal = vc.load_calendar()
    assert cal.status("aws", "1.36", "2026-06-01") == "unreleased"
    assert cal.status("aws", "1.36", "2026-06-02") == "standard"
    assert cal.status("aws", "1.34", "2026-12-01") == "standard"
    assert cal.status("aws", "1.34", "2026-12-02") == "extended"
    assert cal.status("aws", "1.34", "2027-12-02") == "unsupported"
    assert cal.status("linode", "1.34", "2026-10-27") == "unsupported"
    assert cal.status("aws", "1.20", DAY) is None
    assert cal.days_to_end_of_standard("aws", "1.34", DAY) == 9
    assert cal.days_to_end_of_standard("gcp", "1.35", DAY) == (dt.date(2027, 4, 11) - dt.date(2026, 11, 23)).days


def test_today_can_be_pinned(monkeypatch):
    monkeypatch.setenv(vc.TODAY_ENV, "2027-03-01")
    assert vc.today() == dt.date(2027, 3, 1)
    assert vc.load_calendar().allowed_minors("aws") == ("1.35", "1.36")
    monkeypatch.setenv(vc.TODAY_ENV, "April 1st")
    with pytest.raises(vc.CalendarError, match=vc.TODAY_ENV):
        vc.today()


def test_extended_support_fee():
    assert vc.extended_support_fee_per_hour("aws", "1.33", DAY) == pytest.approx(0.50)
    assert vc.extended_support_fee_per_hour("aws", "1.35", DAY) == 0.0
    assert vc.extended_support_fee_per_hour("gcp", "1.34", DAY) == pytest.approx(0.50)
    assert vc.extended_support_fee_per_hour("linode", "1.34", DAY) == 0.0
    assert vc.extended_support_fee_per_hour("aws", "1.31", "2026-11-26") == 0.0  # past extended: unsupported
    fees = vc.load_calendar().fees("aws")
    assert fees.extended_usd_per_hour == pytest.approx(fees.standard_usd_per_hour + fees.extra_usd_per_hour)


# --- the kubernetesVersion rule (gpu_platform/config/kubernetes_version.py), per cloud -------------------------------

def _cfg(cloud: str, minor: str, extended: bool = False):
    from types import SimpleNamespace

    aws = SimpleNamespace(support_type="EXTENDED" if extended else "STANDARD") if cloud == "aws" else None
    gcp = SimpleNamespace(release_channel="EXTENDED" if extended else "REGULAR") if cloud == "gcp" else None
    return SimpleNamespace(cloud=cloud, kubernetes_version=minor, aws=aws, gcp=gcp)


def test_kubeadm_rule_follows_upstream_end_of_life_and_has_no_extended_option():
    from gpu_platform.data.versions_calendar import default_minor
    from gpu_platform.config.kubernetes_version import version_issues, version_warnings

    [issue] = version_issues(_cfg("linode", "1.34"), DAY)
    assert issue.key == "kubernetesVersion" and "2026-10-27" in issue.allowed and "1.35, 1.36" in issue.allowed
    assert "EXTENDED" not in issue.allowed and "new clusters are refused" in issue.allowed
    assert version_issues(_cfg("linode", "1.35"), DAY) == [] and version_warnings(_cfg("linode", "1.35"), DAY) == []
    [warning] = version_warnings(_cfg("linode", "1.35"), "2027-01-15")  # upstream end of life 2027-02-28
    assert "2027-02-28" in warning and "44 day(s)" in warning
    assert default_minor("linode", DAY) == "1.36"


def test_unreleased_and_unknown_minors_are_refused_with_the_choices():
    from gpu_platform.config.kubernetes_version import version_issues

    [issue] = version_issues(_cfg("aws", "1.36"), "2026-05-01")
    assert "from 2026-06-02" in issue.allowed and "1.33, 1.34, 1.35" in issue.allowed
    [issue] = version_issues(_cfg("gcp", "1.31"), DAY)  # the calendar has no GKE row for it
    assert "no GKE row for 1.31" in issue.allowed and "1.35, 1.36" in issue.allowed


def test_extended_opt_in_is_per_cloud():
    from gpu_platform.config.kubernetes_version import extended_support_fee_per_hour, version_issues

    assert "aws.supportType: EXTENDED" in version_issues(_cfg("aws", "1.33"), DAY)[0].allowed
    assert version_issues(_cfg("aws", "1.33", extended=True), DAY) == []
    assert "gcp.releaseChannel: EXTENDED" in version_issues(_cfg("gcp", "1.34"), DAY)[0].allowed
    assert version_issues(_cfg("gcp", "1.34", extended=True), DAY) == []
    assert extended_support_fee_per_hour(_cfg("aws", "1.33", extended=True), DAY) == pytest.approx(0.5)


def test_every_minor_a_stack_can_choose_has_its_per_cloud_pins():
    """When the calendar gains a minor, the components that install per-minor artifacts must follow."""
    from gpu_platform.data.aws_versions import CLUSTER_AUTOSCALER_IMAGE_TAGS
    from gpu_platform.data.linode_versions import KUBERNETES_PATCH

    cal = vc.load_calendar()
    assert set(cal.minors("aws")) <= set(CLUSTER_AUTOSCALER_IMAGE_TAGS)  # cluster-autoscaler image per EKS minor
    assert set(cal.minors("linode")) <= set(KUBERNETES_PATCH)  # kubeadm/kubelet packages per upstream minor
    for minor in cal.allowed_minors("aws", DAY, extended=True):
        assert CLUSTER_AUTOSCALER_IMAGE_TAGS[minor].startswith(f"v{minor}.")
