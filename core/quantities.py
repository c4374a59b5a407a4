"""Kubernetes resource quantities (``8``, ``500m``, ``16Gi``, ``200G``, ``1e3``) as numbers, and back.

As ``k8s.io/apimachinery/pkg/api/resource``: a decimal number, then a binary (``Ki`` to ``Ei``) or decimal (``n`` to
``E``) suffix, or an exponent.
"""

from __future__ import annotations

import re
from decimal import Decimal

_SUFFIXES = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60, "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
    "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")


def quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity (``8``, ``500m``, ``16Gi``, ``200G``, ``1e3``) as a number."""
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return Decimal(value)
    match = _QUANTITY.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = match.groups()
    scale = Decimal(10) ** int(exponent) if exponent else _SUFFIXES[suffix or ""]
    return Decimal(number) * scale


def format_quantity(value: Decimal) -> object:
    """A quantity for a manifest: a whole number as an int, a fraction in milli-units, whole GiB as ``NGi``."""
    if value != value.to_integral_value():
        return f"{int((value * 1000).to_integral_value())}m"
    whole = int(value)
    gib = 2 ** 30
    return f"{whole // gib}Gi" if whole >= gib and whole % gib == 0 else whole
