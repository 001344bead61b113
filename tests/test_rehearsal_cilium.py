"""Cilium's CRDs in the rehearsal: made by cilium-operator's own code at the chart's version
(rehearsal/go/cilium-crds-<version>, built from github.com/cilium/cilium by `make rehearsal-build`), installed
on the real API server for stacks that run Cilium, so the platform's CiliumClusterwideNetworkPolicy is
validated by Cilium's schema: the shipped one is accepted, a malformed one refused with the schema's message."""

from __future__ import annotations

import copy

import pytest

from gpu_platform.rehearsal import binaries, cilium
from gpu_platform.rehearsal.install import InstallLog, Installer
from gpu_platform.rehearsal.kube import ApiError
from gpu_platform.rehearsal.run import registered_crds
from tests.test_rehearsal import needs_components, prepared

CCNP = "ciliumclusterwidenetworkpolicies.cilium.io"


def _cilium_release_and_policy(stack: str):
    _, _, fit = prepared(stack)
    rel = cilium.cilium_release(fit.releases)
    policies = [o for r in fit.releases for o in r.objects if o.get("kind") == "CiliumClusterwideNetworkPolicy"]
    return rel, policies


def test_stacks_without_cilium_register_no_crds(tmp_path):
    _, _, fit = prepared("gcp-prod")
    assert cilium.cilium_release(fit.releases) is None
    log, not_rehearsed = InstallLog(), []
    assert registered_crds(fit.releases, log, not_rehearsed) == ()
    assert log.registered == [] and not_rehearsed == []


def test_a_missing_crds_program_is_reported_not_rehearsed_and_names_the_build(tmp_path, monkeypatch):
    monkeypatch.setenv(binaries.CACHE_ENV, str(tmp_path))
    rel, _ = _cilium_release_and_policy("linode-dev")
    not_rehearsed: list[str] = []
    assert registered_crds([rel], InstallLog(), not_rehearsed) == ()
    assert len(not_rehearsed) == 1
    assert f"cilium-crds-{rel.version}" in not_rehearsed[0] and binaries.BUILD_COMMAND in not_rehearsed[0]


def test_program_output_that_is_not_cilium_crds_is_refused():
    with pytest.raises(cilium.CiliumCrdsError, match="no List"):
        cilium.parse('{"kind": "List", "items": []}', "cilium-crds-1.19.6")
    with pytest.raises(cilium.CiliumCrdsError, match="not a cilium.io CustomResourceDefinition"):
        cilium.parse('{"kind": "List", "items": [{"kind": "ConfigMap", "metadata": {"name": "x"}}]}', "cilium-crds-1.19.6")


@needs_components
@pytest.mark.rehearsal
def test_crds_are_the_operators_at_the_charts_version():
    """Runs no control plane, only the Cilium CRD program (a Go component): with the rehearsal in `make test`,
    not in `make check`, which needs no Go (a half-built component cache failed it there)."""
    rel, policies = _cilium_release_and_policy("linode-dev")
    assert rel is not None and policies, "linode-dev installs Cilium and the metadata deny policy"
    crds = {c["metadata"]["name"]: c for c in cilium.operator_crds(rel.version)}
    # Registered with Cilium's defaults (option.Config): network policies on, BGP off.
    assert {CCNP, "ciliumnetworkpolicies.cilium.io", "ciliumendpoints.cilium.io"} <= set(crds)
    assert not any("bgp" in name for name in crds)
    ccnp = crds[CCNP]
    # constructV1CRD labels each CRD with Cilium's schema version, which the operator compares on upgrade.
    assert "io.cilium.k8s.crd.schema.version" in ccnp["metadata"]["labels"]
    assert ccnp["spec"]["scope"] == "Cluster"
    schema = next(v for v in ccnp["spec"]["versions"] if v["name"] == "v2")["schema"]["openAPIV3Schema"]
    assert "egressDeny" in schema["properties"]["spec"]["properties"]


def _malformed(policy: dict, change) -> dict:
    bad = copy.deepcopy(policy)
    bad["metadata"]["name"] = "planted-" + bad["metadata"]["name"]
    change(bad["spec"])
    return bad


@needs_components
@pytest.mark.rehearsal
def test_api_server_validates_the_platforms_cilium_policy_with_ciliums_schema(tmp_path):
    """Needs its own control plane: one with Cilium's CRDs registered and nothing else installed, so the
    refusal of a broken policy can only come from Cilium's schema (seconds: no install, no controllers)."""
    from gpu_platform.rehearsal.controlplane import ControlPlane

    rel, policies = _cilium_release_and_policy("linode-dev")
    log, not_rehearsed = InstallLog(), []
    with ControlPlane(tmp_path / "logs") as cp:
        installer = Installer(cp.client, [], [], b"ca", log)
        installer.crds(registered=registered_crds([rel], log, not_rehearsed))
        assert not not_rehearsed and not log.refused, (not_rehearsed, log.refused)
        assert log.registered and cilium.MODULE + "@v" + rel.version in log.registered[0]
        for policy in policies:  # what the program renders: accepted
            cp.client.apply(policy)
        policy = policies[0]
        assert policy["spec"]["egressDeny"][0]["toCIDR"]
        # A misspelled field under spec.egressDeny: the schema knows no `toCIDRs`.
        misspelled = _malformed(policy, lambda s: s["egressDeny"][0].update(toCIDRs=s["egressDeny"][0].pop("toCIDR")))
        with pytest.raises(ApiError) as refused:
            cp.client.apply(misspelled)
        # Server-side apply cannot build the typed object (kube-apiserver answers 500 for that, not 422).
        assert ".spec.egressDeny[0].toCIDRs: field not declared in schema" in refused.value.message
        # A wrong type: toCIDR is a list of CIDRs, not one string.
        wrong_type = _malformed(policy, lambda s: s["egressDeny"][0].update(toCIDR=s["egressDeny"][0]["toCIDR"][0]))
        with pytest.raises(ApiError) as refused:
            cp.client.apply(wrong_type)
        assert ".spec.egressDeny[0].toCIDR: expected list" in refused.value.message
        # Not a CIDR: the schema's own format for CIDRs (pattern) refuses it.
        not_cidr = _malformed(policy, lambda s: s["egressDeny"][0].update(toCIDR=["169.254.169.254/99"]))
        with pytest.raises(ApiError) as refused:
            cp.client.apply(not_cidr)
        assert refused.value.status == 422  # the schema's validation proper (pattern/format), after typing
        assert "spec.egressDeny[0].toCIDR[0]" in refused.value.message
        assert cp.client.get("cilium.io/v2", "CiliumClusterwideNetworkPolicy", misspelled["metadata"]["name"]) is None
