"""The compile check: XLA's own HBM verdict for a run, compiled for its TPU topology on this CPU host.

The HBM figures of :mod:`gke_ray_tpu.preflight.memory` are a model. This check asks
the compiler instead: MaxText's AOT ``train_compile`` builds the train step of
the job (:func:`request_for_job` takes a :class:`gke_ray_tpu.core.job_spec.JobSpec`, so the
settings are the ones the job runs with) for the slice topology, at each slice
count the run may train on (:func:`check_job`), under the XLA flags the
cluster's TPU pods get (:func:`pod_flags`), and XLA's TPU compiler (the
``libtpu`` wheel; no TPU needed) either compiles it, and says what it holds in
HBM per device, or refuses it with how much it would need against how much one
device has.

The compile runs in a child process (:mod:`gke_ray_tpu.preflight.xla_compile`): libtpu, JAX,
MaxText and about 2 GiB of memory stay out of the caller (``pulumi preview``),
and the child's environment is set here. It takes minutes, so a line on stderr
says how long it has run and which phase MaxText is in, every
:data:`PROGRESS_EVERY_S` seconds. Results are cached under :func:`cache_dir` by
a digest of everything that changes the program (:meth:`CompileRequest.digest`),
so an unchanged run is answered from the cache in milliseconds and a changed
run compiles again. Only verdicts are kept (it fits, or it does not): a compile
MaxText or XLA refused for another reason compiles again next time.
"""

from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from gke_ray_tpu.core.libtpu_flags import DCN_INTERFACE_FLAG, libtpu_init_args
from gke_ray_tpu.core import REPO_ROOT, user_cache, worker_env
from gke_ray_tpu.core.job_spec import JobSpec
from gke_ray_tpu.core.maxtext import configs_dir, render
from gke_ray_tpu.core.tpu_catalogue import SliceShape

CHILD = Path(__file__).with_name("xla_compile.py")
CHILD_SOURCES = (CHILD, Path(__file__).with_name("xla_live_set.py"))
"""The child's code: what it writes into a verdict (a cached entry is only as good as the code that made it)."""


def code_fingerprint(source: str) -> str:
    """sha256 of a module's code without its docstrings and comments: an edit to either leaves every cached verdict
    good (each compile takes minutes), any change to what runs makes them new."""
    tree = ast.parse(source)  # comments are not in the tree
    for node in ast.walk(tree):
        for field_name in ("body", "orelse", "finalbody"):
            statements = getattr(node, field_name, None)
            if isinstance(statements, list):
                # A bare string statement is a docstring (of a module, class, function or attribute): it never runs.
                kept = [s for s in statements
                        if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str))]
                setattr(node, field_name, kept or [ast.Pass()])
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


GIB = 2**30

CACHE_DIR_ENV = "GKE_RAY_TPU_CACHE_DIR"
"""Overrides where results are kept (default: ``$XDG_CACHE_HOME/gke-ray-tpu/compile-check``)."""
PROGRESS_EVERY_S = 15.0
TIMEOUT_S = 1800.0
"""A 70B compile takes ~3 minutes on two cores; ten times that means the child is stuck."""

NOT_IN_PROGRAM = frozenset({"run_name", "base_output_directory", "jax_cache_dir", "checkpoint_period"})
"""Job settings the compiled train step does not contain (where and under which name the run writes,
its compilation cache, how often it checkpoints): left out of the digest, so a declared run and the
same run from the command line share one result."""

PROGRAM_ENV = ("MAXTEXT_CONFIGS_DIR",)
"""Environment the child inherits that changes which YAML MaxText reads."""

NOT_INHERITED = ("LIBTPU_INIT_ARGS", "XLA_FLAGS")
"""The compiler's flags come from the cluster's pods (:func:`pod_flags`), never from the caller's shell:
the pods set ``LIBTPU_INIT_ARGS`` and no ``XLA_FLAGS``."""

HOST_INTERFACE_FLAGS = frozenset({DCN_INTERFACE_FLAG})
"""Flags of the pods' ``LIBTPU_INIT_ARGS`` that name the pod's own network interfaces (DRANET's eth1..ethN):
they say where megascale's DCN traffic goes, this host has none of those interfaces, and the program XLA
compiles does not depend on them."""

