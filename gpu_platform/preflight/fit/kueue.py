"""Kueue's flavor assignment, as Kueue v0.19.2 does it for a workload (sigs.k8s.io/kueue
pkg/scheduler/flavorassigner/flavorassigner.go: assignFlavors, findFlavorForPodSets,
checkFlavorForPodSets, flavorSelector, fitsResourceQuota, shouldTryNextFlavor), on an empty
ClusterQueue or one whose flavors other workloads already use (`usage`).

Per pod set, in order, each requested resource's resource group tries its flavors in the
ClusterQueue's order; a flavor is skipped when
- its nodeTaints (NoSchedule/NoExecute) are not tolerated by the pod's tolerations plus the flavor's own,
- the pod's nodeSelector and required node affinity, cut to the keys of THIS flavor's nodeLabels
  (a term left empty matches every flavor), do not match the flavor's nodeLabels,
- a requested resource's quota (nominalQuota, plus borrowingLimit when the queue is in a cohort,
  minus what earlier pod sets of the same workload took) is smaller than the pod set's request
  (a resource the flavor lists no quota for has quota 0: NoFit),
- the quota left after `usage` (admitted workloads) is smaller than the request: mode Preempt, or
  NoPreemptionCandidates when nothing of lower priority runs there (assumed: the platform's
  workloads share one priority); either way shouldTryNextFlavor goes on to the next flavor (whenCanPreempt
  TryNextFlavor, and NoPreemptionCandidates always), so a flavor that is full sends the workload on to
  the next flavor of its ClusterQueue, whatever nodes that flavor stands for.
The first flavor left wins (mode Fit: FlavorFungibility searches no further). Resources whose name
starts with one of the Configuration's resources.excludeResourcePrefixes are dropped from the requests
first (pkg/workload/workload.go dropExcludedResources); any other requested resource no resource group
covers makes the workload inadmissible ("resource ... unavailable in ClusterQueue"). Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from gpu_platform.preflight.fit.pods import _amount, fmt_amount
from gpu_platform.preflight.fit.selectors import match_expression, tolerates_any

BLOCKING = ("NoSchedule", "NoExecute")


@dataclass
class PodSetAssignment:
    podset: str
    flavors: dict[str, str]  # resource -> flavor


@dataclass
class Assignment:
    """Kueue's verdict for one workload: the flavors per pod set, or why it is not admitted."""
    podsets: list[PodSetAssignment] = field(default_factory=list)
    reason: Optional[str] = None  # None: admitted (quota reserved)

    @property
    def admitted(self) -> bool:
        return self.reason is None

    def flavor_of(self, podset: str) -> Optional[str]:
        """The flavor of the pod set's GPUs (else of any resource): the one whose nodes it lands on."""
        for ps in self.podsets:
            if ps.podset == podset:
                return ps.flavors.get("nvidia.com/gpu") or next(iter(ps.flavors.values()), None)
        return None


def flavor_mismatch(spec: dict, flavor: dict) -> Optional[str]:
    """Why Kueue does not consider `flavor` for a pod with this spec (checkFlavorForPodSets), or None."""
    fspec = flavor.get("spec") or {}
    name = (flavor.get("metadata") or {}).get("name")
    tolerations = list(spec.get("tolerations") or []) + list(fspec.get("tolerations") or [])
    for taint in fspec.get("nodeTaints") or []:
        if taint.get("effect") in BLOCKING and not tolerates_any(tolerations, taint):
            return f"untolerated taint {taint.get('key')}={taint.get('value', '')}:{taint.get('effect')} in flavor {name}"
    labels = {k: str(v) for k, v in (fspec.get("nodeLabels") or {}).items()}
    keys = set(labels)
    if any(labels.get(k) != str(v) for k, v in (spec.get("nodeSelector") or {}).items() if k in keys):
        return f"flavor {name} doesn't match node affinity"
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = []
    for t in (req or {}).get("nodeSelectorTerms") or []:
        kept = [e for e in t.get("matchExpressions") or [] if e.get("key") in keys]
        if not kept:
            terms = []  # a term with no relevant key matches every flavor (the terms are ORed)
            break
        terms.append(kept)
    if terms and not any(all(match_expression(labels, e) for e in t) for t in terms):
        return f"flavor {name} doesn't match node affinity"
    return None


