"""The error a release that cannot be rendered raises: shared by render.py and kustomize.py, which
render.py calls (so kustomize.py need not import render.py back)."""

from __future__ import annotations


class ChartError(Exception):
    """A release that cannot be rendered: chart missing, template failure, values refused by its schema."""

    def __init__(self, release: str, message: str):
        super().__init__(f"release {release}: {message}")
        self.release = release
        self.message = message