RUNTIME_RESERVE_GIB = 0.25
"""HBM the TPU runtime may hold beyond XLA's peak, measured on a v5e chip (``bench/bench_chip.py``, libtpu 0.0.42.1):
``peak_bytes_in_use + peak_bytes_reserved`` of ``memory_stats()`` after MaxText's steps, less the compiled train
step's ``peak_memory_in_bytes``, was 0.03 to 0.23 GiB in the 18 of the 23 runs that trained with no buffer over
:data:`LARGE_BUFFER_GIB` at XLA's peak, whatever their tokens per step (the default 1.1B model at 32,768: 0.04)."""
LARGE_BUFFER_GIB = 4.0
LARGE_BUFFER_SHARE = 1 / 3
"""Where a buffer live at XLA's peak is larger than :data:`LARGE_BUFFER_GIB` (2**32 bytes), the runtime held more:
the other five runs, Qwen 3 0.6B at 16,384 tokens a step (four ways: 8 x 2,048 under full and none, 4 x 4,096,
2 x 8,192), whose logits are one ``bf16[..., 151936]`` buffer of 4.64 GiB, and at 18,432 (5.22 GiB), held 1.41 and
1.53 GiB beyond XLA's peak (0.30 and 0.29 of the buffer); at 12,288 tokens (3.48 GiB) 0.03. Two buffer sizes: the
share is a bound on them, not a law."""
RESERVE_MEASURED_ON = "v5e"

VERDICTS = ("compiled", "oom")
"""The child's answers that are the run's verdict, and cached; any other ("error") is not."""

VERSIONED = worker_env.COMPILER_PACKAGES
"""The compiler and the program's code: this environment's, which must be the TPU workers' lock's (:func:`versions`)."""

CHILD_ENV = {
    # Nothing here may start a TPU backend: the topology is described, not attached.
    "JAX_PLATFORMS": "cpu",
    # libtpu looks for its TPU VM's worker hostnames and prints an error without them.
    "TPU_WORKER_HOSTNAMES": "localhost",
    # Another compile (a second preview, a test) may hold libtpu's lock file.
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "true",
    "TF_CPP_MIN_LOG_LEVEL": "1",
    "TRANSFORMERS_VERBOSITY": "error",
}

_PHASES = (
    ("Starting train_compile.py", "MaxText: building the model and its sharding"),
    ("Jitting and compiling train step", "XLA: compiling the train step"),
    ("Jitting and compilation complete", "XLA: reading the chip's HBM limit"),
)
"""Lines MaxText's train_compile prints, and what they mean for someone waiting."""


def pod_flags(generation: str, dcn_interfaces: int) -> tuple[str, ...]:
    """The ``LIBTPU_INIT_ARGS`` the TPU pods of a cluster of ``generation`` with ``dcn_interfaces`` get (the
    manifest's own function), less :data:`HOST_INTERFACE_FLAGS`."""
    flags = libtpu_init_args(generation, dcn_interfaces).split()
    return tuple(flag for flag in flags if flag.split("=", 1)[0] not in HOST_INTERFACE_FLAGS)


