"""A controller process on the host that sees its pod's volumes where the pod's container sees them.

Some controllers read fixed paths that only a pod has: the Kubeflow Trainer's certificate rotator and webhook server
read `/tmp/k8s-webhook-server/serving-certs` (github.com/kubeflow/trainer/v2 v2.3.0 pkg/util/cert/cert.go `certDir`, a
package variable no Configuration field sets), JobSet's rotator waits for the Secret's files at the same path
(sigs.k8s.io/jobset v0.12.0 pkg/util/cert/cert.go, a constant, whatever the Configuration's webhook.certDir), and
both take their namespace from `/var/run/secrets/kubernetes.io/serviceaccount/namespace`, falling back to a default
of their own (JobSet's is `jobset-system`, not the `kubeflow-system` the Trainer chart installs it in), as
controller-runtime's leader election does. Two such processes on one host would share those paths (and the
rehearsal's own installer writes its certificate to the first: pki.WEBHOOK_CERT_DIR).

`in_pod_mounts(argv, mounts)` runs argv in a user namespace and a mount namespace of its own (util-linux `unshare
--user --map-root-user --mount`, no privilege needed where the kernel allows unprivileged user namespaces), with each
folder of `mounts` bind-mounted at its path in the pod, as the kubelet mounts the pod's volumes: only that process
sees them (a missing mount point is made on the host as an empty folder, nothing is written in it). A mount under /run (or /var/run, its link) gets a tmpfs on /run first,
private to the process, since a path there cannot be created on the host without privilege. The process's pid is
unshare's (it execs, with no fork), so the caller stops it as any other.
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
from pathlib import Path

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class PodMountsUnavailable(RuntimeError):
    """The host cannot give a process mounts of its own (no unshare, or unprivileged user namespaces refused)."""


def _target(path: str) -> str:
    return "/run" + path[len("/var/run"):] if path == "/var/run" or path.startswith("/var/run/") else path


def in_pod_mounts(argv: list[str], mounts: dict[str, Path]) -> list[str]:
    """argv run with each pod path of `mounts` bind-mounted from its host folder, in namespaces of its own."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise PodMountsUnavailable("no `unshare` (util-linux) on $PATH")
    lines = ["set -e"]
    targets = {_target(p): Path(src) for p, src in mounts.items()}
    if any(t == "/run" or t.startswith("/run/") for t in targets):
        lines.append("mount -t tmpfs -o mode=0755 rehearsal-run /run")
    for target, src in sorted(targets.items()):
        if not src.is_dir():
            raise ValueError(f"{src} (to mount at {target}) is not a folder")
        lines.append(f"mkdir -p {shlex.quote(target)}")
        lines.append(f"mount --bind {shlex.quote(str(src))} {shlex.quote(target)}")
    lines.append('exec "$@"')
    return [unshare, "--user", "--map-root-user", "--mount", "--", "/bin/sh", "-c", "\n".join(lines), "pod-mounts",
            *[str(a) for a in argv]]


@functools.lru_cache(maxsize=1)
def check() -> str:
    """'' where a process can be given mounts of its own here, else why not (what `unshare` said)."""
    try:
        argv = in_pod_mounts(["/bin/true"], {})
    except PodMountsUnavailable as exc:
        return str(exc)
    try:
        proc = subprocess.run([*argv[:5], "/bin/sh", "-c", "mount -t tmpfs rehearsal-check /run"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`unshare --user --map-root-user --mount` failed: {exc}"
    if proc.returncode != 0:
        return (f"`unshare --user --map-root-user --mount` failed ({(proc.stderr or proc.stdout).strip()[-300:]}): "
                "unprivileged user namespaces are off (Ubuntu 24.04: sysctl kernel.apparmor_restrict_unprivileged_userns=0)")
    return ""
