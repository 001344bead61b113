"""Every pod the cluster will run, from the rendered objects: pod templates of Deployments,
StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs, Pods, JobSets and TrainJobs (through their
(Cluster)TrainingRuntime), the StatefulSets the Prometheus operator makes from Prometheus and
Alertmanager objects, Helm hook Jobs included, with how many pods each makes, and the effective
requests Kubernetes computes for a pod (containers, init containers, sidecars, overhead, LimitRange
defaults).

TrainJob -> pods follows Kubeflow Trainer v2.3.0 (pkg/runtime/core/trainingruntime.go and
pkg/runtime/framework/plugins/jobset/builder.go): the runtime's JobSet template is the base; the
replicated job labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer runs 1 replica of a Job
whose pod count is TrainJob.spec.trainer.numNodes (else the runtime's mlPolicy.numNodes, else 1); its
container named "node" takes the TrainJob's image/command/args/env, and its resources are the
runtime's strategically merged with trainer.resourcesPerNode (key-wise per requests/limits); for MPI
runtimes with runLauncherAsNode the "node" replicated job gets the same resources. Other replicated
jobs (initializers, launcher) keep replicas x parallelism. runtimePatches' pod-spec scheduling fields
(nodeSelector, tolerations, affinity, securityContext, serviceAccountName) are applied to the named
replicated jobs.

A TrainJob that Kueue manages (queue-name label) must not carry, in its runtimePatches, a pod-spec
field that Trainer v2.2.1 lacks: Kueue v0.19.2 is built against v2.2.1 (its go.mod) and, on
admission, updates the whole TrainJob with those types (pkg/controller/jobs/trainjob,
RunWithPodSetsInfo), so the field is dropped and the JobSet update that follows is refused
(`field is immutable`): the job never gets a pod. A render problem names it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable, Optional

import yaml

from gpu_platform.components.capacity import cpu_millis, memory_bytes, parse_quantity
from gpu_platform.preflight.fit.yaml_text import python_yaml


HOOK_ANNOTATION = "helm.sh/hook"
TEST_HOOKS = frozenset({"test", "test-success", "test-failure"})
INSTALL_HOOKS = frozenset({"pre-install", "post-install", "pre-upgrade", "post-upgrade"})
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
TRAINJOB_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_ANCESTOR = "trainer"
TRAINER_NODE = "node"
GPU = "nvidia.com/gpu"


@dataclass(eq=False)
class PodTemplate:
    release: str
    owner: str  # Kind/namespace/name of the object that makes the pods
    kind: str
    namespace: Optional[str]
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    replicas: int  # pods of this template running at once (per node for a DaemonSet: 1)
    daemonset: bool = False
    hook: bool = False
    install_time: bool = True  # created on install/upgrade (False: a pre/post-delete or rollback hook only)
    job: bool = False  # runs to completion (Job, CronJob, JobSet, TrainJob)
    queue_name: Optional[str] = None  # Kueue LocalQueue the workload names
    multi_node: bool = False  # one of several pods of one job that run together (numNodes > 1, JobSet)
    job_pods: int = 1  # pods of the whole job this template belongs to (all podsets), for queue fit
    workload: Optional[str] = None  # the job this pod set belongs to (Kind/ns/name), queue accounting
    podset: str = "main"

    def containers(self) -> list[dict]:
        return list(self.spec.get("containers") or [])

    def init_containers(self) -> list[dict]:
        return list(self.spec.get("initContainers") or [])

    def all_containers(self) -> list[dict]:
        return self.init_containers() + self.containers() + list(self.spec.get("ephemeralContainers") or [])


@dataclass
class RenderIssue:
    release: str
    object: str
    reason: str
    fix: str


def object_id(obj: dict, kind: Optional[str] = None) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{kind or obj.get('kind')}/{ns + '/' if ns else ''}{meta.get('name')}"


def _hook(obj: dict) -> Optional[set[str]]:
    h = ((obj.get("metadata") or {}).get("annotations") or {}).get(HOOK_ANNOTATION)
    return {x.strip() for x in str(h).split(",")} if h else None


def _int(v: Any, default: int) -> int:
    try:
        return int(v) if v is not None else default
    except (TypeError, ValueError):
        return default


def _from_pod_template(release: str, obj: dict, template: dict, replicas: int, **kw: Any) -> PodTemplate:
    meta = template.get("metadata") or {}
    ns = (obj.get("metadata") or {}).get("namespace")
    return PodTemplate(release=release, owner=object_id(obj), kind=obj.get("kind", ""), namespace=ns,
                       labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
                       spec=template.get("spec") or {}, replicas=replicas, **kw)


def _job_pods(job_spec: dict) -> int:
    parallelism = _int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    return min(parallelism, _int(completions, parallelism)) if completions is not None else parallelism


def _queue(obj: dict) -> Optional[str]:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL)


def _merge_resources(base: dict, override: dict) -> dict:
    """Strategic merge of two ResourceRequirements: requests and limits merged key by key."""
    out = copy.deepcopy(base or {})
    for part in ("requests", "limits", "claims"):
        if part in (override or {}):
            if part == "claims":
                out[part] = copy.deepcopy(override[part])
            else:
                out[part] = {**(out.get(part) or {}), **(override[part] or {})}
    return out


def _installer_payloads(obj: dict) -> list[dict]:
    """Objects a chart ships inside a ConfigMap for a hook Job to `kubectl apply` (the kubeflow-trainer
    chart's runtimes-installer: files/runtimes/*.yaml in ConfigMap <release>-runtimes-installer, applied
    by its post-install/post-upgrade Job). PyYAML's pure-Python parser on purpose: libyaml's recurses in C and
    crashes the process on text nested some 50,000 levels deep; text that does not parse holds no runtime."""
    out = []
    for text in (obj.get("data") or {}).values():
        if isinstance(text, str) and "TrainingRuntime" in text:
            try:
                out += [d for d in python_yaml(text, documents=True) if isinstance(d, dict)]
            except (yaml.YAMLError, RecursionError, ValueError):  # ValueError: a date out of range
                continue
    return out


def _runtime_index(releases: Iterable[Any]) -> dict[tuple[str, Optional[str], str], dict]:
    """The Trainer's runtimes by (kind, namespace, name). A `--job` file's runtimes (source "example") add to the
    platform's and never replace one; its ConfigMaps are not installers (only the chart's hook Job applies those)."""
    idx: dict[tuple[str, Optional[str], str], dict] = {}
    for rel in releases:
        job_file = rel.source == "example"
        objs = list(rel.objects)
        if not job_file:
            objs += [d for o in rel.objects if o.get("kind") == "ConfigMap" for d in _installer_payloads(o)]
        for obj in objs:
            if obj.get("kind") in ("ClusterTrainingRuntime", "TrainingRuntime") and \
                    str(obj.get("apiVersion", "")).startswith("trainer.kubeflow.org/"):
                meta = obj.get("metadata") or {}
                ns = meta.get("namespace") if obj["kind"] == "TrainingRuntime" else None
                key = (obj["kind"], ns, meta.get("name"))
                if not (job_file and key in idx):
                    idx[key] = obj
    return idx


# PodSpecPatch fields new in Trainer v2.3.0 (pkg/apis/trainer/v1alpha1/trainjob_types.go, v2.2.1 vs
# v2.3.0): Kueue v0.19.2's rewrite of an admitted TrainJob drops them.
KUEUE_DROPPED_POD_PATCH_FIELDS = ("terminationGracePeriodSeconds",)


def _kueue_dropped_fields(trainjob: dict) -> list[str]:
    dropped = []
    for patch in (trainjob.get("spec") or {}).get("runtimePatches") or []:
        spec_patch = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rp in spec_patch.get("replicatedJobs") or []:
            pod_patch = (((rp.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
            dropped += [f"runtimePatches[manager={patch.get('manager')}] replicatedJob {rp.get('name')}: {f}"
                        for f in KUEUE_DROPPED_POD_PATCH_FIELDS if f in pod_patch]
    return dropped


def _apply_runtime_patches(rjobs: list[dict], patches: list[dict]) -> None:
    for patch in patches or []:
        spec_patch = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rp in spec_patch.get("replicatedJobs") or []:
            for rj in rjobs:
                if rj.get("name") != rp.get("name"):
                    continue
                pod_patch = (((rp.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
                pod = rj.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
                for key in ("nodeSelector",):
                    if key in pod_patch:
                        pod[key] = {**(pod.get(key) or {}), **pod_patch[key]}
                for key in ("tolerations",):
                    if key in pod_patch:
                        pod[key] = list(pod.get(key) or []) + list(pod_patch[key])
                for key in ("affinity", "securityContext", "serviceAccountName", "schedulingGates"):
                    if key in pod_patch:
                        pod[key] = copy.deepcopy(pod_patch[key])
                for cp in pod_patch.get("containers") or []:
                    for c in pod.get("containers") or []:
                        if c.get("name") == cp.get("name") and "securityContext" in cp:
                            c["securityContext"] = copy.deepcopy(cp["securityContext"])


def trainjob_pods(release: str, trainjob: dict, runtimes: dict) -> tuple[list[PodTemplate], Optional[RenderIssue]]:
    pods, issue = _trainjob_pods(release, trainjob, runtimes)
    dropped = _kueue_dropped_fields(trainjob) if _queue(trainjob) else []
    if issue is None and dropped:
        issue = RenderIssue(release, object_id(trainjob),
                            f"Kueue drops {'; '.join(dropped)} when it admits the job (it is built against Trainer "
                            "v2.2.1, which lacks the field), and the job never gets a pod",
                            "set it in the runtime's pod template instead (the platform's ClusterTrainingRuntime "
                            "torch-checkpointed carries a 60 s terminationGracePeriodSeconds)")
    return pods, issue


def _trainjob_pods(release: str, trainjob: dict, runtimes: dict) -> tuple[list[PodTemplate], Optional[RenderIssue]]:
    spec = trainjob.get("spec") or {}
    ref = spec.get("runtimeRef") or {}
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    ns = (trainjob.get("metadata") or {}).get("namespace")
    key = (kind, ns if kind == "TrainingRuntime" else None, ref.get("name"))
    runtime = runtimes.get(key)
    oid = object_id(trainjob)
    if runtime is None:
        return [], RenderIssue(release, oid, f"its runtime {kind} {ref.get('name')!r} is not among the rendered objects",
                               "install the Trainer runtimes (the chart's runtimes.*) or name one that exists")
    rt_spec = runtime.get("spec") or {}
    ml = rt_spec.get("mlPolicy") or {}
    trainer = spec.get("trainer") or {}
    num_nodes = _int(trainer.get("numNodes"), _int(ml.get("numNodes"), 1))
    mpi = ml.get("mpi") or {}
    launcher_as_node = bool(mpi.get("runLauncherAsNode"))
    rjobs = copy.deepcopy(((rt_spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or [])
    _apply_runtime_patches(rjobs, spec.get("runtimePatches") or [])
    counted: list[tuple[dict, int, dict]] = []
    for rj in rjobs:
        job_tmpl = rj.get("template") or {}
        ancestor = ((job_tmpl.get("metadata") or {}).get("labels") or {}).get(TRAINJOB_ANCESTOR_LABEL)
        job_spec = job_tmpl.get("spec") or {}
        pod_tmpl = copy.deepcopy(job_spec.get("template") or {})
        pod_spec = pod_tmpl.setdefault("spec", {})
        is_trainer = ancestor == TRAINER_ANCESTOR
        if is_trainer:
            pods = num_nodes  # replicas forced to 1, the Job's pods = numNodes
        else:
            pods = _int(rj.get("replicas"), 1) * _job_pods(job_spec)
            if launcher_as_node and rj.get("name") == TRAINER_NODE and trainer.get("numNodes") is not None:
                pods = max(num_nodes - 1, 1)
        if is_trainer or (launcher_as_node and rj.get("name") == TRAINER_NODE):
            for c in pod_spec.get("containers") or []:
                if c.get("name") != TRAINER_NODE:
                    continue
                if is_trainer:
                    for f in ("image", "command", "args"):
                        if trainer.get(f) is not None:
                            c[f] = copy.deepcopy(trainer[f])
                if trainer.get("env"):
                    names = {e.get("name") for e in trainer["env"]}
                    c["env"] = [e for e in c.get("env") or [] if e.get("name") not in names] + copy.deepcopy(trainer["env"])
                if trainer.get("resourcesPerNode") is not None:
                    c["resources"] = _merge_resources(c.get("resources") or {}, trainer["resourcesPerNode"])
        counted.append((rj, pods, pod_tmpl))
    total = sum(p for _, p, _ in counted)
    out = []
    for rj, pods, pod_tmpl in counted:
        pt = _from_pod_template(release, trainjob, pod_tmpl, pods, job=True, queue_name=_queue(trainjob),
                                multi_node=total > 1, job_pods=total, workload=oid, podset=rj.get("name", "main"))
        pt.owner = f"{oid}[{rj.get('name')}]"
        if pods > 0:
            out.append(pt)
    return out, None


# ---------------------------------------------------------------------------------------------
# JupyterHub user servers: pods the hub spawns (KubeSpawner), which no manifest shows
# ---------------------------------------------------------------------------------------------


def _cfg(values: dict, path: str, default: Any = None) -> Any:
    cur: Any = values
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


# KubeSpawner's default server port (kubespawner KubeSpawner.port = 8888; z2jh 4.4.0 does not change it).
KUBESPAWNER_PORT = 8888


def jupyterhub_user_pods(release: str, namespace: Optional[str], values: dict) -> list[PodTemplate]:
    """One user server pod per profile (one if there are none), as the zero-to-jupyterhub 4.4.0 hub
    configures KubeSpawner (files/hub/jupyterhub_config.py): image, uid/fsGid, cpu/memory guarantee ->
    requests and limit -> limits, extraResource, nodeSelector, tolerations (scheduling.userPods +
    singleuser.extraTolerations), required node affinity, singleuser.initContainers, extraLabels,
    allowPrivilegeEscalation, and with singleuser.cloudMetadata.blockWithIptables the privileged
    NET_ADMIN `block-cloud-metadata` init container; each profile's kubespawner_override on top.
    `values`: the release's values coalesced with the chart's defaults."""
    su = values.get("singleuser") or {}
    base: dict[str, Any] = {
        "image": f"{_cfg(su, 'image.name', '')}:{_cfg(su, 'image.tag', '')}".rstrip(":"),
        "uid": su.get("uid"), "fs_gid": su.get("fsGid"),
        "cpu_guarantee": _cfg(su, "cpu.guarantee"), "cpu_limit": _cfg(su, "cpu.limit"),
        "mem_guarantee": _cfg(su, "memory.guarantee"), "mem_limit": _cfg(su, "memory.limit"),
        "extra_resource_guarantees": dict(_cfg(su, "extraResource.guarantees", {}) or {}),
        "extra_resource_limits": dict(_cfg(su, "extraResource.limits", {}) or {}),
        "node_selector": dict(su.get("nodeSelector") or {}),
        "tolerations": list(_cfg(values, "scheduling.userPods.tolerations", []) or []) + list(su.get("extraTolerations") or []),
        "node_affinity_required": list(_cfg(su, "extraNodeAffinity.required", []) or []),
        "init_containers": copy.deepcopy(list(su.get("initContainers") or [])),
        "extra_labels": dict(su.get("extraLabels") or {}),
        "allow_privilege_escalation": su.get("allowPrivilegeEscalation"),
    }
    if _cfg(values, "scheduling.userPods.nodeAffinity.matchNodePurpose") == "require":
        base["node_affinity_required"].append({"matchExpressions": [
            {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}]})
    if _cfg(su, "cloudMetadata.blockWithIptables") is True:
        base["init_containers"].append({
            "name": "block-cloud-metadata",
            "image": f"{_cfg(su, 'networkTools.image.name')}:{_cfg(su, 'networkTools.image.tag')}",
            "command": ["iptables", "--append", "OUTPUT", "--protocol", "tcp", "--destination",
                        str(_cfg(su, "cloudMetadata.ip")), "--destination-port", "80", "--jump", "DROP"],
            "securityContext": {"privileged": True, "runAsUser": 0, "capabilities": {"add": ["NET_ADMIN"]}},
            "resources": _cfg(su, "networkTools.resources", {}) or {},
        })
    profiles = list(su.get("profileList") or []) or [{"slug": "default"}]
    out = []
    for prof in profiles:
        cfg = {**base, **copy.deepcopy(prof.get("kubespawner_override") or {})}
        requests = {k: v for k, v in (("cpu", cfg.get("cpu_guarantee")), ("memory", cfg.get("mem_guarantee"))) if v}
        limits = {k: v for k, v in (("cpu", cfg.get("cpu_limit")), ("memory", cfg.get("mem_limit"))) if v}
        requests.update(cfg.get("extra_resource_guarantees") or {})
        limits.update(cfg.get("extra_resource_limits") or {})
        sc: dict[str, Any] = {}
        if cfg.get("uid") is not None:
            sc["runAsUser"] = cfg["uid"]
        if cfg.get("allow_privilege_escalation") is not None:
            sc["allowPrivilegeEscalation"] = cfg["allow_privilege_escalation"]
        spec: dict[str, Any] = {
            # KubeSpawner's notebook container and its port (jupyterhub/kubespawner objects.py make_pod:
            # V1ContainerPort(name='notebook-port', container_port=port), port 8888 by default), which
            # z2jh's singleuser NetworkPolicy allows by name.
            "containers": [{"name": "notebook", "image": cfg.get("image"), "securityContext": sc,
                            "ports": [{"name": "notebook-port", "containerPort": KUBESPAWNER_PORT}],
                            "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v}}],
            "initContainers": cfg.get("init_containers") or [],
            "nodeSelector": cfg.get("node_selector") or {},
            "tolerations": cfg.get("tolerations") or [],
            "securityContext": {"fsGroup": cfg["fs_gid"]} if cfg.get("fs_gid") is not None else {},
        }
        if cfg.get("node_affinity_required"):
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": cfg["node_affinity_required"]}}}
        labels = {"app": "jupyterhub", "component": "singleuser-server", "release": release,
                  "hub.jupyter.org/network-access-hub": "true", **(cfg.get("extra_labels") or {})}
        owner = f"Pod/{namespace}/jupyter-<user> (profile {prof.get('slug') or prof.get('display_name')})"
        out.append(PodTemplate(release, owner, "Pod", namespace, labels, {}, spec, 1,
                               queue_name=labels.get(QUEUE_NAME_LABEL), workload=owner))
    return out


# ---------------------------------------------------------------------------------------------
# Pods the Prometheus operator makes from Prometheus and Alertmanager objects
# ---------------------------------------------------------------------------------------------

MONITORING_API = "monitoring.coreos.com/"
# prometheus-operator v0.93.1 cmd/operator/main.go: defaultReloaderCPU/defaultReloaderMemory, used for
# the config-reloader's requests and limits unless the operator's flags say otherwise ("0": none).
RELOADER_DEFAULTS = {"cpu-request": "10m", "cpu-limit": "10m", "memory-request": "50Mi", "memory-limit": "50Mi"}


def reloader_resources(releases: Iterable[Any]) -> dict:
    """The config-reloader sidecar's resources, from the operator Deployment's --config-reloader-* flags."""
    flags = dict(RELOADER_DEFAULTS)
    for rel in releases:
        for obj in rel.objects:
            if obj.get("kind") != "Deployment":
                continue
            for c in (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
                args = [str(a) for a in (c.get("args") or [])]
                if not any(a.startswith("--prometheus-config-reloader") for a in args):
                    continue
                for a in args:
                    for key in RELOADER_DEFAULTS:
                        if a.startswith(f"--config-reloader-{key}="):
                            flags[key] = a.split("=", 1)[1]
    out: dict[str, dict] = {}
    for key, value in flags.items():
        res, part = key.split("-")
        if str(value) != "0":
            out.setdefault("requests" if part == "request" else "limits", {})[res] = value
    return out


def _merge_containers(base: list[dict], patches: list[dict]) -> list[dict]:
    """k8s.MergePatchContainers: a patch naming an operator container is merged into it (resources
    key by key), others are appended."""
    out = copy.deepcopy(base)
    for patch in patches or []:
        mine = next((c for c in out if c.get("name") == patch.get("name")), None)
        if mine is None:
            out.append(copy.deepcopy(patch))
            continue
        for k, v in patch.items():
            mine[k] = _merge_resources(mine.get("resources") or {}, v) if k == "resources" else copy.deepcopy(v)
    return out


def operator_pods(release: str, obj: dict, reloader: dict) -> list[PodTemplate]:
    """The StatefulSet pods the operator (v0.93.1 pkg/prometheus/server/statefulset.go,
    pkg/alertmanager/statefulset.go) makes for one Prometheus or Alertmanager: the main container with
    spec.resources (Alertmanager: a 200Mi memory request when none is set), the config-reloader sidecar
    and init-config-reloader with the operator's reloader resources, a Thanos sidecar when configured,
    spec.containers/initContainers merged by name; spec.replicas (default 1) per shard."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    name, ns = meta.get("name"), meta.get("namespace")
    main = "prometheus" if kind == "Prometheus" else "alertmanager"
    resources = copy.deepcopy(spec.get("resources") or {})
    if kind == "Alertmanager" and "memory" not in (resources.get("requests") or {}):
        resources.setdefault("requests", {})["memory"] = "200Mi"
    # The web port (spec.portName, default "http-web"; 9090 / 9093) and the reloader's "reloader-web" (8080),
    # which the chart's Services target by name (scrape.py models the same).
    web = {"name": spec.get("portName") or "http-web", "containerPort": 9090 if kind == "Prometheus" else 9093}
    containers = [{"name": main, "resources": resources, "ports": [web]},
                  {"name": "config-reloader", "resources": copy.deepcopy(reloader),
                   "ports": [{"name": "reloader-web", "containerPort": 8080}]}]
    if kind == "Prometheus" and spec.get("thanos") is not None:
        containers.append({"name": "thanos-sidecar", "resources": copy.deepcopy((spec.get("thanos") or {}).get("resources") or {})})
    pod_spec: dict[str, Any] = {
        "containers": _merge_containers(containers, spec.get("containers") or []),
        "initContainers": _merge_containers([{"name": "init-config-reloader", "resources": copy.deepcopy(reloader)}],
                                            spec.get("initContainers") or []),
    }
    for key in ("nodeSelector", "tolerations", "affinity", "securityContext", "priorityClassName",
                "topologySpreadConstraints", "serviceAccountName", "hostNetwork"):
        if spec.get(key) is not None:
            pod_spec[key] = copy.deepcopy(spec[key])
    replicas = max(_int(spec.get("replicas"), 1), 0)
    shards = max(_int(spec.get("shards"), 1), 1) if kind == "Prometheus" else 1
    labels = {"app.kubernetes.io/name": main, "app.kubernetes.io/instance": name, "app.kubernetes.io/managed-by":
              "prometheus-operator", main: name, "operator.prometheus.io/name": name,
              **((spec.get("podMetadata") or {}).get("labels") or {})}
    out = []
    for shard in range(shards):
        sts = f"{main}-{name}" + (f"-shard-{shard}" if shard else "")
        out.append(PodTemplate(release, f"StatefulSet/{ns}/{sts}", "StatefulSet", ns, dict(labels), {}, copy.deepcopy(pod_spec),
                               replicas))
    return out


