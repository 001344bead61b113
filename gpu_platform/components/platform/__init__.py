"""The cloud-agnostic ML platform applied to any cluster handle (see platform.py).

`MlPlatform`/`PlatformArgs` are imported lazily: importing one of the platform's modules runs this file,
and should not build the whole platform.
"""

from typing import Any

__all__ = ["MlPlatform", "PlatformArgs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpu_platform.components.platform import platform

        return getattr(platform, name)
    raise AttributeError(name)
