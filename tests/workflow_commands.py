"""The Pulumi CLI commands the CI workflows run, read from .github/workflows/*.yml (never a copied list).

Two ways a workflow runs the CLI:
- a `uses: pulumi/actions@<sha>` step: the action turns its `with:` inputs into CLI invocations. This module
  does what the pinned action does, read from its source: pulumi/actions v7.0.0
  (8e5e406f4007fca908480587cb9893c07090f58d) src/main.ts, src/login.ts, src/config.ts, action.yml (input
  defaults), which bundles @pulumi/pulumi 3.206.0's Automation API (its yarn.lock): pulumi/pulumi v3.206.0
  sdk/nodejs/automation/stack.ts (preview, up, runPulumiCmd, applyGlobalOpts), localWorkspace.ts
  (selectStack, setAllConfig) and cmd.ts (every command gets --non-interactive). An input this module does
  not translate is refused by name, so a workflow cannot pass one the test does not check;
- a `run:` script line that calls `pulumi ...` (none today): its words, with the step's `env:` expanded.

`${{ ... }}` expressions are evaluated with GitHub's semantics for the operators and functions the workflows
use (docs.github.com "Evaluate expressions in workflows and actions"): `matrix.stack` is the matrix entry, a
`secrets.NAME` is set (a stand-in value), a `vars.NAME` is unset; any other context is refused by name.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

ACTION = "pulumi/actions"
# The pinned action's user agent (src/config.ts: `userAgent: 'pulumi/actions@v6'`, unchanged in v7.0.0).
USER_AGENT = "pulumi/actions@v6"
# action.yml v7.0.0: the inputs whose default is not empty.
ACTION_DEFAULTS = {"work-dir": "./", "color": "auto"}
# Inputs that only steer the action itself (installing the CLI, commenting), not the CLI's arguments.
NOT_CLI = {"pulumi-version", "comment-on-pr", "comment-on-pr-number", "comment-on-summary", "github-token",
           "edit-pr-comment", "always-include-summary", "upsert", "remove"}
BOOLEAN_FLAGS = {  # input -> the flag Automation API adds when true (stack.ts preview/up)
    "expect-no-changes": "--expect-no-changes", "refresh": "--refresh", "diff": "--diff",
    "exclude-dependents": "--exclude-dependents", "target-dependents": "--target-dependents",
}
TRANSLATED = NOT_CLI | set(BOOLEAN_FLAGS) | {"command", "stack-name", "work-dir", "config-map", "policyPacks",
                                             "policyPackConfigs", "color", "message", "parallel", "cloud-url",
                                             "secrets-provider"}


class WorkflowCommandError(ValueError):
    """A workflow step this module cannot turn into CLI commands; the message names the file and the step."""


# --- GitHub expressions ------------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)|(?P<op>&&|\|\||==|!=|<=|>=|[!<>(),\[\]])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z_*][A-Za-z0-9_-]*)*))")


def _truthy(v: Any) -> bool:
    return v not in (False, 0, "", None) and v == v


def _coerce_num(v: Any) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip()) if v.strip() else 0.0
        except ValueError:
            return float("nan")
    return float("nan")


def _equal(a: Any, b: Any) -> bool:
    if type(a) is type(b) or (isinstance(a, str) and isinstance(b, str)):
        return a.lower() == b.lower() if isinstance(a, str) else a == b
    return _coerce_num(a) == _coerce_num(b)


def _format(template: str, *args: Any) -> str:
    out, i = [], 0
    while i < len(template):
        c = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            out.append(c)
            i += 2
        elif c == "{":
            end = template.index("}", i)
            out.append(_as_string(args[int(template[i + 1:end])]))
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _as_string(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return str(v)


FUNCTIONS = {
    "startswith": lambda a, b: _as_string(a).lower().startswith(_as_string(b).lower()),
    "endswith": lambda a, b: _as_string(a).lower().endswith(_as_string(b).lower()),
    "contains": lambda a, b: (any(_equal(x, b) for x in a) if isinstance(a, list)
                              else _as_string(b).lower() in _as_string(a).lower()),
    "format": _format,
    "fromjson": lambda s: json.loads(s),
    "tojson": lambda v: json.dumps(v, indent=2),
}


@dataclass
class Contexts:
    """What a step's expressions may read: `matrix.<key>`, `secrets.<NAME>` (set to a stand-in) and
    `vars.<NAME>` (unset, as in a repository without the variable)."""
    matrix: dict[str, Any] = field(default_factory=dict)
    where: str = ""

    def lookup(self, dotted: str) -> Any:
        head, _, rest = dotted.partition(".")
        if head == "matrix" and rest in self.matrix:
            return self.matrix[rest]
        if head == "secrets" and rest:
            return secret_standin(rest)
        if head == "vars" and rest:
            return None
        if head in ("true", "false", "null") and not rest:
            return {"true": True, "false": False, "null": None}[head]
        raise WorkflowCommandError(f"{self.where}: `{dotted}` in an expression: this test knows matrix, secrets "
                                   "and vars; say in tests/workflow_commands.py what it stands for")


def secret_standin(name: str) -> str:
    """A set secret's value in the test: a word the shell and JSON take as is."""
    return f"test-{name.lower().replace('_', '-')}"


