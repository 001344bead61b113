"""Run the real Pulumi program offline, under the SDK's mock monitor, and record what it registers.

This is what `pulumi preview` would hand the engine, minus the providers: every resource with its
type, name, parent and inputs (camelCase, exactly as serialized for the engine), plus stack outputs.
Outputs of resources and invokes come from `gpu_platform.preflight.mocks` (never from the program).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import yaml

from gpu_platform.config.base import NAMESPACE, UNDECRYPTABLE  # noqa: F401 (UNDECRYPTABLE re-exported)
from gpu_platform.project import Project, ProjectFileError, ProjectNotFound, find_project  # noqa: F401 (re-exported)

# The config namespace every program built from these components reads (`gpu-platform:cloud`, ...),
# whatever its own project is called: the one the config model reads.
CONFIG_NAMESPACE = NAMESPACE

# Sentinels of the Pulumi wire format (sdk/python/lib/pulumi/runtime/rpc.py).
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
SIG_KEY = "4dabf18193072939515e22adb298388d"
RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
REDACTED = "[secret]"
UNKNOWN_TEXT = "[unknown]"
# A `secure:` value preflight cannot decrypt stands in as UNDECRYPTABLE (gpu_platform/config/base.py; always
# marked secret).
# Provider credentials a stack's program requires that CI supplies at run time, per cloud (docs/ci.md). On cloud
# kubernetes the kubeconfig may also come from $KUBECONFIG: preflight plans with the stand-in either way, so a plan
# never depends on which cluster the machine running it points at. linode-registry:password is read only where
# the program builds into linode.imageRegistry.
RUN_TIME_CREDENTIALS = {"linode": ("linode:token", "linode-cluster:token", "linode-node-groups:token",
                                   "linode-registry:password"),
                        "kubernetes": ("kubernetes:kubeconfig", "checkpoint-store:accessKeyId",
                                       "checkpoint-store:secretAccessKey")}
# Credentials a stack file may hold only as `secure:` values (Pulumi encrypts those with the stack's secrets
# provider): in clear, the plaintext would reach the program, every copy of the config and whoever reads the
# repository. The providers' own secret settings (pulumi-linode `token`, pulumi-aws `secretKey` and `token`,
# pulumi-gcp `credentials` and `accessToken`, pulumi-kubernetes `kubeconfig`: the content, a path to a file is
# fine) and the program's own credential namespaces. Identifiers (aws:accessKey, checkpoint-store:accessKeyId)
# are not secrets on their own.
CLEAR_REFUSED = ("linode:token", "linode-cluster:token", "linode-node-groups:token", "linode-registry:password",
                 "linode-registry:pullPassword", "aws:secretKey", "aws:token", "gcp:credentials", "gcp:accessToken",
                 "checkpoint-store:secretAccessKey")
KUBECONFIG_KEY = "kubernetes:kubeconfig"


# ---------------------------------------------------------------------------------------------
# Stack files
# ---------------------------------------------------------------------------------------------


# Pulumi's own rule for stack names (pulumi/pulumi sdk/go/common/workspace: validateStackName,
# ^[A-Za-z0-9_.-]{1,100}$); names of dots only are refused too: the stack name is a folder under build/.
STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# Linux caps one environment string at 32 pages (MAX_ARG_STRLEN, 128 KiB), and the Pulumi language host
# hands the program its whole config in one: PULUMI_CONFIG=<json> (pulumi-language-python main.go).
MAX_CONFIG_ENV = 128 * 1024 - 1


class StackNotFound(FileNotFoundError):
    """No such stack or stack file (a usage error: exit 4)."""



class StackFileError(ValueError):
    """The stack file exists but is not a usable Pulumi stack file (exit 2). str() names the file."""


def valid_stack_name(name: str) -> bool:
    # Not starting with '.': build/<stack>/ must not be one of preflight's own folders (build/.cache).
    return bool(STACK_NAME.fullmatch(name)) and not name.startswith(".")


def _stack_name_problem(name: str) -> str:
    from gpu_platform.preflight.safe_yaml import printable

    return (f"{printable(repr(name))} is not a valid stack name: 1 to 100 letters, digits, '-', '_' or '.' (Pulumi's rule), "
            "not starting with '.' (preflight keeps its own folders, such as build/.cache, under dot-names)")


@dataclass
class StackInput:
    """The config the CLI would hand the program: namespaced keys -> strings, and which are secret."""

    stack: str
    config: dict[str, str]
    secret_keys: set[str]
    raw: dict[str, Any]  # bare `gpu-platform` keys -> typed YAML values (for error messages and costs)
    source: Optional[str] = None  # the stack file as the user named it (for error messages)
    project: Optional[Project] = None  # whose program runs (default: the working directory's project)

    @property
    def bare_secret_keys(self) -> set[str]:
        """Secret keys of the `gpu-platform` namespace, without the namespace."""
        prefix = f"{CONFIG_NAMESPACE}:"
        return {k[len(prefix):] for k in self.secret_keys if k.startswith(prefix)}


def _cli_string(value: Any) -> str:
    """How the Pulumi CLI passes a config value to a program: scalars as text, structures as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, allow_nan=False)
    return str(value)


