"""The range of an integer setting, declared once beside the setting and checked through it everywhere.

A setting such as the slices of a stack reaches the code through a config key
(``gke-ray-tpu:numSlices``), a component argument (``RayTpuClusterArgs.num_slices``),
a stack output the submit command reads (``numSlices``) and a flag (``--slices``).
The module that owns the setting declares its :class:`Bounds`; the config model
turns them into its field's limits (so its errors word them the same way), and
the components, the stack outputs and the command line call :meth:`Bounds.check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gke_ray_tpu.core.errors import ConfigError


@dataclass(frozen=True)
class Bounds:
    """``low`` to ``high`` inclusive (``high`` None: no upper bound)."""

    low: int
    high: Optional[int] = None
    low_name: str = ""
    """The setting the lower bound comes from, when it is one (``elasticMinSlices``): named in the error."""
    high_name: str = ""
    """Likewise for the upper bound (``numSlices``)."""

    def within(self, low: Optional[int] = None, high: Optional[int] = None, *, low_name: str = "",
               high_name: str = "") -> "Bounds":
        """These bounds narrowed by other settings' values (an elastic minimum is at most the slices)."""
        narrowed_low = self.low if low is None else max(low, self.low)
        narrowed_high = self.high if high is None else (high if self.high is None else min(high, self.high))
        return Bounds(narrowed_low, narrowed_high, low_name if low is not None else self.low_name,
                      high_name if high is not None else self.high_name)

    def words(self) -> str:
        low = f"{self.low_name} ({self.low})" if self.low_name else str(self.low)
        if self.high is None:
            return f"an integer >= {low}"
        high = f"{self.high_name} ({self.high})" if self.high_name else str(self.high)
        return f"an integer between {low} and {high}"

    def check(self, value: object, key: str, why: str = "") -> int:
        """``value`` as an int if it is a whole number in range, else a ConfigError naming ``key`` (``why``: the
        reason for the range, after it).

        A component hosted for other languages gets JSON numbers (3.0), so a whole float counts; a bool does not.
        """
        expected = self.words() + (f": {why}" if why else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ConfigError(key, value, expected)
        if value < self.low or (self.high is not None and value > self.high):
            raise ConfigError(key, value, expected)
        return int(value)
