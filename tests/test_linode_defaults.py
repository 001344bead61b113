"""A Linode stack that relies on the documented defaults passes preflight (issue 37 round 3 item 2): the system
pool's default was one g6-standard-4 (docs/configuration.md), on which the platform's pods leave the system
flavor 0.285 CPU and no memory, so admission and Kueue refused the CPU notebook profile and cluster fit failed
(exit 3) for every stack that kept it; the shipped linode-dev ran two."""

from __future__ import annotations

import json
import re
import yaml

from gpu_platform.config.base import SYSTEM_POOL_DEFAULTS
from gpu_platform.preflight.fit.checks import MIN_CPU_NOTEBOOKS
from tests.conftest import ROOT
from tests.fit_support import need_charts

# What a user writes for a first Linode stack: the required keys, one fixed GPU node, nothing about the system pool.
MINIMAL = """\
config:
  gpu-platform:cloud: linode
  gpu-platform:environment: dev
  gpu-platform:owner: ml-team
  gpu-platform:costCenter: research
  gpu-platform:monthlyBudgetUsd: 1000
  gpu-platform:alertEmails: [ml-alerts@ml-team.org]
  gpu-platform:gpuPools:
    - name: ada
      instanceType: g2-gpu-rtx4000a1-m
      capacity: on-demand
      approvedOnDemand:
        reason: Linode has no spot market for GPU plans
        approver: lead@ml-team.org
      minNodes: 1
      maxNodes: 1
  gpu-platform:linode:
    region: us-ord
    apiTokenExpires: "2027-11-20"
"""


def _documented_default() -> dict:
    text = (ROOT / "docs" / "configuration.md").read_text()
    m = re.search(r"`linode` section:[\s\S]*?`systemPool: \{instanceType: ([\w-]+), minNodes: (\d+), maxNodes: (\d+)\}`"
                  r"[^$]*\$([\d,.]+)/month", text)
    assert m, "docs/configuration.md: the linode section's systemPool default is not where it was (update this test)"
    return {"instanceType": m[1], "minNodes": int(m[2]), "maxNodes": int(m[3]), "usd": m[4]}


def test_the_documented_default_is_the_configs():
    doc = _documented_default()
    assert {k: doc[k] for k in ("instanceType", "minNodes", "maxNodes")} == SYSTEM_POOL_DEFAULTS["linode"]


def test_a_minimal_linode_stack_on_the_defaults_passes_preflight(tmp_path):
    from gpu_platform.preflight.__main__ import main

    need_charts()
    stack = tmp_path / "Pulumi.first-linode.yaml"
    stack.write_text(MINIMAL)
    assert "systemPool" not in yaml.safe_load(MINIMAL)["config"]["gpu-platform:linode"]
    out = tmp_path / "out"
    code = main(["--stack-file", str(stack), "--no-policies", "--out", str(out)])
    fit = json.loads((out / "first-linode" / "fit.json").read_text())["report"]
    assert fit["ok"], fit["problems"]
    assert code == 0
    # Room for CPU notebooks where they may run (checks.notebook_room), the finding the old default failed.
    [room] = [int(m[1]) for n in fit["notes"] if (m := re.match(r"notebooks: (\d+) profile cpu server", n))]
    assert room >= MIN_CPU_NOTEBOOKS, room
    # The docs' price of the default pool is preflight's own.
    bill = json.loads((out / "first-linode" / "cost.json").read_text())
    [system] = [line for line in bill["lines"] if line["kind"] == "system"]
    assert system["idleQuantity"] == SYSTEM_POOL_DEFAULTS["linode"]["minNodes"]
    assert _documented_default()["usd"] == f"{system['idleMonthlyUsd']:,.2f}", system
    # ... and so are the CHANGELOG's upgrade note's: this stack's idle floor, and what it was with one system node.
    quote = re.search(r"a minimal stack with one\s+fixed RTX 4000 Ada node idles at \$([\d,.]+), was \$([\d,.]+)\)",
                      (ROOT / "CHANGELOG.md").read_text())
    assert quote, "CHANGELOG.md: the Linode system-pool upgrade note's figures are not where they were"
    one_node = system["idleMonthlyUsd"] / system["idleQuantity"]
    assert quote.groups() == (f"{bill['idleMonthlyUsd']:,.2f}", f"{bill['idleMonthlyUsd'] - one_node:,.2f}")
    assert f"+${one_node:,.2f}/month" in (ROOT / "CHANGELOG.md").read_text()
