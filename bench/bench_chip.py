"""The preflight against a real TPU v5e chip: MaxText's training of a grid of one-chip runs near and across the
chip's HBM limit, each beside the project's HBM estimate, its compile check and its step-time estimate.

The chip is the device tool's (one TPU v5e, lent to a session; never in tests or CI). What runs there is
``bench/chip_worker.py`` over a payload this script builds; what comes back is merged here with what the
project says of the same runs:

    .venv/bin/python bench/bench_chip.py payload --to DIR     # Python 3.11 site for the chip + the worker + grid.json
    .venv/bin/python bench/bench_chip.py grid --done RESULTS.jsonl...   # grid.json of the cells not yet run
    .venv/bin/python bench/bench_chip.py check                # the compile check and the estimates here, each cell
    .venv/bin/python bench/bench_chip.py merge RESULTS.jsonl... --env ENV.txt --device-s S   # -> bench/data/chip_v5e.json
    .venv/bin/python bench/bench_chip.py fit                  # the step-time constants of preflight/flops.py MEASURED
    .venv/bin/python bench/bench_chip.py table [--page docs]  # bench/README.md's tables, docs/preflight.md's lines

DIR is carried by the device tool, which sends the session's own checkout: a folder it ignores (``/.chip/``, the
default, is in .gitignore).

On the chip (the device tool's ``run``, DIR carried; the chip has Python 3.11.7, JAX 0.10.2 with its own libtpu,
and no network)::

    cd DIR && tar xJf site.tar.xz -C /tmp && PYTHONPATH=$PYTHONPATH:/tmp/site DECOUPLE_GCLOUD=TRUE \\
        python3 chip_worker.py grid grid.json $OUT/results.jsonl --budget-s 540

Why a payload: MaxText 0.2.5 requires Python >= 3.12 and names versions the chip's JAX does not meet. The chip's
Python is 3.11 and its JAX (0.10.2, with libtpu) is the one that drives it, so the payload keeps them and brings
the rest, installed here into a Python 3.11 (:data:`PINS`), with three changes to MaxText (:func:`patch_maxtext`):
two 3.12 ``type X = ...`` statements written as plain assignments, a 3.12-only example left out, and a no-op
``must_fuse_call`` where JAX 0.10.2 has none (only MaxText's GPU/CPU flash attention uses it; the TPU path
does not). Only the distributions MaxText's training imports go (:func:`imported_distributions`), less
MaxText's tokenizer assets (synthetic data reads none) and the model folders of ``transformers`` it does not
import.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_preflight_grid import Cell, _job  # noqa: E402
from gke_ray_tpu.core.errors import ConfigError  # noqa: E402
from gke_ray_tpu.preflight.memory import estimate_hbm_from_config  # noqa: E402
from gke_ray_tpu.core.tpu_catalogue import slice_shape  # noqa: E402
from gke_ray_tpu.preflight.flops import DEFAULT_MFU, estimate_step_time  # noqa: E402
from gke_ray_tpu.preflight.xla_check import (  # noqa: E402
    LARGE_BUFFER_GIB, RUNTIME_RESERVE_GIB, CompileRequest, XlaResult, compile_check, request_for_job)

DATA = REPO / "bench" / "data" / "chip_v5e.json"
GIB = 2**30
WORKER = REPO / "bench" / "chip_worker.py"
STEPS = 10
"""Steps each cell trains: the first two (the executable's first runs) are left out of its step time."""
WARM_STEPS = 2

PYTHON = "python3.11"
"""The chip's Python (3.11.7 there and on this machine)."""
CHIP_HAS = ("jax==0.10.2", "jaxlib==0.10.2", "numpy==2.4.6", "scipy==1.17.1")
"""What the chip's Python has: constraints of the payload's install, and left out of it."""
PINS = (
    "flax==0.12.8", "optax==0.2.8", "orbax-checkpoint==0.12.8", "tokamax==0.0.12", "grain==0.2.18",
    "transformers==5.24.0", "tensorstore==0.1.86", "aqtp==0.9.0", "drjax==0.2.1", "qwix==0.1.8", "omegaconf==2.4.0",
    "ml-collections==1.1.0", "pillow==13.0.0", "tiktoken==0.14.0", "sentencepiece==0.2.3", "pathwaysutils==0.1.13",
    "chex==0.1.92", "jaxtyping==0.3.11", "absl-py==2.5.1", "tensorboardX==2.6.5", "sympy==1.14.0", "jinja2==3.1.6",
)
"""MaxText 0.2.5's imports at the versions the project's lock has, but flax 0.12.8 and tokamax 0.0.12: the last for
Python 3.11 and JAX 0.10 (flax 0.12.9 and tokamax 0.0.13 require Python 3.12 and JAX 0.11)."""
MAXTEXT = "maxtext==0.2.5"

GENERATION, TOPOLOGY = "v5e", "1x1"
ONE_CHIP = {"ici_fsdp_parallelism": 1, "ici_tensor_parallelism": 1}
BF16 = {"weight_dtype": "bfloat16"}


def _cell(model: str, pdbs: int, length: int, remat: str = "full", **more) -> tuple[str, Cell]:
    """A one-chip run, named by what it is: ``model [bf16] pdbs N seq L policy``."""
    bf16 = " bf16" if more.get("weight_dtype") == "bfloat16" else ""
    overrides = {**ONE_CHIP, "model_name": model, "per_device_batch_size": pdbs, "max_target_length": length,
                 "remat_policy": remat, **more}
    return f"{model}{bf16} pdbs {pdbs} seq {length} {remat}", (GENERATION, TOPOLOGY, overrides, 1)


CELLS: dict[str, Cell] = dict([
    # In the order the chip runs them (a call that runs out of time leaves the last ones for the next).
    # Qwen 3 0.6B, float32 weights, 2,048 tokens a sequence: the batch up to the limit, remat_policy none beside
    # full at the largest that fits (MaxText's scanned layers: jax.checkpoint with policy None).
    *(_cell("qwen3-0.6b", pdbs, 2048) for pdbs in (8, 1, 4)),
    _cell("qwen3-0.6b", 8, 2048, "none"),
    *(_cell("qwen3-0.6b", pdbs, 2048) for pdbs in (6, 9)),
    # Longer sequences: the same tokens a step in fewer sequences, and attention's share of the step.
    _cell("qwen3-0.6b", 2, 8192),
    _cell("qwen3-0.6b", 1, 16384),
    # MaxText's default decoder (Llama 2 layers, 1.1 B, a 32k vocabulary: logits a fifth of Qwen's a token),
    # bfloat16 weights: many tokens beside small logits, and sequences up to 32k.
    *(_cell("default", pdbs, 2048, **BF16) for pdbs in (8, 16)),
    _cell("default", 1, 16384, **BF16),
    # A policy that saves the layers' matmul outputs (no recompute of them).
    _cell("qwen3-0.6b", 2, 2048, "minimal"),
    # Qwen 2.5 1.5B, bfloat16 weights: a large train state near the limit, few tokens.
    _cell("qwen2.5-1.5b", 1, 2048, **BF16),
    # Across the limit, and the rest of the grid.
    _cell("qwen3-0.6b", 10, 2048),
    _cell("default", 1, 32768, **BF16),
    _cell("qwen3-0.6b", 4, 4096),
    _cell("qwen3-0.6b", 1, 8192),
    *(_cell("default", pdbs, 8192, **BF16) for pdbs in (4, 2)),
    _cell("default", 4, 2048, **BF16),
    *(_cell("qwen3-0.6b", 4, 2048, policy) for policy in ("minimal", "save_qkv_proj", "none")),
    _cell("qwen2.5-1.5b", 2, 2048, **BF16),
    _cell("qwen3-0.6b", 2, 2048),
    _cell("qwen2.5-1.5b", 4, 2048, **BF16),
])


def job(name: str):
    return _job(name, CELLS[name])[0]


# -- the payload ----------------------------------------------------------------------------------------------


def _run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, text=True, **kwargs)


