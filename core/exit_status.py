"""The exit statuses every command of the project shares, and the one place they are decided.

* 0: done (the job succeeded, the run fits, the report was written).
* 1: the answer is no (the job failed or was stopped, the run does not fit).
* 2: bad input: a flag, a config key, the stack's outputs (:class:`~gke_ray_tpu.core.errors.ConfigError`).
* 3: what the command needs could not be reached or used: the cluster, its APIs or its token, or a tool
  such as XLA's compiler for the compile check (:class:`Unavailable`).
* 130: interrupted (Ctrl-C).

Each failure is one line on stderr, never a traceback: :func:`run_command`.
"""

from __future__ import annotations

import sys
from typing import Callable

from gke_ray_tpu.core.errors import ConfigError

OK, NO, BAD_INPUT, UNAVAILABLE, INTERRUPTED = 0, 1, 2, 3, 130


class Unavailable(RuntimeError):
    """Something the command needs could not be reached or used; the message is one line a user can act on."""


def run_command(prog: str, body: Callable[[], int], say: Callable[[str], None] | None = None) -> int:
    """``body()``'s status, or the status of the error it raised after one line ``<prog>: error: ...``."""
    say = say or (lambda line: print(line, file=sys.stderr))
    try:
        return body()
    except ConfigError as error:
        say(f"{prog}: error: {error}")
        return BAD_INPUT
    except Unavailable as error:
        say(f"{prog}: error: {error}")
        return UNAVAILABLE
    except KeyboardInterrupt:
        return INTERRUPTED
