"""Live checks: `pulumi preview` of each shipped stack through the Automation API, against the real
cloud. Opt-in (`pytest -m live` / `make test-live`); skipped with the reason when the Pulumi CLI or
the cloud's credentials are missing."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.conftest import ROOT

CREDENTIALS = {
    "linode": ("LINODE_TOKEN",),
    "gcp": ("GOOGLE_CREDENTIALS", "GOOGLE_APPLICATION_CREDENTIALS"),
    "aws": ("AWS_ACCESS_KEY_ID", "AWS_PROFILE"),
}
STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.live
@pytest.mark.parametrize("stack", STACKS)
def test_pulumi_preview_against_the_real_cloud(stack):
    if shutil.which("pulumi") is None:
        pytest.skip("the Pulumi CLI is not installed")
    cloud = stack.split("-")[0]
    if not any(os.environ.get(v) for v in CREDENTIALS[cloud]):
        pytest.skip(f"no {cloud} credentials ({' or '.join(CREDENTIALS[cloud])} unset)")
    if not (os.environ.get("PULUMI_ACCESS_TOKEN") or os.environ.get("PULUMI_BACKEND_URL")):
        pytest.skip("no Pulumi state backend (PULUMI_ACCESS_TOKEN or PULUMI_BACKEND_URL unset)")
    from pulumi import automation as auto

    ws = auto.create_or_select_stack(stack_name=stack, work_dir=str(ROOT))
    result = ws.preview(on_output=print)
    assert result.change_summary, "preview planned nothing"
