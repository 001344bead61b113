"""The `platform` section: which parts of the ML platform a stack gets, and their knobs.

Every knob has a safe default, so `platform: {}` (or no section at all) gives the whole platform.
Cross-key rules (a gpuQuota naming a pool that does not exist, e-mail alerts without an SMTP relay)
live in checks/platform.py, which `gpu_platform.config.stack.semantic_issues` runs for every cloud.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from gpu_platform.config.base import IMAGE_BY_DIGEST, DnsLabel, Email, Model


class AlertSmtp(Model):
    """The SMTP relay Alertmanager sends `alertEmails` through."""

    smarthost: str = Field(min_length=3, pattern=r"^[A-Za-z0-9.-]+:[0-9]{1,5}$")  # host:port

    @field_validator("smarthost")
    @classmethod
    def _port_in_range(cls, value: str) -> str:
        if not 1 <= int(value.rsplit(":", 1)[1]) <= 65535:
            raise ValueError("host:port with a TCP port from 1 to 65535, e.g. smtp.example.com:587")
        from gpu_platform.config.approvals import hostname_problem

        problem = hostname_problem(value.rsplit(":", 1)[0])
        if problem:
            raise ValueError(f"host:port whose host is {problem}, e.g. smtp.example.com:587")
        return value
    from_address: Email = Field(alias="from")
    username: Optional[str] = None
    # Name of a Secret in the monitoring namespace with key `password` (created out of band, so the
    # password never passes through the stack file). Mounted into Alertmanager.
    password_secret: Optional[DnsLabel] = None
    require_tls: bool = True


class TrainingImage(Model):
    """The example training program's image (examples/training): the stack output `trainingImage`, the image
    docs/first-training-job.md runs."""

    # Build it at `pulumi up` from examples/training/Dockerfile and push it to the stack's registry (ECR, Artifact
    # Registry, linode.imageRegistry). torch from PyPI brings the CUDA libraries: the first build downloads and
    # pushes gigabytes; later runs rebuild only when examples/training changes. false: no training image.
    build: bool = True
    # A published image by digest instead (e.g. ghcr.io/<owner>/gpu-platform-training@sha256:<64 hex>, as
    # .github/workflows/training-image.yml publishes it on a release tag): nothing built.
    image: Optional[str] = Field(default=None, pattern=IMAGE_BY_DIGEST)


class PlatformSection(Model):
    # --- parts (each switchable) -----------------------------------------------------------
    kubeflow: bool = True
    notebooks: bool = True
    queue: bool = True
    monitoring: bool = True

    # --- idle GPU alerts ---------------------------------------------------------------------
    # A GPU held by a pod but idle this long (or a GPU node without GPU pods) raises an alert.
    idle_gpu_minutes: int = Field(default=120, ge=5, le=24 * 60)
    # "Idle" means DCGM_FI_DEV_GPU_UTIL below this percentage.
    idle_gpu_util_percent: int = Field(default=10, ge=1, le=100)
    alert_smtp: Optional[AlertSmtp] = None

    # --- job queue (Kueue) -------------------------------------------------------------------
    # GPUs the training queue may admit per pool; default: the pool's maxNodes x GPUs per node.
    gpu_quota: dict[DnsLabel, int] = Field(default_factory=dict)
    # StrictFIFO: the head job blocks the queue until it fits (runs jobs strictly one after another);
    # BestEffortFIFO: a smaller job behind it may start when the head does not fit.
    queueing_strategy: Literal["StrictFIFO", "BestEffortFIFO"] = "BestEffortFIFO"
    # Minutes for image pull and start on top of the cloud's GPU node boot (gpu_platform/costs/node_boot.py):
    # a job whose pods are not all Ready that long after admission (an image that never pulls, no
    # capacity) is evicted and requeued; a running job gets 2 minutes more to recover from a lost node.
    pods_ready_timeout_minutes: int = Field(default=10, ge=1, le=24 * 60)
    # After this many such evictions the job is deactivated (Kueue backoffLimitCount) and says why,
    # instead of being admitted (and scaling a GPU node up) again and again.
    max_requeues: int = Field(default=3, ge=0, le=20)

    # --- notebooks (JupyterHub) --------------------------------------------------------------
    notebook_idle_cull_minutes: int = Field(default=60, ge=10, le=7 * 24 * 60)
    notebook_storage_gib: int = Field(default=20, ge=1, le=4096)
    # Usernames that administer the hub (they approve sign-ups of everyone else).
    notebook_admin_users: list[DnsLabel] = Field(default_factory=lambda: ["admin"])

    # --- monitoring --------------------------------------------------------------------------
    prometheus_retention_days: int = Field(default=15, ge=1, le=365)
    prometheus_storage_gib: int = Field(default=50, ge=5, le=10_000)

    # --- images ------------------------------------------------------------------------------
    training_image: TrainingImage = Field(default_factory=TrainingImage)