def build_venv(venv: Path) -> Path:
    """A Python 3.11 with the chip's JAX and the payload's packages; its site-packages."""
    python = venv / "bin" / "python"
    if not python.exists():
        _run(PYTHON, "-m", "venv", str(venv))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write("\n".join(CHIP_HAS) + "\n")
    _run(str(python), "-m", "pip", "install", "-q", *CHIP_HAS)
    _run(str(python), "-m", "pip", "install", "-q", "-c", constraints.name, *PINS)
    # MaxText asks for Python >= 3.12 and declares its dependencies as extras only: installed on its own.
    _run(str(python), "-m", "pip", "install", "-q", "--no-deps", "--ignore-requires-python", "--force-reinstall", MAXTEXT)
    site = Path(_run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     capture_output=True).stdout.strip())
    patch_maxtext(site / "maxtext")
    return site


def patch_maxtext(root: Path) -> None:
    """MaxText 0.2.5 for Python 3.11 and JAX 0.10.2 (the module docstring says why each)."""
    import re

    for relative in ("kernels/mhc/api.py", "kernels/mhc/common.py"):
        path = root / relative
        path.write_text(re.sub(r"^type ([A-Za-z_]\w*) = ", r"\1 = ", path.read_text(), flags=re.M))
    (root / "examples" / "sft_qwen3_demo_utils.py").unlink(missing_ok=True)
    path = root / "kernels" / "attention" / "jax_flash_attention.py"
    path.write_text(re.sub(r"^from jax.experimental.xla_metadata import must_fuse_call$", (
        "try:\n  from jax.experimental.xla_metadata import must_fuse_call\n"
        "except ImportError:  # JAX 0.10.2 (the lent chip): fuse nothing\n"
        "  def must_fuse_call(_name):\n    return lambda fn: fn"), path.read_text(), count=1, flags=re.M))


