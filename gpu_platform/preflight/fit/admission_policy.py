"""ValidatingAdmissionPolicies of the rendered releases, evaluated on a workload object the way the API
server does at CREATE (k8s.io/apiserver pkg/admission/plugin/policy/validating): a policy bound with
validationActions Deny applies when a resourceRule matches the object's group/resource with CREATE and
its namespaceSelector/objectSelector match; then every matchCondition must be true, and the first
validation that is false refuses the request with its message (messageExpression when given).

CEL by cel-python (a test dependency of the project; without it nothing is evaluated and fit says so
in its notes), with Kubernetes' quantity library (`quantity()`, `compareTo`) as the policies of the
platform use it. Pure functions.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from gpu_platform.components.capacity import parse_quantity
from gpu_platform.preflight.fit.selectors import label_selector_matches

UNAVAILABLE = "the platform's ValidatingAdmissionPolicies were not evaluated (cel-python is not installed)"


def _rule_matches(rule: dict, group: str, resource: str) -> bool:
    ops = rule.get("operations") or []
    return (("CREATE" in ops or "*" in ops) and any(g in ("*", group) for g in rule.get("apiGroups") or [])
            and any(r in ("*", resource) for r in rule.get("resources") or []))


# Who creates what fit evaluates (a job a user submits, a notebook pod the hub creates): a person, not
# a controller the policies trust.
SUBMITTER = "user@example.com"


def cel_functions() -> dict[str, Callable[..., Any]]:
    """The Kubernetes CEL quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go) for cel-python:
    quantity() parses a resource.Quantity (a bad one is a CEL error, which `||` absorbs), isQuantity() tests
    one, compareTo() orders two, asApproximateFloat() gives its value; and the list library's sum() and
    max() (k8s.io/apiserver/pkg/cel/library/lists.go). Quantities parse as the program's own (components/capacity.parse_quantity)."""
    import celpy

    def quantity(text):
        try:
            return celpy.celtypes.DoubleType(float(parse_quantity(str(text))))
        except (ValueError, KeyError, ArithmeticError):
            return celpy.evaluation.CELEvalError(f"invalid quantity {text!r}", ValueError)

    def is_quantity(text):
        try:
            parse_quantity(str(text))
        except (ValueError, KeyError, ArithmeticError):
            return celpy.celtypes.BoolType(False)
        return celpy.celtypes.BoolType(True)

    def compare(a, b):
        return celpy.celtypes.IntType((a > b) - (a < b))

    def as_approximate_float(q):
        return celpy.celtypes.DoubleType(float(q))

    # The Kubernetes CEL list library (k8s.io/apiserver/pkg/cel/library/lists.go): sum() of an empty list
    # of doubles is 0.0; max() of an empty list is an error.
    def list_sum(items):
        total = celpy.celtypes.DoubleType(0.0)
        for item in items:
            total = total + item
        return total

    def list_max(items):
        if len(items) == 0:
            return celpy.evaluation.CELEvalError("max called on empty list", ValueError)
        return max(items)

    return {"quantity": quantity, "compareTo": compare, "isQuantity": is_quantity,
            "asApproximateFloat": as_approximate_float, "sum": list_sum, "max": list_max}


@functools.lru_cache(maxsize=1024)
def _compiled(expr: str) -> Any:
    """A CEL expression's parse tree, once per process: parsing (lark) is 3/4 of an evaluation, and every
    job of a --job file and every notebook pod is checked against the same few policies' expressions.
    The interpreted runner only reads the tree."""
    import celpy

    return celpy.Environment().compile(expr)


def _evaluator(obj: dict, namespace: Optional[dict], user: str = SUBMITTER) -> Optional[Callable[[str], Any]]:
    try:
        import celpy
    except ImportError:
        return None

    env = celpy.Environment()
    act = {"object": celpy.json_to_cel(obj),
           "request": celpy.json_to_cel({"kind": {"kind": obj.get("kind")}, "operation": "CREATE",
                                         "namespace": (obj.get("metadata") or {}).get("namespace"),
                                         "userInfo": {"username": user}})}
    if namespace is not None:
        act["namespaceObject"] = celpy.json_to_cel(namespace)
    fns = cel_functions()

    def ev(expr: str) -> Any:
        return env.program(_compiled(expr), functions=fns).evaluate(act)

    def with_variables(declared: list[dict]) -> None:
        """spec.variables, each seeing the ones before it (the API server computes them lazily; same result)."""
        values: dict = {}
        for v in declared:
            act["variables"] = celpy.celtypes.MapType(values)
            values[celpy.celtypes.StringType(v["name"])] = ev(v["expression"])
        act["variables"] = celpy.celtypes.MapType(values)

    ev.with_variables = with_variables  # type: ignore[attr-defined]
    return ev


