"""Values a shipped stack file accepted although they open the cluster, lie to it or crash preflight
(adversarial review of the offline preflight): each is a config error (exit 2) naming the key, the file
and what is allowed, before any resource is registered."""

from __future__ import annotations

import pytest
import yaml

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.runner import stack_input_from_mapping
from tests.cli_support import preflight_in_process
from tests.conftest import ROOT, stack_config
from tests.test_config import _set


def refused(stack: str, path: str, value, key: str, *allowed: str) -> str:
    cfg = _set(stack_config(stack), path, value)
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping(stack, cfg).raw, stack)
    text = str(err.value)
    assert f"gpu-platform:{key}:" in text, text
    for fragment in allowed:
        assert fragment in text, text
    return text


def accepted(stack: str, path: str, value) -> None:
    cfg = _set(stack_config(stack), path, value)
    parse_config(stack_input_from_mapping(stack, cfg).raw, stack)


# --- Linode's shared private network (192.168.128.0/17) -----------------------------------------------


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
@pytest.mark.parametrize("cidr", ["192.168.0.0/16", "192.168.128.0/17", "192.168.200.0/24", "192.168.255.7/32",
                                  "128.0.0.0/1"])
def test_linode_admin_ranges_overlapping_the_shared_private_network_are_refused(stack, cidr):
    text = refused(stack, "adminCidrs", ["203.0.113.0/24", cidr], "adminCidrs[1]", "192.168.128.0/17",
                   "any Linode customer")
    assert f"stacks/Pulumi.{stack}.yaml" in text


@pytest.mark.parametrize("cidr", ["192.168.0.0/17", "10.0.0.0/8", "203.0.113.0/24"])
def test_linode_admin_ranges_outside_it_are_accepted(cidr):
    accepted("linode-dev", "adminCidrs", [cidr])


def test_the_same_private_range_stays_allowed_on_other_clouds():
    accepted("gcp-prod", "adminCidrs", ["192.168.128.0/17"])


@pytest.mark.parametrize("cidr", ["127.0.0.0/24", "169.254.0.0/24", "198.18.0.0/24", "240.0.0.0/24", "0.0.0.0/24",
                                  "100.64.0.0/24", "192.168.128.0/24", "192.168.200.0/24"])
def test_linode_subnet_must_be_rfc1918_outside_the_shared_private_network(cidr):
    refused("linode-dev", "linode.subnetCidr", cidr, "linode.subnetCidr", "RFC 1918", "192.168.128.0/17")


@pytest.mark.parametrize("cidr", ["10.1.0.0/24", "172.16.5.0/24", "192.168.1.0/24"])
def test_linode_rfc1918_subnets_are_accepted(cidr):
    accepted("linode-dev", "linode.subnetCidr", cidr)


@pytest.mark.parametrize("key", ["podCidr", "serviceCidr"])
def test_linode_cluster_ranges_may_not_overlap_the_shared_private_network(key):
    refused("linode-dev", f"linode.{key}", "192.168.128.0/20", f"linode.{key}", "192.168.128.0/17")


# --- AWS VPC ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cidr", ["127.0.0.0/16", "0.0.0.0/16", "240.0.0.0/16", "198.18.0.0/16", "169.254.0.0/16",
                                  "100.64.0.0/16", "8.8.0.0/16"])
def test_aws_vpc_cidr_must_be_rfc1918(cidr):
    refused("aws-prod", "aws.vpcCidr", cidr, "aws.vpcCidr", "RFC 1918", "/16 to /22")


@pytest.mark.parametrize("cidr", ["10.40.0.0/16", "172.20.0.0/16", "192.168.0.0/20"])
def test_aws_rfc1918_vpc_cidrs_are_accepted(cidr):
    accepted("aws-prod", "aws.vpcCidr", cidr)


# --- price overrides ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stack,itype,capacity,value", [
    ("aws-prod", "g5.xlarge", "spot", 1.0e306),
    ("gcp-prod", "e2-standard-4", "onDemand", 1e306),
    ("linode-dev", "g2-gpu-rtx4000a1-m", "onDemand", 1e307),
    ("aws-prod", "g5.xlarge", "spot", 1e300),
    ("aws-prod", "g5.xlarge", "spot", 1000.01),
    ("aws-prod", "g5.xlarge", "spot", "0.1"),
    ("aws-prod", "g5.xlarge", "spot", 0),
])
def test_price_overrides_are_finite_numbers_with_a_ceiling(stack, itype, capacity, value):
    refused(stack, "priceOverrides", {itype: {capacity: value}}, f"priceOverrides.{itype}.{capacity}",
            "USD per node-hour", "at most 1,000")


