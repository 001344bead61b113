"""Writes tests/data/hostile/cases.yaml: the hostile corpus of issue 23, run by tests/test_hostile_corpus.py.

`python tests/data/hostile/generate.py` rewrites the file; tests/test_hostile_corpus.py checks it is what this
script writes. Each case:
  id, group (the issue's class), exit (0 accepted, 2 config error, 3 policy violation, 4 usage error),
  kind: config  - a shipped stack (`base`) changed by `set` ([path, value] pairs under config:) and validated in-process
        policy  - the same, then the policy config `policy_config` applied by the real pack (exit 3: `policy` reports
                  a mandatory violation containing `message`; exit 0: no mandatory violation)
        cli     - the command line `argv` run in-process (`{stack}` is a stack file written from `base`, `{tmp}`
                  the test's folder; `files` are made first: {name: text | "<dir>" | "<dangling>"})
  message: a fragment the output must contain (the key for config errors).
"""

from __future__ import annotations

from pathlib import Path

import yaml

NS = "gpu-platform"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4"
CASES: list[dict] = []


def add(group: str, id_: str, exit_: int, message: str = "", **fields) -> None:
    CASES.append({"id": f"{group}-{id_}", "group": group, "exit": exit_, **({"message": message} if message else {}),
                  **fields})


def config(group: str, id_: str, base: str, sets: list, message: str, exit_: int = 2) -> None:
    add(group, id_, exit_, message, kind="config", base=base, set=[[p, v] for p, v in sets])


# --- 1. keys the model would read under another spelling ---------------------------------------------
for id_, key, value, wanted in [
    ("monthly-budget-snake", "monthly_budget_usd", 1500, "did you mean monthlyBudgetUsd"),
    ("price-overrides-snake", "price_overrides", {"g2-gpu-rtx4000a1-m": {"onDemand": 0.1}}, "did you mean priceOverrides"),
    ("alert-emails-snake", "alert_emails", ["ops@example.com"], "did you mean alertEmails"),
    ("admin-cidrs-snake", "admin_cidrs", ["203.0.113.0/24"], "did you mean adminCidrs"),
    ("cost-center-snake", "cost_center", "research", "did you mean costCenter"),
    ("kubernetes-version-snake", "kubernetes_version", "1.34", "did you mean kubernetesVersion"),
    ("gpu-pools-snake", "gpu_pools", [], "did you mean gpuPools"),
    ("checkpoint-bucket-snake", "checkpoint_bucket", {}, "did you mean checkpointBucket"),
    ("budget-upper", "MonthlyBudgetUSD", 1500, "did you mean monthlyBudgetUsd"),
    ("budget-kebab", "monthly-budget-usd", 1500, "did you mean monthlyBudgetUsd"),
    ("alert-email-singular", "alertEmail", ["ops@example.com"], "did you mean alertEmails"),
    ("price-override-singular", "priceOverride", {}, "did you mean priceOverrides"),
    ("admin-cidr-singular", "adminCidr", [], "did you mean adminCidrs"),
    ("gpu-pool-singular", "gpuPool", [], "did you mean gpuPools"),
    ("budget-lowercase", "monthlybudgetusd", 1500, "did you mean monthlyBudgetUsd"),
]:
    config("spelling", id_, "linode-dev", [([f"{NS}:{key}"], value)], f"{NS}:{key}")
    CASES[-1]["message"] = wanted
for id_, path, wanted in [
    ("pool-max-nodes-snake", [0, "max_nodes"], "did you mean maxNodes"),
    ("pool-min-nodes-snake", [0, "min_nodes"], "did you mean minNodes"),
    ("pool-instance-type-snake", [0, "instance_type"], "did you mean instanceType"),
    ("pool-approved-snake", [0, "approved_on_demand"], "did you mean approvedOnDemand"),
    ("pool-max-nodes-upper", [0, "MaxNodes"], "did you mean maxNodes"),
    ("pool-instancetype-lower", [0, "instancetype"], "did you mean instanceType"),
]:
    config("spelling", id_, "linode-dev", [([f"{NS}:gpuPools", *path], 1)], wanted)
for id_, section, key, wanted in [
    ("linode-pod-cidr-snake", "linode", "pod_cidr", "did you mean podCidr"),
    ("linode-ssh-keys-snake", "linode", "ssh_authorized_keys", "did you mean sshAuthorizedKeys"),
    ("linode-subnet-snake", "linode", "subnet_cidr", "did you mean subnetCidr"),
    ("platform-alert-smtp-snake", "platform", "alert_smtp", "did you mean alertSmtp"),
]:
    config("spelling", id_, "linode-dev", [([f"{NS}:{section}", key], "10.0.0.0/24")], wanted)
