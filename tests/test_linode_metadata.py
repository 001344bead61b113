"""The Linode metadata service (where every node's user data stays readable) against the host rules a node
boots with: closed to pods, hostNetwork ones included, over IPv4 and IPv6; open to the one pod that needs it,
the CSI driver's node plugin, found through the pinned chart's DaemonSet and the driver's own lookup order.

The node's units are executed as systemd would run them (their ExecStartPre/ExecStart lines, from the
node's own user data) with recorded stand-ins for iptables, ip6tables, their -restore tools, crictl and
systemctl; the resulting rule set is then evaluated by a small model of the filter table's OUTPUT path
(the matches the rules use, nothing else: an unknown one fails the test)."""

from __future__ import annotations

import ipaddress
import shlex
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from gpu_platform.components.linode import render
from gpu_platform.components.linode.render import decode_user_data
from tests.conftest import plan_stack
from tests.fit_support import rendered

INSTANCE = "linode:index/instance:Instance"
METADATA_V4 = "169.254.169.254"
METADATA_V6 = "fd00:a9fe:a9fe::1"
CSI_POD_UID = "5f1c2a9e-0b7d-4c61-9a3e-2f6b8d4e7a10"
EXPORTER_POD_UID = "0d3e1f52-77aa-4b0e-8c4d-1a2b3c4d5e6f"

# --- stand-ins --------------------------------------------------------------------------------------------

# iptables/ip6tables and their -restore: the filter table as ordered lines "<CHAIN> <rule spec>" in
# $RULES_DIR/<tool>, user chains in $RULES_DIR/<tool>.chains.
TABLES = r'''#!/usr/bin/env python3
import os, sys
from pathlib import Path
tool = Path(sys.argv[0]).name
restore = tool.endswith("-restore")
family = tool.removesuffix("-restore")
base = Path(os.environ["RULES_DIR"])
rules_file, chains_file = base / family, base / f"{family}.chains"
rules = rules_file.read_text().splitlines() if rules_file.exists() else []
chains = set(chains_file.read_text().split()) if chains_file.exists() else set()
with open(base / "calls.log", "a") as log:
    log.write(" ".join(sys.argv) + "\n")
args = [a for a in sys.argv[1:] if a not in ("-w", "--noflush")]
builtin = {"INPUT", "OUTPUT", "FORWARD"}

def known(chain):
    return chain in builtin or chain in chains

def save():
    rules_file.write_text("".join(r + "\n" for r in rules))
    chains_file.write_text(" ".join(sorted(chains)))

if restore:
    if "--noflush" not in sys.argv:
        sys.exit("stand-in: only --noflush restores are modelled")
    new, declared = list(rules), set(chains)
    for line in sys.stdin.read().splitlines():
        if line in ("*filter", "COMMIT") or not line:
            continue
        if line.startswith(":"):
            chain = line[1:].split()[0]
            declared.add(chain)
            if chain not in builtin:  # a user chain declared in a --noflush restore is flushed
                new = [r for r in new if r.split(" ", 1)[0] != chain]
        elif line.startswith("-A "):
            chain, spec = line[3:].split(" ", 1)
            if chain not in builtin and chain not in declared:
                sys.exit(f"{tool}: chain {chain} does not exist")
            new.append(f"{chain} {spec}")
        else:
            sys.exit(f"stand-in: unmodelled restore line {line!r}")
    rules, chains = new, declared - builtin
    save()
    sys.exit(0)

op, chain, spec = args[0], args[1], " ".join(args[2:])
if op == "-N":
    if chain in chains:
        sys.exit(f"{tool}: Chain already exists.")
    chains.add(chain)
elif not known(chain):
    sys.exit(f"{tool}: No chain/target/match by that name.")
elif op == "-C":
    sys.exit(0 if f"{chain} {spec}" in rules else 1)
elif op == "-A":
    rules.append(f"{chain} {spec}")
elif op == "-I":
    first = next((i for i, r in enumerate(rules) if r.split(" ", 1)[0] == chain), len(rules))
    rules.insert(first, f"{chain} {spec}")
else:
    sys.exit(f"stand-in: unmodelled operation {op}")
save()
'''

