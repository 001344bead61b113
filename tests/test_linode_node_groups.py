"""The Linode node-group provider (gpu_platform/controllers/linode_node_groups) driven the way
cluster-autoscaler drives it: a real gRPC client generated from the same externalgrpc.proto, over
mutual TLS, against a local fake of the Linode API built from recorded real responses
(tests/linode_fake_api.py) and a fake of the few Kubernetes API calls it makes."""

from __future__ import annotations

import copy
import datetime
import importlib
import json
import re
import sys
import threading
from pathlib import Path

import grpc
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpu_platform.components.cluster import GPU_TAINT, gpu_pool_specs
from gpu_platform.config.stack import parse_config
from gpu_platform.components.linode import node_groups as component
from gpu_platform.components.linode import render
from gpu_platform.controllers.linode_node_groups import settings as settings_mod
from gpu_platform.controllers.linode_node_groups import stubs
from gpu_platform.controllers.linode_node_groups.__main__ import serve
from gpu_platform.controllers.linode_node_groups.kube_api import KubeClient
from gpu_platform.controllers.linode_node_groups.linode_api import LinodeApiError, LinodeClient
from gpu_platform.controllers.linode_node_groups.service import NodeGroups
from gpu_platform.costs.catalog import load_catalog
from tests.conftest import plan_config, stack_config
from tests.linode_fake_api import TOKEN, FakeKubeApi, FakeLinodeApi, recorded
from gpu_platform.components.linode.render import decode_user_data

ROOT = Path(__file__).resolve().parent.parent
CTL = ROOT / "gpu_platform" / "controllers" / "linode_node_groups"
START = datetime.datetime(2026, 11, 24, 3, 0, tzinfo=datetime.timezone.utc)


# ---------------------------------------------------------------------------------------------
# Fixtures: generated stubs, certificates, a clock, the fakes, a running provider
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = stubs.generate(tmp_path_factory.mktemp("stubs"))
    sys.path.insert(0, str(out))
    try:
        yield (importlib.import_module("externalgrpc_pb2"), importlib.import_module("externalgrpc_pb2_grpc"),
               importlib.import_module("k8s.io.api.core.v1.generated_pb2"))
    finally:
        sys.path.remove(str(out))


