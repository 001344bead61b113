"""Run the policy pack on a preflight plan the way the Pulumi CLI does, over the Analyzer gRPC API.

What `pulumi preview --policy-pack gpu_platform/policies` does, and what this module mirrors (pulumi/pulumi
sdk/go/common/resource/plugin/analyzer_plugin.go and pkg/resource/deploy/step_generator.go):
1. start an engine gRPC server (Log, GetRootResource, SetRootResource) and the pack as a plugin:
   `python -u -m pulumi.policy <engine-address> gpu_platform/policies` with PULUMI_PROJECT/STACK/DRY_RUN/
   ORGANIZATION and PULUMI_CONFIG (the stack config as JSON) in its environment; the pack prints
   its port on stdout. A pack that exits before printing a port fails loudly with its stderr;
2. Handshake (the Python pack answers UNIMPLEMENTED, which the CLI tolerates), ConfigureStack,
   GetAnalyzerInfo; the policy config is reconciled like the CLI's ReconcilePolicyPackConfig
   (schema defaults, then "all", then per-policy levels and knobs; validated against each
   policy's JSON schema) and sent with Configure;
3. Analyze for every resource the program registered, in registration order, with its inputs
   (secrets as secret-signature objects, unknowns as the unknown sentinel, top-level "__" keys
   dropped), its options and its provider resource; then AnalyzeStack once with every resource,
   its outputs, parent, dependencies and property dependencies;
4. close the plugin (the process is interrupted, then killed if it lingers).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from gpu_platform.components.paths import PACKAGE_DIR
from gpu_platform.preflight.runner import CONFIG_NAMESPACE, Plan, PlannedResource, Project, find_project

# The pack ships inside the package: the same rules for every program built from its components.
PACK_DIR = PACKAGE_DIR / "policies"
LEVELS = ("advisory", "mandatory", "remediate", "disabled")
_MAX_MESSAGE = 400 * 1024 * 1024
_GRPC_OPTIONS = [("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.max_send_message_length", _MAX_MESSAGE)]


class PolicyPackError(RuntimeError):
    """The pack could not start, or died while analyzing; the message carries its stderr."""


class PolicyConfigError(ValueError):
    """A policy config (stacks/policy.<stack>.yaml) names an unknown policy, level or knob."""


class PolicyPackIncomplete(PolicyPackError):
    """The pack that ran lacks a policy the project ships (gpu_platform/policies/enforcement.yaml): no verdict."""


class PolicyTimeout(PolicyPackError):
    """An analyzer call passed its deadline; the message names the policy that was running."""


# ---------------------------------------------------------------------------------------------
# The project's enforcement rules (gpu_platform/policies/enforcement.yaml)
# ---------------------------------------------------------------------------------------------

from gpu_platform.policies.locks import ENFORCEMENT_FILE, Enforcement, guarded, judge, parse_enforcement  # noqa: E402
from gpu_platform.policies.stack_settings import CONFIG_FILE_ENV  # noqa: E402


def load_enforcement(path: Path = ENFORCEMENT_FILE) -> Enforcement:
    from gpu_platform.preflight.safe_yaml import YamlInputError, load_yaml_file

    try:
        return parse_enforcement(load_yaml_file(path), str(path))
    except (YamlInputError, ValueError) as exc:
        raise PolicyPackError(f"cannot read the pack's enforcement rules: {exc}") from None


def enforce_locks(reconciled: dict[str, tuple[str, dict[str, Any]]], defaults: dict[str, tuple[str, dict[str, Any]]],
                  stack: str, enforcement: Enforcement, where: str) -> tuple[dict[str, list[str]], list[str]]:
    """Undo what a stack's policy config does to a mandatory policy (level lowered, ceiling raised) unless
    a valid exception allows it: for a locked policy one in enforcement.yaml, for another one its
    `exception` setting (gpu_platform/policies/locks.py). `defaults`: each policy as the pack declares it.
    Returns (refusals per policy, exceptions applied) and fixes `reconciled` in place."""
    refused: dict[str, list[str]] = {}
    applied: list[str] = []
    for name, (declared, base_props) in defaults.items():
        needs, base_level = guarded(name, declared, enforcement.locked)
        if not needs or name not in reconciled:
            continue
        level, props = reconciled[name]
        problem, allowed = judge(name, level, props, base_level, base_props, locked=name in enforcement.locked,
                                 enforcement=enforcement, stack=stack, where=where)
        if allowed:
            applied.append(allowed)
        if problem:
            refused[name] = [problem]
            reconciled[name] = (base_level, {**base_props, **{k: v for k, v in props.items() if k == "exemptPools"}})
    return refused, applied


def declared_policies(info: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each policy as the pack declares it (level, schema defaults), before any config; a locked policy
    declared below mandatory is refused by `Analyzer.start`."""
    from google.protobuf import json_format
    from pulumi.runtime.proto import analyzer_pb2

    names = {analyzer_pb2.ADVISORY: "advisory", analyzer_pb2.MANDATORY: "mandatory",
             analyzer_pb2.DISABLED: "disabled", analyzer_pb2.REMEDIATE: "remediate"}
    out = {}
    for p in info.policies:
        schema = json_format.MessageToDict(p.configSchema.properties)
        out[p.name] = (names.get(p.enforcementLevel, "advisory"),
                       {k: v["default"] for k, v in schema.items() if isinstance(v, dict) and "default" in v})
    return out