def _quota(fl: dict, resource: str, cohort: bool) -> int:
    for r in fl.get("resources") or []:
        if r.get("name") == resource:
            q = _amount(resource, r.get("nominalQuota", 0))
            if cohort and r.get("borrowingLimit") is not None:
                q += _amount(resource, r["borrowingLimit"])
            return q
    return 0


def manager_excluded_prefixes(config: Any) -> tuple[str, ...]:
    """resources.excludeResourcePrefixes of a Kueue Configuration (config.kueue.x-k8s.io), as parsed YAML."""
    resources = (config or {}).get("resources") if isinstance(config, dict) else None
    return tuple(str(p) for p in ((resources or {}).get("excludeResourcePrefixes") or []))


def assign(podsets: list[tuple[str, dict, dict[str, int]]], cluster_queue: dict, flavors: dict[str, dict],
           usage: Optional[dict[tuple[str, str], int]] = None, excluded: Sequence[str] = ()) -> Assignment:
    """`podsets`: (name, pod spec, total requests of the pod set = per-pod requests x count), in the
    workload's order. `flavors`: ResourceFlavor objects by name. `usage`: (flavor, resource) -> what
    admitted workloads of the ClusterQueue already use (their quota cannot be preempted). `excluded`:
    Kueue's excludeResourcePrefixes (manager_excluded_prefixes)."""
    usage = dict(usage or {})
    spec = cluster_queue.get("spec") or {}
    groups = spec.get("resourceGroups") or []
    cohort = bool(spec.get("cohort") or spec.get("cohortName"))
    used: dict[tuple[str, str], int] = {}
    out = Assignment()
    for ps_name, pod_spec, requests in podsets:
        requests = {k: v for k, v in requests.items()
                    if v > 0 and k != "pods" and not any(k.startswith(p) for p in excluded)}
        chosen: dict[str, str] = {}
        for resource in requests:
            if resource in chosen:
                continue
            rg = next((g for g in groups if resource in (g.get("coveredResources") or [])), None)
            if rg is None:  # neither covered nor excluded: Kueue never admits it
                out.reason = (f"pod set {ps_name}: resource {resource} unavailable in ClusterQueue "
                              f"{(cluster_queue.get('metadata') or {}).get('name')}")
                return out
            wanted = [r for r in requests if r in (rg.get("coveredResources") or [])]
            reasons = []
            for fl in rg.get("flavors") or []:
                fname = fl.get("name")
                flavor = flavors.get(fname)
                if flavor is None:
                    reasons.append(f"flavor {fname} not found")
                    continue
                why = flavor_mismatch(pod_spec, flavor)
                if why:
                    reasons.append(why)
                    continue
                short = [f"insufficient quota for {r} in flavor {fname}, request > maximum capacity "
                         f"({fmt_amount(r, requests[r] + used.get((fname, r), 0))} > {fmt_amount(r, _quota(fl, r, cohort))})"
                         for r in wanted if requests[r] + used.get((fname, r), 0) > _quota(fl, r, cohort)]
                if short:
                    reasons += short
                    continue
                full = [f"insufficient unused quota for {r} in flavor {fname}, "
                        f"{fmt_amount(r, requests[r] + used.get((fname, r), 0) + usage.get((fname, r), 0) - _quota(fl, r, cohort))}"
                        " more needed" for r in wanted
                        if requests[r] + used.get((fname, r), 0) + usage.get((fname, r), 0) > _quota(fl, r, cohort)]
                if full:  # nothing to preempt: the next flavor is tried (shouldTryNextFlavor)
                    reasons += full
                    continue
                for r in wanted:
                    chosen[r] = fname
                    used[(fname, r)] = used.get((fname, r), 0) + requests[r]
                break
            else:
                out.reason = f"couldn't assign flavors to pod set {ps_name}: " + ", ".join(reasons or ["no flavors"])
                return out
        out.podsets.append(PodSetAssignment(ps_name, chosen))
    return out


def workload_podsets(pts: list[Any], requests_of) -> list[tuple[str, dict, dict[str, int]]]:
    """(pod set, pod spec, total requests) of one workload's pod templates; `requests_of(pt)`: per-pod
    effective requests (after the namespace's LimitRange)."""
    out = []
    for pt in pts:
        per = requests_of(pt)
        out.append((pt.podset, pt.spec, {k: v * max(pt.replicas, 1) for k, v in per.items()}))
    return out
