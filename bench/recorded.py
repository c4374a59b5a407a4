"""XLA's recorded answers, and every table, count and docs line made from them, without compiling.

The estimate benches (``bench_estimates.py``, ``bench_preflight_grid.py``, ``bench_xla_need.py``,
``bench_live_sets.py``) compile their runs with XLA's TPU compiler on this CPU, minutes each. What XLA answered
is data under ``bench/data/``:

- ``xla.yaml``: each configuration once (a run two benches name is one compile): ``peak`` (GiB per device, it
  compiled), ``needs`` (what XLA says a run it refuses for memory would need) or ``refused`` (MaxText's or JAX's
  error), and ``s``, the compile's own wall seconds; ``least_memory``: ``bench_xla_need.py``'s second compile
  of each of its runs, the scheduler held to the least memory;
- ``live_sets.yaml``: ``bench_live_sets.py``'s reading of XLA's live set at the peak, item by item;
- ``rounds.yaml``: the held-out rounds of ``bench_preflight_grid.py`` (what each was held out from, what it
  measured on the estimate of that commit) and the notes on every table.

This script prints each bench's tables through the bench's own ``measure`` and ``report``, its cells and groups,
with the compile check replaced by the recorded answer, on the estimate as it is now. ``--render`` rewrites the
blocks of bench/README.md and docs/preflight.md made from the same data (``tests/test_bench_data.py`` keeps
them equal and holds the data to the benches and the estimate's band).

    .venv/bin/python bench/recorded.py [--bench NAME] [--group NAME ...] [--notes]
    .venv/bin/python bench/recorded.py --rounds
    .venv/bin/python bench/recorded.py --render
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import yaml  # noqa: E402

import bench_estimates  # noqa: E402
import bench_live_sets  # noqa: E402
import bench_preflight_grid  # noqa: E402
import bench_xla_need  # noqa: E402
from gke_ray_tpu.core.errors import ConfigError  # noqa: E402
from gke_ray_tpu.core.job_spec import JobSpec  # noqa: E402
from gke_ray_tpu.preflight.memory import ESTIMATE_OVER_XLA, estimate_hbm_from_config  # noqa: E402
from gke_ray_tpu.preflight.xla_check import GIB, NOT_IN_PROGRAM, CompileRequest, XlaResult, request_for_job  # noqa: E402

DATA = REPO / "bench" / "data"
WITHIN = bench_preflight_grid.WITHIN
BENCHES = {"bench_estimates": bench_estimates.GROUPS, "bench_preflight_grid": bench_preflight_grid.GROUPS,
           "bench_xla_need": bench_xla_need.GROUPS, "bench_live_sets": bench_live_sets.GROUPS}
"""Each bench's groups of named runs, as the bench defines them."""
HELD_OUT = "held-out"
"""The grid's rounds are its groups named ``held-out`` and ``held-out-<commit>``."""
PAGES = {"bench/README.md": ("groups", "rounds", "counts"), "docs/preflight.md": ("band", "tutorial")}
"""The blocks each page holds, between ``<!-- recorded.py: NAME -->`` and ``<!-- /recorded.py -->``."""


def load(name: str) -> dict:
    return yaml.safe_load((DATA / f"{name}.yaml").read_text())


def save(name: str, sections: dict[str, dict[str, dict]]) -> None:
    """Write ``bench/data/<name>.yaml`` again: its comment lines as they are, then each section with one run a line."""
    path = DATA / f"{name}.yaml"
    header = [line for line in path.read_text().splitlines() if line.startswith("#")] if path.exists() else []
    lines = list(header)
    for section, entries in sections.items():
        lines.append(f"{section}:")
        lines += ["  " + yaml.safe_dump({key: value}, default_flow_style=True, sort_keys=False, width=10**6).strip()[1:-1]
                  for key, value in entries.items()]
    path.write_text("\n".join(lines) + "\n")


def spec_of(bench: str, name: str, cell) -> JobSpec:
    """A named run as its bench builds it (``bench_estimates.py`` names a configuration; the others a cell)."""
    if isinstance(cell, str) or bench == "bench_estimates":
        return bench_estimates.job(name)
    return bench_preflight_grid._job(name, cell)[0]


