"""The one error the submit path raises when the cluster cannot be reached or used."""

from gke_ray_tpu.core.exit_status import Unavailable


class ClusterError(Unavailable):
    """Kubernetes or the Ray Jobs API said no. The message is one line a user can act on."""
