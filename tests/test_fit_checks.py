"""Cluster-fit checks (gpu_platform/preflight/fit/checks.py, pods.py) on small synthetic objects: for every check a
violating case is reported and the fixed case passes. Pure functions, no rendering."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Optional

import pytest

from gpu_platform.components.capacity import GI, MI, Allocatable
from gpu_platform.preflight.fit import checks as C
from gpu_platform.preflight.fit.checks import check_fit, pss_violations
from gpu_platform.preflight.fit.model import ClusterModel, NodeGroup
from gpu_platform.preflight.fit.pods import effective_requests, pod_templates, trainjob_pods

@dataclass
class RenderedRelease:
    """The fields of gpu_platform.preflight.fit.render.RenderedRelease the checks read (the interface in
    notes/fit-interface.md); the real class is exercised by the rendered-stack tests."""

    name: str
    resource_name: str
    urn: str
    source: str
    chart: Optional[str]
    version: Optional[str]
    namespace: Optional[str]
    objects: list
    depends_on: frozenset = frozenset()

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CP_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
OS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}


def group(name, role="system", taints=(), labels=None, cpu=3800, mem_gib=7, gpus=0, pods=110, lo=1, hi=1, itype="x"):
    return NodeGroup(name, role, lo, hi, {**OS, **(labels or {})}, list(taints),
                     Allocatable(cpu, int(mem_gib * GI), gpus, pods), itype, "on-demand")


def cp_group():
    return group("control-plane", "control-plane", [CP_TAINT], {"node-role.kubernetes.io/control-plane": ""})


def gpu_group(name="a10g", cpu=3920, mem_gib=15.0, gpus=1, hi=2):
    return group(name, "gpu", [GPU_TAINT], {"gpu-platform.io/pool": name, "nvidia.com/gpu.present": "true"},
                 cpu=cpu, mem_gib=mem_gib, gpus=gpus, lo=0, hi=hi)


def model(*groups, ports=None, ert=False):
    return ClusterModel("test", "1.33", list(groups), ports, [], ert)


def rel(name, objects, depends_on=(), source="helm"):
    return RenderedRelease(name, f"{name}-res", f"urn:{name}", source, None, None, None, list(objects), frozenset(depends_on))


def container(name="c", cpu=None, mem=None, gpu=None, limits=None, **extra):
    req = {k: v for k, v in (("cpu", cpu), ("memory", mem), ("nvidia.com/gpu", gpu)) if v is not None}
    res = {}
    if req:
        res["requests"] = req
    if limits:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res, **extra}


def pod_spec(*containers, **extra):
    return {"containers": list(containers) or [container(cpu="100m", mem="64Mi")], **extra}


def deployment(name, ns="apps", spec=None, replicas=1, labels=None, kind="Deployment"):
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, **(labels or {})}}, "spec": spec or pod_spec()}}}


def daemonset(name, ns="kube-system", spec=None):
    d = deployment(name, ns, spec, kind="DaemonSet")
    del d["spec"]["replicas"]
    return d


def namespace(name, labels=None):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def checks_of(report, check):
    return [p for p in report.problems if p.check == check]


# ---------------------------------------------------------------------------------------------
# Matching primitives
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("toleration, taint, expected", [
    ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU_TAINT, True),
    ({"operator": "Exists"}, GPU_TAINT, True),  # empty key + Exists tolerates everything
    ({"key": "", "operator": "Equal", "value": "present"}, GPU_TAINT, False),
    ({"key": "nvidia.com/gpu", "value": "present"}, GPU_TAINT, True),  # operator defaults to Equal
    ({"key": "nvidia.com/gpu", "value": "absent"}, GPU_TAINT, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, GPU_TAINT, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU_TAINT, True),
    ({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}, CP_TAINT, True),
    ({"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": ""}, CP_TAINT, True),
])
def test_tolerations(toleration, taint, expected):
    assert C.tolerates(toleration, taint) is expected


def test_prefer_no_schedule_does_not_block():
    assert C.untolerated([{"key": "a", "effect": "PreferNoSchedule"}], []) == []


@pytest.mark.parametrize("expr, expected", [
    ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
    ({"key": "zone", "operator": "In", "values": ["c"]}, False),
    ({"key": "zone", "operator": "NotIn", "values": ["c"]}, True),
    ({"key": "missing", "operator": "NotIn", "values": ["c"]}, True),
    ({"key": "zone", "operator": "Exists"}, True),
    ({"key": "missing", "operator": "Exists"}, False),
    ({"key": "missing", "operator": "DoesNotExist"}, True),
    ({"key": "gpus", "operator": "Gt", "values": ["3"]}, True),
    ({"key": "gpus", "operator": "Gt", "values": ["4"]}, False),
    ({"key": "gpus", "operator": "Lt", "values": ["5"]}, True),
    ({"key": "missing", "operator": "Lt", "values": ["5"]}, False),
])
def test_node_affinity_operators(expr, expected):
    labels = {"zone": "a", "gpus": "4"}
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [expr]}]}}}
    assert C.node_affinity_matches(aff, labels) is expected


def test_node_affinity_terms_are_ored():
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    assert C.node_affinity_matches(aff, {"zone": "a"})


# ---------------------------------------------------------------------------------------------
# Effective requests
# ---------------------------------------------------------------------------------------------


def test_effective_requests_init_max_vs_sum_sidecars_and_overhead():
    spec = {
        "initContainers": [container("init-big", cpu="2", mem="1Gi"),
                           container("sidecar", cpu="100m", mem="100Mi", restartPolicy="Always"),
                           container("init-after-sidecar", cpu="1500m")],
        "containers": [container("a", cpu="500m", mem="256Mi"), container("b", cpu="500m", mem="256Mi")],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    req = effective_requests(spec)
    # cpu: max(app 1000 + sidecar 100 = 1100, init 2000, 1500 + 100) = 2000, + 250 overhead
    assert req["cpu"] == 2250
    # memory: max(512 + 100 = 612Mi, 1024Mi, 0 + 100Mi) = 1Gi, + 120Mi
    assert req["memory"] == (1024 + 120) * MI


def test_limits_only_default_requests():
    assert effective_requests(pod_spec(container(limits={"cpu": "2", "memory": "1Gi"})))["cpu"] == 2000


# ---------------------------------------------------------------------------------------------
# schedulable
# ---------------------------------------------------------------------------------------------


def test_ordinary_pods_with_only_tainted_groups_are_unschedulable_then_fit_a_system_pool():
    releases = [rel("kueue", [deployment("kueue-controller-manager", "kueue-system")])]
    bad = check_fit(model(cp_group(), gpu_group()), releases)
    [p] = checks_of(bad, "schedulable")
    assert p.object == "Deployment/kueue-system/kueue-controller-manager"
    assert "control-plane: taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated" in p.reason
    assert "a10g: taint nvidia.com/gpu=present:NoSchedule not tolerated" in p.reason
    assert "untainted" in p.fix
    good = check_fit(model(cp_group(), group("system"), gpu_group()), releases)
    assert good.ok, good.problems
    assert [(pl.group, pl.pods) for pl in good.placements] == [("system", 1)]


def test_requests_larger_than_allocatable():
    big = deployment("big", spec=pod_spec(container(cpu="5", mem="1Gi")))
    r = check_fit(model(group("system")), [rel("r", [big])])
    [p] = checks_of(r, "schedulable")
    assert "cpu 5 > 3800m allocatable" in p.reason and "lower the pod's requests" in p.fix
    small = deployment("big", spec=pod_spec(container(cpu="3", mem="1Gi")))
    assert check_fit(model(group("system")), [rel("r", [small])]).ok


def test_node_selector_and_affinity():
    sel = deployment("d", spec=pod_spec(nodeSelector={"gpu-platform.io/role": "system"}))
    assert checks_of(check_fit(model(group("system")), [rel("r", [sel])]), "schedulable")
    assert check_fit(model(group("system", labels={"gpu-platform.io/role": "system"})), [rel("r", [sel])]).ok
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["infra"]}]}]}}}
    d = deployment("d", spec=pod_spec(affinity=aff))
    [p] = checks_of(check_fit(model(group("system")), [rel("r", [d])]), "schedulable")
    assert "required node affinity" in p.reason
    assert check_fit(model(group("system", labels={"tier": "infra"})), [rel("r", [d])]).ok


def test_gpu_pod_tolerated_by_extended_resource_toleration_only_where_the_api_server_adds_it():
    d = deployment("train", spec=pod_spec(container(cpu="1", mem="1Gi", gpu="1")))
    assert checks_of(check_fit(model(gpu_group(), ert=False), [rel("r", [d])]), "schedulable")
    assert check_fit(model(gpu_group(), ert=True), [rel("r", [d])]).ok


def test_limitrange_default_requests_count_for_scheduling():
    d = deployment("d", spec=pod_spec(container()))  # no requests at all
    lr = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "lr", "namespace": "apps"},
          "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "5"}, "default": {"cpu": "6"}}]}}
    [p] = checks_of(check_fit(model(group("system")), [rel("r", [d, lr])]), "schedulable")
    assert "cpu 5" in p.reason
    assert check_fit(model(group("system")), [rel("r", [d])]).ok


# ---------------------------------------------------------------------------------------------
# DaemonSets
# ---------------------------------------------------------------------------------------------


def test_gpu_daemonset_that_tolerates_no_gpu_taint_is_reported_and_counted_on_every_node_once_fixed():
    gpu_sel = {"nvidia.com/gpu.present": "true"}
    bad = daemonset("dcgm-exporter", "monitoring", pod_spec(container(cpu="100m", mem="128Mi"), nodeSelector=gpu_sel))
    r = check_fit(model(group("system"), gpu_group(hi=3)), [rel("dcgm", [bad])])
    [p] = checks_of(r, "schedulable")
    assert p.object == "DaemonSet/monitoring/dcgm-exporter" and "land on no node group" in p.reason
    good = copy.deepcopy(bad)
    good["spec"]["template"]["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    r = check_fit(model(group("system"), gpu_group(hi=3)), [rel("dcgm", [good])])
    assert r.ok
    assert [(pl.group, pl.pods) for pl in r.placements] == [("a10g", 3)]
    assert r.pods == 3


def test_daemonset_not_meant_for_any_group_is_not_reported():
    win = daemonset("exporter-windows", spec=pod_spec(nodeSelector={"kubernetes.io/os": "windows"}))
    assert check_fit(model(group("system")), [rel("r", [win])]).ok


def test_untargeted_daemonset_on_every_untainted_node_and_reported_when_all_are_tainted():
    ds = daemonset("node-exporter", spec=pod_spec(container(cpu="100m", mem="64Mi")))
    r = check_fit(model(group("system", hi=2), gpu_group()), [rel("r", [ds])])
    assert r.ok and [(pl.group, pl.pods) for pl in r.placements] == [("system", 2)]
    assert checks_of(check_fit(model(cp_group(), gpu_group()), [rel("r", [ds])]), "schedulable")


# ---------------------------------------------------------------------------------------------
# packing
# ---------------------------------------------------------------------------------------------


def test_packing_first_fit_decreasing_with_daemonsets_first_and_headroom():
    ds = daemonset("agent", spec=pod_spec(container(cpu="800m", mem="512Mi")))
    web = deployment("web", spec=pod_spec(container(cpu="1500m", mem="1Gi")), replicas=2)
    r = check_fit(model(group("system", cpu=3800, mem_gib=7)), [rel("r", [ds, web])])
    # 800 + 2 x 1500 = 3800m: exactly full
    assert r.ok, r.problems
    h = r.headroom["system"]
    assert (h["cpuMillis"], h["memoryBytes"], h["pods"]) == (0, 7 * GI - 512 * MI - 2 * GI, 107)
    web3 = deployment("web", spec=pod_spec(container(cpu="1500m", mem="1Gi")), replicas=3)
    r = check_fit(model(group("system", cpu=3800, mem_gib=7)), [rel("r", [ds, web3])])
    [p] = checks_of(r, "packing")
    assert p.object == "Deployment/apps/web" and "1 of 3 pods" in p.reason
    assert check_fit(model(group("system", cpu=3800, mem_gib=7, hi=2)), [rel("r", [ds, web3])]).ok


def test_pod_slots_are_counted():
    many = deployment("many", spec=pod_spec(container(cpu="1m", mem="1Mi")), replicas=5)
    assert checks_of(check_fit(model(group("system", pods=4)), [rel("r", [many])]), "packing")
    assert check_fit(model(group("system", pods=5)), [rel("r", [many])]).ok


def test_required_self_anti_affinity_spreads_replicas():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "db"}}}]}}
    db = deployment("db", spec=pod_spec(affinity=anti), replicas=2, kind="StatefulSet")
    assert checks_of(check_fit(model(group("system", hi=1)), [rel("r", [db])]), "packing")
    assert check_fit(model(group("system", hi=2)), [rel("r", [db])]).ok


# ---------------------------------------------------------------------------------------------
# admission: LimitRange
# ---------------------------------------------------------------------------------------------


def _lr(ns="training", **item):
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "training-defaults", "namespace": ns},
            "spec": {"limits": [{"type": "Container", **item}]}}


def test_default_limits_make_the_api_server_refuse_a_multi_gpu_pod_that_sets_only_requests():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ddp", "namespace": "training"},
           "spec": {"template": {"spec": pod_spec(container(cpu="16", mem="64Gi", gpu="4"))}}}
    m = model(gpu_group("a100x4", cpu=47000, mem_gib=180, gpus=4), ert=True)
    bad = check_fit(m, [rel("training", [job, _lr(default={"cpu": "4", "memory": "16Gi"},
                                                 defaultRequest={"cpu": "1", "memory": "4Gi"})])])
    reasons = [p.reason for p in checks_of(bad, "admission")]
    assert any("cpu request 16 exceeds its limit 4" in x for x in reasons), reasons
    assert any("memory request 64.00Gi exceeds its limit 16.00Gi" in x for x in reasons), reasons
    fixed = check_fit(m, [rel("training", [job, _lr(defaultRequest={"cpu": "1", "memory": "4Gi"})])])
    assert fixed.ok, fixed.problems


def test_limitrange_max_implies_default_limit_and_min_and_ratio():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "training"},
           "spec": {"template": {"spec": pod_spec(container(cpu="2", mem="1Gi", limits={"cpu": "8", "memory": "1Gi"}))}}}
    m = model(group("system"))
    over = check_fit(m, [rel("t", [job, _lr(max={"cpu": "4"})])])
    assert any("maximum cpu is 4, limit 8" in p.reason for p in checks_of(over, "admission"))
    under = check_fit(m, [rel("t", [job, _lr(min={"cpu": "3"})])])
    assert any("minimum cpu is 3, request 2" in p.reason for p in checks_of(under, "admission"))
    ratio = check_fit(m, [rel("t", [job, _lr(maxLimitRequestRatio={"cpu": "2"})])])
    assert any("limit/request 4.00 > 2" in p.reason for p in checks_of(ratio, "admission"))
    assert check_fit(m, [rel("t", [job, _lr(max={"cpu": "8"}, min={"cpu": "1"}, maxLimitRequestRatio={"cpu": "4"})])]).ok
    # max without default: the default limit becomes max (LimitRangeItem defaulting); a request above it fails
    req_only = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "r", "namespace": "training"},
                "spec": {"template": {"spec": pod_spec(container(cpu="6", mem="1Gi"))}}}
    assert any("cpu request 6 exceeds its limit 4" in p.reason
               for p in checks_of(check_fit(m, [rel("t", [req_only, _lr(max={"cpu": "4"})])]), "admission"))


# ---------------------------------------------------------------------------------------------
# admission: ResourceQuota
# ---------------------------------------------------------------------------------------------


def _quota(hard, ns="apps"):
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": ns}, "spec": {"hard": hard}}


def test_quota_requires_requests_and_limits_it_tracks():
    no_limits = deployment("d", spec=pod_spec(container(cpu="100m", mem="64Mi")))
    r = check_fit(model(group("system")), [rel("r", [no_limits, _quota({"limits.cpu": "4", "requests.cpu": "4"})])])
    [p] = checks_of(r, "admission")
    assert "tracks limits.cpu" in p.reason and "containers c set none" in p.reason
    with_limits = deployment("d", spec=pod_spec(container(cpu="100m", mem="64Mi", limits={"cpu": "200m"})))
    assert check_fit(model(group("system")), [rel("r", [with_limits, _quota({"limits.cpu": "4", "requests.cpu": "4"})])]).ok


def test_quota_fit_for_one_pod_and_for_all_pods_of_the_namespace():
    d = deployment("d", spec=pod_spec(container(cpu="1", mem="64Mi")), replicas=3)
    one = check_fit(model(group("system", hi=3)), [rel("r", [d, _quota({"requests.cpu": "500m"})])])
    assert any("exceeds ResourceQuota q on its own" in p.reason for p in checks_of(one, "admission"))
    total = check_fit(model(group("system", hi=3)), [rel("r", [d, _quota({"requests.cpu": "2", "pods": "10"})])])
    [p] = checks_of(total, "admission")
    assert p.object == "ResourceQuota/apps/q" and "requests.cpu 3" in p.reason
    assert check_fit(model(group("system", hi=3)), [rel("r", [d, _quota({"requests.cpu": "3", "pods": "3"})])]).ok


def test_best_effort_scope_quota_ignores_pods_with_requests():
    d = deployment("d", spec=pod_spec(container(cpu="1", mem="64Mi")))
    q = _quota({"pods": "0"})
    q["spec"]["scopes"] = ["BestEffort"]
    assert check_fit(model(group("system")), [rel("r", [d, q])]).ok


# ---------------------------------------------------------------------------------------------
# admission: Pod Security Standards
# ---------------------------------------------------------------------------------------------

RESTRICTED_OK = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "c", "image": "x", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}],
    "volumes": [{"name": "cfg", "configMap": {"name": "x"}}, {"name": "tmp", "emptyDir": {}}],
}


def _mutate(path_value):
    spec = copy.deepcopy(RESTRICTED_OK)
    path, value = path_value
    target = spec
    for key in path[:-1]:
        target = target[key] if not isinstance(key, int) else target[key]
    target[path[-1]] = value
    return spec


BASELINE_CASES = [
    ("HostProcess", (("securityContext", "windowsOptions"), {"hostProcess": True})),
    ("Host namespaces", (("hostNetwork",), True)),
    ("Host namespaces", (("hostPID",), True)),
    ("Host namespaces", (("hostIPC",), True)),
    ("Privileged", (("containers", 0, "securityContext", "privileged"), True)),
    ("Capabilities", (("containers", 0, "securityContext", "capabilities"), {"drop": ["ALL"], "add": ["NET_ADMIN"]})),
    ("HostPath", (("volumes",), [{"name": "h", "hostPath": {"path": "/"}}])),
    ("Host ports", (("containers", 0, "ports"), [{"containerPort": 80, "hostPort": 80}])),
    ("AppArmor", (("securityContext", "appArmorProfile"), {"type": "Unconfined"})),
    ("SELinux", (("containers", 0, "securityContext", "seLinuxOptions"), {"type": "spc_t"})),
    ("SELinux", (("securityContext", "seLinuxOptions"), {"user": "system_u"})),
    ("/proc mount", (("containers", 0, "securityContext", "procMount"), "Unmasked")),
    ("Seccomp", (("securityContext", "seccompProfile"), {"type": "Unconfined"})),
    ("Sysctls", (("securityContext", "sysctls"), [{"name": "kernel.msgmax", "value": "1"}])),
]
RESTRICTED_CASES = [
    ("Volume types", (("volumes",), [{"name": "n", "nfs": {"server": "x", "path": "/"}}])),
    ("Privilege escalation", (("containers", 0, "securityContext", "allowPrivilegeEscalation"), True)),
    ("Running as Non-root", (("securityContext", "runAsNonRoot"), False)),
    ("Running as Non-root user", (("securityContext", "runAsUser"), 0)),
    ("Seccomp", (("securityContext", "seccompProfile"), {"type": "Localhost-typo"})),
    ("Capabilities", (("containers", 0, "securityContext", "capabilities"), {"drop": ["NET_RAW"]})),
    ("Capabilities", (("containers", 0, "securityContext", "capabilities"), {"drop": ["ALL"], "add": ["CHOWN"]})),
]


def test_restricted_reference_pod_passes_every_level():
    for level in ("privileged", "baseline", "restricted"):
        assert pss_violations(RESTRICTED_OK, {}, level) == []


@pytest.mark.parametrize("control, mutation", BASELINE_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(BASELINE_CASES)])
def test_baseline_controls(control, mutation):
    spec = _mutate(mutation)
    assert any(v.startswith(control) for v in pss_violations(spec, {}, "baseline")), pss_violations(spec, {}, "baseline")
    assert any(v.startswith(control) for v in pss_violations(spec, {}, "restricted"))
    assert pss_violations(spec, {}, "privileged") == []


@pytest.mark.parametrize("control, mutation", RESTRICTED_CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(RESTRICTED_CASES)])
def test_restricted_controls(control, mutation):
    spec = _mutate(mutation)
    assert any(v.startswith(control) for v in pss_violations(spec, {}, "restricted")), pss_violations(spec, {}, "restricted")
    assert not [v for v in pss_violations(spec, {}, "baseline") if v.startswith(control)]


def test_apparmor_annotation_and_sysctl_by_version():
    assert pss_violations(pod_spec(), {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}, "baseline")
    assert not pss_violations(pod_spec(), {"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}, "baseline")
    keepalive = pod_spec(securityContext={"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]})
    assert pss_violations(keepalive, {}, "baseline", minor=28)
    assert not pss_violations(keepalive, {}, "baseline", minor=29)


def test_namespace_enforce_label_decides_the_level():
    # JupyterHub's single-user pod with blockWithIptables: a NET_ADMIN privileged init container
    spawn = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "jupyter-x", "namespace": "jupyterhub"},
             "spec": {"initContainers": [{"name": "block-cloud-metadata", "image": "x",
                                          "securityContext": {"privileged": True, "runAsUser": 0,
                                                              "capabilities": {"add": ["NET_ADMIN"]}}}],
                      "containers": [container(cpu="100m", mem="64Mi")]}}
    m = model(group("system"))
    [p] = checks_of(check_fit(m, [rel("hub", [spawn, namespace("jupyterhub", {C.PSS_ENFORCE: "baseline"})])]), "admission")
    assert "Pod Security 'baseline'" in p.reason and "NET_ADMIN" in p.reason and "privileged" in p.reason
    assert check_fit(m, [rel("hub", [spawn, namespace("jupyterhub", {C.PSS_ENFORCE: "privileged"})])]).ok
    assert check_fit(m, [rel("hub", [spawn, namespace("jupyterhub")])]).ok  # unlabelled: privileged


# ---------------------------------------------------------------------------------------------
# ordering
# ---------------------------------------------------------------------------------------------


def _webhook(ns_selector=None, policy="Fail", obj_selector=None, resources=("jobs",), groups=("batch",)):
    wh = {"name": "mjob.kb.io", "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": list(groups),
                                           "apiVersions": ["v1"], "resources": list(resources)}],
          "clientConfig": {"service": {"namespace": "kueue-system", "name": "kueue-webhook-service", "path": "/m"}},
          "sideEffects": "None", "admissionReviewVersions": ["v1"]}
    if policy is not None:
        wh["failurePolicy"] = policy
    if ns_selector is not None:
        wh["namespaceSelector"] = ns_selector
    if obj_selector is not None:
        wh["objectSelector"] = obj_selector
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "kueue-mutating-webhook-configuration"}, "webhooks": [wh]}


def _hook_job(ns="monitoring"):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "admission-create", "namespace": ns, "annotations": {"helm.sh/hook": "pre-install,pre-upgrade"}},
            "spec": {"template": {"spec": pod_spec()}}}


def test_fail_webhook_intercepting_another_releases_hook_job_needs_a_dependency():
    m = model(group("system"))
    every_ns_but_two = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                              "values": ["kube-system", "kueue-system"]}]}
    kueue = rel("kueue", [_webhook(every_ns_but_two)])
    bad = check_fit(m, [kueue, rel("kube-prometheus-stack", [_hook_job()])])
    [p] = checks_of(bad, "ordering")
    assert p.release == "kube-prometheus-stack" and p.object == "Job/monitoring/admission-create"
    assert "mjob.kb.io" in p.reason and "depend on kueue-res" in p.fix
    # fixed by a dependency, by scoping, or by failurePolicy Ignore; failurePolicy unset means Fail
    assert check_fit(m, [kueue, rel("kube-prometheus-stack", [_hook_job()], depends_on={"urn:kueue"})]).ok
    scoped = rel("kueue", [_webhook({"matchLabels": {"gpu-platform.io/queue": "enabled"}})])
    assert check_fit(m, [scoped, rel("kube-prometheus-stack", [_hook_job()])]).ok
    assert check_fit(m, [rel("kueue", [_webhook(policy="Ignore")]), rel("kps", [_hook_job()])]).ok
    assert checks_of(check_fit(m, [rel("kueue", [_webhook(policy=None)]), rel("kps", [_hook_job()])]), "ordering")


def test_webhook_on_pods_catches_other_releases_pods_and_object_selector_scopes_it():
    m = model(group("system"))
    pods_hook = _webhook(resources=("pods",), groups=("",))
    other = rel("other", [deployment("web")])
    [p] = checks_of(check_fit(m, [rel("w", [pods_hook]), other]), "ordering")
    assert p.object == "pods of Deployment/apps/web"
    scoped = _webhook(resources=("pods",), groups=("",), obj_selector={"matchLabels": {"kueue.x-k8s.io/managed": "true"}})
    assert check_fit(m, [rel("w", [scoped]), other]).ok
    ns_labelled = check_fit(m, [rel("w", [_webhook({"matchLabels": {"team": "ml"}}, resources=("pods",), groups=("",))]),
                                rel("other", [deployment("web"), namespace("apps", {"team": "ml"})])])
    assert checks_of(ns_labelled, "ordering")


# ---------------------------------------------------------------------------------------------
# reachable
# ---------------------------------------------------------------------------------------------


def _service(name, ns, port, target):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"app": "kueue"}, "ports": [{"port": port, "targetPort": target}]}}


def _kueue_release():
    mgr = deployment("kueue-controller-manager", "kueue-system", pod_spec(container(
        cpu="100m", mem="64Mi", ports=[{"name": "webhook-server", "containerPort": 9443},
                                       {"name": "visibility", "containerPort": 8082}])))
    mgr["spec"]["template"]["metadata"]["labels"] = {"app": "kueue"}
    api = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
           "metadata": {"name": "v1beta1.visibility.kueue.x-k8s.io"},
           "spec": {"service": {"name": "kueue-visibility-server", "namespace": "kueue-system"}, "group": "visibility.kueue.x-k8s.io"}}
    wh = _webhook({"matchLabels": {"x": "y"}})
    wh["webhooks"][0]["clientConfig"]["service"]["name"] = "kueue-webhook-service"
    return rel("kueue", [mgr, _service("kueue-webhook-service", "kueue-system", 443, "webhook-server"),
                         _service("kueue-visibility-server", "kueue-system", 443, 8082), api, wh])


def test_apiservice_and_webhook_ports_must_be_open_to_the_control_plane():
    bad = check_fit(model(group("system"), ports=frozenset({443, 10250, 9443})), [_kueue_release()])
    [p] = checks_of(bad, "reachable")
    assert p.object == "APIService/v1beta1.visibility.kueue.x-k8s.io" and "targetPort 8082" in p.reason
    assert "open TCP 8082" in p.fix
    webhook_closed = check_fit(model(group("system"), ports=frozenset({443, 10250, 8082})), [_kueue_release()])
    [p] = checks_of(webhook_closed, "reachable")
    assert "webhook-server -> containerPort 9443" in p.reason
    assert check_fit(model(group("system"), ports=frozenset({443, 10250, 8082, 9443})), [_kueue_release()]).ok
    assert check_fit(model(group("system"), ports=None), [_kueue_release()]).ok


def test_unrendered_webhook_service_is_reported_where_ports_are_filtered():
    wh = _webhook()
    r = check_fit(model(group("system"), ports=frozenset({443})), [rel("w", [wh])])
    [p] = checks_of(r, "reachable")
    assert "not among the rendered objects" in p.reason


# ---------------------------------------------------------------------------------------------
# queue fit and TrainJobs
# ---------------------------------------------------------------------------------------------

RUNTIME = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
           "metadata": {"name": "torch-distributed"},
           "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
               {"name": "dataset-initializer", "template": {"metadata": {"labels": {
                   "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
                   "spec": {"template": {"spec": {"containers": [container("dataset-initializer", cpu="100m", mem="64Mi")]}}}}},
               {"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                             "spec": {"template": {"spec": {"containers": [
                                                 {"name": "node", "image": "pytorch", "resources": {"limits": {"cpu": "1"}}}]}}}}},
           ]}}}}


# What the Trainer chart installs for TrainJobs (trimmed): without it the API server refuses a TrainJob.
TRAINJOB_CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "trainjobs.trainer.kubeflow.org"},
                "spec": {"group": "trainer.kubeflow.org", "scope": "Namespaced",
                         "names": {"kind": "TrainJob", "plural": "trainjobs"},
                         "versions": [{"name": "v1alpha1", "served": True, "storage": True}]}}


def trainjob(cpu="4", mem="16Gi", gpus="1", nodes=1, queue="gpu-queue"):
    tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
          "metadata": {"name": "resnet", "namespace": "training", "labels": {"kueue.x-k8s.io/queue-name": queue}},
          "spec": {"runtimeRef": {"name": "torch-distributed"},
                   "trainer": {"numNodes": nodes, "image": "mine", "resourcesPerNode": {
                       "requests": {"cpu": cpu, "memory": mem, "nvidia.com/gpu": gpus},
                       "limits": {"nvidia.com/gpu": gpus, "cpu": cpu}}}}}
    return tj


def test_trainjob_pods_follow_the_trainer_runtime():
    pts, issue = trainjob_pods("example", trainjob(nodes=3), {("ClusterTrainingRuntime", None, "torch-distributed"): RUNTIME})
    assert issue is None
    by_set = {pt.podset: pt for pt in pts}
    node = by_set["node"]
    assert node.replicas == 3 and node.multi_node and node.job_pods == 4
    c = node.spec["containers"][0]
    assert c["image"] == "mine"
    # runtime limits.cpu 1 overridden key-wise by resourcesPerNode, requests added
    assert c["resources"]["limits"] == {"cpu": "4", "nvidia.com/gpu": "1"}
    assert c["resources"]["requests"]["memory"] == "16Gi"
    assert by_set["dataset-initializer"].replicas == 1
    assert RUNTIME["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "containers"][0]["resources"] == {"limits": {"cpu": "1"}}  # the runtime itself untouched
    _, issue = trainjob_pods("example", trainjob(), {})
    assert issue and "not among the rendered objects" in issue.reason


def test_trainjob_with_a_patch_field_kueue_drops_is_a_render_problem():
    """Kueue 0.19.2 rewrites an admitted TrainJob with Trainer 2.2.1's types: a 2.3-only pod-spec patch
    field is lost and the job never gets a pod (the rehearsal's finding)."""
    runtimes = {("ClusterTrainingRuntime", None, "torch-distributed"): RUNTIME}
    tj = trainjob()
    tj["spec"]["runtimePatches"] = [{"manager": "me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"gpu-platform.io/pool": "a10g"}, "terminationGracePeriodSeconds": 60}}}}}]}}}}]
    pts, issue = trainjob_pods("example", tj, runtimes)
    assert pts and issue is not None
    assert "terminationGracePeriodSeconds" in issue.reason and "Trainer v2.2.1" in issue.reason
    assert "runtime's pod template" in issue.fix
    del tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert trainjob_pods("example", tj, runtimes)[1] is None  # a pool's nodeSelector survives: no problem


def _queue_objects(cpu_quota="7840m", mem_quota="30Gi", gpus=2, pool="a10g"):
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": pool},
              "spec": {"nodeLabels": {"gpu-platform.io/pool": pool}, "nodeTaints": [GPU_TAINT],
                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]}}
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu-training"},
          "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"], "flavors": [
              {"name": pool, "resources": [{"name": "cpu", "nominalQuota": cpu_quota},
                                           {"name": "memory", "nominalQuota": mem_quota},
                                           {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}}
    lq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "gpu-queue", "namespace": "training"},
          "spec": {"clusterQueue": "gpu-training"}}
    return [flavor, cq, lq]