def test_a_plausible_price_override_is_accepted():
    accepted("aws-prod", "priceOverrides", {"g5.xlarge": {"spot": 0.42, "onDemand": 1}})


# --- instance types outside the price catalog ---------------------------------------------------------


@pytest.mark.parametrize("stack,path,key,value", [
    ("gcp-prod", "gcp.systemPool", "gcp.systemPool.instanceType", {"instanceType": "e2-micro"}),
    ("linode-dev", "linode.systemPool", "linode.systemPool.instanceType",
     {"instanceType": "g6-nanode-1", "minNodes": 1, "maxNodes": 1}),
    ("aws-prod", "aws.systemPool", "aws.systemPool.instanceType", {"instanceType": "t3.nano"}),
])
def test_system_pool_types_outside_the_catalog_are_config_errors(stack, path, key, value):
    refused(stack, path, value, key, "in the price catalog" if stack == "gcp-prod" else "catalog")


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha", "gcp-prod", "aws-prod"])
def test_gpu_pool_types_outside_the_catalog_are_config_errors(stack):
    refused(stack, "gpuPools.0.instanceType", "x9-unknown-1", "gpuPools[0].instanceType", "allowed:")


# --- Linode image -------------------------------------------------------------------------------------


@pytest.mark.parametrize("image", ["linode/windows", "linode/debian12", "linode/ubuntu22.04", "linode/ubuntu25.04"])
def test_linode_images_the_node_scripts_do_not_support_are_refused(image):
    refused("linode-dev", "linode.image", image, "linode.image", "linode/ubuntu24.04")


@pytest.mark.parametrize("image", ["linode/ubuntu24.04", "private/12345"])
def test_the_supported_image_and_own_images_are_accepted(image):
    cfg = _set(stack_config("linode-dev"), "linode.image", image)
    if image.startswith("private/"):  # an own image states its cloud-init (24.4+ reads compressed user data)
        cfg = _set(cfg, "linode.imageCloudInit", "24.4")
    parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")


# --- node labels in namespaces the kubelet, the clouds or the platform set ----------------------------


@pytest.mark.parametrize("label", ["kubernetes.io/hostname", "node.kubernetes.io/instance-type",
                                   "topology.kubernetes.io/zone", "kubelet.kubernetes.io/x", "k8s.io/x",
                                   "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
                                   "k8s.amazonaws.com/accelerator", "nvidia.com/gpu.product", "gpu-platform.io/pool",
                                   "sub.gpu-platform.io/x",
                                   # issue 37: the CSI drivers' topology keys (the CSINode registration collides)
                                   "topology.ebs.csi.aws.com/zone", "topology.efs.csi.aws.com/x", "topology.gke.io/zone",
                                   "node.gke.io/x"])
@pytest.mark.parametrize("stack", ["linode-dev", "gcp-prod", "aws-prod"])
def test_reserved_label_namespaces_are_refused(stack, label):
    refused(stack, "gpuPools.0.labels", {label: "evil"}, "gpuPools[0].labels", "example.com/team")


@pytest.mark.parametrize("label", ["team", "example.com/team", "mykubernetes.io/x", "nvidia.com.example.org/x"])
def test_own_label_keys_are_accepted(label):
    accepted("gcp-prod", "gpuPools.0.labels", {label: "a"})


# --- through the CLI: exit 2, the key and the file, no traceback -------------------------------------


@pytest.mark.parametrize("stack,path,value,key", [
    ("gcp-prod", "gcp.systemPool", {"instanceType": "e2-micro"}, "gcp.systemPool.instanceType"),
    ("aws-prod", "priceOverrides", {"g5.xlarge": {"spot": 1.0e306}}, "priceOverrides.g5.xlarge.spot"),
    ("linode-dev", "adminCidrs", ["192.168.0.0/16"], "adminCidrs[0]"),
])
def test_preflight_reports_these_as_config_errors(tmp_path, stack, path, value, key):
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    doc["config"] = _set(doc["config"], path, value)
    stack_file = tmp_path / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    run = preflight_in_process("--stack-file", str(stack_file), "--out", str(tmp_path / "out"), cwd=ROOT)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"gpu-platform:{key}:" in run.stderr and str(stack_file) in run.stderr, run.stderr
    assert "Traceback" not in run.stdout + run.stderr


# --- regions and zones that exist (issue 37, item 2) --------------------------------------------------


