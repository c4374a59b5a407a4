"""Property-based bad-input battery over the submit command's flags, overrides and stack outputs.

Hypothesis builds command lines from a vocabulary of valid and invalid pieces and runs
``gke_ray_tpu.training.submit.main`` with the cluster replaced by a FakeJobsClient. An independent oracle
says which rules each command line breaks. Whatever the input: a valid command submits exactly
one job whose trainer command line carries the slices the oracle expects; an invalid one exits 2
with one ``error:`` line on stderr naming one of the broken rules, submits nothing and opens no
connection; never a traceback or another exception.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gke_ray_tpu.core.job_spec import JobSpec
from tests.fakes import FakeJobsClient
from gke_ray_tpu.training import submit
from gke_ray_tpu.training.driver import connection, outcome, stack_outputs

ERROR = "python -m gke_ray_tpu.training.submit: error: "

# Outputs files: name -> (changes to the dev stack's outputs, or raw text), valid?
OUTPUTS = {
    "dev": ({}, True),
    "spot": ({"spot": True}, True),
    "three": ({"numSlices": 3, "elasticMinSlices": 2}, True),
    "missing": ({"numSlices": None}, False),
    "wrong-type": ({"numSlices": "2"}, False),
    "min-above-num": ({"elasticMinSlices": 3}, False),
    "bad-topology": ({"topology": "4x5"}, False),
    "empty-dir": ({"checkpointDir": ""}, False),
    "not-json": ("Current stack outputs (3):", False),
    "array": ("[1, 2]", False),
    "absent": (None, False),
}
PRESETS = [None, "llama3-8b", "llama3-70b", "llama3-8b-elastic", "tiny-cpu", "llama3-405b"]
OVERRIDES = [
    "steps=20", "steps=0", "steps=x", "steps=010", "checkpoint_period=5", "checkpoint_period=-1",
    "run_name=ok-run.1", "run_name=bad name", "run_name=r-attempt-3", "learning_rate=1e-4",
    "ici_tensor_parallelism=2", "dcn_data_parallelism=2", "ici_fsdp_parallelism=abc", "no_equals", "=5",
]


@dataclass
class Case:
    source: str  # local, file, stack, both, none
    outputs: str = "dev"
    preset: str | None = None
    slices: int | None = None
    min_slices: int | None = None
    elastic: bool = False
    max_failures: int | None = None
    overrides: list[str] = field(default_factory=list)
    output_dir_is_file: bool = False
    verbose: bool = False


cases = st.builds(
    Case,
    source=st.sampled_from(["local", "local", "file", "file", "file", "stack", "both", "none"]),
    outputs=st.sampled_from(list(OUTPUTS)),
    preset=st.sampled_from(PRESETS),
    slices=st.one_of(st.none(), st.integers(-2, 4)),
    min_slices=st.one_of(st.none(), st.integers(-1, 4)),
    elastic=st.booleans(),
    max_failures=st.one_of(st.none(), st.integers(-3, 5)),
    overrides=st.lists(st.sampled_from(OVERRIDES), max_size=3, unique_by=lambda o: o.split("=")[0]),
    output_dir_is_file=st.booleans(),
    verbose=st.booleans(),
)


def broken_rules(case: Case, dev_outputs: dict) -> set[str]:
    """The families of rules ``case`` breaks (empty: it is valid). Written from the docs, not the code."""
    if case.source == "none":
        return {"argparse"}
    if case.source == "both":
        return {"argparse"}
    broken: set[str] = set()
    if any(o in ("no_equals", "=5") for o in case.overrides):
        broken.add("override")  # overrides are parsed with the flags
    local = case.source == "local"
    if case.output_dir_is_file:
        broken.add("--output-dir")
    if local:
        preset = case.preset or "tiny-cpu"
        if preset != "tiny-cpu":
            broken.add("--preset")
        num_slices, min_default, max_slices = None, 1, os.cpu_count() or 1
    else:
        changes, valid = OUTPUTS[case.outputs] if case.source == "file" else ({}, True)
        if not valid:
            return broken | {"outputs"}  # read before the rest
        outputs = {**dev_outputs, **changes}
        preset = case.preset or "llama3-8b"
        if preset not in ("llama3-8b", "llama3-70b", "llama3-8b-elastic"):
            broken.add("--preset")
        num_slices, min_default = outputs["numSlices"], outputs["elasticMinSlices"]
        max_slices = num_slices
    if preset not in ("llama3-8b", "llama3-70b", "llama3-8b-elastic", "tiny-cpu"):
        return broken  # nothing else is checked without a preset
    keys = dict(o.split("=", 1) for o in case.overrides if "=" in o and not o.startswith("="))
    if keys.get("steps") in ("0", "x", "010"):
        broken.add("steps")
    if keys.get("checkpoint_period") == "-1":
        broken.add("checkpoint_period")
    if keys.get("run_name") in ("bad name", "r-attempt-3"):
        broken.add("run_name")
    if case.max_failures is not None and case.max_failures < -1:
        broken.add("--max-failures")
    if keys.get("ici_fsdp_parallelism") == "abc":
        broken.add("mesh")  # a value no mesh axis takes, whatever the slices
    elastic = preset == "llama3-8b-elastic" or case.elastic or case.min_slices is not None
    slices = (2 if local else num_slices) if case.slices is None else case.slices
    low = (min_default if case.min_slices is None else case.min_slices) if elastic else slices
    # An elastic cluster run's --min-slices lies between the stack's elasticMinSlices and numSlices (docs/training.md).
    lowest = min_default if elastic and not local else 1
    if not 1 <= slices <= max_slices or not lowest <= low <= slices:
        broken.add("slices")
        return broken
    counts = range(low, slices + 1)
    mesh_ok = keys.get("ici_fsdp_parallelism") != "abc"
    if local:
        # All CPU workers are one slice: ICI spans them (fsdp fills in), DCN is 1.
        if "ici_tensor_parallelism" in keys and any(n % 2 for n in counts):
            mesh_ok = False
        if "dcn_data_parallelism" in keys:
            mesh_ok = False
    else:
        # 16 chips per v6e 4x4 slice: the presets' ici axes make 16, tensor=2 breaks it.
        if "ici_tensor_parallelism" in keys:
            mesh_ok = False
        dcn = {"llama3-70b": 2 * (2 if "dcn_data_parallelism" in keys else 1)}.get(preset)
        if dcn is None and "dcn_data_parallelism" in keys:
            dcn = 2
        if dcn is not None and any(n != dcn for n in counts):
            mesh_ok = False
    if not mesh_ok:
        broken.add("mesh")
    return broken


def family(error_line: str) -> str:
    """The rule family an error line names."""
    message = error_line.removeprefix(ERROR)
    if not message.startswith("invalid config "):
        return "argparse"
    key = message.removeprefix("invalid config ").split("=", 1)[0]
    if key in ("--slices", "--min-slices"):
        return "slices"
    if "parallelism" in key or key == "min_slices,max_slices":
        return "mesh"
    if key in ("--outputs-file", "--stack") or key.split(": ")[0].endswith(".json"):
        return "outputs"
    return key


@pytest.fixture(scope="module")
def dev_outputs(dev_run) -> dict:
    return dict(dev_run.outputs)


@pytest.fixture(scope="module")
def outputs_files(dev_outputs, tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("outputs")
    paths = {}
    for name, (content, _) in OUTPUTS.items():
        path = base / f"{name}.json"
        if isinstance(content, dict):
            data = {k: v for k, v in {**dev_outputs, **content}.items() if v is not None}
            path.write_text(json.dumps(data))
        elif content is not None:
            path.write_text(content)
        paths[name] = str(path)
    return paths


def argv_of(case: Case, files: dict[str, str], out_dir: str, a_file: str) -> list[str]:
    argv = {
        "local": ["--local"],
        "file": ["--outputs-file", files[case.outputs]],
        "stack": ["--stack", "dev"],
        "both": ["--local", "--outputs-file", files["dev"]],
        "none": [],
    }[case.source]
    if case.preset:
        argv += ["--preset", case.preset]
    for flag, value in (("--slices", case.slices), ("--min-slices", case.min_slices),
                        ("--max-failures", case.max_failures)):
        if value is not None:
            argv += [flag, str(value)]
    if case.elastic:
        argv.append("--elastic")
    if case.verbose:
        argv.append("--verbose")
    argv += ["--output-dir", a_file if case.output_dir_is_file else out_dir]
    return argv + case.overrides


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases)
def test_any_command_line_is_a_valid_plan_or_one_error_line(case, outputs_files, dev_outputs, tmp_path_factory,
                                                           monkeypatch):
    work = tmp_path_factory.getbasetemp()
    a_file = work / "a-file"
    a_file.write_text("not a directory")
    opened, built = [], []

    @contextlib.contextmanager
    def job_client(request, outputs, workers, log):
        opened.append(request)
        yield cluster

    def recorded(build):
        def wrapper(*args):
            built.append(build(*args))
            return built[-1]
        return wrapper

    def load_stack(stack):
        return stack_outputs.from_mapping(dict(dev_outputs), f"stack {stack}")

    cluster = FakeJobsClient()
    monkeypatch.setattr(connection, "job_client", job_client)
    monkeypatch.setattr(submit, "for_cluster", recorded(submit.for_cluster))
    monkeypatch.setattr(submit, "for_local", recorded(submit.for_local))
    monkeypatch.setattr(outcome, "report", lambda *args: None)
    monkeypatch.setattr(stack_outputs, "load_stack", load_stack)
    argv = argv_of(case, outputs_files, str(work / "runs"), str(a_file))
    broken = broken_rules(case, dev_outputs)

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = submit.main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    err = err.getvalue()
    assert "Traceback" not in err
    if broken:
        assert rc == 2, (argv, broken, err)
        assert err.count("\n") == 1 and err.startswith(ERROR), err
        assert family(err.strip()) in broken, (argv, broken, err)
        assert (opened, cluster.submitted) == ([], [])
    else:
        assert rc == 0, (argv, err)
        assert all(line.startswith("[submit] ") for line in err.splitlines()), err
        [job] = cluster.submitted
        spec = JobSpec.from_argv(shlex.split(job["entrypoint"])[3:])
        spec.validate()
        assert spec == built[0].spec
        local = case.source == "local"
        outputs = None if local else {**dev_outputs, **OUTPUTS[case.outputs][0]} if case.source == "file" \
            else dev_outputs
        slices = (2 if local else outputs["numSlices"]) if case.slices is None else case.slices
        assert spec.slices == slices and spec.backend == ("cpu" if local else "tpu")
        elastic = case.preset == "llama3-8b-elastic" or case.elastic or case.min_slices is not None
        if elastic:
            default_min = 1 if local else outputs["elasticMinSlices"]
            assert spec.min_slices == (default_min if case.min_slices is None else case.min_slices)
        else:
            assert spec.min_slices is None


def test_the_oracle_knows_a_valid_and_an_invalid_case(dev_outputs):
    """The battery is only as good as its oracle: spot-check it on hand-written cases."""
    assert broken_rules(Case("file", preset="llama3-8b-elastic"), dev_outputs) == set()
    assert broken_rules(Case("file", preset="llama3-70b", elastic=True), dev_outputs) == {"mesh"}
    assert broken_rules(Case("file", outputs="three", preset="llama3-70b"), dev_outputs) == {"mesh"}
    assert broken_rules(Case("local", slices=1, overrides=["ici_tensor_parallelism=2"]), dev_outputs) == {"mesh"}
    assert broken_rules(Case("local", min_slices=3), dev_outputs) == {"slices"}
    assert broken_rules(Case("file", outputs="absent", preset="nope"), dev_outputs) == {"outputs"}
    assert broken_rules(Case("file", outputs="absent", overrides=["=5"]), dev_outputs) == {"outputs", "override"}
    assert broken_rules(Case("file", overrides=["steps=010", "=5"]), dev_outputs) == {"steps", "override"}