def _queue_model(**kw):
    return model(group("system"), gpu_group("a10g", cpu=3920, mem_gib=15.03, gpus=1, hi=2), **kw)


def test_trainjob_admitted_to_a_pool_whose_allocatable_is_smaller_never_schedules():
    releases = [rel("kueue", _queue_objects() + [RUNTIME, TRAINJOB_CRD]), rel("example", [trainjob()], source="example")]
    bad = check_fit(_queue_model(), releases)
    [p] = checks_of(bad, "queue-fit")
    assert p.object == "TrainJob/training/resnet[node]" and "flavor a10g" in p.reason
    assert "cpu 4" in p.reason and "re-admitted forever" in p.reason
    ok = check_fit(_queue_model(), [releases[0], rel("example", [trainjob(cpu="3", mem="12Gi")], source="example")])
    # The queue fits; what remains is that the chart's torch-distributed runtime carries no safe-to-evict
    # annotation (issue 33 item 2): its dataset initializer (no GPU, on the GPU node Kueue admits it to) leaves
    # that node a scale-down candidate, and only that; the trainer's pod asks for its node's one GPU, so its node
    # never is (issue 37 round 3 item 1).
    assert {p.check for p in ok.problems} == {"scale-down"}, ok.problems
    assert [p.object for p in checks_of(ok, "scale-down")] == ["TrainJob/training/resnet[dataset-initializer]"]
    assert ("a10g", 1) in [(pl.group, pl.pods) for pl in ok.placements if "resnet" in pl.object]


