"""The Linode cluster's CNI: the version comes from the CNI's own Kubernetes compatibility table (the dated
calendar's `cni:` rows), an untested combination is a config error, and Cilium lets CIDR rules select the
API server so the hub's egress policy works."""

from __future__ import annotations

import copy
import json

import pytest

from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.data import linode_versions as versions
from gpu_platform.data.versions_calendar import load_calendar
from gpu_platform.preflight.runner import stack_input_from_mapping
from tests.conftest import plan_config, plan_stack, stack_config
from tests.fit_support import need_charts, rendered

RELEASE = "kubernetes:helm.sh/v3:Release"


def _cfg(**changes) -> dict:
    cfg = copy.deepcopy(stack_config("linode-dev"))
    for key, value in changes.items():
        if key == "kubernetesVersion":
            cfg["gpu-platform:kubernetesVersion"] = value
        else:
            cfg["gpu-platform:linode"][key] = value
    return cfg


def _cni_release(plan):
    return next(r for r in plan.by_type(RELEASE) if r.name.endswith("-cni"))


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_the_shipped_stacks_install_a_cilium_tested_on_their_minor(stack):
    plan = plan_stack(stack)
    release = _cni_release(plan)
    cfg = parse_config(stack_input_from_mapping(stack, stack_config(stack)).raw, stack)
    minor = versions.cni_minor(versions.cni_chart("cilium", cfg.kubernetes_version))
    assert release.plain_inputs["chart"] == "cilium"
    assert release.plain_inputs["version"].startswith(minor + ".")
    assert cfg.kubernetes_version in load_calendar().cni_kubernetes("cilium", minor)


def test_cilium_follows_the_kubernetes_minor_by_the_table():
    # Cilium 1.20's row (1.33-1.36, from github.com/cilium/cilium@v1.20.0) makes it the newest pin tested on
    # 1.33-1.36: 1.36 is no longer refused and 1.33-1.35 move from 1.19.6 to it.
    assert versions.cni_chart("cilium", "1.36").version == "1.20.0"
    assert versions.cni_chart("cilium", "1.35").version == "1.20.0"
    assert versions.cni_chart("cilium", "1.33").version == "1.20.0"
    assert versions.cni_chart("cilium", "1.32").version == "1.19.6"  # 1.20 is not tested on 1.32
    assert versions.cni_chart("cilium", "1.31").version == "1.18.2"
    assert versions.cni_chart("cilium", "1.37") is None  # no row lists it
    # An upgrade: the CNI moves first, so its row must list the running minor too.
    assert versions.cni_chart("cilium", "1.36", also="1.35").version == "1.20.0"
    assert versions.cni_chart("cilium", "1.33", also="1.32").version == "1.19.6"


def _module_table(version: str):
    """The "k8s Version" cell of Cilium's own compatibility table in the published Go module, where
    `make rehearsal-build` has put the module in the Go module cache (read only; nothing is downloaded)."""
    import re
    import subprocess

    try:
        modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no Go toolchain: the module cache cannot be found")
    from pathlib import Path

    path = Path(modcache) / "github.com" / "cilium" / f"cilium@v{version}" / "Documentation/network/kubernetes/compatibility.rst"
    if not path.is_file():
        pytest.skip(f"{path} absent: run `make rehearsal-build` (it downloads github.com/cilium/cilium@v{version})")
    rows = re.findall(r"^\|\s*((?:\d+\.\d+,\s*)*\d+\.\d+)\s*\|", path.read_text(), re.M)
    assert len(rows) == 1, f"{path}: expected one row of Kubernetes versions, found {rows}"
    return tuple(v.strip() for v in rows[0].split(","))


@pytest.mark.parametrize("chart", versions.CNI_CHARTS["cilium"], ids=lambda c: c.version)
def test_cilium_rows_are_ciliums_own_table_at_the_pinned_version(chart):
    minor = versions.cni_minor(chart)
    assert load_calendar().cni_kubernetes("cilium", minor) == _module_table(chart.version)