PROBE = """
import importlib.metadata, json, sys
sys.path.insert(0, sys.argv[1])
import chip_worker
record = chip_worker.run_cell(json.loads(sys.argv[2]))
assert record["status"] == "ran", record
owners = importlib.metadata.packages_distributions()
names = {name.split(".")[0] for name in sys.modules}
found = {d for n in names for d in owners.get(n, ())}
# And what they require (transformers checks its requirements' metadata at import, safetensors among them).
from packaging.requirements import Requirement
todo = list(found)
while todo:
    for text in importlib.metadata.requires(todo.pop()) or ():
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            try:
                name = importlib.metadata.distribution(requirement.name).metadata["Name"]
            except importlib.metadata.PackageNotFoundError:
                continue
            if name not in found:
                found.add(name)
                todo.append(name)
print(json.dumps({"distributions": sorted(found),
                  "modules": sorted(n for n in sys.modules if n.startswith("transformers.models."))}))
"""
TINY = {"name": "tiny", "steps": 3, "settings": [
    "dataset_type=synthetic", "per_device_batch_size=2", "max_target_length=128", "model_name=default",
    "base_emb_dim=128", "base_mlp_dim=256", "base_num_decoder_layers=2", "base_num_query_heads=2",
    "base_num_kv_heads=2", "head_dim=64", "vocab_size=512"]}
"""A run small enough to train on this CPU: it is what finds the modules MaxText's training imports."""


