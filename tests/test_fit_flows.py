"""The platform's network flows (issue 34 item 2): every connection the platform needs, checked against the
rendered NetworkPolicies with the CNI's own semantics.

Before: z2jh's `privateIPs` egress (ipBlock 10/8, 172.16/12, 192.168/16) was the notebooks' only way to
Kubeflow Pipelines; Cilium (Linode) and GKE Dataplane V2 never apply ipBlock rules to traffic to a pod,
so `kfp.Client()` hung on both, and nothing offline could see it. The evaluator's semantics are tested
on small policies first (upstream NetworkPolicy and Cilium's CIDR rule), then on the shipped stacks'
real rendered charts, then through the preflight command."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import yaml

from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.netpol import EXTERNAL, NODE, POD, Dataplane, Peer, Policy, decide
from gpu_platform.preflight.fit.nodes import PUBLIC_RANGES, cluster_model
from gpu_platform.preflight.runner import load_stack
from tests.conftest import ROOT
from tests.fit_support import STACKS, need_charts, rendered_copy, stack_plan

UPSTREAM = Dataplane("upstream")
CILIUM = Dataplane("Cilium", cilium=True)
CILIUM_NODES = Dataplane("Cilium nodes", cilium=True, cidr_matches_nodes=True)
CILIUM_PODS = Dataplane("Cilium pods", cilium=True, cidr_matches_pods=True)

POD_CIDR = ("10.244.0.0/16",)


def pod(ns: str, labels: dict, ports=(), what: str = "") -> Peer:
    return Peer(what or f"{ns}/{labels}", POD, ns, labels, {"kubernetes.io/metadata.name": ns, "team": ns},
                tuple(ports), POD_CIDR)


NOTEBOOK = pod("jupyterhub", {"component": "singleuser-server"})
API = pod("kubeflow", {"app": "ml-pipeline"}, [("http", 8888, "TCP"), ("grpc", 8887, "TCP")])
APISERVER_NODE = Peer("apiserver", NODE, addresses=("10.0.0.0/24",), entities=frozenset({"kube-apiserver", "remote-node"}))
INTERNET = Peer("bucket", EXTERNAL, addresses=PUBLIC_RANGES, entities=frozenset({"world"}))


def netpol(ns: str, spec: dict, name: str = "p") -> Policy:
    return Policy("test", {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                           "metadata": {"name": name, "namespace": ns}, "spec": spec})


def cnp(spec: dict, name: str = "c", ns: str | None = None) -> Policy:
    kind = "CiliumNetworkPolicy" if ns else "CiliumClusterwideNetworkPolicy"
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return Policy("test", {"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta, "spec": spec})


PRIVATE_EGRESS = {"podSelector": {"matchLabels": {"component": "singleuser-server"}}, "policyTypes": ["Egress"],
                  "egress": [{"to": [{"ipBlock": {"cidr": c}} for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]}]}


# --- upstream NetworkPolicy semantics --------------------------------------------------------


def test_no_policy_allows_and_a_selecting_policy_without_rules_denies_naming_it():
    assert decide(NOTEBOOK, API, 8888, "TCP", [], UPSTREAM).allowed
    deny = netpol("kubeflow", {"podSelector": {}, "policyTypes": ["Ingress"]}, "default-deny")
    d = decide(NOTEBOOK, API, 8888, "TCP", [deny], UPSTREAM)
    assert not d.allowed and d.egress.allowed and not d.ingress.allowed
    assert d.ingress.isolated_by == ["NetworkPolicy/kubeflow/default-deny"]


def test_policy_types_default_to_ingress_plus_egress_when_there_are_egress_rules():
    only_egress_rules = netpol("kubeflow", {"podSelector": {}, "egress": [{}]})
    d = decide(NOTEBOOK, API, 8888, "TCP", [only_egress_rules], UPSTREAM)
    assert not d.ingress.allowed, "no policyTypes: Ingress is always set"
    out = decide(API, NOTEBOOK, 8888, "TCP", [only_egress_rules], UPSTREAM)
    assert out.egress.allowed and out.egress.isolated_by, "egress: [{}] isolates and allows everything"


def test_both_the_sources_egress_and_the_destinations_ingress_are_needed():
    egress_ok = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"namespaceSelector": {}}]}]})
    ingress_shut = netpol("kubeflow", {"podSelector": {"matchLabels": {"app": "ml-pipeline"}}, "policyTypes": ["Ingress"],
                                       "ingress": [{"from": [{"podSelector": {}}]}]})
    d = decide(NOTEBOOK, API, 8888, "TCP", [egress_ok, ingress_shut], UPSTREAM)
    assert d.egress.allowed and not d.ingress.allowed, "podSelector alone: the policy's own namespace only"


def test_namespace_and_pod_selector_in_one_peer_are_anded_in_two_peers_ored():
    both = {"namespaceSelector": {"matchLabels": {"team": "jupyterhub"}}, "podSelector": {"matchLabels": {"component": "hub"}}}
    one = netpol("kubeflow", {"podSelector": {}, "ingress": [{"from": [both]}]})
    assert not decide(NOTEBOOK, API, 8888, "TCP", [one], UPSTREAM).allowed
    two = netpol("kubeflow", {"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": both["namespaceSelector"]}, {"podSelector": both["podSelector"]}]}]})
    assert decide(NOTEBOOK, API, 8888, "TCP", [two], UPSTREAM).allowed


def test_named_ports_resolve_on_the_destination_pod_with_its_protocol_and_end_port_ranges():
    def only(ports):
        return [netpol("kubeflow", {"podSelector": {}, "ingress": [{"ports": ports}]})]
    assert decide(NOTEBOOK, API, 8888, "TCP", only([{"port": "http"}]), UPSTREAM).allowed
    assert not decide(NOTEBOOK, API, 8887, "TCP", only([{"port": "http"}]), UPSTREAM).allowed
    assert not decide(NOTEBOOK, API, 8888, "TCP", only([{"port": "http", "protocol": "UDP"}]), UPSTREAM).allowed
    assert decide(NOTEBOOK, API, 8888, "TCP", only([{"port": 8880, "endPort": 8890}]), UPSTREAM).allowed
    assert not decide(NOTEBOOK, API, 8891, "TCP", only([{"port": 8880, "endPort": 8890}]), UPSTREAM).allowed
    # a name the destination does not declare never matches
    assert not decide(NOTEBOOK, API, 8888, "TCP", only([{"port": "web"}]), UPSTREAM).allowed


def test_ipblock_except_and_the_union_of_several_blocks():
    bucket_only_half = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}]}]})
    assert not decide(NOTEBOOK, INTERNET, 443, "TCP", [bucket_only_half], UPSTREAM).allowed
    halves = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}]}, {"to": [{"ipBlock": {"cidr": "128.0.0.0/1"}}]}]})
    assert decide(NOTEBOOK, INTERNET, 443, "TCP", [halves], UPSTREAM).allowed
    excepted = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
        {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.244.0.0/16"]}}]}]})
    assert not decide(NOTEBOOK, API, 8888, "TCP", [excepted], UPSTREAM).allowed


# --- Cilium: CIDR rules never match cluster endpoints ----------------------------------------


def test_an_ipblock_reaches_a_pod_upstream_but_not_on_cilium():
    policies = [netpol("jupyterhub", PRIVATE_EGRESS)]
    assert decide(NOTEBOOK, API, 8888, "TCP", policies, UPSTREAM).allowed
    d = decide(NOTEBOOK, API, 8888, "TCP", policies, CILIUM)
    assert not d.allowed and d.egress.cidr_skipped == ["NetworkPolicy/jupyterhub/p"]
    assert not decide(NOTEBOOK, API, 8888, "TCP", policies, CILIUM_NODES).allowed
    assert decide(NOTEBOOK, API, 8888, "TCP", policies, CILIUM_PODS).allowed, "policy-cidr-match-mode: pods (1.20)"


def test_an_ipblock_reaches_a_node_on_cilium_only_with_policy_cidr_match_mode_nodes():
    policies = [netpol("jupyterhub", PRIVATE_EGRESS)]
    assert not decide(NOTEBOOK, APISERVER_NODE, 6443, "TCP", policies, CILIUM).allowed
    assert decide(NOTEBOOK, APISERVER_NODE, 6443, "TCP", policies, CILIUM_NODES).allowed


def test_a_wildcard_ipblock_reaches_no_node_on_cilium_even_in_nodes_mode():
    """Platform review: Cilium 1.19/1.20 turn 0.0.0.0/0 into the `world` selector, which selects no node even
    with --policy-cidr-match-mode=nodes (cilium/cilium#47827, open); a narrower range does. A node at a
    CGNAT address (100.64.0.0/10, outside the RFC 1918 rules) reached only through z2jh's 0.0.0.0/0 rule
    was passed as reachable; the hub could not spawn a pod there."""
    cgnat_node = Peer("apiserver", NODE, addresses=("100.64.20.0/24",), entities=frozenset({"kube-apiserver", "remote-node"}))
    public = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {
        "cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]}}]}]})
    d = decide(NOTEBOOK, cgnat_node, 6443, "TCP", [public], CILIUM_NODES)
    assert not d.allowed and d.egress.cidr_skipped == ["NetworkPolicy/jupyterhub/p"]
    assert decide(NOTEBOOK, cgnat_node, 6443, "TCP", [public], UPSTREAM).allowed  # upstream: any address
    narrow = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {
        "cidr": "100.64.0.0/10"}}]}]})
    assert decide(NOTEBOOK, cgnat_node, 6443, "TCP", [narrow], CILIUM_NODES).allowed
    # the same in a Cilium policy: toCIDR 0.0.0.0/0 no, toCIDRSet 100.64.0.0/10 yes
    ns = "jupyterhub"
    sel = {"endpointSelector": {"matchLabels": {"component": "singleuser-server"}}}
    wild = cnp({**sel, "egress": [{"toCIDR": ["0.0.0.0/0"]}]}, ns=ns)
    assert not decide(NOTEBOOK, cgnat_node, 6443, "TCP", [wild], CILIUM_NODES).allowed
    some = cnp({**sel, "egress": [{"toCIDRSet": [{"cidr": "100.64.0.0/10"}]}]}, ns=ns)
    assert decide(NOTEBOOK, cgnat_node, 6443, "TCP", [some], CILIUM_NODES).allowed
    # and a wildcard still reaches addresses outside the cluster
    assert decide(NOTEBOOK, INTERNET, 443, "TCP", [public], CILIUM_NODES).allowed


def test_an_ipblock_reaches_addresses_outside_the_cluster_on_cilium():
    public = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {
        "cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.169.254/32"]}}]}]})
    assert decide(NOTEBOOK, INTERNET, 443, "TCP", [public], CILIUM).allowed


def test_cilium_policies_deny_wins_default_deny_off_and_unknown_fields_are_reported():
    metadata = Peer("metadata", EXTERNAL, addresses=("169.254.169.254/32",), entities=frozenset({"world"}))
    deny = cnp({"endpointSelector": {}, "enableDefaultDeny": {"egress": False, "ingress": False},
                "egressDeny": [{"toCIDR": ["169.254.169.254/32"]}]})
    allow_all = netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]})
    assert not decide(NOTEBOOK, metadata, 80, "TCP", [deny, allow_all], CILIUM).allowed, "deny wins over any allow"
    assert decide(NOTEBOOK, API, 8888, "TCP", [deny], CILIUM).allowed, "enableDefaultDeny false isolates nothing"
    assert decide(NOTEBOOK, metadata, 80, "TCP", [deny], UPSTREAM).allowed, "no Cilium, no Cilium policy"
    to_api = cnp({"endpointSelector": {"matchLabels": {"component": "singleuser-server"}},
                  "egress": [{"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kubeflow", "app": "ml-pipeline"}}],
                              "toPorts": [{"ports": [{"port": "8888", "protocol": "TCP"}]}]}]}, ns="jupyterhub")
    assert decide(NOTEBOOK, API, 8888, "TCP", [to_api], CILIUM).allowed
    assert not decide(NOTEBOOK, API, 8887, "TCP", [to_api], CILIUM).allowed
    same_ns_only = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [{"matchLabels": {"app": "ml-pipeline"}}]}]},
                       ns="jupyterhub")
    assert not decide(NOTEBOOK, API, 8888, "TCP", [same_ns_only], CILIUM).allowed, "a CNP's selectors stay in its namespace"
    apiserver = cnp({"endpointSelector": {}, "egress": [{"toEntities": ["kube-apiserver"]}]}, ns="jupyterhub")
    assert decide(NOTEBOOK, APISERVER_NODE, 6443, "TCP", [apiserver], CILIUM).allowed
    l7 = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [{}], "toPorts": [
        {"ports": [{"port": "8888"}], "rules": {"http": [{"method": "GET"}]}}]}]}, ns="jupyterhub")
    assert decide(NOTEBOOK, API, 8888, "TCP", [l7], CILIUM).unsupported


# --- Cilium selectors as Cilium parses them (pkg/k8s/apis/cilium.io/utils/utils.go, v1.18.2 to v1.20.0) ------


METADATA = Peer("metadata", EXTERNAL, addresses=("169.254.169.254/32",), entities=frozenset({"world"}))
TRAINER = pod("training", {"app": "trainer"})
DENY_METADATA = {"egressDeny": [{"toCIDR": ["169.254.169.254/32"]}], "enableDefaultDeny": {"egress": False}}


@pytest.mark.parametrize("key", ["k8s:io.kubernetes.pod.namespace", "io.kubernetes.pod.namespace"])
def test_a_namespaced_cilium_policy_applies_in_its_own_namespace_whatever_its_selector_names(key):
    """ParseToCiliumRule sets k8s:io.kubernetes.pod.namespace to the policy's namespace: a CiliumNetworkPolicy in
    jupyterhub whose endpointSelector names training never touches training's pods. Before, the check took it to
    keep them off the metadata server: a false "kept closed"."""
    foreign = cnp({"endpointSelector": {"matchLabels": {key: "training"}}, **DENY_METADATA}, ns="jupyterhub")
    assert decide(TRAINER, METADATA, 80, "TCP", [foreign], CILIUM).allowed
    notebook = decide(NOTEBOOK, METADATA, 80, "TCP", [foreign], CILIUM)
    if key.startswith("k8s:"):  # replaced by the policy's own namespace: it selects jupyterhub's pods
        assert not notebook.allowed and notebook.egress.denied_by == ["CiliumNetworkPolicy/jupyterhub/c"]
    else:  # any:, beside the k8s: match Cilium adds: both must hold, so it selects nothing
        assert notebook.allowed
    own = cnp({"endpointSelector": {"matchLabels": {"app": "trainer"}}, **DENY_METADATA}, ns="training")
    assert not decide(TRAINER, METADATA, 80, "TCP", [own], CILIUM).allowed
    clusterwide = cnp({"endpointSelector": {"matchLabels": {key: "training"}}, **DENY_METADATA})
    assert not decide(TRAINER, METADATA, 80, "TCP", [clusterwide], CILIUM).allowed, "a CCNP selects as written"


def test_namespace_label_peers_span_namespaces_and_a_plain_peer_stays_in_the_policys():
    """getEndpointSelector pins a CiliumNetworkPolicy's peer to its namespace unless the peer names a namespace or
    namespace labels (io.cilium.k8s.namespace.labels.*): before, such a peer was read as same-namespace."""
    by_ns_labels = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [
        {"matchLabels": {"k8s:io.cilium.k8s.namespace.labels.team": "kubeflow", "app": "ml-pipeline"}}]}]}, ns="jupyterhub")
    assert decide(NOTEBOOK, API, 8888, "TCP", [by_ns_labels], CILIUM).allowed
    expr = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [{"matchExpressions": [
        {"key": "io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name", "operator": "In", "values": ["kubeflow"]}]}]}]},
               ns="jupyterhub")
    assert decide(NOTEBOOK, API, 8888, "TCP", [expr], CILIUM).allowed
    other_team = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [
        {"matchLabels": {"io.cilium.k8s.namespace.labels.team": "katib", "app": "ml-pipeline"}}]}]}, ns="jupyterhub")
    assert not decide(NOTEBOOK, API, 8888, "TCP", [other_team], CILIUM).allowed
    plain = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [{"matchLabels": {"app": "ml-pipeline"}}]}]},
                ns="jupyterhub")
    assert not decide(NOTEBOOK, API, 8888, "TCP", [plain], CILIUM).allowed


def test_a_pods_service_account_is_part_of_its_cilium_identity():
    """SanitizePodLabels adds io.cilium.k8s.policy.serviceaccount (and the cluster's name) to every pod identity."""
    runner = Peer("step", POD, "kubeflow", {"app": "step"}, {"kubernetes.io/metadata.name": "kubeflow"}, (), POD_CIDR,
                  service_account="pipeline-runner")
    by_account = cnp({"endpointSelector": {"matchLabels": {"app": "ml-pipeline"}}, "ingress": [{"fromEndpoints": [
        {"matchLabels": {"io.cilium.k8s.policy.serviceaccount": "pipeline-runner"}}]}]}, ns="kubeflow")
    assert decide(runner, API, 8888, "TCP", [by_account], CILIUM).allowed
    other = Peer("other", POD, "kubeflow", {"app": "step"}, {"kubernetes.io/metadata.name": "kubeflow"}, (), POD_CIDR,
                 service_account="default")
    assert not decide(other, API, 8888, "TCP", [by_account], CILIUM).allowed
    subject = cnp({"endpointSelector": {"matchLabels": {"k8s:io.cilium.k8s.policy.serviceaccount": "pipeline-runner"}},
                   **DENY_METADATA}, ns="kubeflow")
    assert not decide(runner, METADATA, 80, "TCP", [subject], CILIUM).allowed
    assert decide(other, METADATA, 80, "TCP", [subject], CILIUM).allowed
    local = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [{"matchLabels": {
        "io.cilium.k8s.policy.cluster": "default", "app": "ml-pipeline", "io.kubernetes.pod.namespace": "kubeflow"}}]}]},
                ns="jupyterhub")
    assert decide(NOTEBOOK, API, 8888, "TCP", [local], CILIUM).allowed


