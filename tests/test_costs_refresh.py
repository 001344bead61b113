"""Refreshing Linode prices from a recorded response of the public types API (no network)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gpu_platform.costs.__main__ import main
from gpu_platform.costs.catalog import CATALOG_DIR, parse_document, read_document, validate_document
from gpu_platform.costs.refresh import refresh_linode

DATA = Path(__file__).resolve().parent / "data" / "linode-types-response.json"


@pytest.fixture()
def catalog_copy(tmp_path):
    p = tmp_path / "linode.yaml"
    shutil.copy(CATALOG_DIR / "linode.yaml", p)
    return p


def test_refresh_rewrites_changed_prices_and_keeps_sources_and_dates(catalog_copy):
    before = {e["name"]: e for e in read_document(catalog_copy)["instances"]}
    res = refresh_linode(json.loads(DATA.read_text()), catalog_copy, today="2030-01-02", source="recorded response")
    after_doc = read_document(catalog_copy)
    assert validate_document(after_doc) == []  # every price still has a source and a date
    after = {e["name"]: e for e in after_doc["instances"]}
    # the recorded response raises RTX6000 x1 to $1.65/h, $1100/month
    rtx = after["g1-gpu-rtx6000-1"]
    assert rtx["onDemand"] == {"usdPerHour": 1.65, "source": "recorded response (base price, refreshed by python -m gpu_platform.costs refresh)",
                               "date": "2030-01-02"}
    assert rtx["monthlyCapUsd"] == 1100.0
    assert any(c.startswith("g1-gpu-rtx6000-1: 1.5 -> 1.65") for c in res.changed)
    # unchanged prices keep their original source and date
    assert after["g1-gpu-rtx6000-2"]["onDemand"] == before["g1-gpu-rtx6000-2"]["onDemand"]
    assert after["g6-standard-4"]["onDemand"] == before["g6-standard-4"]["onDemand"]
    assert "g1-gpu-rtx6000-2" in res.unchanged
    # $0 base price: the reference region (us-east) price from region_prices is used
    assert after["g2-gpu-rtx4000a1-s"]["onDemand"]["usdPerHour"] == 0.55
    assert "us-east region price" in after["g2-gpu-rtx4000a1-s"]["onDemand"]["source"]
    # $0 base and no us-east region price: kept, with a note
    assert after["g2-gpu-rtx4000a4-m"]["onDemand"] == before["g2-gpu-rtx4000a4-m"]["onDemand"]
    assert any("g2-gpu-rtx4000a4-m" in n and "kept" in n for n in res.notes)
    # new GPU types are reported, not invented; types absent from the response are listed
    assert res.not_in_catalog == ["g3-gpu-rtxpro6000-blackwell-1"]
    assert "g1-gpu-rtx6000-3" in res.missing_from_response
    # specs, regions and the header comment survive; the file still loads
    assert after["g1-gpu-rtx6000-1"]["regions"] == before["g1-gpu-rtx6000-1"]["regions"]
    assert catalog_copy.read_text().startswith("# Linode")
    instances, _ = parse_document(after_doc)
    assert instances["g1-gpu-rtx6000-1"].monthly_cap_usd == 1100.0


def test_refresh_with_no_changes_does_not_touch_the_file(catalog_copy):
    resp = {"data": [{"id": "g6-standard-4", "price": {"hourly": 0.072, "monthly": 48.0}, "region_prices": [],
                      "vcpus": 4, "gpus": 0}]}
    mtime = catalog_copy.stat().st_mtime_ns
    res = refresh_linode(resp, catalog_copy)
    assert res.changed == [] and res.unchanged == ["g6-standard-4"]
    assert catalog_copy.stat().st_mtime_ns == mtime


def test_cli_refresh_dry_run_from_file_reports_without_writing(capsys):
    original = (CATALOG_DIR / "linode.yaml").read_text()
    assert main(["refresh", "--linode", "--from-file", str(DATA), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "g1-gpu-rtx6000-1: 1.5 -> 1.65 $/h" in out and "g3-gpu-rtxpro6000-blackwell-1" in out
    assert (CATALOG_DIR / "linode.yaml").read_text() == original


def test_recorded_response_has_the_api_shape():
    doc = json.loads(DATA.read_text())
    for e in doc["data"]:
        assert {"id", "label", "price", "gpus", "vcpus", "memory", "region_prices"} <= set(e)
        assert {"hourly", "monthly"} <= set(e["price"])
    assert yaml.safe_load(DATA.read_text())["pages"] == 1