# ---------------------------------------------------------------------------------------------
# Policy config files
# ---------------------------------------------------------------------------------------------


def policy_config_path(stack: str, project: Optional[Project] = None) -> Path:
    """policy.<stack>.yaml beside the stack files (the project's stackConfigDir)."""
    return (project or find_project()).stacks_dir / f"policy.{stack}.yaml"


def load_policy_config(stack: str, path: "str | Path | None" = None, *,
                       project: Optional[Project] = None) -> Optional[dict[str, Any]]:
    """The stack's policy config: `path` when given (it must exist), else policy.<stack>.yaml beside
    the stack files when present, else None (the pack's defaults).

    Same shape as the CLI's `--policy-pack-config` JSON file: policy name (or "all") -> an
    enforcement level, or a mapping of `enforcementLevel` and the policy's settings. Levels and the
    shape are checked here; policy names and settings against the pack's schemas in `analyze`."""
    from gpu_platform.config.approvals import one_line

    project = project or find_project()
    if path is None:
        file = policy_config_path(stack, project)
        if not file.exists():
            return None
    else:
        file = Path(path)
        if not file.exists():
            raise PolicyConfigError(f"policy config file {one_line(str(file))} does not exist")
    shown = one_line(str(project.shown(file)))
    from gpu_platform.preflight.safe_yaml import YamlInputError, load_yaml_file

    try:
        doc = load_yaml_file(file, str(shown))
    except YamlInputError as exc:
        raise PolicyConfigError(str(exc)) from None
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise PolicyConfigError(f"{shown}: must map policy names to a level or a mapping")
    where = _secure_value(doc)
    if where is not None:
        # Never echoed: a ciphertext in an error message or preflight.json is a ciphertext published.
        raise PolicyConfigError(f"{shown}: {where}: a `secure:` value; a policy config holds no secrets "
                                "(Pulumi does not decrypt it): write the plain setting")
    _parse_config(doc, str(shown))
    return doc


