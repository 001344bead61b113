"""Command line of the cost model.

    python -m gpu_platform.costs simulate examples/seed-scenario.yaml [--prices current|seed-era-2022]
    python -m gpu_platform.costs seed-check
    python -m gpu_platform.costs refresh --linode [--from-file F] [--dry-run]
    python -m gpu_platform.costs refresh --aws-spot gpu_platform/costs/catalog/recorded/skypilot-aws-vms-us-east-1.csv [--dry-run]
    python -m gpu_platform.costs refresh --aws-spot-history F.json | --aws-price-list F.json | --gcp-skus F.json [--dry-run]
    python -m gpu_platform.costs refresh --aws-spot gpu_platform/costs/catalog/recorded/skypilot-aws-vms-v9.csv --all-regions
    python -m gpu_platform.costs refresh --gcp-machine-prices gpu_platform/costs/catalog/recorded/cyclenerd-gcp-pricing.csv --all-regions
    python -m gpu_platform.costs check-catalog
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence

from gpu_platform import command_name


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog=command_name("gpu_platform.costs"), description="gpu-platform cost model")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sim = sub.add_parser("simulate", help="run a workload scenario on several platforms and compare the bills")
    sim.add_argument("scenario")
    sim.add_argument("--prices", default=None, help="'current' or an override set such as seed-era-2022 "
                     "(default: the scenario's own 'prices')")
    sim.add_argument("--seeds", type=int, default=None, help="Monte Carlo: run N seeds and print mean and spread")
    sub.add_parser("seed-check", help="the estimator's figures next to the seed story's, differences explained")
    ref = sub.add_parser("refresh", help="rewrite catalog prices from a cloud's public price API")
    which = ref.add_mutually_exclusive_group(required=True)
    which.add_argument("--linode", action="store_true", help="Linode prices from the public types API")
    which.add_argument("--aws-spot", metavar="CSV", help="AWS Spot (and On-Demand) prices from a recorded SkyPilot "
                       "catalogs/v7/aws/vms.csv (e.g. gpu_platform/costs/catalog/recorded/skypilot-aws-vms-us-east-1.csv)")
    which.add_argument("--aws-spot-history", metavar="JSON", help="AWS Spot prices from saved "
                       "`aws ec2 describe-spot-price-history --output json` output")
    which.add_argument("--aws-price-list", metavar="JSON", help="AWS On-Demand prices from a saved EC2 offer file")
    which.add_argument("--gcp-skus", metavar="JSON", help="GCP A2/A100 prices from a saved Cloud Billing Catalog "
                       "API skus response (service 6F81-5844-456A)")
    which.add_argument("--gcp-machine-prices", metavar="CSV", help="GCP machine prices per region (machine,region,hour,"
                       "hour_spot; e.g. gpu_platform/costs/catalog/recorded/cyclenerd-gcp-pricing.csv)")
    ref.add_argument("--region", default=None, help="region of the AWS/GCP data (default: the catalog's reference region)")
    ref.add_argument("--all-regions", action="store_true", help="--aws-spot / --gcp-machine-prices: every region the "
                     "file has rows for, each into the type's regionalPrices (the reference region is left as it is: "
                     "refresh it with --region)")
    ref.add_argument("--from-file", default=None, help="a saved response of https://api.linode.com/v4/linode/types")
    ref.add_argument("--dry-run", action="store_true", help="report the changes without writing the catalog")
    sub.add_parser("check-catalog", help="validate every catalog file (every price has a source and a date)")
    args = ap.parse_args(argv)

    if args.cmd == "simulate":
        from gpu_platform.costs.simulator import ScenarioError, load_scenario, render_report, simulate, simulate_many

        try:
            doc = load_scenario(args.scenario)
            if args.seeds:
                print(simulate_many(doc, args.seeds, args.prices).render())
            else:
                print(render_report(simulate(doc, args.prices)))
        except (ScenarioError, OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "seed-check":
        from gpu_platform.costs.seedcheck import seed_check

        print(seed_check())
        return 0
    if args.cmd == "refresh" and args.all_regions and args.region:
        print("error: --all-regions and --region exclude each other", file=sys.stderr)
        return 2
    if args.cmd == "refresh" and args.all_regions and not (args.aws_spot or args.gcp_machine_prices):
        print("error: --all-regions reads a recorded file of every region: --aws-spot CSV or --gcp-machine-prices CSV",
              file=sys.stderr)
        return 2
    if args.cmd == "refresh" and not args.linode:
        return _refresh_clouds(args)
    if args.cmd == "refresh":
        from gpu_platform.costs.refresh import LINODE_TYPES_URL, fetch_linode_types, refresh_linode

        if args.from_file:
            with open(args.from_file, encoding="utf-8") as f:
                response = json.load(f)
            source = f"{LINODE_TYPES_URL} (saved response {args.from_file})"
        else:
            try:
                response = fetch_linode_types()
            except OSError as exc:
                print(f"error: cannot read {LINODE_TYPES_URL}: {exc}", file=sys.stderr)
                return 2
            source = LINODE_TYPES_URL
        print(refresh_linode(response, source=source, write=not args.dry_run).render())
        return 0
    if args.cmd == "check-catalog":
        from gpu_platform.costs.catalog import catalog_files, read_document, validate_document, validate_override_set

        bad = 0
        for p in catalog_files():
            doc = read_document(p)
            problems = validate_override_set(doc, p.name) if "overrides" in doc else validate_document(doc, p.name)
            print(f"{p.name}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
            for pr in problems:
                print(f"  {pr}")
            bad += len(problems)
        return 1 if bad else 0
    return 2  # pragma: no cover - argparse rejects unknown commands


def _nothing_to_record(path: Any, region: str, what: str, entries: int, key: str, answer: str) -> int:
    """An AWS answer without one price of a catalogued type for the region: an error (exit 2), never a silent
    `changed: 0, unchanged: 0`. AWS answers an empty list for a type the region does not offer."""
    print(f"error: {path}: no {what} of a catalogued AWS instance type in {region} ({entries} entr"
          f"{'y' if entries == 1 else 'ies'} under {key}); nothing recorded. {answer} answers nothing for a type "
          f"{region} does not offer (see the type's regions on the AWS instance-types page or `aws ec2 "
          "describe-instance-type-offerings --location-type availability-zone --filters Name=instance-type,"
          f"Values=<type> --region {region}`), and for a file of another region (--region) or time window",
          file=sys.stderr)
    return 2


def _refresh_clouds(args) -> int:
    from pathlib import Path

    from gpu_platform.costs import refresh_clouds as rc
    from gpu_platform.costs.catalog import load_catalog

    cat = load_catalog()
    try:
        if args.aws_spot and args.all_regions:
            res = rc.refresh_aws_all_regions(Path(args.aws_spot), write=not args.dry_run)
        elif args.aws_spot:
            region = args.region or cat.reference_region("aws")
            p = Path(args.aws_spot)
            try:  # the file's date and capture window, as its Spot prices carry them (default: today)
                od_date, od_observed = rc.skypilot_file_window(p)
            except ValueError:
                od_date, od_observed = None, None
            res = rc.apply_aws(rc.read_skypilot_vms_csv(p, region), rc.read_skypilot_on_demand(p, region),
                               on_demand_source=f"{rc._rel(p)} (SkyPilot catalog Price column, {region})",
                               write=not args.dry_run, drop_untraced_spot=True, region=region,
                               on_demand_date=od_date, on_demand_observed=od_observed)
        elif args.gcp_machine_prices and args.all_regions:
            res = rc.refresh_gcp_all_regions(Path(args.gcp_machine_prices), write=not args.dry_run)
        elif args.gcp_machine_prices:
            data = rc.read_gcp_machine_prices(Path(args.gcp_machine_prices))
            res = rc.apply_gcp_machines(data, [args.region or cat.reference_region("gcp")], write=not args.dry_run)
        elif args.aws_spot_history:
            region = args.region or cat.reference_region("aws")
            p = Path(args.aws_spot_history)
            doc = json.loads(p.read_text(encoding="utf-8"))
            spot = rc.read_spot_price_history(doc, region, rc._rel(p))
            if not any(cat.instance("aws", t) for t in spot):
                return _nothing_to_record(p, region, "Spot price (Linux/UNIX)", len(doc.get("SpotPriceHistory") or []),
                                          "SpotPriceHistory", "describe-spot-price-history")
            res = rc.apply_aws(spot, write=not args.dry_run, region=region)
        elif args.aws_price_list:
            region = args.region or cat.reference_region("aws")
            p = Path(args.aws_price_list)
            doc = json.loads(p.read_text(encoding="utf-8"))
            listed = rc.read_ec2_price_list(doc, region)
            if not any(cat.instance("aws", t) for t in listed):
                return _nothing_to_record(p, region, "On-Demand price (Linux, shared tenancy)",
                                          len(doc.get("products") or {}), "products", "the EC2 price list")
            res = rc.apply_aws(on_demand=listed,
                               on_demand_source=f"{rc._rel(p)} (EC2 price list, {region})", write=not args.dry_run,
                               region=region)
        else:
            region = args.region or cat.reference_region("gcp")
            p = Path(args.gcp_skus)
            doc = json.loads(p.read_text(encoding="utf-8"))
            res = rc.apply_gcp(rc.read_gcp_skus(doc, region), rc._rel(p), write=not args.dry_run, region=region)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(res.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