def test_a_reserved_peer_selects_the_entity():
    """A peer with a reserved: key is taken as written (no namespace added): reserved:kube-apiserver is the API server."""
    reserved = cnp({"endpointSelector": {}, "egress": [{"toEndpoints": [{"matchLabels": {"reserved:kube-apiserver": ""}}]}]},
                   ns="jupyterhub")
    assert decide(NOTEBOOK, APISERVER_NODE, 6443, "TCP", [reserved], CILIUM).allowed
    assert not decide(NOTEBOOK, API, 8888, "TCP", [reserved], CILIUM).allowed


# --- what to do about a denied flow depends on what is blocked ---------------------------------


def test_the_fix_for_a_denied_flow_fits_the_other_side_pod_node_api_server_or_address():
    """A NetworkPolicy selects pods only: "select it with podSelector/namespaceSelector" is the advice for a pod, never
    for a node or the API server on the nodes (before, every denied flow got it)."""
    from gpu_platform.preflight.fit.flows import _explain, _fix

    kubelet = Peer("kubelets", NODE, addresses=("10.0.0.0/24",), entities=frozenset({"host", "remote-node"}))
    egress_only_private = [netpol("jupyterhub", PRIVATE_EGRESS)]
    to_pod = decide(NOTEBOOK, API, 8888, "TCP", egress_only_private, CILIUM)
    assert "select it with podSelector/namespaceSelector instead" in _explain(to_pod, NOTEBOOK, API, CILIUM)
    assert "selecting the other side with podSelector/namespaceSelector" in _fix(to_pod, NOTEBOOK, API, CILIUM)
    to_apiserver = decide(NOTEBOOK, APISERVER_NODE, 6443, "TCP", egress_only_private, CILIUM)
    text, fix = _explain(to_apiserver, NOTEBOOK, APISERVER_NODE, CILIUM), _fix(to_apiserver, NOTEBOOK, APISERVER_NODE, CILIUM)
    assert "to the API server (on the nodes) unless its policy-cidr-match-mode lists nodes" in text
    assert "podSelector/namespaceSelector instead" not in text
    assert "policy-cidr-match-mode: nodes" in fix and "toEntities: [kube-apiserver]" in fix and "10.0.0.0/24" in fix
    to_kubelet = decide(NOTEBOOK, kubelet, 10250, "TCP", egress_only_private, CILIUM)
    assert "toEntities: [host, remote-node]" in _fix(to_kubelet, NOTEBOOK, kubelet, CILIUM)
    nothing = [netpol("jupyterhub", {"podSelector": {}, "policyTypes": ["Egress"]})]
    upstream = decide(NOTEBOOK, APISERVER_NODE, 6443, "TCP", nothing, UPSTREAM)
    fix = _fix(upstream, NOTEBOOK, APISERVER_NODE, UPSTREAM)
    assert "with an ipBlock covering its addresses (10.0.0.0/24)" in fix and "toEntities" not in fix
    outside = decide(NOTEBOOK, INTERNET, 443, "TCP", nothing, CILIUM)
    assert "with an ipBlock covering an address outside the cluster's addresses" in _fix(outside, NOTEBOOK, INTERNET, CILIUM)