def load_project(root: "Path | None" = None) -> dict[str, Any]:
    return (Project.load(root) if root is not None else find_project()).doc


def schema_defaults(project: dict[str, Any]) -> dict[str, Any]:
    """`config:` defaults of Pulumi.yaml, keyed like stack files (`gpu-platform:key`)."""
    out = {}
    for key, decl in (project.get("config") or {}).items():
        full = key if ":" in key else f"{project['name']}:{key}"
        if isinstance(decl, dict) and "default" in decl:
            out[full] = decl["default"]
        elif not isinstance(decl, dict):
            out[full] = decl
    return out


def _is_secure(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _without_ciphertext(value: Any) -> tuple[Any, bool]:
    """`secure:` values (also nested, from `pulumi config set --secret --path`) replaced by a stand-in;
    whether there was one. The ciphertext never goes further than this function."""
    if _is_secure(value):
        return UNDECRYPTABLE, True
    if isinstance(value, dict):
        found = False
        out = {}
        for k, v in value.items():
            out[k], f = _without_ciphertext(v)
            found = found or f
        return out, found
    if isinstance(value, list):
        pairs = [_without_ciphertext(v) for v in value]
        return [v for v, _ in pairs], any(f for _, f in pairs)
    return value, False


def _credential_in_clear(key: str, value: Any) -> bool:
    """A plaintext credential in a stack file: a CLEAR_REFUSED key with a value (not a `secure:` one), or a
    kubeconfig's content (more than one line, JSON, or a mapping) rather than the path to its file. Checked where
    a stack file is read (load_stack_file), not for a config built in code (tests stand in for CI's tokens)."""
    if value is None or value == "" or _is_secure(value):
        return False
    if key in CLEAR_REFUSED:
        return True
    if key == KUBECONFIG_KEY:
        text = value.strip() if isinstance(value, str) else ""
        return isinstance(value, (dict, list)) or "\n" in text or text.startswith("{") or ": " in text
    return False


def stack_input_from_mapping(stack: str, stack_config: dict[str, Any], project: Optional[Project] = None,
                             source: Optional[str] = None, written: Optional[dict[Any, str]] = None) -> StackInput:
    """Apply Pulumi.yaml defaults to a stack's `config:` mapping as the CLI would. `written`: the text of each
    top-level number as the file wrote it (safe_yaml.number_texts): the CLI hands the program that text, so
    `monthlyBudgetUsd: 0x5DC` is "0x5DC" to the program (and refused there), not 1500."""
    project = project or find_project()
    merged: dict[str, Any] = dict(schema_defaults(project.doc))
    secret_keys: set[str] = set()
    for key, value in (stack_config or {}).items():
        if written and key in written and _cli_string(value) != written[key]:
            value = written[key]
        full = key if ":" in key else f"{project.name}:{key}"
        # Encrypted with the stack's key: unknown here; the program sees it only as a secret.
        value, secret = _without_ciphertext(value)
        if secret:
            secret_keys.add(full)
        merged[full] = value
    prefix = f"{CONFIG_NAMESPACE}:"
    raw = {k[len(prefix):]: v for k, v in merged.items() if k.startswith(prefix)}
    # Deploy credentials are not in the stack file (a token that may read the stack could decrypt them):
    # CI passes them from the deploy environment at run time (docs/ci.md). Planned as unknown secrets.
    for key in RUN_TIME_CREDENTIALS.get(str(raw.get("cloud")), ()):
        if key not in merged:
            merged[key] = UNDECRYPTABLE
            secret_keys.add(key)
    config = {k: _cli_string(v) for k, v in merged.items()}
    size = len("PULUMI_CONFIG=") + len(json.dumps(config))
    if size > MAX_CONFIG_ENV:
        biggest = max(config, key=lambda k: len(config[k]))
        raise StackFileError(
            f"{source or project.shown(project.stacks_dir / stack_file_name(stack))}: the config is {size // 1024} KiB as the Pulumi CLI passes it to the "
            f"program (one PULUMI_CONFIG environment variable, which Linux limits to 128 KiB); the largest value is "
            f"{biggest} ({len(config[biggest]) // 1024} KiB): move large values out of the stack file")
    return StackInput(stack, config, secret_keys, raw, source, project)


def stack_file_name(stack: str) -> str:
    return f"Pulumi.{stack}.yaml"


def stack_names(stacks_dir: Path) -> list[str]:
    """The stacks that have a `Pulumi.<stack>.yaml` in `stacks_dir`, sorted."""
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in stacks_dir.glob("Pulumi.*.yaml"))