def test_quota_above_what_the_flavor_nodes_allocate():
    bad = check_fit(_queue_model(), [rel("kueue", _queue_objects(cpu_quota="8", mem_quota="32Gi"))])
    reasons = [p.reason for p in checks_of(bad, "queue-fit")]
    assert any("nominal quota cpu 8 exceeds" in r for r in reasons) and any("nominal quota memory" in r for r in reasons)
    assert check_fit(_queue_model(), [rel("kueue", _queue_objects())]).ok


def test_a_job_of_a_kind_no_crd_serves_is_refused():
    """A TrainJob where no CRD serves trainer.kubeflow.org/v1alpha1 (the Trainer not installed), and
    Training Operator v1's PyTorchJob (never installed here): the API server refuses both."""
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p", "namespace": "training"}}
    r = check_fit(_queue_model(), [rel("kueue", _queue_objects() + [RUNTIME]),
                                   rel("example", [trainjob(), pytorch], source="example")])
    refused = {p.object: p.reason for p in checks_of(r, "admission")}
    assert "no API the cluster serves has kind TrainJob in trainer.kubeflow.org/v1alpha1" in refused["TrainJob/training/resnet"]
    assert "kind PyTorchJob in kubeflow.org/v1" in refused["PyTorchJob/training/p"]
    served = check_fit(_queue_model(), [rel("kueue", _queue_objects() + [RUNTIME, TRAINJOB_CRD]),
                                        rel("example", [trainjob()], source="example")])
    assert not checks_of(served, "admission")


