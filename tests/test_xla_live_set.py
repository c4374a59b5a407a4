"""XLA's live set at its peak, read from the compiler's own dump.

``tests/fixtures/xla_dump`` holds three files XLA wrote (libtpu 0.0.50.1) for a Llama 3 8B train step on
2 x v6e-16 at batch 4 (the tutorial's baseline): its live ranges at the peak, the buffer assignment of those
values and their instructions, cut down to the buffers live at the peak (the instructions' backend
configs removed).
"""

from __future__ import annotations

from pathlib import Path

from gke_ray_tpu.stack.xla_live_set import peak_buffers

DUMP = Path(__file__).parent / "fixtures" / "xla_dump"
GIB = 2**30


def test_the_largest_buffers_at_the_peak_are_the_saved_layer_inputs_and_the_logits():
    carry, logits, logits_gradient = peak_buffers(DUMP)[:3]
    # 32 layers' inputs: [layers, batch 16 per shard, 4096 tokens, 4096 / tensor 4], saved by the forward scan.
    assert (carry.shape, carry.bytes, carry.op) == ("bf16[32,16,4096,1024]", 4 * GIB, "jit(train_step)/jvp()/while")
    assert carry.name == "while.56{2}"  # element 2 of the scan's carried tuple
    # The logits over vocabulary / tensor 4, and their gradient: bfloat16, no float32 copy.
    for buffer in (logits, logits_gradient):
        assert (buffer.shape, buffer.bytes) == ("bf16[16,4096,32064]", 16 * 4096 * 32064 * 2)
    assert logits.op == "jit(train_step)/jvp()/dot_general"
    assert logits_gradient.op == "jit(train_step)/transpose(jvp())/convert_element_type"


def test_every_buffer_is_named_sized_and_most_have_a_shape_and_an_op():
    buffers = peak_buffers(DUMP, top=1000)
    assert len(buffers) == 175 and [b.bytes for b in buffers] == sorted((b.bytes for b in buffers), reverse=True)
    assert sum(b.bytes for b in buffers) / GIB > 21
    assert sum(1 for b in buffers if b.shape) >= 170
    # The train state's buffers are named by their path in it.
    assert any(b.op == "state['optimizer']['opt_state'][0]['mu']['decoder']['layers']['mlp']['wi_0']['kernel'].value"
               for b in buffers)
    assert len(peak_buffers(DUMP, top=5)) == 5


def test_no_dump_or_another_module_gives_nothing(tmp_path):
    assert peak_buffers(tmp_path) == []
    assert peak_buffers(DUMP, module="jit_eval_step") == []
