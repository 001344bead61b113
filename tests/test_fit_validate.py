"""Cluster fit, validation of what preflight renders for every shipped stack (tests, not the hot path):
- every built-in object passes kubernetes-validate strict for the stack's Kubernetes version;
- every custom resource matches the CRD the rendered output ships for it, made strict (an unknown field
  is an error: the API server would prune it silently);
- checkov over the rendered output: no failed check that tests/data/checkov-skips.yaml does not justify.
  The platform's own manifests use its `platform:` list; upstream charts and kustomize installs its
  `upstream:` list, which names for each check
  the releases that fail it; a listed pair that no longer fails is an error."""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any, Optional

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.runner import load_stack
from tests.fit_support import STACKS, need_charts, rendered
from tests.test_platform_validate import CHECKOV_SKIPS, checkov_bin, checkov_skips, justified_checks



@pytest.fixture(autouse=True)
def _charts() -> None:
    need_charts()


@functools.lru_cache(maxsize=None)
def kubernetes_version(stack: str) -> str:
    s = load_stack(stack)
    return parse_config(s.raw, stack).kubernetes_version


# --- kubernetes-validate, strict ---------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _definitions(schema_dir: str, version: str) -> dict:
    return kv_utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/_definitions.json", version)


@functools.lru_cache(maxsize=None)
def k8s_validator(version: str, kind: str, api_version: str) -> Optional[jsonschema.Validator]:
    """kubernetes_validate.validate(strict=True), with the schemas it picks loaded once per kind (it
    re-reads the multi-megabyte definitions on every call). None: not a built-in kind."""
    chosen = [v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= version][-1]
    schema_dir = f"v{chosen}-local-strict"
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv_utils.schema_contents(f"kubernetes-json-schema/{schema_dir}/{kind.lower()}-{api}.json", version)
    except FileNotFoundError:
        return None
    registry = Resource.from_contents(_definitions(schema_dir, version)) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def crd_groups(objects: list[dict]) -> set[tuple[str, str]]:
    return {(o["spec"]["group"], o["spec"]["names"]["kind"]) for o in objects if o["kind"] == "CustomResourceDefinition"}


# Kinds whose CRD a controller registers at runtime instead of its chart shipping it: the Cilium agent and
# operator create cilium.io CRDs on start (the Cilium chart has none). Not validated against a schema here;
# the objects of these kinds are checked by their own tests (tests/test_linode_cni.py) and by the real API
# server against the schema cilium-operator registers (tests/test_rehearsal_cilium.py).
RUNTIME_REGISTERED = {("cilium.io", "CiliumClusterwideNetworkPolicy")}


def _group_kind(obj: dict) -> tuple[str, str]:
    return obj["apiVersion"].rpartition("/")[0], obj["kind"]


def all_objects(stack: str) -> list[tuple[str, dict]]:
    return [(r.name, o) for r in rendered(stack) for o in r.objects]


@pytest.mark.parametrize("stack", STACKS)
def test_every_builtin_object_passes_kubernetes_validate_strict(stack: str) -> None:
    version = kubernetes_version(stack)
    objects = all_objects(stack)
    custom = crd_groups([o for _, o in objects])
    errors, checked = [], 0
    for release, obj in objects:
        if _group_kind(obj) in custom or _group_kind(obj) in RUNTIME_REGISTERED:
            continue
        validator = k8s_validator(version, obj["kind"], obj["apiVersion"])
        if validator is None:
            errors.append(f"{release} {obj['kind']}/{obj['metadata']['name']}: {obj['apiVersion']} is neither a "
                          f"Kubernetes {version} kind nor a CRD the rendered output installs")
            continue
        checked += 1
        error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
        if error is not None:
            errors.append(f"{release} {obj['kind']}/{obj['metadata']['name']}: {error.json_path}: {error.message[:200]}")
    assert checked > 300
    assert not errors, "\n".join(errors)


def test_the_cached_validator_is_kubernetes_validate() -> None:
    deployment = next(o for _, o in all_objects("gcp-prod") if o["kind"] == "Deployment")
    kubernetes_validate.validate(deployment, "1.33", strict=True)
    assert k8s_validator("1.33", "Deployment", "apps/v1").is_valid(deployment)
    bad = copy.deepcopy(deployment)
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.33", strict=True)
    assert not k8s_validator("1.33", "Deployment", "apps/v1").is_valid(bad)