def _secure_value(value: Any, path: str = "") -> Optional[str]:
    """The path of the first Pulumi `{secure: ...}` value in a policy config, or None."""
    if isinstance(value, dict):
        if "secure" in value:
            return path or "(top level)"
        for k, v in value.items():
            found = _secure_value(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _secure_value(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _parse_config(config: Mapping[str, Any], where: str) -> dict[str, tuple[Optional[str], dict[str, Any]]]:
    """CLI parsePolicyPackConfig: name -> (enforcement level or None, knobs)."""
    out: dict[str, tuple[Optional[str], dict[str, Any]]] = {}
    for name, value in config.items():
        if isinstance(value, str):
            level, props = value, {}
        elif isinstance(value, Mapping):
            props = dict(value)
            level = props.pop("enforcementLevel", None)
        else:
            raise PolicyConfigError(f"{where}: {name}: {value!r} is not a valid value; must be a level or a mapping")
        if level is not None and level not in LEVELS:
            raise PolicyConfigError(f"{where}: {name}: {level!r} is not an enforcement level ({', '.join(LEVELS)})")
        out[str(name)] = (level, props)
    return out


def reconcile_config(info: Any, config: Optional[Mapping[str, Any]], where: str = "policy config"
                     ) -> dict[str, tuple[str, dict[str, Any]]]:
    """CLI ReconcilePolicyPackConfig over the pack's AnalyzerInfo: defaults from each policy's schema,
    the pack's initial config, then `config` ("all" first); validated against the schemas. Stricter
    than the CLI: an unknown policy name or knob is an error (a typo must not silently disable a knob)."""
    import jsonschema
    from google.protobuf import json_format

    from pulumi.runtime.proto import analyzer_pb2

    level_names = {analyzer_pb2.ADVISORY: "advisory", analyzer_pb2.MANDATORY: "mandatory",
                   analyzer_pb2.DISABLED: "disabled", analyzer_pb2.REMEDIATE: "remediate"}
    schemas = {p.name: json_format.MessageToDict(p.configSchema.properties) for p in info.policies}
    required = {p.name: list(p.configSchema.required) for p in info.policies}
    result: dict[str, tuple[str, dict[str, Any]]] = {}
    for p in info.policies:
        defaults = {k: v["default"] for k, v in schemas[p.name].items() if isinstance(v, dict) and "default" in v}
        result[p.name] = (level_names[p.enforcementLevel], defaults)
    layers = [{k: (level_names[v.enforcementLevel], json_format.MessageToDict(v.properties))
               for k, v in info.initialConfig.items()}]
    if config:
        layers.append(_parse_config(config, where))
    for layer in layers:
        if "all" in layer and layer["all"][0]:
            result = {k: (layer["all"][0], props) for k, (_, props) in result.items()}
        for name, (level, props) in layer.items():
            if name == "all":
                if props:
                    raise PolicyConfigError(f"{where}: all: only an enforcement level applies to all policies")
                continue
            if name not in result:
                from gpu_platform.config.stack import did_you_mean

                guess = did_you_mean(name, result)
                hint = f" (did you mean {guess}?)" if guess else ""
                raise PolicyConfigError(f"{where}: unknown policy {name!r}{hint}; policies: {', '.join(sorted(result))}")
            unknown = sorted(set(props) - set(schemas[name]))
            if unknown:
                from gpu_platform.config.stack import did_you_mean

                knobs = ", ".join(sorted(schemas[name])) or "none"
                guesses = [g for g in (did_you_mean(u, schemas[name]) for u in unknown) if g]
                hint = f" (did you mean {', '.join(guesses)}?)" if guesses else ""
                raise PolicyConfigError(f"{where}: {name}: unknown setting(s) {', '.join(unknown)}{hint}; settings: {knobs}")
            old_level, old_props = result[name]
            result[name] = (level or old_level, {**old_props, **props})
    for name, (_, props) in result.items():
        schema = {"type": "object", "properties": schemas[name]}
        if required[name]:
            schema["required"] = required[name]
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(props), key=str)
        if errors:
            e = errors[0]
            path = ".".join(str(x) for x in e.absolute_path) or "(root)"
            raise PolicyConfigError(f"{where}: {name}.{path}: {e.message}")
    return result


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass
class PolicyMessage:
    level: str  # advisory | mandatory (as the pack reported it)
    message: str
    urn: Optional[str]


@dataclass
class PolicyResult:
    name: str
    description: str
    enforcement_level: str  # as configured for this run
    messages: list[PolicyMessage] = field(default_factory=list)

    @property
    def status(self) -> str:
        """pass | advisory | mandatory (| disabled)."""
        if self.enforcement_level == "disabled":
            return "disabled"
        if any(m.level == "mandatory" for m in self.messages):
            return "mandatory"
        return "advisory" if self.messages else "pass"


@dataclass
class PolicyReport:
    pack: str
    version: str
    stack: str
    resources_analyzed: int
    results: list[PolicyResult]
    logs: list[str] = field(default_factory=list)  # what the pack logged (engine Log calls, stderr)
    # Exemptions and approvals in force for this run (exceptions to locked policies, exemptPools with
    # their reasons, on-demand approvals recorded on the resources): reviewers see who allowed what.
    approvals: list[str] = field(default_factory=list)
    # The stack's cloud: a policy about another cloud's resources shows as n/a, not as a pass.
    cloud: Optional[str] = None

    @property
    def mandatory_violations(self) -> int:
        return sum(1 for r in self.results for m in r.messages if m.level == "mandatory")

    @property
    def advisory_violations(self) -> int:
        return sum(1 for r in self.results for m in r.messages if m.level != "mandatory")

    def result(self, name: str) -> PolicyResult:
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"no policy {name!r} in pack {self.pack}; policies: {', '.join(r.name for r in self.results)}")

    def render(self, explained: Optional[dict[str, str]] = None) -> str:
        """The table and each violation. `explained` maps a long text that another block of the same output
        gives in full (the bill's refusal) to where it is: a message holding it keeps only its first clause
        and points there, so a reader meets the long text once."""
        width = max([len(r.name) for r in self.results] + [6])
        lines = [f"Policy pack {self.pack}@{self.version} on stack {self.stack} "
                 f"({len(self.results)} policies, {self.resources_analyzed} resources analyzed)",
                 f"  {'POLICY'.ljust(width)}  {'LEVEL'.ljust(9)}  RESULT"]
        for r in self.results:
            n = len(r.messages)
            detail = f" ({n} violation{'s' if n != 1 else ''})" if n else ""
            status = r.status
            if status == "pass" and not r.messages:
                from gpu_platform.costs.catalog import CLOUD_TITLES, a_cloud
                from gpu_platform.preflight.review import POLICY_CLOUD, not_applicable

                if not_applicable(r.name, self.cloud):
                    status = f"n/a ({CLOUD_TITLES.get(POLICY_CLOUD[r.name], POLICY_CLOUD[r.name])} resources; this is {a_cloud(self.cloud)} stack)"
            lines.append(f"  {r.name.ljust(width)}  {r.enforcement_level.ljust(9)}  {status}{detail}")
        for r in self.results:
            for m in r.messages:
                text = m.message
                for long, where in (explained or {}).items():
                    if long and long in text:
                        text = text.replace(long, f"{long.split(': ', 1)[0]} (why, and what to do: {where})")
                text = text.replace("\n", "\n      ")
                lines.append(f"  [{m.level}] {r.name}: {text}")
                if m.urn:
                    lines.append(f"      resource: {m.urn}")
        for a in self.approvals:
            lines.append(f"  approved: {a}")
        for log in self.logs:
            lines.append(f"  pack log: {log}")
        verdict = (f"{self.mandatory_violations} mandatory violation(s)" if self.mandatory_violations
                   else "no mandatory violation")
        lines.append(f"  => {verdict}, {self.advisory_violations} advisory")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "pack": self.pack, "version": self.version, "stack": self.stack,
            "resourcesAnalyzed": self.resources_analyzed, "mandatoryViolations": self.mandatory_violations,
            "approvals": list(self.approvals),
            "policies": [{"name": r.name, "enforcementLevel": r.enforcement_level, "status": r.status,
                          "violations": [{"level": m.level, "message": m.message, "urn": m.urn} for m in r.messages]}
                         for r in self.results],
        }


