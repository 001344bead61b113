"""The project's own container images, built from this repository at `pulumi up` and deployed by digest.

Three images are this project's own: the Linode node-group provider (autoscaled Linode GPU pools), the EKS
scale-in protection controller and the example training program. None is published for a stack to use, so
the program builds each one it needs with the official pulumi-docker-build provider (`docker_build.Image`,
BuildKit through the deployer's Docker daemon) and pushes it to a registry the stack owns (an ECR repository,
an Artifact Registry repository) or names (linode.imageRegistry). What the cluster runs is the pushed
digest, `<repository>@sha256:<64 hex>`, never a tag. A stack that sets a published digest for an image
(linode.nodeGroups.image, aws.scaleInController.image, platform.trainingImage.image) gets that digest and no build.

The tag an image is pushed under is a hash of what goes into it (`source_tag`): registries with immutable
tags (ECR, Artifact Registry) accept one push per tag, and the provider pushes only when its build context
changed, which changes the tag too. Builds do not run during `pulumi preview` (buildOnPreview false: the
pull-request workflows in .github/workflows build every Dockerfile; a preview needs no build of a
several-gigabyte training image). No cacheFrom/cacheTo: the daemon's default `docker` build driver exports
cache only with the containerd image store (docs.docker.com/build/cache/backends), and a registry cache tag
would be refused by immutable tags; BuildKit's own layer cache in the daemon serves repeat builds on one
machine, and an unchanged image is not rebuilt at all.

Pure parts first (what each image is built from, its source tag, a pull Secret's document); `build` makes
the resource.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import pulumi

from gpu_platform.components.paths import PACKAGE_DIR, program_relative
from gpu_platform.components.read_only import keep_from_state

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig

# Every node the images run on is x86_64: Linode plans, the EKS system and GPU node AMIs
# (gpu_platform/data/aws_versions.py SYSTEM_AMI_TYPE AL2023_x86_64_STANDARD, GPU_AMI_SSM_PARAMETER x86_64)
# and GKE's N1/A2/G2/E2 machines. A deployer on arm64 builds for amd64 through emulation (QEMU binfmt).
PLATFORM = "linux/amd64"
# The prefix of every tag the program pushes (the ECR lifecycle policy counts these).
TAG_PREFIX = "src-"
# The image pull Secret's name wherever pods pull the stack's images with credentials (a named registry).
PULL_SECRET = "gpu-platform-registry"
# How many of an image's pushes a registry keeps (the newest; the deployed one is always the newest).
KEEP_IMAGES = 10


@dataclass(frozen=True)
class ImageSource:
    """What an image is built from. `root`: "package" (the folder holding gpu_platform/: the repository root,
    or site-packages where the package is installed) or "project" (the Pulumi project's folder, where
    `pulumi up` runs). `context` and `dockerfile` are relative to the root, `inputs` (every file and folder
    the Dockerfile copies; its Dockerfile.dockerignore admits exactly these) relative to the context."""

    name: str
    root: str
    context: str
    dockerfile: str
    inputs: tuple[str, ...]

    def root_dir(self) -> Path:
        return PACKAGE_DIR.parent if self.root == "package" else Path(os.getcwd())

    def path(self, relative: str) -> Path:
        return self.root_dir() / relative

    @property
    def ignore_file(self) -> str:
        """BuildKit's Dockerfile-specific ignore file (<Dockerfile>.dockerignore beside it), which
        pulumi-docker-build's context hash reads too (provider/internal/context.go getIgnorePatterns)."""
        return self.dockerfile + ".dockerignore"

    def available(self) -> bool:
        return self.path(self.dockerfile).is_file()


LINODE_NODE_GROUPS = ImageSource(
    name="gpu-platform-linode-node-groups", root="package", context=".",
    dockerfile="gpu_platform/controllers/linode_node_groups/Dockerfile",
    inputs=("gpu_platform/__init__.py", "gpu_platform/components", "gpu_platform/data",
            "gpu_platform/controllers/__init__.py", "gpu_platform/controllers/linode_node_groups"))
SCALE_IN_PROTECTION = ImageSource(
    name="gpu-platform-scale-in", root="package", context="gpu_platform/controllers/scale_in_protection",
    dockerfile="gpu_platform/controllers/scale_in_protection/Dockerfile",
    inputs=("requirements.txt", "controller.py"))
# In this repository, not in the installed package: a team's own program has no examples/ and builds none.
TRAINING = ImageSource(
    name="gpu-platform-training", root="project", context="examples/training",
    dockerfile="examples/training/Dockerfile", inputs=("requirements.txt", "ckpt_train"))
IMAGES = (LINODE_NODE_GROUPS, SCALE_IN_PROTECTION, TRAINING)

_SKIPPED = ("__pycache__",)


def _files(base: Path, relative: str) -> list[tuple[str, Path]]:
    path = base / relative
    if path.is_file():
        return [(relative, path)]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED)
        for f in sorted(filenames):
            if not f.endswith(".pyc"):
                full = Path(dirpath) / f
                out.append((full.relative_to(base).as_posix(), full))
    return out