def _is_jupyterhub(rel: Any) -> bool:
    chart = str(getattr(rel, "chart", "") or "")
    return chart.rstrip("/").rsplit("/", 1)[-1] == "jupyterhub"


def pod_templates(releases: Iterable[Any]) -> tuple[list[PodTemplate], list[RenderIssue]]:
    """Every pod template of every release, and what could not be resolved (a TrainJob's runtime)."""
    releases = list(releases)
    runtimes = _runtime_index(releases)
    reloader: Optional[dict] = None
    out: list[PodTemplate] = []
    issues: list[RenderIssue] = []
    for rel in releases:
        values = getattr(rel, "values", None)
        if _is_jupyterhub(rel) and isinstance(values, dict):
            out.extend(jupyterhub_user_pods(rel.name, rel.namespace, values))
        for obj in rel.objects:
            kind = obj.get("kind")
            spec = obj.get("spec") or {}
            hooks = _hook(obj)
            if hooks and hooks <= TEST_HOOKS:
                continue  # helm test hooks never run on install/upgrade
            hook = bool(hooks)
            n_out = len(out)
            api = str(obj.get("apiVersion", ""))
            if kind in ("Deployment", "ReplicaSet", "StatefulSet") and api.startswith("apps/"):
                out.append(_from_pod_template(rel.name, obj, spec.get("template") or {}, _int(spec.get("replicas"), 1), hook=hook))
            elif kind == "DaemonSet" and api.startswith("apps/"):
                out.append(_from_pod_template(rel.name, obj, spec.get("template") or {}, 1, daemonset=True, hook=hook))
            elif kind == "Job" and api.startswith("batch/"):
                n = _job_pods(spec)
                out.append(_from_pod_template(rel.name, obj, spec.get("template") or {}, n, hook=hook, job=True,
                                              queue_name=_queue(obj), multi_node=n > 1, job_pods=n, workload=object_id(obj)))
            elif kind == "CronJob" and api.startswith("batch/"):
                js = (spec.get("jobTemplate") or {}).get("spec") or {}
                jt_labels = ((spec.get("jobTemplate") or {}).get("metadata") or {}).get("labels") or {}
                n = _job_pods(js)
                out.append(_from_pod_template(rel.name, obj, js.get("template") or {}, n, hook=hook, job=True,
                                              queue_name=jt_labels.get(QUEUE_NAME_LABEL), multi_node=n > 1, job_pods=n,
                                              workload=object_id(obj)))
            elif kind == "Pod" and api == "v1":
                out.append(PodTemplate(rel.name, object_id(obj), "Pod", (obj.get("metadata") or {}).get("namespace"),
                                       dict((obj.get("metadata") or {}).get("labels") or {}),
                                       dict((obj.get("metadata") or {}).get("annotations") or {}), spec, 1, hook=hook,
                                       queue_name=_queue(obj), workload=object_id(obj)))
            elif kind == "JobSet" and api.startswith("jobset.x-k8s.io/"):
                parts = [(rj, _int(rj.get("replicas"), 1) * _job_pods((rj.get("template") or {}).get("spec") or {}))
                         for rj in spec.get("replicatedJobs") or []]
                total = sum(n for _, n in parts)
                for rj, n in parts:
                    pt = _from_pod_template(rel.name, obj, ((rj.get("template") or {}).get("spec") or {}).get("template") or {},
                                            n, hook=hook, job=True, queue_name=_queue(obj), multi_node=total > 1,
                                            job_pods=total, workload=object_id(obj), podset=rj.get("name", "main"))
                    pt.owner = f"{object_id(obj)}[{rj.get('name')}]"
                    out.append(pt)
            elif kind in ("Prometheus", "Alertmanager") and api.startswith(MONITORING_API) and not hook:
                if reloader is None:
                    reloader = reloader_resources(releases)
                out.extend(operator_pods(rel.name, obj, reloader))
            elif kind == "TrainJob" and api.startswith("trainer.kubeflow.org/"):
                pts, issue = trainjob_pods(rel.name, obj, runtimes)
                out.extend(pts)
                if issue:
                    issues.append(issue)
            if hooks and not hooks & INSTALL_HOOKS:
                for pt in out[n_out:]:
                    pt.install_time = False
    return out, issues