class CompileCheckError(RuntimeError):
    """The check could not run (no libtpu, the child died or hung): no verdict, and nothing is cached."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cache_dir() -> Path:
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    return user_cache("compile-check")


def versions() -> dict[str, str]:
    found = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            raise CompileCheckError(
                f"{name} is not installed in {sys.executable}: the compile check needs MaxText and the TPU "
                "compiler (libtpu); bin/setup installs both from requirements.txt"
            ) from None
    # The verdict is the pods' only if this is the compiler they run: what the TPU workers' lock installs.
    locked = worker_env.locked_versions(VERSIONED)
    differ = [f"{name} {found[name]} (the pods' lock: {locked[name]})" for name in VERSIONED if found[name] != locked[name]]
    if differ:
        raise CompileCheckError(
            f"{sys.executable} has {', '.join(differ)}: XLA's verdict would be another compiler's than the TPU "
            "pods'; bin/setup installs requirements.txt, whose versions the lock holds (bin/lock-worker-env)"
        )
    return found


@dataclass(frozen=True)
class CompileRequest:
    """One compile: MaxText's argv (config path, then key=value) for a target topology."""

    label: str
    maxtext_argv: tuple[str, ...]
    compile_topology: str
    """MaxText's name of one slice (``v6e-16``)."""
    num_slices: int
    generation: str
    libtpu_flags: tuple[str, ...]
    """The child's ``LIBTPU_INIT_ARGS``: the pods' (:func:`pod_flags`)."""

    def _config_files(self) -> dict[str, str]:
        """sha256 of the YAML MaxText resolves the run's config from: the base config and the model's overlay, by
        their names under the configs folder (not where this checkout or MaxText sits, so clones share a verdict)."""
        config = self.maxtext_argv[0]
        base = REPO_ROOT / config
        if not base.is_file():
            base = (configs_dir() or REPO_ROOT / "configs") / config.removeprefix("src/maxtext/configs/")
        settings = dict(item.split("=", 1) for item in self.maxtext_argv[1:])
        files = [base, base.parent / "models" / f"{settings.get('model_name', 'default')}.yml"]
        return {str(path.relative_to(base.parent)): hashlib.sha256(path.read_bytes()).hexdigest()
                for path in files if path.is_file()}

    def digest(self) -> str:
        """What the compiled program depends on: the versions, the config, the target, this check's child."""
        program = [item for item in self.maxtext_argv[1:] if item.split("=", 1)[0] not in NOT_IN_PROGRAM]
        payload = {
            "versions": versions(),
            "config": self.maxtext_argv[0],
            "config_files": self._config_files(),
            "settings": program,
            "compile_topology": self.compile_topology,
            "num_slices": self.num_slices,
            "libtpu_flags": list(self.libtpu_flags),
            "env": {name: os.environ.get(name) for name in PROGRAM_ENV},
            "child": [code_fingerprint(path.read_text()) for path in CHILD_SOURCES],
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def request_for_job(
    spec: JobSpec, libtpu_flags: Iterable[str], shape: Optional[SliceShape] = None, num_slices: Optional[int] = None
) -> CompileRequest:
    """The compile of a job's train step under ``libtpu_flags``: for its own slices, or for ``shape`` x ``num_slices``.

    A CPU preset (``tiny-cpu``) has no TPU target of its own: its model is
    compiled for the slices given, with ``hardware=tpu``.
    """
    shape = shape or spec.shape()
    slices = num_slices or spec.slices
    settings = dict(spec.maxtext)
    if settings.get("hardware") == "cpu":
        settings["hardware"] = "tpu"
    model = settings.get("model_name", "default")
    return _request(f"{spec.run_name} ({model}) on {slices} x {shape.pod_type}", spec.config, settings, shape, slices,
                    libtpu_flags)


def _request(label: str, config: str, settings: Mapping[str, object], shape: SliceShape, num_slices: int,
             libtpu_flags: Iterable[str]) -> CompileRequest:
    return CompileRequest(
        label=label,
        maxtext_argv=(config, *(f"{key}={render(value)}" for key, value in settings.items())),
        compile_topology=shape.maxtext_accelerator,
        num_slices=num_slices,
        generation=shape.generation.name,
        libtpu_flags=tuple(libtpu_flags),
    )


@dataclass(frozen=True)
class XlaResult:
    """XLA's verdict on one compile, per JAX device (a chip; a TensorCore on tpu7x)."""

    request: CompileRequest
    outcome: dict
    """What the child wrote (:mod:`gke_ray_tpu.preflight.xla_compile`): status, byte counts or XLA's message, time, RSS."""
    digest: str
    versions: dict
    wall_seconds: float
    log: str
    cached: bool = False
    flags_check: Optional["XlaResult"] = None
    """Where the run itself compiled without the pods' flags (:func:`check_job`): the small model's compile on
    the same mesh under them, which says whether libtpu takes them."""

    @property
    def flags_refused(self) -> bool:
        """libtpu stopped the small model's compile under the flags (out of HBM would mean it took them)."""
        return self.flags_check is not None and self.flags_check.fits is None

    @property
    def status(self) -> str:
        return "flags_refused" if self.flags_refused else self.outcome["status"]

    @property
    def fits(self) -> Optional[bool]:
        """True: XLA compiled it; False: out of HBM; None: MaxText or XLA refused it for another reason."""
        return {"compiled": True, "oom": False}.get(self.status)

    def _gib(self, key: str) -> Optional[float]:
        value = self.outcome.get(key)
        return None if value is None else value / GIB

    @property
    def peak_hbm_gib(self) -> Optional[float]:
        """XLA's peak (compiled) or what it says it would need (out of HBM); the run's own also where libtpu
        refused the pods' flags on the small model beside it."""
        return self._gib("peak_bytes") if self.outcome["status"] == "compiled" else self.outcome.get("needed_gib")

    @property
    def hbm_limit_gib(self) -> Optional[float]:
        return self.outcome.get("hbm_limit_gib", self.outcome.get("available_gib"))

    @property
    def margin_gib(self) -> Optional[float]:
        if self.peak_hbm_gib is None or self.hbm_limit_gib is None:
            return None
        return self.hbm_limit_gib - self.peak_hbm_gib

    @property
    def largest_buffer_gib(self) -> Optional[float]:
        """The largest buffer live at XLA's peak (None where the compile's dump was not read)."""
        buffers = self.outcome.get("peak_buffers") or []
        return max(buffer["bytes"] for buffer in buffers) / GIB if buffers else None

    @property
    def runtime_reserve_gib(self) -> float:
        """What the TPU runtime may hold beyond XLA's peak (:data:`RUNTIME_RESERVE_GIB`, :data:`LARGE_BUFFER_SHARE`)."""
        largest = self.largest_buffer_gib or 0.0
        return LARGE_BUFFER_SHARE * largest if largest > LARGE_BUFFER_GIB else RUNTIME_RESERVE_GIB

    @property
    def within_reserve(self) -> bool:
        """XLA fits it, with less left than the runtime may hold beyond XLA's peak."""
        return bool(self.fits) and self.margin_gib is not None and self.margin_gib < self.runtime_reserve_gib

    def warning(self) -> Optional[str]:
        """Why a run XLA fits may still run out of HBM on the chip; None when it is clear of the reserve."""
        if not self.within_reserve:
            return None
        largest = self.largest_buffer_gib or 0.0
        why = (f"a third of its {largest:.2f} GiB buffer, as with buffers over {LARGE_BUFFER_GIB:g} GiB"
               if largest > LARGE_BUFFER_GIB else f"{RUNTIME_RESERVE_GIB:.2f} GiB")
        return (f"XLA leaves {self.margin_gib:.2f} GiB of the {self.hbm_limit_gib:.2f} GiB, less than the "
                f"{self.runtime_reserve_gib:.2f} GiB the TPU runtime may hold beyond XLA's peak ({why}; measured on a "
                f"{RESERVE_MEASURED_ON} chip, bench/README.md): it may run out of HBM when it runs; lower "
                "per_device_batch_size or max_target_length")

    @property
    def message(self) -> str:
        return self.flags_check.message if self.flags_refused else self.outcome.get("message", "")

    @property
    def pods_flags(self) -> tuple[str, ...]:
        """The pods' flags this verdict stands for: the run's own compile's, or the small model's beside it."""
        return self.flags_check.request.libtpu_flags if self.flags_check else self.request.libtpu_flags

    def compiled_under(self) -> str:
        """What was compiled under which flags, in words."""
        count = len(self.pods_flags)
        if self.flags_check is None:
            return f"the run, under the pods' {count} LIBTPU_INIT_ARGS flags"
        answer = "refused them" if self.flags_refused else "took them"
        cached = ", cached" if self.flags_check.cached else f", {self.flags_check.wall_seconds:.0f} s"
        return (f"the run without flags (the pods' flags moved no peak XLA compiled both ways: bench/README.md); "
                f"the pods' {count} flags on {self.flags_check.request.label}: libtpu {answer}{cached}")

    def rows(self) -> list[tuple[str, Optional[float]]]:
        return [
            ("arguments (parameters, optimizer state, batch)", self._gib("argument_bytes")),
            ("temporaries", self._gib("temp_bytes")),
            ("generated code", self._gib("generated_code_bytes")),
            ("peak" if self.outcome["status"] == "compiled" else "needed (XLA)", self.peak_hbm_gib),
            ("HBM limit (XLA)", self.hbm_limit_gib),
        ]

    def verdict(self) -> str:
        if self.within_reserve:
            return f"fits XLA's limit, but WARNING: {self.warning()}"
        if self.fits:
            return f"fits (margin {self.margin_gib:+.2f} GiB)"
        if self.fits is False:
            needed = "more" if self.peak_hbm_gib is None else f"{self.peak_hbm_gib:.2f} GiB"
            return f"does NOT fit: XLA needs {needed} of the {self.hbm_limit_gib or 0:.2f} GiB one device has"
        if self.flags_refused:
            return f"libtpu refused the pods' flags on this mesh: {_last_line(self.message)}"
        return f"MaxText or XLA refused the run: {_last_line(self.message)}"

    def format(self, estimate_gib: Optional[float] = None) -> str:
        per = "per TensorCore" if self.request.generation == "tpu7x" else "per chip"
        how = "cached" if self.cached else (
            f"{self.wall_seconds:.0f} s, {self.outcome.get('peak_rss_mib', 0) / 1024:.1f} GiB RSS"
        )
        lines = [
            f"HBM {per} (XLA, compiled for {self.request.num_slices} x {self.request.compile_topology}; "
            f"MaxText {self.versions['maxtext']}, libtpu {self.versions['libtpu']}; {how}):",
            f"  compiled: {self.compiled_under()}",
        ]
        shown = [(label, gib) for label, gib in self.rows() if gib is not None]
        width = max(len(label) for label, _ in shown) + 2 if shown else 0
        lines += [f"  {label:<{width}}{_size(gib)}" for label, gib in shown]
        lines.append(f"  verdict (XLA): {self.verdict()}")
        if estimate_gib is not None and self.peak_hbm_gib:
            lines.append(
                f"  the estimate said {estimate_gib:.2f} GiB: {estimate_gib / self.peak_hbm_gib:.2f} x XLA's figure"
            )
        lines += [f"  largest at XLA's peak: {text}" for text in self.largest_buffers()]
        if self.fits is None and not (self.flags_check or self).cached:
            lines.append(f"  log: {(self.flags_check if self.flags_refused else self).log}")
        return "\n".join(lines)

    def largest_buffers(self, count: int = 3) -> list[str]:
        """The few largest buffers live at XLA's peak: their size, shape and the JAX operation that made them (and
        the values it was written over, in place)."""
        return [
            f"{buffer['bytes'] / GIB:.2f} GiB {buffer['shape']} {buffer['op'] or buffer['name']}"
            + (f" (in place of {', '.join(buffer['shares'])})" if buffer.get("shares") else "")
            for buffer in self.outcome.get("peak_buffers", [])[:count]
        ]

    def to_json(self, estimate_gib: Optional[float] = None) -> dict:
        return {
            "fits": self.fits,
            "status": self.status,
            "peak_hbm_gib": self.peak_hbm_gib,
            "hbm_limit_gib": self.hbm_limit_gib,
            "margin_gib": self.margin_gib,
            "runtime_reserve_gib": self.runtime_reserve_gib,
            "warning": self.warning(),
            "arguments_gib": self._gib("argument_bytes"),
            "outputs_gib": self._gib("output_bytes"),
            "aliased_gib": self._gib("alias_bytes"),
            "temporaries_gib": self._gib("temp_bytes"),
            "generated_code_gib": self._gib("generated_code_bytes"),
            "message": self.message or None,
            "estimate_total_gib": estimate_gib,
            "estimate_over_xla": estimate_gib / self.peak_hbm_gib if estimate_gib and self.peak_hbm_gib else None,
            "per": "tensorcore" if self.request.generation == "tpu7x" else "chip",
            "compile_topology": self.request.compile_topology,
            "num_slices": self.request.num_slices,
            "libtpu_flags": list(self.request.libtpu_flags),
            "pods_flags": list(self.pods_flags),
            "flags_check": None if self.flags_check is None else {
                "accepted": not self.flags_refused, "model": self.flags_check.request.label,
                "libtpu_flags": list(self.flags_check.request.libtpu_flags), "cached": self.flags_check.cached,
                "digest": self.flags_check.digest, "message": self.flags_check.message or None,
            },
            "compiled_under": self.compiled_under(),
            "peak_buffers": self.outcome.get("peak_buffers", [])[:10],
            "live_set_gib": self._gib("live_set_bytes"),
            "versions": self.versions,
            "compile_seconds": self.outcome.get("compile_seconds"),
            "peak_rss_mib": self.outcome.get("peak_rss_mib"),
            "cached": self.cached,
            "digest": self.digest,
            "log": self.log,
        }


def _size(gib: float) -> str:
    # A small model's figures are MiB; 0.00 GiB would hide them.
    return f"{gib:>8.2f} GiB" if gib >= 0.01 else f"{gib * 1024:>8.2f} MiB"


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else "no message"


def _phase(log: Path) -> str:
    text = log.read_text(errors="replace") if log.is_file() else ""
    found = "starting Python, importing MaxText"
    for marker, meaning in _PHASES:
        if marker in text:
            found = meaning
    return found


def _child_env(request: CompileRequest) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    inherited = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    return {**inherited, **CHILD_ENV, "PYTHONPATH": path, "LIBTPU_INIT_ARGS": " ".join(request.libtpu_flags)}


def _run_child(request: CompileRequest, log: Path, progress: Callable[[str], None], every_s: float, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="xla-check-") as scratch:
        request_file, result_file = Path(scratch, "request.json"), Path(scratch, "result.json")
        request_file.write_text(json.dumps({
            "maxtext_argv": list(request.maxtext_argv),
            "compile_topology": request.compile_topology,
            "num_slices": request.num_slices,
        }))
        started = time.monotonic()
        with open(log, "wb") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "gke_ray_tpu.preflight.xla_compile", str(request_file), str(result_file)],
                # The child's temp files go in this scratch folder: libtpu may end the child before its own
                # cleanup runs (a flag it does not know), and this folder is removed however the child ended.
                cwd=REPO_ROOT, env={**_child_env(request), "TMPDIR": scratch}, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                while True:
                    try:
                        child.wait(timeout=every_s)
                        break
                    except subprocess.TimeoutExpired:
                        elapsed = time.monotonic() - started
                        if elapsed > timeout_s:
                            raise CompileCheckError(
                                f"the compile of {request.label} ran past {timeout_s:.0f} s and was stopped (log: {log})"
                            ) from None
                        progress(f"compile check: {request.label}: {elapsed:.0f} s, {_phase(log)}")
            finally:
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
        if not result_file.is_file():
            # libtpu exits the process on a flag it does not know: its last line says which.
            raise CompileCheckError(
                f"the compile of {request.label} exited with status {child.returncode} and no verdict: "
                f"{_last_line(log.read_text(errors='replace'))} (log: {log})"
            )
        return {**json.loads(result_file.read_text()), "wall_seconds": time.monotonic() - started}


