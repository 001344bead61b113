"""Runs a node script in a throwaway root: the real dpkg, dpkg-query and apt-mark of this Debian machine
over a fresh package database, and recorded stand-ins for what needs the network or a GPU.

The root is a directory with this machine's /usr bind-mounted read-only (so bash, coreutils, dpkg and
apt are the real ones), its own writable /etc, /var, /run, /tmp, /lib/modules, /usr/local and /usr/src,
entered with `unshare --user --map-root-user --mount` and `chroot` (no real root, nothing on the host
touched). The packages a Linode Ubuntu 24.04 image starts with (IMAGE_PACKAGES) and the ones the
script installs are stub .debs built with `dpkg-deb --build`; dpkg installs them for real (files,
maintainer scripts, status, holds). What stays a stand-in (bin/ under the root, on PATH first):

- apt-get: `update` is recorded; `install` installs the named stub packages with the real `dpkg -i`
  from the archive folder, and fails like apt (exit 100, "Unable to locate package") for a name the
  archive lacks; apt-cache `show` answers from the same archive;
- curl (the NVIDIA repository key and list: recorded text; FAIL_CURL makes it fail once), gpg --dearmor;
- uname -r (the image's kernel), modprobe (loads `nvidia` only if a package put nvidia.ko under
  /lib/modules/KERNEL), nvidia-smi (in the nvidia-utils stub: works only when the module is loaded),
  nvidia-ctk (in the toolkit stub: records and writes containerd's config), systemctl (recorded).
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

KERNEL = "6.8.0-48-generic"

# What the image has before cloud-init runs, for the packages the NVIDIA step touches (Ubuntu 24.04's
# generic kernel flavour; modelled, not captured from a Linode image): the kernel and its metapackages.
# No linux-headers: the cloud image does not ship them.
IMAGE_PACKAGES = [f"linux-image-{KERNEL}", f"linux-modules-{KERNEL}", "linux-image-generic", "linux-generic",
                  "containerd"]


def shutil_which(name: str) -> bool:
    return shutil.which(name) is not None


def namespaces_work() -> bool:
    if not all(shutil_which(t) for t in ("unshare", "chroot", "dpkg", "dpkg-deb", "apt-mark")):
        return False
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--fork", "true"], capture_output=True)
    return proc.returncode == 0


@dataclass
class Stub:
    name: str
    version: str = "1.0"
    depends: str = ""
    files: dict[str, tuple[str, int]] | None = None  # path -> (content, mode)
    postinst: str = ""


def build_deb(stub: Stub, out: Path) -> Path:
    pkg = out / f"build-{stub.name}"
    (pkg / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {stub.name}", f"Version: {stub.version}", "Architecture: all",
               "Maintainer: gpu-platform tests <tests@example.invalid>", f"Description: stub of {stub.name}"]
    if stub.depends:
        control.insert(3, f"Depends: {stub.depends}")
    (pkg / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    if stub.postinst:
        post = pkg / "DEBIAN" / "postinst"
        post.write_text("#!/bin/sh\nset -e\n" + stub.postinst)
        post.chmod(0o755)
    for path, (content, mode) in (stub.files or {}).items():
        target = pkg / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    deb = out / f"{stub.name}_{stub.version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)], check=True, capture_output=True)
    shutil.rmtree(pkg)
    return deb


NVIDIA_SMI = """#!/bin/sh
# stand-in: answers only when the nvidia module is loaded
echo "nvidia-smi $*" >> /var/log/standins.log
grep -qx nvidia /run/loaded-modules 2>/dev/null || { echo "NVIDIA-SMI has failed: couldn't communicate with the driver" >&2; exit 9; }
echo "GPU 0: NVIDIA RTX 4000 Ada Generation (UUID: GPU-00000000-0000-0000-0000-000000000000)"
"""

NVIDIA_CTK = """#!/bin/sh
echo "nvidia-ctk $*" >> /var/log/standins.log
mkdir -p /etc/containerd
echo 'default_runtime_name = "nvidia"' >> /etc/containerd/config.toml
"""


def archive_stubs(branch: str, toolkit: str, *, precompiled: bool = True, missing: tuple[str, ...] = ()) -> list[Stub]:
    """What Ubuntu's archive (and NVIDIA's toolkit repository) would offer, as stubs."""
    module = {f"/lib/modules/{KERNEL}/kernel/nvidia-{branch}srv/nvidia.ko": ("stub module\n", 0o644)}
    stubs = [
        Stub(f"linux-headers-{KERNEL}", files={f"/usr/src/linux-headers-{KERNEL}/Makefile": ("stub\n", 0o644)}),
        # DKMS builds the module at install time, and only against this kernel's headers.
        Stub(f"nvidia-dkms-{branch}-server", depends=f"nvidia-kernel-common-{branch}-server",
             postinst=textwrap.dedent(f"""\
                 if [ ! -d /usr/src/linux-headers-{KERNEL} ]; then
                   echo "dkms: no headers for {KERNEL}" >&2; exit 1
                 fi
                 mkdir -p /lib/modules/{KERNEL}/updates/dkms
                 echo built > /lib/modules/{KERNEL}/updates/dkms/nvidia.ko
                 """)),
        Stub(f"nvidia-kernel-common-{branch}-server"),
        Stub(f"nvidia-headless-no-dkms-{branch}-server", depends=f"nvidia-kernel-common-{branch}-server"),
        Stub(f"nvidia-utils-{branch}-server", files={"/usr/local/bin/nvidia-smi": (NVIDIA_SMI, 0o755)}),
        Stub("nvidia-container-toolkit-base", toolkit),
        Stub("libnvidia-container1", toolkit),
        Stub("libnvidia-container-tools", toolkit, depends="libnvidia-container1"),
        Stub("nvidia-container-toolkit", toolkit, depends="nvidia-container-toolkit-base, libnvidia-container-tools",
             files={"/usr/local/bin/nvidia-ctk": (NVIDIA_CTK, 0o755)}),
    ]
    if precompiled:
        stubs.append(Stub(f"linux-modules-nvidia-{branch}-server-{KERNEL}",
                          depends=f"linux-image-{KERNEL}, nvidia-kernel-common-{branch}-server", files=module))
    return [s for s in stubs if s.name not in missing]


def kubernetes_stubs(*package_versions: str) -> list[Stub]:
    """kubeadm, kubelet and kubectl from pkgs.k8s.io, one stub of each per version (e.g. 1.35.8-1.1), each a
    recorded stand-in that logs under its own version, so a test sees which kubeadm ran `upgrade apply`:
    - kubeadm `upgrade plan|apply vX` refuses a target newer than itself (as kubeadm does) and `apply`
      moves the API server's version (/run/apiserver-version);
    - kubelet `--version` prints its release; kubectl `version -o json` answers with the API server's
      version (several answers from an old one first where /run/apiserver-old-answers says so) and needs the
      kubeconfig it is given and the token file that kubeconfig names;
    - where /run/cluster exists, kubectl also stands in for the API server an autoscaled pool's upgrade
      Job talks to: nodes are lines `<name> <kubelet version> <pool>` of /run/cluster/nodes (`get nodes -l
      gpu-platform.io/pool=P`, `get node N`); `create -f` of a per-node Job stores it under
      /run/cluster/jobs and plays its outcome: Complete, the node now at /run/cluster/target (the worker
      script it runs is executed on its own), or Failed where /run/cluster/fail-<node> exists, or the node
      leaving the cluster where /run/cluster/vanish-<node> does; /run/cluster/late (node lines) registers
      after the first Job, as a node still booting at the old version would."""
    stubs: list[Stub] = []
    for v in package_versions:
        release = "v" + v.split("-")[0]
        kubeadm = textwrap.dedent(f"""\
            #!/bin/bash
            echo "kubeadm@{v} $*" >> /var/log/standins.log
            if [ "$1" = upgrade ] && {{ [ "$2" = apply ] || [ "$2" = plan ]; }}; then
              for a in "$@"; do
                case "$a" in
                  v[0-9]*)
                    if dpkg --compare-versions "${{a#v}}" gt "{release[1:]}"; then
                      echo "[upgrade/version] FATAL: Specified version to upgrade to ($a) is higher than the kubeadm version {release}" >&2
                      exit 1
                    fi
                    [ "$2" = apply ] && echo "$a" > /run/apiserver-version ;;
                esac
              done
            fi
            # What kubeadm leaves on disk that the next steps read: `init` generates the CAs and the service-account
            # key and writes admin.conf; `join phase control-plane-prepare download-certs` writes the CAs from the
            # kubeadm-certs Secret, and fails like kubeadm (copycerts.getSecret) where /run/kubeadm-certs-gone says
            # the Secret has expired.
            newca() {{ openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=${{1//\//-}}" -days 1 \
              -keyout "/etc/kubernetes/pki/$1.key" -out "/etc/kubernetes/pki/$1.crt" 2>/dev/null; }}
            # `init` as kubeadm: preflight refuses the manifests an earlier attempt left (unless skipped); the certs
            # phase keeps a CA that is already there ("Using existing ca certificate authority"); where
            # /run/kubeadm-init-times-out exists, it fails once after writing them (wait-control-plane). `reset`
            # empties the pki directory and the manifests, as kubeadm reset does.
            if [ "$1" = init ] && [ "$2" = --config ]; then
              # kubeadm's config validation (cmd/kubeadm/app/apis/kubeadm/validation/validation.go
              # ValidateBootstrapTokens, after bootstraptoken/v1 defaults.go gives a token without groups the
              # default-node-token group): a token whose usages lack "authentication" is refused.
              bad=$(awk '/^---/ {{ exit }}
                /^bootstrapTokens:/ {{ bt = 1; next }}
                bt && /^[^ -]/ {{ bt = 0 }}
                !bt {{ next }}
                /^- / {{ if (n++ && hasu && !auth) print id; hasu = 0; auth = 0; inu = 0; id = "?" }}
                {{ line = $0; sub(/^- /, "  ", line) }}
                line ~ /^  token: / {{ id = line; sub(/^  token: */, "", id); sub(/\..*/, "", id) }}
                line ~ /^  [a-zA-Z]/ {{ inu = (line ~ /^  usages:/); if (inu) hasu = 1; next }}
                inu && line ~ /^  - authentication *$/ {{ auth = 1 }}
                END {{ if (n && hasu && !auth) print id }}' "$3")
              if [ -n "$bad" ]; then
                echo "bootstrapTokens.groups: Invalid value: [system:bootstrappers:kubeadm:default-node-token]: token groups cannot be specified unless --usages includes authentication (token $bad)" >&2
                exit 1
              fi
              if [ -n "$(ls -A /etc/kubernetes/manifests 2>/dev/null)" ] && [[ "$*" != *--skip-phases=preflight* ]]; then
                echo "[ERROR FileAvailable--etc-kubernetes-manifests-kube-apiserver.yaml]: /etc/kubernetes/manifests/kube-apiserver.yaml already exists" >&2
                exit 1
              fi
              mkdir -p /etc/kubernetes/pki/etcd /run/kubeadm /etc/kubernetes/manifests
              for c in ca front-proxy-ca etcd/ca; do
                [ -f "/etc/kubernetes/pki/$c.crt" ] && [ -f "/etc/kubernetes/pki/$c.key" ] || newca "$c"
              done
              touch /etc/kubernetes/manifests/kube-apiserver.yaml
              printf 'apiVersion: v1\nkind: Config\nusers:\n- user:\n    tokenFile: /run/kubeadm/admin-token\n' > /etc/kubernetes/admin.conf
              if [ -f /run/kubeadm-init-times-out ]; then
                rm -f /run/kubeadm-init-times-out
                echo "[wait-control-plane] context deadline exceeded" >&2
                exit 1
              fi
              touch /run/kubeadm/admin-token
            fi
            if [ "$1" = reset ]; then
              rm -rf /etc/kubernetes/pki /etc/kubernetes/manifests /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf
            fi
            if [ "$1 $2 $3 $4" = "join phase control-plane-prepare download-certs" ]; then
              if [ -f /run/kubeadm-certs-gone ]; then
                echo 'error downloading the secret: Secret "kubeadm-certs" was not found in the "kube-system" Namespace. This Secret might have expired.' >&2
                exit 1
              fi
              mkdir -p /etc/kubernetes/pki/etcd
              newca ca && newca front-proxy-ca && newca etcd/ca
            fi
            if [ "$1 $2 $3" = "config images list" ]; then
              echo "registry.k8s.io/kube-apiserver:{release}"
              echo "registry.k8s.io/etcd:3.6.5-0"
            fi
            exit 0
            """)
        kubelet = f"#!/bin/sh\n[ \"$1\" = --version ] && echo 'Kubernetes {release}'\nexit 0\n"
        kubectl = textwrap.dedent(f"""\
            #!/bin/bash
            echo "kubectl@{v} $*" >> /var/log/standins.log
            if [ "$1" = --kubeconfig ]; then
              [ -f "$2" ] || {{ echo "kubectl: no kubeconfig $2" >&2; exit 1; }}
              token=$(sed -n 's/^ *tokenFile: *//p' "$2")
              [ -n "$token" ] && [ -f "$token" ] || {{ echo "kubectl: the kubeconfig's token file is missing" >&2; exit 1; }}
              shift 2
            fi
            # `apply -f FILE|-`: what was applied is kept in /run/applied.yaml (a document a line of ---).
            if [ "$1" = apply ] && [ "$2" = -f ]; then
              {{ if [ "$3" = - ]; then cat; else cat "$3"; fi; echo "---"; }} >> /run/applied.yaml
            fi
            if [ "$1" = version ]; then
              # A balancer over several API servers: /run/apiserver-old-answers more answers from an old one,
              # then the upgraded one's (/run/apiserver-version.later).
              if [ -f /run/apiserver-version.later ]; then
                n=$(cat /run/apiserver-old-answers 2>/dev/null || echo 0)
                if [ "$n" -le 0 ]; then mv /run/apiserver-version.later /run/apiserver-version
                else echo $((n - 1)) > /run/apiserver-old-answers; fi
              fi
              printf '{{\\n  "clientVersion": {{\\n    "gitVersion": "{release}"\\n  }},\\n  "serverVersion": {{\\n    "gitVersion": "%s"\\n  }}\\n}}\\n' "$(cat /run/apiserver-version)"
            fi
            if [ -d /run/cluster ]; then
              c=/run/cluster
              mkdir -p "$c/jobs"
              case "$1 $2" in
                "get nodes")
                  pool=""
                  for a in "$@"; do case "$a" in gpu-platform.io/pool=*) pool=${{a#*=}} ;; esac; done
                  awk -v p="$pool" '$3 == p {{print $1 " " $2}}' "$c/nodes" ;;
                "get node")
                  if grep -q "^$3 " "$c/nodes"; then echo "node/$3"; fi ;;
                "get job")
                  if [ -f "$c/jobs/$3.state" ]; then cat "$c/jobs/$3.state"; fi ;;
                "delete job")
                  rm -f "$c/jobs/$3.json" "$c/jobs/$3.state" ;;
                "create -f")
                  name=$(grep -o '"name": "upgrade-[^"]*"' "$3" | head -n 1 | cut -d'"' -f4)
                  node=$(grep -o '"nodeName": "[^"]*"' "$3" | cut -d'"' -f4)
                  if [ -f "$c/jobs/$name.json" ]; then echo "Error from server (AlreadyExists): jobs.batch \"$name\" already exists" >&2; exit 1; fi
                  cp "$3" "$c/jobs/$name.json"
                  if [ -f "$c/fail-$node" ]; then
                    echo "FailureTarget Failed" > "$c/jobs/$name.state"
                  elif [ -f "$c/vanish-$node" ]; then
                    sed -i "/^$node /d" "$c/nodes"
                    : > "$c/jobs/$name.state"
                  else
                    echo "SuccessCriteriaMet Complete" > "$c/jobs/$name.state"
                    sed -i "s/^$node [^ ]*/$node $(cat "$c/target")/" "$c/nodes"
                  fi
                  if [ -f "$c/late" ]; then cat "$c/late" >> "$c/nodes"; rm -f "$c/late"; fi ;;
              esac
            fi
            exit 0
            """)
        stubs += [Stub("kubeadm", v, files={"/usr/local/bin/kubeadm": (kubeadm, 0o755)}),
                  Stub("kubelet", v, files={"/usr/local/bin/kubelet": (kubelet, 0o755)}),
                  Stub("kubectl", v, files={"/usr/local/bin/kubectl": (kubectl, 0o755)})]
    return stubs


STANDINS = {
    "apt-get": r"""#!/bin/bash
