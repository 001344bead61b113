"""Prices where the stack runs (issue 37 item 1): an EU GKE stack and an eu-west-1 EKS stack are priced from their
own region's recorded prices, or refused naming the type and the region; `priceOverrides` covers a refused type; the
bill says whose prices it used and how old they are; every regional price traces to a recorded file's rows."""

from __future__ import annotations

import csv
import functools
import io
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
import yaml

from gpu_platform.costs.__main__ import main as costs_main
from gpu_platform.costs.catalog import CATALOG_DIR, load_catalog, read_document, validate_document
from gpu_platform.costs.estimator import PoolShape, RegionPriceRefused, StackShape, estimate
from gpu_platform.costs.refresh_clouds import (apply_gcp_machines, read_gcp_machine_prices, read_skypilot_on_demand,
                                               read_skypilot_vms_csv, skypilot_regions)
from gpu_platform.costs.report import render_cost_summary
from tests.conftest import ROOT
from tests.test_hostile_input import run_main

RECORDED = CATALOG_DIR / "recorded"
AWS_V9 = RECORDED / "skypilot-aws-vms-v9.csv"
GCP_MACHINES = RECORDED / "cyclenerd-gcp-pricing.csv"
GCP_E2 = RECORDED / "skypilot-gcp-vms-v9-e2-standard-4.csv"


def _rows(path: Path) -> list[dict[str, str]]:
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def _aws_rows(itype: str, region: str) -> list[dict[str, str]]:
    # Local Zones (use1-atl2-az1) are not where a node group in the region's subnets runs.
    return [r for r in _rows(AWS_V9) if r["InstanceType"] == itype and r["Region"] == region
            and r["AvailabilityZone"].count("-") == 1]


# --- the estimator --------------------------------------------------------------------------------------------


def test_an_eu_gke_stack_is_priced_from_europe_west4s_recorded_prices():
    """gcp-prod moved to europe-west4: the Spot A100 machine and the e2-standard-4 system nodes carry
    europe-west4's recorded prices (not us-central1's), and the bill says so with the prices' date."""
    a2 = next(r for r in _rows(GCP_MACHINES) if r["machine"] == "a2-highgpu-1g" and r["region"] == "europe-west4")
    e2 = [r for r in _rows(GCP_E2) if r["Region"] == "europe-west4"]
    shape = StackShape("gcp", "europe-west4", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, 8),), name="gpu-prod")
    est = estimate(shape)
    gpu = next(ln for ln in est.lines if ln.resource == "a2-highgpu-1g")
    system = next(ln for ln in est.lines if ln.resource == "e2-standard-4")
    assert gpu.unit_usd_per_hour == float(a2["hour_spot"]) == 1.692835
    assert system.unit_usd_per_hour == float(e2[0]["Price"]) == 0.14754
    us = load_catalog()
    assert gpu.unit_usd_per_hour != us.instance("gcp", "a2-highgpu-1g").spot.usd_per_hour  # us-central1: 1.92802
    assert system.unit_usd_per_hour != us.instance("gcp", "e2-standard-4").on_demand.usd_per_hour
    assert (gpu.priced_in, system.priced_in, gpu.date) == ("europe-west4", "europe-west4", "2026-07-30")
    text = render_cost_summary(est)
    assert "priced in europe-west4: a2-highgpu-1g, e2-standard-4 (dated 2026-06-03 .. 2026-07-30)" in text
    assert "priced in us-central1 (reference): " in text  # disks, storage, traffic and fees
    lines = {ln["resource"]: ln["pricedIn"] for ln in est.as_dict()["lines"]}
    assert lines["a2-highgpu-1g"] == "europe-west4" and lines["gke-control-plane-fee"] == "us-central1 (reference)"


def test_an_eu_west_1_eks_stack_is_priced_from_eu_west_1s_recorded_prices():
    """aws-prod's g5.xlarge Spot pool and m6i.large system pool in eu-west-1: the Spot price is the median of
    eu-west-1's availability zones, the On-Demand price eu-west-1's, both different from us-east-1's."""
    g5 = _aws_rows("g5.xlarge", "eu-west-1")
    m6 = _aws_rows("m6i.large", "eu-west-1")
    shape = StackShape("aws", "eu-west-1", (PoolShape("a10g", "g5.xlarge", "spot", 0, 8),),
                       system_nodes=None, name="gpu-prod")
    est = estimate(shape)
    gpu = next(ln for ln in est.lines if ln.resource == "g5.xlarge")
    system = next(ln for ln in est.lines if ln.resource == "m6i.large")
    assert gpu.unit_usd_per_hour == pytest.approx(statistics.median(float(r["SpotPrice"]) for r in g5)) == 0.5917
    assert system.unit_usd_per_hour == float(m6[0]["Price"]) == 0.107
    us = load_catalog()
    assert gpu.unit_usd_per_hour != us.instance("aws", "g5.xlarge").spot.usd_per_hour
    assert system.unit_usd_per_hour != us.instance("aws", "m6i.large").on_demand.usd_per_hour
    assert "observed $0.5868-0.5941 over 3 samples" in gpu.assumption
    assert {gpu.priced_in, system.priced_in} == {"eu-west-1"}
    assert "priced in eu-west-1: g5.xlarge, m6i.large (dated 2026-06-03)" in render_cost_summary(est)


def test_a_region_without_a_price_for_a_type_the_stack_uses_is_refused_unless_price_overrides_cover_it():
    """g6.12xlarge (aws-prod's L4 pool) has no eu-west-1 price: the bill is refused, naming the type, the
    capacity and the region; an override of its Spot price prices the stack, the other lines stay eu-west-1's."""
    pools = (PoolShape("a10g", "g5.xlarge", "spot", 0, 8), PoolShape("l4x4", "g6.12xlarge", "spot", 0, 2))
    with pytest.raises(RegionPriceRefused) as err:
        estimate(StackShape("aws", "eu-west-1", pools, name="gpu-prod"))
    assert (err.value.type, err.value.capacity, err.value.region) == ("g6.12xlarge", "spot", "eu-west-1")
    assert "no spot price for g6.12xlarge in eu-west-1" in str(err.value)
    assert "priceOverrides.g6.12xlarge.spot" in str(err.value)
    est = estimate(StackShape("aws", "eu-west-1", pools, name="gpu-prod",
                              price_overrides={"aws/g6.12xlarge": {"spot": 2.5}}))
    l4 = next(ln for ln in est.lines if ln.resource == "g6.12xlarge")
    assert (l4.unit_usd_per_hour, l4.priced_in) == (2.5, "priceOverrides")
    assert next(ln for ln in est.lines if ln.resource == "g5.xlarge").priced_in == "eu-west-1"
    assert "priced with priceOverrides: g6.12xlarge" in render_cost_summary(est)