def compile_check(
    request: CompileRequest,
    *,
    progress: Callable[[str], None] = _stderr,
    every_s: Optional[float] = None,
    timeout_s: float = TIMEOUT_S,
) -> XlaResult:
    """XLA's verdict on ``request``: from the cache when nothing that changes the program has changed.

    ``progress`` gets a line every ``every_s`` seconds (default :data:`PROGRESS_EVERY_S`) while it compiles.
    """
    found = versions()
    digest = request.digest()
    directory = cache_dir()
    entry, log = directory / f"{digest}.json", directory / f"{digest}.log"
    if entry.is_file():
        try:
            record = json.loads(entry.read_text())
            if record["outcome"]["status"] in VERDICTS:
                return XlaResult(request, record["outcome"], digest, found, record["wall_seconds"], str(log), cached=True)
        except (ValueError, KeyError, TypeError):
            pass  # a torn entry, or an older check's: compile again and overwrite it
    directory.mkdir(parents=True, exist_ok=True)
    progress(
        f"compile check: {request.label}: compiling the train step for {request.num_slices} x "
        f"{request.compile_topology} on this CPU (minutes; log: {log})"
    )
    outcome = _run_child(request, log, progress, every_s or PROGRESS_EVERY_S, timeout_s)
    wall = outcome.pop("wall_seconds")
    if outcome["status"] in VERDICTS:
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"outcome": outcome, "wall_seconds": wall, "versions": found}))
        os.replace(partial, entry)
    else:
        # Not the run's answer (a setting MaxText refuses, a flag XLA refuses for this target, a file it
        # could not read): its cause may lie outside what the digest covers, and a cached copy would
        # keep answering an error that is gone.
        entry.unlink(missing_ok=True)
    result = XlaResult(request, outcome, digest, found, wall, str(log))
    progress(f"compile check: {request.label}: {result.verdict()} ({wall:.0f} s)")
    return result


