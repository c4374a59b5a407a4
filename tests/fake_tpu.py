"""A fake-TPU Ray cluster: Ray Train's TPU path, run on this machine's CPUs.

GKE's TPU webhook gives every pod of a slice ``TPU_NAME``, ``TPU_WORKER_ID``,
``TPU_ACCELERATOR_TYPE`` and ``TPU_TOPOLOGY``; from them, and ``--resources
'{"TPU": 4}'`` for the chips, ``ray start`` registers the node as that host of
that slice: the resources ``TPU``, ``TPU-<pod type>-head`` (worker 0 only) and
``<slice name>``, and the labels ``ray.io/tpu-slice-name``, ``-worker-id``,
``-pod-type`` and ``-topology``, which Ray Train's slice reservation selects on.
:class:`FakeTpuCluster` starts one local Ray node per host that way, with the
rest of the environment the stack's RayCluster gives a TPU pod, for the slices
of a stack run offline (:func:`tpu_stack`, the mock engine).

Stood in, and nothing else: GKE's webhook (:func:`webhook_env`, without
``TPU_WORKER_HOSTNAMES``: pod names do not resolve here), the chips (the TPU
resource), libtpu and the TPU backend (``JAX_PLATFORMS=cpu`` in place of the
pod's ``tpu,cpu``: :data:`POD_ENV_STAND_IN`), the workers' uv install of
the lock (``tests/fake_tpu_job``), MaxText's ``hardware``
(``cpu``: TPU devices carry a slice index, CPU devices do not) and the bucket
(checkpoints and the compilation cache in a local directory: Orbax's
local-file commit rules, not the ``gs://`` commit marker; see
:func:`submission`). Multi-node Ray does not stay on 127.0.0.1 (Ray refuses
``ray start --address`` in its single-machine mode): the head and the nodes use
this machine's own address, and nothing is sent anywhere else.
"""

from __future__ import annotations

import dataclasses
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from gke_ray_tpu.core.job_spec import TRAINER_MODULE, submission_id_for
from gke_ray_tpu.core.presets import get_preset
from gke_ray_tpu.training.driver.local_ray import LocalRayHead, LocalRayNode, Started
from gke_ray_tpu.training.driver.progress import WORKER_PID, Progress
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.stack_outputs import StackOutputs, from_mapping
from gke_ray_tpu.training.driver.submission import Submission, for_cluster
from gke_ray_tpu.training.worker.trainer import TPU_HOST_LINE
from tests.conftest import REPO_ROOT, with_keys
from tests.drill import PACED_MODEL, Drill, committed_checkpoints

TEST_STACK = {"tpuGeneration": "v5p", "tpuTopology": "2x2x2", "dcnCidrs": None, "runs": None}
"""The dev stack with 2 hosts a slice (v5p-16) instead of 4, so 2 slices are 4 Ray nodes on 2 cores: no DCN
networks (a v5p host has no NIC for them) and no declared run (the 8B preset's mesh needs 16 chips a slice)."""
BENCH_STACK: dict[str, str | None] = {}
"""The dev stack as it is: 2 slices of v6e 4x4, 8 hosts."""
POD_ENV_STAND_IN = {"JAX_PLATFORMS": "cpu"}
"""In place of the TPU pod's ``tpu,cpu``: there is no TPU backend here."""
ON_CPU = {"hardware": "cpu", "model_name": "default", "ici_fsdp_parallelism": -1, "ici_tensor_parallelism": 1}
"""MaxText on the fake hosts: the tiny CPU model (``tiny-cpu``'s settings) instead of the 8B, a CPU device per
worker, one FSDP axis filled in over them (as in a slice) and data parallelism over DCN left to MaxText (-1)."""
TRAINER_STAND_IN = REPO_ROOT / "tests" / "fake_tpu_job"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
RESIZE_CHECK_S = 5.0
"""Ray Train's look for more slices in a run that takes a lost slice back (``tests/fake_tpu_job``'s
RESIZE_CHECK_ENV)."""


@dataclass(frozen=True)
class TpuStack:
    """What a fake cluster takes from a stack: its outputs (for the submit command) and a TPU pod's spec."""

    outputs: StackOutputs
    pod_env: dict[str, str]
    """The TPU worker container's environment, with :data:`POD_ENV_STAND_IN`."""
    tpus_per_host: int
    """The container's ``google.com/tpu``."""
    slices: int
    """The TPU worker group's replicas."""
    hosts: int
    """Its ``numOfHosts``."""


