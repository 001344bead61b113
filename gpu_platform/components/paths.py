"""Files of this package as a running program refers to them.

Pulumi runs a program, its kustomize invokes and its local commands from the project's folder. A
file shipped in the package (a kustomize overlay, a node helper script) is named relative to that
folder: the same text on every machine for a given layout (plans diff cleanly), and valid whether the
package is this repository's checkout or installed in the project's virtualenv.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def program_relative(path: "Path | str") -> str:
    """`path` (absolute, or relative to the package) relative to the working directory, POSIX-style."""
    target = Path(path) if Path(path).is_absolute() else PACKAGE_DIR / path
    return Path(os.path.relpath(target, os.getcwd())).as_posix()
