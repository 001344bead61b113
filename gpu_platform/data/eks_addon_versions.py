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
  upgrade is never intended);
- on every day of the next 180 days (from the version calendar's today) some minor in EKS standard support has
  a row, so a STANDARD cluster always has a minor preflight accepts (EKS upgrades a STANDARD cluster itself
  when its minor leaves standard support);
- `as_of` is the oldest date the row's `source` names, and is no later than `retrieved`.

Where the values come from (retrieved 2026-11-28, offline machine; git sources are named by repository, path,
commit and the commit's date, web pages by their address). Each row names its sources and carries `as_of`,
the oldest date its sources name (for an undated page, the earliest day its contents can be from: the first
day the versions it lists existed), so the data's age shows beside the date it was read (`retrieved`):
- The 1.32-1.35 pins of vpc-cni, coredns and aws-ebs-csi-driver: the `eks_addon_default_versions` map of
  wandb/terraform-aws-wandb modules/app_eks/add-ons.tf at commit c4e56b7b1aada236558e6544b5c0226e5cf204e9
  (2026-05-06, branch j7m4/addon-upgrade-eks-defaults, PR #379), whose comment says: "Values are AWS's
  published defaults at patch time ... Each cell is verified installable on its target minor via
  describe-addon-versions". It is the one recorded table found that covers every add-on here,
  aws-ebs-csi-driver included, for 1.32-1.35 from one day. Its newest commit touching the file (73c280d2…,
  2026-05-19) has no 1.36 entry.
- kube-proxy for every row: AWS's own table, EKS User Guide "Manage kube-proxy in Amazon EKS clusters",
  kube-proxy versions ("the latest version of the Amazon EKS add-on type for each Kubernetes version"),
  stored copy https://docs.aws.amazon.com/ja_jp/eks/latest/userguide/managing-kube-proxy.md (undated; it lists
  1.36, so it is from EKS 1.36's release, 2026-06-02, or later): 1.36 v1.36.0-eksbuild.14, 1.35
  v1.35.3-eksbuild.13, 1.34 v1.34.6-eksbuild.13, 1.33 v1.33.10-eksbuild.13, 1.32 v1.32.13-eksbuild.16. An
  older copy of the same page (https://docs.amazonaws.cn/zh_cn/eks/latest/userguide/managing-kube-proxy.md,
  1.30-1.35) lists exactly wandb's builds (v1.35.3-eksbuild.2 ... v1.32.13-eksbuild.5), the builds pinned
  here before 2026-11-28. The newer builds are the same upstream kube-proxy patch (v1.35.3, v1.34.6,
  v1.33.10, v1.32.13) rebuilt by EKS; moving to them is an in-place UpdateAddon (terraform-provider-aws
  aws_eks_addon: addon_version is not ForceNew; Pulumi's aws:eks/Addon replaces only on addonName or
  clusterName), a rolling restart of the kube-proxy DaemonSet, so the pins follow AWS's table.
- 1.36 coredns: AWS's table, EKS User Guide "Manage CoreDNS for DNS in Amazon EKS clusters", stored copy
  https://docs.aws.amazon.com/ja_jp/eks/latest/userguide/managing-coredns.md (undated): 1.36 and 1.35
  v1.14.3-eksbuild.3. CoreDNS v1.14.3 entered EKS Distro's 1.36 build with release v1-36-eks-6 (aws/eks-distro
  docs/contents/releases/1-36/6/index.md at 7252ca1e8e665ed8c2f578efb67e0c232f8c866d, 2026-07-27; earlier
  1-36 releases ship v1.13.2/v1.14.2), so that copy is from 2026-07-27 or later.
- 1.36 vpc-cni v1.22.3-eksbuild.1 and aws-ebs-csi-driver v1.63.1-eksbuild.1: no AWS table gives them (the
  stored managing-vpc-cni pages stop at 1.33, the EBS CSI pages give no version per minor). Both builds, with
  coredns v1.14.3-eksbuild.3 and kube-proxy v1.36.0-eksbuild.13, are what two public 1.36 records name: a
  Terraform stack pinned to eks_version "1.36", and the deploy log of a 1.36 cluster that records the versions
  its add-ons ran at (found through the code index by the strings "v1.63.1-eksbuild.1" and
  "v1.36.0-eksbuild"; the index names no repository for them, so they corroborate and are not the dated
  source). Dated upstream: VPC CNI v1.22.3 was released 2026-07-06 (aws/eks-charts stable/aws-vpc-cni,
  commit 381f19c, "aws-vpc-cni: v1.22.3 (#1344)"), the EBS CSI driver v1.63.1 on 2026-07-27
  (https://pkg.go.dev/github.com/kubernetes-sigs/aws-ebs-csi-driver@v1.63.1, "Published: Jul 27, 2026").
  vpc-cni v1.22 is one minor above 1.35's v1.21, as the rules require. Later 1.36 records name newer builds
  (kube-proxy v1.36.0-eksbuild.21/.25, coredns v1.14.3-eksbuild.16/.23, vpc-cni v1.22.4-eksbuild.3); none
  of them is AWS's table, so the row keeps the table's builds.
- Cross-check of 1.34 and 1.35 (newest version EKS lists, from `aws eks describe-addon-versions` by its
  hack/versions script): cookpad/terraform-aws-eks versions.tf at f696246866f8b0326770d0459403f6a252569b6d
  (2026-03-04, 1.35: vpc-cni v1.21.1-eksbuild.3, coredns v1.13.2-eksbuild.1, kube-proxy v1.35.0-eksbuild.2,
  aws-ebs-csi-driver v1.56.0-eksbuild.1) and ad7837dbd7dcf5ecb7737dfe77e0b3313c43e9fc (2025-11-24, 1.34):
  the same add-on minors as the pins.
- 1.37 and later: no row, so a 1.37 stack is refused until one is recorded here (`aws eks
  describe-addon-versions --kubernetes-version 1.37 --addon-name <name> --query
  'addons[].addonVersions[?compatibilities[?defaultVersion]].addonVersion'`, or AWS's tables, with the date
  and the source beside the row). tests/test_aws_addon_versions.py fails when, within the next 180 days of
  the version calendar, a day comes on which no minor in EKS standard support has a row: that is the
  reminder to add the next one before EKS upgrades a STANDARD cluster to a minor preflight refuses.
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
_AWS_KUBE_PROXY = ("AWS EKS User Guide, Manage kube-proxy in Amazon EKS clusters, kube-proxy versions table @ "
                   "https://docs.aws.amazon.com/ja_jp/eks/latest/userguide/managing-kube-proxy.md (stored copy, "
                   "undated, lists 1.36, so from EKS 1.36's release 2026-06-02 or later)")
_AWS_COREDNS = ("AWS EKS User Guide, Manage CoreDNS for DNS in Amazon EKS clusters, CoreDNS versions table @ "
                "https://docs.aws.amazon.com/ja_jp/eks/latest/userguide/managing-coredns.md (stored copy, undated, "
                "lists coredns v1.14.3, which EKS Distro first shipped for 1.36 in v1-36-eks-6, aws/eks-distro "
                "docs/contents/releases/1-36/6/index.md @ 7252ca1e8e665ed8c2f578efb67e0c232f8c866d, 2026-07-27)")
_VPC_CNI_136 = ("VPC CNI v1.22.3 @ aws/eks-charts stable/aws-vpc-cni commit 381f19c (2026-07-06, \"aws-vpc-cni: "
                "v1.22.3 (#1344)\"), and the EKS build v1.22.3-eksbuild.1 as two public 1.36 records name it (a stack "
                "pinned to eks_version 1.36, a 1.36 cluster's deploy log), see the module docstring")
_EBS_CSI_136 = ("aws-ebs-csi-driver v1.63.1 @ https://pkg.go.dev/github.com/kubernetes-sigs/aws-ebs-csi-driver@v1.63.1 "
                "(published 2026-07-27), and the EKS build v1.63.1-eksbuild.1 as the same two 1.36 records name it")


def _sources(**by_addon: str) -> str:
    """One source string naming, per add-on, where its value comes from."""
    return "; ".join(f"{addon.replace('_', '-')}: {source}" for addon, source in by_addon.items())


_OLDER = _sources(vpc_cni=_WANDB, kube_proxy=_AWS_KUBE_PROXY, coredns="as vpc-cni", aws_ebs_csi_driver="as vpc-cni")


@dataclass(frozen=True)
class AddonRow:
    minor: str
    versions: dict[str, str]  # add-on name -> EKS add-on version (vX.Y.Z-eksbuild.N)
    source: str  # where each value comes from, with the source's own date(s)
    as_of: str  # the oldest date `source` names: the data is no newer than this (YYYY-MM-DD)
    retrieved: str  # when the source was read (YYYY-MM-DD)


ROWS: dict[str, AddonRow] = {r.minor: r for r in (
    AddonRow("1.32", {"vpc-cni": "v1.20.5-eksbuild.1", "kube-proxy": "v1.32.13-eksbuild.16",
                      "coredns": "v1.11.4-eksbuild.33", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _OLDER, "2026-05-06", "2026-11-28"),
    AddonRow("1.33", {"vpc-cni": "v1.20.5-eksbuild.1", "kube-proxy": "v1.33.10-eksbuild.13",
                      "coredns": "v1.12.4-eksbuild.10", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _OLDER, "2026-05-06", "2026-11-28"),
    AddonRow("1.34", {"vpc-cni": "v1.20.5-eksbuild.1", "kube-proxy": "v1.34.6-eksbuild.13",
                      "coredns": "v1.12.4-eksbuild.10", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _OLDER, "2026-05-06", "2026-11-28"),
    AddonRow("1.35", {"vpc-cni": "v1.21.1-eksbuild.1", "kube-proxy": "v1.35.3-eksbuild.13",
                      "coredns": "v1.13.2-eksbuild.4", "aws-ebs-csi-driver": "v1.59.0-eksbuild.1"},
             _OLDER, "2026-05-06", "2026-11-28"),
    AddonRow("1.36", {"vpc-cni": "v1.22.3-eksbuild.1", "kube-proxy": "v1.36.0-eksbuild.14",
                      "coredns": "v1.14.3-eksbuild.3", "aws-ebs-csi-driver": "v1.63.1-eksbuild.1"},
             _sources(vpc_cni=_VPC_CNI_136, kube_proxy=_AWS_KUBE_PROXY, coredns=_AWS_COREDNS,
                      aws_ebs_csi_driver=_EBS_CSI_136),
             "2026-06-02", "2026-11-28"),
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


def row_for(addon: str, version: str) -> AddonRow | None:
    """The row that pins `addon` at `version` (the oldest when several do); None for a version not pinned here."""
    for minor in recorded_minors():
        if ROWS[minor].versions.get(addon) == version:
            return ROWS[minor]
    return None


def provenance(addon: str, version: str) -> str:
    """How a planned add-on version is reported: pinned where, and how old its source is."""
    row = row_for(addon, version)
    if row is None:
        return f"not pinned in {FILE}"
    return f"pinned for {row.minor} in {FILE}, source as of {row.as_of} (retrieved {row.retrieved})"