def test_an_eu_gke_stack_with_an_a100_pool_other_than_a2_highgpu_1g_is_priced_from_its_regions_rows():
    """Issue 37: only a2-highgpu-1g had European prices. An 8-GPU A100 pool (a2-highgpu-8g, Spot) and an A100 80GB
    pool (a2-ultragpu-1g, On-Demand) in europe-west4 carry europe-west4's rows of the recorded pricing.yml: the
    whole machine, GPUs included, not us-central1's price."""
    rows = {(r["machine"], r["region"]): r for r in _rows(GCP_MACHINES)}
    pools = (PoolShape("a100x8", "a2-highgpu-8g", "spot", 0, 2), PoolShape("a100-80", "a2-ultragpu-1g", "on-demand", 0, 2))
    est = estimate(StackShape("gcp", "europe-west4", pools, name="gpu-prod"))
    lines = {ln.resource: ln for ln in est.lines}
    assert lines["a2-highgpu-8g"].unit_usd_per_hour == float(rows[("a2-highgpu-8g", "europe-west4")]["hour_spot"]) == 13.54268
    assert lines["a2-ultragpu-1g"].unit_usd_per_hour == float(rows[("a2-ultragpu-1g", "europe-west4")]["hour"])
    assert lines["a2-ultragpu-1g"].unit_usd_per_hour == 5.58091847945206
    us = load_catalog()
    assert lines["a2-highgpu-8g"].unit_usd_per_hour != us.instance("gcp", "a2-highgpu-8g").spot.usd_per_hour  # 15.42416
    assert lines["a2-ultragpu-1g"].unit_usd_per_hour != us.instance("gcp", "a2-ultragpu-1g").on_demand.usd_per_hour
    assert {lines["a2-highgpu-8g"].priced_in, lines["a2-ultragpu-1g"].priced_in} == {"europe-west4"}
    assert lines["a2-highgpu-8g"].date == "2026-07-30"
    assert "priced in europe-west4: a2-highgpu-8g, a2-ultragpu-1g, e2-standard-4" in render_cost_summary(est)


def test_an_eu_west_1_eks_stack_with_g6e_and_p5_is_refused_and_eu_north_1_is_priced_from_its_rows():
    """Issue 37 asks an eu-west-1 EKS stack with G6e and P5 pools to be priced from eu-west-1's rows: the recorded
    SkyPilot snapshot has no G6e and no P5 row in eu-west-1 (neither is offered in any of its zones), so that bill
    is refused, naming both types in one run. In eu-north-1, which offers both, the same pools carry
    eu-north-1's rows: G6e Spot the median of its zones, P5 On-Demand the region's Price."""
    assert not _aws_rows("g6e.xlarge", "eu-west-1") and not _aws_rows("p5.48xlarge", "eu-west-1")
    pools = (PoolShape("l40s", "g6e.xlarge", "spot", 0, 4), PoolShape("h100", "p5.48xlarge", "on-demand", 0, 1))
    with pytest.raises(RegionPriceRefused) as err:
        estimate(StackShape("aws", "eu-west-1", pools, name="gpu-prod"))
    assert err.value.types == ["g6e.xlarge", "p5.48xlarge"] and err.value.region == "eu-west-1"
    est = estimate(StackShape("aws", "eu-north-1", pools, name="gpu-prod"))
    lines = {ln.resource: ln for ln in est.lines}
    g6e = [float(r["SpotPrice"]) for r in _aws_rows("g6e.xlarge", "eu-north-1")]
    assert lines["g6e.xlarge"].unit_usd_per_hour == pytest.approx(statistics.median(g6e)) == 0.8422
    assert lines["p5.48xlarge"].unit_usd_per_hour == float(_aws_rows("p5.48xlarge", "eu-north-1")[0]["Price"]) == 58.8928
    assert lines["p5.48xlarge"].unit_usd_per_hour != load_catalog().instance("aws", "p5.48xlarge").on_demand.usd_per_hour
    assert {lines["g6e.xlarge"].priced_in, lines["p5.48xlarge"].priced_in, lines["m6i.large"].priced_in} == {"eu-north-1"}


def test_a_gcp_region_the_recorded_prices_do_not_cover_is_refused():
    """The recorded A2 prices have no europe-north2 row: an A100 stack there is refused, naming type and region."""
    with pytest.raises(RegionPriceRefused, match="no spot price for a2-highgpu-1g in europe-north2"):
        estimate(StackShape("gcp", "europe-north2", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, 8),)))


def test_a_gpu_type_has_no_price_in_a_region_the_catalog_does_not_record_as_offering_it():
    """GCP's recorded machine prices cover regions that do not offer a GPU type, with a Spot figure that leaves the GPU
    out: a2-highgpu-1g Spot in europe-west2 was $0.39576 against $4.39 On-Demand (9%; 45-60% where the type is
    offered). Such a price is not the machine's: no type, on any cloud, is priced in a region its `regions` leave
    out, so a stack there is refused naming the type and the region (exit 3 in preflight) until priceOverrides
    covers it."""
    cat = load_catalog()
    for cloud in ("aws", "gcp", "linode"):
        for t in cat.instances(cloud):
            if t.regions is not None:
                assert not set(t.regional) - set(t.regions), (cloud, t.name, sorted(set(t.regional) - set(t.regions)))
    a2 = cat.instance("gcp", "a2-highgpu-1g")
    assert "europe-west2" not in a2.regions and "europe-west4" in a2.regions
    for region, prices in a2.regional.items():  # where it is offered, Spot is about half of On-Demand
        assert prices["spot"].usd_per_hour / prices["on-demand"].usd_per_hour > 0.3, region
    with pytest.raises(RegionPriceRefused, match="no spot price for a2-highgpu-1g in europe-west2") as err:
        estimate(StackShape("gcp", "europe-west2", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, 8),)))
    assert "europe-west2 may not offer a2-highgpu-1g at all" in str(err.value)
    covered = estimate(StackShape("gcp", "europe-west2", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, 8),),
                                  price_overrides={"gcp/a2-highgpu-1g": {"spot": 2.1}}))
    assert {ln.unit_usd_per_hour for ln in covered.lines if "a2-highgpu-1g" in ln.name} == {2.1}


def test_validation_refuses_a_regional_price_where_the_type_is_not_recorded_as_offered():
    doc = read_document(CATALOG_DIR / "gcp.yaml")
    a2 = next(e for e in doc["instances"] if e["name"] == "a2-highgpu-1g")
    a2["regionalPrices"]["europe-west2"] = a2["regionalPrices"]["europe-west4"]
    problems = validate_document(doc, "gcp.yaml")
    assert any("gcp.yaml.instances[a2-highgpu-1g].regionalPrices.europe-west2" in p and "a region of its `regions`" in p
               for p in problems), problems