@dataclass(frozen=True)
class SliceCountResults:
    """XLA's verdicts on one run at each slice count it may train on (one count for a static run)."""

    by_slices: Mapping[int, XlaResult]

    @property
    def worst(self) -> XlaResult:
        """Out of HBM before refused for another reason before the smallest margin."""
        return min(
            self.by_slices.values(),
            key=lambda r: (r.fits is True, r.fits is None, r.margin_gib if r.margin_gib is not None else 0.0),
        )

    @property
    def fits(self) -> bool:
        return all(result.fits for result in self.by_slices.values())

    def refused(self) -> list[XlaResult]:
        """The counts XLA does not compile within HBM (or at all), fewest slices first."""
        return [result for _, result in sorted(self.by_slices.items()) if not result.fits]

    def refusal(self) -> str:
        """Which count XLA refuses, and why; empty when it fits at every count."""
        return "; ".join(
            f"at {r.request.num_slices} x {r.request.compile_topology}: {r.verdict()} (log: {r.log})" for r in self.refused()
        )

    def format(self, estimates: Mapping[int, float]) -> str:
        """Each count's figures, with the estimate where ``estimates`` has one for that count."""
        return "\n".join(result.format(estimates.get(n)) for n, result in sorted(self.by_slices.items(), reverse=True))

    def to_json(self, estimates: Mapping[int, float]) -> dict:
        """``xla``: the worst count; ``xla_by_slices``: every count, keyed by its number as a string."""
        worst = self.worst
        return {
            "xla": worst.to_json(estimates.get(worst.request.num_slices)),
            "xla_by_slices": {str(n): r.to_json(estimates.get(n)) for n, r in sorted(self.by_slices.items())},
        }


