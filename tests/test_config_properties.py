"""Property-based bad-input battery over the stack config.

Whatever a user writes into ``Pulumi.<stack>.yaml``, the program either
accepts it or raises the project's own ConfigError, naming a config key, and
in that case registers no resource at all: never a raw Python or provider error.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from components.errors import ConfigError
from components.offline import OfflineRun, run_offline
from components.preflight import check_planned_run
from components.stack_config import KNOWN_KEYS, NAMESPACE, StackConfig, parse_stack_config

KEYS = [f"{NAMESPACE}:{k}" for k in KNOWN_KEYS] + ["gcp:project", "gcp:region", "gcp:zone", f"{NAMESPACE}:typo"]

values = st.one_of(
    st.text(max_size=30),
    st.integers(min_value=-5, max_value=100).map(str),
    st.sampled_from(["true", "false", "standard", "autopilot", "v4", "v5e", "v5p", "v6e", "tpu7x", "2x2x2", "4x4", "8x8"]),
    st.sampled_from(["retain", "force", "RAPID", "UNSPECIFIED", "1.34.1-gke.1829001", "1.35.2-gke.1842000", "1.30.0-gke.1"]),
    st.lists(st.sampled_from(["10.50.0.0/16", "10.60.0.0/16", "10.50.1.0/24", "192.168.0.0/30", "bad", "0.0.0.0/0"]), max_size=3).map(json.dumps),
    st.sampled_from(["llama3-8b", "llama3-70b", "llama3-8b-elastic", "tiny-cpu"]),
    st.sampled_from(['{"ici_tensor_parallelism": 2}', '{"steps": 5}', '{"dcn_fsdp_parallelism": 2}', "[1]", "{"]),
    st.just(""),
)
mutations = st.dictionaries(st.sampled_from(KEYS), st.one_of(values, st.none()), min_size=1, max_size=4)


def mutate(base: dict[str, str], changes: dict) -> dict[str, str]:
    config = dict(base)
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=mutations)
def test_any_config_is_accepted_or_rejected_with_a_config_error(dev_config, changes):
    config = mutate(dev_config, changes)
    try:
        parsed = parse_stack_config(config)
    except ConfigError as error:
        assert error.key in KEYS or error.key.startswith(f"{NAMESPACE}:")
        assert str(error).startswith(f"invalid config {error.key}=")
        assert "expected" in str(error)
    else:
        assert isinstance(parsed, StackConfig)
        assert parsed.shape.topology in parsed.shape.generation.topologies
        assert 1 <= parsed.elastic_min_slices <= parsed.num_slices
        assert len(parsed.dcn_cidrs) <= parsed.shape.generation.dcn_nics_per_host


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=mutations)
def test_program_registers_nothing_for_rejected_config(dev_config, changes):
    config = mutate(dev_config, changes)
    try:
        # What __main__.py checks before registering anything: the config, then the planned run.
        check_planned_run(parse_stack_config(config), info=lambda _: None, warn=lambda _: None)
        valid = True
    except ConfigError:
        valid = False
    run = OfflineRun()
    if valid:
        run_offline(config, run=run)
        assert run.resources
    else:
        try:
            run_offline(config, run=run)
        except ConfigError:
            pass
        else:
            raise AssertionError("the program accepted a config its own checks reject")
        assert run.resources == []
