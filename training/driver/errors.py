"""The one error the submit path raises when the cluster cannot be reached or used."""

from gke_ray_tpu.core.exit_status import Unavailable


class ClusterError(Unavailable):
    """Kubernetes or the Ray Jobs API said no. The message is one line a user can act on."""


def api_refusal(error) -> str:
    """``403 Forbidden: <the API server's own message>``: a Kubernetes ApiException's status, reason and, where its
    body is the API server's Status (RBAC's who-may-not-do-what, a webhook's denial, a CEL rule's refusal), that
    Status's message, on one line."""
    import json

    message = ""
    try:
        body = json.loads(error.body or "")
        if isinstance(body, dict):
            message = " ".join(str(body.get("message") or "").split())
    except (TypeError, ValueError):
        pass
    return f"{error.status} {error.reason}" + (f": {message}" if message else "")
