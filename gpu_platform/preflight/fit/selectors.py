"""Kubernetes label selectors (metav1.LabelSelector and node-selector expressions), as the API server
matches them: shared by the fit checks and the admission-policy evaluator."""

from __future__ import annotations

from typing import Optional


def match_expression(labels: dict[str, str], expr: dict) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def label_selector_matches(selector: Optional[dict], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector: None or {} matches everything."""
    if not selector:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != str(v):
            return False
    return all(match_expression(labels, e) for e in selector.get("matchExpressions") or [])


def tolerates(toleration: dict, taint: dict) -> bool:
    """v1.Toleration.ToleratesTaint: empty effect matches every effect; operator Exists with an empty
    key matches every taint; Equal (the default) compares values."""
    eff = toleration.get("effect") or ""
    if eff and eff != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    op = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if not key and op != "Exists":
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def tolerates_any(tolerations: Optional[list], taint: dict) -> bool:
    """Whether any of a pod's tolerations tolerates `taint`."""
    return any(tolerates(t, taint) for t in tolerations or [])
