"""How a stack obtains its TPU slices: GKE's four capacity modes, and the rules between them.

* ``on-demand``: the tutorial's. Billed per second while a node exists; never
  preempted, but GKE may not find the capacity (the node pool then waits and
  fails).
* ``spot``: Spot VMs, cheaper, preemptible at any time; cannot consume a reservation.
* ``flex-start``: GKE's Dynamic Workload Scheduler. Nodes are created only when
  pods need them, run at most 7 days (``max_run_duration``), are never Spot and
  use no reservation; GKE wants auto-repair off and an autoscaled pool from 0.
* ``reservation``: consume one named reservation. A reservation is billed
  whether or not nodes use it, so scaling to zero saves nothing there.

Each mode is a :class:`CapacityMode` with what follows from it (is it Spot, do
its slices scale to zero unless told otherwise, which node label GKE puts on its
nodes, what its list price means), so every layer reads those facts off one typed
value. Pure rules, no Pulumi: the node pool component and the stack's config both
call :func:`check_capacity`, each naming its own keys. Sources: GKE's "About
flex-start" and "Consume reserved zonal resources" pages, xpk's ``--flex``
node-pool flags and Cluster Toolkit's DWS blueprints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from gke_ray_tpu.core.bounds import Bounds
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.naming import COMPUTE_NAME, PROJECT_ID
from gke_ray_tpu.core.tpu_catalogue import GENERATIONS, TpuGeneration


@dataclass(frozen=True)
class CapacityMode:
    """One way GKE obtains TPU VMs, and what follows from it."""

    name: str
    spot: bool = False
    """Spot VMs: preemptible at any time, billed at the Spot rate."""
    scales_to_zero_by_default: bool = False
    """Whether the slices scale to zero unless the stack says otherwise (flex-start: always)."""
    node_label: Optional[str] = None
    """The label GKE puts on nodes of this mode: the worker pods select it, so that a cluster with other pools
    of the same TPU shape cannot place them on capacity billed another way."""
    billed_at_list_price: bool = True
    """Whether a chip-hour costs the list price (on-demand's, or Spot's); flex-start is discounted and a
    reservation is billed whether used or not, so for them the list price is an upper bound."""

    def scale_to_zero(self, asked: Optional[bool]) -> bool:
        """Whether the slices scale to zero: as ``asked``, else by default for the mode.

        Flex-start pools exist only from 0; the other modes keep their slices unless asked. A held on-demand
        slice is capacity that may not come back once released, and a reservation is paid for either way, so
        holding is their default; scaling to zero trades that for a cold start of minutes at the next run.
        """
        return bool(asked) if asked is not None else self.scales_to_zero_by_default

    @property
    def price_basis(self) -> str:
        """What a chip-hour's list price is for this mode, in words."""
        basis = "Spot" if self.spot else "on-demand"
        return f"{basis} list price" + ("" if self.billed_at_list_price else f" (a {self.name} stack: an upper bound)")


CAPACITY = {mode.name: mode for mode in (
    CapacityMode("on-demand"),
    CapacityMode("spot", spot=True, node_label="cloud.google.com/gke-spot"),
    CapacityMode("flex-start", scales_to_zero_by_default=True, node_label="cloud.google.com/gke-flex-start",
                 billed_at_list_price=False),
    CapacityMode("reservation", billed_at_list_price=False),
)}
CAPACITY_MODES = tuple(CAPACITY)
DEFAULT_CAPACITY = "on-demand"
MAX_RUN_DURATION_S = 7 * 24 * 3600
"""GKE stops a flex-start node after 7 days at most; ``max_run_duration`` may only shorten that."""
MAX_RUN_DURATION = Bounds(1, MAX_RUN_DURATION_S)
"""``maxRunDuration`` (``max_run_duration_s``): seconds after which GKE stops a flex-start node."""
FLEX_START_GENERATIONS = tuple(name for name, generation in GENERATIONS.items() if generation.flex_start)

_SHARED_RESERVATION = re.compile(r"projects/([^/]+)/reservations/([^/]+)")

Keys = Callable[[str], str]
"""Maps an argument name (``capacity``, ``reservation``, ``scale_to_zero``, ``max_run_duration_s``)
to the key the user sets, so one rule serves the component and the stack's config."""


def capacity_mode(mode: object, key: str) -> CapacityMode:
    """The mode named ``mode``, or a ConfigError naming ``key``."""
    if mode not in CAPACITY:
        raise ConfigError(key, mode, f"one of {', '.join(CAPACITY_MODES)}")
    return CAPACITY[mode]  # type: ignore[index]


def check_reservation(reservation: object, key: str) -> None:
    """A reservation name, or ``projects/<project>/reservations/<name>`` for one shared from another project."""
    name = reservation
    if isinstance(reservation, str) and (shared := _SHARED_RESERVATION.fullmatch(reservation)):
        if not PROJECT_ID.matches(shared.group(1)):
            raise ConfigError(key, reservation, f"a project of the shared reservation that is {PROJECT_ID.what}")
        name = shared.group(2)
    if not COMPUTE_NAME.matches(name):
        raise ConfigError(
            key, reservation, f"a reservation name ({COMPUTE_NAME.description}) or projects/<project>/reservations/<name>"
        )


def check_capacity(
    mode: object,
    reservation: Optional[str],
    scale_to_zero: bool,
    max_run_duration_s: Optional[int],
    generation: TpuGeneration,
    key: Keys,
) -> None:
    """Every combination GKE refuses, as one ConfigError naming the key to change."""
    capacity_mode(mode, key("capacity"))
    if mode == "reservation":
        if not reservation:
            raise ConfigError(key("reservation"), reservation, "a reservation's name: capacity reservation consumes it")
        check_reservation(reservation, key("reservation"))
    elif reservation:
        raise ConfigError(
            key("reservation"), reservation,
            f"unset, or capacity reservation: only that mode consumes a named reservation (capacity is {mode})",
        )
    if mode == "flex-start":
        if not generation.flex_start:
            raise ConfigError(
                key("capacity"), mode,
                f"on-demand, spot or reservation: GKE offers flex-start for {', '.join(FLEX_START_GENERATIONS)}, "
                f"not {generation.name}",
            )
        if not scale_to_zero:
            raise ConfigError(
                key("scale_to_zero"), scale_to_zero,
                "true (or unset): flex-start nodes exist only while pods ask for them, so the pool autoscales from 0",
            )
    if max_run_duration_s is not None:
        if mode != "flex-start":
            raise ConfigError(
                key("max_run_duration_s"), max_run_duration_s, f"unset: it bounds flex-start nodes only (capacity is {mode})"
            )
        MAX_RUN_DURATION.check(max_run_duration_s, key("max_run_duration_s"), "GKE's 7-day limit of a flex-start node")


def check_autopilot_capacity(mode: str, key: str) -> None:
    """On Autopilot the ComputeClass provisions the slices; it is written here for on-demand and Spot only."""
    if mode in ("flex-start", "reservation"):
        raise ConfigError(
            key, mode,
            "on-demand or spot on Autopilot: this stack's ComputeClass asks for those two; flex-start and "
            "reservations are built for Standard clusters (clusterMode standard)",
        )