class _Parser:
    def __init__(self, text: str, ctx: Contexts):
        self.tokens, pos = [], 0
        text = text.strip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise WorkflowCommandError(f"{ctx.where}: cannot read the expression {text!r} at {text[pos:]!r}")
            kind = m.lastgroup
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i, self.ctx, self.text = 0, ctx, text

    def peek(self) -> Optional[tuple[str, str]]:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, value: Optional[str] = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise WorkflowCommandError(f"{self.ctx.where}: expected {value!r} in the expression {self.text!r}")
        self.i += 1
        return tok

    def parse(self) -> Any:
        v = self.or_()
        if self.peek() is not None:
            raise WorkflowCommandError(f"{self.ctx.where}: trailing {self.peek()[1]!r} in the expression {self.text!r}")
        return v

    def or_(self) -> Any:
        v = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            rhs = self.and_()
            v = v if _truthy(v) else rhs
        return v

    def and_(self) -> Any:
        v = self.cmp()
        while self.peek() == ("op", "&&"):
            self.take()
            rhs = self.cmp()
            v = rhs if _truthy(v) else v
        return v

    def cmp(self) -> Any:
        v = self.unary()
        while self.peek() in (("op", "=="), ("op", "!=")):
            op = self.take()[1]
            rhs = self.unary()
            v = _equal(v, rhs) if op == "==" else not _equal(v, rhs)
        return v

    def unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not _truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if kind == "op" and text == "(":
            v = self.or_()
            self.take(")")
            return v
        if kind == "name":
            if self.peek() == ("op", "("):
                fn = FUNCTIONS.get(text.lower())
                if fn is None:
                    raise WorkflowCommandError(f"{self.ctx.where}: the function {text}() is not evaluated here")
                self.take("(")
                args = []
                while self.peek() != ("op", ")"):
                    args.append(self.or_())
                    if self.peek() == ("op", ","):
                        self.take(",")
                self.take(")")
                return fn(*args)
            return self.ctx.lookup(text)
        raise WorkflowCommandError(f"{self.ctx.where}: unexpected {text!r} in the expression {self.text!r}")


def evaluate(expression: str, ctx: Contexts) -> Any:
    return _Parser(expression, ctx).parse()


def substitute(value: Any, ctx: Contexts) -> str:
    """An input or env value as the runner passes it: every `${{ }}` replaced by its value as a string (the
    closing `}}` is the first one outside a quoted string: format() templates hold `{{` and `}}`)."""
    if not isinstance(value, str):
        return _as_string(value)
    out, pos = [], 0
    while (start := value.find("${{", pos)) >= 0:
        out.append(value[pos:start])
        i, quoted = start + 3, False
        while i < len(value) and (quoted or not value.startswith("}}", i)):
            if value[i] == "'":
                quoted = not quoted  # '' inside a string toggles twice
            i += 1
        if i >= len(value):
            raise WorkflowCommandError(f"{ctx.where}: an expression without its closing }}}}: {value[start:]!r}")
        out.append(_as_string(evaluate(value[start + 3:i], ctx)))
        pos = i + 2
    out.append(value[pos:])
    return "".join(out)


# --- the commands ------------------------------------------------------------------------------------------

