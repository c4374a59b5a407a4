"""``kubectl port-forward svc/<head-svc> 8265`` with the Kubernetes Python client.

The Ray dashboard (and its Jobs API) stays a ClusterIP service; the submit
command reaches it through the API server. Like kubectl, a service is forwarded
by resolving its selector to one running, ready pod and its target port; each
local connection opens its own port-forward stream to that pod.
"""

from __future__ import annotations

import os
import select
import socket
import threading

from gke_ray_tpu.training.driver import retry
from gke_ray_tpu.training.driver.errors import ClusterError, api_refusal


def resolve_pod(api, namespace: str, service: str, port: int) -> tuple[str, int]:
    """The (pod name, container port) that ``service:port`` sends traffic to."""
    from kubernetes.client.exceptions import ApiException

    try:
        svc = api.read_namespaced_service(service, namespace)
    except ApiException as e:
        raise ClusterError(
            f"cannot read service {namespace}/{service} ({api_refusal(e)}); "
            "is the stack deployed and the kubeconfig pointing at its cluster?"
        ) from None
    selector = svc.spec.selector or {}
    if not selector:
        raise ClusterError(f"service {namespace}/{service} has no selector, so no pod to forward to")
    ports = [p for p in svc.spec.ports or [] if p.port == port]
    if not ports:
        known = ", ".join(str(p.port) for p in svc.spec.ports or []) or "none"
        raise ClusterError(f"service {namespace}/{service} has no port {port} (ports: {known})")
    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    pods = api.list_namespaced_pod(namespace, label_selector=label_selector).items
    ready = sorted(
        (p for p in pods if serving(p)), key=lambda p: p.metadata.name
    )
    if not ready:
        seen = ", ".join(f"{p.metadata.name}={p.status.phase}" for p in pods) or "none"
        raise ClusterError(
            f"no running, ready pod behind service {namespace}/{service} "
            f"(selector {label_selector}; pods: {seen}); is the RayCluster head up?"
        )
    pod = ready[0]
    return pod.metadata.name, _container_port(pod, ports[0].target_port or port)


def serving(pod) -> bool:
    """A pod that runs and passes its readiness checks (what a Service sends traffic to)."""
    return pod.status.phase == "Running" and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _container_port(pod, target: int | str) -> int:
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for container in pod.spec.containers:
        for p in container.ports or []:
            if p.name == target:
                return p.container_port
    raise ClusterError(f"pod {pod.metadata.name} has no container port named {target!r}")


def relay(a, b) -> None:
    """Copy bytes both ways between two sockets until either side closes."""
    try:
        while True:
            readable, _, _ = select.select([a, b], [], [])
            for src in readable:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except OSError:
        return  # a reset on either side ends this connection only
    finally:
        a.close()
        b.close()


class PortForward:
    """A local 127.0.0.1 listener forwarding to ``service:port`` in the cluster.

    ``with PortForward("default", "maxtext-tpu-cluster-head-svc", 8265) as pf:``
    then talk to ``pf.url``. ``api`` is a ``CoreV1Api``; by default one is built
    from the kubeconfig (``context`` selects a kubeconfig context).
    """

    def __init__(self, namespace: str, service: str, port: int, context: str | None = None, api=None, log=None):
        self.namespace, self.service, self.port = namespace, service, port
        self._context, self._api, self._log = context, api, log
        self._listener: socket.socket | None = None
        self.local_port = 0
        self.stream_error: str | None = None
        """Why the last port-forward stream could not be opened, if one failed."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    @property
    def api(self):
        """The CoreV1Api the forward uses (its ``api_client`` reaches the rest of the Kubernetes API)."""
        return self._api

    def __enter__(self) -> "PortForward":
        api = self._api or _core_api(self._context, self._log)
        self.pod, self.pod_port = resolve_pod(api, self.namespace, self.service, self.port)
        self._api = api
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.local_port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="port-forward", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._listener is not None:
            # close() alone leaves the accepting thread's listener taking connections (Linux); shutdown wakes it.
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # where a listener cannot be shut down, close() ends accept()
            self._listener.close()

    def _accept(self) -> None:
        from kubernetes.stream import portforward

        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # listener closed by __exit__
            try:
                pf = portforward(
                    self._api.connect_get_namespaced_pod_portforward,
                    self.pod,
                    self.namespace,
                    ports=str(self.pod_port),
                )
                remote = pf.socket(self.pod_port)
            except Exception as e:  # noqa: BLE001 - any failure drops this connection only
                self.stream_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                conn.close()
                continue
            threading.Thread(target=relay, args=(conn, remote), daemon=True).start()


CONNECT_TIMEOUT_S = 10.0
"""Seconds to open a connection to the Kubernetes API server."""
READ_TIMEOUT_S = 30.0
"""Seconds to wait for its answer: none of the command's calls (a read, a list of a namespace's pods or events)
takes longer from a server that answers."""
API_BACKOFF = retry.Backoff(retries=3, first_s=1.0, cap_s=4.0)
"""Retries of a call that did not reach the API server: 1 + 2 + 4 s between 4 tries, so an unreachable or silent
server ends a call within 4 x (connect or read timeout) + 7 s."""


def kubeconfig() -> str:
    """The kubeconfig as kubectl finds it: ``$KUBECONFIG`` (one path or several), else ``~/.kube/config``; read at
    each call (the Kubernetes client reads the variable once, when it is imported)."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def bounded_api_client(context: str | None, log=None):
    """A Kubernetes ApiClient from the kubeconfig (``context``: that context, else the current one) whose every
    call is bounded: connect and read timeouts on each request (the client sets none unless asked, so a silent
    server would hold the command for ever), no retries of urllib3's own, and :data:`API_BACKOFF`'s between
    calls that did not reach the server, after which the failure is one ClusterError line."""
    from kubernetes import client, config

    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=kubeconfig(), context=context, client_configuration=configuration)
    except (config.ConfigException, FileNotFoundError) as e:
        raise ClusterError(
            f"no usable kubeconfig ({e}); run `gcloud container clusters get-credentials <clusterName>` "
            "or pass --address"
        ) from None
    configuration.retries = False
    host = configuration.host
    say = log or (lambda line: None)

    class BoundedApiClient(client.ApiClient):
        def call_api(self, *args, _request_timeout=None, **kwargs):
            timeout = _request_timeout or (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
            return retry.call(lambda: super(BoundedApiClient, self).call_api(*args, _request_timeout=timeout, **kwargs),
                              f"the Kubernetes API server at {host} did not answer", say, API_BACKOFF,
                              retryable=retry.unreached)

    return BoundedApiClient(configuration)


def _core_api(context: str | None, log=None):
    from kubernetes import client

    return client.CoreV1Api(bounded_api_client(context, log))


def kube_apis(context: str | None, log=None):
    """``(CoreV1Api, CustomObjectsApi)`` from the kubeconfig, sharing one bounded connection."""
    from kubernetes import client

    core = _core_api(context, log)
    return core, client.CustomObjectsApi(core.api_client)