# --- custom resources against the rendered CRDs --------------------------------------------------------


def _openapi_to_jsonschema(schema: Any) -> Any:
    """A CRD's structural OpenAPI v3 schema as strict JSON Schema: unknown fields refused where the
    schema lists properties (unless x-kubernetes-preserve-unknown-fields), `nullable` allows null,
    x-kubernetes-int-or-string allows both, embedded resources accept apiVersion/kind/metadata."""
    if isinstance(schema, list):
        return [_openapi_to_jsonschema(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _openapi_to_jsonschema(v) for k, v in schema.items()
           if k not in ("nullable", "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource")}
    if schema.get("x-kubernetes-embedded-resource"):
        props = dict(out.get("properties") or {})
        for key in ("apiVersion", "kind", "metadata"):
            props.setdefault(key, {})
        out["properties"] = props
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def crd_validators(objects: list[dict]) -> dict[tuple[str, str, str], jsonschema.Validator]:
    """(group, version, kind) -> strict validator, from the CRDs among `objects`."""
    out = {}
    for crd in objects:
        if crd["kind"] != "CustomResourceDefinition":
            continue
        spec = crd["spec"]
        for v in spec.get("versions") or []:
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            if v.get("served", True) and schema:
                js = _openapi_to_jsonschema(schema)
                (js.get("properties") or {}).pop("metadata", None)  # metadata: validated by the API server itself
                out[(spec["group"], v["name"], spec["names"]["kind"])] = jsonschema.Draft7Validator(js)
    return out


@pytest.mark.parametrize("stack", STACKS)
def test_every_custom_resource_matches_its_rendered_crd_strictly(stack: str) -> None:
    objects = all_objects(stack)
    validators = crd_validators([o for _, o in objects])
    custom = crd_groups([o for _, o in objects])
    errors, checked = [], 0
    for release, obj in objects:
        if _group_kind(obj) not in custom:
            continue
        group, _, version = obj["apiVersion"].rpartition("/")
        validator = validators.get((group, version, obj["kind"]))
        if validator is None:
            errors.append(f"{release} {obj['kind']}/{obj['metadata']['name']}: version {version} is not served by its CRD")
            continue
        checked += 1
        body = {k: v for k, v in obj.items() if k != "metadata"}
        error = jsonschema.exceptions.best_match(validator.iter_errors(body))
        if error is not None:
            errors.append(f"{release} {obj['kind']}/{obj['metadata']['name']}: {error.json_path}: {error.message[:200]}")
    assert checked >= 40  # Prometheus Operator objects of the monitoring chart, Kueue's queue objects, the TrainJob
    assert not errors, "\n".join(errors)


def test_the_crd_validator_refuses_a_typo_and_a_wrong_type() -> None:
    objects = [o for _, o in all_objects("gcp-prod")]
    validators = crd_validators(objects)
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    validator = validators[("monitoring.coreos.com", "v1", "ServiceMonitor")]
    body = {k: v for k, v in monitor.items() if k != "metadata"}
    assert validator.is_valid(body)
    typo = copy.deepcopy(body)
    typo["spec"]["endpointz"] = []
    assert not validator.is_valid(typo)
    wrong = copy.deepcopy(body)
    wrong["spec"]["endpoints"] = "web"
    assert not validator.is_valid(wrong)
    trainjob = next(o for o in objects if o["kind"] == "TrainJob")
    assert validators[("trainer.kubeflow.org", "v1alpha1", "TrainJob")].is_valid({k: v for k, v in trainjob.items() if k != "metadata"})


# --- checkov -----------------------------------------------------------------------------------------


def upstream_key(release) -> str:
    """Stable name of an upstream release across stacks: the chart for Helm (release names differ where
    pulumi-kubernetes autonames them), the Pulumi resource name for a kustomize install."""
    if release.source == "helm":
        return release.chart.rstrip("/").rsplit("/", 1)[-1]
    return release.resource_name


def upstream_skips() -> dict[str, set[str]]:
    """check id -> releases allowed to fail it (`upstream:` in tests/data/checkov-skips.yaml)."""
    return {check: set(entry["releases"]) for check, entry in (checkov_skips().get("upstream") or {}).items()}


@pytest.fixture(scope="module")
def checkov_failures(tmp_path_factory) -> dict[tuple[str, str], set[str]]:
    """(source kind, release key) -> failed check ids, over every shipped stack's rendered output.
    CustomResourceDefinitions are left out of the input: checkov has no check for them and parsing
    their megabytes of schema would dominate the run."""
    folder = tmp_path_factory.mktemp("rendered")
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    keys: dict[str, tuple[str, str]] = {}
    count = 0
    for stack in STACKS:
        for i, rel in enumerate(rendered(stack)):
            if rel.source == "addon":
                # EKS's managed add-ons: stand-ins that carry only their pods' requests for fit
                # (gpu_platform/data/eks_addon_pods.py), not objects the program installs; EKS installs them.
                continue
            objs = [o for o in rel.objects if o["kind"] != "CustomResourceDefinition"]
            if not objs:
                continue
            fname = f"{stack}-{i:03d}.yaml"
            owner = "upstream" if rel.source in ("helm", "kustomize") else "platform"
            keys[fname] = (owner, upstream_key(rel) if owner == "upstream" else rel.name)
            (folder / fname).write_text(yaml.dump_all(objs, Dumper=dumper, sort_keys=False))
            count += len(objs)
    proc = subprocess.run([checkov_bin(), "-d", str(folder), "--framework", "kubernetes", "-o", "json", "--quiet",
                           "--compact", "--skip-download"], capture_output=True, text=True, timeout=1200)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout or "{}")
    reports = report if isinstance(report, list) else [report]
    summary = {k: sum(r.get("summary", {}).get(k, 0) for r in reports) for k in ("resource_count", "parsing_errors")}
    assert summary["parsing_errors"] == 0 and summary["resource_count"] >= count * 0.9, (summary, count)
    out: dict[tuple[str, str], set[str]] = {}
    for r in reports:
        for c in r.get("results", {}).get("failed_checks", []):
            owner, key = keys[Path(c["file_path"]).name]
            if owner == "platform" and _privileged_by_design(c.get("resource", ""), c["check_id"]):
                continue  # justified per object (`privileged:` in tests/data/checkov-skips.yaml)
            out.setdefault((owner, key), set()).add(c["check_id"])
    return out