# The most containers (containers, initContainers and ephemeralContainers of every pod template of one object)
# fit evaluates the policies on. cel-python interprets each policy's per-container expressions at some 20 ms a
# container on this project's policies: a Pod of 5,000 containers kept a --job run busy for minutes (attacker
# review). The API server bounds a Pod only by its request size (3 MiB), so nothing but this keeps it short;
# a training pod has a handful of containers.
MAX_EVALUATED_CONTAINERS = 100
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def container_lists(obj: Any, path: str = "") -> list[tuple[str, int]]:
    """(field path, length) of every container list in `obj` (a Pod, a Job's template, a JobSet's replicated
    jobs, a TrainJob's ...), depth-first."""
    out: list[tuple[str, int]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            here = f"{path}.{k}" if path else str(k)
            if k in _CONTAINER_LISTS and isinstance(v, list):
                out.append((here, len(v)))
            elif isinstance(v, (dict, list)):
                out += container_lists(v, here)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if isinstance(v, (dict, list)):
                out += container_lists(v, f"{path}[{i}]")
    return out


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("celpy") is not None


# refusal()'s answers, by what they depend on (the policies and bindings, the object, its plural, its
# namespace's labels, the user): cel-python interprets some 20 evaluations an object at a few milliseconds each,
# and a process that checks the same stack again (a test session, a preflight with --base) asks the same
# questions. The answer is a pure function of those inputs; the key keeps every dict's order, so two inputs
# share an answer only when they are the same to the evaluator.
_REFUSALS: dict[str, Optional[str]] = {}
_REFUSALS_KEPT = 4096
_POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def _key_part(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"


def refusal(objects: list[dict], obj: dict, resource: str, ns_labels: dict[str, str],
            user: str = SUBMITTER) -> Optional[str]:
    """The API server's refusal of creating `obj` (plural `resource`) by `user` (default: a user submitting work)
    by a policy among `objects`, or None."""
    import json

    policies = [o for o in objects if o.get("kind") in _POLICY_KINDS]
    key = json.dumps([policies, obj, resource, ns_labels, user], default=_key_part)
    if key in _REFUSALS:
        return _REFUSALS[key]
    answer = _refusal(policies, obj, resource, ns_labels, user)
    if len(_REFUSALS) >= _REFUSALS_KEPT:
        _REFUSALS.clear()
    _REFUSALS[key] = answer
    return answer


def _refusal(objects: list[dict], obj: dict, resource: str, ns_labels: dict[str, str], user: str) -> Optional[str]:
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    meta = obj.get("metadata") or {}
    bound = {(b.get("spec") or {}).get("policyName") for b in objects
             if b.get("kind") == "ValidatingAdmissionPolicyBinding" and "Deny" in ((b.get("spec") or {}).get("validationActions") or [])}
    for pol in objects:
        if pol.get("kind") != "ValidatingAdmissionPolicy" or (pol.get("metadata") or {}).get("name") not in bound:
            continue
        spec = pol.get("spec") or {}
        mc = spec.get("matchConstraints") or {}
        if not any(_rule_matches(r, group, resource) for r in mc.get("resourceRules") or []):
            continue
        if meta.get("namespace") and not label_selector_matches(mc.get("namespaceSelector"), ns_labels):
            continue
        if not label_selector_matches(mc.get("objectSelector"), dict(meta.get("labels") or {})):
            continue
        ev = _evaluator(obj, {"metadata": {"name": meta.get("namespace"), "labels": ns_labels}} if meta.get("namespace") else None,
                        user)
        if ev is None:
            return None
        name = (pol.get("metadata") or {}).get("name")
        try:
            # matchConditions first: they cannot read `variables` (the API server refuses a policy that does)
            if not all(ev(c["expression"]) for c in spec.get("matchConditions") or []):
                continue
            ev.with_variables(spec.get("variables") or [])  # type: ignore[attr-defined]
            for v in spec.get("validations") or []:
                if not ev(v["expression"]):
                    msg = str(ev(v["messageExpression"])) if v.get("messageExpression") else v.get("message") or v["expression"]
                    return f"ValidatingAdmissionPolicy '{name}' denied request: {msg}"
        except Exception as exc:  # noqa: BLE001 CEL this evaluator lacks: failurePolicy decides, as on the server
            if (spec.get("failurePolicy") or "Fail") == "Fail":
                return f"ValidatingAdmissionPolicy '{name}': its CEL could not be evaluated here ({type(exc).__name__}: {exc})"
    return None