set -u
echo "apt-get $*" >> /var/log/standins.log
cmd=""
allow_held=""
pkgs=()
for a in "$@"; do
  case "$a" in
    --allow-change-held-packages) allow_held=1 ;;
    -*) ;;
    update|install) [ -z "$cmd" ] && cmd=$a ;;
    *) pkgs+=("$a") ;;
  esac
done
[ "$cmd" = install ] || exit 0
debs=()
for spec in "${pkgs[@]}"; do
  p=${spec%%=*}
  want=""
  [ "$spec" != "$p" ] && want=${spec#*=}
  have=$(dpkg-query -W -f='${Status} ${Version}' "$p" 2>/dev/null | awk '$3 == "installed" {print $4}')
  # Installed at the requested version (or no version asked): "already the newest version".
  if [ -n "$have" ] && { [ -z "$want" ] || [ "$want" = "$have" ]; }; then continue; fi
  if [ -z "$want" ]; then f=$(ls /archive/"$p"_*.deb 2>/dev/null | head -1); else f=$(ls /archive/"$p"_"$want"_*.deb 2>/dev/null | head -1); fi
  if [ -z "$f" ]; then
    if [ -n "$want" ] && ls /archive/"$p"_*.deb >/dev/null 2>&1; then echo "E: Version '$want' for '$p' was not found" >&2; else echo "E: Unable to locate package $p" >&2; fi
    exit 100
  fi
  # apt refuses to change a held package unless told to (apt-get(8), --allow-change-held-packages).
  if [ -n "$have" ] && [ -z "$allow_held" ] && dpkg-query -W -f='${Status}' "$p" | grep -q '^hold '; then
    echo "E: Held packages were changed and -y was used without --allow-change-held-packages." >&2
    exit 100
  fi
  debs+=("$f")
done
# Dependencies the archive has, as apt would resolve them (one level is enough for the stubs).
for f in "${debs[@]}"; do
  for d in $(dpkg-deb -f "$f" Depends | tr ',' ' '); do
    dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'ok installed' && continue
    g=$(ls /archive/"$d"_*.deb 2>/dev/null | head -1)
    case " ${debs[*]} " in *" $g "*) continue ;; esac
    if [ -n "$g" ]; then debs=("$g" "${debs[@]}"); fi
  done