@cache
def definitions() -> dict[str, JobSpec]:
    """Every named run of the benches, by name (a name two benches use is one cell: the test holds them equal)."""
    named: dict[str, JobSpec] = {}
    for bench, groups in BENCHES.items():
        for cells in groups.values():
            for name, cell in cells.items():
                named.setdefault(name, spec_of(bench, name, cell))
    return named


def identity(request: CompileRequest) -> tuple:
    """What makes two compiles one: the target, the slices, the program's settings and the flags (as the
    compile check's cache digest, less the versions, which the data's header names)."""
    settings = tuple(item for item in request.maxtext_argv[1:] if item.split("=", 1)[0] not in NOT_IN_PROGRAM)
    return request.compile_topology, request.num_slices, settings, request.libtpu_flags


def request(spec: JobSpec, flags: tuple[str, ...] = ()) -> CompileRequest:
    return request_for_job(spec, libtpu_flags=flags)


class Recorded:
    """XLA's recorded answers as the compile check's results: ``check`` stands in for ``compile_check``."""

    def __init__(self) -> None:
        data = load("xla")
        self.answers: dict[tuple, tuple[str, dict]] = {}
        for section, flags in (("runs", ()), ("least_memory", bench_xla_need.LEAST_MEMORY)):
            for name, record in data[section].items():
                key = identity(request(definitions()[name], flags))
                if key in self.answers:
                    raise ValueError(f"bench/data/xla.yaml: {name} is the compile of {self.answers[key][0]}")
                self.answers[key] = (name, record)
        self.live = {identity(request(definitions()[name])): record for name, record in load("live_sets")["runs"].items()}

    def check(self, req: CompileRequest, **_) -> XlaResult:
        found = self.answers.get(identity(req))
        if found is None:
            raise LookupError(f"no recorded answer for {req.label} ({req.compile_topology} x {req.num_slices}, "
                              f"flags {list(req.libtpu_flags)}): run its bench")
        name, record = found
        limit = definitions()[name].shape().generation.xla_hbm_limit_gib
        if "peak" in record:
            outcome = {"status": "compiled", "peak_bytes": record["peak"] * GIB, "hbm_limit_gib": limit}
        elif "needs" in record:
            outcome = {"status": "oom", "needed_gib": record["needs"], "available_gib": limit}
        else:
            outcome = {"status": "error", "message": record["refused"]}
        return XlaResult(req, outcome, digest="recorded", versions={}, wall_seconds=record["s"], log="", cached=True)

    def live_set(self, spec: JobSpec) -> dict:
        """``bench_live_sets.live_set``'s reading of the run's live set, as recorded."""
        record = self.live[identity(request(spec))]
        count, largest = record["logits"]
        return {"read": record["dump / XLA"], "items": {item: record.get(item, 0.0) for item in bench_live_sets.ITEMS},
                "logits": [largest] * count}


@cache
def recorded() -> Recorded:
    return Recorded()


def rows(bench: str, group: str, only: Optional[set[str]] = None) -> list:
    """A group's rows as its bench's ``measure`` makes them, from the recorded answers."""
    cells = BENCHES[bench][group]
    check = recorded().check
    found = []
    for name, cell in cells.items():
        if only and name not in only:
            continue
        if bench == "bench_estimates":
            found.append(bench_estimates.measure(name, check=check))
        elif bench == "bench_live_sets":
            found.append(bench_live_sets.measure(name, cell, check=check, recorded=recorded().live_set))
        else:
            found.append(sys.modules[bench].measure(name, cell, check=check))
    return found


REPORTS: dict[str, Callable] = {bench: sys.modules[bench].report for bench in BENCHES}


# --- counts -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ratio:
    name: str
    estimate: float
    xla: float

    @property
    def ratio(self) -> float:
        return self.estimate / self.xla

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1) <= WITHIN


def estimate(spec: JobSpec) -> Optional[float]:
    try:
        return estimate_hbm_from_config(spec.maxtext, spec.shape(), spec.slices).total_per_device_gib
    except ConfigError:  # a run the estimate does not model (tensor across slices, an ICI product not the slice's)
        return None


def answer(name: str) -> XlaResult:
    """XLA's recorded answer to the named run (compiled with its own scheduler, no flags)."""
    return recorded().check(request(definitions()[name]))


@cache
def ratio_of(name: str) -> Optional[Ratio]:
    """The estimate over XLA's figure (its peak, or what it says a run it refuses needs); None where either is
    missing."""
    figure = answer(name)
    xla = figure.peak_hbm_gib if figure.fits is not None else None
    total = estimate(definitions()[name])
    return None if xla is None or total is None else Ratio(name, total, xla)