def test_multi_node_trainjob_each_pod_fits_but_not_all_at_max_size():
    releases = [rel("kueue", _queue_objects(cpu_quota="7840m", gpus=2) + [RUNTIME])]
    tj = trainjob(cpu="3", mem="12Gi", nodes=3)
    m = model(group("system"), gpu_group("a10g", cpu=3920, mem_gib=15.03, gpus=1, hi=2))
    # quota cpu 7.84 < 3 x 3: Kueue never admits it ("request > maximum capacity"): said so, not "do not all fit"
    stuck = checks_of(check_fit(m, releases + [rel("example", [tj], source="example")]), "queue-fit")
    assert [p.object for p in stuck] == ["TrainJob/training/resnet"]
    assert "Kueue never admits it" in stuck[0].reason and "insufficient quota for cpu" in stuck[0].reason
    releases = [rel("kueue", _queue_objects(cpu_quota="10", mem_quota="40Gi", gpus=3) + [RUNTIME])]
    bad = check_fit(m, releases + [rel("example", [tj], source="example")])
    assert any("do not all fit on 2 nodes" in p.reason for p in checks_of(bad, "queue-fit"))


def test_missing_local_queue_is_reported():
    r = check_fit(_queue_model(), [rel("x", [RUNTIME]), rel("example", [trainjob(queue="nope")], source="example")])
    assert any("LocalQueue training/nope" in p.reason for p in checks_of(r, "queue-fit"))


