"""Kubernetes resource quantities ("500m", "1.5Gi", 2, "1e3") as exact numbers.

Below the config and the components: the config checks a `kubernetes.nodeTypes.<type>.allocatable` the user
copied from `kubectl get node`, and the components (gpu_platform/components/capacity.py) compute allocatable
with the same parser. Suffixes as resource.Quantity reads them (k8s.io/apimachinery pkg/api/resource,
quantity.go: binary Ki..Ei, decimal n, u, m, k, M..E, and exponents).
"""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIX = {"Ki": 1024, "Mi": 1024 ** 2, "Gi": 1024 ** 3, "Ti": 1024 ** 4, "Pi": 1024 ** 5, "Ei": 1024 ** 6,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1, "k": 10 ** 3, "M": 10 ** 6,
           "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes resource.Quantity ("500m", "1.5Gi", 2, "1e3") as an exact Decimal in base units."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        return Decimal(number) * Decimal(_SUFFIX[suffix])
    except ArithmeticError:  # "1.2.3": the pattern admits several dots
        raise ValueError(f"not a Kubernetes quantity: {value!r}") from None


def cpu_millis(value: object) -> int:
    """CPU quantity in millicores, rounded up as the API server does (it keeps milli precision)."""
    q = parse_quantity(value) * 1000
    return int(q.to_integral_value(rounding="ROUND_CEILING"))


def memory_bytes(value: object) -> int:
    q = parse_quantity(value)
    return int(q.to_integral_value(rounding="ROUND_CEILING"))
