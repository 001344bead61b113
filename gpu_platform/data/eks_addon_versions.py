"""The EKS managed add-on versions the AWS cluster installs, pinned per Kubernetes minor (dated, sourced).

Before: eks.py asked EKS for its default version of each add-on at every deploy (aws_eks_addon_version), so a
deploy could move an add-on whenever AWS changed its default, and vpc-cni could jump more than one minor in
one deploy (terraform-aws-modules/terraform-aws-eks#2749). EKS refuses, or AWS advises against, moving the
VPC CNI by more than one minor at a time: "We recommend that you update one minor version at a time"
(awsdocs/amazon-eks-user-guide latest/ug/networking/managing-vpc-cni.adoc, commit
057948d9301426e6165db5fddb5617a971d08b6c), and UpdateAddon answers "Updating VPC-CNI can only go up or down
1 minor version at a time" (quoted in dfds/infrastructure-modules#270 and on Stack Overflow question
76493050). So the versions are data here, and a change to them is a reviewed commit.

Rules (tests/test_aws_addon_versions.py checks them over this table):
- every minor the version calendar lets a new EKS cluster use today (standard or extended support) has a row,
  or it is a config error naming `kubernetesVersion` and this file before any resource is registered
  (config/checks/aws.py addon_version_issues);
- kube-proxy's minor is the row's Kubernetes minor (it is built per minor);
- on a Kubernetes minor upgrade (row n to row n+1) vpc-cni moves by at most one of its own minors, so a
  stack that follows the calendar one minor at a time moves vpc-cni one minor per deploy;
- no add-on goes down from one row to the next (EKS allows downgrades of some add-ons, but a downgrade on an
  upgrade is never intended).

Where the values come from (retrieved 2026-11-28, offline machine; the sources are git repositories read
through a code index, so each is named by repository, path, commit and the commit's date):
- AWS's own "latest version per Kubernetes version" tables, awsdocs/amazon-eks-user-guide
  latest/ug/networking/managing-{vpc-cni,kube-proxy,coredns}.adoc: the newest stored copies list Kubernetes
  1.27-1.33 only (vpc-cni v1.20.1-eksbuild.3 for 1.27-1.33 at commit 057948d9…; the index gives no commit
  date and the repository mirror available here stops at 2024-12-18). They predate EKS 1.34-1.36 and name
  no aws-ebs-csi-driver version at all (the EBS CSI pages, latest/ug/storage/ebs-csi.adoc, give none per
  minor). They are the cross-check, not the pins.
- The pins: the `eks_addon_default_versions` map of wandb/terraform-aws-wandb modules/app_eks/add-ons.tf at
  commit c4e56b7b1aada236558e6544b5c0226e5cf204e9 (2026-05-06, branch j7m4/addon-upgrade-eks-defaults, PR
  #379), whose comment says: "Values are AWS's published defaults at patch time ... Each cell is verified
  installable on its target minor via describe-addon-versions". It is the one recorded table found that
  covers every add-on here, aws-ebs-csi-driver included, for 1.32-1.35 from one day.
- Cross-check of the same minors (newest version EKS lists, from `aws eks describe-addon-versions` by its
  hack/versions script): cookpad/terraform-aws-eks versions.tf at f696246866f8b0326770d0459403f6a252569b6d
  (2026-03-04, 1.35: vpc-cni v1.21.1-eksbuild.3, coredns v1.13.2-eksbuild.1, kube-proxy v1.35.0-eksbuild.2,
  aws-ebs-csi-driver v1.56.0-eksbuild.1) and ad7837dbd7dcf5ecb7737dfe77e0b3313c43e9fc (2025-11-24, 1.34:
  vpc-cni v1.20.5-eksbuild.1, coredns v1.12.4-eksbuild.1, kube-proxy v1.34.1-eksbuild.2): the same add-on
  minors as the pins.
- Kubernetes 1.36 (EKS 2026-06-02) has no row: no recorded describe-addon-versions output or AWS table for it
  was found, and kube-proxy's version cannot be guessed (v1.36.x-eksbuild.N). A 1.36 stack is refused until a
  row is recorded here (`aws eks describe-addon-versions --kubernetes-version 1.36 --addon-name <name>
  --query 'addons[].addonVersions[?compatibilities[?defaultVersion]].addonVersion'`, with the date and the
  command's output kept beside the row).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# The add-ons eks.py installs, in the order it installs them.
ADDONS = ("vpc-cni", "kube-proxy", "coredns", "aws-ebs-csi-driver")
FILE = Path(__file__).resolve().relative_to(Path(__file__).resolve().parents[2]).as_posix()

_WANDB = ("wandb/terraform-aws-wandb modules/app_eks/add-ons.tf @ c4e56b7b1aada236558e6544b5c0226e5cf204e9 "
          "(2026-05-06): eks_addon_default_versions, \"AWS's published defaults at patch time\", each cell "
          "\"verified installable on its target minor via describe-addon-versions\"")


@dataclass(frozen=True)
class AddonRow:
    minor: str
    versions: dict[str, str]  # add-on name -> EKS add-on version (vX.Y.Z-eksbuild.N)
    source: str
    retrieved: str


ROWS: dict[str, AddonRow] = {r.minor: r for r in (
    AddonRow("1.32", {"vpc-cni": "v1.20.5-eksbuild.1", "kube-proxy": "v1.32.13-eksbuild.5",
                      "coredns": "v1.11.4-eksbuild.33", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _WANDB, "2026-11-28"),
    AddonRow("1.33", {"vpc-cni": "v1.20.5-eksbuild.1", "kube-proxy": "v1.33.10-eksbuild.2",
                      "coredns": "v1.12.4-eksbuild.10", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _WANDB, "2026-11-28"),
    AddonRow("1.34", {"vpc-cni": "v1.20.5-eksbuild.1", "kube-proxy": "v1.34.6-eksbuild.2",
                      "coredns": "v1.12.4-eksbuild.10", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _WANDB, "2026-11-28"),
    AddonRow("1.35", {"vpc-cni": "v1.21.1-eksbuild.1", "kube-proxy": "v1.35.3-eksbuild.2",
                      "coredns": "v1.13.2-eksbuild.4", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _WANDB, "2026-11-28"),
)}

_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-eksbuild\.(\d+)$")


class UnknownMinor(LookupError):
    """No add-on versions are recorded for a Kubernetes minor."""


def parse_version(version: str) -> tuple[int, int, int, int]:
    """(major, minor, patch, eksbuild) of an EKS add-on version; ValueError for anything else."""
    m = _VERSION.match(version)
    if not m:
        raise ValueError(f"{version!r} is not an EKS add-on version (vMAJOR.MINOR.PATCH-eksbuild.N)")
    return tuple(int(g) for g in m.groups())  # type: ignore[return-value]


def recorded_minors() -> tuple[str, ...]:
    return tuple(sorted(ROWS, key=lambda m: tuple(int(p) for p in m.split("."))))


def missing_minor_message(minor: str) -> str:
    return (f"a Kubernetes minor with recorded EKS add-on versions ({', '.join(recorded_minors())}): {FILE} pins "
            f"vpc-cni, kube-proxy, coredns and aws-ebs-csi-driver per minor and has no row for {minor}; add one "
            "(its source and date beside it) or choose a recorded minor")


def addon_versions(minor: str) -> dict[str, str]:
    """The pinned version of each add-on for a Kubernetes minor; UnknownMinor (with the message) when none."""
    row = ROWS.get(minor)
    if row is None:
        raise UnknownMinor(missing_minor_message(minor))
    return dict(row.versions)