def imported_distributions(python: Path) -> tuple[list[str], list[str]]:
    """The distributions whose modules MaxText's training imports (a tiny run on this CPU, JAX_PLATFORMS=cpu) and
    those they require, and the ``transformers.models`` modules among the modules."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "DECOUPLE_GCLOUD": "TRUE"}
    with tempfile.TemporaryDirectory() as scratch:
        out = _run(str(python), "-c", PROBE, str(WORKER.parent), json.dumps(TINY), capture_output=True, env=env,
                   cwd=scratch).stdout
    found = json.loads(out.strip().splitlines()[-1])
    return found["distributions"], found["modules"]


def build_payload(site: Path, python: Path, dest: Path) -> Path:
    """``dest/site.tar.xz``: the distributions MaxText's training imports, less what the chip has."""
    import importlib.metadata

    distributions, modules = imported_distributions(python)
    chip = {spec.split("==")[0].replace("-", "_").lower() for spec in CHIP_HAS} | {"ml_dtypes", "opt_einsum"}
    kept_models = {name.split(".")[2] for name in modules if name.count(".") >= 2}
    archive = dest / "site.tar.xz"
    files = 0
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for dist in importlib.metadata.distributions(path=[str(site)]):
            name = dist.metadata["Name"].replace("-", "_").lower()
            if name in chip or dist.metadata["Name"] not in distributions:
                continue
            for file in dist.files or ():
                parts = file.parts
                if (parts[0].endswith(".data") or "__pycache__" in parts or parts[0] == ".."
                        or parts[:2] == ("maxtext", "assets")
                        or (parts[:2] == ("transformers", "models") and len(parts) > 3
                            and parts[2] not in kept_models | {"auto"})):
                    continue
                path = site / file
                if path.is_file():
                    tar.add(path, arcname=str(Path("site") / file))
                    files += 1
    print(f"{archive}: {len(distributions)} distributions imported, {files} files, "
          f"{archive.stat().st_size / 2**20:.1f} MiB", file=sys.stderr)
    return archive


def write_grid(dest: Path, names: list[str]) -> Path:
    """The cells as the chip's worker takes them: each run's MaxText settings as the submit command builds them."""
    cells = []
    for name in names:
        spec = job(name)
        settings = request_for_job(spec, libtpu_flags=()).maxtext_argv[1:]
        # Where the run writes and its name are the worker's (the chip has no /data); neither is in the program.
        kept = [item for item in settings if item.split("=", 1)[0] not in ("base_output_directory", "run_name", "steps")]
        cells.append({"name": name.replace(" ", "_"), "label": name, "steps": STEPS, "settings": kept})
    path = dest / "grid.json"
    path.write_text(json.dumps(cells, indent=1))
    return path


def payload(args) -> None:
    dest = Path(args.to)
    dest.mkdir(parents=True, exist_ok=True)
    venv = Path(args.venv)
    site = build_venv(venv)
    build_payload(site, venv / "bin" / "python", dest)
    shutil.copy(WORKER, dest / "chip_worker.py")
    write_grid(dest, args.only or list(CELLS))


# -- the project's answers, here ----------------------------------------------------------------------------


def project_view(name: str) -> dict:
    """The compile check's verdict (XLA's peak with the project's libtpu), the HBM estimate, the step time."""
    spec = job(name)
    try:
        hbm = estimate_hbm_from_config(spec.maxtext, spec.shape(), spec.slices)
        estimate = {"total_gib": hbm.total_gib, "verdict": hbm.verdict}
    except ConfigError as error:
        estimate = {"total_gib": None, "verdict": f"no estimate: {error}"}
    result = compile_check(request_for_job(spec, libtpu_flags=()), progress=lambda _: None, timeout_s=3 * 3600)
    return {"estimate": estimate, "check": {
        "status": result.outcome["status"], "peak_gib": result.peak_hbm_gib, "limit_gib": result.hbm_limit_gib,
        "libtpu": result.versions.get("libtpu"), "maxtext": result.versions.get("maxtext"),
        "peak_buffers": [{key: b[key] for key in ("bytes", "shape", "op")} for b in result.outcome.get("peak_buffers", [])[:5]],
        "compile_s": round(result.wall_seconds)}}


def check(args) -> None:
    for name in args.only or CELLS:
        view = project_view(name)
        print(f"{name}: estimate {view['estimate']['total_gib'] or 0:.2f} ({view['estimate']['verdict']}); "
              f"check: {view['check']['status']} {view['check']['peak_gib']:.2f} GiB [{view['check']['compile_s']} s]",
              flush=True)