def test_refresh_writes_no_price_where_the_type_is_not_recorded_as_offered(tmp_path):
    """`costs refresh --gcp-machine-prices` on the recorded file writes a2-highgpu-1g's europe-west4 row (offered)
    but not its europe-west2 row (not offered), and says so; the AWS refresh likewise for g5 in ap-east-1."""
    import gpu_platform.costs.refresh_clouds as rc

    copy = tmp_path / "gcp.yaml"
    doc = read_document(CATALOG_DIR / "gcp.yaml")
    for inst in doc["instances"]:
        inst.pop("regionalPrices", None)
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = apply_gcp_machines(read_gcp_machine_prices(GCP_MACHINES), ["europe-west2", "europe-west4"], catalog_path=copy,
                             today="2031-01-01", file_dated=True)
    a2 = next(e for e in read_document(copy)["instances"] if e["name"] == "a2-highgpu-1g")
    assert set(a2["regionalPrices"]) == {"europe-west4"}
    assert any(n.startswith("a2-highgpu-1g: not written in europe-west2") and "does not record" in n
               for n in res.notes), res.notes
    # a catalog written before keeps such a row: the refresh removes it, saying so
    doc = read_document(copy)
    a2 = next(e for e in doc["instances"] if e["name"] == "a2-highgpu-1g")
    a2["regionalPrices"]["europe-west2"] = dict(a2["regionalPrices"]["europe-west4"])
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = apply_gcp_machines(read_gcp_machine_prices(GCP_MACHINES), ["europe-west2"], catalog_path=copy,
                             today="2031-01-01", file_dated=True)
    assert "a2-highgpu-1g europe-west2: regional prices removed (the catalog does not record europe-west2 as offering " \
           "it)" in res.changed
    assert "europe-west2" not in next(e for e in read_document(copy)["instances"]
                                      if e["name"] == "a2-highgpu-1g")["regionalPrices"]
    aws = tmp_path / "aws.yaml"
    doc = read_document(CATALOG_DIR / "aws.yaml")
    for inst in doc["instances"]:
        inst.pop("regionalPrices", None)
    aws.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert any(r["InstanceType"] == "g5.xlarge" for r in _aws_rows("g5.xlarge", "ap-east-1"))
    res = rc.refresh_aws_all_regions(AWS_V9, catalog_path=aws, today="2031-01-01")
    g5 = next(e for e in read_document(aws)["instances"] if e["name"] == "g5.xlarge")
    assert "ap-east-1" not in g5["regionalPrices"] and "eu-west-1" in g5["regionalPrices"]
    assert any("g5.xlarge: not written in ap-east-1" in n for n in res.notes), res.notes