def tpu_stack(**keys: str | None) -> TpuStack:
    """The dev stack with ``keys`` changed, run offline; its TPU worker group and outputs."""
    from gke_ray_tpu.stack.mock_engine import load_stack_file, run_offline

    run = run_offline(with_keys(load_stack_file(REPO_ROOT / "Pulumi.dev.yaml"), **keys))
    # A held stack's RayCluster, or on a stack that scales to zero the cluster each run brings.
    clusters = run.of_type(RAYCLUSTER)
    cluster_spec = clusters[0].inputs["spec"] if clusters else run.outputs["rayClusterSpec"]
    (group,) = cluster_spec["workerGroupSpecs"]
    container = group["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    return TpuStack(
        outputs=from_mapping(run.outputs, "stack outputs"),
        pod_env={**env, **POD_ENV_STAND_IN},
        tpus_per_host=int(container["resources"]["limits"]["google.com/tpu"]),
        slices=int(group["replicas"]),
        hosts=int(group["numOfHosts"]),
    )


def webhook_env(outputs: StackOutputs, slice_name: str, worker_id: int) -> dict[str, str]:
    """What GKE's TPU webhook sets on the pod of host ``worker_id`` of slice ``slice_name``."""
    from gke_ray_tpu.core.tpu_catalogue import slice_shape

    shape = slice_shape(outputs.tpu_generation, outputs.topology)
    return {"TPU_NAME": slice_name, "TPU_WORKER_ID": str(worker_id), "TPU_ACCELERATOR_TYPE": shape.pod_type,
            "TPU_TOPOLOGY": outputs.topology}


class FakeTpuCluster(Started):
    """``with FakeTpuCluster(stack, out_dir) as cluster:`` a Ray head, and ``cluster.start_slice(name)`` the
    hosts of a slice (``cluster.kill_slice(name)`` SIGKILLs them all, as when GKE loses the slice)."""

    def __init__(self, stack: TpuStack, out_dir: Path):
        self.stack = stack
        self.out_dir = out_dir
        self.head: LocalRayHead | None = None
        self.slices: dict[str, list[LocalRayNode]] = {}

    def slice_names(self) -> list[str]:
        return [f"slice-{chr(ord('a') + i)}" for i in range(self.stack.slices)]

    def _start(self) -> None:
        self.head = LocalRayHead(num_cpus=1, log_path=self.out_dir / "ray-head.log", multi_node=True).__enter__()

    def start_slice(self, name: str) -> list[LocalRayNode]:
        """Start the hosts of slice ``name``, one after the other (side by side, on 2 cores, a raylet may miss Ray's
        30 s to register and start again)."""
        self.slices[name] = []
        for worker in range(self.stack.hosts):
            self.slices[name].append(LocalRayNode(
                self.head, num_cpus=1, log_path=self.out_dir / f"{name}-{worker}.log",
                env={**self.stack.pod_env, **webhook_env(self.stack.outputs, name, worker)},
                resources={"TPU": self.stack.tpus_per_host},
            ).__enter__())
        return self.slices[name]

    def pids(self) -> set[int]:
        """Every live process of the cluster: those of the head's and the hosts' process sessions."""
        from tests.processes import in_sessions

        return in_sessions({self.head._proc.pid, *(node.proc.pid for nodes in self.slices.values() for node in nodes
                                                   if node.proc)})

    def kill_slice(self, name: str) -> None:
        with ThreadPoolExecutor(len(self.slices[name])) as pool:
            list(pool.map(LocalRayNode.kill, self.slices[name]))

    def wait_until_gone(self, name: str, timeout_s: float) -> None:
        """Until Ray lists none of killed slice ``name``'s hosts as alive: a host started again joins as a new node."""
        hosts = {node.name for node in self.slices[name]}
        deadline = time.monotonic() + timeout_s
        while hosts & self.head.alive_nodes():
            if time.monotonic() > deadline:
                raise AssertionError(f"{name}'s hosts still alive in Ray's view after {timeout_s:.0f} s")
            time.sleep(0.5)

    def _close(self) -> None:
        for nodes in self.slices.values():
            for node in nodes:
                node.kill()
        if self.head is not None:
            self.head.stop()


