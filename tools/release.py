"""What a release tag must agree with, and its release notes (`.github/workflows/release.yml` runs both).

    python3 tools/release.py check v0.3.0   # exit 1, naming what disagrees, unless the tag is the release
    python3 tools/release.py notes 0.3.0    # the version's CHANGELOG.md section, for the GitHub release

A tag `vX.Y.Z` is a release when `gpu_platform/__init__.py`'s `__version__` (the one place the version is
set) is `X.Y.Z`, the policy pack's manifest says the same (the Pulumi CLI reads the pack's version from
`PulumiPolicy.yaml`, so it is restated there), and CHANGELOG.md's newest section is `[X.Y.Z] — <date>` with
no `[Unreleased]` section above it. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VERSION_RE = re.compile(r'^__version__ = "([^"]+)"', re.M)
SECTION_RE = re.compile(r"^## \[([^\]]+)\](.*)$", re.M)
# The images the tag's other workflows publish (controller-image.yml, linode-node-groups-image.yml,
# training-image.yml), named in the notes so a user knows where the digests are printed.
IMAGES = ("gpu-platform-scale-in", "gpu-platform-linode-node-groups", "gpu-platform-training")


def package_version(root: Path = ROOT) -> str:
    found = VERSION_RE.search((root / "gpu_platform" / "__init__.py").read_text())
    if not found:
        raise SystemExit("gpu_platform/__init__.py sets no __version__")
    return found.group(1)


def pack_version(root: Path = ROOT) -> str:
    found = re.search(r"^version:\s*(\S+)", (root / "gpu_platform" / "policies" / "PulumiPolicy.yaml").read_text(), re.M)
    return found.group(1) if found else ""


def problems(tag: str, root: Path = ROOT) -> list[str]:
    out = []
    if not re.fullmatch(r"v\d+\.\d+\.\d+", tag):
        return [f"{tag!r} is not a release tag (vX.Y.Z)"]
    version = tag[1:]
    ours = package_version(root)
    if ours != version:
        out.append(f"gpu_platform/__init__.py's __version__ is {ours}, not {version}: set it, and release from that commit")
    if pack_version(root) != version:
        out.append(f"gpu_platform/policies/PulumiPolicy.yaml's version is {pack_version(root) or 'missing'}, not {version}")
    sections = SECTION_RE.findall((root / "CHANGELOG.md").read_text())
    if not sections:
        out.append("CHANGELOG.md has no sections")
    else:
        first, rest = sections[0]
        if first != version:
            out.append(f"CHANGELOG.md's newest section is [{first}], not [{version}] (rename [Unreleased] to "
                       f"[{version}] — <date>)")
        elif not re.fullmatch(r" — \d{4}-\d{2}-\d{2}", rest):
            out.append(f"CHANGELOG.md's [{version}] heading has no date (## [{version}] — YYYY-MM-DD)")
    return out


def notes(version: str, root: Path = ROOT) -> str:
    text = (root / "CHANGELOG.md").read_text()
    parts = SECTION_RE.split(text)
    # split -> [before, v1, rest1, body1, v2, rest2, body2, ...]
    for i in range(1, len(parts), 3):
        if parts[i] == version:
            body = parts[i + 2].strip()
            images = ", ".join(f"`ghcr.io/<owner>/{name}`" for name in IMAGES)
            return (f"{body}\n\n### Images\nPublished from this tag by the image workflows ({images}); each "
                    "workflow's job summary prints the digest to pin (docs/ci.md).\n")
    raise SystemExit(f"CHANGELOG.md has no [{version}] section")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("check", "notes"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    if argv[0] == "check":
        found = problems(argv[1])
        for p in found:
            print(f"release {argv[1]}: {p}", file=sys.stderr)
        return 1 if found else 0
    print(notes(argv[1].removeprefix("v")), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