@cache
def compiled_runs() -> tuple[Ratio, ...]:
    """Every recorded run XLA compiled or sized with its own scheduler (no flags) that the estimate models: the
    runs ``ESTIMATE_OVER_XLA`` is taken over, once per configuration."""
    found = []
    for name in load("xla")["runs"]:
        ratio = ratio_of(name)
        if ratio:
            found.append(ratio)
    return tuple(found)


@dataclass(frozen=True)
class Round:
    name: str
    change: str
    commit: str
    drawn: int
    ratios: tuple[Ratio, ...]
    """The current estimate over XLA's figure, for each run of the round XLA answered."""
    at_commit: dict
    """``within``, ``low``, ``high``: what the round measured on the estimate it was held out from."""

    @property
    def answered(self) -> int:
        return len(self.ratios)


@cache
def rounds() -> tuple[Round, ...]:
    """The held-out rounds, oldest first."""
    history = load("rounds")["rounds"]
    found = []
    for name, cells in bench_preflight_grid.GROUPS.items():
        if not name.startswith(HELD_OUT):
            continue
        entry = history[name]
        ratios = tuple(r for r in map(ratio_of, cells) if r)
        found.append(Round(name, entry["change"], entry.get("commit", name.removeprefix(HELD_OUT + "-")),
                           len(cells), ratios, entry["at_commit"]))
    return tuple(found)


def sharding_agreement() -> tuple[int, int]:
    """Grid cells whose cheap verdict (the sharding check) is XLA's (both refuse, or both take the sharding), and
    all grid cells."""
    cells = [(name, cell) for group in bench_preflight_grid.GROUPS.values() for name, cell in group.items()]
    agree = 0
    for name, cell in cells:
        _, cheap = bench_preflight_grid._job(name, cell)
        agree += cheap.startswith("refused") == (answer(name).fits is None)
    return agree, len(cells)


# --- rendering ----------------------------------------------------------------------------------------------


def _span(ratios) -> str:
    values = [r.ratio for r in ratios]
    return f"{min(values):.3f} to {max(values):.3f}" if values else "-"


def _of(part: int, whole: int) -> str:
    return f"{part} of {whole}"


def render_groups() -> str:
    lines = ["| bench, group | runs | XLA answered | within 10% of XLA now | estimate / XLA now |",
             "|---|---|---|---|---|"]
    for bench in ("bench_estimates", "bench_preflight_grid", "bench_xla_need"):
        for group, cells in BENCHES[bench].items():
            ratios = [r for r in map(ratio_of, cells) if r]
            answered = sum(answer(name).fits is not None for name in cells)
            lines.append(f"| `{bench}` {group} | {len(cells)} | {answered} | "
                         f"{_of(sum(r.within for r in ratios), len(ratios))} | {_span(ratios)} |")
    return "\n".join(lines)


def render_rounds() -> str:
    lines = ["| round | held out from | drawn | XLA answered | within 10% at its commit | estimate / XLA at its "
             "commit | within 10% now |", "|---|---|---|---|---|---|---|"]
    for r in rounds():
        at = r.at_commit
        lines.append(f"| `{r.name}` | {r.change} ({r.commit}) | {r.drawn} | {r.answered} | "
                     f"{_of(at['within'], r.answered)} | {at['low']:.3f} to {at['high']:.3f} | "
                     f"{_of(sum(x.within for x in r.ratios), r.answered)} |")
    return "\n".join(lines)


def render_counts() -> str:
    runs = compiled_runs()
    agree, cells = sharding_agreement()
    last = rounds()[-1]
    earlier = rounds()[-3:]
    return (f"Over the {len(runs)} runs compiled to derive or test the estimate (once each, XLA's own scheduler), "
            f"the estimate is {_span(runs)} times XLA's figure, {sum(r.within for r in runs)} of them within 10%; "
            f"the band `ESTIMATE_OVER_XLA`, {ESTIMATE_OVER_XLA[0]:.2f} to {ESTIMATE_OVER_XLA[1]:.2f}, is that span "
            f"rounded outwards, so it is not a held-out measure. The {len(rounds())} held-out rounds are. The last, "
            f"`{last.name}`, is held out from the current estimate ({last.commit}): {_of(last.at_commit['within'], last.answered)} "
            f"within 10% ({last.drawn} drawn). Over the last {len(earlier)} rounds, each at its own commit, "
            f"{_of(sum(r.at_commit['within'] for r in earlier), sum(r.answered for r in earlier))}. "
            f"The cheap sharding verdict was XLA's in {_of(agree, cells)} grid cells.")


