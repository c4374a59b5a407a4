"""Transient failures of the Ray Jobs API (and of the Kubernetes API), retried with exponential backoff.

The submit command talks to the dashboard through a Kubernetes port-forward
(or straight to a local head). A refused or reset connection, a timeout, or a
5xx from the dashboard (a head pod restarting, a proxy in between) is worth
another try; anything else (404, 400, a bad request) is an answer and is not
retried. After the last retry the failure is one ``ClusterError`` line.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from gke_ray_tpu.training.driver.errors import ClusterError

T = TypeVar("T")

_HTTP_5XX = re.compile(r"status code 5\d\d\b")


@dataclass(frozen=True)
class Backoff:
    retries: int = 5
    first_s: float = 1.0
    cap_s: float = 16.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, retry: int) -> float:
        """Seconds before retry ``retry`` (0-based): 1, 2, 4, 8, 16, 16, ..."""
        return min(self.first_s * 2**retry, self.cap_s)


DEFAULT = Backoff()


def transient(e: BaseException) -> bool:
    """Whether ``e`` is a failure to reach the dashboard rather than its answer."""
    import aiohttp
    import requests

    if isinstance(e, (ConnectionError, TimeoutError, requests.ConnectionError, requests.Timeout,
                      aiohttp.ClientConnectionError)):
        return True
    if isinstance(e, requests.HTTPError):
        return e.response is not None and e.response.status_code >= 500
    if isinstance(e, aiohttp.WSServerHandshakeError):
        return e.status >= 500
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError as TransportError

    if isinstance(e, ApiException):  # the Kubernetes API (a run's RayJob, pods, events)
        return e.status is not None and (e.status >= 500 or e.status == 429)
    if isinstance(e, TransportError):  # the API server not reached (urllib3 under the Kubernetes client)
        return True
    if isinstance(e, RuntimeError):
        # JobSubmissionClient turns HTTP errors into RuntimeError("Request failed with status
        # code 503: ..."), and a dropped log stream into "WebSocket connection closed unexpectedly".
        return bool(_HTTP_5XX.search(str(e))) or "closed unexpectedly" in str(e)
    return False


def reason(e: BaseException) -> str:
    """The first line of ``e``, or its type when it has no message."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def unreached(e: BaseException) -> bool:
    """Whether ``e`` is a failure to reach the Kubernetes API server at all (refused, reset, timed out, no route),
    as urllib3 raises it under the Kubernetes client, rather than an answer of it."""
    from urllib3.exceptions import HTTPError as TransportError

    return isinstance(e, (TransportError, ConnectionError, TimeoutError))


def call(fn: Callable[[], T], what: str, log: Callable[[str], None], backoff: Backoff | None = None,
         retryable: Callable[[BaseException], bool] = transient) -> T:
    """``fn()``, retried on transient errors (``retryable``) with a progress line per retry.

    A non-transient error propagates unchanged (the caller knows what it means);
    a transient one that outlasts the retries becomes a ClusterError naming ``what``.
    """
    backoff = backoff or DEFAULT
    retry, waited = 0, 0.0
    while True:
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - retryable() decides
            if not retryable(e):
                raise
            if retry == backoff.retries:
                raise ClusterError(
                    f"{what}: {reason(e)} (still failing after {retry} retries over {waited:.0f} s)"
                ) from None
            delay = backoff.delay(retry)
            retry += 1
            log(f"{what}: {reason(e)}; retry {retry}/{backoff.retries} in {delay:.0f} s")
            backoff.sleep(delay)
            waited += delay
