"""Property-based battery over MaxText overrides: refused here naming a key, or taken by MaxText's own loader.

Hypothesis draws override maps for the tiny preset (core/presets/tiny-cpu.yml) from known keys with
values MaxText takes, known keys with values a rule here refuses, and unknown keys one edit away from a
key of MaxText's base.yml. Each map is either refused by ``build_job`` (what the submit command and the
stack's runs call) with one ConfigError naming a key of the map or of the preset, or accepted, and then
MaxText's config loader (``pyconfig.initialize``, the call ``train.main`` starts with) takes the
workers' command line for it. No Ray: the loader runs in this process.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import build_job
from gke_ray_tpu.core.maxtext import installed
from gke_ray_tpu.core.presets import get_preset
from gke_ray_tpu.training import submit
from gke_ray_tpu.training.driver import local_ray
from gke_ray_tpu.training.worker.trainer import worker_argv

PRESET = get_preset("tiny-cpu")
TAKEN = {
    "steps": [1, 20], "per_device_batch_size": [0.5, 2], "learning_rate": [1e-4], "max_target_length": [32, 4096],
    "remat_policy": ["minimal", "save_out_proj"], "weight_dtype": ["bfloat16"], "dtype": ["float32"],
    "opt_type": ["sgd"], "mu_dtype": ["bfloat16"], "checkpoint_period": [1], "model_name": ["default"],
    "ici_fsdp_parallelism": [-1, 2], "enable_checkpointing": [False], "scan_layers": [False], "base_emb_dim": [128],
    "emb_dim": [128],  # not in base.yml: a value MaxText derives, and its loader takes
    "override_model_config": [True],  # lets model_name=llama3-8b replace the preset's dimensions
}
"""Values MaxText's loader takes for the tiny preset (and the rules here too)."""
REFUSED = {
    "steps": [0, 2.5, "x"], "per_device_batch_size": [0, True], "max_target_length": [0],
    "remat_policy": ["everything"], "weight_dtype": ["int8"], "opt_type": ["adamx"], "ici_fsdp_parallelism": [0],
    "model_name": ["llama3-8B", "llama3-8b"],  # a typo; a model whose overlay sets the preset's dimensions
}
"""Values a rule here refuses."""


@st.composite
def near_misses(draw) -> str:
    """A key of base.yml with one character dropped, swapped, replaced or added: a key MaxText lacks."""
    key = draw(st.sampled_from(sorted(installed().settings)))
    at = draw(st.integers(0, len(key) - 1))
    char = draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"))
    typo = draw(st.sampled_from([
        key[:at] + key[at + 1:],
        key[:at] + key[at + 1:at + 2] + key[at:at + 1] + key[at + 2:],
        key[:at] + char + key[at + 1:],
        key[:at] + char + key[at:],
    ]))
    assume(typo and typo not in installed().keys)
    return typo


known = st.sampled_from(  # taken values twice: more of the maps reach MaxText's loader
    2 * [(key, value) for key, values in TAKEN.items() for value in values]
    + [(key, value) for key, values in REFUSED.items() for value in values]
)
override_maps = st.builds(
    lambda entries, typo: {**dict(entries), **({typo: 3} if typo else {})},
    st.lists(known, min_size=1, max_size=3),
    st.one_of(st.none(), near_misses()),
)


@pytest.fixture(scope="module")
def maxtext_loader():
    from maxtext.configs import pyconfig

    with pytest.MonkeyPatch.context() as patch:
        # initialize() writes a refusal to Kubernetes' /dev/termination-log before raising it: not from a test.
        patch.setattr(pyconfig, "_handle_config_exception", lambda error: None)
        yield pyconfig.initialize


# One loader call takes 0.3-1 s on 2 busy cores (importing it ~10 s): under a minute in all.
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides=override_maps)
def test_overrides_are_refused_naming_a_key_or_taken_by_maxtexts_loader(maxtext_loader, tmp_path, overrides):
    unknown = [key for key in overrides if key not in installed().keys]
    try:
        spec = build_job(PRESET, base_output_directory=str(tmp_path), run_name="prop", slices=2, overrides=overrides)
    except ConfigError as error:
        assert error.key in overrides or error.key in PRESET.maxtext, error
        if unknown:
            assert error.key == unknown[0] and "did you mean" in error.expected, error
        event(f"refused: {'unknown key' if unknown else 'value'}")
        return
    event("accepted")
    assert not unknown
    maxtext_loader(worker_argv(spec))


def test_a_mistyped_key_on_the_submit_command_line_is_refused_before_a_ray_head_starts(capsys, monkeypatch, tmp_path):
    """`python -m gke_ray_tpu.training.submit --local stpes=3`: one line, status 2, no Ray head."""

    def no_head(*args, **kwargs):
        raise AssertionError("a Ray head was started")

    monkeypatch.setattr(local_ray, "LocalRayHead", no_head)
    rc = submit.main(["--local", "--output-dir", str(tmp_path), "stpes=3"])
    lines = capsys.readouterr().err.splitlines()
    assert rc == 2
    assert lines == [
        "python -m gke_ray_tpu.training.submit: error: invalid config stpes=3: expected a key of MaxText's config: did you mean steps?"
    ]
