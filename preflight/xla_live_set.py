"""What XLA holds in HBM at its peak, read from the compiler's own dump: the buffers, their shapes and the ops that made them.

XLA writes, for a module it compiles with ``--xla_dump_to``, ``*-live-range.txt`` (its ``BufferLiveRange``
list: each value's first and last step in the schedule), ``*-buffer-assignment.txt`` (where each value lives:
its allocation, offset, size and shape) and ``*after_optimizations.txt`` (each instruction's ``op_name``, the
JAX operation it came from, e.g. ``jit(train_step)/transpose(jvp())/dot_general``). MaxText's
``train_compile`` dumps ``jit_train_step`` there (``dump_hlo_local_dir``), so the compile check's child reads
the train step's peak from these files (:func:`live_set_at_peak`) and the check shows the largest buffers.

The peak is the step at which the bytes of HBM in use are most, each byte counted once, which is what the
compile's memory analysis reports (to within tens of kilobytes; Gemma 3 12B's and Gemma 4 31B's compiles hold
0.5% more than the dump places, ``bench/bench_live_sets.py``). XLA's own "Live ranges at N (peak)" list is
not that step, and it counts values, not bytes: for the tutorial's Llama 3 8B on 2 x v6e-16 at 4 sequences a
chip it lists 21.11 GiB, both logits buffers among them, at a step before the layers' backward, while the
peak, 21.84 GiB, comes in the first layer's backward, beside the forward's logits alone
(``tests/test_xla_live_set.py``); held to the least memory at 8 sequences a chip, the list sums to 30.40 GiB
with the logits' gradient written over the logits (one slice of 7.83 GiB, two values), against 24.06. Values
XLA places in the same bytes are one buffer here, named by the one that took them over (:attr:`Buffer.shares`).
Text only: no XLA or JAX is imported here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

_LIVE_RANGES = "after_optimizations-live-range.txt"
_ASSIGNMENT = "after_optimizations-buffer-assignment.txt"
_PROGRAM = "after_optimizations.txt"
_RANGE = re.compile(r"^\s*(?P<name>[\w.\-]+(?:\{[\d,]*\})?):(?P<start>\d+)-(?P<end>\d+)\s*$")
_ALLOCATION = re.compile(r"^allocation (?P<index>\d+): size \d+, (?:color (?P<color>\d+), )?")
_VALUE = re.compile(r"^\s*value: <\d+ (?P<name>[\w.\-]+(?:\{[\d,]*\})?)(?: \(phi\))? @\d+> "
                    r"\(size=(?P<size>\d+),offset=(?P<offset>\d+)\): (?P<shape>[a-z0-9]+\[[\d,]*\])?")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = .*?metadata=\{op_name=\"(?P<op>(?:[^\"\\]|\\.)*)\"")


@dataclass(frozen=True)
class Buffer:
    """Storage in use at XLA's peak, named by the value that holds it."""

    name: str
    """The HLO value, ``fusion.257`` or ``while.47{2}`` (element 2 of a loop's carried tuple)."""
    bytes: int
    shape: str
    """XLA's shape without its layout, ``bf16[4,4096,32064]``; empty when the dump does not say."""
    op: str
    """The JAX operation the instruction came from (its ``op_name``), or a parameter's path in the train state."""
    shares: tuple[str, ...] = ()
    """Other values live in the same bytes at the peak: those whose storage this value took over."""

    def to_json(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "shape": self.shape, "op": self.op, "shares": list(self.shares)}


@dataclass(frozen=True)
class LiveSet:
    """XLA's peak as its dump shows it: the step, the bytes in use, the buffers, largest first."""

    step: int
    bytes: int
    buffers: list[Buffer] = field(default_factory=list)


@dataclass(frozen=True)
class _Value:
    name: str
    allocation: int
    offset: int
    size: int
    shape: str
    start: int
    end: int


def _module_file(dump: Path, module: str, suffix: str) -> Optional[Path]:
    """The dump's file of ``module`` ending in ``suffix``; the largest when XLA compiled the module more than once."""
    found = [path for path in dump.glob(f"*{module}*{suffix}") if path.is_file()]
    return max(found, key=lambda path: path.stat().st_size) if found else None