def remaining(args) -> None:
    """grid.json of the cells no results file has yet (a second call continues where the first stopped)."""
    done = {json.loads(line)["name"] for path in args.done for line in Path(path).read_text().splitlines() if line}
    left = [name for name in CELLS if name.replace(" ", "_") not in done]
    print(f"{write_grid(Path(args.to), left)}: {len(left)} cells", file=sys.stderr)


def chip_record(record: dict) -> dict:
    """What the chip measured of one cell, in GiB and seconds."""
    from gke_ray_tpu.preflight.xla_compile import parse_oom

    compiled, stats = record.get("compiled"), record.get("memory_stats") or {}
    oom = parse_oom(record.get("error", ""))
    status = record["status"]
    if status != "ran":
        status = ("out of HBM at compile" if compiled is None else "out of HBM at run time") if oom else status
    steps = record.get("steps") or []
    steady = [step["seconds"] for step in steps[WARM_STEPS:]]
    out = {
        "status": status,
        "xla_peak_gib": compiled and compiled["peak_memory_in_bytes"] / GIB,
        "xla_needed_gib": oom[0] if oom else None,
        "argument_gib": compiled and compiled["argument_size_in_bytes"] / GIB,
        "temp_gib": compiled and compiled["temp_size_in_bytes"] / GIB,
        "in_use_peak_gib": stats.get("peak_bytes_in_use", 0) / GIB if stats else None,
        "reserved_peak_gib": stats.get("peak_bytes_reserved", 0) / GIB if stats else None,
        "limit_gib": stats["bytes_limit"] / GIB if stats else (oom[1] if oom else None),
        "step_seconds": steady,
        "losses": [step["loss"] for step in steps],
        "memory_stats": stats,
        "compiled": compiled,
        "error": None if status == "ran" else (record.get("error") or record.get("log_tail") or "")[-600:],
    }
    return out



def merge(args) -> None:
    """bench/data/chip_v5e.json: each cell's settings, what the chip measured and what the compile check said."""
    env = dict(line.split("=", 1) for line in Path(args.env).read_text().splitlines() if "=" in line)
    records = {}
    for path in args.results:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                records[record["name"]] = record
    runs = []
    for name, cell in CELLS.items():
        record = records.get(name.replace(" ", "_"))
        if record is None:
            continue
        overrides = cell[2]
        view = project_view(name)
        runs.append({"name": name, "settings": overrides, "tokens": overrides["per_device_batch_size"]
                     * overrides["max_target_length"], "chip": chip_record(record), "check": view["check"]})
    devices = {record.get("device") for record in records.values()} - {None}
    data = {"chip": {**env, "device": ", ".join(sorted(devices)), "device_seconds": args.device_s},
            "steps": STEPS, "warm_steps": WARM_STEPS,
            "runs": runs}
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{DATA}: {len(runs)} runs", file=sys.stderr)


def check_result(run: dict) -> XlaResult:
    """The compile check's answer for a run of the data, as the check would give it now (its verdict's rules)."""
    check = run["check"]
    outcome = {"status": check["status"], "hbm_limit_gib": check["limit_gib"], "available_gib": check["limit_gib"],
               "needed_gib": check["peak_gib"], "peak_bytes": (check["peak_gib"] or 0) * GIB,
               "peak_buffers": check["peak_buffers"]}
    request = CompileRequest(run["name"], ("base.yml",), "v5e-1", 1, GENERATION, ())
    return XlaResult(request, outcome, "", {}, 0.0, "")


def step_estimate(run: dict, mfu: Optional[float] = None):
    settings = run["settings"]
    return estimate_step_time(settings["model_name"], slice_shape(GENERATION, TOPOLOGY),
                              settings["per_device_batch_size"], settings["max_target_length"], mfu=mfu,
                              remat_policy=settings["remat_policy"])


def _chip_used(chip: dict) -> Optional[float]:
    return chip["in_use_peak_gib"] + chip["reserved_peak_gib"] if chip["status"] == "ran" else None