# --- the shipped stacks ----------------------------------------------------------------------


def _stack(stack: str):
    cfg = parse_config(load_stack(stack).raw, stack)
    model = cluster_model(cfg, stack_plan(stack))
    return model, rendered_copy(stack)


def _flows(report):
    return {(r.name, r.protocol): r for r in report.flows.results}


@pytest.mark.parametrize("stack", STACKS)
def test_every_flow_the_platform_needs_is_allowed_on_every_shipped_stack(stack):
    need_charts()
    model, releases = _stack(stack)
    report = check_fit(model, releases)
    assert not report.by_check("flows"), [p.reason for p in report.by_check("flows")]
    flows = _flows(report)
    for name in ("notebook to Pipelines", "notebook to Katib's DB manager", "hub to the Kubernetes API",
                 "notebook to the Kubernetes API", "proxy to a notebook", "notebook to the hub",
                 "training to the checkpoint bucket", "Prometheus to gpu-system/dcgm-exporter (metrics)",
                 "Prometheus to every kubelet (10250)", "API server to webhook kueue-system/kueue-webhook-service",
                 "API server to webhook kubeflow/katib-controller"):
        assert flows[(name, "TCP")].verdict == "allowed", name
    assert flows[("notebook to DNS", "UDP")].verdict == "allowed"
    cilium = model.network.dataplane in ("cilium", "gke-dataplane-v2")
    assert ("Cilium" in report.flows.dataplane) == cilium


