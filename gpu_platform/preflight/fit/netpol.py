"""Whether a NetworkPolicy set lets one connection through, with the semantics of the CNI that enforces it.

Kubernetes NetworkPolicy (networking.k8s.io/v1; the API reference and "Network Policies" concept page,
and sigs.k8s.io/network-policy-api cmd/policy-assistant pkg/matcher, the upstream reference evaluator):
- a policy selects the pods of its namespace its `podSelector` matches; it isolates them for Ingress
  and/or Egress by `policyTypes` (absent: Ingress, plus Egress when it has egress rules); a pod no policy
  isolates in a direction allows everything in that direction;
- an isolated pod allows what any rule of any policy isolating it allows (rules are additive, none
  deny); a connection needs the source's egress AND the destination's ingress;
- a rule matches when one of its peers matches (no `to`/`from`: every peer) and one of its ports does
  (no `ports`: every port); a peer is a podSelector (pods of the policy's namespace), a namespaceSelector
  (every pod of the namespaces it matches), both (pods matching both), or an ipBlock (`cidr` minus each
  `except`); a port is a protocol (default TCP) and a number, a number range up to `endPort`, or a
  name, which matches the destination pod's container port of that name and protocol;
- selectors match pods only: nodes and hostNetwork pods are reached by ipBlock alone, and no policy
  selects them.

Cilium (the Linode stacks' CNI; GKE Dataplane V2 is Cilium, GKE "About GKE Dataplane V2") differs in
one way that matters here: ipBlock/CIDR rules do not apply to traffic whose other side is a Cilium-managed
endpoint (a pod) or a node of the cluster (hostNetwork pods, a kubeadm API server), unless the agent's
`policy-cidr-match-mode` lists `pods` (1.20 and later) or `nodes` (Cilium docs
Documentation/security/policy/layer3.rst "IP/CIDR based" and "Selecting pods or nodes with CIDR /
ipBlock", and Documentation/network/kubernetes/policy.rst, at v1.18.2, v1.19.6 and v1.20.0;
pkg/ipcache/metadata.go resolveLabels: in-cluster prefixes lose their cidr labels, nodes keep them only
with PolicyCIDRMatchesNodes; pod identities are derived from pod labels and carry none). An address
outside the cluster (the internet, a GKE or EKS control plane) is matched by CIDR as upstream.

Cilium's own CiliumNetworkPolicy / CiliumClusterwideNetworkPolicy (cilium.io/v2) are evaluated on Cilium
dataplanes for the fields below (Documentation/security/policy/{intro,language,layer3,layer4,deny}.rst):
endpointSelector; ingress/egress/ingressDeny/egressDeny rules with from/toEndpoints, from/toEntities,
from/toCIDR, from/toCIDRSet (cidr, except) and toPorts (port number or name, endPort, protocol); deny
rules win over any allow; a selecting policy with a section of a direction isolates that direction
unless its enableDefaultDeny says false. Selectors as Cilium parses them (pkg/k8s/apis/cilium.io/utils/utils.go
ParseToCiliumRule, getEndpointSelector; pkg/k8s/utils/utils.go SanitizePodLabels, v1.18.2 to v1.20.0): a
CiliumNetworkPolicy's endpointSelector applies in its own namespace only, whatever namespace it names; its peers
stay there unless they name a namespace or namespace labels (io.cilium.k8s.namespace.labels.*); a peer with a
`reserved:` key selects that entity; a pod's identity carries its namespace's name and labels, its ServiceAccount
(io.cilium.k8s.policy.serviceaccount) and the cluster's name (io.cilium.k8s.policy.cluster). Anything else (L7 rules, toFQDNs, toServices, nodeSelector,
...) is reported as not evaluated instead of guessed.

Pure: objects in, decisions out.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional

from gpu_platform.preflight.fit.selectors import label_selector_matches

NETWORK_POLICY_API = "networking.k8s.io/v1"
CILIUM_API = "cilium.io/v2"
CILIUM_KINDS = ("CiliumNetworkPolicy", "CiliumClusterwideNetworkPolicy")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# The labels Cilium gives a pod's identity besides the pod's own (pkg/k8s/apis/cilium.io/const.go; set by
# pkg/k8s/utils/utils.go SanitizePodLabels, the same at v1.18.2, v1.19.6 and v1.20.0): its namespace's name and
# labels, its ServiceAccount and the cluster's name (the agent's cluster-name, "default" unless set).
CILIUM_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CILIUM_NAMESPACE_LABELS_PREFIX = "io.cilium.k8s.namespace.labels."
CILIUM_SERVICE_ACCOUNT_LABEL = "io.cilium.k8s.policy.serviceaccount"
CILIUM_CLUSTER_LABEL = "io.cilium.k8s.policy.cluster"
CILIUM_RESERVED_PREFIX = "reserved:"
# The CiliumNetworkPolicy/CiliumClusterwideNetworkPolicy fields this evaluator understands.
_CILIUM_SPEC_KEYS = {"endpointSelector", "ingress", "egress", "ingressDeny", "egressDeny", "enableDefaultDeny",
                     "description", "labels"}
_CILIUM_RULE_KEYS = {"fromEndpoints", "toEndpoints", "fromEntities", "toEntities", "fromCIDR", "toCIDR",
                     "fromCIDRSet", "toCIDRSet", "toPorts"}
_CILIUM_PORT_RULE_KEYS = {"ports"}


# ---------------------------------------------------------------------------------------------
# Addresses
# ---------------------------------------------------------------------------------------------


Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def _net(text: Any) -> Net:
    return ipaddress.ip_network(str(text), strict=False)


def subtract(nets: Iterable[Net], minus: Net) -> list[Net]:
    """`nets` without the addresses of `minus` (same address family only)."""
    out: list[Net] = []
    for n in nets:
        if n.version != minus.version or not n.overlaps(minus):
            out.append(n)
        elif n.subnet_of(minus):  # type: ignore[arg-type]
            continue
        else:
            out.extend(n.address_exclude(minus))  # type: ignore[arg-type]
    return out


def block(cidr: Any, excepts: Iterable[Any] = ()) -> list[Net]:
    """The addresses an ipBlock (cidr minus its excepts) stands for."""
    return list(_block(str(cidr), tuple(str(e) for e in excepts)))


@functools.lru_cache(maxsize=1024)
def _block(cidr: str, excepts: tuple[str, ...]) -> tuple[Net, ...]:
    nets = [_net(cidr)]
    for e in excepts:
        nets = subtract(nets, _net(e))
    return tuple(nets)


def covered(need: Iterable[Net], have: Iterable[Net]) -> bool:
    """Whether every address of `need` lies in `have`."""
    return _covered(tuple(need), tuple(have))


@functools.lru_cache(maxsize=4096)
def _covered(need: tuple[Net, ...], have: tuple[Net, ...]) -> bool:
    rest = list(need)
    if not rest:
        return False
    for h in have:
        nxt: list[Net] = []
        for n in rest:
            nxt.extend(subtract([n], h))
        rest = nxt
        if not rest:
            return True
    return not rest


# ---------------------------------------------------------------------------------------------
# The two sides of a connection, and the dataplane
# ---------------------------------------------------------------------------------------------

POD, NODE, EXTERNAL = "pod", "node", "external"


@dataclass(frozen=True)
class Peer:
    """One side of a connection. A pod (selected by policies, matched by selectors); a node (a node's own
    address: hostNetwork pods, a kubeadm API server, the kubelet), which no policy selects and only
    ipBlock reaches; or an external address (the internet, a managed control plane)."""
    what: str
    kind: str
    namespace: Optional[str] = None
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace_labels: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[tuple[Optional[str], int, str], ...] = ()  # container ports: (name, number, protocol)
    addresses: tuple[str, ...] = ()  # the ranges its address lies in
    entities: frozenset[str] = frozenset()  # Cilium reserved entities it belongs to (world, kube-apiserver, ...)
    service_account: Optional[str] = None  # a pod's spec.serviceAccountName ("default" when the spec names none)

    def port_name(self, port: int, protocol: str) -> Optional[str]:
        return next((n for n, p, proto in self.ports if p == port and proto == protocol and n), None)

    def nets(self) -> list[Net]:
        return [_net(a) for a in self.addresses]


@dataclass(frozen=True)
class Dataplane:
    name: str  # what is shown: "Cilium 1.20.0", "GKE Dataplane V2 (Cilium)", ...
    enforced: bool = True  # False: NetworkPolicies are not enforced at all
    cilium: bool = False  # Cilium's policy engine (CIDR rules skip cluster endpoints; Cilium policies apply)
    cidr_matches_nodes: bool = False  # Cilium --policy-cidr-match-mode lists `nodes`
    cidr_matches_pods: bool = False  # ... lists `pods` (Cilium 1.20+)
    enforce_always: bool = False  # Cilium --enable-policy=always: every endpoint isolated
    cluster_name: str = "default"  # Cilium --cluster-name: every pod identity's io.cilium.k8s.policy.cluster

    def cidr_applies(self, peer: Peer) -> bool:
        """Whether ipBlock/CIDR rules can match `peer` at all."""
        if not self.cilium or peer.kind == EXTERNAL:
            return True
        return self.cidr_matches_pods if peer.kind == POD else self.cidr_matches_nodes


@dataclass
class Side:
    """The verdict of one direction (the source's egress or the destination's ingress)."""
    allowed: bool
    isolated_by: list[str] = field(default_factory=list)  # policies that select the pod for this direction
    allowed_by: list[str] = field(default_factory=list)
    denied_by: list[str] = field(default_factory=list)  # Cilium deny rules
    # ipBlock rules that would have matched the other side's address, but the CNI does not apply there
    cidr_skipped: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)  # Cilium policy fields not evaluated


@dataclass
class Decision:
    allowed: bool
    egress: Side
    ingress: Side

    @property
    def unsupported(self) -> list[str]:
        return self.egress.unsupported + self.ingress.unsupported


@dataclass(frozen=True)
class Policy:
    """A rendered NetworkPolicy or Cilium policy, with where it came from."""
    release: str
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def namespace(self) -> Optional[str]:
        return (self.obj.get("metadata") or {}).get("namespace")

    @property
    def id(self) -> str:
        meta = self.obj.get("metadata") or {}
        ns = meta.get("namespace")
        return f"{self.kind}/{ns + '/' if ns else ''}{meta.get('name')}"


def policies_of(objects: Iterable[tuple[str, Mapping[str, Any]]]) -> list[Policy]:
    """The NetworkPolicies and Cilium policies among (release, object) pairs."""
    out = []
    for release, obj in objects:
        kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
        if (kind == "NetworkPolicy" and api == NETWORK_POLICY_API) or (kind in CILIUM_KINDS and api == CILIUM_API):
            out.append(Policy(release, obj))
    return out


# ---------------------------------------------------------------------------------------------
# Kubernetes NetworkPolicy
# ---------------------------------------------------------------------------------------------


def _policy_types(spec: Mapping[str, Any]) -> set[str]:
    types = spec.get("policyTypes")
    if types:
        return {str(t) for t in types}
    return {"Ingress"} | ({"Egress"} if spec.get("egress") else set())


def _selects(policy: Policy, pod: Peer) -> bool:
    return (pod.kind == POD and pod.namespace == policy.namespace
            and label_selector_matches((policy.obj.get("spec") or {}).get("podSelector"), dict(pod.labels)))


def _port_matches(ports: Optional[list], port: int, protocol: str, dst: Peer) -> bool:
    """NetworkPolicyPort list semantics: empty matches every port; a name resolves on the destination pod."""
    if not ports:
        return True
    for p in ports:
        p = p or {}
        if str(p.get("protocol") or "TCP") != protocol:
            continue
        want = p.get("port")
        if want is None:
            return True
        if isinstance(want, int) or str(want).isdigit():
            lo = int(want)
            hi = int(p["endPort"]) if p.get("endPort") is not None else lo
            if lo <= port <= hi:
                return True
        elif dst.kind == POD and dst.port_name(port, protocol) == str(want):
            return True
    return False


def _np_peer_matches(policy: Policy, peer_spec: Mapping[str, Any], other: Peer) -> Optional[bool]:
    """A selector peer: True/False. An ipBlock peer: None (the caller accounts its addresses)."""
    if "ipBlock" in peer_spec:
        return None
    if other.kind != POD:
        return False
    pod_sel, ns_sel = peer_spec.get("podSelector"), peer_spec.get("namespaceSelector")
    if ns_sel is None:
        if other.namespace != policy.namespace:
            return False
    elif not label_selector_matches(ns_sel, dict(other.namespace_labels)):
        return False
    return label_selector_matches(pod_sel, dict(other.labels)) if pod_sel is not None else True


def _np_direction(policies: list[Policy], pod: Peer, other: Peer, port: int, protocol: str, dst: Peer,
                  direction: str, dp: Dataplane, side: Side) -> tuple[bool, list[Net]]:
    """Whether a NetworkPolicy rule allows `other` outright, and the ipBlock addresses that rules allow."""
    rules_key, peers_key = ("egress", "to") if direction == "Egress" else ("ingress", "from")
    allowed_nets: list[Net] = []
    allowed = False
    for pol in policies:
        if pol.kind != "NetworkPolicy" or not _selects(pol, pod):
            continue
        spec = pol.obj.get("spec") or {}
        if direction not in _policy_types(spec):
            continue
        side.isolated_by.append(pol.id)
        for rule in spec.get(rules_key) or []:
            rule = rule or {}
            if not _port_matches(rule.get("ports"), port, protocol, dst):
                continue
            peers = rule.get(peers_key)
            if not peers:
                allowed = True
                side.allowed_by.append(pol.id)
                continue
            for peer in peers:
                hit = _np_peer_matches(pol, peer or {}, other)
                if hit:
                    allowed = True
                    side.allowed_by.append(pol.id)
                elif hit is None:
                    ib = (peer or {}).get("ipBlock") or {}
                    nets = block(ib.get("cidr"), ib.get("except") or [])
                    if dp.cidr_applies(other):
                        allowed_nets.extend(nets)
                        if covered(other.nets(), nets):
                            side.allowed_by.append(pol.id)
                    elif covered(other.nets(), nets):
                        side.cidr_skipped.append(pol.id)
    return allowed, allowed_nets


# ---------------------------------------------------------------------------------------------
# Cilium policies
# ---------------------------------------------------------------------------------------------


def _strip(key: str) -> str:
    """A selector key without its label source: `k8s:` and `any:` match a pod's labels (which come from k8s), as
    does a key without one (EndpointSelector.Sanitize gives it `any:`); `reserved:` keys stay, they name entities."""
    for prefix in ("k8s:", "any:"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def _cilium_selector(selector: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    selector = selector or {}
    return {"matchLabels": {_strip(str(k)): v for k, v in (selector.get("matchLabels") or {}).items()},
            "matchExpressions": [{**e, "key": _strip(str(e.get("key")))} for e in selector.get("matchExpressions") or []]}


def _cilium_identity(peer: Peer, dp: Dataplane) -> dict[str, str]:
    """The labels Cilium matches a selector against: a pod's own labels plus its namespace's name and labels, its
    ServiceAccount and the cluster (SanitizePodLabels); anything else, its reserved entities (reserved:host, ...)."""
    if peer.kind != POD:
        return {CILIUM_RESERVED_PREFIX + e: "" for e in peer.entities}
    labels = dict(peer.labels)
    for k, v in peer.namespace_labels.items():
        labels[CILIUM_NAMESPACE_LABELS_PREFIX + k] = v
    labels[CILIUM_NAMESPACE_LABEL] = str(peer.namespace)
    if peer.service_account:
        labels[CILIUM_SERVICE_ACCOUNT_LABEL] = peer.service_account
    labels[CILIUM_CLUSTER_LABEL] = dp.cluster_name
    return labels


def _keys(sel: Mapping[str, Any]) -> list[str]:
    return list(sel["matchLabels"]) + [str(e.get("key")) for e in sel["matchExpressions"]]


def _cilium_subject_matches(pol: Policy, selector: Optional[Mapping[str, Any]], pod: Peer, dp: Dataplane) -> bool:
    """A policy's endpointSelector: the pods it applies to. A CiliumNetworkPolicy's applies in its own namespace only,
    whatever the selector says: Cilium sets k8s:io.kubernetes.pod.namespace to the policy's namespace, replacing a
    match of another one there (and warning "illegal namespace match"), and a match of another one under another
    source stays beside it, so it selects nothing (pkg/k8s/apis/cilium.io/utils/utils.go ParseToCiliumRule, v1.18.2 to
    v1.20.0). A clusterwide one's selects as written."""
    if pod.kind != POD:
        return False
    selector = dict(selector or {})
    if pol.kind == "CiliumNetworkPolicy":
        if pod.namespace != pol.namespace:
            return False
        selector["matchLabels"] = {k: v for k, v in (selector.get("matchLabels") or {}).items()
                                   if str(k) != "k8s:" + CILIUM_NAMESPACE_LABEL}
    return label_selector_matches(_cilium_selector(selector), _cilium_identity(pod, dp))