def test_preflight_refuses_an_assumed_offering_without_a_price_until_an_override_covers_it(tmp_path, capsys):
    """gcp.assumeOffered lets a stack run a type where the recorded offering data is out of date; the catalog has
    no price there, so the bill is refused (exit 3) naming type and region, and priceOverrides covers it."""
    changes = {"region: us-central1": "region: europe-west2", "us-central1-a": "europe-west2-a",
               "us-central1-b": "europe-west2-b", "us-central1-c": "europe-west2-c"}
    assumed = {"assumeOffered": [{"type": "a2-highgpu-1g"}]}
    stack = _stack(tmp_path, "gcp-prod", "gke-ew2", changes)
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["gpu-platform:gcp"].update(assumed)
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, text, _ = run_main(["--stack-file", str(stack), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 3, text
    assert "REFUSED: no spot price for a2-highgpu-1g in europe-west2" in text and "0.3958" not in text, text
    doc["config"]["gpu-platform:priceOverrides"] = {"a2-highgpu-1g": {"spot": 2.2}}
    stack.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, text, _ = run_main(["--stack-file", str(stack), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 0, text
    lines = json.loads((tmp_path / "build" / "gke-ew2" / "cost.json").read_text())["lines"]
    assert {ln["pricedIn"] for ln in lines if ln["resource"] == "a2-highgpu-1g"} == {"priceOverrides"}


# --- preflight: the verdict (the EU GKE stack's: tests/test_pr_view.py) ----------------------------------------


def _stack(tmp_path: Path, base: str, name: str, text_changes: dict[str, str], **config) -> Path:
    text = (ROOT / "stacks" / f"Pulumi.{base}.yaml").read_text()
    for old, new in text_changes.items():
        text = text.replace(old, new)
    doc = yaml.safe_load(text)
    doc["config"].update({f"gpu-platform:{k}": v for k, v in config.items()})
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_preflight_refuses_an_eu_west_1_eks_stack_naming_the_type_and_region_until_an_override_covers_it(tmp_path,
                                                                                                          capsys):
    stack = _stack(tmp_path, "aws-prod", "eks-eu", {"us-east-1": "eu-west-1"})
    code, text, _ = run_main(["--stack-file", str(stack), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 3, text
    assert "REFUSED: no spot price for g6.12xlarge in eu-west-1" in text
    refused = json.loads((tmp_path / "build" / "eks-eu" / "cost.json").read_text())["refused"]
    assert (refused["type"], refused["region"]) == ("g6.12xlarge", "eu-west-1")
    covered = _stack(tmp_path, "aws-prod", "eks-eu2", {"us-east-1": "eu-west-1"},
                     priceOverrides={"g6.12xlarge": {"spot": 2.5}})
    code, text, _ = run_main(["--stack-file", str(covered), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 0, text
    doc = json.loads((tmp_path / "build" / "eks-eu2" / "cost.json").read_text())
    priced = {ln["resource"]: ln["pricedIn"] for ln in doc["lines"]}
    assert priced["g5.xlarge"] == priced["m6i.large"] == "eu-west-1" and priced["g6.12xlarge"] == "priceOverrides"


def test_a_refused_bill_gives_its_long_reason_once_and_the_cost_policies_point_at_it(tmp_path, capsys):
    """Adopter review (issue 37, round 3), E: with the policy pack on, the ~500-character refusal ("no spot price
    for g6.12xlarge in eu-west-1: the catalog prices ... priceOverrides.g6.12xlarge.spot (USD per node-hour)")
    came three times: monthly-cost-ceiling's row, idle-floor-budget-share's row and the bill. The bill keeps it
    (with the fix); each policy row keeps its first clause and points at the bill. policy.json keeps the pack's
    own messages whole."""
    stack = _stack(tmp_path, "aws-prod", "eks-eu-policies", {"us-east-1": "eu-west-1"})
    code, text, _ = run_main(["--stack-file", str(stack), "--out", str(tmp_path / "build")], capsys)
    assert code == 3, text
    reason = json.loads((tmp_path / "build" / "eks-eu-policies" / "cost.json").read_text())["refused"]["message"]
    assert len(reason) > 300 and reason.startswith("no spot price for g6.12xlarge in eu-west-1: ")
    assert text.count(reason) == 1, text
    assert text.index(reason) > text.index("Cost estimate for ")  # in the bill, after the policy table
    short = "no spot price for g6.12xlarge in eu-west-1 (why, and what to do: the cost estimate below)"
    for policy, what in (("monthly-cost-ceiling", "the stack's monthly cost"), ("idle-floor-budget-share",
                                                                              "the stack's idle floor")):
        row = next(line for line in text.splitlines() if f"] {policy}: " in line)
        assert row.endswith(f"{policy}: Cannot estimate {what}: {short}."), row
    messages = [v["message"] for p in json.loads((tmp_path / "build" / "eks-eu-policies" / "policy.json").read_text())[
        "policies"] for v in p["violations"]]
    assert sum(reason in m for m in messages) == 2, messages


def test_a_refused_bill_names_every_unpriced_type_with_a_snippet_and_a_command_that_work(tmp_path, capsys):
    """Adopter review F3/F4: eu-west-1 with g5.2xlarge and g6.xlarge was refused naming g5.2xlarge only (the next
    run, after its override, named g6.xlarge), and the fix read "(the bill below says how)" and `python -m
    gpu_platform.costs refresh ... --region eu-west-1`. One run names both; the bill's priceOverrides lines,
    pasted with prices, make the stack pass; its refresh command is exact and its options parse. (g5.2xlarge now
    has eu-west-1 prices: the two types are G6e and G6, which the recorded snapshot lists in no eu-west-1 zone.)"""
    moved = {"us-east-1": "eu-west-1", "instanceType: g5.xlarge": "instanceType: g6e.xlarge",
             "instanceType: g6.12xlarge": "instanceType: g6.xlarge"}
    stack = _stack(tmp_path, "aws-prod", "eks-eu3", moved)
    code, text, _ = run_main(["--stack-file", str(stack), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 3, text
    cost_row = next(line for line in text.splitlines() if line.startswith("  cost "))
    assert "REFUSED: no spot price for g6e.xlarge, g6.xlarge in eu-west-1" in cost_row, cost_row
    assert "..." not in text and "(the bill below says how)" not in text
    refused_text = text
    refused = json.loads((tmp_path / "build" / "eks-eu3" / "cost.json").read_text())["refused"]
    assert [m["type"] for m in refused["missing"]] == ["g6e.xlarge", "g6.xlarge"]
    # Neither is offered in eu-west-1 (the recorded offerings list them in no eu-west-1 zone): recording eu-west-1's
    # price is a dead end (describe-spot-price-history answers nothing), so the bill says so and prints no refresh.
    assert not refresh_lines(text) and "describe-spot-price-history" not in text, text
    assert "not offered in eu-west-1 as far as recorded data says (g6e.xlarge, g6.xlarge)" in text, text
    snippet = refused["priceOverrides"]
    assert snippet.splitlines()[0] == "  gpu-platform:priceOverrides:" and snippet in text
    # Pasted into the stack file as printed, with the placeholders replaced: the bill is priced.
    pasted = tmp_path / "Pulumi.eks-eu4.yaml"
    pasted.write_text(stack.read_text() + snippet.replace("REPLACE", "0.61") + "\n")
    code, text, _ = run_main(["--stack-file", str(pasted), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 0, text
    doc = json.loads((tmp_path / "build" / "eks-eu4" / "cost.json").read_text())
    assert {ln["resource"] for ln in doc["lines"] if ln.get("pricedIn") == "priceOverrides"} == {"g6e.xlarge", "g6.xlarge"}
    # Left unreplaced, the placeholder is a config error naming the key, not a price.
    raw = tmp_path / "Pulumi.eks-eu5.yaml"
    raw.write_text(stack.read_text() + snippet + "\n")
    code, text, _ = run_main(["--stack-file", str(raw), "--no-policies", "--out", str(tmp_path / "build")], capsys)
    assert code == 2 and "priceOverrides.g6e.xlarge.spot" in text, text
    assert refused_text


def test_a_type_offered_but_unpriced_in_the_region_gets_a_refresh_command_that_records_it(tmp_path, capsys):
    """p5.48xlarge is offered in ap-northeast-2 (the recorded offerings list a zone) but its one zone has no Spot
    price: the refusal prints the describe-spot-price-history and refresh commands; their options parse and record
    the region from an answer."""
    with pytest.raises(RegionPriceRefused) as err:
        estimate(StackShape("aws", "ap-northeast-2", (PoolShape("h100", "p5.48xlarge", "spot", 0, 1),), name="gpu-prod"))
    assert err.value.missing[0].offered is True
    fix = "\n".join(err.value.fix())
    assert "aws ec2 describe-spot-price-history --region ap-northeast-2 --instance-types p5.48xlarge" in fix
    answer = tmp_path / "spot-ap-northeast-2.json"
    answer.write_text(json.dumps({"SpotPriceHistory": [
        {"AvailabilityZone": "ap-northeast-2a", "InstanceType": "p5.48xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "21.5", "Timestamp": "2026-11-27T10:00:00+00:00"}]}))
    args = refresh_lines(fix)[-1].split()[3:]
    assert args[:2] == ["refresh", "--aws-spot-history"]
    assert costs_main([args[0], args[1], str(answer), *args[3:], "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "p5.48xlarge: spot None -> 21.5" in out, out


def test_an_empty_spot_price_answer_is_an_error_not_zero_changes(tmp_path, capsys):
    """Adopter review of 94425ce: `costs refresh --aws-spot-history` of an empty answer (what AWS returns for a type
    the region does not offer) printed `changed: 0, unchanged: 0` and exited 0. Now exit 2, saying nothing was
    recorded and why an answer comes back empty."""
    empty = tmp_path / "spot-eu-west-1.json"
    empty.write_text(json.dumps({"SpotPriceHistory": []}))
    before = (CATALOG_DIR / "aws.yaml").read_text()
    assert costs_main(["refresh", "--aws-spot-history", str(empty), "--region", "eu-west-1"]) == 2
    err = capsys.readouterr().err
    assert "no Spot price (Linux/UNIX) of a catalogued AWS instance type in eu-west-1" in err
    assert "nothing recorded" in err and "does not offer" in err
    assert (CATALOG_DIR / "aws.yaml").read_text() == before
    # An EC2 price list without the region's rows likewise.
    empty.write_text(json.dumps({"products": {}, "terms": {"OnDemand": {}}}))
    assert costs_main(["refresh", "--aws-price-list", str(empty), "--region", "eu-west-1", "--dry-run"]) == 2
    assert "no On-Demand price" in capsys.readouterr().err


def test_the_refusal_for_a_type_the_region_does_not_offer_suggests_no_dead_end():
    """g6e.xlarge in eu-west-1 (regions: null in the catalog; the recorded offerings list it in no eu-west-1 zone):
    the refusal says the region may not offer it and prints no refresh command. p5.48xlarge Spot in ap-northeast-2
    is offered (a zone listed) but unpriced: the refusal keeps its refresh command."""
    assert load_catalog().instance("aws", "g6e.xlarge").regions is None
    with pytest.raises(RegionPriceRefused) as err:
        estimate(StackShape("aws", "eu-west-1", (PoolShape("l40s", "g6e.xlarge", "spot", 0, 4),), name="gpu-prod"))
    text = str(err.value) + "\n" + "\n".join(err.value.fix())
    assert "eu-west-1 may not offer g6e.xlarge at all" in text and "skypilot-aws-vms-v9.csv" in text
    assert "costs refresh" not in text and "describe-spot-price-history" not in text, text
    with pytest.raises(RegionPriceRefused) as err:
        estimate(StackShape("aws", "ap-northeast-2", (PoolShape("h100", "p5.48xlarge", "spot", 0, 1),), name="gpu-prod"))
    assert "--aws-spot-history spot-ap-northeast-2.json --region ap-northeast-2" in str(err.value)


def refresh_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith(".venv/bin/python -m gpu_platform.costs refresh")]


# --- the catalog traces to the recorded files ------------------------------------------------------------------


def _regional(cloud: str):
    for inst in read_document(CATALOG_DIR / f"{cloud}.yaml")["instances"]:
        for region, prices in (inst.get("regionalPrices") or {}).items():
            for cap, p in prices.items():
                yield inst["name"], region, cap, p


def test_every_regional_price_traces_to_a_recorded_file_in_the_repository():
    """Each regional price names a recorded file, and recomputing it from that file's rows gives the catalog's
    number: AWS Spot = median over the region's availability zones (low, high, samples too), AWS On-Demand =
    the region's Price; GCP = the machine's row (its Spot price for spot and preemptible)."""
    # Each recorded file is read once per region (the readers are pure; reading them per price was 12 CPU-s).
    spot_rows = functools.lru_cache(maxsize=None)(read_skypilot_vms_csv)
    on_demand_rows = functools.lru_cache(maxsize=None)(read_skypilot_on_demand)
    gcp_rows = functools.lru_cache(maxsize=None)(read_gcp_machine_prices)
    seen = 0
    for cloud in ("aws", "gcp"):
        for name, region, cap, p in _regional(cloud):
            path = ROOT / p["source"].split(" ", 1)[0]
            assert path.is_file() and path.parent == RECORDED, (name, region, cap, p["source"])
            assert p["status"] == "recorded"
            if cloud == "aws" and cap == "spot":
                o = spot_rows(path, region)[name]
                assert (p["usdPerHour"], p["low"], p["high"], p["samples"]) == \
                    (o.median, min(o.prices), max(o.prices), len(o.prices)), (name, region)
            elif cloud == "aws":
                assert p["usdPerHour"] == on_demand_rows(path, region)[name], (name, region)
            else:
                data = gcp_rows(path)
                hour, spot = data.prices[region][name]
                assert p["usdPerHour"] == (hour if cap == "onDemand" else spot) and p["date"] == data.date
            seen += 1
    assert seen > 300


def test_every_region_of_the_recorded_files_is_in_the_catalog():
    """`costs refresh ... --all-regions` was run on every recorded file: each region the files price a catalogued
    type in (but the reference region) that the catalog records as offering the type has that type's regional
    prices, at every capacity the rows price; a region it does not record as offering it has none."""
    cat = load_catalog()
    unoffered = 0
    for region in skypilot_regions(AWS_V9):
        if region == "us-east-1":
            continue
        for name in {r["InstanceType"] for r in _rows(AWS_V9) if r["Region"] == region}:
            t = cat.instance("aws", name)
            rows = _aws_rows(name, region)
            want = {cap for cap, col in (("on-demand", "Price"), ("spot", "SpotPrice")) if any(r[col] for r in rows)}
            if t.regions is not None and region not in t.regions:
                want, unoffered = set(), unoffered + 1
            else:
                assert want
            assert set(t.regional.get(region, {})) == want, (name, region, want)
    for path in (GCP_MACHINES, GCP_E2):
        data = read_gcp_machine_prices(path)
        for region, machines in data.prices.items():
            for name in machines:
                t = cat.instance("gcp", name)
                if region in t.regions:
                    assert region == "us-central1" or set(t.regional[region]) == {"on-demand", "spot", "preemptible"}
                else:
                    assert region not in t.regional
                    unoffered += 1
    assert unoffered > 400  # g5 in ap-east-1 (the v7 region list), and most of the Cyclenerd file's GPU rows


# (type, region, capacity) -> why the recorded source has no price there. Every other region a catalogued type is
# offered in (the catalog's `regions`; for a type without them, every region the recorded file has rows for) has a
# regional price at every capacity of the cloud; a stack using one of these is refused (exit 3) unless
# priceOverrides covers it.
_G6E = ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")
UNPRICED = {
    **{(f"g6e.{size}", "ap-northeast-3", "on-demand"): "SkyPilot's ap-northeast-3 rows have a SpotPrice but an empty "
       "Price" for size in _G6E},
    ("p5.48xlarge", "ap-northeast-2", "spot"): "the only ap-northeast-2 zone SkyPilot lists (apne2-az1) has no SpotPrice",
}
CAPACITIES = {"aws": ("on-demand", "spot"), "gcp": ("on-demand", "spot", "preemptible")}


def _offered(cloud: str, t) -> set[str]:
    if t.regions is not None:
        return set(t.regions)
    assert cloud == "aws", t.name  # every GCP type lists its regions
    return {r["Region"] for r in _rows(AWS_V9) if r["InstanceType"] == t.name}


def test_every_catalogued_type_is_priced_in_every_region_it_is_offered_in_or_listed_unpriced_with_the_reason():
    """Issue 37: every catalogued AWS and GCP type, GPU and system, has On-Demand and Spot (GCP: and preemptible)
    prices in every region it is offered in, or the (type, region, capacity) is in UNPRICED, whose reason the
    recorded file bears out."""
    cat = load_catalog()
    missing = set()
    for cloud in ("aws", "gcp"):
        ref = cat.reference_region(cloud)
        for t in cat.instances(cloud):
            offered = _offered(cloud, t)
            assert len(offered - {ref}) >= 2, (cloud, t.name)
            for region in sorted(offered - {ref}):
                missing |= {(t.name, region, cap) for cap in CAPACITIES[cloud] if cap not in t.regional.get(region, {})}
    assert missing == set(UNPRICED), sorted(missing ^ set(UNPRICED))
    for (name, region, cap) in UNPRICED:
        rows = _aws_rows(name, region)
        assert rows and not any(r["Price" if cap == "on-demand" else "SpotPrice"] for r in rows), (name, region, cap)
        if cat.instance("aws", name).price(cap) is None:
            continue  # p5.48xlarge Spot: not priced in the reference region either, so a Spot P5 pool is a config
            # error anywhere (config/stack.py, gpuPools[].capacity: give priceOverrides)
        with pytest.raises(RegionPriceRefused, match=f"no {cap} price for {re.escape(name)} in {region}"):
            estimate(StackShape("aws", region, (PoolShape("p", name, cap, 0, 1),)))


def test_gcp_spot_and_preemptible_are_the_same_recorded_spot_price_and_aws_spot_is_the_zones_median():
    """What the catalog calls spot is what the source calls Spot: GCP's hour_spot (Spot VM SKUs; preemptible VMs are
    billed at the Spot price) for both `spot` and `preemptible`; AWS's SpotPrice column (describe-spot-price-history)."""
    cat = load_catalog()
    data = read_gcp_machine_prices(GCP_MACHINES)
    for t in cat.instances("gcp"):
        for region, prices in t.regional.items():
            assert prices["spot"].usd_per_hour == prices["preemptible"].usd_per_hour <= prices["on-demand"].usd_per_hour
            if t.name != "e2-standard-4":
                assert (prices["on-demand"].usd_per_hour, prices["spot"].usd_per_hour) == data.prices[region][t.name]


def test_rerunning_costs_refresh_on_the_recorded_files_reproduces_the_catalog_byte_for_byte(tmp_path):
    """The regional prices are exactly what `costs refresh --all-regions` writes from the recorded files
    (refresh_clouds.RECORDED_ALL_REGIONS, in that order): strip them, re-run, and aws.yaml and gcp.yaml come back
    byte for byte, on any day (a price is dated by its recorded file, and its source names no refresh day).
    A hand edit, or a recorded row changed without a refresh, fails."""
    import gpu_platform.costs.refresh_clouds as rc
    from gpu_platform.costs.refresh import _replace

    assert not [p["source"] for cloud in ("aws", "gcp") for *_, p in _regional(cloud) if "refresh on" in p["source"]]
    for cloud in ("aws", "gcp"):
        text = (CATALOG_DIR / f"{cloud}.yaml").read_text()
        doc = yaml.safe_load(text)
        for inst in doc["instances"]:
            inst.pop("regionalPrices", None)
        _replace(tmp_path / f"{cloud}.yaml", "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#")), doc)
    for cloud, name in rc.RECORDED_ALL_REGIONS:
        refresh = rc.refresh_aws_all_regions if cloud == "aws" else rc.refresh_gcp_all_regions
        refresh(RECORDED / name, catalog_path=tmp_path / f"{cloud}.yaml", today="2031-01-01")
    for cloud in ("aws", "gcp"):
        assert (tmp_path / f"{cloud}.yaml").read_bytes() == (CATALOG_DIR / f"{cloud}.yaml").read_bytes(), cloud
    # and a second run on its own output changes nothing
    for cloud, name in rc.RECORDED_ALL_REGIONS:
        refresh = rc.refresh_aws_all_regions if cloud == "aws" else rc.refresh_gcp_all_regions
        assert not refresh(RECORDED / name, catalog_path=tmp_path / f"{cloud}.yaml", today="2032-02-02").changed, name


# --- the readers and the refresh -------------------------------------------------------------------------------


def test_local_zone_rows_are_not_read():
    """us-east-1's m6i.large rows include the Atlanta Local Zone (use1-atl2-az1, Spot $0.0143): a node group in
    the region's subnets never runs there, so it is not one of the region's observations."""
    o = read_skypilot_vms_csv(AWS_V9, "us-east-1")["m6i.large"]
    assert len(o.prices) == 5 and min(o.prices) == 0.0283


def test_a_host_only_row_never_prices_a_gpu_machine(tmp_path):
    """A SkyPilot GCP row of an A2 machine prices its host only (the A100s are separate accelerator rows, and
    that catalog's europe-west4 A100 row is half Google's SKU): such a file writes no GPU machine's price."""
    f = tmp_path / "host.csv"
    f.write_text("# observed-no-later-than: 2026-11-28\n"
                 "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,Region,AvailabilityZone,Price,SpotPrice\n"
                 "a2-highgpu-1g,12.0,85.0,,,europe-west4,europe-west4-a,0.81406,0.36774\n"
                 "e2-standard-4,4.0,16.0,,,europe-west4,europe-west4-a,0.14754,0.06716\n"
                 ",,,A100,1,europe-west4,europe-west4-a,1.61365,1.3251\n")
    copy = tmp_path / "gcp.yaml"
    shutil.copy(CATALOG_DIR / "gcp.yaml", copy)
    before = read_document(copy)
    res = apply_gcp_machines(read_gcp_machine_prices(f), ["europe-west4"], catalog_path=copy, today="2030-01-01")
    after = {e["name"]: e for e in read_document(copy)["instances"]}
    a2_before = next(e for e in before["instances"] if e["name"] == "a2-highgpu-1g")
    assert after["a2-highgpu-1g"]["regionalPrices"] == a2_before["regionalPrices"]
    assert any("a2-highgpu-1g (europe-west4)" in n and "host only" in n for n in res.notes)
    assert validate_document(read_document(copy)) == []


def test_a_recorded_price_file_without_a_date_or_with_a_spot_price_above_on_demand_is_refused(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text("machine,region,hour,hour_spot\na2-highgpu-1g,europe-west4,3.7,1.4\n")
    with pytest.raises(ValueError, match="must say when its prices were generated"):
        read_gcp_machine_prices(f)
    f.write_text("# observed-no-later-than: 2025-03-06\nmachine,region,hour,hour_spot\na2-highgpu-1g,europe-west4,1.4,3.7\n")
    with pytest.raises(ValueError, match="a2-highgpu-1g in europe-west4: .*Spot price above 0 and not above it"):
        read_gcp_machine_prices(f)


def test_refresh_all_regions_writes_every_region_of_the_file_and_leaves_the_reference(tmp_path, monkeypatch, capsys):
    """`costs refresh --aws-spot F --all-regions` on a catalog without regional prices writes them for each region
    of F but us-east-1, whose (reference) prices stay as they are."""
    import gpu_platform.costs.refresh_clouds as rc

    doc = read_document(CATALOG_DIR / "aws.yaml")
    for inst in doc["instances"]:
        inst.pop("regionalPrices", None)
    copy = tmp_path / "aws.yaml"
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setattr(rc, "CATALOG_DIR", tmp_path)
    assert costs_main(["refresh", "--aws-spot", str(AWS_V9), "--all-regions"]) == 0
    out = capsys.readouterr().out
    assert f"{len(skypilot_regions(AWS_V9)) - 1} regions read; the reference region us-east-1 is left as it is" in out
    after = {e["name"]: e for e in read_document(copy)["instances"]}
    assert after["g5.xlarge"]["onDemand"] == next(e for e in doc["instances"] if e["name"] == "g5.xlarge")["onDemand"]
    m6i_regions = {r["Region"] for r in _rows(AWS_V9) if r["InstanceType"] == "m6i.large"}
    assert set(after["m6i.large"]["regionalPrices"]) == m6i_regions - {"us-east-1"} and len(m6i_regions) > 20
    assert after["g5.xlarge"]["regionalPrices"]["eu-west-1"]["onDemand"]["usdPerHour"] == 1.123


@pytest.mark.parametrize("argv, message", [
    (["--aws-spot", str(AWS_V9), "--all-regions", "--region", "eu-west-1"], "--all-regions and --region exclude each other"),
    (["--linode", "--all-regions"], "--all-regions reads a recorded file of every region"),
])
def test_refresh_all_regions_usage_errors(argv, message, capsys):
    assert costs_main(["refresh", *argv]) == 2
    assert message in capsys.readouterr().err


def test_linode_regions_priced_otherwise_than_the_default_get_their_own_price_and_monthly_cap(tmp_path):
    """Linode's types API lists the regions whose price differs from a plan's default (`region_prices`):
    `costs refresh --linode` records each (the reference region's aside) with its monthly cap, the estimator
    bills a stack there at that price, and a region the API no longer lists falls back to the default."""
    from gpu_platform.costs.catalog import Catalog, parse_document
    from gpu_platform.costs.refresh import refresh_linode

    response = json.loads((ROOT / "tests" / "data" / "linode-types-response.json").read_text())  # a labelled fixture
    copy = tmp_path / "linode.yaml"
    shutil.copy(CATALOG_DIR / "linode.yaml", copy)
    res = refresh_linode(response, copy, today="2030-01-02", source="recorded response")
    doc = read_document(copy)
    assert validate_document(doc) == []
    std2 = next(e for e in doc["instances"] if e["name"] == "g6-standard-2")
    assert std2["regionalPrices"]["id-cgk"]["onDemand"]["usdPerHour"] == 0.043
    assert std2["regionalPrices"]["id-cgk"]["monthlyCapUsd"] == 28.8
    assert "g6-standard-2 id-cgk: None -> 0.043 $/h (region price)" in res.changed
    ada = next(e for e in doc["instances"] if e["name"] == "g2-gpu-rtx4000a1-s")
    assert set(ada["regionalPrices"]) == {"us-ord"}  # us-east is the reference: its price is the plan's own
    instances, fixed = parse_document(doc)
    cat = Catalog({"linode": instances}, {"linode": fixed}, {"linode": {
        "referenceRegion": "us-east", "defaultPriceHolds": read_document(copy)["defaultPriceHolds"]}})
    t, how = cat.in_region("linode", "g6-standard-2", "on-demand", "id-cgk")
    assert (how, t.on_demand.usd_per_hour, t.monthly_cap_usd) == ("regional", 0.043, 28.8)
    assert t.monthly_cost("on-demand") == 28.8  # the region's cap, not the default plan's $24
    t, how = cat.in_region("linode", "g6-standard-2", "on-demand", "us-ord")
    assert (how, t.on_demand.usd_per_hour) == ("default", std2["onDemand"]["usdPerHour"])
    for e in response["data"]:
        e["region_prices"] = []
    res = refresh_linode(response, copy, today="2030-01-03", source="recorded response")
    assert "regionalPrices" not in next(e for e in read_document(copy)["instances"] if e["name"] == "g6-standard-2")
    assert any(c.startswith("g6-standard-2 id-cgk: regional price 0.043 removed") for c in res.changed)


@pytest.mark.parametrize("which", ["clouds", "linode"])
def test_a_refresh_that_fails_while_writing_leaves_the_catalog_as_it_was(tmp_path, monkeypatch, which):
    """The catalog was rewritten in place: a preflight reading it meanwhile (or a refresh stopped midway) saw an
    empty or half-written aws.yaml ('NoneType' object has no attribute 'get'). It is written beside and moved."""
    import gpu_platform.costs.refresh as refresh_mod
    from gpu_platform.costs.refresh import refresh_linode

    name = "gcp.yaml" if which == "clouds" else "linode.yaml"
    copy = tmp_path / name
    doc = read_document(CATALOG_DIR / name)
    for inst in doc["instances"]:
        inst.pop("regionalPrices", None)  # so that the refresh has prices to write
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    before = copy.read_text()

    def broken_dump(*args, **kwargs):
        args[1].write("instances:\n- name: half")  # part of the document reaches the file, then the write fails
        raise OSError("disk full")

    monkeypatch.setattr(refresh_mod.yaml, "dump", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        if which == "clouds":
            apply_gcp_machines(read_gcp_machine_prices(GCP_MACHINES), ["europe-west4"], catalog_path=copy, today="2030-01-01")
        else:
            refresh_linode({"data": [{"id": "g6-standard-4", "price": {"hourly": 9.0, "monthly": 9.0}}]}, copy)
    assert copy.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no half-written file left beside it


# --- a capacity priced in some regions but not the reference one (adopter review of 94425ce) --------------------


def _p4d_spot_stack(region: str) -> dict:
    from tests.conftest import stack_config

    raw = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
    raw["aws"] = {**raw["aws"], "region": region, "availabilityZones": [f"{region}{z}" for z in "abc"],
                  "pools": {"a100x8": {"rootVolumeGiB": 300}}}
    raw["gpuPools"] = [{"name": "a100x8", "instanceType": "p4d.24xlarge", "capacity": "spot", "minNodes": 0, "maxNodes": 1}]
    return raw


def test_an_eu_west_1_p4d_spot_pool_plans_and_is_priced_from_eu_west_1s_rows():
    """The config refused a Spot pool of p4d.24xlarge in every region ("a capacity the price catalog prices for
    p4d.24xlarge: on-demand"): it read only the reference us-east-1 price (then none), though the catalog records
    p4d Spot for eu-west-1 and ten other regions. In eu-west-1 the config passes, the bill carries eu-west-1's Spot price
    (the median of its zones' recorded rows), and the budget spend rule prices the pool the same way."""
    from gpu_platform.components.cluster import GpuPoolSpec
    from gpu_platform.components.platform.monitoring import pool_hourly_prices
    from gpu_platform.config.stack import parse_config

    cfg = parse_config(_p4d_spot_stack("eu-west-1"), "euw1")  # ConfigError before the fix
    (pool,) = cfg.gpu_pools
    spot = [float(r["SpotPrice"]) for r in _aws_rows("p4d.24xlarge", "eu-west-1")]
    assert spot and load_catalog().instance("aws", "p4d.24xlarge").spot.usd_per_hour != statistics.median(spot)
    est = estimate(cfg)
    line = next(ln for ln in est.lines if ln.resource == "p4d.24xlarge")
    assert (line.capacity, line.priced_in) == ("spot", "eu-west-1")
    assert line.unit_usd_per_hour == pytest.approx(statistics.median(spot))
    spec = GpuPoolSpec(name=pool.name, instance_type=pool.instance_type, capacity=pool.capacity, min_nodes=0,
                       max_nodes=1, gpus_per_node=8, gpu_model="NVIDIA A100", node_labels={})
    assert pool_hourly_prices("aws", [spec], region="eu-west-1") == {"a100x8": line.unit_usd_per_hour}


def test_a_region_without_a_spot_price_for_p4d_is_refused_naming_the_type_and_the_region():
    """ap-southeast-1 has no p4d.24xlarge Spot price: the config passes (other regions price it) and the bill is
    refused (exit 3's RegionPriceRefused), naming the type and the region and where it is priced; priceOverrides
    prices it."""
    from gpu_platform.config.stack import parse_config

    cfg = parse_config(_p4d_spot_stack("ap-southeast-1"), "apse1")
    with pytest.raises(RegionPriceRefused) as err:
        estimate(cfg)
    assert (err.value.type, err.value.capacity, err.value.region) == ("p4d.24xlarge", "spot", "ap-southeast-1")
    assert "no spot price for p4d.24xlarge in ap-southeast-1: the catalog prices AWS p4d.24xlarge only in " in str(err.value)
    assert "eu-west-1" in str(err.value)
    raw = _p4d_spot_stack("ap-southeast-1")
    raw["priceOverrides"] = {"p4d.24xlarge": {"spot": 12.0}}
    line = next(ln for ln in estimate(parse_config(raw, "apse1")).lines if ln.resource == "p4d.24xlarge")
    assert (line.unit_usd_per_hour, line.priced_in) == (12.0, "priceOverrides")


def test_the_program_plans_a_p4d_spot_pool_where_its_region_has_no_price_and_leaves_the_refusal_to_the_bill():
    """With the config passing a capacity priced elsewhere, the program's budget spend rule must not crash on
    ap-southeast-1's missing p4d Spot price (a ValueError traceback in preflight): the plan completes, the rule
    leaves the unpriced pool out, and the bill and the policy pack refuse the stack (exit 3)."""
    from tests.conftest import plan_config, stack_config

    config = {k: v for k, v in stack_config("aws-prod").items()}
    config["aws:region"] = "ap-southeast-1"
    config.update({f"gpu-platform:{k}": v for k, v in _p4d_spot_stack("ap-southeast-1").items()})
    plan = plan_config(config, "apse1")
    assert any(r.type == "aws:autoscaling/group:Group" for r in plan.resources)


def test_a_capacity_the_reference_region_does_not_price_passes_the_config_where_the_stacks_region_does(monkeypatch):
    """0.3.0's catalog had no us-east-1 Spot price for p3dn/p4d/p5, and the config check read only the reference
    price, so their Spot pools were refused in every region. Against that catalog shape (p4d's reference Spot
    removed), an eu-west-1 p4d Spot pool passes the config and the bill carries eu-west-1's price."""
    import dataclasses

    import gpu_platform.config.stack as stack_module
    from gpu_platform.config.stack import parse_config

    shipped = load_catalog()
    p4d = shipped.instance("aws", "p4d.24xlarge")
    assert "eu-west-1" in p4d.regional and "spot" in p4d.regional["eu-west-1"]
    old = shipped.with_instances("aws", {**{t.name: t for t in shipped.instances("aws")},
                                         "p4d.24xlarge": dataclasses.replace(p4d, spot=None)})
    monkeypatch.setattr(stack_module, "load_catalog", lambda overrides=None: old)
    cfg = parse_config(_p4d_spot_stack("eu-west-1"), "euw1")  # ConfigError "prices for p4d.24xlarge: on-demand" before
    line = next(ln for ln in estimate(cfg, old).lines if ln.resource == "p4d.24xlarge")
    assert (line.priced_in, line.unit_usd_per_hour) == ("eu-west-1", p4d.regional["eu-west-1"]["spot"].usd_per_hour)
    with pytest.raises(RegionPriceRefused):  # and us-east-1, unpriced in that catalog, is refused by the bill
        monkeypatch.setattr(stack_module, "load_catalog", lambda overrides=None: old)
        estimate(parse_config(_p4d_spot_stack("us-east-1"), "use1"), old)


def _header_bounds(path: Path) -> tuple[str, str]:
    """The capture window a recorded SkyPilot file's header states, read here from its text: the lower bound
    ('observed-no-earlier-than') and the upper ('observed-no-later-than', else the 'read' date)."""
    header = "\n".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    lower = re.search(r"observed-no-earlier-than: (\d{4}-\d{2}-\d{2})", header)
    upper = re.search(r"observed-no-later-than: (\d{4}-\d{2}-\d{2})", header) or re.search(r"read (\d{4}-\d{2}-\d{2})", header)
    assert lower and upper, f"{path.name}: the header bounds the capture date on both sides"
    return lower.group(1), upper.group(1)


def _all_prices(cloud: str):
    for inst in read_document(CATALOG_DIR / f"{cloud}.yaml")["instances"]:
        for cap in ("onDemand", "spot", "preemptible"):
            if inst.get(cap):
                yield inst["name"], None, cap, inst[cap]
        for region, prices in (inst.get("regionalPrices") or {}).items():
            for cap, p in prices.items():
                if p:
                    yield inst["name"], region, cap, p


def test_every_price_from_a_skypilot_v9_snapshot_carries_the_snapshots_window():
    """Adopter re-review of f294e99: the SkyPilot v9 snapshot's Spot prices were dated by the lower bound of its
    capture window (`observed 2026-06-03..2026-11-28`), but the AWS regional On-Demand prices and the GCP
    e2-standard-4 prices of the same snapshot said 2026-11-28, the day the file was read, so the catalog-age check
    saw them 178 days younger than they can be. Every price, On-Demand, Spot or preemptible, reference or
    regional, whose source is a v9 file is dated by that file's lower bound and carries the window."""
    seen = {}
    for cloud in ("aws", "gcp"):
        for name, region, cap, p in _all_prices(cloud):
            path = ROOT / p["source"].split(" ", 1)[0]
            if not (path.parent == RECORDED and path.name.startswith("skypilot-") and "-v9" in path.name):
                continue
            lower, upper = _header_bounds(path)
            assert (p["date"], p.get("observed")) == (lower, f"{lower}..{upper}"), (cloud, name, region, cap, p)
            seen[(cloud, cap)] = seen.get((cloud, cap), 0) + 1
    # both snapshots, every kind of price they give
    assert {("aws", "onDemand"), ("aws", "spot"), ("gcp", "onDemand"), ("gcp", "spot"), ("gcp", "preemptible")} <= set(seen), seen


def _spot_stack(itype: str, region: str) -> dict:
    raw = _p4d_spot_stack(region)
    raw["gpuPools"][0]["instanceType"] = itype
    return raw


def test_the_changelogs_spot_refusal_names_only_regions_the_bill_refuses():
    """Adopter re-review of f294e99: CHANGELOG [0.3.1] (then [Unreleased]) said a p3dn/p4d/p5 Spot pool is refused "elsewhere,
    us-east-1 included", but us-east-1's Spot prices were refreshed from the v9 snapshot and a p5.48xlarge Spot
    stack there is priced ($18.7089/h). Every region the entry's refusal clause names (with the type it pairs,
    else all three) refuses, and every region its priced clause names prices."""
    from gpu_platform.config.stack import parse_config

    text = re.sub(r"\s+", " ", (ROOT / "CHANGELOG.md").read_text().split("\n## [0.3.1]", 1)[1].split("\n## [", 1)[0])
    entry = text.split("A Spot pool of p3dn/p4d/p5", 1)[1].split("\n- ", 1)[0].split(" - ", 1)[0]
    priced_clause, refused_clause = entry.split("refused by the bill", 1)
    refused_clause = refused_clause.split("until", 1)[0]
    types = ("p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge")
    region = r"[a-z]{2}-[a-z]+-\d"

    def claims(clause: str) -> list[tuple[str, str]]:
        pairs = re.findall(rf"(p3dn\.24xlarge|p4d\.24xlarge|p5\.48xlarge) in ({region})", clause)
        paired = {r for _, r in pairs}
        return pairs + [(t, r) for r in re.findall(region, clause) if r not in paired for t in types]

    refused, priced = claims(refused_clause), claims(priced_clause)
    assert refused and priced, entry
    for itype, r in refused:
        with pytest.raises(RegionPriceRefused):
            estimate(parse_config(_spot_stack(itype, r), "x"))
    for itype, r in priced:
        line = next(ln for ln in estimate(parse_config(_spot_stack(itype, r), "x")).lines if ln.resource == itype)
        assert line.unit_usd_per_hour > 0, (itype, r)
    p5 = next(ln for ln in estimate(parse_config(_spot_stack("p5.48xlarge", "us-east-1"), "x")).lines
              if ln.resource == "p5.48xlarge")
    assert p5.unit_usd_per_hour == 18.7089


def test_the_verdict_offers_a_refresh_command_only_when_the_bill_gives_one(tmp_path, capsys):
    """Adopter re-review of f294e99: for a type the region does not offer (aws-prod moved to eu-west-1: g6.12xlarge,
    in no eu-west-1 zone of the recorded offerings) the bill rightly gives no refresh command, but the verdict's
    cost row said "the bill below gives ... the command that records eu-west-1's published prices". The row now
    says a command only when the bill (cost.json's `refresh`) has one, and says the region may not offer the type."""
    from gpu_platform.preflight.__main__ import main
    from gpu_platform.preflight.verdict import summary_lines

    stack = tmp_path / "Pulumi.aws-eu.yaml"
    stack.write_text((ROOT / "stacks" / "Pulumi.aws-prod.yaml").read_text().replace("us-east-1", "eu-west-1"))
    assert main(["--stack-file", str(stack), "--no-policies", "--out", str(tmp_path / "out")]) == 3
    out = capsys.readouterr().out
    refused = json.loads((tmp_path / "out" / "aws-eu" / "cost.json").read_text())["refused"]
    assert refused["refresh"] == [] and "g6.12xlarge" in refused["message"]
    row = " ".join(next(line for line in out.splitlines() if line.startswith("  cost ")).split())
    assert "REFUSED: no spot price for" in row and "command that records" not in row, row
    assert "eu-west-1 may not offer g6.12xlarge" in row, row

    # offered but unpriced (p5.48xlarge Spot in ap-northeast-2): the bill gives the command, so does the row; mixed:
    # the command for the one, "may not offer" for the other
    def row_of(missing):
        doc = {"stack": "x", "exitCode": 3, "cost": {"refused": {"region": "ap-northeast-2", "missing": missing}}}
        return next(text for label, text, _ in summary_lines(doc) if label == "cost")

    offered = row_of([{"type": "p5.48xlarge", "capacity": "spot", "offered": True}])
    assert offered.endswith("the command that records ap-northeast-2's published prices"), offered
    mixed = row_of([{"type": "p5.48xlarge", "capacity": "spot", "offered": True},
                    {"type": "g6e.xlarge", "capacity": "spot", "offered": False}])
    assert "records ap-northeast-2's published prices of p5.48xlarge; ap-northeast-2 may not offer g6e.xlarge" in mixed