def load_stack(stack: str, project: Optional[Project] = None) -> StackInput:
    """The stack file `Pulumi.<stack>.yaml` in the project's stackConfigDir."""
    if not valid_stack_name(stack):
        raise StackNotFound(_stack_name_problem(stack))
    project = project or find_project()
    path = project.stacks_dir / stack_file_name(stack)
    if not path.is_file():
        known = stack_names(project.stacks_dir)
        raise StackNotFound(f"no stack file {project.shown(path)}; stacks: {', '.join(known) or 'none'}")
    return load_stack_file(path, project, shown=project.shown(path))


def load_stack_file(path: Path, project: Optional[Project] = None, shown: Optional[str] = None) -> StackInput:
    """A stack file anywhere; Pulumi.<stack>.yaml names the stack. Hostile content raises
    StackFileError naming `shown` (default: the path as given), never anything else."""
    from gpu_platform.preflight.safe_yaml import (MAX_BYTES, YamlInputError, decode_utf8, load_yaml_text, number_texts,
                                                  read_limited)

    from gpu_platform.config.approvals import one_line

    shown = shown or one_line(str(path))  # in one message line: a newline in a file name cannot forge a line
    if not os.path.lexists(path):
        raise StackNotFound(f"no stack file {shown}")
    if os.path.islink(path) and not os.path.exists(path):
        raise StackNotFound(f"{shown} is a symbolic link to a file that does not exist")
    if os.path.isdir(path):
        raise StackNotFound(f"{shown} is a directory, not a stack file")
    name = path.name
    stack = name[len("Pulumi."):-len(".yaml")] if name.startswith("Pulumi.") and name.endswith(".yaml") else path.stem
    if not valid_stack_name(stack):
        raise StackFileError(f"{shown}: the file name gives the stack name {_stack_name_problem(stack)}; "
                             "name the file Pulumi.<stack>.yaml")
    try:
        text = decode_utf8(read_limited(path, shown, MAX_BYTES), shown)
        doc = load_yaml_text(text, shown)
    except YamlInputError as exc:
        raise StackFileError(str(exc)) from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict) or not isinstance(doc.get("config") or {}, dict):
        raise StackFileError(f"{shown}: not a Pulumi stack file (a mapping with a `config:` mapping)")
    for key in doc.get("config") or {}:
        if ":" in key and not key.split(":", 1)[0]:
            raise StackFileError(f"{shown}: config key {key!r}: a namespace before ':' (e.g. {CONFIG_NAMESPACE}:cloud)")
    for key, value in (doc.get("config") or {}).items():
        if _credential_in_clear(key, value):
            how = (f"store it with `pulumi config set --secret {key}`" if key != KUBECONFIG_KEY else
                   f"store it with `pulumi config set --secret {key} < kubeconfig.yaml` (or give the path to the "
                   "file, or set $KUBECONFIG)")
            raise StackFileError(f"{one_line(key)}: a credential in clear in {shown}; {how} (Pulumi encrypts "
                                 "`secure:` values; docs/state-and-secrets.md)")
    return stack_input_from_mapping(stack, doc.get("config") or {}, project or find_project(), source=shown,
                                    written=number_texts(text, "config"))


# ---------------------------------------------------------------------------------------------
# What the program registered
# ---------------------------------------------------------------------------------------------


