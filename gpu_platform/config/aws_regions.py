"""The AWS regions and availability zones a stack may name: a dated recording (aws_regions.yaml).

Regions: botocore's own partition data (botocore/data/endpoints.json of the pinned botocore, the file every AWS
SDK call resolves endpoints from): the regions of the partitions aws, aws-cn and aws-us-gov whose EKS endpoint
it lists. Zones: a zone name is the region and one letter, mapped per account onto the region's zone IDs
(use1-az1 ...), so no list is the same for every account; botocore has none. The recording takes the zones moto
(the pinned EC2 mock, moto/ec2/models/availability_zones_and_regions.py) lists for the regions it records
explicitly, an amalgamation of real accounts' `aws ec2 describe-availability-zones` answers with their zone IDs.
A zone letter past the region's highest zone ID (use1-az6: f) names no zone in any account; for a region moto
does not record, the highest letter of any recorded region is the bound.

Rewrite the recording: `python -m gpu_platform.config.aws_regions` (reads the installed botocore and moto, both
pinned in requirements-dev.txt); tests/test_aws_config.py checks the file is what they say.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

import yaml

REGIONS_FILE = Path(__file__).resolve().parent / "aws_regions.yaml"
PARTITIONS = ("aws", "aws-cn", "aws-us-gov")


@dataclass(frozen=True)
class AwsRegion:
    name: str
    partition: str
    description: str
    zones: Optional[tuple[str, ...]]  # recorded zone names, None: not recorded
    last_letter: str  # the highest zone letter an account can see in it


@lru_cache(maxsize=1)
def aws_regions() -> dict[str, AwsRegion]:
    """Region name -> what the recording says of it (aws_regions.yaml, see its header)."""
    doc = yaml.load(REGIONS_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not doc.get("regionsSource") or not doc.get("zonesSource") or not doc.get("retrieved"):
        raise ValueError(f"{REGIONS_FILE}: the region table must name its sources and retrieval date")
    recorded = [r for r in doc["regions"] if r.get("zones")]
    fallback = max(_last_letter(r["zones"]) for r in recorded)
    return {r["name"]: AwsRegion(r["name"], r["partition"], r["description"],
                                 tuple(z for z, _ in r["zones"]) if r.get("zones") else None,
                                 _last_letter(r["zones"]) if r.get("zones") else fallback)
            for r in doc["regions"]}


def _last_letter(zones: list[list[str]]) -> str:
    """The highest letter of the zone names, or of the zone ID numbers (an account sees as many zones as the
    region has IDs, lettered from a), whichever is later."""
    letters = [z[-1] for z, _ in zones]
    ids = [chr(ord("a") + int(zid.rsplit("-az", 1)[1]) - 1) for _, zid in zones]
    return max(letters + ids)


def zone_issue(region: str, zone: str) -> Optional[str]:
    """What is wrong with `zone` as an availability zone of `region` (None: it may exist)."""
    known = aws_regions().get(region)
    if known is None or not re.fullmatch(rf"{re.escape(region)}[a-z]", zone):
        return f"a zone of region {region} ({region}a, {region}b, ...)"
    if zone[-1] > known.last_letter:
        listed = f"recorded: {', '.join(known.zones)}; " if known.zones else ""
        return (f"a zone of {region} from {region}a to {region}{known.last_letter} ({listed}"
                f"gpu_platform/config/aws_regions.yaml; `aws ec2 describe-availability-zones --region {region}` "
                "lists your account's)")
    return None


# --- the recording ---------------------------------------------------------------------------------------


def _botocore_regions() -> tuple[str, list[dict]]:
    import botocore

    path = Path(botocore.__file__).parent / "data" / "endpoints.json"
    data = json.loads(path.read_text())
    out = []
    for part in data["partitions"]:
        if part["partition"] not in PARTITIONS:
            continue
        eks = part["services"].get("eks", {}).get("endpoints", {})
        for name, info in sorted(part["regions"].items()):
            if name in eks:
                out.append({"name": name, "partition": part["partition"], "description": info.get("description", "")})
    return f"botocore {botocore.__version__} botocore/data/endpoints.json", out


def _moto_zones() -> tuple[str, dict[str, list[list[str]]]]:
    import moto
    import moto.ec2.models as models

    path = Path(models.__file__).parent / "availability_zones_and_regions.py"
    tree = ast.parse(path.read_text())
    zones: dict[str, list[list[str]]] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "zones" for t in node.targets)):
            for key, value in zip(node.value.keys, node.value.values):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.List)
                rows = []
                for call in value.elts:
                    kw = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}  # type: ignore[attr-defined]
                    if kw.get("zone_type", "availability-zone") == "availability-zone":
                        rows.append([kw["name"], kw["zone_id"]])
                zones[key.value] = sorted(rows)
    return f"moto {moto.__version__} moto/ec2/models/availability_zones_and_regions.py", zones


def recording(retrieved: str) -> dict:
    """What aws_regions.yaml holds, read from the installed botocore and moto."""
    regions_source, regions = _botocore_regions()
    zones_source, zones = _moto_zones()
    for r in regions:
        r["zones"] = zones.get(r["name"])
    return {
        "retrieved": retrieved,
        "regionsSource": f"{regions_source}: partitions {', '.join(PARTITIONS)}, the regions whose EKS endpoint it lists",
        "zonesSource": f"{zones_source}: RegionsAndZonesBackend.zones, the regions it records explicitly ([name, zone ID])",
        "regions": regions,
    }


def main() -> int:
    doc = recording(dt.date.today().isoformat())
    header = "# Written by `python -m gpu_platform.config.aws_regions` (see gpu_platform/config/aws_regions.py); do not edit.\n"
    REGIONS_FILE.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))
    print(f"{REGIONS_FILE}: {len(doc['regions'])} regions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