# ---------------------------------------------------------------------------------------------
# pods and report
# ---------------------------------------------------------------------------------------------


def test_pod_templates_of_every_workload_kind_and_hooks():
    objs = [deployment("d", replicas=2), deployment("s", replicas=3, kind="StatefulSet"), daemonset("ds"),
            {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "cj", "namespace": "a"},
             "spec": {"jobTemplate": {"spec": {"parallelism": 2, "template": {"spec": pod_spec()}}}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}, "spec": pod_spec()},
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js", "namespace": "a"},
             "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {"parallelism": 2,
                                                                                            "template": {"spec": pod_spec()}}}}]}},
            _hook_job(),
            {**_hook_job(), "metadata": {"name": "t", "namespace": "a", "annotations": {"helm.sh/hook": "test"}}}]
    pts, issues = pod_templates([rel("r", objs)])
    got = {(pt.owner, pt.replicas, pt.hook, pt.daemonset) for pt in pts}
    assert got == {("Deployment/apps/d", 2, False, False), ("StatefulSet/apps/s", 3, False, False),
                   ("DaemonSet/kube-system/ds", 1, False, True), ("CronJob/a/cj", 2, False, False),
                   ("Pod/a/p", 1, False, False), ("JobSet/a/js[w]", 4, False, False),
                   ("Job/monitoring/admission-create", 1, True, False)}
    assert issues == []


