"""The Linode cluster over months: joins that never expire, tokens that do, safe replacement options,
kubeadm configs that stay inside the v1beta4 schema, the readiness gate, the bucket name rules."""

from __future__ import annotations

import base64
import datetime
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpu_platform.components.linode import readiness, render
from gpu_platform.components.linode.cluster import NODE_IGNORE_CHANGES, TOKEN_ROTATION_DAYS
from gpu_platform.config.linode import bucket_label
from tests.conftest import plan_config, plan_stack, stack_config
from gpu_platform.components.linode.render import decode_user_data

INSTANCE = "linode:index/instance:Instance"


@pytest.fixture(scope="module")
def ha():
    return plan_stack("linode-ha")


@pytest.fixture(scope="module")
def dev():
    # linode-dev with its GPU pool at a fixed size (minNodes == maxNodes == 1): the Pulumi-owned GPU
    # instance these tests look at. linode-dev itself autoscales the pool (tests/test_linode_autoscaling.py).
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:gpuPools"][0]["minNodes"] = 1
    return plan_config(cfg, "linode-dev")


def docs_of(plan) -> dict[str, dict]:
    return {r.plain_inputs["label"]: yaml.safe_load(decode_user_data(r.plain_inputs["metadatas"][0]["userData"]))
            for r in plan.by_type(INSTANCE)}


def files_of(doc: dict) -> dict[str, str]:
    return {f["path"]: f["content"] for f in doc["write_files"]}


# --- a control plane created a week after init ---------------------------------------------------


def test_control_plane_created_a_week_after_init_joins_from_its_own_user_data(ha):
    """No CA key in its user data: cp-2, created (or replaced) long after the kubeadm-certs Secret of init
    expired (two hours), downloads the CAs with the certificate key once a live peer uploaded them again: every
    other control plane's user data has the timer that does so while cp-2 is missing (executed in
    tests/test_linode_ca_keys.py). Its own token is renewed by every `pulumi up`; its discovery is pinned."""
    docs = docs_of(ha)
    files = files_of(docs["gpu-staging-cp-2"])
    join = yaml.safe_load(files[render.KUBEADM_CONFIG_PATH].split("---\n")[0])
    assert not [p for p in files if p.startswith(render.PKI_DIR)]
    assert re.fullmatch(r"[0-9a-f]{64}", join["controlPlane"]["certificateKey"])
    assert files[render.CERTIFICATE_KEY_PATH].strip() == join["controlPlane"]["certificateKey"]
    assert join["discovery"]["bootstrapToken"]["caCertHashes"][0].startswith("sha256:")
    token_id = join["discovery"]["bootstrapToken"]["token"].split(".")[0]
    assert token_id in _worker_tokens(ha)  # a Secret the program renews
    bootstrap = files[render.BOOTSTRAP_SCRIPT_PATH]
    assert bootstrap.index("download-certs") < bootstrap.index("remove_stale_etcd_member\n") < bootstrap.rindex("kubeadm join --config")
    for peer in ("gpu-staging-cp-0", "gpu-staging-cp-1"):
        peer_files = files_of(docs[peer])
        assert "gpu-staging-cp-2" in peer_files[render.CERTS_UPLOAD_SCRIPT_PATH]
        assert f"/etc/systemd/system/{render.CERTS_UPLOAD_TIMER}" in peer_files


def test_replaced_cp0_joins_the_survivors_instead_of_initialising(ha, dev):
    ha_cp0 = files_of(docs_of(ha)["gpu-staging-cp-0"])
    script = ha_cp0[render.BOOTSTRAP_SCRIPT_PATH]
    assert "peers=(10.0.0.11 10.0.0.12)" in script
    assert (script.index("peer_cluster_ca || found=$?") < script.index("cluster_record || recorded=$?")
            < script.index("  kubeadm join --config") < script.rindex("  kubeadm init --config"))
    assert f"SECONDS + {render.PEER_WAIT_SECONDS}" in script  # executed: tests/test_linode_boot_scripts.py
    join = yaml.safe_load(ha_cp0[render.KUBEADM_JOIN_CONFIG_PATH].split("---\n")[0])
    assert join["kind"] == "JoinConfiguration" and "controlPlane" in join
    # A single control plane has nobody to join: it initialises at once (no wait).
    dev_script = files_of(docs_of(dev)["gpu-dev-cp-0"])[render.BOOTSTRAP_SCRIPT_PATH]
    assert "peers=()" in dev_script and "SECONDS + 0" in dev_script