done
[ ${#debs[@]} -eq 0 ] && exit 0
exec dpkg -i "${debs[@]}"
""",
    "apt-cache": r"""#!/bin/bash
echo "apt-cache $*" >> /var/log/standins.log
[ "$1" = show ] || exit 0
ls /archive/"$2"_*.deb >/dev/null 2>&1 || { echo "E: No packages found" >&2; exit 100; }
dpkg-deb -f /archive/"$2"_*.deb
""",
    "curl": r"""#!/bin/bash
echo "curl $*" >> /var/log/standins.log
if [ -f /run/fail-curl ]; then rm -f /run/fail-curl; echo "curl: (6) Could not resolve host" >&2; exit 6; fi
# --output and --write-out (%{http_code}, %{num_connects}) as curl does them; without --fail an HTTP error
# status is exit 0, with it exit 22; nothing listening is exit 7 with http_code 000 and no connect.
out=""; wo=""; fail=""; prev=""
for a in "$@"; do
  case "$prev" in --output) out=$a ;; --write-out) wo=$a ;; esac
  [ "$a" = --fail ] && fail=1
  prev=$a
done
url=${*: -1}
answer() {
  local status=$1 body=$2 connects=$3 w
  if [ -n "$out" ]; then if [ -n "$body" ]; then cat "$body" > "$out"; else : > "$out"; fi
  elif [ -n "$body" ]; then cat "$body"; fi
  if [ -n "$wo" ]; then w=${wo//%\{http_code\}/$status}; w=${w//%\{num_connects\}/$connects}; printf '%s' "$w"; fi
  if [ "$connects" = 0 ]; then echo "curl: (7) Failed to connect: Connection refused" >&2; exit 7; fi
  if [ -n "$fail" ] && [ "$status" -ge 400 ]; then echo "curl: (22) The requested URL returned error: $status" >&2; exit 22; fi
  exit 0
}
case "$*" in
  # The etcd bucket (SigV4): an object recorded under /run/s3/<key> answers 200, /run/s3-status/<key> that
  # status, anything else 404 (NoSuchKey).
  *--aws-sigv4*)
    key=${url#https://*/}
    [ -f "/run/s3-status/$key" ] && answer "$(cat "/run/s3-status/$key")" "" 1
    [ -f "/run/s3/$key" ] && answer 200 "/run/s3/$key" 1
    answer 404 "" 1 ;;
  # Other API reads (cluster-info): the body recorded under /run/api/<path>; /run/api-status/<path> answers
  # that HTTP status instead (an API server whose etcd is not ready: 503); else a refused connection.
  *:6443/api/*)
    f="/run/api/${url#*:6443/}"
    s="/run/api-status/${url#*:6443/}"
    [ -f "$s" ] && answer "$(cat "$s")" "" 1
    [ -f "$f" ] && answer 200 "$f" 1
    answer 000 "" 0 ;;
esac
case "$*" in
  *gpgkey*) echo "-----BEGIN PGP PUBLIC KEY BLOCK----- (recorded stand-in)" ;;
  *.list*) echo "deb https://nvidia.github.io/libnvidia-container/stable/deb/\$(ARCH) /" ;;
  *pkgs.k8s.io/core:/stable:/v*/deb/Release.key*) echo "-----BEGIN PGP PUBLIC KEY BLOCK----- (recorded stand-in: pkgs.k8s.io)" ;;
  # A running API server (/run/apiserver-version holds its release): GET /version, as kube-apiserver answers it.
  *:6443/version*)
    [ -f /run/apiserver-version ] || { echo "curl: (7) Failed to connect: Connection refused" >&2; exit 7; }
    printf '{\n  "major": "1",\n  "gitVersion": "%s",\n  "platform": "linux/amd64"\n}\n' "$(cat /run/apiserver-version)" ;;
  *) echo "curl stand-in: no recording for $*" >&2; exit 22 ;;
