"""Moved: the stack config is the package `gpu_platform.config` (issue #25).

Kept for programs written against 0.2.0, whose documented example (examples/team-gke) imported
`load_from_pulumi` from here: that name and the two a program annotates with still work, with a
DeprecationWarning. Import them from `gpu_platform.config.stack`, `gpu_platform.config.model` and
`gpu_platform.config.base`; this module goes in the next release.
"""

from __future__ import annotations

import warnings

from gpu_platform.config.base import ConfigError
from gpu_platform.config.model import StackConfig
from gpu_platform.config.stack import load_from_pulumi

__all__ = ["ConfigError", "StackConfig", "load_from_pulumi"]

warnings.warn("gpu_platform.components.config moved: import load_from_pulumi from gpu_platform.config.stack "
              "(StackConfig from gpu_platform.config.model, ConfigError from gpu_platform.config.base)",
              DeprecationWarning, stacklevel=2)
