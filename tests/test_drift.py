"""drift.yml runs `pulumi preview --refresh --expect-no-changes` every day with a read-only credential in place of
the deploy's. Any input the program derives from a deploy credential then differs from what the state holds, and
`--expect-no-changes` fails on it every day, drift or not (adopter review, issue 37 round 3, A). A drift run is a
read-only run (gpu_platform/components/read_only.py): such inputs keep the state's value there.

The check here plans a Linode stack twice under the preflight's mocks: once as `deploy.yml` runs it (every token
the deploy environment passes; what the state then holds) and once as `drift.yml` runs it (only the read-only
token, `GPU_PLATFORM_READ_ONLY_RUN=1`). Every input that differs between the two plans must be one the engine
compares with the state's own value in the drift run (ignoreChanges), and no resource may come or go. The engine's
side: pulumi/pulumi pkg/engine (previewActions.OnResourceStepPost counts every step but a default provider's, so
an explicit provider whose token changes is an update `--expect-no-changes` refuses) and
pkg/resource/deploy/step_generator.go (ignoreChanges takes the old input before the diff)."""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import pytest

from gpu_platform.components.read_only import READ_ONLY_ENV
from gpu_platform.preflight.runner import ProgramError, StackInput, run_program, stack_input_from_mapping
from tests.conftest import stack_config

# What deploy.yml passes a Linode stack (config-map), as distinct stand-ins; drift.yml passes linode:token only.
DEPLOY_CREDENTIALS = {"linode:token": "deploy-token", "linode-cluster:token": "cluster-token",
                      "linode-node-groups:token": "node-groups-token", "linode-registry:password": "registry-password"}
DRIFT_CREDENTIALS = {"linode:token": "read-only-token"}


def _stack_input(stack: str, credentials: dict[str, str]) -> StackInput:
    si = stack_input_from_mapping(stack, stack_config(stack))
    config = {k: v for k, v in si.config.items() if k not in DEPLOY_CREDENTIALS}
    config.update(credentials)
    secret = (si.secret_keys - set(DEPLOY_CREDENTIALS)) | set(credentials)
    return StackInput(si.stack, config, secret, si.raw, si.source, si.project)


def _plan(stack: str, credentials: dict[str, str], monkeypatch, read_only: bool):
    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-29")
    if read_only:
        monkeypatch.setenv(READ_ONLY_ENV, "1")
    else:
        monkeypatch.delenv(READ_ONLY_ENV, raising=False)
    return run_program(_stack_input(stack, credentials))


def _paths(a: Any, b: Any, at: tuple = ()) -> list[tuple]:
    """Input paths (property keys and list indices) where two values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in _paths(a.get(k, _ABSENT), b.get(k, _ABSENT), at + (k,))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in _paths(x, y, at + (i,))]
    return [] if a == b else [at]


_ABSENT = object()


def _ignore_path(text: str) -> tuple:
    """A Pulumi property path (`a.b`, `a["x.y"]`, `a[0]`) as keys and indices."""
    out: list = []
    for name, quoted, index in re.findall(r'([^.\[\]"]+)|\["([^"]*)"\]|\[(\d+)\]', text):
        out.append(int(index) if index else (quoted or name))
    return tuple(out)


def _reset(path: tuple, old: Any, new: Any) -> None:
    """The engine's ignoreChanges on the program's inputs, before the provider's Check (pulumi/pulumi
    sdk/go/common/resource/properties_path.go PropertyPath.reset, object keys and indices): at the leaf, the old
    value replaces the new one, or the key goes when the old inputs lack it; a parent only the old inputs have is a
    path error, and nothing changes."""
    key, rest = path[0], path[1:]
    if isinstance(key, int):
        if not (isinstance(old, list) and isinstance(new, list)) or key >= len(old) or key >= len(new):
            return
        if rest:
            _reset(rest, old[key], new[key])
        else:
            new[key] = copy.deepcopy(old[key])
        return
    if not rest:
        if isinstance(old, dict) and key in old and isinstance(new, dict):
            new[key] = copy.deepcopy(old[key])
        elif isinstance(new, dict):
            new.pop(key, None)
        return
    if not (isinstance(old, dict) and isinstance(new, dict)) or key not in new:
        return
    _reset(rest, old.get(key), new[key])


def _checked(type_token: str, inputs: dict) -> dict:
    """What the provider's Check stores: pulumi-kubernetes turns a Secret's stringData into base64 data
    (provider/pkg/clients/unstructured.go normalizeSecretStringData); the other inputs here are kept as given."""
    if type_token == "kubernetes:core/v1:Secret" and inputs.get("stringData"):
        inputs = copy.deepcopy(inputs)
        data = dict(inputs.get("data") or {})
        data.update({k: base64.b64encode(str(v).encode()).decode() for k, v in inputs.pop("stringData").items()})
        inputs["data"] = data
    return inputs


def drift_diffs(deployed, drifted) -> list[str]:
    """What `--expect-no-changes` would report in the drift run: resources that come or go, and inputs that differ
    from what the deploy left in the state once the engine has applied the drift run's ignoreChanges to the
    program's inputs and the provider has checked them."""
    from gpu_platform.preflight.runner import unwrap

    before = {r.urn: r for r in deployed.resources}
    after = {r.urn: r for r in drifted.resources}
    problems = [f"{u}: only in the deploy's plan" for u in sorted(set(before) - set(after))]
    problems += [f"{u}: only in the drift run's plan" for u in sorted(set(after) - set(before))]
    for urn in sorted(set(before) & set(after)):
        state = _checked(before[urn].type, unwrap(before[urn].wire_inputs))
        new = copy.deepcopy(unwrap(after[urn].wire_inputs))
        for path in after[urn].options.get("ignoreChanges", []):
            _reset(_ignore_path(path), state, new)
        for path in _paths(state, _checked(after[urn].type, new)):
            problems.append(f"{urn}: input {'.'.join(map(str, path))} differs")
    return problems


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_a_drift_run_of_a_linode_stack_shows_no_change_the_token_swap_made(stack, monkeypatch):
    deployed = _plan(stack, DEPLOY_CREDENTIALS, monkeypatch, read_only=False)
    drifted = _plan(stack, DRIFT_CREDENTIALS, monkeypatch, read_only=True)
    assert not drift_diffs(deployed, drifted)