def _ranges(text: str) -> dict[str, tuple[int, int]]:
    """Each value's first and last step, from the ``BufferLiveRange`` section."""
    _, _, section = text.partition("BufferLiveRange:")
    found = {}
    for line in section.splitlines()[1:]:
        match = _RANGE.match(line)
        if not match:
            break
        # A value that is a whole result is "fusion.257{}" here and "fusion.257" in the buffer assignment.
        found[match["name"].removesuffix("{}")] = (int(match["start"]), int(match["end"]))
    return found


def _values(assignment: str, ranges: dict[str, tuple[int, int]]) -> list[_Value]:
    values, allocation, seen = [], None, set()
    for line in assignment.splitlines():
        match = _ALLOCATION.match(line)
        if match:
            # A colour other than 0 is another memory space (the cores' own scratch memories, semaphores), not HBM.
            allocation = int(match["index"]) if match["color"] in (None, "0") else None
            continue
        match = _VALUE.match(line)
        if not match or allocation is None or match["name"] in seen or match["name"] not in ranges:
            continue
        seen.add(match["name"])
        size = int(match["size"])
        if size:
            start, end = ranges[match["name"]]
            values.append(_Value(match["name"], allocation, int(match["offset"]), size, match["shape"] or "",
                                 start, end))
    return values


def _slices(live: list[_Value]) -> list[list[_Value]]:
    """The live values grouped by the bytes they occupy: values whose bytes overlap in one allocation are one slice."""
    groups: list[list[_Value]] = []
    end = -1
    for value in sorted(live, key=lambda v: (v.allocation, v.offset)):
        if groups and value.allocation == groups[-1][0].allocation and value.offset < end:
            groups[-1].append(value)
            end = max(end, value.offset + value.size)
        else:
            groups.append([value])
            end = value.offset + value.size
    return groups


def _in_use(group: list[_Value]) -> int:
    return max(v.offset + v.size for v in group) - min(v.offset for v in group)


def _ops(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            found.setdefault(match["name"], match["op"].replace("\\'", "'"))
    return found


def live_set_at_peak(dump: Path, module: str = "jit_train_step") -> Optional[LiveSet]:
    """The step of ``module`` with the most bytes in use and what is live in them; None when the dump has no live
    ranges (XLA refused the program before it assigned buffers)."""
    live_file = _module_file(dump, module, _LIVE_RANGES)
    if live_file is None:
        return None
    # The other files of the same compile of the module: the same name up to the suffix.
    prefix = live_file.name.removesuffix(_LIVE_RANGES)
    assignment, program = (live_file.with_name(prefix + suffix) for suffix in (_ASSIGNMENT, _PROGRAM))
    if not assignment.is_file():
        return None
    values = _values(assignment.read_text(errors="replace"), _ranges(live_file.read_text(errors="replace")))
    if not values:
        return None
    # The bytes in use only grow when a value starts, so the peak is at some value's first step.
    best_step, best_bytes, live, started = 0, -1, [], 0
    by_start = sorted(values, key=lambda v: v.start)
    for step in sorted({v.start for v in values}):
        while started < len(by_start) and by_start[started].start <= step:
            live.append(by_start[started])
            started += 1
        live = [v for v in live if v.end >= step]
        in_use = sum(_in_use(group) for group in _slices(live))
        if in_use > best_bytes:
            best_step, best_bytes = step, in_use
    ops = _ops(program.read_text(errors="replace")) if program.is_file() else {}
    buffers = []
    for group in _slices([v for v in values if v.start <= best_step <= v.end]):
        # The value that started last holds the bytes now; the others are what it was written over.
        holder = max(group, key=lambda v: (v.start, v.size))
        buffers.append(Buffer(holder.name, _in_use(group), holder.shape, ops.get(holder.name.split("{", 1)[0], ""),
                              tuple(v.name for v in group if v is not holder)))
    buffers.sort(key=lambda b: -b.bytes)
    return LiveSet(best_step, best_bytes, buffers)
