"""AWS and GCP price refresh from recorded data in the repository (no network), and the rule that every AWS
Spot price in the catalog traces to recorded data."""

from __future__ import annotations

import csv
import io
import json
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from gpu_platform.costs.__main__ import main
from gpu_platform.costs.catalog import CATALOG_DIR, load_catalog, read_document, validate_document
from gpu_platform.costs.refresh_clouds import (apply_aws, apply_gcp, gcp_a2_prices, read_ec2_price_list, read_gcp_skus,
                                  read_skypilot_vms_csv, read_spot_price_history)

ROOT = Path(__file__).resolve().parent.parent
RECORDED = CATALOG_DIR / "recorded" / "skypilot-aws-vms-us-east-1.csv"
DATA = Path(__file__).resolve().parent / "data"


def _recorded_rows(path: Path = RECORDED) -> list[dict]:
    text = "\n".join(line for line in Path(path).read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def test_every_aws_spot_price_traces_to_recorded_data_in_the_repository():
    """Each AWS Spot price names a recorded file in the repository, and recomputing the median, low, high
    and sample count from that file's rows gives the catalog's numbers exactly."""
    cat = load_catalog()
    spot_types = [t for t in cat.instances("aws") if t.spot is not None]
    assert spot_types, "the AWS catalog should price Spot for its GPU types"
    for t in spot_types:
        p = t.spot
        path = p.source.split(" ", 1)[0]
        assert (ROOT / path).is_file(), f"{t.name}: spot source {path!r} is not a file in the repository"
        assert p.status == "recorded"
        obs = [float(r["SpotPrice"]) for r in _recorded_rows(ROOT / path) if r["InstanceType"] == t.name
               and r["Region"] == "us-east-1" and r["SpotPrice"] and r["AvailabilityZone"].count("-") == 1]
        assert obs, f"{t.name}: no recorded us-east-1 row"
        assert p.usd_per_hour == pytest.approx(statistics.median(obs), abs=1e-6)
        assert (p.low, p.high, p.samples) == (min(obs), max(obs), len(obs))
        assert p.observed  # the date range the observations come from


def test_recorded_on_demand_prices_match_the_catalog():
    cat = load_catalog()
    for r in _recorded_rows():
        t = cat.instance("aws", r["InstanceType"])
        if t is not None:
            assert t.on_demand.usd_per_hour == pytest.approx(float(r["Price"])), r["InstanceType"]


def test_refresh_from_recorded_csv_rewrites_a_catalog_copy(tmp_path):
    copy = tmp_path / "aws.yaml"
    shutil.copy(CATALOG_DIR / "aws.yaml", copy)
    doc = yaml.safe_load(copy.read_text())
    g5 = next(e for e in doc["instances"] if e["name"] == "g5.xlarge")
    g5["spot"] = {"usdPerHour": 0.1, "source": "a guess", "date": "2020-01-01", "status": "estimate"}
    p4d = next(e for e in doc["instances"] if e["name"] == "p4d.24xlarge")
    p4d["spot"] = {"usdPerHour": 9.880939, "source": "ESTIMATE 45 %", "date": "2020-01-01", "status": "estimate"}
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    spot = read_skypilot_vms_csv(RECORDED, "us-east-1")
    res = apply_aws(spot, catalog_path=copy, today="2030-01-02", drop_untraced_spot=True)
    after = {e["name"]: e for e in read_document(copy)["instances"]}
    assert validate_document(read_document(copy)) == []
    assert after["g5.xlarge"]["spot"]["usdPerHour"] == pytest.approx(0.4028)  # median of 0.397..0.4177 (5 AZs)
    # dated when observed (no later than the header's date), not when copied: the age check sees how old it is
    assert after["g5.xlarge"]["spot"]["date"] == "2025-06-30" and after["g5.xlarge"]["spot"]["samples"] == 5
    assert "refreshed by python -m gpu_platform.costs refresh on 2030-01-02" in after["g5.xlarge"]["spot"]["source"]
    assert after["p4d.24xlarge"]["spot"] is None  # an untraceable Spot price is dropped, not kept
    assert any("p4d.24xlarge: spot 9.880939 removed" in c for c in res.changed)
    # p3.2xlarge: the old 30 %-of-On-Demand rule said $0.918; the recorded zones say median $0.6929 (+32 %)
    assert after["p3.2xlarge"]["spot"]["usdPerHour"] == pytest.approx((0.6827 + 0.7031) / 2)


def test_describe_spot_price_history_shape_gives_spread_over_zones_and_time():
    doc = json.loads((DATA / "aws-describe-spot-price-history.json").read_text())
    obs = read_spot_price_history(doc, "us-east-1", "tests/data/aws-describe-spot-price-history.json")
    g5 = obs["g5.xlarge"]
    assert g5.prices == (0.397, 0.4005, 0.4028, 0.413, 0.4177)
    assert g5.median == 0.4028 and g5.observed == "2026-11-23"
    assert "g6.xlarge" in obs and obs["g6.xlarge"].prices == (0.3879, 0.4155)


def test_ec2_offer_file_shape_gives_linux_shared_on_demand():
    doc = json.loads((DATA / "aws-ec2-price-list-us-east-1.json").read_text())
    assert read_ec2_price_list(doc, "us-east-1") == {"g5.xlarge": 1.006, "g6.xlarge": 0.8048}


def test_gcp_billing_catalog_skus_give_a2_machine_and_a100_gpu_prices(tmp_path):
    doc = json.loads((DATA / "gcp-billing-skus-compute.json").read_text())
    parts = read_gcp_skus(doc, "us-central1")
    prices = gcp_a2_prices(parts, 12, 85, 1)
    # 12 x 0.01264 + 85 x 0.001695 + 1.632265 = 1.92802, the catalog's a2-highgpu-1g Spot price
    assert prices["Preemptible"] == pytest.approx(1.92802, abs=1e-6)
    copy = tmp_path / "gcp.yaml"
    shutil.copy(CATALOG_DIR / "gcp.yaml", copy)
    res = apply_gcp(parts, "tests/data/gcp-billing-skus-compute.json", catalog_path=copy, today="2030-01-02")
    after = {e["name"]: e for e in read_document(copy)["instances"]}
    assert after["a2-highgpu-2g"]["preemptible"]["usdPerHour"] == pytest.approx(2 * 1.92802, abs=1e-5)
    assert read_document(copy)["gpuOnlyPrices"]["nvidia-tesla-a100"]["preemptible"]["usdPerHour"] == pytest.approx(1.632265)
    assert validate_document(read_document(copy)) == []
    assert res.changed or res.unchanged


def test_cli_refresh_aws_spot_dry_run(capsys):
    assert main(["refresh", "--aws-spot", str(RECORDED), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "changed: 0" in out  # the shipped catalog already equals the recorded data


def test_a_refresh_for_another_region_records_that_regions_prices_and_leaves_the_reference(tmp_path):
    """issue 37 item 1: `costs refresh --aws-price-list F --region eu-west-1` wrote eu-west-1's prices over the
    catalog's us-east-1 (reference) prices. They go to the type's regionalPrices.eu-west-1 now, which the
    estimator uses for a stack in eu-west-1 (and only there)."""
    from gpu_platform.costs.catalog import Catalog, parse_document

    copy = tmp_path / "aws.yaml"
    shutil.copy(CATALOG_DIR / "aws.yaml", copy)
    before = {e["name"]: e for e in read_document(copy)["instances"]}
    # An offer-file shape for eu-west-1 (test input: the numbers are not prices anyone quotes).
    offer = {"products": {"sku1": {"attributes": {"instanceType": "g5.2xlarge", "regionCode": "eu-west-1",
                                                  "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                                                  "capacitystatus": "Used"}}},
             "terms": {"OnDemand": {"sku1": {"t": {"priceDimensions": {"d": {"unit": "Hrs",
                                                                            "pricePerUnit": {"USD": "9.876"}}}}}}}}
    on_demand = read_ec2_price_list(offer, "eu-west-1")
    assert on_demand == {"g5.2xlarge": 9.876}
    apply_aws(on_demand=on_demand, on_demand_source="offer-eu.json (EC2 price list, eu-west-1)",
              catalog_path=copy, today="2030-01-02", region="eu-west-1")
    doc = read_document(copy)
    after = {e["name"]: e for e in doc["instances"]}
    assert after["g5.2xlarge"]["onDemand"] == before["g5.2xlarge"]["onDemand"]  # the reference price untouched
    eu = after["g5.2xlarge"]["regionalPrices"]["eu-west-1"]["onDemand"]
    assert (eu["usdPerHour"], eu["date"], eu["status"]) == (9.876, "2030-01-02", "recorded")
    assert "eu-west-1" not in after["g6.xlarge"].get("regionalPrices", {}) and validate_document(doc) == []
    instances, fixed = parse_document(doc)
    cat = Catalog({"aws": instances}, {"aws": fixed}, {"aws": {"referenceRegion": "us-east-1"}})
    assert cat.in_region("aws", "g5.2xlarge", "on-demand", "eu-west-1")[0].on_demand.usd_per_hour == 9.876


def test_skypilot_spot_prices_carry_the_window_the_snapshot_can_be_from_and_are_dated_by_its_start(tmp_path):
    """Adopter review of 94425ce: the SkyPilot v9 Spot prices said `observed 2026-11-28`, the day the file was read,
    not when the prices were observed, so the catalog-age check could never fire for them (and us-east-1's
    reference Spot prices were the older 2025-06-30 snapshot's though the v9 file holds newer rows). The v9 file's
    header states the evidence for the earliest its capture can be (`observed-no-earlier-than: 2026-06-03`: the same
    commit lists a GCP image created that day); every Spot price from it, us-east-1's included, carries the window
    and is dated by its start."""
    from gpu_platform.costs.refresh_clouds import read_skypilot_vms_csv

    v9 = CATALOG_DIR / "recorded" / "skypilot-aws-vms-v9.csv"
    assert "# observed-no-earlier-than: 2026-06-03" in v9.read_text()
    assert "skypilot-gcp-gpu-ubuntu-260603" in v9.read_text()  # the evidence, named
    cat = load_catalog()
    from_v9 = [(t.name, "us-east-1", t.spot) for t in cat.instances("aws") if t.spot is not None]
    from_v9 += [(t.name, r, ps["spot"]) for t in cat.instances("aws") for r, ps in t.regional.items() if "spot" in ps]
    assert len(from_v9) > 300
    for name, region, p in from_v9:
        assert p.source.startswith("gpu_platform/costs/catalog/recorded/skypilot-aws-vms-v9.csv"), (name, region)
        assert (p.date, p.observed) == ("2026-06-03", "2026-06-03..2026-11-28"), (name, region, p.date, p.observed)
    # A file without the earliest bound keeps the old reading: dated by its no-later-than (read) date.
    plain = tmp_path / "vms.csv"
    plain.write_text("# read 2026-11-28\nInstanceType,Price,SpotPrice,Region,AvailabilityZone\n"
                     "g5.xlarge,1.006,0.4,us-east-1,use1-az1\n")
    (obs,) = read_skypilot_vms_csv(plain, "us-east-1").values()
    assert (obs.date, obs.observed) == ("2026-11-28", "2026-11-28")