def submission(stack: TpuStack, out_dir: Path, run_name: str, **request: object) -> Submission:
    """The job the submit command makes of ``request`` for ``stack`` (``for_cluster``), with the tiny model on CPU
    (:data:`ON_CPU`), its files under ``out_dir`` (its ``jax_cache_dir`` too: a restarted group of a size the run
    had before finds its programs compiled), and the trainer's module swapped for its stand-in."""
    overrides = {**get_preset("tiny-cpu").maxtext, **ON_CPU, **request.pop("overrides", {}),
                 "base_output_directory": str(out_dir), "jax_cache_dir": str(out_dir / "jax-cache"),
                 "run_name": run_name}
    preset = "llama3-8b-elastic" if request.get("elastic") else "llama3-8b"
    made = for_cluster(SubmitRequest(outputs_file="-", preset=preset, output_dir=out_dir, overrides=overrides,
                                     **request), stack.outputs)
    module = f"-m {TRAINER_MODULE} "
    assert made.entrypoint.count(module) == 1, made.entrypoint
    env, entry = made.runtime_env, made.entrypoint
    if made.code_files is not None:
        # A stack that scales to zero: the job imports the code archive the submit command uploads (and checks it
        # first); the bucket's /data mount is this directory.
        from gke_ray_tpu.core.code_archive import archive_object, archive_zip, digest
        from gke_ray_tpu.core.job_spec import DATA_MOUNT

        obj = archive_object(digest(made.code_files))
        (out_dir / obj).parent.mkdir(parents=True, exist_ok=True)
        (out_dir / obj).write_bytes(archive_zip(made.code_files))
        entry = entry.replace(f"{DATA_MOUNT}/{obj}", str(out_dir / obj))
        env = {**env, "env_vars": {**env["env_vars"], "PYTHONPATH": str(out_dir / obj)}}
    return dataclasses.replace(
        made,
        entrypoint=entry.replace(module, f"-m {TRAINER_STAND_IN.name} "),
        runtime_env={**env, "py_modules": [*env.get("py_modules", []), str(TRAINER_STAND_IN)]},
    )


def elastic_job(stack: TpuStack, out_dir: Path, run_name: str, steps: int, checkpoint_period: int) -> Submission:
    """The elastic job (1 slice up to all of them) of the drill's paced model, so a kill window shows in the log."""
    from gke_ray_tpu.core.maxtext import parse_value

    paced = {key: parse_value(value) for key, value in (item.split("=", 1) for item in PACED_MODEL)}
    return submission(stack, out_dir, run_name, elastic=True,
                      overrides={"steps": steps, "checkpoint_period": checkpoint_period, **paced})


def submit(head: LocalRayHead, job: Submission, env_vars: Mapping[str, str] = ()) -> str:
    """Submit ``job`` as the submit command does (``JobsApi.submit``), with more ``env_vars``; its id."""
    from gke_ray_tpu.training.driver.jobs_client import JobsApi

    runtime_env = {**job.runtime_env, "env_vars": {**job.runtime_env["env_vars"], **dict(env_vars)}}
    sid = submission_id_for(job.spec.run_name)
    with JobsApi(head.jobs(), log=lambda _: None) as api:
        assert api.submit(sid, job.entrypoint, runtime_env, metadata={}), sid
    return sid