def _privileged_by_design(resource: str, check: str) -> bool:
    """A platform object that must be privileged (a node-upgrade Job), matched by checkov's resource id
    (`Kind.namespace.name`) prefix, for the checks its entry names only."""
    for entry in (checkov_skips().get("privileged") or {}).values():
        if check in entry["checks"] and any(resource.startswith(p) for p in entry["resources"]):
            return True
    return False


@pytest.mark.sidevenv  # checkov, from .venv-checkov
def test_checkov_finds_no_unjustified_failure_in_the_rendered_output(checkov_failures) -> None:
    platform_allowed = justified_checks()
    upstream = upstream_skips()
    unjustified = []
    for (owner, key), checks in sorted(checkov_failures.items()):
        for check in sorted(checks):
            ok = check in platform_allowed if owner == "platform" else key in upstream.get(check, set())
            if not ok:
                unjustified.append(f"{owner} {key}: {check}")
    assert not unjustified, (f"checkov failures in the rendered output not justified in {CHECKOV_SKIPS} "
                             "(upstream: for upstream releases, platform: for the platform's own):\n" + "\n".join(unjustified))


@pytest.mark.sidevenv  # checkov, from .venv-checkov
def test_the_upstream_skip_list_names_only_what_fails(checkov_failures) -> None:
    failing = {(check, key) for (owner, key), checks in checkov_failures.items() if owner == "upstream" for check in checks}
    listed = {(check, key) for check, keys in upstream_skips().items() for key in keys}
    assert listed, f"{CHECKOV_SKIPS} has no upstream checkov skip list"
    stale = sorted(listed - failing)
    assert not stale, f"{CHECKOV_SKIPS} justifies checkov failures that no longer happen (remove them):\n" + "\n".join(map(str, stale))
