"""Chart-shipped YAML text read with PyYAML's pure-Python parser, once per process per text.

Kustomize inputs and the Trainer's runtime installer payloads are read with the pure-Python parser on purpose:
libyaml's recurses in C and crashes the process on text nested some 50,000 levels deep, where this one raises
RecursionError. It is also about ten times slower, and every plan of a stack reads the same text again (the same
pinned overlay, the same runtimes ConfigMap). What a text parses to is kept pickled, bounded by
YAML_TEXT_MEMO_BYTES, least recently used out first; each caller gets objects of its own (pickle's round trip, as a
deep copy). A text that does not parse raises every time, as PyYAML raises it: nothing of it is kept; nor is a value
pickle cannot hold (aliases of aliases nest thousands deep from flat text): it is returned as read."""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from typing import Any

import yaml

YAML_TEXT_MEMO_BYTES = 64 * 1024 * 1024

_KEPT: "OrderedDict[tuple[str, bool], bytes]" = OrderedDict()
_KEPT_SIZE = [0]
_LOCK = threading.Lock()


def python_yaml(text: str, documents: bool = False) -> Any:
    """`yaml.safe_load(text)`, or with `documents` the list of `yaml.safe_load_all(text)`'s documents; a copy of
    this caller's own. Raises what PyYAML raises (YAMLError, RecursionError, ValueError for a date out of range)."""
    key = (text, documents)
    with _LOCK:
        blob = _KEPT.get(key)
        if blob is not None:
            _KEPT.move_to_end(key)
    if blob is not None:
        return pickle.loads(blob)
    value = list(yaml.safe_load_all(text)) if documents else yaml.safe_load(text)
    try:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except RecursionError:  # flat text, deep value (aliases of aliases): PyYAML read it, pickle cannot keep it
        return value
    size = len(blob) + len(text)
    if size <= YAML_TEXT_MEMO_BYTES:
        with _LOCK:
            if key not in _KEPT:
                _KEPT[key] = blob
                _KEPT_SIZE[0] += size
                while _KEPT_SIZE[0] > YAML_TEXT_MEMO_BYTES:
                    (old_text, _), old = _KEPT.popitem(last=False)
                    _KEPT_SIZE[0] -= len(old) + len(old_text)
    return value  # the kept copy is the pickled one: what the caller does to this one does not reach it