def test_the_drift_check_sees_a_token_input_and_what_a_read_only_run_keeps(monkeypatch):
    """Without the read-only run, the same swap shows: the explicit object-storage provider's token, the clean-up
    Command's LINODE_TOKEN, the CCM/CSI token Secret and its name in both releases (and linode-dev's drift run
    stopped before any resource: linode-node-groups:token is not set). A read-only run keeps only the credential
    inputs: a change of anything else (here the clean-up Command's STACK_TAG) still shows."""
    deployed = _plan("linode-dev", DEPLOY_CREDENTIALS, monkeypatch, read_only=False)
    swapped = _plan("linode-dev", {**DEPLOY_CREDENTIALS, **DRIFT_CREDENTIALS, "linode-cluster:token": "other"},
                    monkeypatch, read_only=False)
    found = drift_diffs(deployed, swapped)
    assert any("pulumi:providers:linode::gpu-dev-objects: input token differs" in p for p in found), found
    assert any("delete-autoscaled-instances: input environment.LINODE_TOKEN differs" in p for p in found), found
    assert any("-linode-api: input metadata.name differs" in p for p in found), found
    assert any("-ccm: input values.secretRef.name differs" in p for p in found), found
    with pytest.raises(ProgramError, match="linode-node-groups:token is not set"):
        _plan("linode-dev", DRIFT_CREDENTIALS, monkeypatch, read_only=False)
    drifted = _plan("linode-dev", DRIFT_CREDENTIALS, monkeypatch, read_only=True)
    assert not drift_diffs(deployed, drifted)
    # The state holds a Secret's content as base64 `data` (pulumi-kubernetes' Check): keeping `stringData.apiToken`
    # alone would drop the token from the new inputs and show `data.apiToken` changed.
    secret = next(r for r in drifted.resources if r.name.endswith("-linode-api"))
    secret.options["ignoreChanges"] = ["metadata.name", "stringData.apiToken"]
    assert [p for p in drift_diffs(deployed, drifted) if p.endswith("-linode-api: input data.apiToken differs")]
    secret.options["ignoreChanges"] = ["metadata.name", "stringData", "data"]
    assert not drift_diffs(deployed, drifted)
    command = next(r for r in drifted.resources if r.name.endswith("-delete-autoscaled-instances"))
    assert "environment.LINODE_TOKEN" in command.options["ignoreChanges"]
    command.wire_inputs["environment"]["STACK_TAG"] = "node-group-stack:another"
    assert [p for p in drift_diffs(deployed, drifted) if "environment.STACK_TAG differs" in p]


def test_a_read_only_run_is_a_preview_only(monkeypatch):
    """GPU_PLATFORM_READ_ONLY_RUN keeps credential inputs as the state has them: in `pulumi up` it would keep a
    rotated token out of the cluster, so the program refuses it there, naming the variable."""
    monkeypatch.setenv(READ_ONLY_ENV, "1")
    with pytest.raises(ProgramError, match=READ_ONLY_ENV):
        run_program(_stack_input("linode-ha", DEPLOY_CREDENTIALS), preview=False)