# --- the worker token: a Secret with an expiry, rotated -------------------------------------------


def _worker_tokens(plan) -> dict[str, dict]:
    """token id -> the bootstrap Secret's data, for every worker token of a plan."""
    out = {}
    for r in plan.by_type("kubernetes:core/v1:Secret"):
        if r.inputs.get("type") == "bootstrap.kubernetes.io/token":
            assert r.inputs["stringData"] == "[secret]"
            data = r.plain_inputs["stringData"]
            assert r.plain_inputs["metadata"] == {"name": f"bootstrap-token-{data['token-id']}", "namespace": "kube-system"}
            out[data["token-id"]] = data
    return out


def _join_token(plan, label: str) -> str:
    worker = files_of(docs_of(plan)[label])
    return yaml.safe_load(worker[render.KUBEADM_CONFIG_PATH].split("---\n")[0])["discovery"]["bootstrapToken"]["token"]


def test_each_worker_has_its_own_bootstrap_secret_with_an_expiry_and_no_token_lives_forever(dev):
    tokens = _worker_tokens(dev)
    workers = [label for label in docs_of(dev) if "-cp-" not in label]
    assert len(workers) == 3  # two system workers and the GPU worker
    assert len(tokens) == len(workers) + 1  # and the control plane's own
    now = datetime.datetime.now(datetime.timezone.utc)
    for label in workers:
        token_id, secret = _join_token(dev, label).split(".")
        data = tokens[token_id]
        assert data["token-secret"] == secret
        expiry = datetime.datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
        assert now < expiry <= now + datetime.timedelta(days=2 * TOKEN_ROTATION_DAYS)
        assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    for label, doc in docs_of(dev).items():
        text = yaml.safe_dump(doc)
        # kubeadm init's own token (24 hours), cp-0's only.
        assert ("bootstrapTokens" in text) == label.endswith("-cp-0")
    cp0 = files_of(docs_of(dev)["gpu-dev-cp-0"])
    init = yaml.safe_load(cp0[render.KUBEADM_CONFIG_PATH].split("---\n")[0])
    assert [t["ttl"] for t in init["bootstrapTokens"]] == ["24h0m0s"]
    # The read-back token (no expiry, signing only: it cannot authenticate) is not kubeadm's to make (kubeadm
    # refuses a token with groups but no authentication usage, and gives every token groups): cp-0 applies
    # its Secret after init from a file only root reads (Linode review, tests/test_linode_ca_keys.py).
    assert render.READBACK_TOKEN_PATH in cp0 and render.READBACK_TOKEN_SCRIPT_PATH in cp0


def test_a_replaced_worker_joins_with_material_valid_when_it_boots(monkeypatch):
    """Pulumi keeps a worker's user data as first written (ignore_changes on metadatas), so a worker
    replaced weeks later boots with that same document. Its token must be valid then, and it must not
    install a Kubernetes minor frozen in it: the program renews the worker's own token on every run, and
    the worker asks the API server which version to install."""
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:gpuPools"][0]["minNodes"] = 1  # a Pulumi-owned GPU worker (linode-dev autoscales it)
    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-23")
    first = plan_config(cfg)
    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2027-01-20")  # 8 weeks later: the replacement's `pulumi up`
    later = plan_config(cfg)
    label = "gpu-dev-ada-0"
    frozen = _join_token(first, label)  # what the replaced instance boots with (ignore_changes)
    assert _join_token(later, label) == frozen  # the same token, per worker, not per rotation window
    data = _worker_tokens(later)[frozen.split(".")[0]]
    expiry = datetime.datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    assert expiry > datetime.datetime(2027, 1, 20, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=TOKEN_ROTATION_DAYS)
    instance = next(r for r in later.by_type(INSTANCE) if r.plain_inputs["label"] == label)
    assert "metadatas" in instance.options["ignoreChanges"]
    install = files_of(docs_of(first)[label])[render.INSTALL_SCRIPT_PATH]
    assert "/version" in install and cfg["gpu-platform:kubernetesVersion"] not in install


