"""Reading stack and policy files that may be hostile: bounded, strict, and never a traceback.

`load_yaml_file` turns any file into plain data (dict, list, str, int, float, bool, None) or raises
`YamlInputError` with the path and, where known, the line and the key. The limits keep a hostile file
from exhausting memory or time: only regular files are read (not /dev/zero, pipes or sockets), up to
`max_bytes`; it must be UTF-8 (the Pulumi CLI reads stack files as UTF-8), nesting stops at `MAX_DEPTH`
(the composer recurses per level), and aliases count towards `MAX_NODES` as if expanded (a billion-laughs file
expands to ~10^9 nodes in anything that walks it, json.dumps included).

Scalars resolve like YAML 1.2's core schema, which is what the CLI's Go YAML library does for config
values: only true/false are booleans (`yes`, `on` stay strings), `010` is ten, dates stay strings.
Duplicate keys are an error (the CLI refuses them too); non-finite numbers are refused (Go's JSON
encoder cannot serialize them when the CLI hands config to the program).
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

MAX_BYTES = 1024 * 1024  # a stack file is a few KiB; 1 MiB leaves room for certificates and comments
MAX_DEPTH = 64
MAX_NODES = 200_000  # counted with every alias expanded
# Text counted with every alias expanded: one long string aliased thousands of times is few nodes but
# gigabytes once the program, the pack's JSON or gRPC copies it (2 x the largest file allowed).
MAX_EXPANDED_BYTES = 2 * MAX_BYTES


class YamlInputError(ValueError):
    """The file cannot be read as plain YAML data. str() names the file and where."""

    def __init__(self, path: str, problem: str, line: int | None = None):
        self.path = path
        self.problem = problem
        self.line = line
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {problem}")


# ---------------------------------------------------------------------------------------------
# YAML 1.2 core schema resolution (as Go's gopkg.in/yaml.v3 decodes into interface{})
# ---------------------------------------------------------------------------------------------


class _CoreResolver(BaseResolver):
    pass


_CoreResolver.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))
_CoreResolver.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
                                    list("-+0123456789"))
_CoreResolver.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+.0123456789"))
_CoreResolver.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
_CoreResolver.add_implicit_resolver("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])


MAX_DIGITS = 40  # Python refuses to convert over 4300 digits; no config number needs 40


class _RefusedNode(yaml.constructor.ConstructorError):
    """A value the loader refuses, with the node it was read from: load_yaml_text names the node's key path."""

    def __init__(self, node: yaml.Node, problem: str):
        super().__init__(None, None, problem, node.start_mark)
        self.node = node


class _StrictConstructor(SafeConstructor):
    def construct_core_int(self, node: yaml.ScalarNode) -> int:
        text = self.construct_scalar(node)
        if len(text) > MAX_DIGITS:
            raise _RefusedNode(node, f"a number of {len(text)} digits is not a usable value: give a number of at most "
                                     f"{MAX_DIGITS} digits (quote it if it is text)")
        if text.startswith(("0o", "0x")):
            return int(text, 0)
        if re.fullmatch(r"[-+]?0[0-9]+", text):
            # YAML 1.2 reads 010 as 10; the Pulumi CLI's go-yaml v3 parses it with strconv base 0, as octal 8:
            # a budget of 01500 would be $1,500 here and $832 once deployed.
            raise _RefusedNode(node, f"{text!r} has a leading zero, which YAML readers disagree on (10 or octal 8): "
                                     "write it without the zero, or 0o... for octal")
        return int(text, 10)

    def construct_core_float(self, node: yaml.ScalarNode) -> float:
        text = str(self.construct_scalar(node)).lower()
        if text.endswith(".inf"):
            return -math.inf if text.startswith("-") else math.inf
        if text == ".nan":
            return math.nan
        return float(text)

    def construct_as_text(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))

    def construct_refused(self, node: yaml.Node) -> Any:
        raise _RefusedNode(node, f"the tag {node.tag} is not allowed here: plain strings, numbers, booleans, lists "
                                 "and mappings only (no tags)")

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        # Duplicate keys: the last one would silently win; the Pulumi CLI refuses the file instead.
        # Checked on the node's own keys, before merge keys (<<) add theirs (which may be overridden).
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise _RefusedNode(key_node, "a mapping key must be a plain string, not a list or mapping")
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise _RefusedNode(key_node, f"duplicate key {key!r} (first at line {first}); give each key once")
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_StrictConstructor.add_constructor("tag:yaml.org,2002:int", _StrictConstructor.construct_core_int)
_StrictConstructor.add_constructor("tag:yaml.org,2002:float", _StrictConstructor.construct_core_float)
_StrictConstructor.add_constructor("tag:yaml.org,2002:timestamp", _StrictConstructor.construct_as_text)
for _tag in ("binary", "set", "omap", "pairs"):
    _StrictConstructor.add_constructor(f"tag:yaml.org,2002:{_tag}", _StrictConstructor.construct_refused)
