"""The one error the submit path raises when the cluster cannot be reached or used."""


class ClusterError(RuntimeError):
    """Kubernetes or the Ray Jobs API said no. The message is one line a user can act on."""