def _cert(subject: str, key, issuer_key=None, issuer=None, ca=False, dns=(), ips=()):
    import ipaddress

    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(datetime.datetime(2026, 1, 1)).not_valid_after(datetime.datetime(2030, 1, 1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if dns or ips:
        b = b.add_extension(x509.SubjectAlternativeName([*(x509.DNSName(d) for d in dns),
                                                         *(x509.IPAddress(ipaddress.ip_address(i)) for i in ips)]), False)
    return b.sign(issuer_key or key, hashes.SHA256())


def _pem(obj) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return obj.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, the provider's server certificate (localhost) and the autoscaler's client certificate."""
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test-ca", ca_key, ca=True)
    srv_key, cli_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    (d / "ca.crt").write_bytes(_pem(ca))
    (d / "tls.crt").write_bytes(_pem(_cert("localhost", srv_key, ca_key, ca, dns=["localhost"], ips=["127.0.0.1"])))
    (d / "tls.key").write_bytes(_pem(srv_key))
    (d / "client.crt").write_bytes(_pem(_cert("cluster-autoscaler", cli_key, ca_key, ca)))
    (d / "client.key").write_bytes(_pem(cli_key))
    # The cluster CA the service account trusts (what new nodes pin with the discovery hash).
    (d / "cluster-ca.crt").write_bytes(_pem(_cert("kubernetes", ec.generate_private_key(ec.SECP256R1()), ca=True)))
    (d / "sa-token").write_text("service-account-token")
    return d


class Clock:
    def __init__(self):
        self.now = START

    def __call__(self):
        return self.now


def linode_dev_settings(**changes) -> dict:
    """pools.json as the program renders it for linode-dev (minNodes 0), with `changes` to the pool."""
    raw = stack_config("linode-dev")
    raw = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("gpu-platform:")}
    raw["gpuPools"][0].update({"minNodes": 0, "maxNodes": 3, **changes})
    cfg = parse_config(raw, "linode-dev")
    pool = gpu_pool_specs(cfg)[0]
    addresses = render.vpc_addresses(cfg.linode.subnet_cidr, 1, 1, [pool.max_nodes]).gpu_pools[0]
    tags = ["owner:ml-platform", "role:gpu-worker", f"gpu-pool:{pool.name}"]
    doc = component.service_settings(cfg, [component.pool_settings(cfg, pool, addresses, tags)], max_gpus=64)
    doc["tags"] = ["owner:ml-platform", "managed-by:pulumi"]
    return doc


class Provider:
    """A running provider (its own gRPC server) and a client stub connected over mutual TLS."""

    def __init__(self, pb, pki, linode: FakeLinodeApi, kube: FakeKubeApi, clock: Clock, doc: dict, sleeps: list):
        pb2, pb2_grpc, _ = pb
        env = {"LINODE_FIREWALL_ID": "3118155", "LINODE_SUBNET_ID": "55", "CONTROL_PLANE_ENDPOINT": "10.0.0.10:6443"}
        self.settings = settings_mod.parse(doc, env)
        client = LinodeClient(TOKEN, linode.base_url, sleep=sleeps.append, max_attempts=4)
        kube_client = KubeClient(kube.url, token_file=pki / "sa-token", ca_file=pki / "cluster-ca.crt")
        self.groups = NodeGroups(self.settings, client, kube_client, now=clock)
        self.server = serve(self.groups, str(stubs_dir(pb)), "127.0.0.1:0", str(pki))
        creds = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes(), (pki / "client.key").read_bytes(),
                                             (pki / "client.crt").read_bytes())
        self.channel = grpc.secure_channel(f"localhost:{self.server.port}", creds)
        self.stub = pb2_grpc.CloudProviderStub(self.channel)
        self.pb2 = pb2

    def stop(self):
        self.channel.close()
        self.server.stop(grace=None)


def stubs_dir(pb) -> Path:
    return Path(pb[0].__file__).parent


@pytest.fixture
def world(pb, pki):
    clock = Clock()
    linode, kube = FakeLinodeApi(clock, page_size_cap=2), FakeKubeApi()
    sleeps: list[float] = []
    started: list[Provider] = []

    def start(**changes) -> Provider:
        p = Provider(pb, pki, linode, kube, clock, linode_dev_settings(**changes), sleeps)
        started.append(p)
        return p

    yield start, linode, kube, clock, sleeps
    for p in started:
        p.stop()
    linode.close()
    kube.close()


def node(pb2, provider_id="", name=""):
    return pb2.ExternalGrpcNode(providerID=provider_id, name=name)


def target(p: Provider, pool="ada") -> int:
    return p.stub.NodeGroupTargetSize(p.pb2.NodeGroupTargetSizeRequest(id=pool)).targetSize


def user_data_of(instance: dict) -> dict:
    return yaml.safe_load(decode_user_data(instance["_request"]["metadata"]["user_data"]))


def join_config_of(instance: dict) -> list[dict]:
    doc = user_data_of(instance)
    text = next(f["content"] for f in doc["write_files"] if f["path"] == render.KUBEADM_CONFIG_PATH)
    return list(yaml.safe_load_all(text))


# ---------------------------------------------------------------------------------------------
# Scale up
# ---------------------------------------------------------------------------------------------


def test_node_groups_come_from_the_config_with_min_and_max(world):
    start, *_ = world
    p = start()
    groups = p.stub.NodeGroups(p.pb2.NodeGroupsRequest()).nodeGroups
    assert [(g.id, g.minSize, g.maxSize) for g in groups] == [("ada", 0, 3)]
    assert p.stub.GPULabel(p.pb2.GPULabelRequest()).label == component.GPU_LABEL
    assert list(p.stub.GetAvailableGPUTypes(p.pb2.GetAvailableGPUTypesRequest()).gpuTypes) == \
        [p.settings.pool("ada").gpu_type]


def test_scale_up_creates_instances_with_the_pools_type_region_tags_and_the_programs_boot_document(world, pki):
    start, linode, kube, clock, _ = world
    p = start()
    assert target(p) == 0
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    made = linode.by_label()
    assert sorted(made) == ["gpu-dev-ada-0", "gpu-dev-ada-1"]
    pool = p.settings.pool("ada")
    for slot, label in enumerate(sorted(made)):
        req = made[label]["_request"]
        assert (req["type"], req["region"], req["image"]) == ("g2-gpu-rtx4000a1-m", "us-ord", "linode/ubuntu24.04")
        assert {"node-group-stack:gpu-dev", "node-group:ada", "gpu-pool:ada", "owner:ml-platform"} <= set(req["tags"])
        assert req["interfaces"][1] == {"purpose": "vpc", "subnet_id": 55, "ipv4": {"vpc": pool.addresses[slot]}}
        assert req["firewall_id"] == 3118155 and req["disk_encryption"] == "enabled" and req["booted"] is True
        # The worker's boot document is the program's (GPU driver step included) ...
        doc = user_data_of(made[label])
        paths = {f["path"] for f in doc["write_files"]}
        assert {render.BOOTSTRAP_SCRIPT_PATH, render.NVIDIA_SCRIPT_PATH, render.INSTALL_SCRIPT_PATH} <= paths
        # ... installing the version the API server runs: it asks the endpoint, trusting the cluster CA
        # (from the provider's service account), like the program's own workers.
        files = {f["path"]: f["content"] for f in doc["write_files"]}
        assert files[render.CLUSTER_CA_PATH] == (pki / "cluster-ca.crt").read_text()
        assert f"--cacert {render.CLUSTER_CA_PATH} \"https://10.0.0.10:6443/version\"" in files[render.INSTALL_SCRIPT_PATH]
        join, _kubelet = join_config_of(made[label])
        # ... joining with a token minted now, pinned to the cluster CA, with the pool's labels and taint.
        boot = join["discovery"]["bootstrapToken"]
        assert boot["apiServerEndpoint"] == "10.0.0.10:6443"
        assert boot["caCertHashes"] == [render.discovery_hash((pki / "cluster-ca.crt").read_text())]
        token_id, token_secret = boot["token"].split(".")
        secret = next(s for s in kube.secrets if s["stringData"]["token-id"] == token_id)
        assert secret["stringData"]["token-secret"] == token_secret
        expires = START + datetime.timedelta(seconds=p.settings.join_deadline_seconds)  # the join deadline
        assert secret["stringData"]["expiration"] == expires.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert join["nodeRegistration"]["name"] == label
        assert join["nodeRegistration"]["taints"] == [GPU_TAINT.as_k8s()]
    assert len({s["stringData"]["token-id"] for s in kube.secrets}) == 2, "one token per node, never shared"
    assert target(p) == 2
    nodes = p.stub.NodeGroupNodes(p.pb2.NodeGroupNodesRequest(id="ada")).instances
    assert [n.id for n in nodes] == [f"linode://{made[label]['id']}" for label in sorted(made)]
    assert {n.status.instanceState for n in nodes} == {p.pb2.InstanceStatus.InstanceState.Value("instanceCreating")}
    # The autoscaler matches registered nodes by providerID (linode://<id>, set by the Linode CCM).
    hit = p.stub.NodeGroupForNode(p.pb2.NodeGroupForNodeRequest(node=node(p.pb2, nodes[0].id, "gpu-dev-ada-0")))
    assert hit.nodeGroup.id == "ada"
    miss = p.stub.NodeGroupForNode(p.pb2.NodeGroupForNodeRequest(node=node(p.pb2, "linode://1", "gpu-dev-system-0")))
    assert miss.nodeGroup.id == ""


def test_scale_up_beyond_max_nodes_is_refused_and_creates_nothing(world):
    start, linode, *_ = world
    p = start()
    with pytest.raises(grpc.RpcError) as err:
        p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=4))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "maxNodes 3" in err.value.details()
    assert linode.calls("POST") == []


def test_the_gpu_ceiling_is_enforced_over_the_whole_stack(world):
    start, linode, *_ = world
    doc = linode_dev_settings()
    doc["maxGpus"] = 2
    p = start()
    p.groups.settings = settings_mod.parse(doc, {"LINODE_FIREWALL_ID": "1", "LINODE_SUBNET_ID": "2",
                                                 "CONTROL_PLANE_ENDPOINT": "10.0.0.10:6443"})
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    with pytest.raises(grpc.RpcError) as err:
        p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "ceiling of 2 (maxGpus)" in err.value.details()
    assert len(linode.instances) == 2


def test_the_gpu_ceiling_counts_the_fixed_pools_too(world):
    """A stack with a fixed GPU pool beside the autoscaled one: the fixed pool's GPUs are always there, so
    with maxGpus 3 and 2 fixed GPUs the provider may add one GPU, not three."""
    start, linode, *_ = world
    doc = linode_dev_settings()
    doc["maxGpus"], doc["fixedGpus"] = 3, 2
    p = start()
    p.groups.settings = settings_mod.parse(doc, {"LINODE_FIREWALL_ID": "1", "LINODE_SUBNET_ID": "2",
                                                 "CONTROL_PLANE_ENDPOINT": "10.0.0.10:6443"})
    with pytest.raises(grpc.RpcError) as err:
        p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "4 GPUs (2 of them in fixed pools), over the ceiling of 3" in err.value.details()
    assert linode.calls("POST") == []
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    assert len(linode.instances) == 1


def test_the_program_tells_the_provider_the_fixed_pools_gpus():
    """pools.json carries what the fixed pools hold of the ceiling (the program's own instances)."""
    import json

    from tests.conftest import plan_config

    raw = stack_config("linode-dev")
    raw["gpu-platform:linode"]["nodeGroups"] = {"image": "ghcr.io/example/gpu-platform-linode-node-groups@sha256:" + "ab" * 32,
                                                "apiTokenExpires": "2027-05-03"}
    fixed = dict(raw["gpu-platform:gpuPools"][0], name="fixed", minNodes=2, maxNodes=2)
    raw["gpu-platform:gpuPools"].append(fixed)
    plan = plan_config(raw, "linode-dev")
    cm = next(r for r in plan.by_type("kubernetes:core/v1:ConfigMap") if r.plain_inputs["metadata"]["name"] == component.NAME)
    doc = json.loads(cm.plain_inputs["data"]["pools.json"])
    assert doc["fixedGpus"] == 2 and [p["name"] for p in doc["pools"]] == ["ada"]
    assert settings_mod.parse(doc, {"CONTROL_PLANE_ENDPOINT": "10.0.0.10:6443"}).fixed_gpus == 2


def test_a_restart_mid_scale_up_neither_leaks_nor_duplicates(world):
    start, linode, *_ = world
    p = start()
    # The first node is created; the second create reaches Linode but every answer is lost, then the
    # provider dies (its retries exhausted, the autoscaler's call failed).
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    linode.faults["POST"] = [("lost", 500), ("status", 500), ("status", 500), ("status", 500)]
    with pytest.raises(Exception):
        p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    p.stop()
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-1"]
    # A new provider process counts what exists (by tag) ...
    q = start()
    assert target(q) == 2
    assert len(q.stub.NodeGroupNodes(q.pb2.NodeGroupNodesRequest(id="ada")).instances) == 2
    # ... and the autoscaler's next request tops the pool up to its max, once.
    q.stub.NodeGroupIncreaseSize(q.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-1", "gpu-dev-ada-2"]
    assert target(q) == 3


def test_a_create_whose_response_is_lost_is_retried_without_a_second_instance(world):
    start, linode, _, _, sleeps = world
    p = start()
    linode.faults["POST"] = [("lost", 500)]
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    posts = [r for r in linode.calls("POST")]
    assert len(posts) == 2, "retried once, refused as a duplicate label"
    assert list(linode.by_label()) == ["gpu-dev-ada-0"]
    assert target(p) == 1
    assert sleeps == [1.0]


# ---------------------------------------------------------------------------------------------
# Nodes that never join; scale down
# ---------------------------------------------------------------------------------------------


def test_a_node_that_never_joins_is_left_to_the_autoscaler_at_the_deadline_and_reaped_by_the_backstop(world):
    """At the join deadline (the autoscaler's --max-node-provision-time) the instance is the autoscaler's to remove:
    it times the scale-up out and backs the group off only if the instance is still there. The provider deletes it
    itself only after the backstop margin (the autoscaler away), and the pool recovers."""
    start, linode, kube, clock, _ = world
    p = start()
    deadline = 30  # linode.nodeGroups.joinDeadlineMinutes' default
    assert p.settings.join_deadline_seconds == deadline * 60 and p.settings.join_backstop_seconds == component.JOIN_BACKSTOP_SECONDS
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    kube.join("gpu-dev-ada-0", "ada")  # ada-0 registers; ada-1's boot failed
    linode.set_status("gpu-dev-ada-0", "running")
    clock.now = START + datetime.timedelta(minutes=deadline - 1)
    p.stub.Refresh(p.pb2.RefreshRequest())
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-1"], "still inside the join deadline"
    clock.now = START + datetime.timedelta(minutes=deadline + 1)
    p.stub.Refresh(p.pb2.RefreshRequest())
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-1"], \
        "past the join deadline but inside the backstop: the autoscaler's to time out and remove"
    assert target(p) == 2
    clock.now = START + datetime.timedelta(minutes=deadline, seconds=component.JOIN_BACKSTOP_SECONDS + 1)
    p.stub.Refresh(p.pb2.RefreshRequest())
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0"]
    assert target(p) == 1
    # The autoscaler asks again: a fresh node in the freed slot, with a fresh token.
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-1"]
    assert len(kube.secrets) == 3
    kube.join("gpu-dev-ada-1", "ada")
    clock.now = START + datetime.timedelta(hours=5)
    p.stub.Refresh(p.pb2.RefreshRequest())
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-1"], "joined nodes are never reaped"


def test_the_autoscaler_removes_a_node_that_never_registered_through_delete_nodes(world, caplog):
    """Past --max-node-provision-time the autoscaler deletes an unregistered node (core/static_autoscaler.go
    removeOldUnregisteredNodes) as the fake node it made from the instance: name and providerID both the
    instance's id (clusterstate.FakeNode), no Node object, no pods."""
    start, linode, kube, clock, _ = world
    p = start()
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    kube.join("gpu-dev-ada-0", "ada")
    lost = f"linode://{linode.by_label()['gpu-dev-ada-1']['id']}"
    clock.now = START + datetime.timedelta(seconds=p.settings.join_deadline_seconds + 60)
    p.stub.Refresh(p.pb2.RefreshRequest())
    fake = node(p.pb2, lost, lost)
    assert p.stub.NodeGroupForNode(p.pb2.NodeGroupForNodeRequest(node=fake)).nodeGroup.id == "ada"
    with caplog.at_level("INFO"):
        p.stub.NodeGroupDeleteNodes(p.pb2.NodeGroupDeleteNodesRequest(id="ada", nodes=[fake]))
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0"]
    assert target(p) == 1
    assert "deleted instance gpu-dev-ada-1" in caplog.text and "(it never registered as a node)" in caplog.text


def test_the_backstop_comes_after_the_autoscalers_own_removal_of_a_node_that_never_joins():
    """The autoscaler's removal comes up to IncreaseSize's answer (grpc_timeout), a scan interval and two loops
    after the join deadline; the provider's backstop must come later, or the autoscaler never times out."""
    doc = linode_dev_settings()
    assert doc["joinBackstopSeconds"] == component.JOIN_BACKSTOP_SECONDS == settings_mod.DEFAULT_JOIN_BACKSTOP_SECONDS
    assert component.JOIN_BACKSTOP_SECONDS >= component.GRPC_TIMEOUT_SECONDS + 2 * component.AUTOSCALER_SCAN_INTERVAL_SECONDS + 2 * 100
    cloud_config = yaml.safe_load(component.autoscaler_cloud_config())
    assert cloud_config["grpc_timeout"] == f"{component.GRPC_TIMEOUT_SECONDS}s"
    args = component.autoscaler_values("gpu-dev", "1.35", 15, 30)["extraArgs"]
    assert "scan-interval" not in args, "the scan interval the margin assumes is the flag's default"
    assert args["max-node-provision-time"] == "30m" and doc["joinDeadlineSeconds"] == 30 * 60
    doc["joinBackstopSeconds"] = -1
    with pytest.raises(settings_mod.SettingsError, match=r"pools.json: joinBackstopSeconds must be a whole number"):
        settings_mod.parse(doc, {"CONTROL_PLANE_ENDPOINT": "10.0.0.10:6443"})
    del doc["joinBackstopSeconds"]
    assert settings_mod.parse(doc, {"CONTROL_PLANE_ENDPOINT": "10.0.0.10:6443"}).join_backstop_seconds == 300


def test_delete_nodes_removes_exactly_the_drained_node(world):
    start, linode, kube, *_ = world
    p = start()
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=3))
    ids = {label: i["id"] for label, i in linode.by_label().items()}
    for label in ids:
        kube.join(label, "ada")
    p.stub.NodeGroupDeleteNodes(p.pb2.NodeGroupDeleteNodesRequest(
        id="ada", nodes=[node(p.pb2, f"linode://{ids['gpu-dev-ada-1']}", "gpu-dev-ada-1")]))
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0", "gpu-dev-ada-2"]
    assert [r[1] for r in linode.calls("DELETE")] == [f"/v4/linode/instances/{ids['gpu-dev-ada-1']}"]
    assert target(p) == 2


def test_delete_nodes_refuses_a_node_outside_the_pool_or_still_running_gpu_work(world):
    start, linode, kube, *_ = world
    p = start()
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    ids = {label: i["id"] for label, i in linode.by_label().items()}
    with pytest.raises(grpc.RpcError) as err:
        p.stub.NodeGroupDeleteNodes(p.pb2.NodeGroupDeleteNodesRequest(
            id="ada", nodes=[node(p.pb2, f"linode://{ids['gpu-dev-ada-0']}"), node(p.pb2, "linode://777")]))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    kube.pods.append({"metadata": {"name": "trainer-0", "ownerReferences": [{"kind": "Job"}]},
                      "spec": {"nodeName": "gpu-dev-ada-0",
                               "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                      "status": {"phase": "Running"}})
    with pytest.raises(grpc.RpcError) as err:
        p.stub.NodeGroupDeleteNodes(p.pb2.NodeGroupDeleteNodesRequest(
            id="ada", nodes=[node(p.pb2, f"linode://{ids['gpu-dev-ada-0']}")]))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "trainer-0" in err.value.details()
    assert linode.calls("DELETE") == [] and len(linode.instances) == 2


def test_decrease_target_size_drops_only_nodes_that_have_not_registered(world):
    start, linode, kube, *_ = world
    p = start()
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=2))
    kube.join("gpu-dev-ada-0", "ada")
    with pytest.raises(grpc.RpcError):
        p.stub.NodeGroupDecreaseTargetSize(p.pb2.NodeGroupDecreaseTargetSizeRequest(id="ada", delta=-2))
    p.stub.NodeGroupDecreaseTargetSize(p.pb2.NodeGroupDecreaseTargetSizeRequest(id="ada", delta=-1))
    assert sorted(linode.by_label()) == ["gpu-dev-ada-0"]


# ---------------------------------------------------------------------------------------------
# The template node (scale from zero)
# ---------------------------------------------------------------------------------------------


def test_template_node_has_the_catalogs_gpus_the_gpu_taint_and_the_labels_a_real_node_registers(world, pb):
    start, linode, *_ = world
    p = start()
    raw = p.stub.NodeGroupTemplateNodeInfo(p.pb2.NodeGroupTemplateNodeInfoRequest(id="ada")).nodeBytes
    tmpl = pb[2].Node()
    tmpl.ParseFromString(raw)  # what v1.Node#Unmarshal reads
    gpus = load_catalog().instance("linode", "g2-gpu-rtx4000a1-m").gpus
    assert gpus >= 1
    assert tmpl.status.allocatable["nvidia.com/gpu"].string == str(gpus)
    assert tmpl.status.capacity["nvidia.com/gpu"].string == str(gpus)
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in tmpl.spec.taints]
    assert taints == [GPU_TAINT.as_k8s()]
    # The same labels and taints a node of the pool registers with (its kubeadm JoinConfiguration).
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    join, _ = join_config_of(linode.by_label()["gpu-dev-ada-0"])
    kubelet_labels = dict(kv.split("=", 1) for a in join["nodeRegistration"]["kubeletExtraArgs"]
                          if a["name"] == "node-labels" for kv in a["value"].split(","))
    assert kubelet_labels.items() <= dict(tmpl.metadata.labels).items()
    assert kubelet_labels[component.GPU_LABEL] == p.settings.pool("ada").gpu_type
    assert join["nodeRegistration"]["taints"] == taints
    # A GPU training pod (tolerating the taint) fits the template; one without the toleration does not.
    assert _fits(tmpl, gpus=1, tolerations=[GPU_TAINT.toleration()])
    assert not _fits(tmpl, gpus=1, tolerations=[])
    assert not _fits(tmpl, gpus=gpus + 1, tolerations=[GPU_TAINT.toleration()])


def _fits(tmpl, gpus: int, tolerations: list[dict]) -> bool:
    """The scheduler's two checks that matter here: taints tolerated, GPUs allocatable."""
    for t in tmpl.spec.taints:
        if t.effect in ("NoSchedule", "NoExecute") and not any(
                tol["key"] == t.key and tol.get("value") == t.value and tol["effect"] == t.effect for tol in tolerations):
            return False
    return int(tmpl.status.allocatable["nvidia.com/gpu"].string or "0") >= gpus


def test_template_allocatable_is_the_capacity_models(world):
    from gpu_platform.components.capacity import allocatable

    start, *_ = world
    p = start()
    a = allocatable("linode", "g2-gpu-rtx4000a1-m")
    pool = p.settings.pool("ada")
    assert pool.allocatable == {"cpu": f"{a.cpu_millis}m", "memory": str(a.memory_bytes), "pods": str(a.pods),
                                "nvidia.com/gpu": str(a.gpus)}


def test_template_offers_the_plans_disk_less_swap_and_kubelet_reservations_as_ephemeral_storage(world, pb):
    """Issue 32 item 3: Katib's metrics collector asks 500Mi of ephemeral storage; a template without any
    never fits it, so the autoscaler never scales the pool from zero for a trial. The disk is the Linode
    API's for the plan (asked once), the reservations the kubelet's (data/linode_kubelet.py)."""
    from gpu_platform.rehearsal.linode_fake_api import plan_type

    start, linode, *_ = world
    p = start()
    disk = plan_type("g2-gpu-rtx4000a1-m")["disk"]  # what the (fake) API says of the plan
    tmpl = _template(p, pb)
    capacity = (disk - 512) * 1024 * 1024
    assert tmpl["status"]["capacity"]["ephemeral-storage"] == str(capacity)
    want = capacity - 2 * 1024 ** 3 - capacity // 10  # kube- and system-reserved 1Gi each, nodefs.available 10%
    assert abs(int(tmpl["status"]["allocatable"]["ephemeral-storage"]) - want) <= 1
    _template(p, pb)
    assert len([r for r in linode.calls("GET") if r[1] == "/v4/linode/types/g2-gpu-rtx4000a1-m"]) == 1, "asked once"
    assert p.settings.ephemeral_storage.reserved_bytes == 2 * 1024 ** 3


def test_without_an_answer_about_the_plan_the_template_is_refused_not_served_without_storage(world, pb):
    start, linode, *_ = world
    p = start()
    linode.faults["GET"] += [("status", 404)] * 4
    with pytest.raises(grpc.RpcError) as err:
        p.stub.NodeGroupTemplateNodeInfo(p.pb2.NodeGroupTemplateNodeInfoRequest(id="ada"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "404" in err.value.details()


# ---------------------------------------------------------------------------------------------
# Linode API client: rate limits, errors, pagination, filters
# ---------------------------------------------------------------------------------------------


def test_the_client_waits_retry_after_on_429_and_backs_off_on_5xx(world):
    _, linode, _, _, _ = world
    sleeps: list[float] = []
    client = LinodeClient(TOKEN, linode.base_url, sleep=sleeps.append, max_attempts=4)
    linode.faults["GET"] = [("status", 429, {"Retry-After": "7"}), ("status", 502), ("status", 504)]
    assert client.list_instances("node-group-stack:x") == []
    assert sleeps == [7.0, 1.0, 2.0]
    linode.faults["GET"] = [("status", 500)] * 4
    with pytest.raises(LinodeApiError) as err:
        client.list_instances("node-group-stack:x")
    assert err.value.status == 500
    sleeps.clear()
    linode.faults["GET"] = [("status", 503, {"X-Maintenance-Mode": "1"})]
    with pytest.raises(LinodeApiError):
        client.list_instances("node-group-stack:x")
    assert sleeps == [], "a maintenance window is not retried (as linodego)"
    with pytest.raises(LinodeApiError) as err:
        LinodeClient("wrong", linode.base_url, sleep=sleeps.append).list_instances("t")
    assert err.value.status == 401 and sleeps == []


def test_listing_follows_pages_and_finds_only_the_stacks_instances(world):
    _, linode, *_ = world
    client = LinodeClient(TOKEN, linode.base_url, sleep=lambda s: None)
    for i in range(5):
        client.create_instance({"label": f"gpu-dev-ada-{i}", "region": "us-ord", "type": "g2-gpu-rtx4000a1-m",
                                "tags": ["node-group-stack:gpu-dev", "node-group:ada"]})
    client.create_instance({"label": "gpu-prod-ada-0", "region": "us-ord", "type": "g2-gpu-rtx4000a1-m",
                            "tags": ["node-group-stack:gpu-prod", "node-group:ada"]})
    found = client.list_instances("node-group-stack:gpu-dev")
    assert sorted(i["label"] for i in found) == [f"gpu-dev-ada-{i}" for i in range(5)]
    assert len([r for r in linode.calls("GET")]) == 3, "page_size capped at 2 by the fake: three pages"
    client.delete_instance(found[0]["id"])
    client.delete_instance(found[0]["id"])  # already gone: 404 counts as deleted


def test_the_fake_answers_with_the_recorded_shapes():
    """The fake's instance is the recorded real one with the request's values: same keys."""
    rec = recorded("instance_create.json")
    clock = Clock()
    linode = FakeLinodeApi(clock)
    try:
        made = LinodeClient(TOKEN, linode.base_url).create_instance(rec["request"])
        assert set(made) == set(rec["response"])
        listed = recorded("instances_list.json")["response"]
        page = LinodeClient(TOKEN, linode.base_url)._request("GET", "/linode/instances")
        assert set(page) == set(listed) and set(page["data"][0]) == set(rec["response"])
        assert set(rec["response"]) <= set(listed["data"][0]), "the two recordings describe the same instance object"
        with pytest.raises(LinodeApiError) as err:
            LinodeClient(TOKEN, linode.base_url).create_instance(rec["request"])
        assert err.value.label_taken
    finally:
        linode.close()


# ---------------------------------------------------------------------------------------------
# Transport and packaging
# ---------------------------------------------------------------------------------------------


def test_a_client_without_the_autoscalers_certificate_is_refused(world, pki, pb):
    start, *_ = world
    p = start()
    creds = grpc.ssl_channel_credentials((pki / "ca.crt").read_bytes())  # no client certificate
    with grpc.secure_channel(f"localhost:{p.server.port}", creds) as ch:
        with pytest.raises(grpc.RpcError) as err:
            pb[1].CloudProviderStub(ch).NodeGroups(pb[0].NodeGroupsRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_protos_name_their_upstream_source_and_no_generated_code_is_committed():
    for proto in CTL.joinpath("vendor").rglob("*.proto"):
        head = proto.read_text().splitlines()[0]
        assert head.startswith("// Copied unchanged below this header from github.com/kubernetes/"), proto
    assert "tag cluster-autoscaler-1.35.2" in (CTL / "vendor" / "externalgrpc.proto").read_text()[:400]
    assert not list(CTL.rglob("*_pb2*.py"))


def test_the_vendor_readme_lists_each_proto_with_its_upstream_path_tag_and_license():
    """vendor/README.md agrees with each file's own header: repository, path, tag and commit."""
    vendor = CTL / "vendor"
    rows = {}
    for line in (vendor / "README.md").read_text().splitlines():
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0]] = cells[1:]
    protos = sorted(p.relative_to(vendor).as_posix() for p in vendor.rglob("*.proto"))
    assert sorted(rows) == protos == sorted(stubs.PROTOS)
    for name, (repo, path, tag, license_) in rows.items():
        header = " ".join((vendor / name).read_text().splitlines()[:2])
        version, commit = re.fullmatch(r"(\S+) \((\w{40})\)", tag).groups()
        assert f"from {repo}, path {path}," in header and f"tag {version} (commit {commit})" in header, name
        assert license_ == "Apache-2.0" and "Licensed under the Apache License, Version 2.0" in (vendor / name).read_text()


def test_the_images_copy_of_the_package_is_enough_to_import_the_service(tmp_path):
    """The image holds only the package folders its Dockerfile copies into /app: render.py's pins live in
    gpu_platform/data/, so leaving that folder out would fail at the provider's start, not at build time."""
    import shutil
    import subprocess

    app = tmp_path / "app"
    for src, dest in re.findall(r"^COPY (gpu_platform\S*) /app/(\S+)$", (CTL / "Dockerfile").read_text(), re.M):
        (app / dest).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, app / dest, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / src, app / dest)
    out = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path[:0] = [sys.argv[1]]; "
                          "import gpu_platform.controllers.linode_node_groups.service as s; print(s.__file__)", str(app)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(app))


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("==")
            version, _, digest = rest.partition(" --hash=sha256:")
            assert len(digest.strip()) == 64, line
            out[name.lower()] = version.strip()
    return out


def test_image_wheels_are_hash_pinned_at_the_versions_the_tests_run_with():
    from importlib.metadata import version

    pins = _pins(CTL / "requirements.txt")
    for name in ("grpcio", "protobuf", "pyyaml", "cryptography", "pulumi"):
        assert pins[name] == version(name), name
    assert _pins(CTL / "build-requirements.txt")["grpcio-tools"] == version("grpcio-tools")


def test_dockerfile_generates_the_stubs_at_build_time_and_runs_as_non_root():
    text = (CTL / "Dockerfile").read_text()
    froms = [line.split()[1] for line in text.splitlines() if line.startswith("FROM ")]
    assert len(set(froms)) == 1 and "@sha256:" in froms[0]
    assert "python /src/stubs.py /opt/stubs" in text and "--require-hashes" in text
    assert "USER 65532:65532" in text


def test_settings_errors_name_the_key():
    doc = linode_dev_settings()
    del doc["pools"][0]["addresses"]
    with pytest.raises(settings_mod.SettingsError, match=r"pools\[0\]: missing key 'addresses'"):
        settings_mod.parse(doc)


def test_the_service_can_serve_concurrent_calls(world):
    start, linode, *_ = world
    p = start()
    errors: list[BaseException] = []

    def scale():
        try:
            p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
        except grpc.RpcError as e:  # a call that would exceed maxNodes is refused, never over-creates
            errors.append(e)

    threads = [threading.Thread(target=scale) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(linode.instances) == 3 and len(errors) == 2
    assert json.loads(json.dumps(sorted(linode.by_label()))) == ["gpu-dev-ada-0", "gpu-dev-ada-1", "gpu-dev-ada-2"]


def test_the_destroy_hook_deletes_the_providers_instances_and_nothing_else(world):
    """gpu_platform/components/linode/delete_autoscaled.py, as pulumi-command runs it at destroy."""
    import subprocess

    _, linode, *_ = world
    client = LinodeClient(TOKEN, linode.base_url, sleep=lambda s: None)
    for label, tags in (("gpu-dev-ada-0", ["node-group-stack:gpu-dev", "node-group:ada"]),
                        ("gpu-dev-ada-1", ["node-group-stack:gpu-dev", "node-group:ada"]),
                        ("gpu-dev-system-0", ["node-group-stack:gpu-dev", "role:system-worker"]),
                        ("gpu-prod-ada-0", ["node-group-stack:gpu-prod", "node-group:ada"])):
        client.create_instance({"label": label, "region": "us-ord", "type": "g6-standard-4", "tags": tags})
    linode.faults["GET"] = [("status", 429, {"Retry-After": "1"})]
    script = ROOT / "gpu_platform" / "components" / "linode" / "delete_autoscaled.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={"LINODE_TOKEN": TOKEN, "STACK_TAG": "node-group-stack:gpu-dev", "LINODE_API_URL": linode.base_url})
    assert run.returncode == 0, run.stderr
    assert sorted(linode.by_label()) == ["gpu-dev-system-0", "gpu-prod-ada-0"]
    assert "deleted autoscaled instance gpu-dev-ada-0" in run.stdout
    linode.faults["DELETE"] = [("status", 400)]
    client.create_instance({"label": "gpu-dev-ada-2", "region": "us-ord", "type": "g6-standard-4",
                            "tags": ["node-group-stack:gpu-dev", "node-group:ada"]})
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={"LINODE_TOKEN": TOKEN, "STACK_TAG": "node-group-stack:gpu-dev", "LINODE_API_URL": linode.base_url})
    assert run.returncode != 0 and "DELETE /linode/instances/" in run.stderr, "a failed delete fails the destroy"


def test_pricing_is_the_pools_hourly_price_over_the_period(world):
    from google.protobuf import timestamp_pb2

    start, linode, *_ = world
    p = start()
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    pid = f"linode://{linode.by_label()['gpu-dev-ada-0']['id']}"
    t0, t1 = timestamp_pb2.Timestamp(seconds=0), timestamp_pb2.Timestamp(seconds=2 * 3600)
    price = p.stub.PricingNodePrice(p.pb2.PricingNodePriceRequest(node=node(p.pb2, pid), startTimestamp=t0, endTimestamp=t1)).price
    hourly = load_catalog().instance("linode", "g2-gpu-rtx4000a1-m").price("on-demand").usd_per_hour
    assert price == pytest.approx(2 * hourly)


@pytest.mark.sidevenv  # checkov, from .venv-checkov
def test_dockerfile_passes_checkov():
    import subprocess

    from tests.test_platform_validate import checkov_bin

    proc = subprocess.run([checkov_bin(), "-f", str(CTL / "Dockerfile"), "--framework", "dockerfile", "-o", "json",
                           "--quiet", "--compact", "--skip-download"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["summary"]["parsing_errors"] == 0 and report["summary"]["passed"] > 20
    assert report["summary"]["failed"] == 0, [c["check_id"] for c in report["results"]["failed_checks"]]


def test_the_image_holds_every_distribution_the_service_imports():
    """What `python -m gpu_platform.controllers.linode_node_groups` imports from site-packages is
    installed in the image (requirements.txt), so the pod does not die on an ImportError."""
    import subprocess

    code = ("import sys, json, importlib.metadata as md\n"
            "import gpu_platform.controllers.linode_node_groups.__main__ as m, gpu_platform.controllers.linode_node_groups.service\n"
            "site = [p for p in sys.path if p.endswith('site-packages')]\n"
            "tops = {n.split('.')[0] for n, mod in list(sys.modules.items()) if getattr(mod, '__file__', None)"
            " and any(str(mod.__file__).startswith(s) for s in site)}\n"
            "dists = md.packages_distributions()\n"
            "print(json.dumps(sorted({d.lower().replace('_', '-') for t in tops for d in dists.get(t, [t])})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, cwd=ROOT)
    imported = set(json.loads(out.stdout))
    pinned = set(_pins(CTL / "requirements.txt"))
    # Not the service's: grpcio probes for grpc_tools (grpc/_runtime_protos.py, try/except ImportError);
    # setuptools' _distutils_hack and the editable install's finder come from .pth files of this venv.
    probed = {"grpcio-tools", "setuptools"} | {d for d in imported if d.startswith("--editable-")}
    assert imported - probed <= pinned, imported - probed - pinned


# ---------------------------------------------------------------------------------------------
# The rehearsal's autoscaling drill (gpu_platform/rehearsal/autoscale.py): its own checks can fail
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linode_dev_plan():
    return plan_config(stack_config("linode-dev"), "linode-dev")


@pytest.fixture(scope="module")
def ada_model_group(linode_dev_plan):
    from gpu_platform.preflight.fit.nodes import cluster_model

    cfg = parse_config({k.split(":", 1)[1]: v for k, v in stack_config("linode-dev").items()
                        if k.startswith("gpu-platform:")}, "linode-dev")
    return cluster_model(cfg, linode_dev_plan).group("ada")


def test_the_drill_runs_the_provider_on_the_pools_json_the_program_renders(linode_dev_plan):
    from gpu_platform.rehearsal.autoscale import pools_json

    doc = pools_json(linode_dev_plan)
    assert doc is not None
    settings = settings_mod.parse(doc, {"CONTROL_PLANE_ENDPOINT": "127.0.0.1:6443"})
    assert [(p.name, p.min_nodes, p.max_nodes) for p in settings.pools] == [("ada", 0, 1)]
    # A stack without autoscaled Linode pools has nothing to drill.
    fixed = stack_config("linode-dev")
    fixed["gpu-platform:gpuPools"][0].update({"minNodes": 1, "maxNodes": 1})
    assert pools_json(plan_config(fixed, "linode-dev")) is None


class _Nodes:
    """The two Node calls the drill's bridge makes, recorded."""

    def __init__(self):
        self.created: list[dict] = []
        self.status: list[dict] = []

    def list(self, api_version, kind, *args, **kwargs):
        return list(self.created)

    def create(self, obj):
        self.created.append(obj)

    def apply(self, obj, subresource=None):
        self.status.append(obj)

    def delete(self, *args, **kwargs):
        return True


def _template(p: Provider, pb) -> dict:
    from gpu_platform.rehearsal.autoscale import node_from_template

    tmpl = pb[2].Node()
    tmpl.ParseFromString(p.stub.NodeGroupTemplateNodeInfo(p.pb2.NodeGroupTemplateNodeInfoRequest(id="ada")).nodeBytes)
    return node_from_template(tmpl)


def test_the_drill_fails_on_a_template_with_a_wrong_gpu_count_or_without_the_taint(world, pb, ada_model_group):
    from gpu_platform.rehearsal.autoscale import InstanceBridge, Timing, model_disagreements

    start, linode, *_ = world
    p = start()
    good = _template(p, pb)
    assert model_disagreements(good, ada_model_group) == []
    wrong_gpus = copy.deepcopy(good)
    wrong_gpus["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    assert any("2 nvidia.com/gpu, the node model 1" in m for m in model_disagreements(wrong_gpus, ada_model_group))
    no_taint = copy.deepcopy(good)
    no_taint["spec"]["taints"] = []
    assert any("taints" in m for m in model_disagreements(no_taint, ada_model_group))
    # Review of issue 35: a template label that nothing gives the node (not its kubelet's node-labels, not the
    # kubelet, not the CCM) used to be copied onto the KWOK node, so the rehearsal scheduled what a real node refuses.
    promised = copy.deepcopy(good)
    promised["metadata"]["labels"]["gpu-platform/only-in-the-template"] = "yes"
    wrong_region = copy.deepcopy(good)
    wrong_region["metadata"]["labels"]["topology.kubernetes.io/region"] = "xx-nowhere"

    # The bridge registers what the boot document says; a template that says otherwise is a failure.
    p.stub.NodeGroupIncreaseSize(p.pb2.NodeGroupIncreaseSizeRequest(id="ada", delta=1))
    for template, fails in ((good, False), (no_taint, "taints"), (promised, "only-in-the-template"),
                            (wrong_region, "xx-nowhere")):
        nodes = _Nodes()
        bridge = InstanceBridge(nodes, linode, p.settings.stack_tag, lambda _: template, lambda _: "ada",
                                Timing(boot_seconds=0))
        bridge.step()
        assert [n["metadata"]["name"] for n in nodes.created] == ["gpu-dev-ada-0"]
        node = nodes.created[0]
        assert node["spec"]["providerID"] == f"linode://{linode.by_label()['gpu-dev-ada-0']['id']}"
        assert node["spec"]["taints"] == [GPU_TAINT.as_k8s()], "as the kubelet registers it (JoinConfiguration)"
        assert bool(bridge.problems) is bool(fails), bridge.problems
        assert not fails or any(fails in m for m in bridge.problems), bridge.problems
        assert "gpu-platform/only-in-the-template" not in node["metadata"]["labels"], "registered from the node's own sources"
        assert node["metadata"]["labels"]["topology.kubernetes.io/region"] == p.settings.region


def test_the_release_workflow_publishes_the_image_by_digest_for_the_stack_key():
    """As the scale-in controller's controller-image.yml: pull requests build only, release tags push to
    GHCR (the only job that may write packages), actions pinned by commit, and the digest is printed in
    the form linode.nodeGroups.image accepts."""
    import re

    from gpu_platform.config.linode import LinodeNodeGroups

    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "linode-node-groups-image.yml").read_text())
    assert doc["permissions"] == {}
    on = doc[True] if True in doc else doc["on"]
    assert on["push"] == {"tags": ["v*"]}
    assert set(on["pull_request"]["paths"]) >= {"gpu_platform/controllers/linode_node_groups/**",
                                                "gpu_platform/components/linode/render.py"}
    build, publish = doc["jobs"]["build"], doc["jobs"]["publish"]
    assert build["permissions"] == {"contents": "read"}
    assert publish["if"] == "github.event_name == 'push' && startsWith(github.ref, 'refs/tags/v')"
    assert publish["permissions"] == {"contents": "read", "packages": "write"}
    for job, push in ((build, False), (publish, True)):
        assert all(re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", s["uses"]) for s in job["steps"] if "uses" in s)
        step = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action@"))
        # The repository root: the image carries gpu_platform/components/linode/render.py (the boot documents).
        assert (step["with"]["context"], step["with"]["file"], step["with"]["push"]) == \
            (".", "gpu_platform/controllers/linode_node_groups/Dockerfile", push)
    meta = next(s for s in publish["steps"] if s.get("uses", "").startswith("docker/metadata-action@"))
    assert meta["with"]["images"].endswith("/" + component.IMAGE_NAME)
    summary = next(s for s in publish["steps"] if s.get("name") == "Digest for the stack config")
    assert "nodeGroups: { image: $ref }" in summary["run"] and summary["env"]["DIGEST"] == "${{ steps.build.outputs.digest }}"
    # What it prints is what the config takes.
    LinodeNodeGroups(image=f"ghcr.io/example/{component.IMAGE_NAME}@sha256:" + "0f" * 32)