def test_report_render_and_json():
    r = check_fit(model(cp_group(), group("system")), [rel("r", [deployment("web", replicas=2)]),
                                                      rel("k", [deployment("k", "kueue-system", spec=pod_spec(container(cpu="9")))])])
    text = r.render(verbose=True)
    assert text.startswith("Cluster fit: 2 releases, 3 pods, 1 problem(s)")
    assert "    1 x x" in text
    assert "system" in text and "2 x Deployment/apps/web (r)" in text and "[schedulable] Deployment/kueue-system/k (k)" in text
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["ok"] is False and doc["problems"][0]["check"] == "schedulable" and doc["headroom"]["system"]["nodes"] == 1


def test_problem_check_names_are_the_interface_ones():
    with pytest.raises(ValueError):
        C.Problem("scheduling", "r", "o", "x", "y")


def test_daemonset_for_an_optional_gpu_feature_no_group_has_is_idle_not_a_problem():
    mps = daemonset("mps-control-daemon", "gpu-system", pod_spec(
        nodeSelector={"nvidia.com/gpu.present": "true", "nvidia.com/mps.capable": "true"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]))
    assert check_fit(model(gpu_group()), [rel("r", [mps])]).ok
    # selecting GPU presence alone: meant for GPU nodes, reported when no GPU group carries the label
    dcgm = daemonset("dcgm", "gpu-system", pod_spec(nodeSelector={"nvidia.com/gpu.present": "true"},
                                                     tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]))
    unlabelled = group("a10g", "gpu", [GPU_TAINT], {"gpu-platform.io/pool": "a10g"}, gpus=1)
    assert checks_of(check_fit(model(unlabelled), [rel("r", [dcgm])]), "schedulable")
    assert check_fit(model(gpu_group()), [rel("r", [dcgm])]).ok
    only_feature = daemonset("mps-control-daemon", "gpu-system", pod_spec(
        nodeSelector={"nvidia.com/mps.capable": "true"}, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]))
    assert check_fit(model(gpu_group()), [rel("r", [only_feature])]).ok