def wait_for_end(head: LocalRayHead, sid: str, timeout_s: float) -> str:
    from ray.job_submission import JobStatus

    client = head.jobs()
    deadline = time.monotonic() + timeout_s
    while (status := client.get_job_status(sid)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        if time.monotonic() > deadline:
            client.stop_job(sid)
            raise AssertionError(f"{sid} still {status} after {timeout_s:.0f} s:\n{client.get_job_logs(sid)[-3000:]}")
        time.sleep(1)
    return str(status.value)


_ITEM = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class Host:
    """What one TPU worker of one worker group reported (``gke_ray_tpu.training.worker.trainer``'s TPU_HOST_LINE)."""

    pid: int
    rank: int
    world: int
    settings: dict[str, str]
    """TPU_NAME, TPU_WORKER_ID and the MEGASCALE_* variables, as the worker saw them ('' when unset)."""


def hosts_by_group(log: str, progress: Progress) -> list[list[Host]]:
    """Each worker group's TPU workers, by rank."""
    reported = {}
    for line in log.splitlines():
        if TPU_HOST_LINE in line and (pid := WORKER_PID.search(line)):
            items = dict(_ITEM.findall(line.split(TPU_HOST_LINE, 1)[1]))
            if "rank" not in items:  # Ray may log a print's text and its newline apart
                continue
            reported[int(pid.group(1))] = Host(int(pid.group(1)), int(items.pop("rank")), int(items.pop("world")),
                                               items)
    return [sorted((reported[pid] for pid in group.ranks if pid in reported), key=lambda h: h.rank)
            for group in progress.groups]


def read_job(head: LocalRayHead, sid: str) -> tuple[str, Progress]:
    log = head.jobs().get_job_logs(sid)
    progress = Progress()
    progress.feed(log)
    progress.flush()
    return log, progress


def lose_a_slice(cluster: FakeTpuCluster, job: Submission, lost: str, timeout_s: float,
                 comes_back: bool = False) -> Drill:
    """Run the elastic ``job`` on ``cluster`` and SIGKILL every host of slice ``lost`` once a checkpoint of step
    ``checkpoint_period`` or later is committed and a later step is logged; wait for the job to end and save its
    log and record where ``gke_ray_tpu.training.report`` reads them (as the submit command does).

    ``comes_back``: the one-slice group that takes over holds after its next checkpoint (``tests/fake_tpu_job/hold.py``),
    and once that checkpoint is committed and the lost hosts are gone from Ray's view, they are started again; Ray
    Train looks for them every :data:`RESIZE_CHECK_S`."""
    from gke_ray_tpu.training.driver.jobs_client import JobsApi
    from gke_ray_tpu.training.driver.run_files import JOB_LOG
    from gke_ray_tpu.training.driver.outcome import job_record
    from tests.fake_tpu_job.__main__ import RESIZE_CHECK_ENV
    from tests.fake_tpu_job.hold import HOLD_ENV

    period = int(job.spec.maxtext["checkpoint_period"])
    checkpoints = job.run_dir / "checkpoints"
    started = time.monotonic()
    sid = submit(cluster.head, job, {HOLD_ENV: str(period + 1), RESIZE_CHECK_ENV: str(RESIZE_CHECK_S)}
                 if comes_back else {})
    deadline = started + timeout_s

    def wait(what: str, done) -> None:
        while not done():
            if time.monotonic() > deadline or cluster.head.jobs().get_job_status(sid).is_terminal():
                raise AssertionError(f"{what}: not in {timeout_s:.0f} s\n{read_job(cluster.head, sid)[0][-3000:]}")
            time.sleep(0.5)

    progress = None

    def kill_window() -> bool:
        nonlocal progress
        saved = [c for c in committed_checkpoints(checkpoints) if c >= period]
        if not saved:  # the directory first: the whole log is read only once there is a checkpoint to pass
            return False
        _, progress = read_job(cluster.head, sid)
        return bool(progress.steps) and max(progress.steps) > max(saved)

    wait("a kill window", kill_window)
    killed_pid = cluster.slices[lost][0].proc.pid
    cluster.kill_slice(lost)
    killed_at, last_seen = time.time(), max(progress.steps)
    time.sleep(1)
    at_kill = committed_checkpoints(checkpoints)
    back_at = None
    if comes_back:
        wait("the one-slice group's held checkpoint", lambda: max(committed_checkpoints(checkpoints)) > max(at_kill))
        back_at = time.time()
        cluster.wait_until_gone(lost, max(1.0, deadline - time.monotonic()))
        cluster.start_slice(lost)
    status = wait_for_end(cluster.head, sid, max(1.0, deadline - time.monotonic()))
    log, progress = read_job(cluster.head, sid)
    job.run_dir.mkdir(parents=True, exist_ok=True)
    (job.run_dir / JOB_LOG).write_text(log)
    with JobsApi(cluster.head.jobs(), log=lambda _: None) as api:
        job_record(api, sid, job.spec, cluster.stack.outputs).save(job.run_dir)
    return Drill(
        returncode=0, stderr="", status=status, log=log, progress=progress, killed_pid=killed_pid, killed_rank=None,
        killed_at=killed_at, last_step_seen=last_seen, checkpoints_at_kill=at_kill,
        checkpoints_at_end=committed_checkpoints(checkpoints), wall_s=time.monotonic() - started,
        run_dir=job.run_dir, output_dir=str(job.run_dir), back_at=back_at,
    )