# ---------------------------------------------------------------------------------------------
# The engine side: what the CLI serves to plugins
# ---------------------------------------------------------------------------------------------


def _engine_servicer(logs: list[str]):
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc

    severities = {engine_pb2.DEBUG: "debug", engine_pb2.INFO: "info", engine_pb2.WARNING: "warning",
                  engine_pb2.ERROR: "error"}

    class Engine(engine_pb2_grpc.EngineServicer):
        root = ""

        def Log(self, request, context):  # noqa: N802 (gRPC name)
            logs.append(f"{severities.get(request.severity, 'info')}: {request.message}")
            return empty_pb2.Empty()

        def GetRootResource(self, request, context):  # noqa: N802
            return engine_pb2.GetRootResourceResponse(urn=self.root)

        def SetRootResource(self, request, context):  # noqa: N802
            self.root = request.urn
            return engine_pb2.SetRootResourceResponse()

    return Engine()


# ---------------------------------------------------------------------------------------------
# Wire format of resources
# ---------------------------------------------------------------------------------------------


def _struct(value: Mapping[str, Any]):
    from google.protobuf import json_format, struct_pb2

    # MarshalOptions{SkipInternalKeys: true}: the engine drops top-level "__" keys (e.g. __defaults).
    return json_format.ParseDict({k: v for k, v in (value or {}).items() if not k.startswith("__")},
                                 struct_pb2.Struct())


def _stack_resource(plan: Plan) -> PlannedResource:
    """The root pulumi:pulumi:Stack resource, which the engine analyzes too (the runner leaves it out)."""
    urn = next((r.parent for r in plan.resources if r.parent and r.parent.endswith(
        f"::pulumi:pulumi:Stack::{plan.project}-{plan.stack}")), None)
    urn = urn or f"urn:pulumi:{plan.stack}::{plan.project}::pulumi:pulumi:Stack::{plan.project}-{plan.stack}"
    return PlannedResource(urn=urn, type="pulumi:pulumi:Stack", name=f"{plan.project}-{plan.stack}", parent=None,
                           custom=False, provider=None, dependencies=[], wire_inputs={}, outputs=dict(plan.outputs))


# ---------------------------------------------------------------------------------------------
# The analyzer plugin
# ---------------------------------------------------------------------------------------------


