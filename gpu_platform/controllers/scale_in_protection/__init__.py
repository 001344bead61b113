"""Job-aware scale-in protection for GPU Auto Scaling groups (see controller.py)."""

from gpu_platform.controllers.scale_in_protection.controller import (  # noqa: F401
    MAX_BATCH,
    SCALE_DOWN_DISABLED,
    Controller,
    CycleResult,
    InClusterKube,
    KubeReader,
    busy_node_names,
    instance_id,
    pod_requests_gpu,
)