def test_token_rotates_per_window_and_overlaps_the_next():
    day = datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.timezone.utc)
    w1, end1 = render.token_window(day, 7)
    w2, end2 = render.token_window(day + datetime.timedelta(days=7), 7)
    same, _ = render.token_window(end1 - datetime.timedelta(seconds=1), 7)
    assert w1 != w2 and same == w1 and end2 - end1 == datetime.timedelta(days=7)
    assert day < end1 <= day + datetime.timedelta(days=7)
    # Valid through the next window: a node created just before rotation still joins.
    assert render.token_expiration(end1, 7) == (end1 + datetime.timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_workers_carry_no_ca_key_and_control_planes_no_worker_token(dev):
    docs = docs_of(dev)
    worker_tokens = {_join_token(dev, label) for label in docs if "-cp-" not in label}
    for label, doc in docs.items():
        files = files_of(doc)
        if "-cp-" in label:
            assert not [t for t in worker_tokens if t in "\n".join(files.values())], label
        else:
            assert render.CERTIFICATE_KEY_PATH not in files and "certificateKey" not in files[render.KUBEADM_CONFIG_PATH]
            assert not [p for p in files if p.startswith(render.PKI_DIR)], label
            assert "PRIVATE KEY" not in "\n".join(files.values()), label


# --- replacement and scaling, asserted on the registered resources --------------------------------


def test_nodes_are_replaced_delete_first_never_for_ssh_keys_and_control_planes_are_protected(dev, ha):
    from gpu_platform.components.linode.cluster import LinodeKubeadmCluster  # noqa: F401  (the options live there)

    for plan in (dev, ha):
        for r in plan.by_type(INSTANCE):
            opts = r.options
            assert opts["deleteBeforeReplace"] is True, r.name
            assert set(opts["ignoreChanges"]) == set(NODE_IGNORE_CHANGES)
            assert {"authorizedKeys", "metadatas", "image"} <= set(opts["ignoreChanges"])
            assert opts["protect"] is ("-cp-" in r.plain_inputs["label"]), r.name


def test_adding_an_ssh_key_changes_only_ignored_inputs(dev):
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:linode"]["sshAuthorizedKeys"] = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOhB7/zzhC+HXDdGOdLwJln5NYwm6UNXx3chmQSVTG4 ops@example.com"]
    with_key = plan_config(cfg)
    before = {r.plain_inputs["label"]: r.plain_inputs for r in dev.by_type(INSTANCE)}
    for r in with_key.by_type(INSTANCE):
        old = before[r.plain_inputs["label"]]
        changed = {k for k in set(old) | set(r.plain_inputs) if old.get(k) != r.plain_inputs.get(k)}
        # metadatas differ only through fresh random test keys; both are ignored on existing nodes.
        assert changed <= set(NODE_IGNORE_CHANGES) | {"metadatas"}, (r.name, changed)


def test_growing_a_gpu_pool_adds_nodes_without_touching_the_others(dev):
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:gpuPools"][0]["minNodes"] = cfg["gpu-platform:gpuPools"][0]["maxNodes"] = 2
    grown = plan_config(cfg)
    old = {r.name: r.plain_inputs for r in dev.by_type(INSTANCE)}
    new = {r.name: r.plain_inputs for r in grown.by_type(INSTANCE)}
    assert set(new) - set(old) == {next(n for n in new if n.endswith("ada-1"))}
    added = new[next(n for n in new if n.endswith("ada-1"))]
    assert added["interfaces"][1]["ipv4"]["vpc"] == "10.0.0.101"
    for name in old:
        assert new[name]["interfaces"] == old[name]["interfaces"] and new[name]["label"] == old[name]["label"]
    gate = next(r for r in grown.by_type("command:local:Command") if r.name.endswith("nodes-ready"))
    assert '"gpu-dev-ada-1"' in gate.plain_inputs["environment"]["GATE_EXPECTED"]


# --- kubeadm v1beta4 schema (https://kubernetes.io/docs/reference/config-api/kubeadm-config.v1beta4/) --