def test_trainer_runtimes_shipped_in_the_installer_configmap_are_found():
    import yaml

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeflow-trainer-runtimes-installer",
                                                                "namespace": "kubeflow-system"},
          "data": {"runtimes.yaml": "---\n# license\n" + yaml.safe_dump(RUNTIME)}}
    pts, issues = pod_templates([rel("kubeflow-trainer", [cm]), rel("example", [trainjob()], source="example")])
    assert issues == [] and {pt.podset for pt in pts} == {"node", "dataset-initializer"}


def test_local_queue_in_a_namespace_its_cluster_queue_does_not_admit_from():
    objs = _queue_objects()
    objs[1]["spec"]["namespaceSelector"] = {"matchLabels": {"gpu-platform.io/queue": "enabled"}}
    bad = check_fit(_queue_model(), [rel("kueue", objs + [namespace("training")])])
    [p] = checks_of(bad, "queue-fit")
    assert p.object == "LocalQueue/training/gpu-queue" and "never admitted" in p.reason
    good = check_fit(_queue_model(), [rel("kueue", objs + [namespace("training", {"gpu-platform.io/queue": "enabled"})])])
    assert good.ok, good.problems


def test_unreadable_quantities_are_render_problems_not_tracebacks():
    d = deployment("d", spec=pod_spec(container(cpu="preflight-unknown-value")))
    objs = _queue_objects(cpu_quota="preflight-secret-value")
    r = check_fit(_queue_model(ports=frozenset({443})), [rel("r", [d] + objs + [RUNTIME]),
                                                         rel("example", [trainjob()], source="example")])
    assert {p.check for p in r.problems} >= {"render"}
    assert any(p.object == "Deployment/apps/d" and "cannot be read" in p.reason for p in r.problems)
    assert [p.object for p in r.problems if "nominalQuota of cpu" in p.reason] == ["ClusterQueue/gpu-training"]


def test_crd_conversion_webhook_port_must_be_reachable():
    kueue = _kueue_release()
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "workloads.kueue.x-k8s.io"},
           "spec": {"group": "kueue.x-k8s.io", "names": {"kind": "Workload", "plural": "workloads"}, "scope": "Namespaced",
                    "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {
                        "namespace": "kueue-system", "name": "kueue-webhook-service", "path": "/convert"}}}}}}
    kueue.objects.append(crd)
    bad = check_fit(model(group("system"), ports=frozenset({443, 10250, 8082})), [kueue])
    assert any(p.object == "CustomResourceDefinition/workloads.kueue.x-k8s.io" and "conversion webhook" in p.reason
               for p in checks_of(bad, "reachable"))
    assert check_fit(model(group("system"), ports=frozenset({443, 10250, 8082, 9443})), [kueue]).ok


def test_delete_hooks_do_not_race_and_zero_replica_workloads_are_not_checked():
    m = model(group("system"))
    pre_delete = _hook_job()
    pre_delete["metadata"]["annotations"]["helm.sh/hook"] = "pre-delete"
    assert check_fit(m, [rel("kueue", [_webhook()]), rel("kps", [pre_delete])]).ok
    assert checks_of(check_fit(m, [rel("kueue", [_webhook()]), rel("kps", [_hook_job()])]), "ordering")
    idle = deployment("idle", spec=pod_spec(container(cpu="64")), replicas=0)
    assert check_fit(m, [rel("r", [idle])]).ok
    assert checks_of(check_fit(m, [rel("r", [deployment("busy", spec=pod_spec(container(cpu="64")))])]), "schedulable")



def test_a_pools_zonal_groups_each_keep_their_headroom_and_pods():
    """EKS has one group per pool and zone, all named after the pool: headroom was keyed by that name,
    so fit.json and the terminal showed one zone (the last) and every zone's pods against it."""
    zonal = [group("system", labels={"topology.kubernetes.io/zone": z}, cpu=3800, mem_gib=7) for z in ("z-b", "z-a")]
    web = deployment("web", spec=pod_spec(container(cpu="3", mem="1Gi")), replicas=2)
    r = check_fit(model(*zonal), [rel("r", [web])])
    assert r.ok, r.problems
    assert set(r.headroom) == {"system/z-a", "system/z-b"}
    assert {k: (h["group"], h["zone"], h["cpuMillis"]) for k, h in r.headroom.items()} == {
        "system/z-a": ("system", "z-a", 800), "system/z-b": ("system", "z-b", 800)}
    assert sorted((pl.group, pl.zone, pl.pods) for pl in r.placements) == [("system", "z-a", 1), ("system", "z-b", 1)]
    rows = [line for line in r.render(verbose=True).splitlines() if "headroom" in line][1:]
    assert [row.split()[0] for row in rows] == ["system/z-b", "system/z-a"]
    assert all("   1 pods" in row for row in rows), rows
    # Without zones nothing changes: the key is the name.
    assert set(check_fit(model(group("system")), [rel("r", [web])]).headroom) == {"system"}


# ---------------------------------------------------------------------------------------------
# The nodes each group keeps at idle (issue 37 item 8: the bill's idle floor)
# ---------------------------------------------------------------------------------------------


def test_idle_nodes_are_what_the_platforms_own_pods_need_from_the_minimum_up():
    """Three 1.5-CPU controllers need two 3.8-CPU system nodes at idle whatever minNodes says; queued work
    (a GPU job) and GPU-only DaemonSets ask for nothing at idle; a minimum that already holds them stays."""
    system = group("system", cpu=3800, mem_gib=14, lo=1, hi=3)
    gpu = gpu_group(hi=4)
    queued = deployment("job", "training", pod_spec(container(cpu="8", gpu="1")), labels={"kueue.x-k8s.io/queue-name": "q"})
    objs = [deployment("ctl", spec=pod_spec(container(cpu="1500m", mem="1Gi")), replicas=3), queued,
            daemonset("exporter", spec=pod_spec(container(cpu="50m", mem="64Mi")))]
    assert C.idle_nodes(model(system, gpu), [rel("r", objs)]) == {"system": 2, "a10g": 0}
    small = [deployment("ctl", spec=pod_spec(container(cpu="500m", mem="1Gi")), replicas=3)]
    assert C.idle_nodes(model(group("system", cpu=3800, mem_gib=14, lo=2, hi=3), gpu), [rel("r", small)])["system"] == 2
    # Required anti-affinity on the hostname: one replica per node.
    spread = pod_spec(container(cpu="100m", mem="64Mi"), affinity={"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "ha"}},
                                                            "topologyKey": "kubernetes.io/hostname"}]}})
    assert C.idle_nodes(model(group("system", lo=1, hi=3)), [rel("r", [deployment("ha", spec=spread, replicas=2)])]) == {"system": 2}
# config-keys: a key a pod reads from a rendered ConfigMap or Secret
# ---------------------------------------------------------------------------------------------