esac
""",
    "gpg": r"""#!/bin/bash
echo "gpg $*" >> /var/log/standins.log
out=""
while [ $# -gt 0 ]; do case "$1" in -o) out=$2; shift ;; esac; shift; done
cat > "${out:-/dev/stdout}"
""",
    "uname": f"""#!/bin/sh
case "$1" in -r) echo {KERNEL} ;; *) /usr/bin/uname "$@" ;; esac
""",
    "modprobe": f"""#!/bin/sh
echo "modprobe $*" >> /var/log/standins.log
if [ "$1" = nvidia ]; then
  find /lib/modules/{KERNEL} -name nvidia.ko 2>/dev/null | grep -q . || {{ echo "modprobe: FATAL: Module nvidia not found in directory /lib/modules/{KERNEL}" >&2; exit 1; }}
fi
echo "$1" >> /run/loaded-modules
""",
    "systemctl": """#!/bin/sh
echo "systemctl $*" >> /var/log/standins.log
""",
    # The install step's host changes (no swap, kernel settings) and containerd's default config.
    "swapoff": """#!/bin/sh
echo "swapoff $*" >> /var/log/standins.log
""",
    "sysctl": """#!/bin/sh
echo "sysctl $*" >> /var/log/standins.log
""",
    "containerd": """#!/bin/sh