@pytest.mark.parametrize("region", ["xx-fake-1", "us-east-9", "eu-gov-west-1", "cn-south-1"])
def test_an_aws_region_botocore_does_not_know_is_refused(region):
    """The pattern admitted any two letters, a word and a digit; botocore's partition data (recorded) decides."""
    text = refused("aws-prod", "aws.region", region, "aws.region", "an AWS region where EKS runs", "aws_regions.yaml",
                   "us-east-1", "us-gov-west-1")
    assert text.count("gpu-platform:aws.region:") == 1, text  # not also "a region offering g5.xlarge"


@pytest.mark.parametrize("zones, bad", [(["us-east-1a", "us-east-1z"], "us-east-1z"),
                                        (["us-east-1a", "us-east-1g"], "us-east-1g")])
def test_an_aws_zone_past_the_regions_zone_ids_is_refused(zones, bad):
    text = refused("aws-prod", "aws.availabilityZones", zones, "aws.availabilityZones[1]", "us-east-1a to us-east-1f",
                   "describe-availability-zones")
    assert f'"{bad}"' in text


@pytest.mark.parametrize("zones", [["us-east-1a", "us-east-1f"], ["us-east-1d", "us-east-1e"]])
def test_real_aws_zones_are_accepted(zones):
    accepted("aws-prod", "aws.availabilityZones", zones)


def test_an_aws_zone_of_a_region_without_recorded_zones_is_bounded_by_the_largest_recorded_region():
    cfg = _set(stack_config("aws-prod"), "aws.region", "eu-north-1")
    cfg = _set(cfg, "aws.availabilityZones", ["eu-north-1a", "eu-north-1q"])
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping("aws-prod", cfg).raw, "aws-prod")
    assert 'gpu-platform:aws.availabilityZones[1]: "eu-north-1q"' in str(err.value)
    assert "availabilityZones[0]" not in str(err.value)


@pytest.mark.parametrize("region", ["xx-fake1", "europe-west99", "mars-north1"])
def test_a_gcp_region_the_catalog_does_not_record_is_refused_once(region):
    text = refused("gcp-prod", "gcp.region", region, "gcp.region", "a GCP region the price catalog records",
                   "us-central1", "europe-west4")
    assert text.count("gpu-platform:gcp.region:") == 1, text


@pytest.mark.parametrize("zone", ["us-central1-z", "us-central1-e"])
def test_a_gcp_zone_the_catalog_does_not_record_is_refused_once(zone):
    text = refused("gcp-prod", "gcp.zones", ["us-central1-a", zone], "gcp.zones[1]",
                   "a zone of us-central1 the price catalog records", "us-central1-f")
    assert text.count("gpu-platform:gcp.zones[1]:") == 1, text


def test_a_linode_region_the_table_does_not_record_is_refused():
    refused("linode-dev", "linode.region", "xx-fake-1", "linode.region", "a Linode core region", "us-ord")


# --- Linode: labels past the 16 KiB of user data (issue 37: a traceback from the program) -------------


def _dense_labels(total: int, seed: int = 37) -> dict[str, str]:
    """Labels of `total` bytes written key=value,..., of random characters (as little as gzip can squeeze)."""
    import random

    rng = random.Random(seed)
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    word = lambda n: rng.choice(alnum) + "".join(rng.choice(alnum + "-_.") for _ in range(n - 2)) + rng.choice(alnum)  # noqa: E731
    labels: dict[str, str] = {}
    while True:
        used = len(",".join(f"{k}={v}" for k, v in labels.items()))
        left = total - used - (1 if labels else 0)
        if left <= 0:
            return labels
        key = f"example.com/{word(60)}"
        if left >= len(key) + 1 + 63 + 70:
            labels[key] = word(63)
        else:
            labels[key[:max(14, left - 4)].rstrip("-_.")] = word(max(2, left - 1 - len(key[:max(14, left - 4)].rstrip("-_."))))
            while len(",".join(f"{k}={v}" for k, v in labels.items())) > total:
                k = next(reversed(labels))
                labels[k] = labels[k][:-2] + labels[k][-1]


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed-pool", "autoscaled-pool"])
def test_linode_pool_labels_past_the_user_data_limit_are_a_config_error(fixed):
    cfg = stack_config("linode-dev")
    pool = cfg["gpu-platform:gpuPools"][0]
    pool["minNodes"] = 1 if fixed else 0
    pool["labels"] = _dense_labels(20_000)
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")
    text = str(err.value)
    assert "gpu-platform:gpuPools[0].labels:" in text and "at most 8192 bytes on Linode" in text, text
    assert "16,384" in text and "stacks/Pulumi.linode-dev.yaml" in text


