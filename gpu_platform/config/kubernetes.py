"""The `kubernetes` section: the platform on a cluster the stack does not create (`cloud: kubernetes`).

The cluster exists (an EKS cluster another team runs, an on-premises cluster); the program reaches it with a
kubeconfig (see `kubeconfig_source`) and installs only the ML platform. What a cloud component would create
and therefore know, the stack file states instead:

- `nodeTypes`: what one node of each kind is (GPUs, CPU, memory, what its kubelet offers pods, or a type of the
  price catalog for the hardware) and, optionally, what it costs you per hour. They are the stack's own
  "instance types": `gpuPools[].instanceType` and `kubernetes.systemPool.instanceType` name them, and the cost
  estimate, the cluster-fit model, the job queue's quotas and the policy pack read them.
- the node groups: `gpuPools` (name, type, capacity, min/max nodes, labels) plus `kubernetes.pools.<pool>`
  (extra taints, zones), and `kubernetes.systemPool`. Their nodes must carry the labels and taint the
  platform selects them by (docs/quickstart-kubernetes.md): the program cannot label nodes that come and go.
- what each cloud component provides itself: the StorageClass for volumes (`storageClass`), whether an NVIDIA
  device plugin already runs (`gpuDevicePlugin`), the checkpoint store (`checkpointStore`, an S3-compatible
  endpoint, or none).
- the network (`network`, required): what enforces NetworkPolicies on the cluster, where pods, nodes and the API
  server have their addresses. Preflight checks the platform's connections against it (preflight/fit/flows.py), as
  it reads the same from a cloud's plan: on Cilium an ipBlock never matches a node unless the agent's
  policy-cidr-match-mode lists `nodes`, so z2jh's hub cannot reach an API server on the nodes (kubeadm, k3s,
  RKE2, Talos) through its ipBlock egress (zero-to-jupyterhub-k8s#3202, cilium#20550).

The rules that read the rest of the stack are in checks/kubernetes.py. Pure: no Pulumi.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from gpu_platform.config.base import Cidr, DnsLabel, Model, SystemPool, UsdPerHour

# Node type names: what `kubectl get node -L node.kubernetes.io/instance-type` would show for a cloud's type,
# or a name of your own (a label value: at most 63 of [A-Za-z0-9._-], alphanumeric at both ends).
NODE_TYPE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
# A catalog type for the hardware: <cloud>/<type> of gpu_platform/costs/catalog/<cloud>.yaml.
CATALOG_REF = r"^(linode|gcp|aws)/[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# A StorageClass name: a DNS-1123 subdomain (at most 253 characters).
STORAGE_CLASS = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Zones as the nodes' topology.kubernetes.io/zone label values.
ZONE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
# S3 bucket names (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html: 3-63 lowercase letters,
# digits, dots and hyphens, alphanumeric at both ends); MinIO and Ceph RGW follow the same rule.
BUCKET = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# The secret config keys holding the checkpoint store's S3 keys: another namespace than `gpu-platform` (whose
# values are refused as secrets: they end up in clear in names and labels), like linode:token.
CHECKPOINT_CREDENTIALS_NAMESPACE = "checkpoint-store"
CHECKPOINT_CREDENTIAL_KEYS = ("accessKeyId", "secretAccessKey")
# Where the kubeconfig comes from, in this order (docs/quickstart-kubernetes.md): the pulumi-kubernetes provider's
# own config key (a Pulumi secret: `pulumi config set --secret kubernetes:kubeconfig < file`; contents or a path,
# as the provider takes it), else the KUBECONFIG environment variable (one file, as the provider's SDK reads it).
KUBECONFIG_KEY = "kubernetes:kubeconfig"
KUBECONFIG_ENV = "KUBECONFIG"
# The taint every GPU node carries (gpu_platform/components/cluster.py GPU_TAINT, which a test keeps equal): the
# config layer sits below the components and cannot import it.
GPU_TAINT_KEY = "nvidia.com/gpu"
# Minutes until a GPU node your autoscaler starts is schedulable, when the stack does not say.
DEFAULT_NODE_BOOT_MINUTES = 10
# What removes the cluster's idle nodes (`kubernetes.autoscaler`): each honours its own pod annotation only
# (components/cluster.py SCALE_DOWN_PROTECTION): cluster-autoscaler's safe-to-evict "false", Karpenter's
# karpenter.sh/do-not-disrupt "true"; none: nothing removes a node on its own.
Autoscaler = Literal["cluster-autoscaler", "karpenter", "none"]


class NodeAllocatable(Model):
    """What one node's kubelet offers pods, as `kubectl get node <node> -o jsonpath='{.status.allocatable}'`
    prints it: cpu ("15890m" or 16), memory ("63323244Ki", "60Gi"), pods (110)."""

    cpu: str = Field(min_length=1, max_length=40)
    memory: str = Field(min_length=1, max_length=40)
    pods: int = Field(default=110, ge=1, le=10_000)

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        # `cpu: 16` is a YAML number; the API prints quantities as text. A boolean is neither.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return value

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        from gpu_platform.data.quantity import parse_quantity

        try:
            q = parse_quantity(value)
        except ValueError:
            raise ValueError("a Kubernetes quantity as `kubectl get node` prints it, such as 15890m, 16, 63323244Ki "
                             "or 60Gi") from None
        if q <= 0:
            raise ValueError("a quantity above 0")
        return value


class NodePrice(Model):
    """What one node costs you per hour, per capacity it runs at (amortised hardware, power, space, support,
    or what the cloud bills): a number of USD, written without quotes."""

    on_demand: Optional[UsdPerHour] = None
    spot: Optional[UsdPerHour] = None


class NodeType(Model):
    """One kind of node: either `catalog: <cloud>/<type>` (its GPUs, vCPUs and memory from the price catalog,
    never its price) or vcpus and memoryGib, with gpus and gpuModel for a GPU node (gpus unset: none)."""

    catalog: Optional[str] = Field(default=None, pattern=CATALOG_REF)
    gpus: Optional[int] = Field(default=None, ge=0, le=16)
    gpu_model: Optional[str] = Field(default=None, min_length=2, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()-]*$")
    vcpus: Optional[int] = Field(default=None, ge=1, le=4096)
    memory_gib: Optional[float] = Field(default=None, gt=0, le=65536)
    allocatable: Optional[NodeAllocatable] = None
    usd_per_hour: Optional[NodePrice] = None

    @model_validator(mode="after")
    def _one_description(self) -> "NodeType":
        own = {k: v for k, v in (("gpus", self.gpus), ("vcpus", self.vcpus), ("memoryGib", self.memory_gib),
                                 ("gpuModel", self.gpu_model)) if v is not None}
        if self.catalog is not None and own:
            raise ValueError(f"either catalog or the node's own gpus, vcpus and memoryGib, not both (it sets catalog "
                             f"and {', '.join(own)})")
        if self.catalog is None:
            missing = [k for k in ("vcpus", "memoryGib") if k not in own]
            if missing:
                raise ValueError(f"catalog: <cloud>/<type> (the hardware of a price-catalog type), or vcpus and memoryGib "
                                 f"(and gpus with gpuModel for a GPU node); {', '.join(missing)} missing")
            if self.gpus and self.gpu_model is None:
                raise ValueError("gpuModel with gpus above 0 (the GPU's model, e.g. NVIDIA A100 80GB: the cost report "
                                 "and its speed table name it)")
            if not self.gpus and self.gpu_model is not None:
                raise ValueError("no gpuModel on a node type without GPUs (gpus: 0)")
        return self


class Taint(Model):
    """A taint the nodes of a pool carry besides nvidia.com/gpu=present:NoSchedule (which every GPU node carries)."""

    key: str = Field(min_length=1, max_length=316)
    value: str = Field(default="", max_length=63)
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]

    @field_validator("key")
    @classmethod
    def _key(cls, value: str) -> str:
        from gpu_platform.config.base import LABEL_KEY

        if not LABEL_KEY.fullmatch(value) or len(value.rpartition("/")[2]) > 63:
            raise ValueError("a taint key: [prefix/]name, the name at most 63 of [A-Za-z0-9-_.]")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        from gpu_platform.config.base import LABEL_VALUE

        if not LABEL_VALUE.fullmatch(value):
            raise ValueError("a taint value: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends, or empty")
        return value


class KubernetesPool(Model):
    """What the nodes of one GPU pool carry besides what the platform needs (keyed by the pool's gpuPools name)."""

    taints: list[Taint] = Field(default_factory=list, max_length=20)
    # The zones its nodes can be in (their topology.kubernetes.io/zone); empty: not known or no zones.
    zones: list[str] = Field(default_factory=list, max_length=20)

    @field_validator("zones")
    @classmethod
    def _zones(cls, value: list[str]) -> list[str]:
        for z in value:
            if len(z) > 63 or not re.fullmatch(ZONE, z):
                raise ValueError("zone names as the nodes' topology.kubernetes.io/zone label shows them (at most 63 of "
                                 "[A-Za-z0-9-_.])")
        if len(set(value)) != len(value):
            raise ValueError("each zone once")
        return value


class CheckpointStore(Model):
    """An S3-compatible bucket of yours that training checkpoints go to (MinIO, Ceph RGW, S3, ...). The program
    never creates, empties or deletes it; its keys come from the secret config keys checkpoint-store:accessKeyId
    and checkpoint-store:secretAccessKey."""

    # https://host[:port] (http only to a Service inside the cluster: *.svc or *.svc.cluster.local).
    endpoint: str = Field(min_length=8, max_length=253)
    bucket: str = Field(pattern=BUCKET)
    # The region the store signs requests for (MinIO's default is us-east-1).
    region: str = Field(default="us-east-1", min_length=2, max_length=40, pattern=r"^[a-z0-9-]+$")
    # A folder in the bucket (several stacks sharing one bucket).
    prefix: Optional[str] = Field(default=None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$")
    # PEM certificates the endpoint's TLS certificate chains to, when a private CA signed it (an on-premises MinIO
    # or Ceph RGW): training pods trust them (AWS_CA_BUNDLE). Checked in checks/kubernetes.py (never echoed: a
    # pasted private key must not reach a terminal).
    ca_bundle: Optional[str] = None

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        m = re.fullmatch(r"(https?)://([A-Za-z0-9.-]+)(:([0-9]{1,5}))?/?", value)
        if not m or (m.group(4) and not 1 <= int(m.group(4)) <= 65535):
            raise ValueError("an endpoint URL https://host[:port] without a path, e.g. https://minio.example.internal:9000")
        from gpu_platform.config.approvals import hostname_problem

        problem = hostname_problem(m.group(2))
        if problem:
            raise ValueError(f"an endpoint URL whose host is {problem}")
        if m.group(1) == "http" and not re.search(r"\.svc(\.cluster\.local)?$", m.group(2)):
            raise ValueError("https (the S3 keys and every checkpoint cross the network): http only to a Service inside "
                             "the cluster (<service>.<namespace>.svc[.cluster.local])")
        return value.rstrip("/")

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


MAX_CA_BUNDLE_BYTES = 256 * 1024  # a CA bundle is a few KiB; a whole system trust store about 200 KiB
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.S)


def ca_bundle_problems(pem: str) -> list[str]:
    """What is wrong with a CA bundle, in words that never quote it: at most MAX_CA_BUNDLE_BYTES, one or more PEM
    CERTIFICATE blocks (text between blocks is ignored, as OpenSSL's PEM reader ignores it), each an X.509
    certificate, no private key anywhere."""
    from cryptography import x509

    if len(pem.encode("utf-8", "replace")) > MAX_CA_BUNDLE_BYTES:
        return [f"at most {MAX_CA_BUNDLE_BYTES // 1024} KiB of PEM certificates (the CA's, not a whole trust store)"]
    if "PRIVATE KEY-----" in pem:
        return ["certificates only: it holds a PRIVATE KEY block. Remove it from the stack file (and treat the key as "
                "exposed: it was in a file meant for version control)"]
    blocks = _PEM_BLOCK.findall(pem)
    if not blocks:
        return ["PEM certificates (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----), one or more: the CA that "
                "signed the endpoint's TLS certificate (`openssl s_client -showcerts -connect host:port` shows the chain)"]
    out = []
    for i, (kind, _) in enumerate(blocks, 1):
        if kind != "CERTIFICATE":
            out.append(f"CERTIFICATE blocks only; block {i} of {len(blocks)} is {kind[:40]}")
    if out:
        return out
    for i, m in enumerate(_PEM_BLOCK.finditer(pem), 1):
        try:
            x509.load_pem_x509_certificate(m.group(0).encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            out.append(f"X.509 certificates; certificate {i} of {len(blocks)} is not one (corrupt or cut short)")
    return out


def ca_bundle_expired(pem: str, on: Any) -> list[str]:
    """The bundle's certificates that are not valid on date `on`: subject and dates (a warning: TLS to the store
    fails if the endpoint's chain needs one of them)."""
    from cryptography import x509

    out = []
    for i, m in enumerate(_PEM_BLOCK.finditer(pem), 1):
        try:
            cert = x509.load_pem_x509_certificate(m.group(0).encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            continue
        start, end = cert.not_valid_before_utc.date(), cert.not_valid_after_utc.date()
        if not start <= on <= end:
            out.append(f"certificate {i} ({cert.subject.rfc4514_string()[:80]}) is valid {start.isoformat()} to "
                       f"{end.isoformat()}")
    return out


# What enforces NetworkPolicies on the cluster. cilium: Cilium's policy engine (GKE Dataplane V2 is Cilium too);
# ipBlock/CIDR rules never match pods and match nodes only with policy-cidr-match-mode `nodes` (`pods`, 1.20+).
# calico, other-upstream (Antrea, kube-router, the EKS VPC CNI's network policy agent, ...): upstream semantics,
# an ipBlock matches any address. none: nothing enforces them (flannel alone, a CNI without a policy engine).
NETWORK_CNIS = ("cilium", "calico", "other-upstream", "none")
CILIUM_CIDR_MATCH_MODES = ("nodes", "pods")


class ApiServer(Model):
    """Where a pod's connection to the API server goes, after the `kubernetes` Service: the addresses and port of
    its endpoints (`kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes` prints both).
    NetworkPolicies see those, never the Service's ClusterIP."""

    # The API server runs on the cluster's own nodes (kubeadm, k3s, RKE2, Talos: a static pod or a process on
    # the control-plane nodes) rather than outside them (EKS, GKE, AKS: the provider's control plane).
    on_nodes: bool
    port: int = Field(ge=1, le=65535)
    # Its endpoints' addresses; default with onNodes: nodeCidrs (the control-plane nodes are nodes).
    cidrs: list[Cidr] = Field(default_factory=list, max_length=20)


class CiliumNetwork(Model):
    """The Cilium agent's settings that decide what a policy matches, as `kubectl -n kube-system get configmap
    cilium-config -o yaml` shows them (the Helm values policyCIDRMatchMode and policyEnforcementMode)."""

    # policy-cidr-match-mode: empty (Cilium's default) or nodes and/or pods (pods: Cilium 1.20 and later).
    policy_cidr_match_mode: list[Literal["nodes", "pods"]] = Field(default_factory=list, max_length=2)
    # enable-policy: default, always (every endpoint isolated), never (nothing enforced).
    enable_policy: Literal["default", "always", "never"] = "default"

    @field_validator("policy_cidr_match_mode")
    @classmethod
    def _modes_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each mode once")
        return value


class KubernetesNetwork(Model):
    """How the cluster's network enforces NetworkPolicies (read by preflight's flow check, gpu_platform/preflight/
    fit/flows.py): the CNI that enforces them, where pods and nodes get their addresses, where the API server is.
    podCidrs, nodeCidrs and apiServer are required unless cni is none (checks/kubernetes.py)."""

    cni: Literal["cilium", "calico", "other-upstream", "none"]
    # Where pods get addresses: the CNI's IPAM pools (Cilium's cluster-pool-ipv4-cidr, Calico's IPPools) or the
    # nodes' spec.podCIDR ranges; on the EKS VPC CNI the VPC's subnets, like the nodes.
    pod_cidrs: list[Cidr] = Field(default_factory=list, max_length=20)
    # Where the nodes' InternalIPs are (`kubectl get nodes -o wide`): hostNetwork pods, the kubelets.
    node_cidrs: list[Cidr] = Field(default_factory=list, max_length=20)
    api_server: Optional[ApiServer] = None
    cilium: Optional[CiliumNetwork] = None


class KubernetesSection(Model):
    # Names the existing cluster (exports, the Kubernetes provider's identity: a different name is a
    # different cluster, and the provider and everything on it are replaced).
    cluster_name: DnsLabel
    # The kubeconfig context to use; required when the kubeconfig has more than one.
    context: Optional[str] = Field(default=None, min_length=1, max_length=253, pattern=r"^[^\x00-\x1f\x7f]+$")
    # The existing StorageClass the platform's volumes (notebook homes, Prometheus, databases) are made from.
    storage_class: str = Field(min_length=1, max_length=253, pattern=STORAGE_CLASS)
    # install: the platform installs NVIDIA's device plugin on the GPU pools; preinstalled: one runs already
    # (the GPU operator, a cloud's own): two would both advertise nvidia.com/gpu. No default: say which.
    gpu_device_plugin: Literal["install", "preinstalled"]
    node_types: dict[str, NodeType] = Field(min_length=1, max_length=50)
    system_pool: SystemPool
    # The zones the system nodes can be in; empty: not known or no zones.
    system_zones: list[str] = Field(default_factory=list, max_length=20)
    pools: dict[str, KubernetesPool] = Field(default_factory=dict)
    checkpoint_store: Optional[CheckpointStore] = None
    # Required (checks/kubernetes.py says so, naming the key): what enforces NetworkPolicies and where things are.
    network: Optional[KubernetesNetwork] = None
    # What removes idle nodes: the annotation training pods carry to keep their node, and the one the platform's
    # admission policy asks of a training job, are the ones it honours. No default: say which.
    autoscaler: Autoscaler
    # Minutes from a scale-up to a schedulable GPU node with your autoscaler (the job queue's wait for a job's
    # pods, the notebook start timeout); a fixed-size pool never waits for one.
    node_boot_minutes: int = Field(default=DEFAULT_NODE_BOOT_MINUTES, ge=1, le=120)

    @field_validator("node_types")
    @classmethod
    def _type_names(cls, value: dict[str, NodeType]) -> dict[str, NodeType]:
        for name in value:
            if not NODE_TYPE_NAME.fullmatch(name):
                raise ValueError(f"node type names of at most 63 letters, digits, '.', '_' or '-', alphanumeric at both "
                                 f"ends; {name[:70]!r} is not one")
        return value

    @field_validator("system_zones")
    @classmethod
    def _system_zones(cls, value: list[str]) -> list[str]:
        return KubernetesPool._zones(value)

    def pool(self, name: str) -> KubernetesPool:
        return self.pools.get(name) or KubernetesPool()


# ---------------------------------------------------------------------------------------------
# The node types as instance types of the stack's own catalog
# ---------------------------------------------------------------------------------------------


def node_type_instances(section: KubernetesSection, base: Any, priced_on: str) -> dict[str, Any]:
    """The section's node types as gpu_platform.costs.catalog.InstanceType of cloud kubernetes: hardware from the
    node type (or the catalog type it names), prices from its usdPerHour only (source: the stack file, dated
    `priced_on`), allocatable as stated. A `catalog:` reference the catalog lacks is left out (the check names it)."""
    from gpu_platform.costs.catalog import OWN_NODES, InstanceType, Price

    out: dict[str, InstanceType] = {}
    for name, t in section.node_types.items():
        if t.catalog is not None:
            cloud, _, type_name = t.catalog.partition("/")
            ref = base.instance(cloud, type_name)
            if ref is None:
                continue
            gpus, model, vcpus, memory, gpu_mem = ref.gpus, ref.gpu_model, ref.vcpus, ref.memory_gib, ref.gpu_memory_gib
        else:
            gpus, model, vcpus, memory, gpu_mem = t.gpus or 0, t.gpu_model, int(t.vcpus or 0), float(t.memory_gib or 0), None
        where = f"stack file: kubernetes.nodeTypes.{name}.usdPerHour"
        prices = t.usd_per_hour or NodePrice()

        def price(value: Optional[float], key: str) -> Optional[Price]:
            return None if value is None else Price(float(value), f"{where}.{key}", priced_on, status="estimate")

        out[name] = InstanceType(
            cloud=OWN_NODES, name=name, gpus=gpus, gpu_model=model if gpus else None, gpu_memory_gib=gpu_mem,
            vcpus=vcpus, memory_gib=memory, accelerator=None,
            on_demand=price(prices.on_demand, "onDemand"), spot=price(prices.spot, "spot"), preemptible=None,
            regions=None, zones=None,
            allocatable=(None if t.allocatable is None else
                         {"cpu": t.allocatable.cpu, "memory": t.allocatable.memory, "pods": t.allocatable.pods}))
    return out


# ---------------------------------------------------------------------------------------------
# The kubeconfig: where it comes from and whether it names a cluster (never echoing its content)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubeconfigSource:
    """Where the kubeconfig comes from: `where` names it for messages (a config key in a stack file, or
    $KUBECONFIG and its path), `text` is its content, `path` the file it was read from (None: the content was
    in the config key)."""

    where: str
    text: str
    path: Optional[str] = None


class KubeconfigError(ValueError):
    """No kubeconfig, or one that names no usable cluster. str() never holds the kubeconfig's content."""


MAX_KUBECONFIG_BYTES = 1024 * 1024


def kubeconfig_source(config_value: Optional[str], stack_file: str, env: Optional[dict[str, str]] = None) -> KubeconfigSource:
    """The kubeconfig the program uses: `kubernetes:kubeconfig` (`config_value`: its content or a path to a file,
    as pulumi-kubernetes' Provider takes it) else $KUBECONFIG (one file). KubeconfigError when neither is set, or
    the file cannot be read; nothing else is looked at (not ~/.kube/config: a deploy never goes to whichever
    cluster the machine happens to point at)."""
    env = os.environ if env is None else env
    key_where = f"{KUBECONFIG_KEY} in {stack_file}"
    if config_value:
        candidate = os.path.expanduser(config_value) if config_value.startswith("~") else config_value
        # The provider takes a value that names an existing file as a path (pulumi-kubernetes
        # provider/pkg/provider/util.go parseKubeconfigString: os.Stat, then the file's content).
        if "\n" not in config_value and len(config_value) < 4096 and os.path.isfile(candidate):
            return KubeconfigSource(f"{key_where} (the file {config_value})", _read(candidate, key_where), candidate)
        return KubeconfigSource(key_where, config_value)
    path = env.get(KUBECONFIG_ENV, "")
    if path:
        if os.pathsep in path:
            raise KubeconfigError(f"${KUBECONFIG_ENV} names {len(path.split(os.pathsep))} files: name one (the Kubernetes "
                                  f"provider reads a single file), or set {KUBECONFIG_KEY}")
        where = f"${KUBECONFIG_ENV} ({path})"
        return KubeconfigSource(where, _read(os.path.expanduser(path), where), path)
    raise KubeconfigError(f"no kubeconfig: set {KUBECONFIG_KEY} (`pulumi config set --secret {KUBECONFIG_KEY} "
                          f"< kubeconfig.yaml`, the file's content, or its path) or ${KUBECONFIG_ENV} (one file). "
                          "~/.kube/config is not read on purpose: name the cluster the stack deploys to")


def _read(path: str, where: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KUBECONFIG_BYTES + 1)
    except OSError as exc:
        raise KubeconfigError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise KubeconfigError(f"{where}: larger than {MAX_KUBECONFIG_BYTES // 1024} KiB; not a kubeconfig")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KubeconfigError(f"{where}: not UTF-8 text; not a kubeconfig") from None


@dataclass(frozen=True)
class KubeconfigTarget:
    """What a kubeconfig points the provider at: context, cluster and user names and the API server's address
    (none of them a credential)."""

    context: str
    cluster: str
    user: str
    server: str


def check_kubeconfig(source: KubeconfigSource, context: Optional[str], context_key: str) -> KubeconfigTarget:
    """The context the provider will use, from a kubeconfig as client-go reads it (YAML or JSON, `contexts`,
    `clusters`, `users` lists of {name, ...}). KubeconfigError naming `source.where` otherwise; messages carry
    line and column of a syntax error, and names, never values (a kubeconfig holds tokens and keys)."""
    import yaml

    where = source.where
    try:
        # PyYAML's own parser, not libyaml's: that one recurses in C and crashes the process (a segfault, no message)
        # on text nested some 50,000 levels deep, where this one raises RecursionError (caught below).
        doc = yaml.safe_load(source.text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise KubeconfigError(f"{where}: not YAML or JSON{at}; a kubeconfig is the YAML `kubectl config view --raw "
                              "--minify` prints") from None
    except (RecursionError, ValueError):
        raise KubeconfigError(f"{where}: not a kubeconfig (nested too deeply)") from None
    if not isinstance(doc, dict) or not any(k in doc for k in ("clusters", "contexts", "users")):
        what = "a path to a file that does not exist, or text that is " if source.path is None and "\n" not in source.text \
            else ""
        raise KubeconfigError(f"{where}: {what}not a kubeconfig (a mapping with clusters, contexts and users)")
    kind = doc.get("kind")
    if kind is not None and kind != "Config":
        raise KubeconfigError(f"{where}: kind {str(kind)[:40]!r}, not a kubeconfig (kind: Config)")

    def named(section: str) -> dict[str, dict[str, Any]]:
        items = doc.get(section) or []
        if not isinstance(items, list):
            raise KubeconfigError(f"{where}: `{section}` is not a list of {{name, {section[:-1]}}}")
        out: dict[str, dict[str, Any]] = {}
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get(section[:-1]), dict):
                raise KubeconfigError(f"{where}: `{section}[{i}]` is not {{name, {section[:-1]}: {{...}}}}")
            out[item["name"]] = item[section[:-1]]
        return out

    contexts, clusters, users = named("contexts"), named("clusters"), named("users")
    if context is None:
        if len(contexts) > 1:
            raise KubeconfigError(f"{where}: it has {len(contexts)} contexts ({_names(contexts)}): name the one the "
                                  f"stack deploys to in {context_key}")
        current = doc.get("current-context")
        context = current if isinstance(current, str) and current else next(iter(contexts), None)
        if context is None:
            raise KubeconfigError(f"{where}: no context (its `contexts` list is empty)")
        if context not in contexts:
            raise KubeconfigError(f"{where}: its current-context {context[:80]!r} is not one of its contexts "
                                  f"({_names(contexts) or 'none'})")
    elif context not in contexts:
        raise KubeconfigError(f"{context_key} is {context[:80]!r}, which {where} does not have; its contexts: "
                              f"{_names(contexts) or 'none'}")
    ctx = contexts[context]
    cluster, user = ctx.get("cluster"), ctx.get("user")
    if not isinstance(cluster, str) or cluster not in clusters:
        raise KubeconfigError(f"{where}: context {context[:80]!r} names cluster {str(cluster)[:80]!r}, which is not in "
                              f"its clusters ({_names(clusters) or 'none'})")
    if not isinstance(user, str) or user not in users:
        raise KubeconfigError(f"{where}: context {context[:80]!r} names user {str(user)[:80]!r}, which is not in its "
                              f"users ({_names(users) or 'none'})")
    server = clusters[cluster].get("server")
    if not isinstance(server, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", server):
        raise KubeconfigError(f"{where}: cluster {cluster[:80]!r} has no server URL (https://host:port)")
    problem = server_problem(server)
    if problem:
        raise KubeconfigError(f"{where}: cluster {cluster[:80]!r}: its server URL {problem}")
    return KubeconfigTarget(context, cluster, user, server)


# Cloud instance metadata services (credentials of the machine that runs the deploy): AWS IMDS (169.254.169.254,
# fd00:ec2::254), GCP (metadata.google.internal, 169.254.169.254), Azure and Linode (169.254.169.254); every
# link-local address (169.254.0.0/16, fe80::/10) is refused with them: no Kubernetes API server is reached there.
METADATA_HOSTS = ("metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal")


def server_problem(server: str) -> Optional[str]:
    """What is wrong with a kubeconfig's server URL, never echoing it: user info (user:password@, a token in the
    URL; it would be printed in plans and outputs as the API endpoint), or a link-local or metadata address."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(server)
        host = parts.hostname or ""
    except ValueError:
        return "is not a URL (https://host:port)"
    if "@" in parts.netloc:
        return ("holds user info (user:password@ or a token before the host): credentials belong in the kubeconfig's "
                "`users` entry, not in the address the plan shows as the API endpoint")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and getattr(ip, "ipv4_mapped", None) is not None:
        ip = ip.ipv4_mapped
    if (ip is not None and ip.is_link_local) or host.rstrip(".").lower() in METADATA_HOSTS \
            or (ip is not None and ip == ipaddress.ip_address("fd00:ec2::254")):
        return (f"points at {host}, a link-local or cloud metadata address (169.254.0.0/16, fe80::/10, "
                "metadata.google.internal, fd00:ec2::254): no Kubernetes API server listens there, and the deploy's "
                "credentials would be sent to the machine's metadata service")
    return None


def checked_kubeconfig(value: Optional[str], secret: bool, context: Optional[str], stack_file: str,
                       env: Optional[dict[str, str]] = None) -> tuple[KubeconfigSource, Optional[KubeconfigTarget]]:
    """`kubernetes:kubeconfig` (`value`, `secret`: set with --secret) or $KUBECONFIG, read and checked: the source
    and what it points at (None for preflight's stand-in). KubeconfigError naming the key and `stack_file`, never
    the content. The program (components/kubernetes/cluster.py) and preflight, before the program runs, call it."""
    from gpu_platform.config.base import UNDECRYPTABLE

    source = kubeconfig_source(value, stack_file, env)
    if source.text == UNDECRYPTABLE:
        return source, None
    if value and source.path is None and not secret:
        text = value.strip()
        if "\n" not in text and not text.startswith("{") and ": " not in text:
            from gpu_platform.config.approvals import one_line

            raise KubeconfigError(f"{source.where}: names the file {one_line(value[:200])}, which does not exist or is "
                                  "not a regular file; give the path to the kubeconfig file (or store its content with "
                                  f"`pulumi config set --secret {KUBECONFIG_KEY} < kubeconfig.yaml`)")
        raise KubeconfigError(f"{source.where}: a kubeconfig in clear in the stack file; its credentials belong in "
                              f"a secret: `pulumi config set --secret {KUBECONFIG_KEY} < kubeconfig.yaml` (or a path "
                              "to the file, or $KUBECONFIG)")
    return source, check_kubeconfig(source, context, f"gpu-platform:kubernetes.context in {stack_file}")


def _names(items: dict[str, Any]) -> str:
    names = [n[:60] for n in items][:10]
    return ", ".join(repr(n) for n in names) + (", ..." if len(items) > 10 else "")