def _cilium_peer_matches(pol: Policy, selector: Optional[Mapping[str, Any]], peer: Peer, dp: Dataplane) -> bool:
    """A from/toEndpoints selector (utils.go getEndpointSelector, v1.18.2 to v1.20.0): one with a `reserved:` key
    selects entities as written; otherwise only pods (a clusterwide policy's gets `io.kubernetes.pod.namespace
    Exists`), and a CiliumNetworkPolicy's stays in the policy's namespace unless it names a namespace
    (io.kubernetes.pod.namespace) or namespace labels (io.cilium.k8s.namespace.labels.*), which span namespaces."""
    sel = _cilium_selector(selector)
    keys = _keys(sel)
    if any(k.startswith(CILIUM_RESERVED_PREFIX) for k in keys):
        return label_selector_matches(sel, _cilium_identity(peer, dp))
    if peer.kind != POD:
        return False
    if (pol.kind == "CiliumNetworkPolicy" and CILIUM_NAMESPACE_LABEL not in keys
            and not any(k.startswith(CILIUM_NAMESPACE_LABELS_PREFIX) for k in keys)
            and peer.namespace != pol.namespace):
        return False
    return label_selector_matches(sel, _cilium_identity(peer, dp))


def _cilium_specs(pol: Policy) -> list[Mapping[str, Any]]:
    out = []
    if pol.obj.get("spec"):
        out.append(pol.obj["spec"])
    out.extend(s for s in pol.obj.get("specs") or [] if s)
    return out


