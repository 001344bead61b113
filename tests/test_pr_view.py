"""Preflight as a pull-request reviewer reads it: `--base DIR` shows what changed against the base
branch's run (resources, cost, policies); `-v` adds the policy headroom, the policy config applied, the
Kubernetes version with its end of standard support and who can reach the API; another cloud's policies
are n/a; the standing notes (not modelled, stale prices) come once per stack, not on every run; and the
verdict's cost line says when prices are another region's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_support import preflight_in_process
from tests.conftest import ROOT
from tests.fit_support import need_charts


def preflight(*args: str) -> subprocess.CompletedProcess:
    """What the reviewer reads: the command's text and files (run in-process, tests/cli_support.py)."""
    return preflight_in_process(*args, env={"NO_COLOR": "1"})


@pytest.fixture(scope="module")
def base_and_head(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """gcp-prod as on the base branch, and a pull request that halves the A100 pool."""
    need_charts()
    tmp = tmp_path_factory.mktemp("pr")
    base = preflight("gcp-prod", "--out", str(tmp / "base"))
    assert base.returncode == 0, base.stdout + base.stderr
    head_dir = tmp / "head"
    head_dir.mkdir()
    text = (ROOT / "stacks" / "Pulumi.gcp-prod.yaml").read_text()
    assert "maxNodes: 8" in text
    (head_dir / "Pulumi.gcp-prod.yaml").write_text(text.replace("maxNodes: 8", "maxNodes: 4"))
    head = preflight("--stack-file", str(head_dir / "Pulumi.gcp-prod.yaml"), "--out", str(tmp / "out"),
                     "--base", str(tmp / "base"), "--format", "json")
    return tmp / "base", tmp / "out", head


def test_base_shows_the_resource_cost_and_policy_diff(base_and_head):
    _, out, head = base_and_head
    assert head.returncode == 0, head.stderr
    doc = json.loads(head.stdout)
    diff = doc["baseDiff"]
    assert any(u.endswith("::gpu-prod-gpu-a100") for u in diff["resources"]["changed"]), diff["resources"]
    assert not diff["resources"]["added"] and not diff["resources"]["removed"]
    assert diff["cost"]["fullGpus"] == {"base": 8, "head": 4}
    assert diff["cost"]["fullMonthlyUsd"]["head"] < diff["cost"]["fullMonthlyUsd"]["base"]
    assert diff["policies"] == []  # nothing changed verdict
    assert json.loads((out / "gcp-prod" / "preflight.json").read_text())["baseDiff"] == diff


def test_the_text_report_leads_with_the_changes(base_and_head):
    base, _, _ = base_and_head
    text = preflight("gcp-prod", "--out", str(base.parent / "again"), "--base", str(base)).stdout
    after_verdict = text.split("\n\n", 1)[1]
    assert after_verdict.startswith(f"Changes against the base ({base / 'gcp-prod'})")
    assert "+0 added, -0 removed, ~0 changed" in after_verdict and "policies      no result changed" in after_verdict
    full = json.loads((base / "gcp-prod" / "cost.json").read_text())["fullMonthlyUsd"]
    assert f"cost          full capacity: ${full:,.2f}/month, unchanged" in after_verdict


def test_a_pools_max_nodes_change_prints_the_fields_old_and_new_values(base_and_head):
    """issue 37: `--base` listed the changed node pool but not what changed in it (maxNodes 8 -> 4 was
    invisible, even with -vv). The report the reviewer reads is render_diff of baseDiff."""
    from gpu_platform.preflight.review import render_diff

    _, _, head = base_and_head
    diff = json.loads(head.stdout)["baseDiff"]
    pool = next(c for c in diff["changes"] if c["urn"].endswith("::gpu-prod-gpu-a100"))
    assert {"path": "autoscaling.totalMaxNodeCount", "base": 8, "head": 4} in pool["fields"], pool
    text = render_diff(diff)
    assert "    ~ gcp:container/nodePool:NodePool gpu-prod-gpu-a100\n        autoscaling.totalMaxNodeCount: 8 -> 4" in text
    assert "  capacity      gpu pool a100: 0..8 -> 0..4 nodes (idle..full), 8 -> 4 GPUs at full capacity" in text


def test_the_cost_lines_changes_add_up_to_the_totals_change_to_the_cent(base_and_head):
    _, out, head = base_and_head
    diff = json.loads(head.stdout)["baseDiff"]
    full = diff["cost"]["fullMonthlyUsd"]
    lines = diff["costLines"]
    assert {ln["line"] for ln in lines} >= {"gpu pool a100", "boot disks gpu pool a100"}
    assert sum(round(ln["full"]["head"] * 100) - round(ln["full"]["base"] * 100) for ln in lines) == \
        round(full["head"] * 100) - round(full["base"] * 100)
    gpu = next(ln for ln in lines if ln["line"] == "gpu pool a100")["full"]
    assert round(gpu["head"] * 2, 2) == gpu["base"]  # half the nodes, half the bill line
    text = (out / "gcp-prod" / "preflight.json").read_text()
    assert json.loads(text)["baseDiff"]["costLines"] == lines


def test_the_ordering_puts_iam_firewall_and_network_first():
    """A change to who may reach the API (a cluster's authorized networks) and a new IAM binding come
    before a pool's resize; secrets stay masked, and a changed IAM policy document is compared as JSON."""
    from gpu_platform.preflight.review import diff, render_diff

    def plan(cidr, size, secret, policy, binding):
        res = [{"urn": "urn:pulumi:s::p::gcp:container/cluster:Cluster::c", "type": "gcp:container/cluster:Cluster",
                "name": "c", "inputs": {"masterAuthorizedNetworksConfig": {"cidrBlocks": [{"cidrBlock": cidr}]}}},
               {"urn": "urn:pulumi:s::p::gcp:container/nodePool:NodePool::gpu", "type": "gcp:container/nodePool:NodePool",
                "name": "gpu", "inputs": {"autoscaling": {"totalMaxNodeCount": size}}},
               {"urn": "urn:pulumi:s::p::kubernetes:core/v1:Secret::s", "type": "kubernetes:core/v1:Secret", "name": "s",
                "inputs": {"stringData": secret, "metadata": {"name": "s"}}},
               {"urn": "urn:pulumi:s::p::aws:iam/policy:Policy::pol", "type": "aws:iam/policy:Policy", "name": "pol",
                "inputs": {"policy": json.dumps(policy)}}]
        if binding:
            res.append({"urn": "urn:pulumi:s::p::gcp:projects/iAMMember:IAMMember::b", "type": "gcp:projects/iAMMember:IAMMember",
                        "name": "b", "inputs": {"role": "roles/owner", "member": "user:x@example.com"}})
        return {"resources": res}

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        head = Path(d)
        pol = {"Statement": [{"Action": "s3:GetObject", "Resource": "*"}]}
        (head / "plan.json").write_text(json.dumps(plan("0.0.0.0/0", 12, {"password": "new-pass"},
                                                        {"Statement": [{"Action": "s3:*", "Resource": "*"}]}, True)))
        base = {"dir": "base", "plan": plan("203.0.113.0/24", 8, {"password": "old-pass"}, pol, False),
                "cost": None, "policy": None}
        d = diff(base, head)
    text = render_diff(d)
    order = [text.index(s) for s in ("IAM and access", "Statement[0].Action: \"s3:GetObject\" -> \"s3:*\"",
                                      "stringData.password: [secret] changed", "roles/owner",
                                      "firewall and API access", "cidrBlock: \"203.0.113.0/24\" -> \"0.0.0.0/0\"",
                                      "other resources", "totalMaxNodeCount: 8 -> 12")]
    assert order == sorted(order), text
    assert "old-pass" not in text and "new-pass" not in text
    assert "old-pass" not in json.dumps(d) and "new-pass" not in json.dumps(d)


@pytest.mark.parametrize("stack", ["gcp-prod", "aws-prod", "linode-dev"])
def test_the_policy_message_and_the_bill_are_one_number(stack, tmp_path):
    """issue 37: the verdict's cost line said $17,553 and the monthly-cost-ceiling message $17,271 in one
    run: the pack priced the pools, system nodes and fees but not the boot disks, the charts' volumes, the
    bucket or NAT traffic. Now it prices the same bill (the charts' volumes handed over by preflight), and
    says it to the cent."""
    need_charts()
    config = tmp_path / "policy.yaml"
    config.write_text("monthly-cost-ceiling:\n  maxMonthlyUsd: 1\n")
    run = preflight(stack, "--out", str(tmp_path / "out"), "--policy-config", str(config), "--format", "json")
    assert run.returncode == 3, run.stderr
    full = json.loads((tmp_path / "out" / stack / "cost.json").read_text())["fullMonthlyUsd"]
    policy = json.loads((tmp_path / "out" / stack / "policy.json").read_text())
    message = next(p for p in policy["policies"] if p["name"] == "monthly-cost-ceiling")["violations"][0]["message"]
    assert f"the stack costs ${full:,.2f}/month, over the ceiling of $1 " in message, (full, message)


def test_verbose_shows_headroom_policy_config_version_and_api_exposure(base_and_head):
    base, _, _ = base_and_head
    text = preflight("gcp-prod", "-v", "--out", str(base.parent / "verbose")).stdout
    review = text.split("For the reviewer", 1)[1].split("\n\n", 1)[0]
    assert "8 of 16 GPUs (gpu-count-ceiling.maxGpus, policy config)" in review
    assert "$11.8k of $15.0k a month at full capacity" in review
    assert "stacks/policy.gcp-prod.yaml" in review and '"maxGpus": 16' in review
    assert "1.35, standard support until 2027-" in review
    assert "public endpoint, open to 203.0.113.0/24 only" in review
    assert "aws-imdsv2-encrypted-volumes  mandatory  n/a (AWS resources; this is a GCP stack)" in text
    assert "linode-disk-encryption        mandatory  n/a" in text
    assert "gke-node-hardening            mandatory  pass" in text


def test_standing_notes_come_once_per_stack(tmp_path):
    need_charts()
    first = preflight("aws-prod", "--no-policies", "--out", str(tmp_path)).stdout
    second = preflight("aws-prod", "--no-policies", "--out", str(tmp_path)).stdout
    verbose = preflight("aws-prod", "--no-policies", "--out", str(tmp_path), "-v").stdout
    assert "- internet egress and cross-zone traffic" in first
    assert "- internet egress and cross-zone traffic" not in second and "as on the last run" in second
    assert "- internet egress and cross-zone traffic" in verbose


def _eu_gke(tmp_path, overrides: str = "", pool: str = "a2-highgpu-1g") -> subprocess.CompletedProcess:
    text = (ROOT / "stacks" / "Pulumi.gcp-prod.yaml").read_text().replace("instanceType: a2-highgpu-1g",
                                                                          f"instanceType: {pool}")
    eu = (text.replace("region: us-central1", "region: europe-west4").replace("us-central1-a", "europe-west4-a")
          .replace("us-central1-b", "europe-west4-b").replace("      - us-central1-c\n", ""))
    stack = tmp_path / "Pulumi.gcp-eu.yaml"
    stack.write_text(eu.replace("config:\n", "config:\n" + overrides, 1))
    return preflight("--stack-file", str(stack), "--out", str(tmp_path / "out"), "--no-policies")


def test_an_eu_gke_stack_is_priced_from_its_regions_prices_or_refused_until_an_override_gives_one(tmp_path):
    """issue 37 item 1: an EU GKE stack was priced at us-central1's prices with a warning ("europe-west4 may
    differ") and its budget verdict passed on them. gcp-prod in europe-west4 is priced from europe-west4's recorded
    prices, with its A100 pool of a2-highgpu-1g or of a2-highgpu-2g (which had no European price before the whole
    GCP catalog was recorded per region); priceOverrides, when given, wins over the region's price. (Every GCP type
    is now priced in every region it is offered in: a GKE refusal is tests/test_costs_regional_prices.py's
    europe-north2 case.)"""
    need_charts()
    priced = _eu_gke(tmp_path)
    assert priced.returncode == 0, priced.stdout + priced.stderr
    cost_row = next(line for line in priced.stdout.splitlines() if line.startswith("  cost "))
    assert "instance prices are europe-west4's" in cost_row and "REFUSED" not in cost_row, cost_row
    assert "priced in europe-west4: a2-highgpu-1g, e2-standard-4" in priced.stdout
    # Adopter review (issue 37 brief), item 6: the bill was headed "Cost estimate for gpu-prod" (the names' prefix).
    assert "Cost estimate for gcp-eu, resources named gpu-prod-* (gcp, europe-west4; " in priced.stdout
    lines = json.loads((tmp_path / "out" / "gcp-eu" / "cost.json").read_text())["lines"]
    gpu = next(ln for ln in lines if ln["resource"] == "a2-highgpu-1g")
    assert (gpu["pricedIn"], gpu["unitUsd"]) == ("europe-west4", 1.692835)  # us-central1: 1.92802
    two = _eu_gke(tmp_path, pool="a2-highgpu-2g")
    assert two.returncode == 0, two.stdout + two.stderr
    lines = json.loads((tmp_path / "out" / "gcp-eu" / "cost.json").read_text())["lines"]
    gpu = next(ln for ln in lines if ln["resource"] == "a2-highgpu-2g")
    assert (gpu["pricedIn"], gpu["unitUsd"]) == ("europe-west4", 3.38567)  # us-central1: 3.85604
    covered = _eu_gke(tmp_path, "  gpu-platform:priceOverrides:\n    a2-highgpu-2g: {spot: 4.2}\n", pool="a2-highgpu-2g")
    assert covered.returncode == 0, covered.stdout + covered.stderr
    lines = json.loads((tmp_path / "out" / "gcp-eu" / "cost.json").read_text())["lines"]
    gpu = next(ln for ln in lines if ln["resource"] == "a2-highgpu-2g")
    assert (gpu["pricedIn"], gpu["unitUsd"]) == ("priceOverrides", 4.2)


def test_an_eks_stack_in_eu_west_1_is_refused_naming_the_type_and_region(tmp_path):
    need_charts()
    text = (ROOT / "stacks" / "Pulumi.aws-prod.yaml").read_text().replace("us-east-1", "eu-west-1")
    stack = tmp_path / "Pulumi.aws-eu.yaml"
    stack.write_text(text)
    run = preflight("--stack-file", str(stack), "--out", str(tmp_path / "out"), "--no-policies")
    assert run.returncode == 3, run.stdout + run.stderr
    cost_row = next(line for line in run.stdout.splitlines() if line.startswith("  cost "))
    assert "REFUSED: no spot price for" in cost_row and "in eu-west-1" in cost_row, cost_row

def test_stale_prices_are_on_the_verdicts_cost_line_and_the_verdict_stays_pass(tmp_path):
    """Adopter review F6: europe-west4's A100 price was from 2025-03-06, hundreds of days old, and only a warning
    deep in the bill said so under a plain PASS. The verdict's cost line names it (docs/cost-model.md, "Catalog
    age": PASS at any age, the age shown where the figures are), and so does the pull-request table. The recorded
    pricing.yml is now from 2026-07-30, still over the 90-day mark, and e2-standard-4's europe-west4 price (the
    SkyPilot v9 snapshot's) is dated by its window's lower bound, 2026-06-03."""
    from gpu_platform.preflight.verdict import DOCUMENT, markdown

    need_charts()
    run = _eu_gke(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[0].endswith("PASS (exit 0)"), run.stdout
    cost_row = next(line for line in run.stdout.splitlines() if line.startswith("  cost "))
    assert ("STALE PRICES: a2-highgpu-1g, cloud-nat-data, cloud-nat-per-vm, e2-standard-4, gcs-standard up to "
            in cost_row)  # Cloud NAT and GCS Standard: dated by the 2026-07-30 Cloud Billing Catalog generation
    assert "(dated 2026-06-03; more than 90)" in cost_row, cost_row
    doc = json.loads(next((tmp_path / "out").rglob(DOCUMENT)).read_text())
    assert doc["verdict"] == "pass" and "days old)" in markdown([doc])


def test_an_admin_cidr_added_shows_the_new_element_whole(base_and_head):
    """Adopter review (issue 37 brief), item 4: adding an admin CIDR printed both lists side by side, cut off
    at 80 characters (`... {"cidrBlock": "10...`) just before the element that changed."""
    from gpu_platform.preflight.review import render_diff

    base, _, _ = base_and_head
    head_dir = base.parent / "cidr"
    head_dir.mkdir()
    text = (ROOT / "stacks" / "Pulumi.gcp-prod.yaml").read_text()
    assert "    - 203.0.113.0/24\n" in text
    (head_dir / "Pulumi.gcp-prod.yaml").write_text(text.replace("    - 203.0.113.0/24\n",
                                                                "    - 203.0.113.0/24\n    - 10.20.30.0/24\n", 1))
    run = preflight("--stack-file", str(head_dir / "Pulumi.gcp-prod.yaml"), "--out", str(head_dir / "out"),
                    "--base", str(base), "--format", "json")
    diff = json.loads(run.stdout)["baseDiff"]
    report = render_diff(diff)
    lines = [ln.strip() for ln in report.splitlines() if "10.20.30.0/24" in ln]
    assert lines, report
    for line in lines:  # each a whole element added, never a list cut short
        assert ": added " in line and not line.endswith("...") and line.count("{") == line.count("}"), line
    assert any('"cidrBlock": "10.20.30.0/24"' in ln for ln in lines), lines
    assert "203.0.113.0/24" not in "\n".join(ln for ln in report.splitlines() if "cidr" in ln.lower()), report


def test_list_elements_added_and_removed_are_each_shown_and_secrets_stay_masked():
    from gpu_platform.preflight.review import field_changes, render_diff

    old = {"rules": [{"cidr": "10.0.0.0/8", "description": "office " * 20}], "users": [{"name": "a", "token": "s1"}]}
    new = {"rules": [{"cidr": "10.0.0.0/8", "description": "office " * 20}, {"cidr": "192.0.2.0/24", "description": "vpn " * 30}],
           "users": [{"name": "b", "token": "s2"}, {"name": "c", "token": "s3"}]}
    fields = field_changes(old, new)
    assert {"path": "rules[1]", "head": new["rules"][1], "element": "added"} in fields
    assert {"path": "users[0]", "base": {"name": "a", "token": "[secret]"}, "element": "removed"} in fields
    text = render_diff({"base": "b", "resources": {"added": [], "removed": [], "changed": ["u"]},
                        "changes": [{"urn": "urn:pulumi:s::p::gcp:compute/firewall:Firewall::fw", "type": "gcp:compute/firewall:Firewall",
                                     "name": "fw", "change": "changed", "category": "firewall", "fields": fields}]})
    assert '        rules[1]: added {"cidr": "192.0.2.0/24", "description": "' + "vpn " * 30 + '"}' in text
    assert '        users[0]: removed {"name": "a", "token": "[secret]"}' in text
    assert "s1" not in text and "s2" not in text and "s3" not in text


def test_a_stack_over_its_ceilings_says_by_how_much_not_headroom_of_less():
    """Adopter review (issue 37 brief), item 6: over its $15k ceiling the reviewer section read "headroom $17.6k of
    $15.0k", as if there were room left."""
    from gpu_platform.preflight.costs import bill_label
    from gpu_platform.preflight.review import headroom

    config = {"monthly-cost-ceiling": {"maxMonthlyUsd": 15000}, "gpu-count-ceiling": {"maxGpus": 16}}
    over = {h["policy"]: h["text"] for h in headroom(config, {"fullGpus": 20, "fullMonthlyUsd": 17600.0})}
    assert over == {"gpu-count-ceiling": "20 GPUs, over the ceiling of 16 by 4",
                    "monthly-cost-ceiling": "$17.6k a month at full capacity, over the ceiling of $15.0k by $2.6k"}
    under = {h["policy"]: h["text"] for h in headroom(config, {"fullGpus": 8, "fullMonthlyUsd": 11844.54})}
    assert under == {"gpu-count-ceiling": "8 of 16 GPUs", "monthly-cost-ceiling": "$11.8k of $15.0k a month at full capacity"}
    assert bill_label("gpu-prod", "gpu-prod") == "gpu-prod" and bill_label("eu-gke", "gpu-prod") == "eu-gke, resources named gpu-prod-*"


def test_two_long_image_refs_differing_only_at_the_end_print_differently():
    """Adopter re-review of f294e99: `--base` cut every value at 80 characters from the front, so an image tag
    change (two long references differing only in their last characters) printed the same on both sides, even
    with -vv. The old and new value are cut around where they first differ; secrets stay masked."""
    from gpu_platform.preflight.review import MAX_VALUE, field_changes, render_diff

    repo = "us-central1-docker.pkg.dev/acme-ml-platform-prod/gpu-platform/training-controller"
    old = {"image": f"{repo}:2026.11.28-build-0041", "password": "hunter2-old",
           "env": [{"name": "MODEL_BUCKET", "value": "gs://" + "a" * 90 + "/checkpoints"}]}
    new = {"image": f"{repo}:2026.11.28-build-0042", "password": "hunter2-new",
           "env": [{"name": "MODEL_BUCKET", "value": "gs://" + "a" * 90 + "/checkpoints"}]}
    fields = field_changes(old, new)
    diff = {"base": "base/gcp-prod", "resources": {"added": [], "removed": [], "changed": ["urn"]},
            "changes": [{"urn": "urn:pulumi:gcp-prod::gpu-platform::kubernetes:apps/v1:Deployment::controller",
                         "change": "changed", "category": "other", "fields": fields}]}
    text = render_diff(diff)
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith("image:"))
    was, now = line.removeprefix("image: ").split(" -> ")
    assert was != now and was.endswith('build-0041"') and now.endswith('build-0042"'), line
    assert max(len(was), len(now)) <= MAX_VALUE and was.startswith("...")
    assert "password: [secret] changed" in text and "hunter2" not in text
    # a short value is still printed whole
    assert "replicas: 2 -> 3" in render_diff({**diff, "changes": [{**diff["changes"][0],
                                                                  "fields": field_changes({"replicas": 2}, {"replicas": 3})}]})


@pytest.mark.parametrize("cidrs,says", [
    (["0.0.0.0/0"], "public endpoint, open to the whole internet (0.0.0.0/0)"),
    (["203.0.113.0/24", "0.0.0.0/0"], "public endpoint, open to the whole internet (0.0.0.0/0) and 203.0.113.0/24"),
    (["203.0.113.0/24"], "public endpoint, open to 203.0.113.0/24 only"),
])
def test_the_reviewer_reads_a_slash_zero_as_the_whole_internet(cidrs, says):
    """Adopter review (issue 37, round 3), C: adminCidrs [0.0.0.0/0] read "open to 0.0.0.0/0 only" in the reviewer
    block, which sounds narrow. EKS takes a /0 for its public endpoint (the config allows it there)."""
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.review import api_exposure, render_review
    from tests.conftest import stack_config

    raw = {k.split(":", 1)[1]: v for k, v in stack_config("aws-prod").items() if k.startswith("gpu-platform:")}
    raw["adminCidrs"] = cidrs
    raw["aws"]["endpointPrivateOnly"] = False
    exposure = api_exposure(parse_config(raw, "aws-prod"))
    assert exposure["text"] == says
    block = render_review({"headroom": [], "policyConfig": {"file": None}, "kubernetes": {"text": "1.35"},
                           "apiExposure": exposure})
    assert f"  API access    {says}" in block.splitlines()
    if "0.0.0.0/0" in cidrs:
        assert " only" not in exposure["text"]