V1BETA4 = {
    "InitConfiguration": {"apiVersion", "kind", "bootstrapTokens", "dryRun", "nodeRegistration", "localAPIEndpoint",
                          "certificateKey", "skipPhases", "patches", "timeouts"},
    "ClusterConfiguration": {"apiVersion", "kind", "etcd", "networking", "kubernetesVersion", "controlPlaneEndpoint",
                             "apiServer", "controllerManager", "scheduler", "dns", "proxy", "certificatesDir",
                             "imageRepository", "featureGates", "clusterName", "encryptionAlgorithm",
                             "certificateValidityPeriod", "caCertificateValidityPeriod"},
    "JoinConfiguration": {"apiVersion", "kind", "dryRun", "nodeRegistration", "caCertPath", "discovery", "controlPlane",
                          "skipPhases", "patches", "timeouts"},
}
NESTED = {
    "nodeRegistration": {"name", "criSocket", "taints", "kubeletExtraArgs", "ignorePreflightErrors", "imagePullPolicy",
                         "imagePullSerial"},
    "localAPIEndpoint": {"advertiseAddress", "bindPort"},
    "discovery": {"bootstrapToken", "file", "tlsBootstrapToken"},
    "file": {"kubeConfigPath"},
    "bootstrapToken": {"token", "apiServerEndpoint", "caCertHashes", "unsafeSkipCAVerification"},
    "controlPlane": {"localAPIEndpoint", "certificateKey"},
    "apiServer": {"extraArgs", "extraVolumes", "extraEnvs", "certSANs"},
    "controllerManager": {"extraArgs", "extraVolumes", "extraEnvs"},
    "scheduler": {"extraArgs", "extraVolumes", "extraEnvs"},
    "networking": {"serviceSubnet", "podSubnet", "dnsDomain"},
    "etcd": {"local", "external"},
    "local": {"imageRepository", "imageTag", "dataDir", "extraArgs", "extraEnvs", "serverCertSANs", "peerCertSANs"},
}
ENCRYPTION_ALGORITHMS = {"RSA-2048", "RSA-3072", "RSA-4096", "ECDSA-P256", "ECDSA-P384"}


def _schema_problems(doc: dict) -> list[str]:
    out = [f"{doc['kind']}.{k}" for k in set(doc) - V1BETA4[doc["kind"]]]

    def walk(node, path):
        for key, value in node.items():
            if key in NESTED and isinstance(value, dict):
                out.extend(f"{path}.{key}.{k}" for k in set(value) - NESTED[key])
                walk(value, f"{path}.{key}")
    walk(doc, doc["kind"])
    for arg in doc.get("nodeRegistration", {}).get("kubeletExtraArgs", []):
        if set(arg) != {"name", "value"}:
            out.append(f"kubeletExtraArgs {arg}")  # v1beta4: a list of {name, value}
    return out


def test_kubeadm_configs_use_only_v1beta4_fields(dev, ha):
    seen = set()
    for plan in (dev, ha):
        for label, doc in docs_of(plan).items():
            files = files_of(doc)
            for path in (render.KUBEADM_CONFIG_PATH, render.KUBEADM_JOIN_CONFIG_PATH):
                if path not in files:
                    continue
                for d in files[path].split("---\n"):
                    d = yaml.safe_load(d)
                    if d["apiVersion"] != render.KUBEADM_API:
                        continue
                    seen.add(d["kind"])
                    assert _schema_problems(d) == [], (label, path)
                    if d["kind"] == "ClusterConfiguration":
                        assert d["encryptionAlgorithm"] in ENCRYPTION_ALGORITHMS
                        assert d["certificatesDir"] == render.PKI_DIR
    assert seen == set(V1BETA4)


def test_schema_check_catches_a_v1beta3_style_field():
    bad = {"apiVersion": render.KUBEADM_API, "kind": "JoinConfiguration", "discovery": {"file": {"kubeConfigPath": "x"},
                                                                                       "timeout": "5m"},
           "nodeRegistration": {"kubeletExtraArgs": {"node-ip": "10.0.0.1"}}}
    assert _schema_problems(bad)


# --- systemd and the rendered units ---------------------------------------------------------------