def render_band() -> str:
    runs = compiled_runs()
    last = rounds()[-1]
    low, high = ESTIMATE_OVER_XLA
    return (f"The estimate has been {low:.2f} to {high:.2f} times XLA's figure (`ESTIMATE_OVER_XLA`) over the "
            f"{len(runs)} runs compiled to derive or test it, {sum(r.within for r in runs)} of them within 10%. "
            f"Held out from the current estimate ({last.commit}), it was within 10% of XLA for "
            f"**{_of(last.at_commit['within'], last.answered)}** runs ({last.drawn} drawn at random, "
            f"{last.at_commit['low']:.2f} to {last.at_commit['high']:.2f} times XLA's figure; the goal is 90%).")


TUTORIAL = {
    "8b-v6e-pdbs4-full": "Llama 3 8B baseline",
    "70b-v6e-tutorial": "Llama 3 70B as the tutorial writes it (float32 weights, pdbs 2)",
    "70b-v6e-bf16-pdbs1-full": "Llama 3 70B, `weight_dtype=bfloat16 per_device_batch_size=1`",
    "70b-v6e-bf16-pdbs1-save_qkv_proj": "the same, remat `save_qkv_proj`",
    "70b-v6e-bf16-pdbs1-save_dot_except_mlp": "the same, remat `save_dot_except_mlp`",
}
"""The tutorial's runs on its 2 x v6e-16, as ``bench_estimates.py`` names them."""


def render_tutorial() -> str:
    lines = ["| run (2 x v6e-16) | estimate | its verdict | XLA | XLA's verdict |", "|---|---|---|---|---|"]
    for name, label in TUTORIAL.items():
        spec = definitions()[name]
        hbm = estimate_hbm_from_config(spec.maxtext, spec.shape(), spec.slices)
        xla = answer(name)
        figure = f"{xla.peak_hbm_gib:.2f} {'peak' if xla.fits else 'needed'} of {xla.hbm_limit_gib:.2f}"
        lines.append(f"| {label} | {hbm.total_per_device_gib:.2f} | {hbm.verdict} | {figure} | "
                     f"{'fits' if xla.fits else 'does not fit'} |")
    return "\n".join(lines)


RENDER = {"groups": render_groups, "rounds": render_rounds, "counts": render_counts, "band": render_band,
          "tutorial": render_tutorial}
BLOCK = re.compile(r"(<!-- recorded\.py: (\w+) -->\n)((?:(?!<!-- /recorded\.py -->).)*)(<!-- /recorded\.py -->)", re.S)


def rendered(text: str) -> str:
    """``text`` with each block made again from the data."""
    return BLOCK.sub(lambda m: m.group(1) + RENDER[m.group(2)]() + "\n" + m.group(4), text)


def blocks(text: str) -> dict[str, str]:
    """Each rendered block of ``text`` by name, as it stands."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", choices=sorted(BENCHES), action="append", help="only this bench (repeatable)")
    parser.add_argument("--group", action="append", help="only this group (repeatable)")
    parser.add_argument("--only", nargs="*", help="only these runs")
    parser.add_argument("--notes", action="store_true", help="print each table's notes after it")
    parser.add_argument("--rounds", action="store_true", help="the held-out rounds, one line each")
    parser.add_argument("--render", action="store_true", help="rewrite the rendered blocks of the docs")
    args = parser.parse_args()
    if args.render:
        for page in PAGES:
            path = REPO / page
            path.write_text(rendered(path.read_text()))
        return 0
    if args.rounds:
        print(render_rounds())
        return 0
    notes = load("rounds")["notes"]
    for bench in args.bench or BENCHES:
        for group in BENCHES[bench]:
            if args.group and group not in args.group:
                continue
            found = rows(bench, group, set(args.only) if args.only else None)
            if not found:
                continue
            print(f"\n$ nice -n 5 .venv/bin/python bench/{bench}.py --group {group}", end="")
            REPORTS[bench](group, found)
            if args.notes and f"{bench} {group}" in notes:
                print("\n" + notes[f"{bench} {group}"].strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