@dataclass
class PlannedResource:
    urn: str
    type: str
    name: str
    parent: Optional[str]
    custom: bool
    provider: Optional[str]
    dependencies: list[str]
    wire_inputs: dict[str, Any]  # as serialized for the engine (secret/unknown sentinels kept)
    outputs: dict[str, Any] = field(default_factory=dict)  # what the mocks answered
    # input property -> URNs its value came from (RegisterResource's propertyDependencies)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    # resource options the engine acts on at replacement/deletion: protect, deleteBeforeReplace,
    # ignoreChanges, replaceOnChanges, retainOnDelete
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> dict[str, Any]:
        """Inputs with secrets redacted and unknowns marked: safe to print and to write."""
        return redact(self.wire_inputs)

    @property
    def plain_inputs(self) -> dict[str, Any]:
        """Inputs with secret values unwrapped (what a policy sees); unknowns stay marked."""
        return unwrap(self.wire_inputs)


def _is_secret(v: Any) -> bool:
    return isinstance(v, dict) and v.get(SIG_KEY) == SECRET_SIG


def _is_resource_ref(v: Any) -> bool:
    return isinstance(v, dict) and v.get(SIG_KEY) == RESOURCE_SIG


def _walk(v: Any, on_secret: Callable[[Any], Any]) -> Any:
    """Wire value -> plain value: resource refs shown by URN, unknowns marked, secrets via on_secret."""
    if _is_secret(v):
        return on_secret(v.get("value"))
    if _is_resource_ref(v):
        return {"resourceRef": v.get("urn")}
    if v == UNKNOWN:
        return UNKNOWN_TEXT
    if isinstance(v, dict):
        return {k: _walk(x, on_secret) for k, x in v.items()}
    if isinstance(v, list):
        return [_walk(x, on_secret) for x in v]
    return v


def redact(v: Any) -> Any:
    return _walk(v, lambda _: REDACTED)


def unwrap(v: Any) -> Any:
    return _walk(v, unwrap)


@dataclass
class Plan:
    stack: str
    resources: list[PlannedResource]
    outputs: dict[str, Any]  # stack exports, wire form
    # What the program logged at warning level or above (pulumi.log.warn/error), in order: the CLI
    # would print these; preflight shows them once, in its verdict.
    warnings: list[str] = field(default_factory=list)
    project: str = CONFIG_NAMESPACE  # the Pulumi project's name (URNs, PULUMI_PROJECT)

    def by_type(self, type_token: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_token]

    def one(self, type_token: str, name_contains: str = "") -> PlannedResource:
        found = [r for r in self.by_type(type_token) if name_contains in r.name]
        if len(found) != 1:
            names = [r.name for r in self.by_type(type_token)]
            raise LookupError(f"expected one {type_token} named *{name_contains}*, found {len(found)}: {names}")
        return found[0]

    def children_of(self, urn: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.parent == urn]

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            # Sorted by URN with whole numbers as integers: two runs of the same stack write the same
            # bytes (registration order varies with output resolution), so plans diff cleanly in review.
            "resources": [
                {"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent,
                 "custom": r.custom, "inputs": whole_numbers(r.inputs)}
                for r in sorted(self.resources, key=lambda r: r.urn)
            ],
            "outputs": whole_numbers(redact(self.outputs)),
        }


