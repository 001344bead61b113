"""Rules of a `cloud: kubernetes` stack that read the rest of the stack: node types against the pools and the
catalog, prices all or none, the pools' taints and zones, keys that mean nothing on a cluster the stack does not
create, and the cluster's Kubernetes minor against upstream support."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from gpu_platform.config.base import MISSING, ConfigIssue, non_host_range_problem
from gpu_platform.config.kubernetes import GPU_TAINT_KEY, KubernetesSection

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog

# The capacities a node group of an existing cluster can be: spot (an EKS Spot node group, a GKE Spot pool,
# preemptible VMs of any cloud) or on-demand (everything else, an on-premises node included).
CAPACITIES = ("spot", "on-demand")
_PRICE_KEY = {"on-demand": "onDemand", "spot": "spot"}


def check_stack(cfg: "StackConfig", catalog: "Catalog") -> list[ConfigIssue]:
    section: KubernetesSection = cfg.kubernetes  # type: ignore[assignment]
    issues: list[ConfigIssue] = []
    issues += _unused_keys(cfg)
    issues += _node_types(section, catalog)
    issues += _pools(cfg, section, catalog)
    issues += _system_pool(section, catalog)
    issues += _prices(cfg, section)
    issues += _version(cfg)
    issues += _network(section)
    issues += _checkpoint_store(section)
    return issues


def _checkpoint_store(section: KubernetesSection) -> list[ConfigIssue]:
    """caBundle: PEM certificates only (the value is described, never shown), and only for an https endpoint."""
    from gpu_platform.config.kubernetes import ca_bundle_problems

    store = section.checkpoint_store
    if store is None or store.ca_bundle is None:
        return []
    key = "kubernetes.checkpointStore.caBundle"
    shown = f"(PEM text, {len(store.ca_bundle.splitlines())} lines: not shown)"
    if not store.endpoint.startswith("https://"):
        return [ConfigIssue(key, shown, f"only with an https endpoint (the endpoint is {store.endpoint}: no TLS to "
                                        "verify); leave it out")]
    return [ConfigIssue(key, shown, p) for p in ca_bundle_problems(store.ca_bundle)]


def _unused_keys(cfg: "StackConfig") -> list[ConfigIssue]:
    """Keys a cloud component acts on that nothing acts on here: set, they would promise what is not done."""
    issues = []
    if cfg.admin_cidrs:
        issues.append(ConfigIssue("adminCidrs", cfg.admin_cidrs,
                                  "empty on cloud kubernetes: the program creates no API endpoint or firewall to open to "
                                  "them; who reaches your cluster's API is your cluster's own setting"))
    if cfg.price_overrides:
        first = next(iter(cfg.price_overrides))
        issues.append(ConfigIssue(f"priceOverrides.{first}", first,
                                  "no priceOverrides on cloud kubernetes: a node type's price is its "
                                  f"kubernetes.nodeTypes.<type>.usdPerHour {{onDemand, spot}}"))
    if not cfg.alert_emails:
        issues.append(ConfigIssue("alertEmails", [],
                                  "at least one address on cloud kubernetes: the program has no billing API of the "
                                  "cluster's owner to use, so Alertmanager's alerts (GPU spend run rate, idle GPUs), "
                                  "mailed to alertEmails, are the only ones; the policy pack requires them too"))
    if cfg.checkpoint_bucket.on_destroy != "retain":
        issues.append(ConfigIssue("checkpointBucket.onDestroy", cfg.checkpoint_bucket.on_destroy,
                                  "retain on cloud kubernetes: the checkpoint store (kubernetes.checkpointStore) is yours; "
                                  "the program never creates, empties or deletes it"))
    return issues


def _node_types(section: KubernetesSection, catalog: "Catalog") -> list[ConfigIssue]:
    from gpu_platform.data.quantity import cpu_millis, memory_bytes

    issues = []
    for name, t in section.node_types.items():
        key = f"kubernetes.nodeTypes.{name}"
        if t.catalog is not None:
            cloud, _, type_name = t.catalog.partition("/")
            if catalog.instance(cloud, type_name) is None:
                known = sorted(x.name for x in catalog.instances(cloud))
                issues.append(ConfigIssue(f"{key}.catalog", t.catalog,
                                          f"a {cloud} type of the price catalog (gpu_platform/costs/catalog/{cloud}.yaml): "
                                          f"{', '.join(known[:40])}{', ...' if len(known) > 40 else ''}; or describe the "
                                          "node with gpus, gpuModel, vcpus and memoryGib"))
                continue
        own = catalog.instance("kubernetes", name)
        if own is None or t.allocatable is None:
            continue
        a = t.allocatable
        if cpu_millis(a.cpu) > own.vcpus * 1000:
            issues.append(ConfigIssue(f"{key}.allocatable.cpu", a.cpu, f"at most the node's {own.vcpus} vCPUs (allocatable "
                                                                       "is what the kubelet leaves of them)"))
        if memory_bytes(a.memory) > int(own.memory_gib * 1024 ** 3):
            issues.append(ConfigIssue(f"{key}.allocatable.memory", a.memory,
                                      f"at most the node's {own.memory_gib:g} GiB (allocatable is what the kubelet leaves)"))
    return issues


def _pools(cfg: "StackConfig", section: KubernetesSection, catalog: "Catalog") -> list[ConfigIssue]:
    issues = []
    names = [p.name for p in cfg.gpu_pools]
    for i, p in enumerate(cfg.gpu_pools):
        if p.capacity not in CAPACITIES:
            issues.append(ConfigIssue(f"gpuPools[{i}].capacity", p.capacity,
                                      f"one of {', '.join(CAPACITIES)} on cloud kubernetes (preemptible VMs are spot here)"))
    for key, extra in section.pools.items():
        if key not in names:
            issues.append(ConfigIssue(f"kubernetes.pools.{key}", key, f"the name of a pool in gpuPools: {', '.join(names)}"))
            continue
        seen = set()
        for j, t in enumerate(extra.taints):
            if t.key == GPU_TAINT_KEY:
                issues.append(ConfigIssue(f"kubernetes.pools.{key}.taints[{j}].key", t.key,
                                          f"a taint other than {GPU_TAINT_KEY}: every GPU node carries "
                                          f"{GPU_TAINT_KEY}=present:NoSchedule already (the platform tolerates exactly that)"))
            if (t.key, t.effect) in seen:
                issues.append(ConfigIssue(f"kubernetes.pools.{key}.taints[{j}]", t.key, "each key and effect once"))
            seen.add((t.key, t.effect))
    return issues


def _system_pool(section: KubernetesSection, catalog: "Catalog") -> list[ConfigIssue]:
    pool = section.system_pool
    issues = []
    t = catalog.instance("kubernetes", pool.instance_type)
    if pool.instance_type not in section.node_types:
        issues.append(ConfigIssue("kubernetes.systemPool.instanceType", pool.instance_type,
                                  f"a kubernetes.nodeTypes key: {', '.join(sorted(section.node_types))}"))
    elif t is not None and t.is_gpu:
        issues.append(ConfigIssue("kubernetes.systemPool.instanceType", pool.instance_type,
                                  f"a node type without GPUs ({pool.instance_type} has {t.gpus}): the system nodes run the "
                                  "platform's controllers and CPU work, never a GPU job"))
    if pool.min_nodes > pool.max_nodes:
        issues.append(ConfigIssue("kubernetes.systemPool.minNodes", pool.min_nodes, f"at most maxNodes ({pool.max_nodes})"))
    return issues


def _prices(cfg: "StackConfig", section: KubernetesSection) -> list[ConfigIssue]:
    """Every node type a group runs priced for the group's capacity, or none: a bill with some node groups
    priced and others not would read as the whole bill."""
    used = [(f"gpuPools[{i}]", p.instance_type, p.capacity) for i, p in enumerate(cfg.gpu_pools)]
    used.append(("kubernetes.systemPool", section.system_pool.instance_type, "on-demand"))
    priced, unpriced = [], []
    for where, type_name, capacity in used:
        t = section.node_types.get(type_name)
        if t is None or capacity not in _PRICE_KEY:
            continue
        price = getattr(t.usd_per_hour, {"on-demand": "on_demand", "spot": "spot"}[capacity], None) if t.usd_per_hour else None
        (priced if price is not None else unpriced).append((where, type_name, capacity))
    if not priced or not unpriced:
        return []
    names = ", ".join(f"{w} ({t}, {c})" for w, t, c in unpriced)
    return [ConfigIssue(f"kubernetes.nodeTypes.{t}.usdPerHour.{_PRICE_KEY[c]}", MISSING,
                        f"a price for every node group or for none: {names} have none while "
                        f"{', '.join(w for w, _, _ in priced)} have one (the cost estimate would show part of the bill "
                        "as the whole)")
            for _, t, c in unpriced[:1]]


NETWORK_HOW = ("docs/quickstart-kubernetes.md \"The network\" says how to read each from the cluster")


def _network(section: KubernetesSection) -> list[ConfigIssue]:
    """kubernetes.network: required, so that preflight checks the platform's connections against the cluster's
    own CNI instead of skipping them (the stack creates no network to read them from)."""
    import ipaddress

    net = section.network
    if net is None:
        return [ConfigIssue("kubernetes.network", MISSING,
                            "required on cloud kubernetes: {cni: cilium | calico | other-upstream | none, podCidrs, "
                            "nodeCidrs, apiServer: {onNodes, port}}, what enforces NetworkPolicies on the cluster and "
                            "where pods, nodes and the API server are; preflight checks the platform's connections (the "
                            "hub to the API server, notebooks to Pipelines, ...) against it. " + NETWORK_HOW)]
    issues = []
    key = "kubernetes.network"
    if net.cilium is not None and net.cni != "cilium":
        issues.append(ConfigIssue(f"{key}.cilium", net.cilium.model_dump(by_alias=True),
                                  f"only with cni: cilium (the Cilium agent's settings; cni is {net.cni})"))
    if net.cni == "none":
        return issues
    for name, value in (("podCidrs", net.pod_cidrs), ("nodeCidrs", net.node_cidrs)):
        if not value:
            issues.append(ConfigIssue(f"{key}.{name}", MISSING,
                                      f"at least one CIDR with cni {net.cni}: where the cluster's "
                                      f"{'pods' if name == 'podCidrs' else 'nodes'} get their addresses (ipBlock rules are "
                                      f"matched against them). {NETWORK_HOW}"))
        elif len(set(value)) != len(value):
            issues.append(ConfigIssue(f"{key}.{name}", value, "each CIDR once"))
        for i, cidr in enumerate(value):
            problem = non_host_range_problem(ipaddress.ip_network(cidr), contains=True)
            if problem:
                issues.append(ConfigIssue(f"{key}.{name}[{i}]", cidr,
                                          f"the range the cluster's {'pods' if name == 'podCidrs' else 'nodes'} get their "
                                          f"addresses from (`kubectl get nodes -o wide`, the CNI's IPAM pools): {problem}, "
                                          "which no pod or node has; the network policies would treat it as theirs"))
    api = net.api_server
    if api is None:
        issues.append(ConfigIssue(f"{key}.apiServer", MISSING,
                                  f"{{onNodes, port}} with cni {net.cni}: whether the API server runs on the cluster's "
                                  "nodes (kubeadm, k3s, RKE2, Talos) or outside them (EKS, GKE, AKS), and the port of its "
                                  "endpoints (6443 on kubeadm, 443 on the managed control planes). " + NETWORK_HOW))
        return issues
    nodes = [ipaddress.ip_network(c) for c in net.node_cidrs]
    for i, c in enumerate(api.cidrs):
        n = ipaddress.ip_network(c)
        if api.on_nodes and nodes and not any(n.version == m.version and n.subnet_of(m) for m in nodes):
            issues.append(ConfigIssue(f"{key}.apiServer.cidrs[{i}]", c,
                                      f"a range inside nodeCidrs ({', '.join(net.node_cidrs)}) with onNodes: true (the API "
                                      "server runs on nodes), or onNodes: false"))
    if not api.on_nodes and not api.cidrs:
        issues.append(ConfigIssue(f"{key}.apiServer.cidrs", MISSING,
                                  "the addresses of the API server's endpoints with onNodes: false (`kubectl get "
                                  "endpointslices -n default -l kubernetes.io/service-name=kubernetes` prints them; a /32 "
                                  "each, or the subnets a managed control plane puts them in)"))
    return issues


def _version(cfg: "StackConfig") -> list[ConfigIssue]:
    """The minor the cluster runs: required (the program cannot ask the cluster offline), known to the version
    calendar and released upstream. Past upstream support it is a warning (kubernetes_warnings): the cluster
    exists, and its provider may support it longer."""
    from gpu_platform.data.versions_calendar import load_calendar, today

    if not cfg.kubernetes_version_pinned:
        return [ConfigIssue("kubernetesVersion", MISSING, "the minor your cluster runs, quoted (e.g. \"1.34\"; `kubectl "
                                                          "version` prints it as Server Version): the charts are rendered and "
                                                          "checked for it")]
    cal = load_calendar()
    row = cal.row("kubernetes", cfg.kubernetes_version)
    if row is None or row.status(today()) == "unreleased":
        known = ", ".join(cal.minors("kubernetes"))
        return [ConfigIssue("kubernetesVersion", cfg.kubernetes_version,
                            f"a released upstream minor the version calendar lists: {known}")]
    return []


def kubernetes_warnings(cfg: "StackConfig") -> list[str]:
    """What does not stop a deploy on cloud kubernetes but needs a person: a minor past upstream support, node types
    whose allocatable is a guess, no price, no checkpoint store, no device plugin install."""
    if cfg.cloud != "kubernetes" or cfg.kubernetes is None:
        return []
    from gpu_platform.data.versions_calendar import load_calendar, today

    section = cfg.kubernetes
    out = []
    row = load_calendar().row("kubernetes", cfg.kubernetes_version) if cfg.kubernetes_version else None
    if row is not None and row.status(today()) == "unsupported":
        out.append(f"kubernetesVersion {cfg.kubernetes_version} left upstream support on {row.end_of_standard.isoformat()}: "
                   "the platform's pinned charts are checked against supported minors only; upgrade the cluster (or confirm "
                   "your provider still supports it)")
    used = {p.instance_type for p in cfg.gpu_pools} | {section.system_pool.instance_type}
    guessed = sorted(n for n in used if n in section.node_types and section.node_types[n].allocatable is None)
    if guessed:
        out.append(f"kubernetes.nodeTypes ({', '.join(guessed)}): no allocatable given, so the job queue's quotas and the "
                   "cluster-fit check assume each kubelet reserves nothing but its 100Mi eviction threshold (an upper bound). "
                   "Copy `kubectl get node <node> -o jsonpath='{.status.allocatable}'` into allocatable {cpu, memory, pods}")
    if not any(section.node_types[n].usd_per_hour for n in used if n in section.node_types):
        out.append("kubernetes.nodeTypes: no usdPerHour on any node type, so the stack has no cost estimate, no GPU spend "
                   "run-rate alert and no cost guardrail of the policy pack (monthly ceiling, idle floor); set what a node "
                   "costs you per hour to have them")
    store = section.checkpoint_store
    if store is not None and store.ca_bundle:
        from gpu_platform.config.kubernetes import ca_bundle_expired

        for text in ca_bundle_expired(store.ca_bundle, today()):
            out.append(f"kubernetes.checkpointStore.caBundle: {text}, not today: training pods cannot verify the store's "
                       "TLS certificate if its chain needs it; put the CA's current certificate in the bundle")
    if section.checkpoint_store is None:
        out.append("kubernetes.checkpointStore is not set: ConfigMap training/checkpoint-store has no CHECKPOINT_URL. The "
                   "example TrainJob (examples/training) then stops at its start saying so; a job that reads the key without "
                   "`optional: true` never starts (CreateContainerConfigError) and holds its GPU quota until Kueue evicts "
                   "it (preflight's config-keys check reports one given with --job); a job that is preempted or evicted "
                   "restarts from its last checkpoint only if it writes one somewhere of its own")
    return out


__all__ = ["CAPACITIES", "check_stack", "kubernetes_warnings"]