def test_bootstrap_is_a_retrying_systemd_unit_and_control_planes_renew_certificates(dev):
    docs = docs_of(dev)
    for label, doc in docs.items():
        files = files_of(doc)
        unit = files[f"/etc/systemd/system/{render.BOOTSTRAP_UNIT}"]
        assert "Restart=on-failure" in unit and "StartLimitIntervalSec=0" in unit
        assert f"ExecStart={render.BOOTSTRAP_SCRIPT_PATH}" in unit
        assert ["systemctl", "enable", "--now", "--no-block", render.BOOTSTRAP_UNIT] in doc["runcmd"]
        # Pods are kept off the metadata service (where this user data stays readable) on every node.
        block = files[f"/etc/systemd/system/{render.METADATA_BLOCK_UNIT}"]
        assert f"ExecStart={render.METADATA_GUARD_PATH} setup" in block and "Before=kubelet.service" in block
        assert files[render.METADATA_GUARD_PATH] == render.metadata_guard_script()  # executed: test_linode_metadata.py
        runcmd = doc["runcmd"]
        assert runcmd.index(["systemctl", "enable", "--now", render.METADATA_BLOCK_UNIT]) < \
            runcmd.index(["systemctl", "enable", "--now", "--no-block", render.BOOTSTRAP_UNIT])
        control_plane = "-cp-" in label
        assert (f"/etc/systemd/system/{render.RENEW_TIMER}" in files) is control_plane
        if control_plane:
            assert "OnCalendar=monthly" in files[f"/etc/systemd/system/{render.RENEW_TIMER}"]
            assert "kubeadm certs renew all" in files[render.RENEW_SCRIPT_PATH]
            assert ["systemctl", "enable", "--now", render.RENEW_TIMER] in doc["runcmd"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_units_pass_systemd_analyze_verify(tmp_path):
    service, timer = render.renew_units()
    snapshot_service, snapshot_timer = render.etcd_snapshot_units()
    upload_service, upload_timer = render.certs_upload_units()
    for name, text in ((render.CERTS_UPLOAD_UNIT, upload_service), (render.CERTS_UPLOAD_TIMER, upload_timer),
                       (render.BOOTSTRAP_UNIT, render.bootstrap_unit()), (render.RENEW_UNIT, service),
                       (render.RENEW_TIMER, timer), (render.METADATA_BLOCK_UNIT, render.metadata_block_unit()),
                       (render.METADATA_ALLOW_UNIT, render.metadata_allow_unit()),
                       (render.ETCD_SNAPSHOT_UNIT, snapshot_service), (render.ETCD_SNAPSHOT_TIMER, snapshot_timer)):
        (tmp_path / name).write_text(text.replace("/usr/local/sbin/", "/bin/true #"))
    run = subprocess.run(["systemd-analyze", "verify", *[str(p) for p in tmp_path.iterdir()]],
                         capture_output=True, text=True)
    errors = [l for l in run.stderr.splitlines() if "Unknown" in l or "Invalid" in l or "bad" in l.lower()]
    assert errors == [], run.stderr
    # The check itself catches a misspelt directive (systemd only warns and ignores it).
    (tmp_path / "typo.service").write_text(render.bootstrap_unit().replace("Restart=", "Restartt="))
    typo = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "typo.service")], capture_output=True, text=True)
    assert "Unknown key 'Restartt'" in typo.stderr


# --- the readiness gate ----------------------------------------------------------------------------


