"""The cloud-agnostic ML platform applied to any cluster handle (see platform.py).

`MlPlatform`/`PlatformArgs` are imported lazily so that `gpu_platform.config.stack` (which needs only
`gpu_platform.config.platform`) does not pull in the Kubernetes SDK.
"""

from typing import Any

__all__ = ["MlPlatform", "PlatformArgs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpu_platform.components.platform import platform

        return getattr(platform, name)
    raise AttributeError(name)