def _store(kind="ConfigMap", ns="training", name="checkpoint-store", **data):
    field = "data" if kind == "ConfigMap" else "stringData"
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": ns}, field: dict(data)}


def _env_ref(env, kind, name, key, optional=None):
    ref = {"name": name, "key": key, **({"optional": optional} if optional is not None else {})}
    return {"name": env, "valueFrom": {("configMapKeyRef" if kind == "ConfigMap" else "secretKeyRef"): ref}}


def test_a_pod_reading_a_key_its_configmap_lacks_is_reported_naming_pod_key_and_configmap():
    """The example TrainJob read CHECKPOINT_URL from training/checkpoint-store without `optional`; on cloud kubernetes
    without kubernetes.checkpointStore the ConfigMap is `data: {}` and the pods sat in CreateContainerConfigError while
    Kueue re-admitted the job, holding GPU quota. Preflight passed."""
    store = _store(AWS_REGION="us-east-1")
    reader = deployment("trainer", "training", pod_spec(container(cpu="100m", mem="64Mi", env=[
        _env_ref("CHECKPOINT_URL", "ConfigMap", "checkpoint-store", "CHECKPOINT_URL"),
        _env_ref("AWS_REGION", "ConfigMap", "checkpoint-store", "AWS_REGION")])))
    report = check_fit(model(group("sys")), [rel("platform", [namespace("training"), store]), rel("job", [reader])])
    (p,) = checks_of(report, "config-keys")
    assert p.object == "Deployment/training/trainer" and p.release == "job"
    assert "reads key CHECKPOINT_URL of ConfigMap training/checkpoint-store" in p.reason
    assert "its keys: AWS_REGION" in p.reason and "CreateContainerConfigError" in p.reason
    assert "optional: true" in p.fix
    # optional: the pod starts without it
    reader["spec"]["template"]["spec"]["containers"][0]["env"][0]["valueFrom"]["configMapKeyRef"]["optional"] = True
    report = check_fit(model(group("sys")), [rel("platform", [namespace("training"), store]), rel("job", [reader])])
    assert not checks_of(report, "config-keys")


def test_secret_keys_and_volume_items_are_checked_and_objects_not_rendered_are_not_judged():
    secret = _store("Secret", name="creds", AWS_ACCESS_KEY_ID="x")
    spec = pod_spec(container(cpu="100m", mem="64Mi", env=[
        _env_ref("AWS_SECRET_ACCESS_KEY", "Secret", "creds", "AWS_SECRET_ACCESS_KEY"),
        _env_ref("TOKEN", "Secret", "made-by-someone-else", "token")]),
        volumes=[{"name": "conf", "configMap": {"name": "checkpoint-store", "items": [{"key": "app.yaml", "path": "a"}]}},
                 {"name": "both", "projected": {"sources": [{"secret": {"name": "creds", "items": [
                     {"key": "AWS_ACCESS_KEY_ID", "path": "id"}, {"key": "ca.pem", "path": "ca"}]}}]}}])
    report = check_fit(model(group("sys")), [rel("platform", [namespace("training"), secret, _store()]),
                                             rel("job", [deployment("t", "training", spec)])])
    reasons = sorted(p.reason.split(" reads key ")[1].split(",")[0] for p in checks_of(report, "config-keys"))
    assert reasons == ["AWS_SECRET_ACCESS_KEY of Secret training/creds", "app.yaml of ConfigMap training/checkpoint-store",
                       "ca.pem of Secret training/creds"], reasons


def _first_fit(nodes: list[dict], req: dict[str, int], replicas: int, spread: bool) -> int:
    """The per-replica first fit pack() did before (attacker review: O(replicas x nodes)): how many placed."""
    placed = 0
    for _ in range(replicas):
        for node in nodes:
            free = node["free"]
            need = {"pods": 1, **{k: v for k, v in req.items() if k in ("cpu", "memory", C.GPU)}}
            if (spread and node["hosts"]) or any(free.get(k, 0) < v for k, v in need.items()):
                continue
            for k, v in need.items():
                free[k] -= v
            node["hosts"].add(1)
            placed += 1
            break
    return placed


def test_identical_replicas_are_placed_a_node_at_a_time_exactly_as_one_by_one():
    """A Deployment of 10^9 replicas hung preflight (per-replica first fit); `_take_many` fills a node at a
    time. Same placements as one by one, node by node, for any requests, free capacity and replica count."""
    from hypothesis import given, settings, strategies as st

    from tests.conftest import lane_examples

    resources = st.fixed_dictionaries({"cpu": st.integers(0, 4000), "memory": st.integers(0, 8 * GI),
                                       C.GPU: st.integers(0, 2)})
    frees = st.lists(st.fixed_dictionaries({"cpu": st.integers(0, 16000), "memory": st.integers(0, 64 * GI),
                                            C.GPU: st.integers(0, 8), "pods": st.integers(0, 110)}),
                     min_size=1, max_size=6)

    @settings(max_examples=lane_examples(300), deadline=None)
    @given(req=resources, free=frees, replicas=st.integers(0, 400), spread=st.booleans())
    def check(req, free, replicas, spread):
        one_by_one = [{"free": dict(f), "hosts": set()} for f in free]
        at_once = copy.deepcopy(one_by_one)
        expected = _first_fit(one_by_one, req, replicas, spread)
        left = replicas
        for node in at_once:
            if not left:
                break
            if spread and node["hosts"]:
                continue
            took = C._take_many(node, req, 1 if spread else left)
            if took:
                node["hosts"].add(1)
                left -= took
        assert replicas - left == expected
        assert [n["free"] for n in at_once] == [n["free"] for n in one_by_one]

    check()


def test_at_v_each_daemonset_is_listed_once_with_its_groups_and_at_vv_under_each_group():
    """The adopter's review (2026-11-29): `preflight -v` repeated every DaemonSet under every node group (aws-prod:
    about 110 of 192 lines). At -v each DaemonSet is one line naming its groups (the fewest names: "every node group
    but control-plane" where the control plane's taint keeps it off); every other placement stays under its group;
    -vv lists everything under its group."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kube-system"},
          "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
                   "spec": pod_spec(container(cpu="10m"))}}}
    r = check_fit(model(cp_group(), group("system"), group("other"), group("third")),
                  [rel("ds", [ds]), rel("r", [deployment("web")])])
    placed = {pl.group_key for pl in r.placements if pl.object == "DaemonSet/kube-system/agent"}
    assert placed == {"system", "other", "third"}, placed
    one = r.render(verbose=1)
    assert one.count("DaemonSet/kube-system/agent") == 1, one
    assert "DaemonSet/kube-system/agent (ds): every node group but control-plane" in one, one
    assert "x Deployment/apps/web (r)" in one
    two = r.render(verbose=2)
    assert two.count("DaemonSet/kube-system/agent") == 3 and "DaemonSets (a pod on each node of):" not in two