@dataclass
class Invocation:
    """One run of the CLI: argv after `pulumi`, and where it came from."""
    argv: list[str]
    source: str  # "<workflow> job <job> step <n> (<name>)"
    runs_program: bool = False  # preview/up/refresh/destroy: the engine runs the program


@dataclass
class PulumiStep:
    """A workflow step that runs the CLI, for one matrix entry, with the steps before it in its job."""
    workflow: str
    job: str
    index: int
    name: str
    stack: Optional[str]
    invocations: list[Invocation]
    earlier_runs: list[tuple[str, dict, Contexts]]  # the job's earlier `run:` steps: script, env, contexts (unevaluated)
    files_read: list[str]  # paths the CLI reads (policy pack configs): an earlier step must write them


def _multi(value: str) -> list[str]:
    """actions-parsers getMultilineInput + the action's parseSemicolorToArray: lines, then `;`-separated."""
    out = []
    for line in value.splitlines():
        out.extend(p.strip() for p in line.split(";") if p.strip())
    return out


def _bool(value: str, where: str, name: str) -> bool:
    if value in ("true", "True", "TRUE"):
        return True
    if value in ("false", "False", "FALSE", ""):
        return False
    raise WorkflowCommandError(f"{where}: input {name}: {value!r} is not a YAML 1.2 boolean (the action refuses it)")


def action_invocations(inputs: dict[str, str], where: str, backend_url: str) -> list[Invocation]:
    """What pulumi/actions v7.0.0 runs for these inputs (src/main.ts runAction), the Pulumi Cloud login
    replaced by `backend_url` (the test's file backend; the workflows log in with PULUMI_ACCESS_TOKEN)."""
    unknown = sorted(set(inputs) - TRANSLATED)
    if unknown:
        raise WorkflowCommandError(f"{where}: pulumi/actions input(s) {', '.join(unknown)} are not translated to CLI "
                                   "flags by tests/workflow_commands.py: add them there from the action's source")
    got = {**ACTION_DEFAULTS, **inputs}
    command, stack = got.get("command", ""), got.get("stack-name", "")
    if command not in ("preview", "up", "update"):
        raise WorkflowCommandError(f"{where}: command {command!r}: only preview and up are translated here")
    if not stack:
        raise WorkflowCommandError(f"{where}: stack-name is required by the action")
    tail = ["--stack", stack, "--non-interactive"]  # stack.ts runPulumiCmd, then cmd.ts
    out = [Invocation(["--non-interactive", "--cwd", got["work-dir"], "login", backend_url], where)]
    # selectStack (upsert false): localWorkspace.ts `stack select --stack <name>`.
    select = ["stack", "select", "--stack", stack, "--non-interactive"]
    if got.get("secrets-provider"):
        raise WorkflowCommandError(f"{where}: secrets-provider is only used by `stack init` (upsert), not translated")
    out.append(Invocation(select, where))
    if got.get("config-map"):
        try:
            config_map = yaml.safe_load(got["config-map"])
        except yaml.YAMLError as exc:
            raise WorkflowCommandError(f"{where}: config-map is not YAML: {exc}") from None
        if not isinstance(config_map, dict) or not all(isinstance(v, dict) and "value" in v for v in config_map.values()):
            raise WorkflowCommandError(f"{where}: config-map must map each key to {{value, secret}} (Automation "
                                       f"API ConfigMap); got {config_map!r}")
        argv = ["config", "set-all", "--stack", stack]
        for key, value in config_map.items():
            argv += ["--secret" if value.get("secret") else "--plaintext", f"{key}={_as_string(value['value'])}"]
        out.append(Invocation(argv + tail, where))
    argv = ["preview"] if command == "preview" else ["up", "--yes", "--skip-preview"]
    if got.get("message"):
        argv += ["--message", got["message"]]
    for name in ("expect-no-changes", "refresh", "diff"):
        if _bool(got.get(name, ""), where, name):
            argv.append(BOOLEAN_FLAGS[name])
    for pack in _multi(got.get("policyPacks", "")):
        argv += ["--policy-pack", pack]
    for conf in _multi(got.get("policyPackConfigs", "")):
        argv += ["--policy-pack-config", conf]
    for name in ("exclude-dependents", "target-dependents"):
        if _bool(got.get(name, ""), where, name):
            argv.append(BOOLEAN_FLAGS[name])
    if got.get("parallel"):
        argv += ["--parallel", str(int(got["parallel"]))]
    argv += ["--exec-agent", USER_AGENT]
    if got.get("color"):
        argv += ["--color", got["color"]]  # applyGlobalOpts
    argv += ["--exec-kind", "auto.local"]
    out.append(Invocation(argv + tail, where, runs_program=True))
    return out