def _plant(releases, obj):
    rel = next(r for r in releases if r.name == "platform-kubeflow-pipelines")
    return [dataclasses.replace(r, objects=r.objects + [obj]) if r is rel else r for r in releases]


PIPELINES_LOCKDOWN = {
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "ml-pipeline-from-kubeflow-only", "namespace": "kubeflow"},
    "spec": {"podSelector": {"matchLabels": {"app": "ml-pipeline"}}, "policyTypes": ["Ingress"],
             "ingress": [{"from": [{"podSelector": {}}]}]},
}


@pytest.mark.parametrize("stack", ["linode-dev", "gcp-prod", "aws-prod"])
def test_a_planted_policy_that_drops_notebook_to_pipelines_fails_naming_the_flow_and_the_policy(stack):
    need_charts()
    model, releases = _stack(stack)
    report = check_fit(model, _plant(releases, PIPELINES_LOCKDOWN))
    problems = report.by_check("flows")
    assert [p for p in problems if "'notebook to Pipelines'" in p.reason], [p.reason for p in problems]
    mine = next(p for p in problems if "'notebook to Pipelines'" in p.reason)
    assert mine.object == "NetworkPolicy/kubeflow/ml-pipeline-from-kubeflow-only"
    assert mine.release == "platform-kubeflow-pipelines"
    assert "ingress is isolated" in mine.reason and "kfp.Client()" in mine.reason
    # pipeline steps run in kubeflow: the planted policy still lets them in
    assert _flows(report)[("pipeline step to Pipelines", "TCP")].verdict == "allowed"