def test_a_fixed_linode_pool_with_labels_at_the_cap_fits_linodes_user_data():
    """The cap is honest: a fixed pool whose labels take exactly LINODE_POOL_LABEL_BYTES_MAX bytes of random
    characters renders, and its nodes' gzip-compressed boot documents stay within 16,384 bytes."""
    import base64

    from gpu_platform.components.linode.render import USER_DATA_LIMIT_BYTES
    from gpu_platform.config.linode import LINODE_POOL_LABEL_BYTES_MAX
    from tests.conftest import plan_config

    cfg = stack_config("linode-dev")
    pool = cfg["gpu-platform:gpuPools"][0]
    pool["minNodes"] = pool["maxNodes"] = 1
    pool["labels"] = _dense_labels(LINODE_POOL_LABEL_BYTES_MAX)
    assert len(",".join(f"{k}={v}" for k, v in pool["labels"].items())) == LINODE_POOL_LABEL_BYTES_MAX
    plan = plan_config(cfg, "linode-dev")
    gpu = [r for r in plan.by_type("linode:index/instance:Instance") if r.name.endswith("-ada-0")]
    assert gpu
    size = len(base64.b64decode(gpu[0].plain_inputs["metadatas"][0]["userData"]))
    assert size <= USER_DATA_LIMIT_BYTES - 1024, size  # a margin for longer names and addresses


# --- GCS bucket names with "google" misspelt (issue 37: g00gle passed; Cloud Storage refuses it) -----------


@pytest.mark.parametrize("project", ["g00gle-ml", "my-ml-9oog1e", "team-goog1e-x", "g00g-research"])
def test_a_checkpoint_bucket_name_with_google_misspelt_is_refused(project):
    refused("gcp-prod", "gcp.project", project, "gcp.project", "a close misspelling", "Cloud Storage bucket name")


@pytest.mark.parametrize("environment", ["g00gle", "goog1e"])
def test_a_bucket_name_refused_for_the_environments_text_names_environment(environment):
    """Adopter review of 94425ce: with `environment: g00gle` the error named `gcp.project: "my-ml-project"`, the
    real cause only in "(built from gcp.project, environment)". The key whose value carries the text is named."""
    text = refused("gcp-prod", "environment", environment, "environment", f'"{environment}"', "a close misspelling")
    assert "gpu-platform:gcp.project:" not in text, text


@pytest.mark.parametrize("project", ["my-ml-1023", "go-ogle-ml", "geo-ml-2026"])
def test_bucket_names_near_but_not_google_are_accepted(project):
    accepted("gcp-prod", "gcp.project", project)


# --- unquoted numbers the Pulumi CLI hands the program as the text written (issue 37) ---------------------


def _stack_file_with(tmp_path, stack: str, key: str, written: str):
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(f"  gpu-platform:{key}:")]
    at = lines.index("config:") + 1
    lines.insert(at, f"  gpu-platform:{key}: {written}")
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _parse_file(path):
    from gpu_platform.preflight.runner import load_stack_file

    si = load_stack_file(path)
    return parse_config(si.raw, si.stack, source=si.source, secret_keys=si.bare_secret_keys), si


@pytest.mark.parametrize("written", ["1e3", "0x5DC", "0o2734", ".5e4", "1500e0", "+1500"])
def test_an_unquoted_number_the_cli_passes_as_text_is_refused_as_the_program_would(tmp_path, written):
    """Preflight read `monthlyBudgetUsd: 0x5DC` as 1500 and passed; the Pulumi CLI hands the program the
    text "0x5DC", which `pulumi up` refuses: the stack planned was not the stack deployed."""
    path = _stack_file_with(tmp_path, "linode-dev", "monthlyBudgetUsd", written)
    with pytest.raises(ConfigError) as err:
        _parse_file(path)
    text = str(err.value)
    assert f'gpu-platform:monthlyBudgetUsd: "{written}" -> must be a plain number' in text, text
    assert str(path) in text and "as the text written" in text


def test_a_plain_unquoted_number_is_read_and_handed_on_as_before(tmp_path):
    cfg, si = _parse_file(_stack_file_with(tmp_path, "linode-dev", "monthlyBudgetUsd", "1500"))
    assert cfg.monthly_budget_usd == 1500 and si.config["gpu-platform:monthlyBudgetUsd"] == "1500"


@pytest.mark.parametrize("written", ["1.350", "1.30", "1.3500"])
def test_an_unquoted_kubernetes_version_with_a_trailing_zero_says_to_quote_it(tmp_path, written):
    path = _stack_file_with(tmp_path, "linode-dev", "kubernetesVersion", written)
    with pytest.raises(ConfigError) as err:
        _parse_file(path)
    text = str(err.value)
    assert f'gpu-platform:kubernetesVersion: "{written}" -> must be a quoted Kubernetes minor' in text, text
    assert "write it in quotes" in text and "kubernetesVersion: \"1." in text


