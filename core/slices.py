"""How many TPU slices: a stack's, and the fewest an elastic run trains on.

Each is one setting from the config key to the stack output: ``numSlices``
(``num_slices``), the stack's slices, one node pool and one worker-group replica
each; ``elasticMinSlices`` (``elastic_min_slices``), the fewest slices an elastic
run of the stack keeps training on; and a run's own ``minSlices`` (``min_slices``),
within those two. The bounds are here, and every layer checks through them.
"""

from __future__ import annotations

from typing import Optional

from gke_ray_tpu.core.bounds import Bounds

NUM_SLICES = Bounds(1, 64)
"""A stack's slices (``numSlices``)."""
DEFAULT_NUM_SLICES = 2
"""The tutorial's two slices."""
MIN_SLICES = Bounds(1, NUM_SLICES.high)
"""The fewest slices an elastic run trains on: at least one, at most the slices (:func:`elastic_min_slices`)."""


def elastic_min_slices(value: Optional[int], num_slices: int, key: str, num_slices_name: str = "") -> int:
    """A stack's ``elasticMinSlices``: 1 to its slices; unset, all of them (a static stack)."""
    bounds = MIN_SLICES.within(high=num_slices, high_name=num_slices_name)
    return bounds.check(num_slices if value is None else value, key)


def run_min_slices(value: Optional[int], elastic_min: int, num_slices: int, key: str) -> int:
    """An elastic run's ``minSlices`` on a stack: between the stack's ``elasticMinSlices`` and its ``numSlices``
    (the cluster keeps no fewer slices); unset, the stack's ``elasticMinSlices``."""
    bounds = MIN_SLICES.within(elastic_min, num_slices, low_name="elasticMinSlices", high_name="numSlices")
    return bounds.check(elastic_min if value is None else value, key, "the RayCluster keeps no fewer slices")
