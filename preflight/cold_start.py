"""What a TPU host pulls and installs before a run's first step, with and without the stack's image, and what
the chips cost meanwhile (an ESTIMATE: every figure below is a named assumption with its source).

Every host of every slice starts its Ray pod at once and the job waits for the slowest, so the run's chips are
billed for the longest host start. Without the stack's image a host pulls Ray's image, then Ray's runtime env
installs what that image lacks of the workers' lock (``core/worker_env``), from PyPI; with it, the
host pulls Ray's image with the lock in it and installs nothing, and GKE's image streaming (Artifact
Registry only) starts the container before the pull completes, except on the image's first pull.
"""

from __future__ import annotations

from dataclasses import dataclass

from gke_ray_tpu.core import worker_env
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.prices import chip_price
from gke_ray_tpu.core.tpu_catalogue import SliceShape

GB = 1e9

PULL_BYTES_PER_S = 5.4e9 / 191
"""An image pull on GKE without image streaming, 28 MB/s: "Nvidia Triton Server (5.4GB container image) end-to-end
startup time [...] from 191s to 30s" with streaming (GoogleCloudPlatform/ai-on-gke, best-practices/startup-latency.md).
The 191 s include the server's own start, so this understates the pull rate; no TPU-host figure was found."""
STREAMED_START_S = 30.0
"""The same image's start with image streaming, for an image streamed before (same source)."""
RAY_IMAGE_BYTES = 0.87e9
"""``rayproject/ray``'s CPU image, compressed (ray-project/ray#52375, an earlier 2.x release; 2.2 GB unpacked): the
pull of Ray's image without the lock. Not measured for 2.60.0 here (no registry reachable)."""
LOCK_INSTALL_S = 151.0
"""The whole lock installed from an empty cache into a fresh Python 3.12, measured here (bench/bench_lock_install.py,
2 cores, 2026-12-04): the most a host installs at start. A TPU host has more cores and another path to PyPI."""
LOCK_INSTALL_PACKAGES = 254
"""How many wheels that measurement installed (the lock as it was then)."""


@dataclass(frozen=True)
class HostStart:
    """One way a TPU host gets its Python environment before the first step."""

    label: str
    pull_bytes: float
    """The image pulled (compressed)."""
    install_bytes: float
    """Wheels downloaded and installed at start (0 with the stack's image)."""
    install_s: float

    @property
    def seconds(self) -> float:
        return self.pull_bytes / PULL_BYTES_PER_S + self.install_s


def host_starts(lock_bytes: float, lock_packages: int) -> tuple[HostStart, HostStart]:
    """(with the stack's image, without it) for a lock of ``lock_packages`` wheels of ``lock_bytes`` bytes.

    Upper bounds where Ray's image already has part of the lock: the image's lock layer and the install both
    count the whole lock. The install scales the measured seconds by the lock's size in packages.
    """
    install_s = LOCK_INSTALL_S * lock_packages / LOCK_INSTALL_PACKAGES
    return (
        HostStart("with the stack's image", RAY_IMAGE_BYTES + lock_bytes, 0.0, 0.0),
        HostStart("without it (rayImage as it is)", RAY_IMAGE_BYTES, lock_bytes, install_s),
    )


def format_cold_start(
    starts: tuple[HostStart, HostStart], built: bool, hosts: int, chips: int, usd_per_chip_hour: float | None, when: str
) -> str:
    """The preview's cold-start lines: each way's bytes and seconds per host, and the chips' cost while they wait."""
    lines = [f"Cold start of each TPU host before the first step ({hosts} hosts, {chips} chips; {when}):"]
    for start, chosen in zip(starts, (built, not built)):
        cost = "" if usd_per_chip_hour is None else f", ${chips * usd_per_chip_hour * start.seconds / 3600:,.2f} of idle chips"
        install = ("installs nothing" if not start.install_bytes else
                   f"then installs up to {start.install_bytes / GB:.2f} GB of wheels from PyPI (~{start.install_s:.0f} s)")
        lines.append(f"  {'*' if chosen else ' '} {start.label}: pulls ~{start.pull_bytes / GB:.2f} GB "
                     f"(~{start.pull_bytes / PULL_BYTES_PER_S:.0f} s), {install}: ~{start.seconds:.0f} s{cost}")
    lines.append(
        f"    assumptions: pulls at {PULL_BYTES_PER_S / 1e6:.0f} MB/s (ai-on-gke startup-latency.md: 5.4 GB in 191 s "
        f"on GKE); with image streaming an image streamed before starts in ~{STREAMED_START_S:.0f} s there, its "
        f"first pull gets no gain; Ray's image {RAY_IMAGE_BYTES / GB:.2f} GB (ray-project/ray#52375); the install's "
        "seconds measured on this repository's 2-core machine (bench/bench_lock_install.py), not on a TPU host"
    )
    return "\n".join(lines)


def cold_start(shape: SliceShape, num_slices: int, region: str, *, spot: bool, built: bool, scale_to_zero: bool) -> str:
    """The cold start of ``num_slices`` slices of ``shape`` with the workers' lock as it is: every host, with the
    stack's image (``built``) or without, and the chips' cost meanwhile where their price in ``region`` is known."""
    try:
        price = chip_price(shape.generation.name, region).usd_per_chip_hour(spot)
    except ConfigError:
        price = None  # a generation or region without a grounded price: bytes and seconds only
    when = ("every run, on the new nodes of its slices" if scale_to_zero
            else "the pull once per node, the install at each Ray pod start on the held slices")
    return format_cold_start(
        host_starts(worker_env.wheel_bytes(), len(worker_env.packages())),
        built, shape.hosts * num_slices, shape.chips * num_slices, price, when,
    )
