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


# --- As Kueue counts and writes them ----------------------------------------------------------------------------

MILLI_RESOURCES = frozenset({"cpu"})
"""Resources Kueue counts in thousandths (``pkg/resources.ResourceValue``: cpu as MilliValue, the rest as Value)."""
BINARY_RESOURCES = frozenset({"memory", "ephemeral-storage"})
"""Resources Kueue writes in binary units (``ResourceFormatter.ResourceQuantity``; hugepages-* too)."""

_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}


def kueue_value(resource: str, value: object) -> int:
    """A quantity as the whole number Kueue counts it in: thousandths for cpu, units for the rest, rounded up as
    ``resource.Quantity`` ``MilliValue`` and ``Value`` round."""
    amount = quantity(value) * (1000 if resource in MILLI_RESOURCES else 1)
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))


def kueue_string(resource: str, value: int) -> str:
    """``value`` (in :func:`kueue_value`'s units) as Kueue writes it in messages and ``resourceUsage``: the
    canonical string of a Kubernetes ``resource.Quantity`` (``8``, ``500m``, ``1k``, ``16Gi``, ``195312500Ki``),
    binary for memory (``newCanonicalQuantity``: a byte count that is not a multiple of 1024 reads back decimal)."""
    if resource in MILLI_RESOURCES:
        return _decimal_si(value, -3)
    if (resource in BINARY_RESOURCES or resource.startswith("hugepages-")) and abs(value) >= 1024:
        mantissa, power = value, 0
        while mantissa % 1024 == 0 and power < 6:
            mantissa, power = mantissa // 1024, power + 1
        if power:
            return f"{mantissa}{_BINARY_SUFFIXES[power]}"
    return _decimal_si(value, 0)


def _decimal_si(mantissa: int, exponent: int) -> str:
    """``int64Amount.AsCanonicalBytes``: every factor of 10 out of the mantissa, the exponent down to a multiple
    of 3, then the SI suffix."""
    if mantissa == 0:
        return "0"
    while mantissa % 10 == 0:
        mantissa, exponent = mantissa // 10, exponent + 1
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    if exponent in _DECIMAL_SUFFIXES:
        return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
    return f"{mantissa}e{exponent}"
