"""What XLA holds in HBM at its peak, read from the compiler's own dump: the buffers, their shapes and the ops that made them.

XLA writes, for a module it compiles with ``--xla_dump_to``, ``*-live-range.txt`` (its "Live ranges at N (peak)"
list: every buffer live at the peak and its bytes), ``*-buffer-assignment.txt`` (each value's shape) and
``*after_optimizations.txt`` (each instruction's ``op_name``, the JAX operation it came from, e.g.
``jit(train_step)/transpose(jvp())/dot_general``). MaxText's ``train_compile`` dumps ``jit_train_step`` there
(``dump_hlo_local_dir``), so the compile check's child reads the train step's peak from these files
(:func:`peak_buffers`) and the check shows the largest of them. Text only: no XLA or JAX is imported here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

_PEAK_HEADER = re.compile(r"^\s*Live ranges at \d+ \(peak\):\s*$")
_PEAK_LINE = re.compile(r"^\s*(?P<name>[\w.\-]+(?:\{[\d,]*\})?): (?P<bytes>\d+) bytes")
_VALUE = re.compile(r"value: <\d+ (?P<name>[\w.\-]+(?:\{[\d,]*\})?)(?: \(phi\))? @\d+> \(size=\d+,offset=\d+\): (?P<shape>[a-z0-9]+\[[\d,]*\])")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = .*?metadata=\{op_name=\"(?P<op>(?:[^\"\\]|\\.)*)\"")


@dataclass(frozen=True)
class Buffer:
    """One buffer live at XLA's peak."""

    name: str
    """The HLO value, ``fusion.257`` or ``while.47{2}`` (element 2 of a loop's carried tuple)."""
    bytes: int
    shape: str
    """XLA's shape without its layout, ``bf16[4,4096,32064]``; empty when the dump does not say."""
    op: str
    """The JAX operation the instruction came from (its ``op_name``), or a parameter's path in the train state."""

    def to_json(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "shape": self.shape, "op": self.op}


def _module_file(dump: Path, module: str, suffix: str) -> Optional[Path]:
    """The dump's file of ``module`` ending in ``suffix``; the largest when XLA compiled the module more than once."""
    found = [path for path in dump.glob(f"*{module}*{suffix}") if path.is_file()]
    return max(found, key=lambda path: path.stat().st_size) if found else None


def _peak(text: str) -> list[tuple[str, int]]:
    lines = iter(text.splitlines())
    for line in lines:
        if _PEAK_HEADER.match(line):
            break
    else:
        return []
    found = []
    for line in lines:
        match = _PEAK_LINE.match(line)
        if not match:
            break
        # A buffer that is a whole value is "fusion.257{}" here and "fusion.257" in the buffer assignment.
        found.append((match["name"].removesuffix("{}"), int(match["bytes"])))
    return found


def _shapes(text: str) -> dict[str, str]:
    return {match["name"]: match["shape"] for match in _VALUE.finditer(text)}


def _ops(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            found.setdefault(match["name"], match["op"].replace("\\'", "'"))
    return found


def peak_buffers(dump: Path, module: str = "jit_train_step", top: int = 30) -> list[Buffer]:
    """The ``top`` largest buffers live at XLA's peak for ``module``, largest first; empty when the dump has no
    live ranges (XLA refused the program before it assigned buffers)."""
    live = _module_file(dump, module, "after_optimizations-live-range.txt")
    if live is None:
        return []
    peak = sorted(_peak(live.read_text(errors="replace")), key=lambda item: -item[1])[:top]
    if not peak:
        return []
    assignment = _module_file(dump, module, "after_optimizations-buffer-assignment.txt")
    program = _module_file(dump, module, "after_optimizations.txt")
    shapes = _shapes(assignment.read_text(errors="replace")) if assignment else {}
    ops = _ops(program.read_text(errors="replace")) if program else {}
    return [
        Buffer(name, size, shapes.get(name, ""), ops.get(name.split("{", 1)[0], ""))
        for name, size in peak
    ]