def _entity_matches(entity: str, peer: Peer) -> bool:
    """Documentation/security/policy/layer3.rst "Entities based"."""
    entity = str(entity)
    if entity == "all":
        return True
    if entity == "cluster":
        return peer.kind in (POD, NODE) or "kube-apiserver" in peer.entities
    if entity in ("world", "world-ipv4", "world-ipv6"):
        return peer.kind == EXTERNAL and "world" in peer.entities
    return entity in peer.entities


def _cilium_ports(port_rules: Optional[list], port: int, protocol: str, dst: Peer, where: str,
                  side: Side) -> bool:
    if not port_rules:
        return True
    for pr in port_rules:
        pr = pr or {}
        extra = set(pr) - _CILIUM_PORT_RULE_KEYS
        if extra:
            side.unsupported.append(f"{where}: toPorts {', '.join(sorted(extra))}")
            continue
        for p in pr.get("ports") or []:
            proto = str(p.get("protocol") or "ANY")
            if proto not in ("ANY", protocol):
                continue
            want = str(p.get("port") or "0")
            if want == "0":
                return True
            if want.isdigit():
                lo = int(want)
                hi = int(p["endPort"]) if p.get("endPort") else lo
                if lo <= port <= hi:
                    return True
            elif dst.kind == POD and dst.port_name(port, protocol) == want:
                return True
    return False