SMALL_MODEL_PARAMS = 50_000_000
"""A run of at most this many parameters compiles under the pods' flags itself (a minute or so); a larger one
compiles without them, beside the small model under them (:func:`check_job`)."""

_SHAPE_KEYS = frozenset({
    "model_name", "override_model_config", "decoder_block", "head_dim", "vocab_size", "mlp_activations",
    "logits_via_embedding", "per_device_batch_size", "max_target_length", "hardware",
})
"""Settings of the run the small model does not take: its shape and batch are its own."""


def small_model_settings(spec: JobSpec, shape: SliceShape, num_slices: int) -> dict:
    """The run's settings with MaxText's default decoder shrunk to a few MiB, every dimension a weight or the batch
    is split by a multiple of the mesh's shards (so the small model shards on the run's mesh as the run does):
    the mesh, dtypes, remat policy and optimizer are the run's."""
    from gke_ray_tpu.core.sharding import run_mesh
    from gke_ray_tpu.core.maxtext import resolved_config

    resolved = resolved_config(dict(spec.maxtext)) or {}
    overlay = set(_overlay_keys(spec))
    kept = {k: v for k, v in spec.maxtext.items()
            if k not in _SHAPE_KEYS and k not in overlay and not k.startswith(("base_num_", "base_emb_", "base_mlp_"))}
    devices = shape.chips * shape.generation.jax_devices_per_chip
    axes = resolved.get("mesh_axes") or ("data", "fsdp", "tensor")
    mesh = run_mesh(spec.maxtext, axes, devices, num_slices)
    heads_split = mesh.shards(("tensor", "tensor_sequence", "autoregressive", "context"))
    weights_split = mesh.shards(a for a in mesh.axes if a not in ("data", "diloco"))
    width = 64 * weights_split
    return {
        **kept, "model_name": "default", "base_emb_dim": width, "base_mlp_dim": 2 * width,
        "base_num_query_heads": 2 * heads_split, "base_num_kv_heads": 2 * heads_split, "head_dim": 32,
        "base_num_decoder_layers": 2, "vocab_size": 4 * width, "per_device_batch_size": 1,
        "max_target_length": 128 * mesh.shards(("context", "context_usp_ulysses", "tensor_sequence")),
    }