# crictl: `pods -o json` answers with the pods of $RUN_DIR/pods.json whose namespace and labels match.
CRICTL = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
if args[:1] == ["--runtime-endpoint"]:
    args = args[2:]
if args[:1] != ["pods"]:
    sys.exit(0)
namespace, labels = None, {}
for i, a in enumerate(args):
    if a == "--namespace":
        namespace = args[i + 1]
    elif a == "--label":
        k, v = args[i + 1].split("=", 1)
        labels[k] = v
pods = json.load(open(os.path.join(os.environ["RUN_DIR"], "pods.json")))
items = [p for p in pods if (namespace is None or p["metadata"]["namespace"] == namespace)
         and all(p["labels"].get(k) == v for k, v in labels.items())]
print(json.dumps({"items": items}))
'''

SYSTEMCTL = "#!/bin/sh\necho \"systemctl $*\" >> \"$RULES_DIR/calls.log\"\n"


# --- a model of the filter table's OUTPUT path ----------------------------------------------------------


def _cgroup_matches(rule_path: str, socket_cgroup: str) -> bool:
    """`-m cgroup --path P` (cgroup v2) matches a socket in P or below it (kernel net/netfilter/xt_cgroup.c:
    cgroup_mt_v1/v2 -> cgroup_is_descendant)."""
    p = rule_path.strip("/")
    return socket_cgroup == p or socket_cgroup.startswith(p + "/")


def verdict(rules: list[str], destination: str, socket_cgroup: str) -> str:
    """ACCEPT or DROP for a locally generated packet to `destination` from a socket in `socket_cgroup`
    (relative to the cgroup root), through OUTPUT (policy ACCEPT) and the chains it jumps to."""
    by_chain: dict[str, list[list[str]]] = {}
    for line in rules:
        chain, *spec = shlex.split(line)
        by_chain.setdefault(chain, []).append(spec)
    address = ipaddress.ip_address(destination)

    def walk(chain: str, depth: int = 0) -> str | None:
        assert depth < 8, "chain loop"
        for spec in by_chain.get(chain, []):
            i, matched, target = 0, True, None
            while i < len(spec):
                opt = spec[i]
                if opt == "-d":
                    net = ipaddress.ip_network(spec[i + 1], strict=False)
                    matched &= net.version == address.version and address in net
                    i += 2
                elif opt == "-m" and spec[i + 1] == "cgroup" and spec[i + 2] == "--path":
                    matched &= _cgroup_matches(spec[i + 3], socket_cgroup)
                    i += 4
                elif opt == "-j":
                    target = spec[i + 1]
                    i += 2
                else:
                    raise AssertionError(f"the model does not know {opt!r} in {chain} {' '.join(spec)}")
            if not matched or target is None:
                continue
            if target in ("ACCEPT", "DROP", "REJECT"):
                return "DROP" if target == "REJECT" else target
            if target == "RETURN":
                return None
            result = walk(target, depth + 1)
            if result is not None:
                return result
        return None

    return walk("OUTPUT") or "ACCEPT"


# --- the pinned driver's lookup order -----------------------------------------------------------------


def csi_node_identity(metadata_reachable: bool, env: set[str], product_serial_readable: bool) -> str | None:
    """How linode/linode-blockstorage-csi-driver v1.0.6 finds the instance it runs on (main.go handle ->
    internal/driver/metadata.go GetNodeMetadata), for both roles: 1. the metadata service (go-metadata
    NewClient + GetInstance at 169.254.169.254); 2. /sys/devices/virtual/dmi/id/product_serial, then the
    Linode API's GetInstance (needs LINODE_TOKEN); 3. the Node's providerID read from the Kubernetes API
    (needs NODE_NAME), then GetInstance (LINODE_TOKEN again). None of them: `failed to get node metadata`
    and the process exits 1."""
    if metadata_reachable:
        return "metadata service"
    if product_serial_readable and "LINODE_TOKEN" in env:
        return "product_serial and the Linode API"
    if "NODE_NAME" in env and "LINODE_TOKEN" in env:
        return "the Node's providerID and the Linode API"
    return None


# --- running a node's units --------------------------------------------------------------------------


def _node_doc(stack: str, role: str) -> dict:
    plan = plan_stack(stack)
    for r in plan.by_type(INSTANCE):
        if role in r.plain_inputs["label"]:
            return yaml.safe_load(decode_user_data(r.plain_inputs["metadatas"][0]["userData"]))
    raise AssertionError(f"no {role} instance in {stack}")


class Node:
    """A node's write_files under a scratch root; its enabled units run with the stand-ins on PATH."""

    def __init__(self, tmp: Path, doc: dict):
        self.tmp = tmp
        self.root = tmp / "root"
        self.rules_dir = tmp / "rules"
        self.run_dir = tmp / "run"
        self.cgroups = tmp / "cgroup"
        self.bin = tmp / "bin"
        for d in (self.root, self.rules_dir, self.run_dir, self.cgroups / render.POD_CGROUP, self.bin):
            d.mkdir(parents=True, exist_ok=True)
        for f in doc["write_files"]:
            path = self.root / f["path"].lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f["content"])
            path.chmod(int(f["permissions"], 8))
        for name in ("iptables", "ip6tables", "iptables-restore", "ip6tables-restore"):
            (self.bin / name).write_text(TABLES)
        (self.bin / "crictl").write_text(CRICTL)
        (self.bin / "systemctl").write_text(SYSTEMCTL)
        for p in self.bin.iterdir():
            p.chmod(0o755)
        self.pods: list[dict] = []
        self.write_pods()
        self.units = [c[-1] for c in doc["runcmd"] if c[:3] == ["systemctl", "enable", "--now"]]
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "RULES_DIR": str(self.rules_dir), "RUN_DIR": str(self.run_dir),
                    "CGROUP_ROOT": str(self.cgroups), "LANG": "C"}

    def write_pods(self) -> None:
        import json

        (self.run_dir / "pods.json").write_text(json.dumps(self.pods))

    def add_pod(self, namespace: str, name: str, uid: str, labels: dict[str, str], qos: str) -> str:
        """The sandbox as containerd reports it, and its cgroup as the kubelet's systemd driver makes it."""
        self.pods.append({"id": uid.replace("-", "")[:12], "metadata": {"name": name, "uid": uid, "namespace": namespace},
                          "state": "SANDBOX_READY", "labels": {**labels, "io.kubernetes.pod.namespace": namespace}})
        self.write_pods()
        parent = render.POD_CGROUP if qos == "guaranteed" else f"{render.POD_CGROUP}/kubepods-{qos}.slice"
        prefix = "kubepods" if qos == "guaranteed" else f"kubepods-{qos}"
        slice_ = f"{parent}/{prefix}-pod{uid.replace('-', '_')}.slice"
        (self.cgroups / slice_).mkdir(parents=True)
        return f"{slice_}/cri-containerd-{'0' * 64}.scope"

    def unit(self, name: str) -> str:
        return (self.root / "etc/systemd/system" / name).read_text()

    def _command(self, line: str) -> list[str]:
        argv = shlex.split(line)
        # Scripts the user data wrote live under the scratch root.
        if argv[0].startswith("/usr/local/"):
            argv[0] = str(self.root / argv[0].lstrip("/"))
        if argv[0] == "/bin/systemctl":
            argv[0] = str(self.bin / "systemctl")
        return argv

    def start_units(self, settle_s: float = 8.0) -> None:
        """Every unit runcmd enables, as systemd runs it: oneshot ones to completion, long-running ones
        (Type=simple) in the background for `settle_s` seconds (they are stopped after)."""
        running = []
        for name in self.units:
            if not name.endswith(".service") or name == render.BOOTSTRAP_UNIT:
                continue
            lines = self.unit(name).splitlines()
            simple = "Type=simple" in lines
            for line in lines:
                for key in ("ExecStartPre=", "ExecStart="):
                    if line.startswith(key):
                        argv = self._command(line.removeprefix(key))
                        if simple:
                            running.append(subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                        else:
                            proc = subprocess.run(argv, env=self.env, capture_output=True, text=True)
                            assert proc.returncode == 0, (name, line, proc.stdout, proc.stderr)
        if running:  # until the rules stop changing (the first pass is immediate), at most settle_s
            deadline, last, stable = time.monotonic() + settle_s, None, 0
            while time.monotonic() < deadline and stable < 3:
                time.sleep(0.5)
                now = (self.rules("iptables"), self.rules("ip6tables"))
                stable = stable + 1 if now == last else 0
                last = now
        for proc in running:
            proc.terminate()
            proc.wait(timeout=10)

    def rules(self, tool: str) -> list[str]:
        path = self.rules_dir / tool
        return path.read_text().splitlines() if path.exists() else []


def _skip_without_python_tools() -> None:
    if shutil.which("python3") is None:
        pytest.skip("python3 not on PATH (the stand-ins are Python scripts)")


def _csi_node_daemonset() -> dict:
    csi = next(r for r in rendered("linode-dev") if r.chart == "linode-blockstorage-csi-driver")
    return next(o for o in csi.objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "csi-linode-node")


def _qos(pod_spec: dict) -> str:
    containers = pod_spec["containers"]
    if all(not (c.get("resources") or {}) for c in containers):
        return "besteffort"
    return "burstable"


@pytest.fixture(scope="module")
def csi_node() -> dict:
    return _csi_node_daemonset()


# --- the tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["system-0", "cp-0"])
def test_the_csi_node_plugin_finds_its_node_under_the_host_rules(tmp_path, csi_node, role):
    """The pinned chart's node plugin runs with hostNetwork, no LINODE_TOKEN and no NODE_NAME: the metadata
    service is its only way to learn its instance (csi_node_identity). Under the rules its node boots with
    it must get there, or it exits and linodebs.csi.linode.com never registers: no volume attaches."""
    _skip_without_python_tools()
    spec = csi_node["spec"]["template"]["spec"]
    labels = csi_node["spec"]["template"]["metadata"]["labels"]
    assert spec["hostNetwork"] is True and csi_node["metadata"]["namespace"] == "kube-system"
    plugin = next(c for c in spec["containers"] if c["name"] == "csi-linode-plugin")
    env = {e["name"] for e in plugin.get("env", [])}
    assert csi_node_identity(False, env, product_serial_readable=plugin["securityContext"].get("privileged", False)) is None, (
        "the node plugin has another way to its node now: revisit the metadata allowance")

    node = Node(tmp_path, _node_doc("linode-dev", role))
    cgroup = node.add_pod("kube-system", "csi-linode-node-x7k2p", CSI_POD_UID, labels, _qos(spec))
    node.start_units()
    # go-metadata v0.2.2 (the driver's client) asks http://169.254.169.254 only (client.go APIHost).
    reached = verdict(node.rules("iptables"), METADATA_V4, cgroup) == "ACCEPT"
    assert csi_node_identity(reached, env, product_serial_readable=True) == "metadata service", (
        f"{role}: the CSI node plugin cannot reach {METADATA_V4} (rules: {node.rules('iptables')}), so it never "
        "finds its node and exits")


@pytest.mark.parametrize("address", [METADATA_V4, METADATA_V6])
def test_other_hostnetwork_pods_are_denied_the_metadata_service_and_host_services_are_not(tmp_path, csi_node, address):
    """node-exporter (hostNetwork) and a pod that copies the CSI plugin's label outside kube-system are
    dropped, over IPv4 and IPv6 (cloud-init's Akamai datasource reads user data from both addresses);
    the node's own services (cloud-init) are not."""
    _skip_without_python_tools()
    labels = csi_node["spec"]["template"]["metadata"]["labels"]
    node = Node(tmp_path, _node_doc("linode-dev", "system-0"))
    node.add_pod("kube-system", "csi-linode-node-x7k2p", CSI_POD_UID, labels, "besteffort")
    exporter = node.add_pod("monitoring", "kube-prometheus-stack-prometheus-node-exporter-abcde", EXPORTER_POD_UID,
                            {"app.kubernetes.io/name": "prometheus-node-exporter"}, "burstable")
    impostor = node.add_pod("training", "csi-linode-node-fake", "9a9a9a9a-1111-2222-3333-444455556666", labels, "burstable")
    node.start_units()
    tool = "ip6tables" if ":" in address else "iptables"
    rules = node.rules(tool)
    assert verdict(rules, address, exporter) == "DROP", rules
    assert verdict(rules, address, impostor) == "DROP", rules
    assert verdict(rules, address, "system.slice/cloud-init.service") == "ACCEPT", rules
    # Other destinations are untouched.
    other = "10.0.0.10" if tool == "iptables" else "2001:db8::1"
    assert verdict(rules, other, exporter) == "ACCEPT"


def test_a_csi_node_pod_that_goes_loses_its_allowance(tmp_path, csi_node):
    """The allowance follows the running pods: once the plugin's pod is gone (a rollout, a node drain) its
    cgroup's RETURN rule goes, and a new pod gets its own."""
    _skip_without_python_tools()
    labels = csi_node["spec"]["template"]["metadata"]["labels"]
    node = Node(tmp_path, _node_doc("linode-dev", "system-0"))
    first = node.add_pod("kube-system", "csi-linode-node-aaaaa", CSI_POD_UID, labels, "besteffort")
    node.start_units()
    assert verdict(node.rules("iptables"), METADATA_V4, first) == "ACCEPT"
    node.pods.clear()
    node.write_pods()
    second = node.add_pod("kube-system", "csi-linode-node-bbbbb", "77777777-8888-4999-aaaa-bbbbccccdddd", labels, "besteffort")
    guard = node.root / render.METADATA_GUARD_PATH.lstrip("/")
    proc = subprocess.run([str(guard), "allow"], env=node.env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rules = node.rules("iptables")
    assert verdict(rules, METADATA_V4, first) == "DROP" and verdict(rules, METADATA_V4, second) == "ACCEPT", rules


def test_the_setup_is_idempotent_across_reboots_and_reruns(tmp_path):
    _skip_without_python_tools()
    node = Node(tmp_path, _node_doc("linode-dev", "system-0"))
    guard = node.root / render.METADATA_GUARD_PATH.lstrip("/")
    for _ in range(2):
        proc = subprocess.run([str(guard), "setup"], env=node.env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    for tool, address in (("iptables", "169.254.169.254/32"), ("ip6tables", "fd00:a9fe:a9fe::1/128")):
        assert sorted(node.rules(tool)) == [
            f"FORWARD -d {address} -j DROP",
            f"{render.METADATA_CHAIN} -j DROP",
            f"OUTPUT -d {address} -m cgroup --path kubepods.slice -j {render.METADATA_CHAIN}",
        ], tool


def test_the_guard_script_passes_shellcheck(tmp_path):
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    path = tmp_path / "guard.sh"
    path.write_text(render.metadata_guard_script())
    proc = subprocess.run(["shellcheck", "-s", "bash", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_the_model_refuses_what_it_does_not_know():
    with pytest.raises(AssertionError, match="does not know"):
        verdict(["OUTPUT -d 169.254.169.254/32 -m owner --uid-owner 0 -j DROP"], METADATA_V4, "kubepods.slice/x")
    # And reads today's single DROP line as dropping every pod, the CSI node plugin included.
    assert verdict(["OUTPUT -d 169.254.169.254/32 -m cgroup --path kubepods.slice -j DROP"], METADATA_V4,
                   "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podx.slice/cri-containerd-1.scope") == "DROP"


def test_the_csi_controller_finds_its_node_without_the_metadata_service():
    """The controller is an ordinary pod, denied the metadata service by the Cilium clusterwide policy; the
    chart gives it LINODE_TOKEN and NODE_NAME, so the driver's third step (the Node's providerID, then the
    Linode API) finds its instance even where /sys's product_serial is not readable."""
    csi = next(r for r in rendered("linode-dev") if r.chart == "linode-blockstorage-csi-driver")
    controller = next(o for o in csi.objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "csi-linode-controller")
    spec = controller["spec"]["template"]["spec"]
    assert not spec.get("hostNetwork")
    plugin = next(c for c in spec["containers"] if c["name"] == "csi-linode-plugin")
    env = {e["name"] for e in plugin["env"]}
    assert csi_node_identity(False, env, product_serial_readable=False) == "the Node's providerID and the Linode API"
