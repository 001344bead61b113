"""The Pulumi project a command works on, found and read the way the Pulumi CLI does.

Preflight plans it and the Linode upgrade reads its stack files: this repository's own project, or
any other program built from the package's components.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ProjectNotFound(FileNotFoundError):
    """No Pulumi.yaml in the folder or any parent (a usage error: exit 4)."""


class ProjectFileError(ValueError):
    """Pulumi.yaml exists but is not a Python Pulumi project preflight can run (exit 2)."""


@dataclass(frozen=True)
class Project:
    """A Pulumi project on disk, read the way the CLI reads it: `name`, `main` (the program's folder
    or file, default the project folder) and `stackConfigDir` (default the project folder)."""

    root: Path
    name: str
    program: Path  # the program's entry file (__main__.py of `main`, or `main` itself)
    stacks_dir: Path
    doc: dict[str, Any] = field(compare=False, repr=False, default_factory=dict)

    @classmethod
    def load(cls, root: Path) -> "Project":
        root = Path(root).resolve()
        file = root / "Pulumi.yaml"
        try:
            doc = yaml.load(file.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except OSError as exc:
            raise ProjectNotFound(f"no Pulumi project at {root}: {exc.strerror} reading {file}") from None
        except yaml.YAMLError as exc:
            raise ProjectFileError(f"{file}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            raise ProjectFileError(f"{file}: not a Pulumi project file (a mapping with a `name:`)")
        runtime = doc.get("runtime")
        runtime = runtime.get("name") if isinstance(runtime, dict) else runtime
        if runtime != "python":
            raise ProjectFileError(f"{file}: runtime is {runtime!r}; preflight runs Python programs (runtime: python)")
        main = root / str(doc.get("main") or ".")
        program = main / "__main__.py" if main.is_dir() else main
        return cls(root, doc["name"], program, root / str(doc.get("stackConfigDir") or "."), doc)

    def shown(self, path: Path) -> str:
        """A path as messages show it: relative to the project when inside it."""
        path = Path(path)
        return str(path.relative_to(self.root)) if path.is_absolute() and path.is_relative_to(self.root) else str(path)


def find_project(start: "Path | str | None" = None) -> Project:
    """The project the CLI would use from `start` (default: the working directory): the nearest folder
    upwards that holds a Pulumi.yaml."""
    here = Path(start or os.getcwd()).resolve()
    if not here.is_dir():  # `-C typo` must not fall through to a project further up
        raise ProjectNotFound(f"no such folder: {start}")
    for folder in (here, *here.parents):
        if (folder / "Pulumi.yaml").is_file():
            return Project.load(folder)
    raise ProjectNotFound(f"no Pulumi.yaml in {here} or any folder above it: run from a Pulumi project or pass -C DIR")


def source_checkout() -> Path | None:
    """The repository this package runs from (its Pulumi.yaml and pyproject.toml beside the package), or None where
    the package is installed (a wheel in site-packages)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "Pulumi.yaml").is_file() else None


def python_m(module: str) -> str:
    """`python -m MODULE` as a message should tell the reader to run it: `.venv/bin/python -m MODULE` in a checkout
    (the README's set-up), `python -m MODULE` where the package is installed (no .venv there)."""
    return f".venv/bin/python -m {module}" if source_checkout() else f"python -m {module}"