for id_, key, wanted in [("aws-vpc-cidr-snake", "vpc_cidr", "did you mean vpcCidr"),
                         ("aws-region-upper", "Region", "did you mean region")]:
    config("spelling", id_, "aws-prod", [([f"{NS}:aws", key], "10.1.0.0/16")], wanted)
config("spelling", "price-override-on-demand-snake", "aws-prod",
       [([f"{NS}:priceOverrides"], {"g5.xlarge": {"on_demand": 1.0}})], "did you mean onDemand")

# --- 2. numbers that are not plain numbers, dates that do not exist ----------------------------------
for i, text in enumerate(["5_000", " 5000", "5000 ", "1e3", "1_0", "0x10", "+5000", "5,000", "5000.0.0", "٥٠٠٠"]):
    config("numbers", f"budget-{i}", "linode-dev", [([f"{NS}:monthlyBudgetUsd"], text)], f"{NS}:monthlyBudgetUsd")
for i, text in enumerate(["1_0", "2 ", "1e1", "0b1"]):
    config("numbers", f"max-nodes-{i}", "aws-prod", [([f"{NS}:gpuPools", 0, "maxNodes"], text)],
           f"{NS}:gpuPools[0].maxNodes")
for i, text in enumerate(["0_1", "1 ", "1e0"]):
    config("numbers", f"min-nodes-{i}", "gcp-prod", [([f"{NS}:gpuPools", 0, "minNodes"], text)],
           f"{NS}:gpuPools[0].minNodes")
for i, when in enumerate(["2026-02-30T00:00:00Z", "2026-13-01T25:61:61Z", "2026-12-32T00:00:00Z", "2026-00-10T00:00:00Z",
                          "2026-12-01T24:00:00Z", "2026-12-01T23:60:00Z", "2027-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
                          "2026-12-01T00:00:61Z", "0000-00-00T00:00:00Z"]):
    config("dates", f"exclusion-start-{i}", "gcp-prod",
           [([f"{NS}:gcp", "maintenance"], {"exclusions": [{"name": "freeze", "start": when}]})],
           f"{NS}:gcp.maintenance.exclusions[0].start")
for i, when in enumerate(["2026-02-30T00:00:00Z", "2026-11-31T00:00:00Z", "2026-12-05T99:00:00Z"]):
    config("dates", f"exclusion-end-{i}", "gcp-prod",
           [([f"{NS}:gcp", "maintenance"], {"exclusions": [{"name": "freeze", "start": "2026-12-01T00:00:00Z",
                                                             "end": when}]})],
           f"{NS}:gcp.maintenance.exclusions[0].end")

# --- 3. what the cloud or the kubelet would refuse ---------------------------------------------------
for id_, label in [("name-64", "a" * 64), ("prefixed-name-64", "example.com/" + "a" * 64),
                   ("prefix-254", ("a" * 60 + ".") * 4 + "abcdefghij/x"), ("node-role", "node-role.kubernetes.io/gpu"),
                   ("kubernetes-io-role", "kubernetes.io/role"), ("k8s-io", "k8s.io/team"),
                   ("sub-k8s-io", "team.k8s.io/x"), ("node-restriction", "node-restriction.kubernetes.io/x"),
                   ("kubernetes-io-other", "kubernetes.io/team"), ("sub-kubernetes-io", "gpu.kubernetes.io/model"),
                   ("empty", ""), ("slash-only", "/"), ("two-slashes", "a/b/c"), ("space", "gpu type"),
                   ("leading-dash", "-gpu"), ("trailing-dot", "gpu."), ("unicode", "gpü"), ("uppercase-prefix", "Example.com/x"),
                   ("control", "gpu\x1b[2J"), ("empty-prefix", "/gpu"),
                   # namespaces the kubelet, the cloud or the platform set: a value there forges theirs
                   ("forged-hostname", "kubernetes.io/hostname"), ("forged-instance-type", "node.kubernetes.io/instance-type"),
                   ("kubelet-node-namespace", "node.kubernetes.io/gpu"), ("kubelet-sub-namespace", "x.kubelet.kubernetes.io/y"),
                   ("forged-zone", "topology.kubernetes.io/zone"), ("gke-nodepool", "cloud.google.com/gke-nodepool"),
                   ("eks-nodegroup", "eks.amazonaws.com/nodegroup"), ("gfd-product", "nvidia.com/gpu.product"),
                   ("platform-pool", "gpu-platform.io/pool")]:
    config("labels", id_, "linode-dev", [([f"{NS}:gpuPools", 0, "labels"], {label: "yes"})], f"{NS}:gpuPools[0].labels")
