"""gpu_platform/preflight/fit/yaml_text.py: chart-shipped YAML read with the pure-Python parser once per process."""

from __future__ import annotations

import datetime
import inspect
import pickle
import sys

import pytest
import yaml

from gpu_platform.preflight.fit import yaml_text
from gpu_platform.preflight.fit.yaml_text import python_yaml

RUNTIMES = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec: {mlPolicy: {numNodes: 1}}
---
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: deepspeed, created: 2026-12-01}
"""


@pytest.fixture(autouse=True)
def _empty_memo(monkeypatch):
    monkeypatch.setattr(yaml_text, "_KEPT", type(yaml_text._KEPT)())
    monkeypatch.setattr(yaml_text, "_KEPT_SIZE", [0])


def test_the_same_text_reads_as_pyyaml_reads_it_and_each_caller_gets_its_own_objects():
    first = python_yaml(RUNTIMES, documents=True)
    assert first == list(yaml.safe_load_all(RUNTIMES))  # the empty document included, as PyYAML gives it
    assert first[2]["metadata"]["created"] == datetime.date(2026, 12, 1)  # a date stays a date
    first[0]["metadata"]["name"] = "changed by the first caller"
    second = python_yaml(RUNTIMES, documents=True)
    assert second[0]["metadata"]["name"] == "torch-distributed" and second == list(yaml.safe_load_all(RUNTIMES))
    second[2]["spec"] = {}
    assert "spec" not in python_yaml(RUNTIMES, documents=True)[2]  # what a later caller adds reaches nobody either


def test_one_document_and_a_stream_are_kept_apart():
    text = "a: 1\n"
    assert python_yaml(text) == {"a": 1}
    assert python_yaml(text, documents=True) == [{"a": 1}]
    assert python_yaml(text) == {"a": 1}


def test_text_that_does_not_parse_raises_every_time_and_is_not_kept():
    bad = "a: [1, 2\n"
    for _ in range(2):
        with pytest.raises(yaml.YAMLError):
            python_yaml(bad)
    deep = "[" * 50_000 + "]" * 50_000  # libyaml's C parser would crash the process here
    # The parser gives up where the interpreter's recursion limit stops it; its scanner's work grows with the square
    # of the depth it reaches (1.7 CPU-seconds at the default limit's 490 levels), so the limit is lowered here.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 150)
    try:
        with pytest.raises(RecursionError):
            python_yaml(deep)
    finally:
        sys.setrecursionlimit(limit)
    assert not yaml_text._KEPT and yaml_text._KEPT_SIZE == [0]


def test_the_memo_keeps_to_its_bound_least_recently_used_out_first(monkeypatch):
    texts = [f"key{i}: {'x' * 2000}\n" for i in range(6)]
    one = len(texts[0]) + len(pickle.dumps(yaml.safe_load(texts[0]), protocol=pickle.HIGHEST_PROTOCOL))
    monkeypatch.setattr(yaml_text, "YAML_TEXT_MEMO_BYTES", 3 * one + one // 2)
    for t in texts[:3]:
        python_yaml(t)
    python_yaml(texts[0])  # used again: the oldest is now texts[1]
    python_yaml(texts[3])
    assert [k[0] for k in yaml_text._KEPT] == [texts[2], texts[0], texts[3]]
    assert yaml_text._KEPT_SIZE[0] == sum(len(t) + len(b) for (t, _), b in yaml_text._KEPT.items())
    assert yaml_text._KEPT_SIZE[0] <= yaml_text.YAML_TEXT_MEMO_BYTES
    monkeypatch.setattr(yaml_text, "YAML_TEXT_MEMO_BYTES", 10)  # a text larger than the bound is read, not kept
    assert python_yaml(texts[4]) == yaml.safe_load(texts[4]) and texts[4] not in [k[0] for k in yaml_text._KEPT]


def test_a_value_pickle_cannot_hold_is_returned_as_read_not_refused():
    """Review of 9afaf66: a 3,000-link chain of aliases is flat text PyYAML reads, but pickling its value recursed
    past the limit, and the Trainer runtime it held left the fit check without a word."""
    from gpu_platform.preflight.fit.pods import _installer_payloads

    links = 1500  # pickle recurses past the default limit from about 1,000 (the test fails if it does not)
    items = ["{k0: &a0 [x]}"] + [f"{{k{i}: &a{i} [*a{i - 1}]}}" for i in range(1, links)]
    text = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {name: deep}\n" \
           "<<: [" + ", ".join(items) + "]\n"
    [doc] = python_yaml(text, documents=True)
    assert doc["kind"] == "TrainingRuntime" and len(doc) == len(yaml.safe_load(text)) == links + 3
    assert not yaml_text._KEPT
    assert [d["metadata"]["name"] for d in _installer_payloads({"data": {"runtime.yaml": text}})] == ["deep"]
