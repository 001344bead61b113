"""Upgrade a Linode kubeadm cluster by one Kubernetes minor, the way kubeadm documents it
("Upgrading kubeadm clusters", kubernetes.io/docs/tasks/administer-cluster/kubeadm/kubeadm-upgrade/):
the first control plane runs `kubeadm upgrade apply`, the others `kubeadm upgrade node`, then every
node in turn is drained, gets the new kubelet, and is uncordoned; workers one at a time.

    python -m gpu_platform.components.linode.upgrade --stack linode-dev --to 1.36            # print the plan
    python -m gpu_platform.components.linode.upgrade --stack linode-dev --to 1.36 --run      # run it (SSH + kubectl)

Running needs SSH to the nodes (linode.sshAuthorizedKeys + adminCidrs) and a kubeconfig
(`pulumi stack output kubeconfig --show-secrets > kubeconfig`). The last step records the new minor in
the stack (`pulumi config set`), so nodes created afterwards install the same version. `kubeadm upgrade
apply` also renews the control plane's certificates.

The plan is a pure function of the node names and the versions (tested); nothing here imports Pulumi.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

from gpu_platform.components.linode import versions

LOCAL = "local"
DRAIN = "kubectl drain {node} --ignore-daemonsets --delete-emptydir-data --timeout=30m"


class UpgradeError(ValueError):
    """A version change kubeadm refuses (a skipped minor, a downgrade) or one without a pinned release."""


@dataclass(frozen=True)
class Step:
    where: str  # LOCAL (kubectl / pulumi on the operator's machine) or a node name (run over SSH as root)
    command: str
    why: str


def _minor(v: str) -> tuple[int, int]:
    try:
        major, minor = v.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise UpgradeError(f"{v!r} is not a Kubernetes minor such as 1.35") from None


def check_upgrade(current: str, target: str, allowed: Optional[Sequence[str]] = None) -> None:
    """kubeadm upgrades one minor at a time and never downgrades (version skew policy: kubelets may be
    older than the API server, never newer). `allowed`: the minors the version calendar allows today."""
    cur, tgt = _minor(current), _minor(target)
    if tgt == cur:
        raise UpgradeError(f"kubernetesVersion is already {current}")
    if tgt < cur:
        raise UpgradeError(f"{target} is older than the running {current}: kubeadm cannot downgrade")
    if tgt[0] != cur[0] or tgt[1] != cur[1] + 1:
        raise UpgradeError(f"{current} -> {target} skips a minor: upgrade to {cur[0]}.{cur[1] + 1} first "
                           "(kubeadm upgrades one minor at a time)")
    if target not in versions.KUBERNETES_PATCH:
        raise UpgradeError(f"no pinned kubeadm release for {target} in gpu_platform/components/linode/versions.py "
                           f"(pinned: {', '.join(versions.KUBERNETES_PATCH)})")
    if allowed is not None and target not in allowed:
        raise UpgradeError(f"{target} is not allowed on Linode today by the version calendar "
                           f"(gpu_platform/costs/catalog/kubernetes-versions.yaml): {', '.join(allowed)}")


def _repo(minor: str) -> str:
    # pkgs.k8s.io has one repository per minor: point apt at the target's.
    return (f"sed -i 's#/v[0-9]*\\.[0-9]*/deb/#/v{minor}/deb/#' /etc/apt/sources.list.d/kubernetes.list"
            f" && curl -fsSL https://pkgs.k8s.io/core:/stable:/v{minor}/deb/Release.key"
            " | gpg --dearmor --batch --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg && apt-get update -q")


def _install(packages: Sequence[str], minor: str) -> str:
    pkg = versions.kubernetes_package_version(minor)
    pinned = " ".join(f"{p}={pkg}" for p in packages)
    names = " ".join(packages)
    return (f"apt-mark unhold {names} && apt-get install -y -q {pinned} && apt-mark hold {names}")


def upgrade_plan(stack: str, current: str, target: str, control_planes: Sequence[str], workers: Sequence[str],
                 allowed: Optional[Sequence[str]] = None) -> list[Step]:
    """Every command, in order. control_planes[0] is the one that runs `kubeadm upgrade apply`."""
    check_upgrade(current, target, allowed)
    if not control_planes:
        raise UpgradeError("no control plane to upgrade")
    patch = "v" + versions.KUBERNETES_PATCH[target]
    steps = [Step(LOCAL, "kubectl get nodes", f"every node Ready before upgrading {current} -> {target}")]
    first, others = control_planes[0], list(control_planes[1:])
    steps += [
        Step(first, _repo(target), f"apt source for Kubernetes {target}"),
        Step(first, _install(["kubeadm"], target), "the new kubeadm first"),
        Step(first, f"kubeadm upgrade plan {patch}", "kubeadm checks the cluster can move to the new release"),
        Step(first, f"kubeadm upgrade apply -y {patch}", "control-plane components, etcd, CoreDNS, kube-proxy; "
             "renews the control plane's certificates"),
    ]
    for cp in others:
        steps += [Step(cp, _repo(target), f"apt source for Kubernetes {target}"),
                  Step(cp, _install(["kubeadm"], target), "the new kubeadm"),
                  Step(cp, "kubeadm upgrade node", "this control plane's components")]
    for node in list(control_planes) + list(workers):
        worker = node not in control_planes
        if worker:
            steps += [Step(node, _repo(target), f"apt source for Kubernetes {target}"),
                      Step(node, _install(["kubeadm"], target), "the new kubeadm"),
                      Step(node, "kubeadm upgrade node", "the node's kubelet configuration")]
        steps += [
            Step(LOCAL, DRAIN.format(node=node), "move its pods away (training jobs resume from checkpoints)"),
            Step(node, _install(["kubelet", "kubectl"], target), "the new kubelet"),
            Step(node, "systemctl daemon-reload && systemctl restart kubelet", "start the new kubelet"),
            Step(LOCAL, f"kubectl uncordon {node}", "schedule on it again"),
            Step(LOCAL, f"kubectl wait --for=condition=Ready node/{node} --timeout=10m",
                 "one node at a time: the next waits until this one is back"),
        ]
    steps += [Step(LOCAL, f"pulumi config set --path gpu-platform:linode.controlPlaneVersion {target} -s {stack}",
                   "record what the control plane now runs"),
              Step(LOCAL, f"pulumi config set gpu-platform:kubernetesVersion {target} -s {stack}",
                   "record the new minor: nodes created from now on install it")]
    return steps


def render(steps: Sequence[Step]) -> str:
    return "\n".join(f"[{s.where}] {s.command}\n    # {s.why}" for s in steps)


def _nodes_from_cluster() -> tuple[list[str], list[str]]:
    def names(selector: str) -> list[str]:
        out = subprocess.run(["kubectl", "get", "nodes", "-l", selector, "-o", "name"],
                             check=True, capture_output=True, text=True).stdout
        return sorted(line.removeprefix("node/") for line in out.split())
    return names("node-role.kubernetes.io/control-plane"), names("!node-role.kubernetes.io/control-plane")


def stack_settings(stack: str) -> dict:
    """The `gpu-platform:` keys of the working directory's project's Pulumi.<stack>.yaml, bare (what
    gpu_platform.config.stack parses)."""
    import yaml

    from gpu_platform.project import find_project

    path = find_project().stacks_dir / f"Pulumi.{stack}.yaml"
    config = (yaml.safe_load(path.read_text()) or {}).get("config", {})
    return {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith("gpu-platform:")}


def _address(node: str) -> str:
    return subprocess.run(["kubectl", "get", "node", node, "-o",
                           "jsonpath={.status.addresses[?(@.type==\"ExternalIP\")].address}"],
                          check=True, capture_output=True, text=True).stdout.split()[0]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_platform.components.linode.upgrade", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml in the project's stackConfigDir; run from the project)")
    parser.add_argument("--to", required=True, dest="target", help="target minor, e.g. 1.36")
    parser.add_argument("--run", action="store_true", help="run the plan (SSH as root + kubectl); default: print it")
    args = parser.parse_args(argv)

    from gpu_platform.config.versions_calendar import allowed_minors

    try:
        raw = stack_settings(args.stack)
        current = str(raw.get("kubernetesVersion"))
        if args.run:
            cps, workers = _nodes_from_cluster()
        else:
            # Print with the node names the stack creates.
            from gpu_platform.config.stack import parse_config
            from gpu_platform.config.names import derived_names

            cfg = parse_config(raw, args.stack)
            names = sorted({n.value for n in derived_names(cfg) if n.resource == "a Linode instance"})
            cps = [n for n in names if "-cp-" in n]
            workers = [n for n in names if n not in cps]
        steps = upgrade_plan(args.stack, current, args.target, cps, workers, allowed_minors("linode"))
    except UpgradeError as exc:
        print(f"kubernetesVersion: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # no project or stack file here (gpu_platform.project), or an unreadable one
        print(f"upgrade: {exc}", file=sys.stderr)
        return 2
    print(render(steps))
    if not args.run:
        return 0
    for step in steps:
        cmd = ["bash", "-c", step.command] if step.where == LOCAL else \
            ["ssh", "-o", "BatchMode=yes", f"root@{_address(step.where)}", step.command]
        print(f"\n$ [{step.where}] {step.command}", flush=True)
        if subprocess.run(cmd).returncode != 0:
            print(f"stopped: {shlex.join(cmd)} failed; fix it and run again (every step is safe to repeat)",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