for id_, value in [("value-64", "v" * 64), ("value-space", "a b"), ("value-slash", "a/b"), ("value-leading-dash", "-a"),
                   ("value-unicode", "é")]:
    config("labels", id_, "gcp-prod", [([f"{NS}:gpuPools", 0, "labels"], {"team": value})], f"{NS}:gpuPools[0].labels")
config("spelling", "checkpoint-on-destroy-snake", "linode-dev", [([f"{NS}:checkpointBucket"], {"on_destroy": "retain"})],
       "did you mean onDestroy")
config("spelling", "costs-utilization-snake", "linode-dev", [([f"{NS}:costs"], {"expected_utilization": 0.3})],
       "did you mean expectedUtilization")
for n in (85, 90, 100, 120, 200):
    # a valid label key of n characters: a DNS-subdomain prefix (labels of 30) and a 20-character name
    prefix = ".".join(["p" * 30] * 9)[: n - 21 - 4].strip(".") + ".com"
    config("tags", f"aws-label-tag-key-{n}", "aws-prod", [([f"{NS}:gpuPools", 0, "labels"], {prefix + "/" + "n" * 20: "x"})],
           "label keys of at most")
config("tags", "aws-label-value-64", "aws-prod", [([f"{NS}:gpuPools", 0, "labels"], {"team": "v" * 64})],
       f"{NS}:gpuPools[0].labels")
config("tags", "linode-cost-center-long", "linode-dev", [([f"{NS}:costCenter"], "r" * 50)], "Linode tag")
config("tags", "gcp-owner-uppercase", "gcp-prod", [([f"{NS}:owner"], "ML-Platform")], f"{NS}:owner")
config("tags", "owner-64", "aws-prod", [([f"{NS}:owner"], "o" * 64)], f"{NS}:owner")
for id_, base, section, key, cidr in [
    ("linode-pod-public", "linode-dev", "linode", "podCidr", "8.8.0.0/16"),
    ("linode-pod-world", "linode-dev", "linode", "podCidr", "0.0.0.0/0"),
    ("linode-pod-ipv6", "linode-dev", "linode", "podCidr", "fd00::/64"),
    ("linode-pod-doc", "linode-dev", "linode", "podCidr", "198.51.100.0/24"),
    ("linode-pod-benchmark", "linode-dev", "linode", "podCidr", "198.18.0.0/15"),
    ("linode-service-public", "linode-dev", "linode", "serviceCidr", "1.0.0.0/12"),
    ("linode-service-ipv6", "linode-dev", "linode", "serviceCidr", "2001:db8::/108"),
    ("linode-pod-overlaps-subnet", "linode-dev", "linode", "podCidr", "10.0.0.0/16"),
    ("linode-service-overlaps-pod", "linode-dev", "linode", "serviceCidr", "10.244.0.0/16"),
    ("linode-subnet-public", "linode-dev", "linode", "subnetCidr", "8.8.8.0/24"),
    ("gcp-pods-public", "gcp-prod", "gcp", "podsCidr", "8.8.0.0/14"),
    ("gcp-services-public", "gcp-prod", "gcp", "servicesCidr", "9.9.0.0/20"),
    ("aws-vpc-public", "aws-prod", "aws", "vpcCidr", "8.8.0.0/16"),
]:
    config("cidrs", id_, base, [([f"{NS}:{section}", key], cidr)], f"{NS}:{section}.{key}")
for i, cidr in enumerate(["2001:db8::/32", "::/0", "fd00::/8"]):
    config("cidrs", f"aws-admin-ipv6-{i}", "aws-prod", [([f"{NS}:adminCidrs"], [cidr])], f"{NS}:adminCidrs[0]")