def _cilium_rule_matches(pol: Policy, rule: Mapping[str, Any], other: Peer, port: int, protocol: str,
                         dst: Peer, egress: bool, dp: Dataplane, side: Side, where: str) -> bool:
    extra = set(rule) - _CILIUM_RULE_KEYS
    if extra:
        side.unsupported.append(f"{where}: {', '.join(sorted(extra))}")
        return False
    if not _cilium_ports(rule.get("toPorts"), port, protocol, dst, where, side):
        return False
    pre = "to" if egress else "from"
    l3 = [k for k in (f"{pre}Endpoints", f"{pre}Entities", f"{pre}CIDR", f"{pre}CIDRSet") if k in rule]
    if not l3:
        return "toPorts" in rule  # L4 alone selects every peer; an empty rule selects none
    if any(_cilium_peer_matches(pol, s, other, dp) for s in rule.get(f"{pre}Endpoints") or []):
        return True
    if any(_entity_matches(e, other) for e in rule.get(f"{pre}Entities") or []):
        return True
    nets: list[Net] = [n for c in rule.get(f"{pre}CIDR") or [] for n in block(c)]
    for cs in rule.get(f"{pre}CIDRSet") or []:
        if "cidr" not in (cs or {}):
            side.unsupported.append(f"{where}: {pre}CIDRSet without cidr (cidrGroupRef, cidrGroupSelector)")
            continue
        nets.extend(block(cs["cidr"], cs.get("except") or []))
    if nets and covered(other.nets(), nets):
        if dp.cidr_applies(other):
            return True
        side.cidr_skipped.append(pol.id)
    return False


