"""The submit command's one way to a Ray Jobs API: ``--address``, a local head it starts, or a port-forward.

Every run path goes through :func:`job_client`: a job on the stack's RayCluster,
one on a run's own cluster (``head_service``: that cluster's head), and a local
run. The client sends the Ray cluster's token on every call (``gke_ray_tpu.training.driver.ray_auth``).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from gke_ray_tpu.training.driver import ray_auth, retry
from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.ray_auth import RayToken
from gke_ray_tpu.training.driver.request import SubmitRequest

RAY_CLIENT_LOGGERS = (
    "ray.dashboard.modules.dashboard_sdk",
    "ray.dashboard.modules.job.sdk",
    "ray._private.runtime_env.packaging",
)
"""Ray's INFO lines about uploading the job's packages and closing log streams: noise unless --verbose."""


def connect(address: str, hint: str, log: Callable[[str], None], verbose: bool = False,
            token: RayToken | None = None):
    """A JobSubmissionClient for ``address`` that sends ``token`` on every call and on the log stream (retried while
    unreachable), or a one-line ClusterError; a refused token is one line naming where it came from."""
    from ray.job_submission import JobSubmissionClient

    if not verbose:  # after the import: Ray sets these loggers up when their modules load
        for name in RAY_CLIENT_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)

    token = token or ray_auth.from_env()
    what = f"cannot reach the Ray Jobs API at {address}"
    try:
        return retry.call(lambda: JobSubmissionClient(address, headers=token.headers), what, log)
    except ClusterError as e:
        raise ClusterError(f"{e} ({hint})") from None
    except Exception as e:  # noqa: BLE001 - requests, aiohttp and Ray raise different types here
        status = ray_auth.refusal_status(e)
        if status is not None:
            raise ClusterError(f"the Ray Jobs API at {address} refused the submit command: {token.refused(status)}") \
                from None
        raise ClusterError(f"{what}: {retry.reason(e)} ({hint})") from None


def check_kuberay(core, log: Callable[[str], None], own_clusters: bool = False) -> None:
    """The cluster's KubeRay keeps what the stack declares (``cluster_checks``), through ``core``'s API client;
    ``own_clusters``: and what a run that brings its own cluster sets."""
    from kubernetes.client import ApiextensionsV1Api

    from gke_ray_tpu.training.driver.cluster_checks import check_kuberay as check

    check(ApiextensionsV1Api(core.api_client), log, own_clusters)


def gke_context(project: str, location: str, cluster: str) -> str:
    """The kubeconfig context ``gcloud container clusters get-credentials`` writes for a GKE cluster."""
    return f"gke_{project}_{location}_{cluster}"


def stack_context(request: SubmitRequest, outputs) -> Optional[str]:
    """The kubeconfig context the command uses: ``--kube-context``'s as given, else the current one, which must be
    the stack's cluster (its ``project``, ``clusterLocation`` and ``clusterName`` outputs), else one line naming
    both. None where no kubeconfig is used (``--local``, ``--address``)."""
    if request.local or request.address:
        return None
    if request.kube_context:
        return request.kube_context
    from kubernetes import config

    from gke_ray_tpu.training.driver.port_forward import kubeconfig

    expected = gke_context(outputs.project, outputs.cluster_location, outputs.cluster_name)
    fetch = (f"`gcloud container clusters get-credentials {outputs.cluster_name} --location "
             f"{outputs.cluster_location} --project {outputs.project}`")
    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig())
    except (config.ConfigException, FileNotFoundError) as e:
        raise ClusterError(f"no usable kubeconfig ({e}); run {fetch} or pass --address") from None
    if (current or {}).get("name") != expected:
        name = (current or {}).get("name")
        cluster = ((current or {}).get("context") or {}).get("cluster")
        raise ClusterError(f"the kubeconfig's current context {name} (cluster {cluster}) is not the stack's cluster "
                           f"{outputs.cluster_name} ({expected}): run {fetch}, or pass --kube-context to name the "
                           "context to use")
    return expected


@contextmanager
def job_client(request: SubmitRequest, outputs, workers: int, log: Callable[[str], None],
               head_service: Optional[str] = None) -> Iterator:
    """A connected JobSubmissionClient; stops the local head or port-forward it opened.

    ``head_service``: the head service of a run's own RayCluster (default: the stack's RayCluster's)."""
    if request.address:
        yield connect(request.address, "is the dashboard reachable at --address?", log, request.verbose)
    elif request.local:
        from gke_ray_tpu.training.driver.local_ray import LocalRayHead

        log_path = request.output_dir.resolve() / "ray-head.log"
        with LocalRayHead(num_cpus=workers, log_path=log_path) as head:
            log(f"started a local Ray head: {head.address} (stopped when this command ends)")
            yield connect(head.address, f"see {log_path}", log, request.verbose,
                          RayToken(head.token, "the local head"))
    else:
        from gke_ray_tpu.training.driver.port_forward import PortForward

        service = head_service or outputs.ray_head_service
        with PortForward(outputs.namespace, service, outputs.ray_dashboard_port, context=request.kube_context,
                         log=log) as pf:
            log(f"port-forward 127.0.0.1:{pf.local_port} -> {outputs.namespace}/{pf.pod}:{pf.pod_port}")
            if head_service is None:  # a run's own cluster was checked before its RayJob was created
                check_kuberay(pf.api, log)
            token = ray_auth.from_secret(pf.api, outputs.namespace, service)
            try:
                client = connect(
                    pf.url, f"port-forward to {outputs.namespace}/{service}", log, request.verbose, token,
                )
            except ClusterError as e:
                if pf.stream_error is None:
                    raise
                raise ClusterError(f"{e}; the port-forward stream failed: {pf.stream_error}") from None
            yield client
