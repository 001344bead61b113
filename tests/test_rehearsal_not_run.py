"""What the rehearsal does not run is said, with why (issue 34 item 8): Katib's and Kubeflow Pipelines'
controllers. Before, their Deployments' pods were KWOK's (Ready, doing nothing) and only Katib's webhooks
appeared, as removed for "a server the rehearsal does not run": a reader of the report could take Katib's
fail-closed pod webhook over `training` and the Pipelines servers for rehearsed. No component is needed:
the lines come from the rendered releases, before any process starts."""

from __future__ import annotations

import pytest

from gpu_platform.rehearsal import binaries
from gpu_platform.rehearsal.controllers import NOT_RUN, not_run
from gpu_platform.rehearsal.run import prepare_controllers
from tests.fit_support import need_charts, rendered


def _deployments(stack: str, image: str) -> list[str]:
    return [o["metadata"]["name"] for r in rendered(stack) for o in r.objects if o.get("kind") == "Deployment"
            and any(image in str(c.get("image", "")) for c in o["spec"]["template"]["spec"]["containers"])]


@pytest.mark.parametrize("stack", ["linode-dev", "gcp-prod"])
def test_katib_and_pipelines_controllers_are_listed_not_rehearsed_with_the_reason(stack):
    need_charts()
    lines = not_run(list(rendered(stack)))
    katib = next(line for line in lines if line.startswith("Katib's controller"))
    assert "Deployment kubeflow/katib-controller" in katib and "katib-controller:v0.19.0" in katib
    assert "mutator.pod.katib.kubeflow.org, failurePolicy Fail" in katib and "training" in katib
    assert "certGenerator" in katib
    api = next(line for line in lines if line.startswith("Pipelines' API server"))
    assert "Deployment kubeflow/ml-pipeline," in api and "403" in api and "github.com/kubeflow/pipelines" in api
    assert any(line.startswith("Argo's workflow controller") for line in lines)
    assert all(": not run: " in line for line in lines)


def test_every_declared_controller_is_one_the_stacks_render():
    """An image renamed upstream would drop its NOT REHEARSED line in silence: each entry must match."""
    need_charts()
    for image, what, _why in NOT_RUN:
        assert len(_deployments("linode-dev", image)) == 1, (image, what)
    assert len(not_run(list(rendered("linode-dev")))) == len(NOT_RUN)


def test_the_rehearsal_reports_them_before_it_starts_anything(tmp_path, monkeypatch):
    need_charts()
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path))  # no component built: nothing starts
    not_rehearsed: list[str] = []
    prepare_controllers(list(rendered("linode-dev")), not_rehearsed)
    assert any(n.startswith("Katib's controller (platform-kubeflow-katib: Deployment kubeflow/katib-controller")
               for n in not_rehearsed), not_rehearsed
    assert any(n.startswith("Pipelines' persistence agent") for n in not_rehearsed)