def _ipblock_only(releases):
    """The singleuser NetworkPolicy as z2jh renders it from `privateIPs` alone (the shipped values before
    the fix): the pod-selector rules to the platform's services taken out."""
    from gpu_platform.components.platform.notebooks import notebook_service_rules

    extra = notebook_service_rules()
    out = []
    for r in releases:
        objs = copy.deepcopy(r.objects)
        for o in objs:
            if o.get("kind") == "NetworkPolicy" and o["metadata"]["name"] == "singleuser":
                before = len(o["spec"]["egress"])
                o["spec"]["egress"] = [rule for rule in o["spec"]["egress"] if rule not in extra]
                assert len(o["spec"]["egress"]) == before - len(extra)
        out.append(dataclasses.replace(r, objects=objs))
    return out


@pytest.mark.parametrize("stack", ["linode-dev", "gcp-prod"])
def test_z2jh_ipblock_only_egress_fails_on_the_cilium_stacks(stack):
    need_charts()
    model, releases = _stack(stack)
    report = check_fit(model, _ipblock_only(releases))
    denied = {r.name for r in report.flows.failed}
    assert {"notebook to Pipelines", "notebook to Katib's DB manager"} <= denied, denied
    reason = next(p.reason for p in report.by_check("flows") if "'notebook to Pipelines'" in p.reason)
    assert "does not apply ipBlock/CIDR rules to a pod" in reason and "NetworkPolicy/jupyterhub/singleuser" in reason


