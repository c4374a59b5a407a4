"""XLA's live set at its peak, read from the compiler's own dump.

``tests/fixtures/xla_dump`` holds three files XLA wrote (libtpu 0.0.50.1, MaxText 0.2.5) for a Llama 3 8B train
step on 2 x v6e-16 at batch 4 (the tutorial's baseline, no libtpu flags): its live ranges (``BufferLiveRange``
and the list XLA calls its peak; the instruction sequence cut), the buffer assignment of the values that have a
live range, and the instructions of the buffers live at the peak (their backend configs removed). The same
compile's memory analysis said ``peak_memory_in_bytes=23449391872``.
"""

from __future__ import annotations

import re
from pathlib import Path

from gke_ray_tpu.preflight.xla_live_set import live_set_at_peak

DUMP = Path(__file__).parent / "fixtures" / "xla_dump"
GIB = 2**30
MIB = 2**20
XLA_PEAK_BYTES = 23_449_391_872
"""``compiled.memory_analysis().peak_memory_in_bytes`` of the compile that wrote the fixture."""


def test_the_peak_holds_what_xlas_memory_analysis_says():
    live = live_set_at_peak(DUMP)
    assert abs(live.bytes - XLA_PEAK_BYTES) < MIB
    assert abs(sum(b.bytes for b in live.buffers) - live.bytes) == 0


def test_the_step_xlas_live_range_list_calls_its_peak_is_not_it():
    text = next(DUMP.glob("*live-range.txt")).read_text()
    step, listed = re.search(r"Live ranges at (\d+) \(peak\):\n((?:\s+\S+: \d+ bytes.*\n)+)", text).groups()
    listed_bytes = sum(int(n) for n in re.findall(r"^\s+\S+: (\d+) bytes", listed, re.MULTILINE))
    # Its list (21.11 GiB) holds both logits buffers, the forward's and the gradient's, at a step 0.73 GiB below
    # the peak, before the layers' backward starts.
    assert XLA_PEAK_BYTES - listed_bytes > GIB / 2
    assert int(step) != live_set_at_peak(DUMP).step


def test_at_the_peak_the_first_layers_backward_runs_beside_the_forward_logits():
    buffers = live_set_at_peak(DUMP).buffers
    carry, logits = buffers[:2]
    # 32 layers' inputs: [layers, batch 16 per shard, 4096 tokens, 4096 / tensor 4], saved by the forward scan.
    assert (carry.shape, carry.bytes, carry.op, carry.name) == (
        "bf16[32,16,4096,1024]", 4 * GIB, "jit(train_step)/jvp()/while", "while.56{2}")
    # One logits buffer over vocabulary / tensor 4, the forward's: its gradient is gone by this step.
    assert (logits.shape, logits.bytes, logits.op) == (
        "bf16[16,4096,32064]", 16 * 4096 * 32064 * 2, "jit(train_step)/jvp()/dot_general")
    assert [b for b in buffers if b.shape.endswith(",32064]") and b.shape.startswith("bf16[16,")] == [logits]
    # The layers' float32 weight gradients, stacked over the 32 layers (the peeled loop's carry), all there:
    # each layer's q, k, v, o, three MLP kernels and two norms, split over the slice's 16 chips, 4 bytes each.
    gradients = [b for b in buffers if b.shape.startswith("f32[32,") and b.name.startswith("wide.loop_peel_param")]
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert abs(sum(b.bytes for b in gradients) / (32 * layer / 16 * 4) - 1) < 0.001
    # The head's input gathered whole over tensor, three times, and the first layer's recompute in its backward.
    assert [b.shape for b in buffers].count("bf16[16,4096,4096]") == 3
    assert any("transpose(jvp())/while/body" in b.op for b in buffers)


def test_every_buffer_is_named_sized_and_most_have_a_shape_and_an_op():
    buffers = live_set_at_peak(DUMP).buffers
    assert len(buffers) > 150 and [b.bytes for b in buffers] == sorted((b.bytes for b in buffers), reverse=True)
    assert sum(1 for b in buffers if b.shape) == len(buffers)
    assert sum(1 for b in buffers if b.op) > len(buffers) / 2
    # The train state's buffers are named by their path in it.
    assert any(b.op == "state['optimizer']['opt_state'][0]['mu']['decoder']['layers']['mlp']['wi_0']['kernel'].value"
               for b in buffers)


def _dump(directory: Path, ranges: str, assignment: str) -> Path:
    directory.mkdir()
    (directory / "module_0000.jit_train_step.cl_1.after_optimizations-live-range.txt").write_text(
        "HloLiveRange (max 9):\n  BufferLiveRange:\n" + ranges)
    (directory / "module_0000.jit_train_step.cl_1.after_optimizations-buffer-assignment.txt").write_text(
        "BufferAssignment:\n" + assignment)
    return directory


def test_a_value_written_over_another_is_counted_once_and_other_memory_spaces_not_at_all(tmp_path):
    # XLA's formats, made up values: the gradient (multiply) takes over the logits' bytes (fusion.1) at step 4,
    # while both are live; the carry joins them then; a scratch buffer in memory space 1 is not HBM.
    dump = _dump(tmp_path / "dump", "    fusion.1{}:1-4\n    multiply.2{}:4-7\n    while.3{2}:4-9\n    scratch.4{}:0-9\n", (
        "allocation 0: size 300, page 0, preallocated-temp:\n"
        " value: <1 fusion.1 @0> (size=100,offset=0): bf16[10,5]{1,0}\n"
        " value: <2 multiply.2 @0> (size=100,offset=0): bf16[10,5]{1,0}\n"
        " value: <3 while.3{2} (phi) @0> (size=200,offset=100): bf16[10,10]{1,0}\n"
        "allocation 1: size 4096, color 1, page 0, preallocated-temp:\n"
        " value: <4 scratch.4 @0> (size=4096,offset=0): u8[4096]{0}\n"))
    live = live_set_at_peak(dump)
    assert live.bytes == 300
    assert [(b.name, b.bytes, b.shape, b.shares) for b in live.buffers] == [
        ("while.3{2}", 200, "bf16[10,10]", ()), ("multiply.2", 100, "bf16[10,5]", ("fusion.1",))]


def test_no_dump_or_another_module_gives_nothing(tmp_path):
    assert live_set_at_peak(tmp_path) is None
    assert live_set_at_peak(DUMP, module="jit_eval_step") is None