echo "containerd $*" >> /var/log/standins.log
[ "$1 $2" = "config default" ] && printf '[plugins]\\n  SystemdCgroup = false\\n'
exit 0
""",
    # containerd's ctr: pulls are recorded; `run ... etcdctl member list` lists $ETCD_MEMBERS (/run/etcd-members).
    "ctr": """#!/bin/sh
echo "ctr $*" >> /var/log/standins.log
case "$*" in
  *"member list"*) cat /run/etcd-members 2>/dev/null ;;
esac
exit 0
""",
}

# Packages the install step asks apt for besides Kubernetes (the image has them or the archive does).
INSTALL_PACKAGES = ["apt-transport-https", "ca-certificates", "curl", "gpg", "openssl"]


class BootRoot:
    """A throwaway root for one scenario; `run(script)` executes it there under bash."""

    def __init__(self, base: Path, stubs: list[Stub], image: list[str] = IMAGE_PACKAGES):
        self.base = base
        self.root = base / "root"
        for d in ("etc", "var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/apt/lists/partial",
                  "var/cache/apt/archives/partial", "var/log", "run", "tmp", "usr", "local", "src",
                  "archive", "standins", "dev"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        # /lib is a directory of its own holding only modules/ (the loader finds libraries under /usr/lib).
        for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib64", "usr/lib64")):
            (self.root / link).symlink_to(target)
        (self.root / "lib" / "modules").mkdir(parents=True)
        for entry in Path("/usr/lib").iterdir():
            if entry.name != "modules":
                (self.root / "lib" / entry.name).symlink_to(f"/usr/lib/{entry.name}")
        for f in ("var/lib/dpkg/status", "var/lib/dpkg/available", "var/log/standins.log"):
            (self.root / f).touch()
        for name in ("passwd", "group", "nsswitch.conf", "ld.so.cache"):
            shutil.copy(f"/etc/{name}", self.root / "etc" / name)
        for name in ("dpkg", "apt", "alternatives"):
            shutil.copytree(f"/etc/{name}", self.root / "etc" / name, symlinks=True,
                            ignore=shutil.ignore_patterns("sources.list*"))
        (self.root / "etc" / "apt" / "sources.list.d").mkdir(exist_ok=True)
        for name, text in STANDINS.items():
            path = self.root / "standins" / name
            path.write_text(text)
            path.chmod(0o755)
        for stub in stubs:
            build_deb(stub, self.root / "archive")
        # The image's own packages, installed for real.
        if not image:
            return
        image_debs = [build_deb(Stub(n), base) for n in image]
        boot = "dpkg -i " + " ".join(f"/image/{d.name}" for d in image_debs)
        (self.root / "image").mkdir()
        for d in image_debs:
            shutil.move(str(d), self.root / "image" / d.name)
        proc = self.run(boot, shell="sh")
        assert proc.returncode == 0, proc.stderr

    def run(self, script: str, shell: str = "bash", env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        (self.root / "tmp" / "script").write_text(script)
        r = str(self.root)
        mounts = " && ".join([
            f"mount --rbind /usr {r}/usr", f"mount -o remount,bind,ro {r}/usr",
            f"mount --bind {r}/local {r}/usr/local", f"mount --bind {r}/src {r}/usr/src",
            f"mount --rbind /dev {r}/dev",
        ])
        path = "/standins:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        envs = " ".join(f"{k}={v}" for k, v in (env or {}).items())
        inner = f"{mounts} && exec chroot {r} /usr/bin/env -i PATH={path} HOME=/root LANG=C {envs} {shell} /tmp/script"
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--fork", "sh", "-c", inner],
                              capture_output=True, text=True, timeout=300)

    # --- what the script left behind -----------------------------------------------------------
    def packages(self) -> dict[str, str]:
        """package -> dpkg's status abbreviation (`ii` installed, `hi` held and installed)."""
        out: dict[str, str] = {}
        for block in (self.root / "var/lib/dpkg/status").read_text().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
            if "Package" in fields:
                want, _, state = fields["Status"].split(" ")
                out[fields["Package"]] = {"hold": "h", "install": "i"}.get(want, "?") + {"installed": "i"}.get(state, state[:1])
        return out

    def versions(self) -> dict[str, str]:
        """package -> installed version."""
        out: dict[str, str] = {}
        for block in (self.root / "var/lib/dpkg/status").read_text().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
            if "Package" in fields and "Version" in fields:
                out[fields["Package"]] = fields["Version"]
        return out

    def log(self) -> list[str]:
        return (self.root / "var/log/standins.log").read_text().splitlines()

    def file(self, path: str) -> str:
        p = self.root / path.lstrip("/")
        return p.read_text() if p.exists() else ""
