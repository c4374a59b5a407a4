"""Entry point of the gke-ray-tpu policy pack.

``pulumi preview --policy-pack policy`` (or ``pulumi up``) starts this file as
the analyzer plugin; the Python host runs the directory with it on
``sys.path``, so ``policies`` imports as a top-level module. ``PolicyPack(...)``
starts the analyzer's gRPC server and blocks until the engine stops it: do not
import this file from tests, import ``policies`` instead.
"""

from pulumi_policy import EnforcementLevel, PolicyPack

from policies import PACK_NAME, POLICIES

PolicyPack(
    name=PACK_NAME,
    # Every policy sets its own level; this only applies to policies added without one.
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=POLICIES,
    description="Guardrails for multislice Ray Train on GKE TPUs: DCN networks, TPU node pools, "
    "checkpoint buckets, storage IAM, the Ray dashboard, Ray token auth and NetworkPolicy, and deletion protection.",
)