def test_z2jh_ipblock_only_egress_is_enough_where_ipblock_matches_pods():
    """The VPC CNI's network policy agent applies ipBlock to pod addresses (upstream semantics): aws-prod's
    notebooks reached Pipelines before the fix; the check tells the CNIs apart."""
    need_charts()
    model, releases = _stack("aws-prod")
    assert not check_fit(model, _ipblock_only(releases)).by_check("flows")


def test_the_shipped_notebook_values_carry_the_pod_selector_rules():
    from gpu_platform.components.platform.notebooks import NOTEBOOK_EGRESS, notebook_service_rules

    assert NOTEBOOK_EGRESS["egress"] == notebook_service_rules()
    targets = {(r["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
                tuple(r["to"][0]["podSelector"]["matchLabels"].items()), r["ports"][0]["port"]) for r in NOTEBOOK_EGRESS["egress"]}
    assert ("kubeflow", (("app", "ml-pipeline"),), 8888) in targets
    assert ("kubeflow", (("katib.kubeflow.org/component", "db-manager"),), 6789) in targets
    assert ("kubeflow", (("app", "seaweedfs"),), 8333) in targets, "the artifact store's S3 port (Service port 9000)"
    assert not any("mysql" in str(t) for t in targets), "no way to the databases"


def test_without_policy_cidr_match_mode_nodes_the_hub_cannot_reach_a_kubeadm_api_server():
    """Linode's API server runs on the control-plane nodes: the hub's ipBlock reaches it only because the
    Cilium chart sets policyCIDRMatchMode [nodes] (the rendered cilium-config is read)."""
    need_charts()
    model, releases = _stack("linode-dev")
    for r in releases:
        for o in r.objects:
            if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "cilium-config":
                o["data"].pop("policy-cidr-match-mode")
    report = check_fit(model, releases)
    denied = {r.name for r in report.flows.failed}
    assert {"hub to the Kubernetes API", "notebook to the Kubernetes API"} <= denied, denied
    assert "policy-cidr-match-mode: none" in report.flows.dataplane


def test_a_service_whose_selector_matches_no_pod_is_an_unresolved_flow():
    need_charts()
    model, releases = _stack("gcp-prod")
    for r in releases:
        for o in r.objects:
            if o.get("kind") == "Service" and o["metadata"].get("name") == "ml-pipeline":
                o["spec"]["selector"] = {"app": "ml-pipeline-renamed"}
    report = check_fit(model, releases)
    r = _flows(report)[("notebook to Pipelines", "TCP")]
    assert r.verdict == "unresolved" and "no rendered pod carries" in r.reason


# --- through the command -----------------------------------------------------------------------


def test_preflight_reports_the_flows_and_exits_3_on_a_planted_policy(tmp_path, capsys):
    need_charts()
    from tests.test_hostile_input import run_main

    job = tmp_path / "job.yaml"
    job.write_text((ROOT / "examples" / "training" / "trainjob-checkpointed.yaml").read_text().rstrip("\n")
                   + "\n---\n" + yaml.safe_dump(PIPELINES_LOCKDOWN, sort_keys=False))
    out = tmp_path / "build"
    code, text, _ = run_main(["linode-dev", "--no-policies", "-vv", "--job", str(job), "--out", str(out)], capsys)
    assert code == 3, text[-3000:]
    assert "[flows] NetworkPolicy/kubeflow/ml-pipeline-from-kubeflow-only" in text
    assert "flow 'notebook to Pipelines'" in text
    assert "DENIED notebook to Pipelines" in text and "ok   hub to the Kubernetes API" in text
    fit = json.loads((out / "linode-dev" / "fit.json").read_text())
    flows = {f["name"]: f for f in fit["report"]["flows"]["flows"]}
    assert flows["notebook to Pipelines"]["verdict"] == "denied"
    assert flows["notebook to Pipelines"]["policies"] == ["NetworkPolicy/kubeflow/ml-pipeline-from-kubeflow-only"]
    summary = json.loads((out / "linode-dev" / "preflight.json").read_text())["clusterFit"]["flows"]
    assert summary["checked"] == len(fit["report"]["flows"]["flows"])
    assert [f["name"] for f in summary["failed"]] == ["notebook to Pipelines"]


def _without(releases, kind, name):
    return [dataclasses.replace(r, objects=[o for o in r.objects if not (o.get("kind") == kind and
                                                                         o["metadata"]["name"] == name)])
            for r in releases]


def test_what_must_stay_closed_is_checked_too_the_cilium_deny_policy_included():
    """Training pods must not reach 169.254.169.254 on Linode (node user data) and EKS (node credentials).
    On Linode two things keep it closed: training-egress and the clusterwide Cilium deny policy, evaluated
    with Cilium's deny semantics; either alone is enough, neither is a problem naming the flow."""
    need_charts()
    model, releases = _stack("linode-dev")
    flow = "training to the cloud metadata server"
    assert _flows(check_fit(model, releases))[(flow, "TCP")].verdict == "denied"
    no_np = _without(releases, "NetworkPolicy", "training-egress")
    assert _flows(check_fit(model, no_np))[(flow, "TCP")].verdict == "denied", "the CCNP's egressDeny still holds"
    neither = _without(no_np, "CiliumClusterwideNetworkPolicy", "deny-instance-metadata")
    report = check_fit(model, neither)
    assert _flows(report)[(flow, "TCP")].verdict == "allowed"
    assert any(f"flow '{flow}'" in p.reason and "is allowed, but must not be" in p.reason for p in report.by_check("flows"))
    aws_model, aws = _stack("aws-prod")
    assert [r.name for r in check_fit(aws_model, _without(aws, "NetworkPolicy", "training-egress")).flows.failed] == [flow]
    gcp_model, gcp = _stack("gcp-prod")
    assert (flow, "TCP") not in _flows(check_fit(gcp_model, gcp)), "GKE's training pods need the metadata server"


def test_a_policy_with_an_address_that_is_no_cidr_is_a_render_problem_not_a_traceback():
    need_charts()
    model, releases = _stack("aws-prod")
    bad = copy.deepcopy(PIPELINES_LOCKDOWN)
    bad["spec"]["ingress"] = [{"from": [{"ipBlock": {"cidr": "10.0.0.300/8"}}]}]
    report = check_fit(model, _plant(releases, bad))
    assert any("a network policy cannot be read" in p.reason for p in report.by_check("render"))


# --- the data paths users need, and the databases nobody but their servers may reach (platform review 7, 8) -----

DATABASE_FLOWS = ("notebook to Pipelines' MySQL", "training to Pipelines' MySQL", "pipeline step to Pipelines' MySQL",
                  "notebook to Katib's MySQL", "training to Katib's MySQL", "trial to Katib's MySQL")


@pytest.mark.parametrize("stack", STACKS)
def test_notebooks_training_and_steps_never_reach_the_databases_their_servers_do(stack):
    """Pipelines' MySQL lets root in without a password, Katib's with the password its manifest ships; upstream
    installs no NetworkPolicy for either. Before: on upstream CNIs (aws-prod) a notebook reached both through z2jh's
    privateIPs ipBlock, and on every stack a training pod through training-egress's namespaceSelector {} (and on
    gcp-prod through no policy at all); nothing checked it."""
    need_charts()
    model, releases = _stack(stack)
    report = check_fit(model, releases)
    flows = _flows(report)
    for name in DATABASE_FLOWS:
        assert flows[(name, "TCP")].verdict == "denied" and flows[(name, "TCP")].expected == "denied", name
    for name in ("Pipelines API to MySQL", "ML Metadata to MySQL", "Katib DB manager to MySQL"):
        assert flows[(name, "TCP")].verdict == "allowed", name
    assert not report.by_check("flows"), [p.reason for p in report.by_check("flows")]


@pytest.mark.parametrize("stack,opened", [
    ("aws-prod", {"notebook to Pipelines' MySQL", "training to Pipelines' MySQL", "pipeline step to Pipelines' MySQL"}),
    ("linode-dev", {"training to Pipelines' MySQL", "pipeline step to Pipelines' MySQL"}),
])
def test_without_the_database_policy_the_check_fails_naming_each_opened_flow(stack, opened):
    need_charts()
    model, releases = _stack(stack)
    report = check_fit(model, _without(releases, "NetworkPolicy", "pipelines-mysql-clients"))
    assert {r.name for r in report.flows.failed} == opened
    reasons = [p.reason for p in report.by_check("flows")]
    for name in opened:
        assert any(f"flow '{name}'" in r and "is allowed, but must not be" in r and "MYSQL_ALLOW_EMPTY_PASSWORD" in r
                   for r in reasons), (name, reasons)


def test_the_database_policies_admit_the_pinned_manifests_servers_by_their_labels():
    """The selectors are the pinned manifests' (../shared/charts/kustomize): every Deployment whose pods carry the
    database's settings (DBCONFIG_*, MYSQL_HOST, DB_PASSWORD) is admitted, and nothing else of those installs."""
    from gpu_platform.components.platform.kubeflow import render_database_policies
    from gpu_platform.preflight.fit.selectors import label_selector_matches
    from tests.fit_support import CHARTS

    need_charts()
    policies = {p["metadata"]["name"]: p["spec"] for p in render_database_policies()}
    for target, manifest, db_label in (
            ("pipelines-mysql-clients", "pipelines-2.17.0-platform-agnostic.yaml", {"app": "mysql"}),
            ("katib-mysql-clients", "katib-v0.19.0-katib-standalone.yaml", {"katib.kubeflow.org/component": "mysql"})):
        spec = policies[target]
        docs = [d for d in yaml.safe_load_all((CHARTS / "kustomize" / manifest).read_text()) if d]
        deployments = {d["metadata"]["name"]: d["spec"]["template"] for d in docs if d["kind"] == "Deployment"}
        clients = {name for name, t in deployments.items()
                   if any(e["name"].startswith(("DBCONFIG_", "MYSQL_HOST", "DB_PASSWORD"))
                          for c in t["spec"]["containers"] for e in c.get("env") or [])
                   and not label_selector_matches(spec["podSelector"], t["metadata"]["labels"])}
        admitted = {name for name, t in deployments.items()
                    if any(label_selector_matches(peer["podSelector"], t["metadata"]["labels"])
                           for peer in spec["ingress"][0]["from"])}
        assert admitted == clients, (target, admitted, clients)
        (db,) = [name for name, t in deployments.items() if label_selector_matches(spec["podSelector"], t["metadata"]["labels"])]
        assert all(deployments[db]["metadata"]["labels"][k] == v for k, v in db_label.items())
        assert spec["ingress"][0]["ports"] == [{"port": 3306, "protocol": "TCP"}]


@pytest.mark.parametrize("stack", STACKS)
def test_a_notebook_reaches_the_artifact_store_ml_pipeline_names(stack):
    """Upstream's NetworkPolicy `seaweedfs` admits pods of kubeflow, of kubeflow-profile namespaces and of
    istio-system only: before, no flow named the artifact store from a notebook, and a notebook in jupyterhub could
    not read a run's outputs on any CNI. The destination is where ml-pipeline's OBJECTSTORECONFIG_HOST points."""
    need_charts()
    model, releases = _stack(stack)
    flows = _flows(check_fit(model, releases))
    r = flows[("notebook to the Pipelines artifact store", "TCP")]
    assert r.verdict == "allowed" and r.destination == "Service kubeflow/seaweedfs" and r.port == 8333
    assert flows[("pipeline step to the object store", "TCP")].destination == "Service kubeflow/seaweedfs"
    denied = check_fit(model, _without(releases, "NetworkPolicy", "seaweedfs-from-notebooks"))
    assert [r.name for r in denied.flows.failed] == ["notebook to the Pipelines artifact store"]
    assert any("NetworkPolicy/kubeflow/seaweedfs" in p.reason for p in denied.by_check("flows"))


def test_the_artifact_store_follows_ml_pipeline_s_object_store_setting():
    """An external S3 for Pipelines (OBJECTSTORECONFIG_HOST set to a bucket's endpoint): the flows go there, and the
    notebooks' way to SeaweedFS is no longer what they need."""
    need_charts()
    model, releases = _stack("aws-prod")
    for r in releases:
        for o in r.objects:
            if o.get("kind") == "Deployment" and o["metadata"]["name"] == "ml-pipeline":
                for e in o["spec"]["template"]["spec"]["containers"][0]["env"]:
                    if e["name"] == "OBJECTSTORECONFIG_HOST":
                        e["value"] = "s3.us-east-1.amazonaws.com"
                    if e["name"] == "OBJECTSTORECONFIG_SECURE":
                        e["value"] = "true"
                    if e["name"] == "OBJECTSTORECONFIG_PORT":
                        e["value"] = "443"
    report = check_fit(model, releases)
    r = _flows(report)[("notebook to the Pipelines artifact store", "TCP")]
    assert r.destination == "Pipelines' artifact store (https://s3.us-east-1.amazonaws.com:443)" and r.port == 443
    assert any("s3.us-east-1.amazonaws.com is resolved at run time" in n for n in report.flows.notes)