for i, cidr in enumerate(["203.0.113.7/24", "300.0.0.0/8", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/8\n", "ten/8"]):
    config("cidrs", f"admin-malformed-{i}", "linode-dev", [([f"{NS}:adminCidrs"], [cidr])], f"{NS}:adminCidrs[0]")
for id_, base, key, value in [
    ("aws-region-made-up", "aws-prod", "region", "xx-fake-1"),
    ("aws-region-zone", "aws-prod", "region", "us-east-1a"),
    ("gcp-region-made-up", "gcp-prod", "region", "xx-fake1"),
    ("gcp-region-zone", "gcp-prod", "region", "us-central1-a"),
    ("linode-region-made-up", "linode-dev", "region", "xx-fake"),
    ("linode-region-empty", "linode-dev", "region", ""),
]:
    section = base.split("-")[0]
    config("regions", id_, base, [([f"{NS}:{section}", key], value)], f"{NS}:{section}.region")
config("regions", "aws-zone-other-region", "aws-prod", [([f"{NS}:aws", "availabilityZones"], ["eu-west-1a", "eu-west-1b"])],
       f"{NS}:aws.availabilityZones")
config("regions", "gcp-zone-other-region", "gcp-prod", [([f"{NS}:gcp", "zones"], ["europe-west4-a"])], f"{NS}:gcp.zones")
for i, email in enumerate(["a@b", "@example.com", "a@@example.com", "a b@example.com", "a@-example.com",
                           "a@example-.com", "a..b@example.com", ".a@example.com", "a.@example.com", "a@example.c",
                           "a@example.123", "a@exa_mple.com", "l" * 65 + "@example.com", "a@" + "d" * 64 + ".com",
                           "a@example.com\n", "a@example..com", "a(b)@example.com", "a@[127.0.0.1]", "a\\b@example.com",
                           "ops@example.com,dev@example.com"]):
    config("emails", f"alert-email-{i}", "linode-dev", [([f"{NS}:alertEmails"], [email])], f"{NS}:alertEmails[0]")
for i, host in enumerate(["-:587", "...:587", "a..b:587", "-a.example.com:587", "a-.example.com:587", ":587",
                          "smtp.example.com:0", "smtp.example.com:65536", "smtp.example.com", "sm tp.example.com:25",
                          "smtp_relay.example.com:25", "x" * 64 + ".example.com:25", "smtp.example.com:-1",
                          "smtp.example.com:587:25", "1.2.3:25"]):
    config("smtp", f"smarthost-{i}", "linode-dev", [([f"{NS}:platform", "alertSmtp", "smarthost"], host)],
           f"{NS}:platform.alertSmtp.smarthost")
for i, sender in enumerate(["alerts@localhost", "@example.com", "alerts example.com", "alerts@exa mple.com",
                            "alerts@example.com\r\nBcc: x@evil.example"]):
    config("smtp", f"from-{i}", "linode-dev", [([f"{NS}:platform", "alertSmtp", "from"], sender)],
           f"{NS}:platform.alertSmtp.from")
config("smtp", "from-malformed", "linode-dev", [([f"{NS}:platform", "alertSmtp", "from"], "alerts@")],
       f"{NS}:platform.alertSmtp.from")
for i, key in enumerate(["hunter2", "ssh-ed25519", "ssh-ed25519 AAAA", "ssh-ed25519 not-base64!", KEY + " \x1b[2Jx",
                         KEY + "\n" + KEY, "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "ssh-rsa " + KEY.split()[1],
                         KEY[:-8], "ecdsa-sha2-nistp256 " + KEY.split()[1], KEY.replace("ssh-ed25519 ", "ssh-ed25519  \t"),
                         "-----BEGIN OPENSSH PRIVATE KEY-----"]):
    config("ssh", f"key-{i}", "linode-dev", [([f"{NS}:adminCidrs"], ["203.0.113.0/24"]),
                                            ([f"{NS}:linode", "sshAuthorizedKeys"], [key])],
           f"{NS}:linode.sshAuthorizedKeys")
for i, image in enumerate(["linode/..", "linode/.", "linode/", "private/abc", "../etc/passwd", "linode/-x",
                           "LINODE/ubuntu24.04", "private/..", "linode/ubuntu 24.04", "linode/ubuntu24.04/../x",
                           "ubuntu24.04", "linode/_x"]):
    config("images", f"linode-image-{i}", "linode-dev", [([f"{NS}:linode", "image"], image)], f"{NS}:linode.image")
for i, (reason, approver) in enumerate([
        ("          ", "jane@example.com"), ("tbd", "jane@example.com"), ("n/a", "jane@example.com"),
        ("xxxxxxxxxxxxx", "jane@example.com"), ("test test test", "jane@example.com"), ("!!!!!!!!!!!!", "jane@example.com"),
        ("TODO: write the reason", "jane@example.com"), ("placeholder reason", "jane@example.com"),
        ("Linode has no spot market; one fixed dev GPU node", "xx"), ("Linode has no spot market; one node", "jane"),
        ("Linode has no spot market; one node", "jane@"), ("Linode has no spot market; one node", "@"),
        ("Linode has no spot market; one node", "@-x-"), ("Linode has no spot market; one node", "jane@localhost"),
        ("Linode has no spot market; one node", "jane doe"), ("reason\x07with bell", "jane@example.com")]):
    config("approvals", f"on-demand-{i}", "linode-dev",
           [([f"{NS}:gpuPools", 0, "approvedOnDemand"], {"reason": reason, "approver": approver})],
           f"{NS}:gpuPools[0].approvedOnDemand")
for i, until in enumerate(["2026-02-30", "2020-01-01", "2030-01-01", "soon"]):
    config("approvals", f"on-demand-until-{i}", "linode-dev",
           [([f"{NS}:gpuPools", 0, "approvedOnDemand"], {"reason": "Linode has no spot market; one node",
                                                          "approver": "jane@example.com", "until": until})],
           "until: \"")

# --- 4. secrets where no secret belongs, control characters in what is echoed ------------------------
for key in ("owner", "costCenter", "environment", "monthlyBudgetUsd", "alertEmails", "cloud"):
    config("secrets", f"{key}-secure-beside-other-keys", "linode-dev",
           [([f"{NS}:{key}"], {"secure": "AAABAHIDDENCIPHERTEXT", "note": "x"})], f"{NS}:{key}: (a secret value)")
config("secrets", "pool-name-secure", "linode-dev", [([f"{NS}:gpuPools", 0, "name"], {"secure": "AAABAHIDDENCIPHERTEXT"})],
       "(a secret value)")
config("secrets", "nested-secure-list", "linode-dev", [([f"{NS}:adminCidrs"], [{"secure": "AAABAHIDDENCIPHERTEXT"}])],
       "(a secret value)")
for i, key in enumerate(["x\x1b[2K\rgpu-platform:cloud: OK", "x\x07", "x\u202eevil", "x\x9b31m"]):
    config("control", f"key-{i}", "linode-dev", [([f"{NS}:{key}"], 1)], "unknown key")

# --- policy configs that weaken a guardrail (exit 3) and exceptions that do not hold --------------------
WEAKEN = {
    "interruptible-disabled": {"gpu-interruptible-capacity": "disabled"},
    "interruptible-advisory": {"gpu-interruptible-capacity": "advisory"},
    "interruptible-enforcement-advisory": {"gpu-interruptible-capacity": {"enforcementLevel": "advisory"}},
    "scale-to-zero-disabled": {"gpu-pools-scale-to-zero": "disabled"},
    "scale-to-zero-advisory": {"gpu-pools-scale-to-zero": "advisory"},
    "gpu-ceiling-disabled": {"gpu-count-ceiling": "disabled"},
    "gpu-ceiling-100000": {"gpu-count-ceiling": {"maxGpus": 100000}},
    "gpu-ceiling-65": {"gpu-count-ceiling": {"maxGpus": 65}},
    "cost-ceiling-disabled": {"monthly-cost-ceiling": "disabled"},
    "cost-ceiling-1e12": {"monthly-cost-ceiling": {"maxMonthlyUsd": 1e12}},
    "cost-ceiling-50001": {"monthly-cost-ceiling": {"maxMonthlyUsd": 50001}},
    "override-ratio-0": {"monthly-cost-ceiling": {"minOverrideRatio": 0}},
    "override-ratio-0.1": {"monthly-cost-ceiling": {"minOverrideRatio": 0.1}},
    "budget-overrun-1000": {"monthly-cost-ceiling": {"maxBudgetOverrun": 1000}},
    "alerts-advisory": {"budget-alerts-required": "advisory"},
    "alerts-disabled": {"budget-alerts-required": "disabled"},
    "all-disabled": {"all": "disabled"},
    "all-advisory": {"all": "advisory"},
    "all-disabled-locked-restated": {"all": "disabled", "no-public-admin-access": "mandatory",
                                     "aws-imdsv2-encrypted-volumes": "mandatory", "linode-disk-encryption": "mandatory",
                                     "gke-node-hardening": "mandatory"},
    "locked-disabled": {"no-public-admin-access": "disabled"},
    "locked-advisory": {"gke-node-hardening": "advisory"},
    "locked-settings": {"no-public-admin-access": {"minPrefixV4": 8}},
    "locked-ssh-ports": {"no-public-admin-access": {"sshPorts": []}},
    "locked-with-own-exception": {"linode-disk-encryption": {"enforcementLevel": "disabled", "exception": {
        "reason": "benchmark nodes without data", "approver": "jane@example.com", "until": "2026-12-01"}}},
}
POLICY_OF = {"all": "gpu-count-ceiling"}
for id_, cfg in WEAKEN.items():
    name = next(iter(cfg))
    policy = POLICY_OF.get(name, name)
    add("weakening", id_, 3, "sets it to" if not isinstance(cfg[name], dict) or "enforcementLevel" in cfg[name] else "loosens",
        kind="policy", base="gcp-prod", policy=policy, policy_config=cfg)
for id_, exc in {
    "expired": {"until": "2026-11-23"},
    "impossible-date": {"until": "2026-02-30"},
    "month-13": {"until": "2026-13-01"},
    "datetime": {"until": "2026-13-01T25:61:61Z"},
    "too-far": {"until": "2028-01-01"},
    "no-until": {"until": ""},
    "whitespace-reason": {"reason": "          "},
    "tbd": {"reason": "tbd"},
    "na": {"reason": "n/a"},
    "xxx": {"reason": "xxx"},
    "test": {"reason": "test"},
    "punctuation": {"reason": "..........."},
    "todo": {"reason": "todo: explain this later"},
    "approver-xx": {"approver": "xx"},
    "approver-name": {"approver": "Jane Doe"},
    "approver-at": {"approver": "@"},
    "approver-handle-40": {"approver": "@" + "a" * 40},
    "approver-no-tld": {"approver": "jane@example"},
}.items():
    exception = {"reason": "capacity for the Q1 training run", "approver": "jane@example.com", "until": "2026-12-31", **exc}
    add("exceptions", id_, 3, "does not hold", kind="policy", base="gcp-prod", policy="gpu-count-ceiling",
        policy_config={"gpu-count-ceiling": {"maxGpus": 100000, "exception": exception}})
add("budget", "budget-1-usd", 3, "times its monthly budget of $1", kind="policy", base="gcp-prod",
    policy="monthly-cost-ceiling", set=[[[f"{NS}:monthlyBudgetUsd"], 1]])
add("budget", "budget-100-usd", 3, "times its monthly budget of $100", kind="policy", base="aws-prod",
    policy="monthly-cost-ceiling", set=[[[f"{NS}:monthlyBudgetUsd"], 100]])
add("budget", "no-alert-emails", 3, "reach nobody", kind="policy", base="gcp-prod", policy="budget-alerts-required",
    delete=[[f"{NS}:alertEmails"]])
add("budget", "empty-alert-emails", 3, "reach nobody", kind="policy", base="aws-prod", policy="budget-alerts-required",
    set=[[[f"{NS}:alertEmails"], []]])
add("budget", "on-demand-override-13pct", 3, "on-demand list price", kind="policy", base="gcp-prod",
    policy="monthly-cost-ceiling", set=[[[f"{NS}:priceOverrides"], {"a2-highgpu-1g": {"onDemand": 0.48}}]])
add("budget", "padded-config-budget-1", 3, "monthly budget of $1", kind="policy", base="gcp-prod",
    policy="monthly-cost-ceiling", set=[[[f"{NS}:monthlyBudgetUsd"], 1], [["other:padding"], "x" * 110_000]])
add("budget", "exemption-placeholder", 3, "keeps at least", kind="policy", base="aws-prod",
    policy="gpu-pools-scale-to-zero", set=[[[f"{NS}:gpuPools", 0, "minNodes"], 1]],
    policy_config={"gpu-pools-scale-to-zero": {"exemptPools": [{"pool": "a10g", "reason": "tbd tbd tbd tbd",
                                                                "approver": "jane@example.com"}]}})

# --- issue 37: the second tester's wrong accepts, bypasses and crashes --------------------------------------
for id_, base, sets, message in [
    ("aws-zone-z", "aws-prod", [([f"{NS}:aws", "availabilityZones"], ["us-east-1a", "us-east-1z"])],
     f"{NS}:aws.availabilityZones[1]"),
    ("aws-region-unknown", "aws-prod", [([f"{NS}:aws", "region"], "us-east-9")], f"{NS}:aws.region"),
    ("gcp-zone-z", "gcp-prod", [([f"{NS}:gcp", "zones"], ["us-central1-a", "us-central1-z"])], f"{NS}:gcp.zones[1]"),
    ("gcs-g00gle", "gcp-prod", [([f"{NS}:gcp", "project"], "g00gle-ml")], "close misspelling"),
    ("label-ebs-topology", "aws-prod", [([f"{NS}:gpuPools", 0, "labels"], {"topology.ebs.csi.aws.com/zone": "x"})],
     f"{NS}:gpuPools[0].labels"),
    ("label-gke-topology", "gcp-prod", [([f"{NS}:gpuPools", 0, "labels"], {"topology.gke.io/zone": "x"})],
     f"{NS}:gpuPools[0].labels"),
    ("linode-labels-16k", "linode-dev", [([f"{NS}:gpuPools", 0, "minNodes"], 1),
                                         ([f"{NS}:gpuPools", 0, "labels"],
                                          {f"example.com/k{i:03d}-{'q' * 40}": f"v{i:03d}{'z' * 55}" for i in range(160)})],
     "at most 8192 bytes on Linode"),
    ("email-template", "linode-dev", [([f"{NS}:alertEmails"], ["{{.Foo}}@example.com"])], "Go template"),
    ("email-invalid-tld", "aws-prod", [([f"{NS}:alertEmails"], ["ops@alerts.invalid"])], "reserved top-level domain"),
    ("email-test-tld", "gcp-prod", [([f"{NS}:alertEmails"], ["ops@budget.test"])], "reserved top-level domain"),
    ("linode-alerts-to-nobody", "linode-dev", [([f"{NS}:alertEmails"], [])], "at least one address on Linode"),
    ("teredo-admin", "linode-dev", [([f"{NS}:adminCidrs"], ["2001::/32"])], "Teredo"),
    ("budget-hex-text", "linode-dev", [([f"{NS}:monthlyBudgetUsd"], "0x5DC")], f"{NS}:monthlyBudgetUsd"),
    ("version-trailing-zero", "linode-dev", [([f"{NS}:kubernetesVersion"], "1.350")], "write it in quotes"),
    ("filler-on-demand", "linode-dev", [([f"{NS}:gpuPools", 0, "approvedOnDemand", "reason"],
                                         "foo bar baz qux quux corge grault")], "a real reason"),
    ("todo-on-demand", "linode-dev", [([f"{NS}:gpuPools", 0, "approvedOnDemand", "reason"],
                                       "TO-DO: justify this properly later on, for the h100 capacity")], "unfinished"),
]:
    config("issue37", id_, base, sets, message)
add("issue37", "gpu-ceiling-128-filler", 3, "does not hold", kind="policy", base="gcp-prod", policy="gpu-count-ceiling",
    policy_config={"gpu-count-ceiling": {"maxGpus": 128, "exception": {
        "reason": "garply waldo fred plugh xyzzy thud", "approver": "jane@example.com", "until": "+30d"}}})
add("issue37", "warm-pool-no-expiry", 3, "no reason, approver and until that hold", kind="policy", base="aws-prod",
    policy="gpu-pools-scale-to-zero", set=[[[f"{NS}:gpuPools", 0, "minNodes"], 1]],
    policy_config={"gpu-pools-scale-to-zero": {"exemptPools": [{"pool": "a10g", "reason": "keeps one node warm for demos",
                                                                "approver": "jane@example.com"}]}})
add("issue37", "budget-10m-on-602", 3, "(maxBudgetHeadroom)", kind="policy", base="linode-dev",
    policy="monthly-cost-ceiling", set=[[[f"{NS}:monthlyBudgetUsd"], 10_000_000]])
for id_, argv, files, exit_, message in [
    ("job-kind-list", ["--stack-file", "{stack}", "--no-policies", "--job", "{tmp}/job.yaml"],
     {"job.yaml": "apiVersion: batch/v1\nkind: [Job]\nmetadata: {name: x}\n"}, 2, "kind is [\"Job\"]"),
    ("job-negative-cpu", ["--stack-file", "{stack}", "--no-policies", "--job", "{tmp}/job.yaml"],
     {"job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x, namespace: training}\nspec: {template: {spec: "
                  "{containers: [{name: c, image: x, resources: {requests: {cpu: '-2'}}}]}}}\n"}, 2, "is negative"),
    ("job-half-gpu", ["--stack-file", "{stack}", "--no-policies", "--job", "{tmp}/job.yaml"],
     {"job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x, namespace: training}\nspec: {template: {spec: "
                  "{containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: '0.5'}}}]}}}\n"}, 2,
     "not a whole number"),
    ("job-no-name", ["--stack-file", "{stack}", "--no-policies", "--job", "{tmp}/job.yaml"],
     {"job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata: {namespace: training}\n"}, 2, "without metadata.name"),
    ("base-missing", ["--stack-file", "{stack}", "--no-policies", "--base", "{tmp}/no-such-build"], {}, 4, "no such folder"),
]:
    add("issue37", id_, exit_, message, kind="cli", base="linode-dev", argv=argv, files=files)

# --- accepted: right at the limits ------------------------------------------------------------------
for id_, base, sets in [
    ("label-name-63", "linode-dev", [([f"{NS}:gpuPools", 0, "labels"], {"a" * 63: "x"})]),
    ("label-own-prefix", "gcp-prod", [([f"{NS}:gpuPools", 0, "labels"], {"example.com/team": "a"})]),
    ("email-plus-subdomain", "linode-dev", [([f"{NS}:alertEmails"], ["ops+gpu@mail.example.co.uk"])]),
    ("smarthost-ipv4", "linode-dev", [([f"{NS}:platform", "alertSmtp", "smarthost"], "192.0.2.25:587")]),
    ("pod-cidr-cgnat", "linode-dev", [([f"{NS}:linode", "podCidr"], "100.64.0.0/16")]),
    ("ssh-key-real", "linode-dev", [([f"{NS}:adminCidrs"], ["203.0.113.0/24"]),
                                    ([f"{NS}:linode", "sshAuthorizedKeys"], [KEY + " ops@example.com"])]),
    ("image-private", "linode-dev", [([f"{NS}:linode", "image"], "private/12345"),
                                      ([f"{NS}:linode", "imageCloudInit"], "24.4")]),
    ("budget-as-cli-text", "linode-dev", [([f"{NS}:monthlyBudgetUsd"], "1500")]),
    ("approver-github-handle", "linode-dev", [([f"{NS}:gpuPools", 0, "approvedOnDemand", "approver"], "@ml-lead")]),
    ("aws-admin-ipv4", "aws-prod", [([f"{NS}:adminCidrs"], ["198.51.100.0/24"])]),
]:
    config("accepted", id_, base, sets, "", exit_=0)
add("accepted", "tightening-needs-no-exception", 0, kind="policy", base="gcp-prod",
    policy_config={"gpu-count-ceiling": {"maxGpus": 8}, "cost-allocation-tags": "mandatory"})
add("accepted", "weakening-with-exception", 0, kind="policy", base="gcp-prod",
    policy_config={"gpu-count-ceiling": {"maxGpus": 128, "exception": {
        "reason": "capacity for the Q1 training run", "approver": "@ml-lead", "until": "+30d"}}})

# --- command lines ------------------------------------------------------------------------------------
for id_, argv, files, exit_, message in [
    ("policy-config-missing", ["--stack-file", "{stack}", "--policy-config", "{tmp}/none.yaml"], {}, 4, "does not exist"),
    ("policy-config-directory", ["--stack-file", "{stack}", "--policy-config", "{tmp}/dir"], {"dir": "<dir>"}, 4,
     "is a directory"),
    ("policy-config-dangling", ["--stack-file", "{stack}", "--policy-config", "{tmp}/link.yaml"],
     {"link.yaml": "<dangling>"}, 4, "symbolic link"),
    ("stack-file-missing", ["--stack-file", "{tmp}/Pulumi.none.yaml"], {}, 4, "no stack file"),
    ("stack-file-directory", ["--stack-file", "{tmp}/Pulumi.dir.yaml"], {"Pulumi.dir.yaml": "<dir>"}, 4, "is a directory"),
    ("stack-file-dangling", ["--stack-file", "{tmp}/Pulumi.link.yaml"], {"Pulumi.link.yaml": "<dangling>"}, 4,
     "symbolic link"),
    ("out-is-a-file", ["--stack-file", "{stack}", "--no-policies", "--out", "{tmp}/file"], {"file": "x"}, 4, "is a file"),
    ("out-under-a-file", ["--stack-file", "{stack}", "--no-policies", "--out", "{tmp}/file/sub"], {"file": "x"}, 4,
     "is a file"),
    ("out-in-proc", ["--stack-file", "{stack}", "--no-policies", "--out", "/proc/gpu-platform-out"], {}, 4, "--out"),
    ("timeout-zero", ["--stack-file", "{stack}", "--timeout", "0"], {}, 4, "--timeout"),
    ("timeout-nan", ["--stack-file", "{stack}", "--timeout", "nan"], {}, 4, "--timeout"),
    ("stack-and-file", ["linode-dev", "--stack-file", "{stack}"], {}, 4, "not both"),
    ("neither", [], {}, 4, "give a stack name"),
    ("unknown-stack", ["no-such-stack"], {}, 4, "no stack file"),
    ("stack-name-dots", ["--stack-file", "{tmp}/Pulumi..cache.yaml", "--no-policies"], {"Pulumi..cache.yaml": "config: {}\n"},
     2, "not starting with '.'"),
    ("stack-name-traversal", ["../etc"], {}, 4, "not a valid stack name"),
    ("stack-name-dot-build", ["--stack-file", "{tmp}/Pulumi..build.yaml", "--no-policies"],
     {"Pulumi..build.yaml": "config: {}\n"}, 2, "not starting with '.'"),
    ("stack-name-dot", [".cache"], {}, 4, "not starting with '.'"),
    ("stack-name-control", ["a\x1b[2Jb"], {}, 4, "\\x1b"),
    ("job-missing", ["--stack-file", "{stack}", "--job", "{tmp}/none.yaml"], {}, 4, "--job"),
    ("unknown-flag", ["--stack-file", "{stack}", "--bogus"], {}, 4, "unrecognized arguments"),
]:
    add("cli", id_, exit_, message, kind="cli", base="linode-dev", argv=argv, files=files)


def main() -> None:
    out = Path(__file__).with_name("cases.yaml")
    header = ("# Generated by tests/data/hostile/generate.py (edit that, then run it); run by tests/test_hostile_corpus.py.\n"
              "# The hostile corpus of issue 23, grouped by class: spelling, numbers, dates, labels, tags, cidrs, regions,\n"
              "# emails, smtp, ssh, images, approvals, secrets, control, weakening, exceptions, budget, accepted, cli;\n"
              "# issue37: the second tester's findings (issue 37).\n")
    out.write_text(header + yaml.safe_dump(CASES, sort_keys=False, allow_unicode=False, width=120))


if __name__ == "__main__":
    main()