def _cilium_direction(policies: list[Policy], pod: Peer, other: Peer, port: int, protocol: str, dst: Peer,
                      egress: bool, dp: Dataplane, side: Side) -> bool:
    """Cilium policies selecting `pod` in one direction: isolation, allows and denies into `side`; returns
    whether an allow rule matched."""
    allow_key, deny_key = ("egress", "egressDeny") if egress else ("ingress", "ingressDeny")
    direction = "egress" if egress else "ingress"
    allowed = False
    for pol in policies:
        if pol.kind not in CILIUM_KINDS:
            continue
        for spec in _cilium_specs(pol):
            if "nodeSelector" in spec:
                side.unsupported.append(f"{pol.id}: nodeSelector (host policies)")
                continue
            if not _cilium_subject_matches(pol, spec.get("endpointSelector"), pod, dp):
                continue
            extra = set(spec) - _CILIUM_SPEC_KEYS
            if extra:
                side.unsupported.append(f"{pol.id}: {', '.join(sorted(extra))}")
            default_deny = (spec.get("enableDefaultDeny") or {}).get(direction, True) is not False
            if default_deny and (allow_key in spec or deny_key in spec):
                side.isolated_by.append(pol.id)
            for rule in spec.get(deny_key) or []:
                if _cilium_rule_matches(pol, rule or {}, other, port, protocol, dst, egress, dp, side, f"{pol.id} {deny_key}"):
                    side.denied_by.append(pol.id)
            for rule in spec.get(allow_key) or []:
                if _cilium_rule_matches(pol, rule or {}, other, port, protocol, dst, egress, dp, side, f"{pol.id} {allow_key}"):
                    allowed = True
                    side.allowed_by.append(pol.id)
    return allowed


