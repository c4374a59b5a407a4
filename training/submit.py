"""Post-deploy step: submit the MaxText job to the stack's RayCluster, or run it locally.

    python -m gke_ray_tpu.training.submit --preset llama3-70b --outputs-file outputs.json
    python -m gke_ray_tpu.training.submit --preset llama3-8b-elastic --stack dev
    python -m gke_ray_tpu.training.submit --outputs-file outputs.json --follow <run>
    python -m gke_ray_tpu.training.submit --local
    python -m gke_ray_tpu.training.submit --outputs-file outputs.json --dashboard

This module is the command line: it reads the request and the stack's outputs,
builds the job (``gke_ray_tpu.training.driver.submission``) and hands it to the run
path (``gke_ray_tpu.training.driver.runs``), which submits with a submission id
derived from the run name (running the command again follows, reports or resumes
that run), shows progress while the job runs (the job's whole log goes to
``<run dir>/job.log``, Ray's record of it to ``job.json``), prints the run's
goodput and draws its figure, and exits with the job's outcome. ``--follow``
attaches to a run without submitting anything: a run declared in the stack (a
RayJob) or one submitted before. ``--dashboard`` only forwards a local port to
the RayCluster's Ray dashboard, until Ctrl-C.

On a stack that scales to zero (its outputs carry ``rayClusterSpec``) there is
no RayCluster to submit to: each run is a RayJob that brings its own, the
port-forward goes to that cluster's head once it is up, and Ctrl-C leaves the
run going. Exit statuses: ``gke_ray_tpu.core.exit_status`` (Ctrl-C stops the job,
except a run with its own cluster).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import Callable, Optional

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.exit_status import OK, run_command
from gke_ray_tpu.core.kuberay import head_service_name
from gke_ray_tpu.training.driver import connection, runs, stack_outputs
from gke_ray_tpu.training.driver.display import PlainDisplay
from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.jobs_client import TERMINAL
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.submission import for_cluster, for_local

PROG = "python -m gke_ray_tpu.training.submit"


def main(argv: Optional[list[str]] = None) -> int:
    # A bad flag exits 2 in argparse; a bad key=value is a ConfigError, worded by the ladder like the others.
    return run_command(PROG, lambda: _main(SubmitRequest.from_argv(argv)))


def _main(request: SubmitRequest) -> int:
    outputs = None
    if not request.local:
        outputs = (
            stack_outputs.load_file(request.outputs_file)
            if request.outputs_file
            else stack_outputs.load_stack(request.stack or "")
        )
        # Every Kubernetes call goes to the stack's cluster: the kubeconfig's current context must be it (or the
        # one --kube-context names), else a RayJob would be created on another cluster.
        request = replace(request, kube_context=connection.stack_context(request, outputs))
    if request.dashboard:
        return dashboard(request, outputs)
    if request.follow and request.local and not request.address:
        raise ConfigError("--follow", request.follow, "a run on a Ray head that outlives this command: add --address")
    submission = None if request.follow else (for_local(request) if request.local else for_cluster(request, outputs))
    log = PlainDisplay(None, sys.stderr).note
    if submission is not None:
        run_name = submission.spec.run_name
        log(f"run_name={run_name} (pass run_name={run_name} to follow or resume this run)")
        for note in submission.spec.notes:
            log(note)
    return runs.run(request, outputs, submission, log)


def dashboard(request: SubmitRequest, outputs) -> int:
    """Forward a local port to the RayCluster's dashboard until Ctrl-C; its URL goes to stdout."""
    from gke_ray_tpu.training.driver.port_forward import PortForward

    log = PlainDisplay(None, sys.stderr).note
    if outputs.scale_to_zero:
        service = _running_head(request, outputs, log)
    elif request.follow:
        raise ConfigError("--follow", request.follow,
                          "no --follow with --dashboard: this stack's jobs share its one RayCluster")
    else:
        service = outputs.ray_head_service
    try:
        with PortForward(outputs.namespace, service, outputs.ray_dashboard_port, context=request.kube_context,
                         log=log) as pf:
            log(f"Ray dashboard of {outputs.namespace}/{service} (pod {pf.pod}, port {pf.pod_port}) "
                "at the URL below; Ctrl-C closes the port-forward")
            print(pf.url, flush=True)
            hold()
    except KeyboardInterrupt:
        log("port-forward closed")
    return OK


def _running_head(request: SubmitRequest, outputs, log: Callable[[str], None]) -> str:
    """The head service of the running run's own cluster (``--follow RUN``'s, or the only one running)."""
    from gke_ray_tpu.training.driver import port_forward, run_cluster

    clusters = run_cluster.RunClusters(*port_forward.kube_apis(request.kube_context, log), outputs.namespace, log)
    running = [job for job in clusters.ray_jobs() if run_cluster.job_status(job) not in TERMINAL]
    if request.follow:
        mine = {job.submission_id for job in clusters.run_jobs(request.follow)}
        running = [job for job in running if job["spec"]["jobId"] in mine]
        if not running:
            raise ConfigError("--follow", request.follow, "a run that is running: its cluster is gone once it ended")
    elif len(running) != 1:
        ids = ", ".join(job["spec"]["jobId"] for job in running) or "none"
        raise ConfigError("--dashboard", f"{len(running)} runs running ({ids})",
                          "one running run, or --follow RUN to pick one: each run has its own cluster")
    cluster = (running[-1].get("status") or {}).get("rayClusterName")
    if not cluster:
        raise ClusterError(f"RayJob {running[-1]['metadata']['name']} has no RayCluster yet; try again in a minute")
    return head_service_name(cluster)


def hold() -> None:
    """Wait for Ctrl-C."""
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