def _overlay_keys(spec: JobSpec) -> list[str]:
    from gke_ray_tpu.core.maxtext import _cached_yaml, model_overlay

    path = model_overlay(str(spec.maxtext.get("model_name", "default")))
    return list(_cached_yaml(path)) if path else []


def small_model_request(spec: JobSpec, libtpu_flags: Iterable[str], shape: SliceShape, num_slices: int) -> CompileRequest:
    settings = small_model_settings(spec, shape, num_slices)
    label = f"a {settings['base_emb_dim']}-wide 2-layer model on {num_slices} x {shape.pod_type} with {spec.run_name}'s mesh"
    return _request(label, spec.config, settings, shape, num_slices, libtpu_flags)


def _is_small(spec: JobSpec) -> bool:
    from gke_ray_tpu.core.errors import ConfigError
    from gke_ray_tpu.core.models import model_shape

    try:
        return model_shape(dict(spec.maxtext)).num_params <= SMALL_MODEL_PARAMS
    except ConfigError:
        return False  # a shape the estimates do not know (a mixture of experts): not assumed small


def parallel_compiles(jobs: Optional[int] = None) -> int:
    """Compiles run at once: one per core, each child needing up to ~3 GiB (an 8B's; bench/README.md)."""
    if jobs:
        return jobs
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    return max(1, min(os.cpu_count() or 1, int(memory_gib // 3)))


def check_job(
    spec: JobSpec, libtpu_flags: Iterable[str], slice_counts: Iterable[int], shape: Optional[SliceShape] = None,
    *, exact_flags: bool = False, jobs: Optional[int] = None, **options,
) -> SliceCountResults:
    """XLA's verdict on a job's train step at each of ``slice_counts`` (an elastic run trains on any of
    them after a lost slice, with another sharding and another peak), as the pods run it.

    A large run compiles without the pods' ``libtpu_flags``, which cost the compiler several times the time
    (448 s against 97 s for the 8B here) and moved no peak XLA compiled both ways (bench/README.md); whether
    libtpu takes the flags at all (it refuses some per generation) is a compile of the small model
    (:func:`small_model_settings`) on the same mesh under them. A small run, or ``exact_flags``, compiles
    under the flags itself. All compiles run at once, :func:`parallel_compiles` at a time.
    """
    flags, shape = tuple(libtpu_flags), shape or spec.shape()
    exact = exact_flags or _is_small(spec)
    requests = {}
    for count in sorted(set(slice_counts)):
        requests[("run", count)] = request_for_job(spec, flags if exact else (), shape, count)
        if not exact and flags:
            requests[("flags", count)] = small_model_request(spec, flags, shape, count)
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel_compiles(jobs)) as pool:
        running = {key: pool.submit(compile_check, request, **options) for key, request in requests.items()}
        done = {key: future.result() for key, future in running.items()}
    return SliceCountResults({
        count: dataclasses.replace(result, flags_check=done.get(("flags", count)))
        for (kind, count), result in done.items() if kind == "run"
    })