# ---------------------------------------------------------------------------------------------
# A connection
# ---------------------------------------------------------------------------------------------


def _side(policies: list[Policy], pod: Peer, other: Peer, port: int, protocol: str, dst: Peer, egress: bool,
          dp: Dataplane) -> Side:
    side = Side(allowed=True)
    if pod.kind != POD:
        return side  # nodes, hostNetwork pods and addresses outside the cluster are selected by no policy
    allowed, nets = _np_direction(policies, pod, other, port, protocol, dst, "Egress" if egress else "Ingress", dp, side)
    if dp.cilium:
        allowed = _cilium_direction(policies, pod, other, port, protocol, dst, egress, dp, side) or allowed
    if not allowed and nets and dp.cidr_applies(other) and covered(other.nets(), nets):
        allowed = True  # the union of several ipBlocks covers the other side's addresses
    isolated = bool(side.isolated_by) or (dp.cilium and dp.enforce_always)
    side.allowed = not side.denied_by and (allowed or not isolated)
    return side


def decide(src: Peer, dst: Peer, port: int, protocol: str, policies: list[Policy], dp: Dataplane) -> Decision:
    """Whether `src` may open a connection to `dst` on `port`/`protocol` (after Service translation:
    policies see the pod's address and port, not the ClusterIP's)."""
    if not dp.enforced:
        return Decision(True, Side(True), Side(True))
    egress = _side(policies, src, dst, port, protocol, dst, True, dp)
    ingress = _side(policies, dst, src, port, protocol, dst, False, dp)
    return Decision(egress.allowed and ingress.allowed, egress, ingress)
