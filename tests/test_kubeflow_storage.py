"""Every claim the platform makes is on the stack's StorageClass (found by review, 2026-11-29): the hub's database and
the MySQLs and SeaweedFS of Katib and Pipelines had no class, so on a cluster without a default StorageClass (an
existing, on-premises one: cloud kubernetes) they stayed Pending, the hub never started and `pulumi up` timed out,
and with another default class they landed on a class the stack did not choose. Preflight's render and the rehearsal's
provisioner both took them (tests/test_rehearsal_polling.py has the provisioner's side)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_platform.components.helm import LOCAL_CHARTS_ENV, claims_on, local_kustomize
from gpu_platform.components.paths import PACKAGE_DIR
from gpu_platform.components.platform.kubeflow import OVERLAYS_WITH_CLAIMS
from gpu_platform.data.platform_versions import KUSTOMIZE_OVERLAYS
from gpu_platform.preflight.fit.render import load_kustomize
from gpu_platform.preflight.runner import stack_names
from tests.conftest import ROOT, stack_config
from tests.fit_support import CHART_DIRS, need_charts, rendered


def the_stacks_class(stack: str) -> str:
    """The class the cluster handle names (ClusterHandle.default_storage_class) for a shipped stack."""
    from gpu_platform.components.aws.eks import STORAGE_CLASS
    from gpu_platform.components.gcp.cluster import DEFAULT_STORAGE_CLASS
    from gpu_platform.components.linode.addons import DEFAULT_STORAGE_CLASS as LINODE

    config = stack_config(stack)
    cloud = config["gpu-platform:cloud"]
    if cloud == "kubernetes":
        return config["gpu-platform:kubernetes"]["storageClass"]
    return {"gcp": DEFAULT_STORAGE_CLASS, "aws": STORAGE_CLASS, "linode": LINODE}[cloud]


@pytest.mark.parametrize("stack", stack_names(ROOT / "stacks"))
def test_every_claim_the_platform_renders_is_on_the_stacks_class(stack):
    need_charts()
    claims = {(r.name, o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"].get("storageClassName")
              for r in rendered(stack) for o in r.objects if o.get("kind") == "PersistentVolumeClaim"}
    # The hub's database and the three Kubeflow databases on every shipped stack (each has notebooks and Kubeflow).
    assert {("jupyterhub", "hub-db-dir"), ("kubeflow", "katib-mysql"), ("kubeflow", "mysql-pv-claim"),
            ("kubeflow", "seaweedfs-pvc")} <= {key[1:] for key in claims}, sorted(claims)
    wrong = {key: cls for key, cls in claims.items() if cls != the_stacks_class(stack)}
    assert wrong == {}, f"claims not on {the_stacks_class(stack)}: {wrong}"


def test_the_overlays_given_a_class_are_exactly_those_whose_install_has_claims():
    """A new upstream claim in another install would be left on the cluster's default: this names it."""
    need_charts()
    with_claims = {key for key, path in KUSTOMIZE_OVERLAYS.items()
                   if any(o.get("kind") == "PersistentVolumeClaim"
                          for o in load_kustomize(str(PACKAGE_DIR / path), key, CHART_DIRS))}
    assert with_claims == set(OVERLAYS_WITH_CLAIMS)


def test_a_class_without_the_local_folder_keeps_the_pinned_remote_targets(tmp_path, monkeypatch):
    """Without $GPU_PLATFORM_LOCAL_CHARTS the overlay still fetches its pinned targets; the copy only adds the class
    patch, under the user cache, at a path named by its content (a second run passes the same `directory`)."""
    monkeypatch.delenv(LOCAL_CHARTS_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    overlay = PACKAGE_DIR / KUSTOMIZE_OVERLAYS["katib-standalone"]
    assert local_kustomize(overlay) is None  # nothing to change: the overlay as shipped
    made = local_kustomize(overlay, "rook-ceph-block")
    assert made == local_kustomize(overlay, "rook-ceph-block") and Path(made).is_relative_to(tmp_path)
    shipped = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    copy = yaml.safe_load((Path(made) / "kustomization.yaml").read_text())
    assert copy["resources"] == shipped["resources"] and copy["resources"][0].startswith("github.com/kubeflow/katib")
    assert copy["patches"] == [*shipped["patches"], claims_on("rook-ceph-block")]
    assert local_kustomize(overlay, "other") != made