def test_an_unquoted_kubernetes_version_that_is_a_minor_is_read_as_its_text(tmp_path):
    cfg, si = _parse_file(_stack_file_with(tmp_path, "linode-dev", "kubernetesVersion", "1.35"))
    assert cfg.kubernetes_version == "1.35" and si.config["gpu-platform:kubernetesVersion"] == "1.35"


# --- alert addresses that reach nobody (issue 37) ---------------------------------------------------------


@pytest.mark.parametrize("stack", ["linode-dev", "aws-prod", "gcp-prod"])
@pytest.mark.parametrize("address,name", [("ops@x.example", ".example"), ("ops@example.com", "example.com"),
                                          ("ops@alerts.example.org", "example.org"), ("ops@EXAMPLE.NET", "example.net")])
def test_alert_addresses_in_documentation_names_are_warned_of_alike(stack, address, name):
    """Adopter review (issue 37 brief), item 6: `acme.example` was refused but `example.com`, reserved by the same
    RFC 2606 (section 3), accepted. One rule for the documentation names: a warning naming the address and the
    name (the shipped stacks' example.com is a placeholder, and no real domain would be an honest stand-in)."""
    from gpu_platform.config.stack import config_warnings

    cfg = parse_config(stack_input_from_mapping(stack, _set(stack_config(stack), "alertEmails",
                                                            ["team@corp.example.co.uk", address])).raw, stack)
    warned = [w for w in config_warnings(cfg) if w.startswith("alertEmails[")]
    assert warned == [f"alertEmails[1] {address}: {name} is reserved for documentation (RFC 2606) and receives no mail, "
                      "so the budget and platform alerts sent there reach no one; give your team's address"], warned


@pytest.mark.parametrize("address,tld", [("ops@alerts.invalid", ".invalid"), ("ops@budget.test", ".test"),
                                         ("root@localhost.localhost", ".localhost"), ("OPS@MAIL.TEST", ".test")])
def test_alert_addresses_in_test_invalid_or_loopback_names_are_refused(address, tld):
    """The attacker review (issue 37): budget alerts to .invalid/.test reach nobody, and nobody writes those names
    as a placeholder to replace, so they stay a config error naming the key (the adopter fix had made them a
    warning: tests/data/hostile/cases.yaml issue37-email-*-tld turned red)."""
    refused("linode-dev", "alertEmails", ["team@corp.example.co.uk", address], "alertEmails[1]", tld, "no mail is ever delivered")


@pytest.mark.parametrize("address", ["{{.Foo}}@example.com", "{{or.x.y}}@example.com", "a}}b@example.com",
                                     "{{@example.com"])
def test_an_alert_address_that_is_an_alertmanager_template_is_refused(address):
    refused("linode-dev", "alertEmails", [address], "alertEmails[0]", "Go template")


def test_a_linode_stack_without_alert_addresses_is_refused_its_budget_alert_reaches_nobody():
    text = refused("linode-dev", "alertEmails", [], "alertEmails", "at least one address on Linode", "reaches nobody")
    assert "monthlyBudgetUsd 1500" in text


def test_alert_addresses_at_real_domains_are_accepted():
    from gpu_platform.config.stack import config_warnings

    accepted("linode-dev", "alertEmails", ["ops@example.com", "ml+gpu@corp.example.co.uk", "a{b}@example.org"])
    cfg = parse_config(stack_input_from_mapping("linode-dev", _set(stack_config("linode-dev"), "alertEmails", [
        "ml+gpu@corp.example.co.uk", "ops@myexample.com", "ops@example.company"])).raw, "linode-dev")
    assert not [w for w in config_warnings(cfg) if w.startswith("alertEmails[")]


# --- admin ranges in IPv6 transition prefixes (issue 37: Teredo 2001::/32 opened the API port) ------------


@pytest.mark.parametrize("stack", ["linode-dev", "gcp-prod"])
@pytest.mark.parametrize("cidr", ["2001::/32", "2001:0:cb00:7100::/64", "2002::/16", "2002:cb00:7100::/48"])
def test_admin_ranges_in_teredo_or_6to4_are_refused(stack, cidr):
    refused(stack, "adminCidrs", ["203.0.113.0/24", cidr], "adminCidrs[1]", "Teredo 2001::/32", "written as IPv4")


@pytest.mark.parametrize("cidr", ["2001:db8::/48", "2600:1f18::/36"])
def test_native_ipv6_admin_ranges_are_accepted(cidr):
    accepted("linode-dev", "adminCidrs", ["203.0.113.0/24", cidr])