_StrictConstructor.add_constructor(None, _StrictConstructor.construct_refused)


class _BoundedComposer(Composer):
    """Composer that stops at MAX_DEPTH levels (it recurses once per level)."""

    _depth = 0

    def compose_node(self, parent, index):  # noqa: ANN001 (PyYAML signature)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class StrictLoader(Reader, Scanner, Parser, _BoundedComposer, _StrictConstructor, _CoreResolver):
    def __init__(self, stream: str):
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        _BoundedComposer.__init__(self)
        _StrictConstructor.__init__(self)
        _CoreResolver.__init__(self)


class _Recursive(Exception):
    pass


def _expanded_size(node: yaml.Node, memo: dict[int, int]) -> int:
    """Nodes `node` stands for with every alias expanded (shared nodes counted at each use)."""
    key = id(node)
    if key in memo:
        if memo[key] < 0:
            raise _Recursive()
        return memo[key]
    memo[key] = -1  # in progress: meeting it again means an alias inside its own anchor
    if isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(n, memo) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in node.value)
    else:
        size = 1
    size = min(size, MAX_NODES + 1)
    memo[key] = size
    return size


def _expanded_bytes(node: yaml.Node, memo: dict[int, int]) -> int:
    """Characters of scalar text `node` stands for with every alias expanded (capped; call after
    _expanded_size, which refuses recursive aliases)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, yaml.SequenceNode):
        size = sum(_expanded_bytes(n, memo) for n in node.value)
    elif isinstance(node, yaml.MappingNode):
        size = sum(_expanded_bytes(k, memo) + _expanded_bytes(v, memo) for k, v in node.value)
    else:
        size = len(node.value) if isinstance(node.value, str) else 0
    size = min(size, MAX_EXPANDED_BYTES + 1)
    memo[key] = size
    return size


def _key_path(root: yaml.Node, target: yaml.Node) -> str:
    """The key path of `target` in the document `root` ("config.gpu-platform:gpuPools[0].maxNodes"), as check_plain
    and the config errors write it; a key node is named by the mapping that holds it. "" for the root or a node
    not found."""
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node is target:
            return path
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k is target:
                    return path
                name = str(k.value) if isinstance(k, yaml.ScalarNode) else "?"
                stack.append((v, f"{path}.{name}" if path else name))
        elif isinstance(node, yaml.SequenceNode):
            stack += [(v, f"{path}[{i}]") for i, v in enumerate(node.value)]
    return ""


def _largest_path(node: yaml.Node, memo: dict[int, int]) -> str:
    """The key path of the biggest value (by expanded size), two levels down: config.<key>."""
    path = []
    for _ in range(2):
        if not isinstance(node, yaml.MappingNode) or not node.value:
            break
        key, node = max(node.value, key=lambda kv: memo.get(id(kv[1]), 0))
        path.append(str(key.value) if isinstance(key, yaml.ScalarNode) else "?")
    return ".".join(path) or "(root)"


# ---------------------------------------------------------------------------------------------
# Bytes -> text
# ---------------------------------------------------------------------------------------------

_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (b"\xfe\xff", "UTF-16"), (b"\xff\xfe", "UTF-16"))


def decode_utf8(data: bytes, shown: str) -> str:
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise YamlInputError(shown, f"the file is {name} (byte-order mark); save it as UTF-8")
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise YamlInputError(shown, "the file contains NUL bytes: a binary or UTF-16/32 file, not a UTF-8 YAML "
                                    "stack file", line)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlInputError(shown, f"the file is not UTF-8 (byte 0x{data[exc.start]:02x}); save it as UTF-8 "
                                    "(the Pulumi CLI reads stack files as UTF-8)", line) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_limited(path: Path, shown: str, max_bytes: int = MAX_BYTES) -> bytes:
    """At most max_bytes of `path`; a larger file is refused, not read. Only regular files: a device
    (/dev/zero never ends), a pipe or a socket (reading would wait forever) is refused before opening."""
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise YamlInputError(shown, "is a directory, not a stack file")
        if not stat.S_ISREG(mode):
            raise YamlInputError(shown, "is not a regular file (a device, pipe or socket); give a stack file")
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)
    except IsADirectoryError:
        raise YamlInputError(shown, "is a directory, not a stack file") from None
    except OSError as exc:
        raise YamlInputError(shown, f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise YamlInputError(shown, f"is larger than {max_bytes // 1024} KiB; a stack file is a few KiB (check the "
                                    "path, or move large values out of the stack file)")
    return data


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def load_yaml_text(text: str, shown: str) -> Any:
    try:
        # PyYAML's Reader checks a whole string for non-printable characters as it is constructed.
        loader = StrictLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        raise YamlInputError(shown, f"not valid YAML: control character U+{exc.character:04X} (YAML allows only "
                                    "printable characters, tabs and line breaks)", line) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        memo: dict[int, int] = {}
        if _expanded_size(node, memo) > MAX_NODES:
            where = _largest_path(node, memo)
            raise YamlInputError(shown, f"{where}: aliases expand to more than {MAX_NODES} values (an alias bomb?); "
                                        "write the values out or use fewer aliases")
        text_memo: dict[int, int] = {}
        if _expanded_bytes(node, text_memo) > MAX_EXPANDED_BYTES:
            where = _largest_path(node, text_memo)
            raise YamlInputError(shown, f"{where}: aliases expand to more than {MAX_EXPANDED_BYTES // 1024} KiB of text "
                                        "(an alias bomb?); write the values out or use fewer aliases")
        data = loader.construct_document(node)
    except _Recursive:
        raise YamlInputError(shown, "an alias refers to its own anchor (a recursive structure); write the values "
                                    "out") from None
    except _RefusedNode as exc:  # valid YAML, a value refused: where it is, by key and line
        path = _key_path(node, exc.node)
        raise YamlInputError(shown, f"{path or '(root)'}: {exc.problem}", exc.node.start_mark.line + 1) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc)
        if exc.context and exc.problem:
            problem = f"{exc.context}: {exc.problem}"
        if "\t" in problem or "'\\t'" in problem:
            problem += " (YAML indentation must use spaces, not tabs)"
        raise YamlInputError(shown, f"not valid YAML: {problem}", mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise YamlInputError(shown, f"not valid YAML: {exc}") from None
    except RecursionError:
        raise YamlInputError(shown, "nested too deeply (or a recursive alias)") from None
    finally:
        loader.dispose()
    check_plain(data, shown)
    return data


def printable(text: str) -> str:
    """`text` safe to print on a terminal (gpu_platform/config/approvals.printable)."""
    from gpu_platform.config.approvals import printable as _printable

    return _printable(text)


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def number_texts(text: str, under: str) -> dict[Any, str]:
    """The text written for each number directly under the top-level key `under` (of a file load_yaml_text
    has read): {key: "0x5DC"}. The Pulumi CLI hands a stack file's top-level config number to the program as
    that text (`1e3`, `0x5DC`, `1.350`), not as the number YAML reads (1000, 1500, 1.35)."""
    node = StrictLoader(text).get_single_node()
    out: dict[Any, str] = {}
    if not isinstance(node, yaml.MappingNode):
        return out
    for key, value in node.value:
        if isinstance(key, yaml.ScalarNode) and key.value == under and isinstance(value, yaml.MappingNode):
            for k, v in value.value:
                if isinstance(k, yaml.ScalarNode) and isinstance(v, yaml.ScalarNode) and v.tag in _NUMBER_TAGS:
                    out[k.value] = v.value
    return out


def load_yaml_file(path: "str | Path", shown: str | None = None, max_bytes: int = MAX_BYTES) -> Any:
    shown = shown or str(path)
    return load_yaml_text(decode_utf8(read_limited(Path(path), shown, max_bytes), shown), shown)


def check_plain(value: Any, shown: str, where: str = "") -> None:
    """Only JSON-representable data: str keys, finite numbers; a recursive structure is refused."""
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    while stack:
        v, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise YamlInputError(shown, f"{path or '(root)'}: nested deeper than {MAX_DEPTH} levels (or recursive)")
        if isinstance(v, str):
            _check_text(v, shown, path)
            continue
        if isinstance(v, bool) or v is None or isinstance(v, int):
            continue
        if isinstance(v, float):
            if not math.isfinite(v):
                raise YamlInputError(shown, f"{path or '(root)'}: {v} is not a finite number (.inf and .nan cannot be "
                                            "passed to a Pulumi program); give a number")
            continue
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise YamlInputError(shown, f"{path or '(root)'}: the key {k!r} must be a string (quote it)")
                _check_text(k, shown, path)
                stack.append((x, f"{path}.{k}" if path else k, depth + 1))
            continue
        if isinstance(v, list):
            for i, x in enumerate(v):
                stack.append((x, f"{path}[{i}]", depth + 1))
            continue
        raise YamlInputError(shown, f"{path or '(root)'}: a {type(v).__name__} value is not allowed")


def _check_text(text: str, shown: str, path: str) -> None:
    """A "\\ud800" escape gives a lone surrogate: not Unicode text any tool downstream can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise YamlInputError(shown, f"{path or '(root)'}: an escape gives invalid Unicode (a lone surrogate such "
                                    "as \\ud800); write the character itself") from None
