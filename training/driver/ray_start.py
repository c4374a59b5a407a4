"""``python -m gke_ray_tpu.training.driver.ray_start start ...``: Ray's own command line, without ``ray serve``.

Ray's CLI module adds Serve's command group to its commands when it is imported, and leaves it out when that import
fails (the end of ``ray/scripts/scripts.py``). Serve's group imports Ray Serve and pandas: 0.9-1.5 of the 1.8-2.4
CPU-seconds that importing the CLI takes on this 2-core machine, which every local head and node paid at its start
(about 20 in a test session). The commands a local head runs (``ray start``) are Ray's, unchanged.
"""

from __future__ import annotations

import sys


def main() -> None:
    # A None in sys.modules makes that import raise ImportError (importlib's documented behaviour).
    sys.modules["ray.serve.scripts"] = None
    from ray.scripts.scripts import main as ray_cli

    sys.argv[0] = "ray"
    ray_cli()


if __name__ == "__main__":
    main()