def whole_numbers(value: Any) -> Any:
    """Integral floats as integers (the engine's protobuf Struct carries every number as a double:
    `minSize=0.0` is shown `minSize=0`), recursively; other values unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Running the program
# ---------------------------------------------------------------------------------------------


class ProgramError(Exception):
    """The program raised while running under mocks (a bug, or a pulumi.RunError)."""


def _recording_monitor(mocks: Any, sink: list[PlannedResource], outputs: dict[str, Any]):
    from google.protobuf import json_format
    from pulumi.runtime.mocks import MockMonitor

    class RecordingMonitor(MockMonitor):
        def RegisterResource(self, request):  # noqa: N802 (gRPC name)
            response = super().RegisterResource(request)
            if request.type != "pulumi:pulumi:Stack":
                sink.append(PlannedResource(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    parent=request.parent or None,
                    custom=bool(request.custom),
                    provider=request.provider or None,
                    dependencies=list(request.dependencies),
                    property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
                    wire_inputs=json_format.MessageToDict(request.object),
                    outputs=json_format.MessageToDict(response.object) if response.object else {},
                    options={"protect": bool(request.protect), "deleteBeforeReplace": bool(request.deleteBeforeReplace),
                             "ignoreChanges": list(request.ignoreChanges),
                             "replaceOnChanges": list(request.replaceOnChanges),
                             "retainOnDelete": bool(request.retainOnDelete)},
                ))
            return response

        def RegisterResourceOutputs(self, request):  # noqa: N802
            if request.urn.endswith("::pulumi:pulumi:Stack::" + request.urn.split("::")[-1]) and "pulumi:pulumi:Stack" in request.urn:
                outputs.update(json_format.MessageToDict(request.outputs))
            return super().RegisterResourceOutputs(request)

    return RecordingMonitor(mocks)


def run_program(stack_input: StackInput, program: Optional[Callable[[], None]] = None, preview: bool = True) -> Plan:
    """Run `program` (default: the project's program, in its folder) under mocks; return what it registered."""
    import pulumi
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockEngine, MockSettings
    from pulumi.runtime.stack import run_in_stack

    from gpu_platform.preflight.linear_wait import linear_output_wait
    from gpu_platform.preflight.mocks import PreflightMocks

    project = stack_input.project or find_project()
    resources: list[PlannedResource] = []
    outputs: dict[str, Any] = {}
    logged: list[str] = []
    monitor = _recording_monitor(PreflightMocks(), resources, outputs)

    class RecordingEngine(MockEngine):
        def Log(self, request):  # noqa: N802 (gRPC name)
            from pulumi.runtime.proto import engine_pb2

            if request.severity in (engine_pb2.WARNING, engine_pb2.ERROR):
                logged.append(request.message)

    # Fresh runtime state for every run (tests run many programs in one process).
    settings.reset_options()
    pulumi.runtime.set_all_config(stack_input.config, sorted(stack_input.secret_keys))
    settings.configure(MockSettings(
        monitor=monitor,
        monitor_features=set(monitor.GetDeploymentInfo(None).supportedFeatures),
        engine=RecordingEngine(None),
        project=project.name,
        stack=stack_input.stack,
        dry_run=preview,
        organization="organization",
        callbacks=None,
    ))
    settings.set_root_resource(None)  # type: ignore[arg-type]

    if program is None:
        def program() -> None:
            # As the Python language host runs it: the program's folder first on sys.path.
            folder = str(project.program.parent)
            sys.path.insert(0, folder) if folder not in sys.path else None
            runpy.run_path(str(project.program), run_name="__pulumi_program__")

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    old_cwd = os.getcwd()
    os.chdir(project.root)
    try:
        with _without_source_positions(), linear_output_wait():
            loop.run_until_complete(run_in_stack(program))
    except BaseException as exc:
        # A program that stops (a RunError from an Output, a check at deploy; any other exception an apply or the
        # program raises; Ctrl-C) leaves the registrations waiting on it pending and its futures unretrieved. The
        # error is reported once, here or by the caller: the loop is dropped without reporting each of them again
        # when they are collected ("Task was destroyed but it is pending", "Future exception was never retrieved",
        # a hundred lines at the end of a test run that had passed).
        loop.set_exception_handler(lambda _loop, _context: None)
        if isinstance(exc, pulumi.RunError):
            raise ProgramError(str(exc)) from None
        raise
    finally:
        os.chdir(old_cwd)
        asyncio.set_event_loop(None)
        loop.close()  # last: the caller's folder is back even if closing fails
    return Plan(stack_input.stack, resources, outputs, logged, project.name)


@contextlib.contextmanager
def _without_source_positions() -> Iterator[None]:
    """The SDK walks the whole Python stack (traceback.extract_stack, every frame's source line) for each
    resource it registers, to send the engine the program line that created it; the recording monitor drops
    it, and it was a sixth of a plan's time. For the run only: an empty trace, hence no source position
    (pulumi/runtime/resource.py `_get_stack_trace`, `_get_source_position` of an empty trace is None).
    An SDK without the hook is left as it is."""
    from pulumi.runtime import resource as sdk_resource

    original = getattr(sdk_resource, "_get_stack_trace", None)
    trace_type = getattr(getattr(sdk_resource, "source_pb2", None), "StackTrace", None)
    if original is None or trace_type is None:
        yield
        return
    sdk_resource._get_stack_trace = trace_type
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = original