def _node(name, ready=True, gpus=None):
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if gpus is not None:
        status["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name}, "status": status}


def test_readiness_gate_names_missing_unready_and_gpu_less_nodes():
    expected = [{"name": "cp-0", "gpus": 0}, {"name": "sys-0", "gpus": 0}, {"name": "gpu-0", "gpus": 1},
                {"name": "gpu-1", "gpus": 2}]
    nodes = [_node("cp-0"), _node("sys-0", ready=False), _node("gpu-0", gpus=0), _node("gpu-1", gpus=2)]
    found = readiness.problems(nodes, expected)
    assert len(found) == 2
    assert found[0].startswith("sys-0: joined but not Ready")
    assert found[1].startswith("gpu-0: GPU node advertises 0 nvidia.com/gpu, expected 1")
    assert readiness.problems(nodes[:1], expected)[0].startswith("sys-0: has not joined")
    fixed = [_node("cp-0"), _node("sys-0"), _node("gpu-0", gpus=1), _node("gpu-1", gpus=2)]
    assert readiness.problems(fixed, expected) == []


def test_readiness_gate_is_registered_after_the_add_ons_with_every_node(dev):
    gate = next(r for r in dev.by_type("command:local:Command") if r.name.endswith("nodes-ready"))
    expected = {e["name"]: e["gpus"] for e in __import__("json").loads(gate.plain_inputs["environment"]["GATE_EXPECTED"])}
    assert expected == {"gpu-dev-cp-0": 0, "gpu-dev-system-0": 0, "gpu-dev-system-1": 0, "gpu-dev-ada-0": 1}
    assert gate.plain_inputs["create"] == "python3 gpu_platform/components/linode/readiness.py"
    assert Path(__file__).resolve().parent.parent.joinpath("gpu_platform/components/linode/readiness.py").exists()
    deps = set(gate.dependencies)
    releases = {r.urn for r in dev.by_type("kubernetes:helm.sh/v3:Release") if "-addons-" in r.name}
    assert releases and releases <= deps
    assert {r.urn for r in dev.by_type(INSTANCE) if "-cp-" not in r.plain_inputs["label"]} <= deps


def test_readiness_gate_runs_with_the_system_python_alone():
    # The Command runs `python3 gpu_platform/components/linode/readiness.py`: stdlib only, no project imports.
    source = Path(readiness.__file__).read_text()
    imports = set(re.findall(r"^\s*(?:from|import) ([a-z_.]+)", source, re.M))
    assert not {i for i in imports if i.split(".")[0] in ("gpu_platform", "pulumi", "yaml", "cryptography")}


# --- the checkpoint bucket -------------------------------------------------------------------------


def test_bucket_gets_a_random_suffix_within_linode_naming_rules(dev):
    bucket = dev.one("linode:index/objectStorageBucket:ObjectStorageBucket", "checkpoints")
    label = bucket.plain_inputs["label"]
    assert re.fullmatch(r"gpu-dev-ckpt-ml-platform-[a-z0-9]{8}", label)
    # Versioning and lifecycle rules need keys: the bucket's provider makes temporary ones.
    provider = next(r for r in dev.resources if r.type == "pulumi:providers:linode" and r.name.endswith("-objects"))
    assert provider.plain_inputs["objUseTempKeys"] in (True, "true")
    assert bucket.provider and bucket.provider.startswith(provider.urn)


@pytest.mark.parametrize("prefix,owner", [("gpu-dev", "ml-platform"), ("gpu-" + "x" * 40, "y" * 40)])
def test_bucket_label_rules(prefix, owner):
    label = bucket_label(prefix, owner, "abc12345")
    assert 3 <= len(label) <= 63 and re.fullmatch(r"[a-z0-9][a-z0-9-]*[a-z0-9]", label) and label.endswith("-abc12345")


def test_bucket_label_refuses_characters_linode_refuses():
    with pytest.raises(ValueError, match="naming rules"):
        bucket_label("gpu-a", "b_c", "abc12345")


# --- leaving the cluster: drain on pool shrink, etcd member of a replaced control plane -----------


class FakeApi:
    """The few API calls a drain makes, with a PodDisruptionBudget that lets one eviction through per round."""

    def __init__(self, pods, pdb_blocks=0):
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.pdb_blocks = pdb_blocks
        self.calls = []

    def __call__(self, method, path, body):
        self.calls.append((method, path))
        if method == "GET":
            return 200, {"items": list(self.pods.values())}
        if method == "POST" and path.endswith("/eviction"):
            if self.pdb_blocks:
                self.pdb_blocks -= 1
                return 429, {}
            self.pods.pop(body["metadata"]["name"], None)
            return 201, {}
        return 200, {}


def _pod(name, owner=None, mirror=False, phase="Running"):
    meta = {"name": name, "namespace": "training"}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x"}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"metadata": meta, "status": {"phase": phase}}


def test_drain_cordons_evicts_all_but_daemonsets_and_mirror_pods_then_deletes_the_node():
    from gpu_platform.components.linode import nodeops

    api = FakeApi([_pod("job-0", "Job"), _pod("cilium-x", "DaemonSet"), _pod("etcd", mirror=True),
                   _pod("done", "Job", phase="Succeeded")], pdb_blocks=1)
    slept: list[float] = []
    assert nodeops.leave(api, "gpu-dev-ada-1", deadline_s=100, sleep=slept.append) == 0
    assert slept and set(slept) == {10}  # a round every 10 s while a pod is left
    assert api.calls[0] == ("PATCH", "/api/v1/nodes/gpu-dev-ada-1")
    evicted = [p for m, p in api.calls if m == "POST"]
    assert evicted and all(p == "/api/v1/namespaces/training/pods/job-0/eviction" for p in evicted)
    assert len(evicted) == 2  # refused once by the budget, then through
    assert api.calls[-1] == ("DELETE", "/api/v1/nodes/gpu-dev-ada-1")


def test_drain_that_cannot_finish_fails_naming_the_pods_and_keeps_the_node(capsys):
    from gpu_platform.components.linode import nodeops

    api = FakeApi([_pod("job-0", "Job")], pdb_blocks=10**6)
    ticks = iter(range(0, 10**6, 50))
    assert nodeops.drain(api, "n", deadline_s=100, sleep=lambda s: None, clock=lambda: next(ticks)) == ["training/job-0"]
    api = FakeApi([_pod("job-0", "Job")], pdb_blocks=10**6)
    assert nodeops.leave(api, "n", deadline_s=0) == 1
    assert "training/job-0" in capsys.readouterr().err
    assert ("DELETE", "/api/v1/nodes/n") not in api.calls


def test_unreachable_api_does_not_block_a_destroy(capsys):
    from gpu_platform.components.linode import nodeops

    env = {"GATE_SERVER": "https://127.0.0.1:9", "GATE_CA_PEM": "", "GATE_CLIENT_CERT_PEM": "", "GATE_CLIENT_KEY_PEM": ""}
    assert nodeops.main(["leave", "n"], env) == 0
    assert "not reachable" in capsys.readouterr().err


def test_every_worker_has_a_leave_hook_and_control_planes_outlive_it(dev):
    hooks = {r.name: r for r in dev.by_type("command:local:Command") if r.name.endswith("-leave")}
    workers = [r for r in dev.by_type(INSTANCE) if "-cp-" not in r.plain_inputs["label"]]
    cps = {r.urn for r in dev.by_type(INSTANCE) if "-cp-" in r.plain_inputs["label"]}
    assert len(hooks) == len(workers) == 3
    for w in workers:
        hook = hooks[f"{w.name}-leave"]
        assert hook.plain_inputs["delete"] == f"python3 gpu_platform/components/linode/nodeops.py leave {w.plain_inputs['label']}"
        assert "create" not in hook.plain_inputs
        assert {w.urn} | cps <= set(hook.dependencies)
        assert hook.inputs["environment"]["GATE_CLIENT_KEY_PEM"] == "[secret]"


def test_a_joining_control_plane_first_removes_the_etcd_member_of_the_node_it_replaces(ha):
    script = files_of(docs_of(ha)["gpu-staging-cp-1"])[render.BOOTSTRAP_SCRIPT_PATH]
    assert "peers=(10.0.0.10 10.0.0.12)" in script
    body = script[script.index("peers=(10.0.0.10"):]
    assert body.index("remove_stale_etcd_member") < body.index("kubeadm join")
    assert """-v name="gpu-staging-cp-1" '$3 == name""" in script and 'member remove "$id"' in script
    # The etcd image of the release the cluster runs now (what its peers report), not of the user data's day.
    assert 'kubeadm config images list --kubernetes-version "$version"' in script


# --- the CCM, rendered with the pinned chart --------------------------------------------------------

def test_ccm_chart_gets_the_vpc_and_subnet_the_nodes_use(dev):
    from helm_python import Chart

    from gpu_platform.data import linode_versions as versions
    from tests.fit_support import chart_archive

    archive = chart_archive(versions.LINODE_CCM_CHART.chart, versions.LINODE_CCM_CHART.version)

    release = next(r for r in dev.by_type("kubernetes:helm.sh/v3:Release") if r.plain_inputs["chart"] == "ccm-linode")
    values = release.plain_inputs["values"]
    assert values["vpcNames"] == dev.one("linode:index/vpc:Vpc").plain_inputs["label"]
    assert values["subnetNames"] == dev.one("linode:index/vpcSubnet:VpcSubnet").plain_inputs["label"]
    assert "nodeBalancerBackendIPv4Subnet" not in values  # private-IP backends: no VPC NodeBalancer needed
    chart = Chart.load(str(archive))
    rendered = "\n".join(chart.render(values, name="ccm", namespace="kube-system").values())
    assert f"--vpc-names={values['vpcNames']}" in rendered and f"--subnet-names={values['subnetNames']}" in rendered
    # Every node has a private IPv4: the CCM puts LoadBalancer backends there (node.k8s.linode.com/private-ip).
    assert all(r.plain_inputs["privateIp"] is True for r in dev.by_type(INSTANCE))
    fw = next(r.plain_inputs for r in dev.by_type("linode:index/firewall:Firewall") if r.plain_inputs["label"].endswith("-nodes"))
    assert {"label": "nodebalancer-nodeports", "action": "ACCEPT", "protocol": "TCP", "ports": "30000-32767",
            "ipv4s": ["192.168.255.0/24"]} in fw["inbounds"]


def test_a_three_control_plane_stack_not_in_the_repository_passes_preflight(tmp_path):
    from gpu_platform.preflight.__main__ import main

    stack = yaml.safe_load((Path(__file__).resolve().parents[1] / "stacks" / "Pulumi.linode-dev.yaml").read_text())
    stack["config"]["gpu-platform:environment"] = "ha3"
    stack["config"]["gpu-platform:linode"]["controlPlane"]["count"] = 3
    stack["config"]["gpu-platform:linode"]["reservedApiIp"] = True  # ignored with a NodeBalancer
    # Autoscaled pools need a single control plane (linode/config.py): the GPU pool at a fixed size.
    stack["config"]["gpu-platform:gpuPools"][0]["minNodes"] = 1
    path = tmp_path / "Pulumi.linode-ha3.yaml"
    path.write_text(yaml.safe_dump(stack))
    code = main(["--stack-file", str(path), "--out", str(tmp_path / "build"), "--no-policies", "--quiet"])
    assert code == 0
    plan = __import__("json").loads((tmp_path / "build" / "linode-ha3" / "plan.json").read_text())
    types = [r["type"] for r in plan["resources"]]
    assert types.count(INSTANCE) == 6 and "linode:index/nodeBalancer:NodeBalancer" in types  # 3 + 2 system + 1 GPU
    assert "linode:index/reservedIp:ReservedIp" not in types
    token = [r for r in plan["resources"] if r["type"] == "kubernetes:core/v1:Secret"
             and r["inputs"].get("type") == "bootstrap.kubernetes.io/token"]
    assert len(token) == 6 and all(t["inputs"]["stringData"] == "[secret]" for t in token)  # one per node


def test_reserved_ip_is_optional_and_the_api_is_verified_by_name(dev):
    # Default: no Reserved IP (not every account has them); admins reach cp-0's own address.
    assert not dev.by_type("linode:index/reservedIp:ReservedIp")
    kubeconfig = yaml.safe_load(dev.outputs["kubeconfig"]["value"])
    cluster = kubeconfig["clusters"][0]["cluster"]
    cp0 = next(r for r in dev.by_type(INSTANCE) if r.plain_inputs["label"] == "gpu-dev-cp-0")
    assert cluster["server"] == f"https://{cp0.outputs['ipAddress']}:6443"
    assert cluster["tls-server-name"] == "kubernetes"  # a SAN kubeadm always puts on the API certificate
    cfg = stack_config("linode-dev")
    cfg["gpu-platform:linode"]["reservedApiIp"] = True
    plan = plan_config(cfg)
    reserved = plan.one("linode:index/reservedIp:ReservedIp")
    cp0 = next(r for r in plan.by_type(INSTANCE) if r.plain_inputs["label"] == "gpu-dev-cp-0")
    assert cp0.plain_inputs["ipv4s"] == [reserved.outputs["address"]]
    init = yaml.safe_load(files_of(docs_of(plan)["gpu-dev-cp-0"])[render.KUBEADM_CONFIG_PATH].split("---\n")[1])
    assert reserved.outputs["address"] in init["apiServer"]["certSANs"]