def source_tag(source: ImageSource, *settings: str) -> str:
    """src-<16 hex>: a hash of every file the image is built from (its inputs with their paths and file modes,
    the Dockerfile and its ignore file), the platform and `settings` (the registry login where it is plain
    config). It covers at least what makes pulumi-docker-build rebuild (its context hash: each file's
    content, path and mode, provider/internal/context.go hashFile; the registry's address and username), so
    every rebuild is pushed under a tag the registry has not seen: immutable tags refuse a second push to a tag,
    and a rebuild of the same files is not the same image (layers carry the files' times). The same checkout
    gives the same tag on every machine whose umask gives the same modes."""
    context = source.path(source.context)
    h = hashlib.sha256(f"platform={PLATFORM}\n".encode() + "\n".join(settings).encode())
    files = [(f"context/{name}", path) for rel in source.inputs for name, path in _files(context, rel)]
    for name, path in sorted(files):
        mode = stat.filemode(os.lstat(path).st_mode)
        h.update(name.encode() + b"\0" + mode.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    for name, path in (("Dockerfile", source.path(source.dockerfile)), ("dockerignore", source.path(source.ignore_file))):
        h.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return TAG_PREFIX + h.hexdigest()[:16]


def by_digest(repository: str, digest: str) -> str:
    """repository@sha256:..., what a Deployment runs: the pushed digest, whatever tag points at it."""
    if not digest.startswith("sha256:") or len(digest) != len("sha256:") + 64:
        raise ValueError(f"{repository}: the build reported no pushed digest ({digest!r})")
    return f"{repository}@{digest}"


def dockerconfigjson(server: str, username: str, password: str) -> str:
    """A kubernetes.io/dockerconfigjson Secret's document: the kubelet's credentials for one registry."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps({"auths": {server: {"username": username, "password": password, "auth": auth}}}, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# The build
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegistryLogin:
    """How the build logs in to push (kept in memory by the provider, never in the Docker config file, but an
    input of the image resource, so in the stack's state). The stack's own registries on GKE and EKS pass none:
    the provider then pushes with the deployer's Docker credentials (its host loads the Docker config file's
    credentials and credential helpers at start, pulumi-docker-build provider/internal/host.go newHost), which
    `gcloud auth configure-docker <region>-docker.pkg.dev` or `aws ecr get-login-password | docker login` set up
    outside the program (deploy.yml; `preflight image-registry STACK` names the host), so no registry token
    reaches the state a preview token decrypts (docs/state-and-secrets.md)."""

    address: pulumi.Input[str]  # the registry host, host[:port]
    username: pulumi.Input[str]
    password: pulumi.Input[str]  # a secret


def build(name: str, source: ImageSource, repository: pulumi.Input[str], login: Optional[RegistryLogin],
          labels: Optional[dict[str, str]] = None, depends_on: Sequence[pulumi.Resource] = (),
          parent: Optional[pulumi.Resource] = None) -> pulumi.Output[str]:
    """Build `source`, push it to `repository` (<registry host>/<path>/<name>) under its source tag and
    return what to deploy: <repository>@<pushed digest>. `login` None: no `registries` input, the deployer's
    Docker credentials push (RegistryLogin)."""
    import pulumi_docker_build as docker_build

    plain = () if login is None else (v for v in (login.address, login.username) if isinstance(v, str))
    tag = source_tag(source, *plain)
    registries = None if login is None else [{"address": login.address, "username": login.username,
                                              "password": pulumi.Output.secret(login.password)}]
    image = docker_build.Image(
        name,
        context={"location": program_relative(source.path(source.context))},
        dockerfile={"location": program_relative(source.path(source.dockerfile))},
        platforms=[docker_build.Platform.LINUX_AMD64],
        push=True,
        build_on_preview=False,
        tags=[pulumi.Output.concat(repository, ":", tag)],
        registries=registries,
        labels={"org.opencontainers.image.title": source.name, "org.opencontainers.image.version": tag,
                **(labels or {})},
        # `pulumi destroy` leaves the pushed image to its registry: the provider's delete removes each pushed
        # digest and fails where a registry refuses the manifest DELETE API (pulumi-docker-build
        # provider/internal/image.go Delete; "not all registries support" it, e.g. Docker Hub) or an immutable tag;
        # the stack's own repositories go with their images (ECR force_delete, Artifact Registry repository
        # deletion), a named registry keeps them under its own retention.
        # A read-only run (drift.yml) holds no registry password: the state's stays (components/read_only.py).
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on), retain_on_delete=True,
                                    ignore_changes=keep_from_state("registries[0].password") if registries else None),
    )
    return pulumi.Output.all(repository, image.digest).apply(lambda v: by_digest(v[0], v[1]))


def training_image(cfg: "StackConfig", registry: "Optional[Callable[[], Any]]") -> Optional[pulumi.Output[str]]:
    """The example training image the stack offers (the stack output trainingImage): the published digest
    platform.trainingImage.image, else the image built into the registry `registry()` returns (made only when
    needed; anything with `image(source)`), else None (platform.trainingImage.build false, no registry, or a
    program without examples/training)."""
    wanted = cfg.platform.training_image
    if wanted.image is not None:
        return pulumi.Output.from_input(wanted.image)
    if not wanted.build or registry is None:
        return None
    if not TRAINING.available():
        pulumi.log.warn(f"{TRAINING.dockerfile} is not in this project: the example training image is not built "
                        "(platform.trainingImage.build: false silences this; docs/first-training-job.md builds it by hand)")
        return None
    return registry().image(TRAINING)