def test_preflight_of_a_linode_stack_at_1_36_passes_with_cilium_1_20(tmp_path, capsys):
    """1.36 was refused on linode.cni while no Cilium row listed it; the only other per-minor tables a Linode
    stack checks are the upstream calendar and the kubeadm patch pins, which have 1.36 (CCM and CSI publish
    none: one pin each, docs/linode.md)."""
    import yaml

    from gpu_platform.preflight.__main__ import main

    need_charts()
    doc = {"config": _cfg(kubernetesVersion="1.36")}  # controlPlaneVersion 1.35: the minor upgrade
    stack_file = tmp_path / "Pulumi.linode-k136.yaml"
    stack_file.write_text(yaml.safe_dump(doc))
    code = main(["--stack-file", str(stack_file), "--no-policies", "--quiet", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 0, out
    plan = plan_config(_cfg(kubernetesVersion="1.36"))
    assert _cni_release(plan).plain_inputs["version"] == "1.20.0"


def test_without_the_cilium_1_20_row_1_36_is_refused_naming_the_table(monkeypatch, tmp_path):
    from gpu_platform.data import versions_calendar

    text = versions_calendar.CALENDAR_FILE.read_text()
    start = text.index("- cni: cilium\n  minor: '1.20'")
    end = text.index("- cni: calico", start)
    trimmed = tmp_path / "kubernetes-versions.yaml"
    trimmed.write_text(text[:start] + text[end:])
    versions_calendar.load_calendar.cache_clear()
    monkeypatch.setattr(versions_calendar, "CALENDAR_FILE", trimmed)
    try:
        message = _reject(_cfg(kubernetesVersion="1.36"))
    finally:
        versions_calendar.load_calendar.cache_clear()
    assert "linode.cni" in message and "kubernetes-versions.yaml" in message, message
    assert "cilium 1.19 (1.32, 1.33, 1.34, 1.35)" in message and "cilium 1.20 (no published table)" in message, message


def _reject(cfg: dict) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")
    return str(err.value)


def test_a_cni_untested_on_the_minor_is_a_config_error_naming_the_key_and_the_table():
    message = _reject(_cfg(cni="calico"))
    assert "linode.cni" in message and "kubernetes-versions.yaml" in message and "use cilium" in message, message
    message = _reject(_cfg(kubernetesVersion="1.37"))
    assert "kubernetesVersion" in message, message


def test_cilium_lets_cidr_rules_select_nodes_and_the_api_server():
    need_charts()
    plan = plan_stack("linode-dev")
    assert _cni_release(plan).plain_inputs["values"]["policyCIDRMatchMode"] == ["nodes"]
    cni = next(r for r in rendered("linode-dev") if r.chart == "cilium")
    config = next(o for o in cni.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "cilium-config")
    assert config["data"]["policy-cidr-match-mode"] == "nodes"


# --- the metadata service: pods (every namespace) and hostNetwork pods ------------------------------


def test_every_pod_is_denied_the_metadata_service_by_a_cilium_clusterwide_policy():
    plan = plan_stack("linode-dev")
    policies = plan.by_type("kubernetes:cilium.io/v2:CiliumClusterwideNetworkPolicy")
    assert len(policies) == 1
    spec = policies[0].plain_inputs["spec"]
    assert spec["endpointSelector"] == {}  # every namespace: kubeflow, kube-system, users' own
    assert spec["egressDeny"] == [{"toCIDR": ["169.254.169.254/32"]}]
    assert spec["enableDefaultDeny"] == {"egress": False, "ingress": False}  # denies nothing else
    cni = _cni_release(plan)
    assert cni.urn in policies[0].dependencies
    gate = next(r for r in plan.by_type("command:local:Command") if r.name.endswith("nodes-ready"))
    assert policies[0].urn in gate.dependencies


def test_the_host_rules_start_before_the_kubelet_with_the_pod_cgroup_in_place():
    """The rules themselves are executed in tests/test_linode_metadata.py."""
    from gpu_platform.components.linode import render

    lines = render.metadata_block_unit().splitlines()
    assert "Before=kubelet.service" in lines and "Type=oneshot" in lines
    pre = [line for line in lines if line.startswith("ExecStartPre=")]
    assert pre == [f"ExecStartPre=/bin/systemctl start {render.POD_CGROUP}"]  # the cgroup exists before the rule
    assert [line for line in lines if line.startswith("ExecStart=")] == [f"ExecStart={render.METADATA_GUARD_PATH} setup"]
    allow = render.metadata_allow_unit().splitlines()
    assert f"After={render.METADATA_BLOCK_UNIT}" in allow and "Restart=always" in allow


# --- the CCM/CSI API token: a rotation reaches the pods ------------------------------------------------


def test_rotating_the_cluster_api_token_rolls_out_the_ccm_and_the_csi_driver():
    """Both read the token from their env at start: a Secret updated in place restarts nothing. The
    Secret's name carries a digest of the token and both releases name it, so a new token changes
    their pod templates (a rollout), and the plan never shows the token itself."""
    def names(token: str):
        cfg = copy.deepcopy(stack_config("linode-dev"))
        cfg["linode-cluster:token"] = token
        plan = plan_config(cfg)
        secret = next(r for r in plan.by_type("kubernetes:core/v1:Secret") if r.name.endswith("-linode-api"))
        releases = {r.plain_inputs["chart"]: r.plain_inputs["values"]["secretRef"]["name"] for r in plan.by_type(RELEASE)
                    if r.plain_inputs["chart"] in ("ccm-linode", "linode-blockstorage-csi-driver")}
        assert token not in json.dumps(plan.by_type(RELEASE)[0].inputs)
        return secret.plain_inputs["metadata"]["name"], releases

    old_name, old_refs = names("0" * 64)
    new_name, new_refs = names("1" * 64)
    assert old_name != new_name and old_name.startswith("linode-api-")
    assert set(old_refs.values()) == {old_name} and set(new_refs.values()) == {new_name}
    assert len(old_refs) == 2


def test_an_unset_kubernetes_version_defaults_to_the_newest_minor_the_cni_is_tested_on():
    """Without kubernetesVersion a Linode stack got the newest minor in support (1.36), which no pinned
    Cilium is tested on: a stack that set nothing was refused naming linode.cni."""
    cfg = _cfg()
    cfg.pop("gpu-platform:kubernetesVersion", None)
    parsed = parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")
    assert not parsed.kubernetes_version_pinned
    assert versions.cni_chart("cilium", parsed.kubernetes_version) is not None, parsed.kubernetes_version
    calendar = load_calendar()
    assert parsed.kubernetes_version == max(
        (m for m in calendar.allowed_minors("linode", None)
         if any(m in calendar.cni_kubernetes("cilium", c) for c in calendar.cni_minors("cilium"))),
        key=lambda m: tuple(map(int, m.split("."))))