def _steady(chip: dict) -> Optional[float]:
    return statistics.median(chip["step_seconds"]) if chip["step_seconds"] else None


def _gib(value: Optional[float], suffix: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{suffix}"


def render(page: str) -> str:
    """``page``'s block from the data: bench/README.md's tables (``bench``), docs/preflight.md's lines (``docs``)."""
    data = json.loads(DATA.read_text())
    lines: list[str] = []
    runs = data["runs"]
    if page == "docs":
        ran = [(run, check_result(run)) for run in runs if _chip_used(run["chip"]) is not None]
        beyond = {run["name"]: _chip_used(run["chip"]) - run["chip"]["xla_peak_gib"] for run, _ in ran}
        large = [beyond[run["name"]] for run, result in ran if result.largest_buffer_gib > LARGE_BUFFER_GIB]
        small = [beyond[run["name"]] for run, result in ran if result.largest_buffer_gib <= LARGE_BUFFER_GIB]
        before = [step_estimate(run, mfu=DEFAULT_MFU).seconds / _steady(run["chip"]) for run, _ in ran]
        now = [step_estimate(run).seconds / _steady(run["chip"]) for run, _ in ran]
        return (f"On a v5e chip ([{len(ran)} runs](../bench/README.md#the-preflight-against-a-chip)) the runtime held "
                f"{min(small):.2f}-{max(small):.2f} GiB beyond XLA's peak, {min(large):.2f}-{max(large):.2f} with a "
                f"buffer over {LARGE_BUFFER_GIB:g} GiB: the check warns within {RUNTIME_RESERVE_GIB} GiB or a third of "
                f"such a buffer. `none` ran as `full`. Step time/chip: {min(now):.2f}-{max(now):.2f} (45% MFU: "
                f"{min(before):.2f}-{max(before):.2f}).")
    chip_versions = data["chip"]
    lines.append(f"On the chip: {chip_versions['device']}, Python {chip_versions['python']}, JAX {chip_versions['jax']}, "
          f"libtpu {chip_versions['libtpu']}; the compile check here: libtpu {runs[0]['check']['libtpu']}, MaxText "
          f"{runs[0]['check']['maxtext']}. GiB per chip; limit {runs[0]['chip']['limit_gib']:.2f}.")
    lines.append("")
    lines.append("| run | tokens a step | estimate | XLA's peak, the chip / the check | the chip used (in use + reserved) | "
          "beyond XLA's peak | the check's reserve | the check's verdict now |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for run in runs:
        chip, result = run["chip"], check_result(run)
        spec = job(run["name"])
        estimate = estimate_hbm_from_config(spec.maxtext, spec.shape(), spec.slices).total_gib
        used = _chip_used(chip)
        peak = _gib(chip["xla_peak_gib"]) if chip["xla_peak_gib"] else f"needs {chip['xla_needed_gib']:.2f}"
        beyond = "-" if used is None else f"{used - chip['xla_peak_gib']:+.2f}"
        ran = used is not None
        lines.append(f"| {run['name']} | {run['tokens']:,} | {estimate:.2f} | {peak} / {_gib(result.peak_hbm_gib)} | "
              f"{_gib(used) if ran else chip['status']} | {beyond} | {result.runtime_reserve_gib:.2f} | "
              f"{result.verdict().split(': it may')[0]} |")
    lines.append("")
    lines.append("| run | step s, the chip (median of steps 3-10) | tokens/s | estimate before (45% MFU) | estimate now | "
          "now / the chip |")
    lines.append("|---|---|---|---|---|---|")
    errors = []
    for run in runs:
        steady = _steady(run["chip"])
        if steady is None:
            continue
        now, before = step_estimate(run).seconds, step_estimate(run, mfu=DEFAULT_MFU).seconds
        errors.append(now / steady - 1)
        lines.append(f"| {run['name']} | {steady:.3f} | {run['tokens'] / steady:,.0f} | {before:.3f} ({before / steady:.2f}) | "
              f"{now:.3f} | {now / steady:.3f} |")
    lines.append(f"\nThe estimate now against the chip over {len(errors)} runs: {min(errors):+.1%} to {max(errors):+.1%}, "
          f"mean |error| {statistics.mean(abs(e) for e in errors):.1%}.")
    return "\n".join(lines)


def fit(args) -> None:
    """The step-time constants of ``preflight/flops.py``'s ``MEASURED`` (least squares of the relative error over the
    runs that trained), their error on those runs, and each model's error when fitted to the other two."""
    import numpy as np

    from gke_ray_tpu.core.models import get_model
    from gke_ray_tpu.preflight.flops import recomputed_tflops, training_tflops_per_device
    from gke_ray_tpu.preflight.memory import get_remat_policy

    runs = [run for run in json.loads(DATA.read_text())["runs"] if _steady(run["chip"])]
    peak = slice_shape(GENERATION, TOPOLOGY).generation.peak_bf16_tflops_per_chip
    rows = []
    for run in runs:
        s = run["settings"]
        model = get_model(s["model_name"])
        size = (model, s["per_device_batch_size"], s["max_target_length"])
        flops = training_tflops_per_device(*size)
        again = recomputed_tflops(*size, get_remat_policy(s["remat_policy"], decoder_block=model.decoder_block).saves)
        rows.append([(flops.learnable_weight_tflops + again.learnable_weight_tflops) / peak,
                     (flops.attention_tflops + again.attention_tflops) / peak, run["tokens"] * model.vocab_size])
    x, y = np.array(rows), np.array([_steady(run["chip"]) for run in runs])

    def solve(index):
        coef, *_ = np.linalg.lstsq(x[index] / y[index, None], np.ones(len(index)), rcond=None)
        return coef

    coef = solve(np.arange(len(runs)))
    errors = x @ coef / y - 1
    print(f"matmul_share {1 / coef[0]:.3f}, attention_share {1 / coef[1]:.3f}, seconds_per_logit {coef[2]:.3e}: "
          f"{len(runs)} runs, error {errors.min():+.3f} to {errors.max():+.3f}")
    models = [run["settings"]["model_name"] for run in runs]
    for model in sorted(set(models)):
        held = np.array([m == model for m in models])
        other = solve(np.flatnonzero(~held))
        missed = x[held] @ other / y[held] - 1
        print(f"fitted without {model}: on it {missed.min():+.3f} to {missed.max():+.3f}")


def table(args) -> None:
    print(render(args.page))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("payload", help="the chip's payload: site.tar.xz, chip_worker.py, grid.json")
    build.add_argument("--to", default=str(REPO / ".chip"))
    build.add_argument("--venv", default="/tmp/chip-venv-py311")
    build.add_argument("--only", nargs="*", help="these cells in grid.json (default: all)")
    build.set_defaults(run=payload)
    checks = commands.add_parser("check", help="the compile check and the estimates of each cell, here")
    checks.add_argument("--only", nargs="*")
    checks.set_defaults(run=check)
    rest = commands.add_parser("grid", help="grid.json of the cells the results files do not have yet")
    rest.add_argument("--to", default=str(REPO / ".chip"))
    rest.add_argument("--done", nargs="*", default=[])
    rest.set_defaults(run=remaining)
    merged = commands.add_parser("merge", help="the chip's results beside the compile check's -> " + str(DATA.name))
    merged.add_argument("results", nargs="+")
    merged.add_argument("--env", required=True, help="the chip's versions, KEY=VALUE lines")
    merged.add_argument("--device-s", type=float, required=True, help="device time the session used, seconds")
    merged.set_defaults(run=merge)
    fitted = commands.add_parser("fit", help="the step-time constants from the data, and each model held out")
    fitted.set_defaults(run=fit)
    tables = commands.add_parser("table", help="the tables bench/README.md and docs/preflight.md show, from the data")
    tables.add_argument("--page", choices=("bench", "docs"), default="bench")
    tables.set_defaults(run=table)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
