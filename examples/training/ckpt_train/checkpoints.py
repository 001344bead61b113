"""Checkpoints on any fsspec store: atomic writes, newest-complete resume, retention.

A checkpoint is visible under its final name only once it is complete: it is written under a
temporary name in the same folder and then renamed (a POSIX rename on `file://`; a server-side copy
and delete on object stores, where an object appears whole or not at all). Anything that does not
match the final name pattern, such as a temporary file a kill left behind, is never loaded.
"""

from __future__ import annotations

import io
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

import fsspec

FINAL_NAME = re.compile(r"step-(\d{8,})\.pt")
TMP_PREFIX = ".partial-"


def final_name(step: int) -> str:
    return f"step-{step:08d}.pt"


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: str


class CheckpointStore:
    """One run's checkpoint folder. Only one process (rank 0) writes; every rank may read."""

    def __init__(self, url: str, keep: int = 3, storage_options: Optional[dict[str, Any]] = None):
        if keep < 1:
            raise ValueError("keep must be at least 1 (the checkpoint to resume from)")
        self.url = url.rstrip("/")
        self.keep = keep
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        self.root = self.root.rstrip("/")

    def ensure_folder(self) -> None:
        # Object stores have no folders (a no-op there); a file:// path or a mounted volume needs it.
        self.fs.makedirs(self.root, exist_ok=True)

    def _names(self) -> list[str]:
        self.fs.invalidate_cache(self.root)
        if not self.fs.exists(self.root):
            return []
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)]

    def complete(self) -> list[Checkpoint]:
        """Complete checkpoints, oldest first."""
        found = []
        for name in self._names():
            m = FINAL_NAME.fullmatch(name)
            if m:
                found.append(Checkpoint(int(m.group(1)), f"{self.root}/{name}"))
        return sorted(found, key=lambda c: c.step)

    def partial(self) -> list[str]:
        return sorted(f"{self.root}/{n}" for n in self._names() if n.startswith(TMP_PREFIX))

    def save(self, step: int, payload: bytes) -> Checkpoint:
        """Write `payload` as the checkpoint of `step`; returns it once it is complete."""
        tmp = f"{self.root}/{TMP_PREFIX}{final_name(step)}-{uuid.uuid4().hex}"
        final = f"{self.root}/{final_name(step)}"
        with self.fs.open(tmp, "wb") as f:
            f.write(payload)
        self.fs.mv(tmp, final)
        return Checkpoint(step, final)

    def load_newest(self, decode: Callable[[bytes], Any],
                    on_unreadable: Callable[[Checkpoint, Exception], None] = lambda c, e: None
                    ) -> Optional[tuple[Checkpoint, Any]]:
        """The newest checkpoint that decodes; an unreadable one (a store without atomic rename that
        was cut mid-copy, a corrupted object) is reported and the next older one is tried."""
        for ckpt in reversed(self.complete()):
            try:
                with self.fs.open(ckpt.path, "rb") as f:
                    return ckpt, decode(f.read())
            except Exception as exc:  # noqa: BLE001 — any decode failure means "not usable"
                on_unreadable(ckpt, exc)
        return None

    def prune(self) -> list[str]:
        """Delete all but the newest `keep` complete checkpoints; returns what was deleted."""
        old = [c.path for c in self.complete()[:-self.keep]]
        for path in old:
            self.fs.rm(path)
        return old

    def remove_partial(self) -> list[str]:
        """Delete temporary files a killed writer left behind. Called by the one writer at start,
        when no other attempt of the same run can be writing."""
        stale = self.partial()
        for path in stale:
            self.fs.rm(path)
        return stale


def encode(state: dict[str, Any]) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def decoder(map_location: Any) -> Callable[[bytes], Any]:
    import torch

    def decode(data: bytes) -> Any:
        # weights_only: a checkpoint holds tensors and plain values, never code to execute.
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)

    return decode
