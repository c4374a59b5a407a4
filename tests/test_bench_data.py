"""The estimate benches' recorded results (bench/data/) against the benches, the estimate and the docs.

XLA's answers are data: each configuration once, every cell of every bench answered, the live sets of the runs
XLA compiled. From them: the band ``ESTIMATE_OVER_XLA`` is the span of every recorded ratio rounded outwards, the
sharding check agrees with XLA in every grid cell, the last held-out round is held out from the estimate as it is,
and every count the docs quote is rendered from the data (``bench/recorded.py --render``), never typed.
"""

from __future__ import annotations

import math
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "bench"))

import recorded  # noqa: E402
from gke_ray_tpu.preflight.memory import ESTIMATE_OVER_XLA  # noqa: E402


def test_a_name_two_benches_use_is_one_run():
    seen: dict[str, tuple] = {}
    for bench, groups in recorded.BENCHES.items():
        for cells in groups.values():
            for name, cell in cells.items():
                key = recorded.identity(recorded.request(recorded.spec_of(bench, name, cell)))
                assert seen.setdefault(name, key) == key, name


@pytest.mark.parametrize("bench", ["bench_estimates", "bench_preflight_grid", "bench_xla_need"])
def test_every_cell_of_the_bench_has_xlas_recorded_answer(bench):
    for group, cells in recorded.BENCHES[bench].items():
        for name in cells:  # each name is one run, whichever bench names it (the test above)
            spec = recorded.definitions()[name]
            recorded.recorded().check(recorded.request(spec))  # LookupError names the run
            if bench == "bench_xla_need":
                recorded.recorded().check(recorded.request(spec, recorded.bench_xla_need.LEAST_MEMORY))


def test_every_recorded_answer_is_a_named_run_recorded_once():
    data = recorded.load("xla")
    for section in ("runs", "least_memory"):
        unknown = set(data[section]) - set(recorded.definitions())
        assert not unknown, f"bench/data/xla.yaml {section}: runs no bench names: {sorted(unknown)}"
    assert len(recorded.recorded().answers) == len(data["runs"]) + len(data["least_memory"])
    for name, record in data["runs"].items():
        assert len({"peak", "needs", "refused"} & set(record)) == 1 and record["s"] > 0, name


def test_the_live_sets_are_those_of_the_runs_xla_compiled():
    live = recorded.recorded().live
    wanted = set()
    for group, cells in recorded.bench_live_sets.GROUPS.items():
        for name in cells:
            req = recorded.request(recorded.definitions()[name])
            if recorded.recorded().check(req).fits:
                wanted.add(recorded.identity(req))
    assert set(live) == wanted
    for record in live.values():
        count, largest = record["logits"]
        assert 0.9 < record["dump / XLA"] <= 1.0 and count >= 0 and largest >= 0


def test_the_band_is_every_recorded_runs_span_rounded_outwards():
    ratios = [run.ratio for run in recorded.compiled_runs()]
    low, high = ESTIMATE_OVER_XLA
    assert math.floor(min(ratios) * 100) / 100 == low, min(ratios)
    assert math.ceil(max(ratios) * 100) / 100 == high, max(ratios)


def test_the_cheap_sharding_verdict_is_xlas_in_every_grid_cell():
    agree, cells = recorded.sharding_agreement()
    assert cells == sum(len(group) for group in recorded.bench_preflight_grid.GROUPS.values())
    assert agree == cells


def test_the_rounds_history_is_the_grids_rounds_in_order():
    history = recorded.load("rounds")["rounds"]
    names = [name for name in recorded.bench_preflight_grid.GROUPS if name.startswith(recorded.HELD_OUT)]
    assert list(history) == names
    for found in recorded.rounds():
        at = found.at_commit
        assert 0 <= at["within"] <= found.answered <= found.drawn and at["low"] <= at["high"], found.name


def test_the_last_round_is_held_out_from_the_estimate_as_it_is():
    """Its recorded score is the current estimate's: a change of the estimate makes the round no longer held out,
    and this fails until a new round is drawn after the change and recorded."""
    last = recorded.rounds()[-1]
    ratios = [run.ratio for run in last.ratios]
    assert sum(run.within for run in last.ratios) == last.at_commit["within"]
    # XLA's figures are recorded to 0.01 GiB: the span's third decimal may move by one.
    assert min(ratios) == pytest.approx(last.at_commit["low"], abs=0.002)
    assert max(ratios) == pytest.approx(last.at_commit["high"], abs=0.002)


def test_every_note_belongs_to_a_table():
    tables = {f"{bench} {group}" for bench, groups in recorded.BENCHES.items() for group in groups}
    others = set(recorded.BENCHES) | {"rounds", "estimate terms"}
    assert set(recorded.load("rounds")["notes"]) <= tables | others


@pytest.mark.parametrize("page", sorted(recorded.PAGES))
def test_the_pages_counts_are_rendered_from_the_data(page):
    text = (REPO_ROOT / page).read_text()
    assert sorted(recorded.blocks(text)) == sorted(recorded.PAGES[page])
    assert recorded.rendered(text) == text, f"{page}: run .venv/bin/python bench/recorded.py --render"
