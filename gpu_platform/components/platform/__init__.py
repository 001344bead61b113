"""The cloud-agnostic ML platform applied to any cluster handle (see platform.py).

`MlPlatform`/`PlatformArgs` are imported lazily so that the chart pins in `versions.py` (data the config's
Linode checks read through linode/versions.py) do not pull in the Kubernetes SDK.
"""

from typing import Any

__all__ = ["MlPlatform", "PlatformArgs"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpu_platform.components.platform import platform

        return getattr(platform, name)
    raise AttributeError(name)