def pack_stack_config(stack_config: Mapping[str, str]) -> dict[str, str]:
    """What the pack is handed of the stack config: the `gpu-platform` namespace only, which is all it reads
    (policies/stack_settings.py, cost_rules.py) and never holds a secret (the config refuses `secure:` values
    there). Provider credentials (linode:token, aws:secretKey, a kubeconfig, ...) and their stand-ins never reach
    the pack's environment or a file."""
    prefix = f"{CONFIG_NAMESPACE}:"
    return {k: v for k, v in stack_config.items() if isinstance(k, str) and k.startswith(prefix)}


class Analyzer:
    """One running policy pack. `with Analyzer() as a: report = a.analyze(plan)`; reusable across plans.

    `stack_config`: the stack's config as the CLI hands it to plugins (PULUMI_CONFIG), fixed for the
    life of the process (the cost ceiling reads gpu-platform:priceOverrides from it)."""

    def __init__(self, pack_dir: Path = PACK_DIR, *, stack: str = "preflight", project: str = CONFIG_NAMESPACE,
                 stack_config: Optional[Mapping[str, str]] = None, startup_timeout: float = 60.0,
                 python: str = sys.executable, call_timeout: float = 120.0,
                 enforcement: Optional[Enforcement] = None) -> None:
        """`call_timeout`: deadline of every analyzer call (a hung rule fails the run naming itself).
        `enforcement`: shipped/locked policies; default: gpu_platform/policies/enforcement.yaml for the project's
        own pack, none for another pack (tests build their own)."""
        self.call_timeout = call_timeout
        self.enforcement = enforcement if enforcement is not None else (
            load_enforcement() if Path(pack_dir).resolve() == PACK_DIR.resolve() else Enforcement((), (), ()))
        self._config_dir: Optional[str] = None
        self.refused: dict[str, list[str]] = {}
        self.exceptions_applied: list[str] = []
        self.pack_dir = Path(pack_dir).resolve()
        self.stack, self.project = stack, project
        self.stack_config = dict(stack_config or {})
        self.startup_timeout = startup_timeout
        self.python = python
        self.logs: list[str] = []
        self._stderr: list[str] = []
        self._proc: Optional[subprocess.Popen] = None
        self._engine = None
        self._channel = None
        self.stub = None
        self.info = None
        self.version = ""

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> "Analyzer":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _pack_manifest(self) -> dict[str, Any]:
        path = self.pack_dir / "PulumiPolicy.yaml"
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise PolicyPackError(f"failed to load Pulumi policy project located at {self.pack_dir}: {exc}") from None
        runtime = doc.get("runtime") if isinstance(doc, dict) else None
        name = runtime.get("name") if isinstance(runtime, dict) else runtime
        if name != "python":
            raise PolicyPackError(f"{path}: runtime must be python, found {name!r}")
        return doc

    def start(self) -> None:
        import grpc
        from pulumi.runtime.proto import analyzer_pb2_grpc, engine_pb2_grpc

        manifest = self._pack_manifest()
        self.version = str(manifest.get("version") or "")

        self._engine = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=_GRPC_OPTIONS)
        engine_pb2_grpc.add_EngineServicer_to_server(_engine_servicer(self.logs), self._engine)
        engine_port = self._engine.add_insecure_port("127.0.0.1:0")
        self._engine.start()
        self.engine_address = f"127.0.0.1:{engine_port}"

        env = dict(os.environ)
        env.update({"PULUMI_PROJECT": self.project, "PULUMI_STACK": self.stack, "PULUMI_DRY_RUN": "true",
                    "PULUMI_ORGANIZATION": "organization"})
        env.pop("PULUMI_CONFIG", None)
        env.pop(CONFIG_FILE_ENV, None)
        config = pack_stack_config(self.stack_config)
        if config:
            text = json.dumps(config)
            if len(text) < 100 * 1024:
                env["PULUMI_CONFIG"] = text  # as the CLI passes it; no copy on disk
            else:
                # Too big for one environment string (capped at 128 KiB: E2BIG): in a file the pack reads and
                # deletes at start-up (policies/lifeline.py). It holds gpu-platform values only, never a credential.
                import tempfile

                self._config_dir = tempfile.mkdtemp(prefix="gpu-platform-policy-")
                config_file = os.path.join(self._config_dir, "stack-config.json")
                with open(os.open(config_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
                    f.write(text)
                env[CONFIG_FILE_ENV] = config_file
        # Like the CLI: the pack's folder is the program (its __main__.py puts the package on sys.path).
        # A pipe on stdin that this process never writes: the pack exits at its end of file, i.e. when this
        # process is gone however it ended (SIGKILL included), and deletes the config file once read
        # (gpu_platform/policies/lifeline.py).
        from gpu_platform.policies.lifeline import LIFELINE_ENV

        env[LIFELINE_ENV] = "1"
        self._proc = subprocess.Popen(
            [self.python, "-u", "-m", "pulumi.policy", self.engine_address, str(self.pack_dir)],
            cwd=self.pack_dir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # No orphan: whatever ends this process (an exception, sys.exit), the pack goes with it.
        import atexit

        atexit.register(self._stop_process)
        lines: "queue.Queue[Optional[str]]" = queue.Queue()
        threading.Thread(target=self._pump, args=(self._proc.stdout, lines), daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._pump_stderr, daemon=True)
        self._stderr_thread.start()
        try:
            first = lines.get(timeout=self.startup_timeout)
        except queue.Empty:
            self._fail(f"the policy pack printed no port within {self.startup_timeout:.0f}s")
        port = (first or "").strip()
        if not port.isdigit():
            self._fail("the policy pack exited before serving" if first is None
                       else f"the policy pack printed {port!r} instead of its port")

        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=_GRPC_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.startup_timeout)
        except grpc.FutureTimeoutError:
            self._fail(f"the policy pack did not answer on port {port}")
        self.stub = analyzer_pb2_grpc.AnalyzerStub(self._channel)
        self._handshake()
        if self._config_dir is not None and not os.listdir(self._config_dir):
            # The pack has read and deleted the config file (policies/lifeline.py): nothing left to clean up.
            os.rmdir(self._config_dir)
            self._config_dir = None
        self.info = self._call("GetAnalyzerInfo", _empty())
        missing = sorted(set(self.enforcement.shipped) - {p.name for p in self.info.policies})
        declared = declared_policies(self.info)
        lowered = sorted(n for n in self.enforcement.locked if n in declared and declared[n][0] != "mandatory")
        if lowered:
            self.close()
            raise PolicyPackIncomplete(
                f"the policy pack {self.pack_dir} declares the locked polic{'y' if len(lowered) == 1 else 'ies'} "
                f"{', '.join(f'{n} {declared[n][0]}' for n in lowered)}; locked policies "
                "(gpu_platform/policies/enforcement.yaml) are mandatory whatever declares them; no verdict")
        if missing:
            self.close()
            raise PolicyPackIncomplete(
                f"the policy pack {self.pack_dir} lacks {len(missing)} polic{'y' if len(missing) == 1 else 'ies'} "
                f"the project ships: {', '.join(missing)} (gpu_platform/policies/enforcement.yaml lists them); no verdict")

    def _pump(self, stream, lines: "queue.Queue[Optional[str]]") -> None:
        first = True
        for raw in iter(stream.readline, b""):
            text = raw.decode(errors="replace").rstrip("\n")
            if first:
                lines.put(text)
                first = False
            elif text:
                self.logs.append(text)
        if first:
            lines.put(None)

    def _pump_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for raw in iter(self._proc.stderr.readline, b""):
            text = raw.decode(errors="replace").rstrip("\n")
            self._stderr.append(text)
            if text.strip():
                self.logs.append(text)

    def _fail(self, what: str) -> None:
        stderr = self._stop_process()
        raise PolicyPackError(f"policy pack {self.pack_dir} failed to start: {what}"
                              + (f"\n--- pack stderr ---\n{stderr}" if stderr else " (no stderr)"))

    def _stop_process(self) -> str:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            # The lifeline (policies/lifeline.py): at the end of its stdin the pack exits at once; SIGINT
            # (the pack stops its gRPC server on KeyboardInterrupt) takes a second of interpreter shutdown,
            # and is left for a pack that did not install the lifeline.
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        if proc is not None:
            thread = getattr(self, "_stderr_thread", None)
            if thread is not None:
                thread.join(timeout=5)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if self._engine is not None:
            self._engine.stop(None)
            self._engine = None
        if self._config_dir is not None:
            import shutil

            shutil.rmtree(self._config_dir, ignore_errors=True)
            self._config_dir = None
        self._proc = None
        return "\n".join(self._stderr).strip()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._stop_process()

    # -- RPCs -----------------------------------------------------------------------------------

    def _running_policies(self) -> str:
        """Ask the pack which policy it is in (gpu_platform/policies/running.py answers SIGUSR1 on stderr)."""
        import time

        from gpu_platform.policies.running import MARKER

        proc = self._proc
        if proc is None or proc.poll() is not None or not hasattr(signal, "SIGUSR1"):
            return ""
        seen = len(self._stderr)
        proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for line in self._stderr[seen:]:
                if line.startswith(MARKER):
                    return line[len(MARKER):].strip()
            time.sleep(0.05)
        return ""

    def _call(self, method: str, request: Any, what: str = "") -> Any:
        import grpc

        if self.stub is None:
            raise PolicyPackError("the policy pack is not running (call start() or use `with Analyzer()`)")
        try:
            return getattr(self.stub, method)(request, timeout=self.call_timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                running = self._running_policies()
                if self._proc is not None and self._proc.poll() is None:
                    self._proc.kill()  # a rule in a loop never returns; SIGINT would wait on it
                self.close()
                raise PolicyTimeout(
                    f"policy {running or '(unknown: the pack did not say)'} did not finish {method}"
                    f"{' of ' + what if what else ''} within {self.call_timeout:g}s; the pack was stopped") from None
            crashed = self._proc is None or self._proc.poll() is not None
            stderr = "\n".join(self._stderr[-40:]).strip()
            raise PolicyPackError(f"policy pack {method} failed: {exc.code().name}: {exc.details()}"
                                  + (" (the pack process exited)" if crashed else "")
                                  + (f"\n--- pack stderr ---\n{stderr}" if stderr else "")) from None

    def _handshake(self) -> None:
        import grpc
        from pulumi.runtime.proto import analyzer_pb2

        req = analyzer_pb2.AnalyzerHandshakeRequest(engine_address=self.engine_address,
                                                    root_directory=str(self.pack_dir),
                                                    program_directory=str(self.pack_dir))
        try:
            self.stub.Handshake(req, timeout=self.call_timeout)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:  # the CLI falls back when unimplemented
                raise PolicyPackError(f"policy pack Handshake failed: {exc.code().name}: {exc.details()}") from None

    def configure(self, policy_config: Optional[Mapping[str, Any]] = None, where: str = "policy config",
                  stack: Optional[str] = None) -> dict[str, tuple[str, dict[str, Any]]]:
        from pulumi.runtime.proto import analyzer_pb2

        levels = {"advisory": analyzer_pb2.ADVISORY, "mandatory": analyzer_pb2.MANDATORY,
                  "remediate": analyzer_pb2.REMEDIATE, "disabled": analyzer_pb2.DISABLED}
        reconciled = reconcile_config(self.info, policy_config, where)
        self.refused, self.exceptions_applied = enforce_locks(
            reconciled, declared_policies(self.info), stack or self.stack, self.enforcement, where)
        request = analyzer_pb2.ConfigureAnalyzerRequest()
        for name, (level, props) in reconciled.items():
            request.policyConfig[name].CopyFrom(
                analyzer_pb2.PolicyConfig(enforcementLevel=levels[level], properties=_struct(props)))
        self._call("Configure", request)
        return reconciled

    def analyze(self, plan: Plan, policy_config: Optional[Mapping[str, Any]] = None,
                where: str = "policy config") -> PolicyReport:
        """Configure the pack, then Analyze every resource and AnalyzeStack once; the report."""
        from pulumi.runtime.proto import analyzer_pb2

        # The CLI configures the stack when it loads the pack, then the policies.
        self._call("ConfigureStack", analyzer_pb2.AnalyzerStackConfigureRequest(
            stack=plan.stack, project=plan.project, organization="organization", dry_run=True,
            config=_struct(self.stack_config)))
        reconciled = self.configure(policy_config, where, plan.stack)

        resources = [_stack_resource(plan)] + list(plan.resources)
        by_urn = {r.urn: r for r in resources}
        results = {p.name: PolicyResult(p.name, p.description, reconciled[p.name][0]) for p in self.info.policies}
        level_names = {analyzer_pb2.ADVISORY: "advisory", analyzer_pb2.MANDATORY: "mandatory",
                       analyzer_pb2.REMEDIATE: "mandatory", analyzer_pb2.DISABLED: "disabled"}

        def collect(response: Any, default_urn: Optional[str]) -> None:
            for d in response.diagnostics:
                result = results.get(d.policyName)
                if result is None:
                    result = results[d.policyName] = PolicyResult(d.policyName, d.description, "advisory")
                text = d.message
                if text.startswith(d.description):
                    text = text[len(d.description):].lstrip("\n") or d.description
                result.messages.append(PolicyMessage(level_names.get(d.enforcementLevel, "advisory"), text,
                                                     default_urn or d.urn or None))

        for r in resources:
            request = analyzer_pb2.AnalyzeRequest(type=r.type, properties=_struct(r.wire_inputs), urn=r.urn,
                                                  name=r.name, options=self._options(r))
            provider = self._provider(r, by_urn)
            if provider is not None:
                request.provider.CopyFrom(provider)
            collect(self._call("Analyze", request, r.urn), r.urn)

        stack_request = analyzer_pb2.AnalyzeStackRequest()
        for r in resources:
            res = analyzer_pb2.AnalyzerResource(
                type=r.type, properties=_struct(r.outputs), urn=r.urn, name=r.name, options=self._options(r),
                parent=r.parent or "", dependencies=list(r.dependencies))
            for key, urns in (getattr(r, "property_dependencies", None) or {}).items():
                if urns:
                    res.propertyDependencies[key].urns.extend(urns)
            provider = self._provider(r, by_urn)
            if provider is not None:
                res.provider.CopyFrom(provider)
            stack_request.resources.append(res)
        collect(self._call("AnalyzeStack", stack_request), None)

        for name, messages in self.refused.items():
            results[name].messages += [PolicyMessage("mandatory", m, None) for m in messages]
        approvals = list(self.exceptions_applied) + _approvals(plan, reconciled)
        order = [p.name for p in self.info.policies]
        return PolicyReport(approvals=approvals,pack=self.info.name, version=self.version or self.info.version, stack=plan.stack,
                            resources_analyzed=len(resources),
                            results=sorted(results.values(), key=lambda x: order.index(x.name) if x.name in order else len(order)),
                            logs=list(self.logs))

    @staticmethod
    def _options(r: PlannedResource):
        from pulumi.runtime.proto import analyzer_pb2

        return analyzer_pb2.AnalyzerResourceOptions(parent=r.parent or "")

    @staticmethod
    def _provider(r: PlannedResource, by_urn: Mapping[str, PlannedResource]):
        """The resource's explicit provider as the engine describes it (its inputs as properties)."""
        from pulumi.runtime.proto import analyzer_pb2

        if not r.provider:
            return None
        # A provider reference is "<provider urn>::<provider id>".
        prov = by_urn.get(r.provider) or by_urn.get(r.provider.rsplit("::", 1)[0])
        if prov is None:
            return None
        return analyzer_pb2.AnalyzerProviderResource(type=prov.type, properties=_struct(prov.wire_inputs),
                                                     urn=prov.urn, name=prov.name)


def _approvals(plan: Plan, reconciled: Mapping[str, tuple[str, dict[str, Any]]]) -> list[str]:
    """Exemptions from the policy config and on-demand approvals recorded on the plan's resources."""
    from gpu_platform.policies.pools import APPROVER_KEY, REASON_KEY, POOL_KEY
    from gpu_platform.policies.props import tags_of

    from gpu_platform.policies.cost_rules import exemptions

    out = []
    exempt, _ = exemptions(reconciled.get("gpu-pools-scale-to-zero", ("", {}))[1].get("exemptPools") or [])
    for pool, e in exempt.items():
        out.append(f"gpu-pools-scale-to-zero exempts pool {pool} (reason: {e['reason']}; approver: {e['approver']}; "
                   f"until {e['until']})")
    seen = set()
    for r in plan.resources:
        for where in ("tags", "labels", "nodeConfig.resourceLabels"):
            props: Any = r.inputs
            for part in where.split(".")[:-1]:
                props = props.get(part) if isinstance(props, Mapping) else None
            tags = tags_of(props or {}, where.split(".")[-1])
            if tags.get(APPROVER_KEY) and tags.get(REASON_KEY) and tags.get(POOL_KEY) not in seen:
                seen.add(tags.get(POOL_KEY))
                out.append(f"GPU pool {tags.get(POOL_KEY)} runs on-demand (reason: {tags[REASON_KEY]}; "
                           f"approver: {tags[APPROVER_KEY]})")
    return out


def _empty():
    from google.protobuf import empty_pb2

    return empty_pb2.Empty()


def analyze_plan(plan: Plan, policy_config: Optional[Mapping[str, Any]] = None, *,
                 stack_config: Optional[Mapping[str, str]] = None, pack_dir: Path = PACK_DIR) -> PolicyReport:
    """Start the pack, analyze `plan` with `policy_config` (None: the pack's defaults), stop the pack.

    `stack_config` is what the CLI puts in PULUMI_CONFIG; by default the stack file's config when
    `stacks/Pulumi.<plan.stack>.yaml` exists."""
    if stack_config is None:
        from gpu_platform.preflight.runner import load_stack

        try:
            stack_config = load_stack(plan.stack).config
        except FileNotFoundError:
            stack_config = {}
    where = f"policy config of stack {plan.stack}"
    with Analyzer(pack_dir, stack=plan.stack, stack_config=stack_config) as analyzer:
        return analyzer.analyze(plan, policy_config, where=where)