PROGRAM_COMMANDS = {"preview", "up", "update", "refresh", "destroy"}
_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def script_invocations(script: str, env: dict[str, str], where: str) -> list[Invocation]:
    """The `pulumi ...` commands of a `run:` script, one per command (lines joined at a trailing backslash,
    split at ; && || |), with $VAR and ${VAR} taken from the step's env; a variable it does not set is refused."""
    out = []
    text = re.sub(r"\\\n", " ", script)
    for line in text.splitlines():
        if "pulumi" not in line:
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise WorkflowCommandError(f"{where}: cannot split {line!r}: {exc}") from None
        segment: list[str] = []
        for word in words + [";"]:
            if word in (";", "&&", "||", "|"):
                if segment and segment[0] == "pulumi":
                    def expand(m: re.Match) -> str:
                        name = m.group(1) or m.group(2)
                        if name not in env:
                            raise WorkflowCommandError(f"{where}: ${name} is not set by the step's env")
                        return env[name]
                    argv = [_VAR.sub(expand, w) for w in segment[1:]]
                    sub = next((w for w in argv if not w.startswith("-")), "")
                    out.append(Invocation(argv, where, runs_program=sub in PROGRAM_COMMANDS))
                segment = []
            else:
                segment.append(word)
    return out


def _written_by(script: str) -> list[str]:
    return re.findall(r">\s*\"?([\w./-]+)\"?", script)


def pulumi_steps(path, backend_url: str) -> list[PulumiStep]:
    """Every step of the workflow at `path` that runs the CLI, once per matrix.stack entry (or once)."""
    doc = yaml.safe_load(path.read_text())
    found = []
    for job_id, job in (doc.get("jobs") or {}).items():
        stacks = ((job.get("strategy") or {}).get("matrix") or {}).get("stack") or [None]
        for stack in stacks:
            earlier: list[tuple[str, dict[str, str]]] = []
            for i, step in enumerate(job.get("steps") or []):
                where = f"{path.name} job {job_id} step {i + 1} ({step.get('name') or step.get('uses') or 'run'})"
                ctx = Contexts({"stack": stack} if stack is not None else {}, where)
                if "run" in step:
                    if re.search(r"(^|[;&|(]\s*)pulumi\s", re.sub(r"\\\n", " ", step["run"]), re.M):
                        env = {k: substitute(v, ctx) for k, v in (step.get("env") or {}).items()}
                        invs = script_invocations(substitute(step["run"], ctx), env, where)
                        if invs:
                            found.append(PulumiStep(path.name, job_id, i + 1, where, stack, invs, list(earlier), []))
                    earlier.append((step["run"], step.get("env") or {}, ctx))
                elif str(step.get("uses", "")).split("@")[0] == ACTION:
                    inputs = {k: substitute(v, ctx) for k, v in (step.get("with") or {}).items()}
                    invs = action_invocations(inputs, where, backend_url)
                    files = _multi(inputs.get("policyPackConfigs", ""))
                    found.append(PulumiStep(path.name, job_id, i + 1, where, stack, invs, list(earlier), files))
    return found


def writers_of(step: PulumiStep) -> list[tuple[str, dict[str, str]]]:
    """The earlier `run:` steps that write a file the CLI reads (the policy pack config), their script and env
    evaluated: each file must have one."""
    out = []
    for name in step.files_read:
        writers = [(s, e, c) for s, e, c in step.earlier_runs if name in _written_by(s)]
        if not writers:
            raise WorkflowCommandError(f"{step.name}: no earlier step of the job writes {name}, which the CLI reads")
        script, env, ctx = writers[-1]
        out.append((substitute(script, ctx), {k: substitute(v, ctx) for k, v in env.items()}))
    return out