# ---------------------------------------------------------------------------------------------
# Requests and limits
# ---------------------------------------------------------------------------------------------


def _amount(resource: str, value: Any) -> int:
    """Integer amount: CPU in millicores, everything else in base units rounded up."""
    return cpu_millis(value) if resource == "cpu" else memory_bytes(value)


def container_resources(c: dict) -> tuple[dict[str, int], dict[str, int]]:
    res = c.get("resources") or {}
    req = {k: _amount(k, v) for k, v in (res.get("requests") or {}).items()}
    lim = {k: _amount(k, v) for k, v in (res.get("limits") or {}).items()}
    # API defaulting: a resource with a limit and no request gets request = limit (before admission).
    for k, v in lim.items():
        req.setdefault(k, v)
    return req, lim


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def _max(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out.get(k, 0), v)
    return out


def effective_requests(spec: dict, per_container: Optional[list[tuple[dict[str, int], dict[str, int]]]] = None,
                       ) -> dict[str, int]:
    """What the scheduler reserves for a pod (Kubernetes "Resource sharing within containers" and
    "Sidecar containers"): max(sum of app containers + sidecars, the largest init container plus the
    sidecars started before it) + spec.overhead. `per_container`: (requests, limits) per container in
    initContainers + containers order, e.g. after LimitRange defaults; else read from the spec."""
    inits = list(spec.get("initContainers") or [])
    apps = list(spec.get("containers") or [])
    if per_container is None:
        per_container = [container_resources(c) for c in inits + apps]
    init_res, app_res = per_container[:len(inits)], per_container[len(inits):]
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c, (req, _) in zip(inits, init_res):
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, req)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(req, sidecars))
    total: dict[str, int] = dict(sidecars)
    for req, _ in app_res:
        total = _add(total, req)
    total = _max(total, init_peak)
    overhead = {k: _amount(k, v) for k, v in (spec.get("overhead") or {}).items()}
    return _add(total, overhead)


def parse_amounts(resources: dict) -> dict[str, int]:
    return {k: _amount(k, v) for k, v in (resources or {}).items()}


def fmt_amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{value}m" if value % 1000 else f"{value // 1000}"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        return f"{value / 1024 ** 3:.2f}Gi" if value >= 1024 ** 3 else f"{value / 1024 ** 2:.0f}Mi"
    return str(value)


def quantity_equal(a: Any, b: Any) -> bool:
    return parse_quantity(a) == parse_quantity(b)
