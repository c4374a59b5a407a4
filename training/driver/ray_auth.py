"""The token the submit command sends to a Ray cluster that runs with Ray's token auth.

Ray's HTTP servers (the dashboard with its Jobs API, and the dashboard agent
on every node) answer 401 to a request without ``Authorization: Bearer
<token>`` and 403 to one with the wrong token. The token comes from:

* a stack's RayCluster: the Secret KubeRay makes for it
  (``gke_ray_tpu.core.kuberay.auth_secret_name``, key ``AUTH_TOKEN_KEY``), read through
  the Kubernetes API with the caller's credentials: never printed, logged or
  written to a file;
* ``--address``: the environment variable :data:`ADDRESS_TOKEN_ENV`, Ray's own
  name for it, so the same shell works for ``ray job`` commands;
* a local head: the fresh token it was started with
  (``gke_ray_tpu.training.driver.local_ray``).

The token travels as a header the client sets explicitly, so it is sent
whatever ``RAY_AUTH_MODE`` says in this process (Ray sends its own token only
when that variable says ``token``) and Ray's own lookup never overrides it.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field

from gke_ray_tpu.core.kuberay import AUTH_TOKEN_KEY, auth_secret_name
from gke_ray_tpu.training.driver.errors import ClusterError, api_refusal

ADDRESS_TOKEN_ENV = "RAY_AUTH_TOKEN"
"""Where ``--address`` takes its token from (Ray's CLI reads the same variable)."""

RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
"""Ray's auth settings (``ray/_private/authentication``): a local head sets them itself, whatever the caller's
environment says."""

CLUSTER_LABEL = "ray.io/cluster"
"""The label KubeRay puts on a cluster's pods and its head service's selector: the RayCluster's name."""


def bearer(token: str | None) -> dict[str, str]:
    """The header that carries ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class RayToken:
    """A cluster's token and where it came from (the only part any message shows)."""

    value: str | None = field(repr=False)
    source: str
    """Where the token was read, for the line a refusal prints: ``Secret ns/name``, ``$RAY_AUTH_TOKEN``."""

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.value)

    def refused(self, status: int) -> str:
        """What a 401 or 403 from the cluster means for this token, in one clause."""
        if not self.value:
            return (f"the Ray cluster answered {status}: it runs with token auth and no token was sent "
                    f"(set {ADDRESS_TOKEN_ENV} to its token)")
        return f"the Ray cluster answered {status} to the token from {self.source}: not this cluster's token"


def from_env() -> RayToken:
    """``--address``'s token: :data:`ADDRESS_TOKEN_ENV`, or none (a cluster without auth)."""
    return RayToken(os.environ.get(ADDRESS_TOKEN_ENV) or None, f"${ADDRESS_TOKEN_ENV}")


def from_secret(core_api, namespace: str, head_service: str) -> RayToken:
    """The token of the RayCluster behind ``head_service``, from the Secret KubeRay made for it.

    ``core_api`` is a ``kubernetes.client.CoreV1Api``. The cluster's name is the
    service selector's :data:`CLUSTER_LABEL`.
    """
    from kubernetes.client.exceptions import ApiException

    try:
        selector = core_api.read_namespaced_service(head_service, namespace).spec.selector or {}
    except ApiException as e:
        raise ClusterError(f"cannot read service {namespace}/{head_service} ({api_refusal(e)})") from None
    cluster = selector.get(CLUSTER_LABEL)
    if not cluster:
        raise ClusterError(
            f"service {namespace}/{head_service} selects no {CLUSTER_LABEL}: not a KubeRay head service, so there "
            "is no Secret to read the cluster's Ray token from"
        )
    name = auth_secret_name(cluster)
    where = f"Secret {namespace}/{name}"
    try:
        secret = core_api.read_namespaced_secret(name, namespace)
    except ApiException as e:
        if e.status == 404:
            raise ClusterError(
                f"{where} does not exist: KubeRay makes it for a RayCluster with authOptions.mode token; is "
                f"RayCluster {namespace}/{cluster} deployed by this stack (`pulumi up`)?"
            ) from None
        if e.status in (401, 403):
            raise ClusterError(
                f"cannot read {where} ({api_refusal(e)}): the submit command sends the Ray cluster's token "
                f"from it; your Kubernetes user needs `get` on secrets in namespace {namespace}"
            ) from None
        raise ClusterError(f"cannot read {where} ({api_refusal(e)})") from None
    encoded = (secret.data or {}).get(AUTH_TOKEN_KEY)
    if not encoded:
        raise ClusterError(f"{where} has no {AUTH_TOKEN_KEY!r} key: it is not the Secret KubeRay makes for token auth")
    return RayToken(base64.b64decode(encoded).decode().strip(), where)


def refusal_status(e: BaseException) -> int | None:
    """401 or 403 when ``e`` is a Ray cluster refusing a request for its token, else None."""
    import aiohttp
    from ray.exceptions import AuthenticationError

    if isinstance(e, aiohttp.WSServerHandshakeError) and e.status in (401, 403):
        return e.status
    if isinstance(e, AuthenticationError):
        # Ray's message starts "Authentication required" for a 401, "Authentication failed" for a 403
        # (http_token_authentication.format_authentication_http_error).
        return 401 if str(e.message).startswith("Authentication required") else 403
    return None
