"""Mock answers for resources and invokes while preflight runs the program offline.

One module per provider package (`gpu_platform/preflight/mocks/<package>.py`) exports `RESOURCES` (type token ->
function(inputs, name) -> output state), `INVOKES` (token -> function(args) -> result) and `READS` ((type token,
id, or "*" for any) -> function(id) -> state: a `<Resource>.get` of an existing object). A resource without a special mock
echoes its inputs; an invoke or a read without a mock is an error that names it, so the program never
silently plans with made-up data.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import pulumi

_PACKAGES = ("tls", "random", "linode", "gcp", "aws", "kubernetes", "command", "docker_build")

# Secret-looking values the mocks made up (keys, tokens); preflight masks them in written artifacts.
SENSITIVE: set[str] = set()


def sensitive(value: str) -> str:
    SENSITIVE.add(value)
    return value


def _load() -> tuple[dict[str, Callable[..., dict]], dict[str, Callable[..., dict]], dict[str, Callable[[str], str]],
                     dict[tuple[str, str], Callable[[str], dict]]]:
    resources: dict[str, Callable[..., dict]] = {}
    invokes: dict[str, Callable[..., dict]] = {}
    ids: dict[str, Callable[[str], str]] = {}
    reads: dict[tuple[str, str], Callable[[str], dict]] = {}
    for pkg in _PACKAGES:
        try:
            mod = importlib.import_module(f"gpu_platform.preflight.mocks.{pkg}")
        except ModuleNotFoundError as exc:
            if exc.name != f"gpu_platform.preflight.mocks.{pkg}":
                raise
            continue
        resources.update(getattr(mod, "RESOURCES", {}))
        invokes.update(getattr(mod, "INVOKES", {}))
        reads.update(getattr(mod, "READS", {}))
        # Optional: provider packages whose ids have a shape (Linode's are integers).
        if hasattr(mod, "resource_id"):
            ids[f"{pkg}:"] = mod.resource_id
    return resources, invokes, ids, reads


_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


def plain(value: Any) -> Any:
    """Inputs as a provider would see them: secret wrappers removed."""
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            return plain(value.get("value"))
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


class MissingInvokeMock(Exception):
    pass


class MissingReadMock(Exception):
    pass


class PreflightMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources, self.invokes, self.ids, self.reads = _load()

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        if args.custom is None and args.resource_id:  # a read (MockMonitor.ReadResource sets no `custom`)
            read = self.reads.get((args.typ, args.resource_id)) or self.reads.get((args.typ, "*"))
            if read is not None:
                return args.resource_id, read(args.resource_id)
            if args.typ.startswith("kubernetes:"):
                raise MissingReadMock(f"preflight has no mock for reading {args.typ} {args.resource_id}; add one in "
                                      "gpu_platform/preflight/mocks/")
        state = dict(args.inputs)
        fn = self.resources.get(args.typ)
        if fn is not None:
            state.update(fn(plain(args.inputs), args.name))
        make_id = self.ids.get(args.typ.split(":", 1)[0] + ":")
        return (make_id(args.name) if make_id else f"{args.name}-id"), state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list]:
        fn = self.invokes.get(args.token)
        if fn is None:
            raise MissingInvokeMock(
                f"preflight has no mock for invoke {args.token}; add one in gpu_platform/preflight/mocks/")
        return fn(plain(args.args)), []
