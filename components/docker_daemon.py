"""The Docker daemon that builds the TPU workers' image: found where pulumi-docker-build 0.0.22 finds it, then asked.

pulumi-docker-build 0.0.22 (``provider/internal/client.go``: ``newDockerCLI``) builds through an embedded Docker
CLI (docker/cli v29.5.3) initialised with ``flags.NewClientOptions()`` plus one host, its ``host`` config, whose
default is ``DOCKER_HOST`` (``provider/internal/provider.go``). The CLI then picks the endpoint as
``cli/command/cli.go: resolveContextName`` does:

1. ``docker-build:host``, else ``DOCKER_HOST``: that address, as Docker's default context;
2. else ``DOCKER_CONTEXT``, else ``currentContext`` of Docker's ``config.json`` (``$DOCKER_CONFIG``, default
   ``~/.docker``): that context's ``docker`` endpoint, read from ``contexts/meta/<sha256 of the name>/meta.json``,
   with its TLS files from ``contexts/tls/<sha256 of the name>/docker/{ca,cert,key}.pem``;
3. else Docker's default socket, ``unix:///var/run/docker.sock``.

``DOCKER_TLS_VERIFY``, ``DOCKER_TLS`` and ``DOCKER_CERT_PATH`` are read by the docker command's flag parsing
(``cli/flags/options.go: InstallFlags``), which the provider never runs: ``resolveDefaultDockerEndpoint`` gets no
TLS options, so for an address from (1) the provider speaks plain HTTP. A TLS daemon is reached through a context,
which carries its certificates. :func:`check_build_daemon` asks the daemon as the docker command would (with TLS
and the client's certificates where those variables say so) and stops, in one line naming the setting to change,
when the provider could not build there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional
from urllib.parse import urlparse

from gke_ray_tpu.core.exit_status import Unavailable

DEFAULT_HOST = "unix:///var/run/docker.sock"
"""Docker's default socket: where the client looks when nothing says otherwise."""
PROBE_TIMEOUT_S = 3.0
"""Each step of the probe (connect, TLS handshake, answer) waits at most this long."""
SSH_PORT = 22
HOST_KEY = "docker-build:host"
TLS_VARIABLES = ("DOCKER_TLS_VERIFY", "DOCKER_TLS")


class NoBuildDaemon(Unavailable):
    """No daemon pulumi-docker-build could build with answers; ``setting`` is what the user can change."""

    def __init__(self, setting: str, message: str):
        self.setting = setting
        super().__init__(message)


@dataclass(frozen=True)
class Endpoint:
    """The daemon's address and what chose it."""

    host: str
    setting: Optional[str]
    """What the user set that chose ``host`` (``docker-build:host``, ``DOCKER_HOST``, ``DOCKER_CONTEXT``, or
    ``currentContext in <config.json>``), or None for Docker's default socket."""
    value: Optional[str] = None
    """That setting's value (the address, or the context's name)."""
    context_tls: Optional[Path] = None
    """A context's TLS directory (its ``ca.pem``, ``cert.pem``, ``key.pem``), where it has one."""
    skip_tls_verify: bool = False

    def named(self) -> str:
        if self.setting is None:
            return f"Docker's default socket {self.host} (no docker-build:host, DOCKER_HOST, DOCKER_CONTEXT or current context is set)"
        if self.value == self.host:
            return f"{self.setting}={self.host}"
        return f"{self.setting}={self.value} ({self.host})"


def config_dir(env: Mapping[str, str]) -> Path:
    """Docker's client config directory: ``$DOCKER_CONFIG``, else ``~/.docker``."""
    return Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME") or Path.home()) / ".docker")


def context_id(name: str) -> str:
    """The directory a context is stored under: the sha256 of its name (docker/cli ``contextdirOf``)."""
    return hashlib.sha256(name.encode()).hexdigest()


def resolve(host_config: Optional[str], env: Mapping[str, str]) -> Endpoint:
    """Where pulumi-docker-build 0.0.22 builds: ``host_config`` is ``docker-build:host``; ``env`` the process's."""
    if host_config:
        return Endpoint(host_config, HOST_KEY, host_config)
    if env.get("DOCKER_HOST"):
        return Endpoint(env["DOCKER_HOST"], "DOCKER_HOST", env["DOCKER_HOST"])
    directory = config_dir(env)
    if env.get("DOCKER_CONTEXT"):
        setting, name = "DOCKER_CONTEXT", env["DOCKER_CONTEXT"]
    else:
        setting, name = f"currentContext in {directory / 'config.json'}", _current_context(directory)
    if not name or name == "default":
        return Endpoint(DEFAULT_HOST, None) if not name else Endpoint(DEFAULT_HOST, setting, name)
    meta_file = directory / "contexts" / "meta" / context_id(name) / "meta.json"
    try:
        endpoint = json.loads(meta_file.read_text())["Endpoints"]["docker"]
    except FileNotFoundError:
        raise NoBuildDaemon(setting, f"{setting}={name} names no Docker context ({meta_file} does not exist): "
                            f"`docker context ls` lists them") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise NoBuildDaemon(setting, f"{setting}={name}: its context file {meta_file} has no docker endpoint "
                            f"Docker can read ({type(error).__name__}: {error})") from None
    tls = directory / "contexts" / "tls" / context_id(name) / "docker"
    return Endpoint(endpoint.get("Host") or DEFAULT_HOST, setting, name, tls if tls.is_dir() else None,
                    bool(endpoint.get("SkipTLSVerify")))


def _current_context(directory: Path) -> Optional[str]:
    try:
        return json.loads((directory / "config.json").read_text()).get("currentContext") or None
    except (OSError, ValueError, AttributeError):
        return None  # the client then uses its default context too


def _env_tls(env: Mapping[str, str]) -> Optional[ssl.SSLContext]:
    """The TLS the docker command would use from ``DOCKER_TLS_VERIFY``/``DOCKER_TLS`` and ``DOCKER_CERT_PATH``."""
    verify = bool(env.get("DOCKER_TLS_VERIFY"))
    if not verify and not env.get("DOCKER_TLS"):
        return None
    return _tls_context(Path(env.get("DOCKER_CERT_PATH") or config_dir(env)), verify, "DOCKER_CERT_PATH")


def _tls_context(directory: Optional[Path], verify: bool, where: str) -> ssl.SSLContext:
    """TLS as Docker's client sets it up from a directory of ``ca.pem``, ``cert.pem``, ``key.pem``: the server checked
    against ``ca.pem`` (the system's roots without one) unless ``verify`` is off, the client's certificate offered."""
    ca, cert, key = (directory / name if directory else None for name in ("ca.pem", "cert.pem", "key.pem"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif ca is not None and ca.is_file():
            context.load_verify_locations(cafile=str(ca))
        else:
            context.load_default_certs()
        if cert is not None and key is not None and cert.is_file() and key.is_file():
            context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as error:
        raise _BadCertificates(f"the client certificates in {directory} ({where}) do not load: {error}") from None
    return context


class _BadCertificates(Exception):
    pass


def ping(host: str, tls: Optional[ssl.SSLContext] = None, timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Why no Docker daemon answers Docker's ``GET /_ping`` at a ``unix://`` or ``tcp://`` ``host``, or None when one
    does (over TLS with ``tls``)."""
    address = urlparse(host)
    try:
        if address.scheme == "unix":
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(timeout_s)
            connection.connect(address.path)
        else:
            connection = socket.create_connection((address.hostname, address.port or (2376 if tls else 2375)),
                                                  timeout=timeout_s)
            connection.settimeout(timeout_s)
            if tls is not None:
                connection = tls.wrap_socket(connection, server_hostname=address.hostname)
        with connection:
            connection.sendall(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
            status = connection.recv(256).split(b"\r\n", 1)[0]
    except ssl.SSLError as error:
        return f"the TLS handshake with {host} failed ({error.reason or error})"
    except OSError as error:
        return f"nothing answers at {host} ({error.strerror or error})"
    if not re.fullmatch(rb"HTTP/1\.[01] 200.*", status):
        answer = status.decode(errors="replace") or "nothing"
        hint = " (a TLS port answering plain HTTP?)" if re.match(rb"HTTP/1\.[01] 400", status) else ""
        return f"{host} answered {answer!r} to Docker's ping{hint}"
    return None


def ssh_problem(host: str, timeout_s: float = PROBE_TIMEOUT_S, ssh: Optional[str] = None) -> Optional[str]:
    """What can be checked of an ``ssh://`` daemon without logging in: the ``ssh`` command Docker runs is there, and
    an SSH server answers at the address (its banner). Whether the key is accepted and ``docker`` runs there is
    only known when the build connects."""
    if (ssh or shutil.which("ssh")) is None:
        return f"{host} is reached through the ssh command, and none is on PATH"
    address = urlparse(host)
    try:
        with socket.create_connection((address.hostname, address.port or SSH_PORT), timeout=timeout_s) as connection:
            connection.settimeout(timeout_s)
            banner = connection.recv(256)
    except OSError as error:
        return f"no SSH server answers at {address.hostname}:{address.port or SSH_PORT} ({error.strerror or error})"
    if not banner.startswith(b"SSH-"):
        return f"{address.hostname}:{address.port or SSH_PORT} answered {banner[:40]!r}, not an SSH server's banner"
    return None


def problem(endpoint: Endpoint, env: Mapping[str, str], timeout_s: float = PROBE_TIMEOUT_S) -> Optional[str]:
    """Why pulumi-docker-build could not build at ``endpoint``, or None."""
    scheme = urlparse(endpoint.host).scheme
    if scheme == "ssh":
        return ssh_problem(endpoint.host, timeout_s)
    if scheme not in ("unix", "tcp"):
        return None  # npipe:// and the like: left to the provider's own client
    try:
        if endpoint.context_tls is not None or endpoint.skip_tls_verify:
            tls = _tls_context(endpoint.context_tls, not endpoint.skip_tls_verify, f"context {endpoint.value}")
            return ping(endpoint.host, tls if scheme == "tcp" else None, timeout_s)
        env_tls = _env_tls(env) if scheme == "tcp" else None
    except _BadCertificates as error:
        return str(error)
    if env_tls is None:
        return ping(endpoint.host, None, timeout_s)
    over_tls = ping(endpoint.host, env_tls, timeout_s)
    variable = next(name for name in TLS_VARIABLES if env.get(name))
    if over_tls:
        return f"{over_tls}, asked over TLS as {variable} says"
    return (f"the daemon answers over TLS ({variable}), which pulumi-docker-build 0.0.22 does not read for an address "
            f"given as {endpoint.setting}: it would send plain HTTP. Give Docker a context with the certificates "
            f"(`docker context create tpu-build --docker host={endpoint.host},ca=...,cert=...,key=...`), then unset "
            f"DOCKER_HOST{' and docker-build:host' if endpoint.setting == HOST_KEY else ''} and set DOCKER_CONTEXT=tpu-build")


def check_build_daemon(host_config: Optional[str], instead: str, env: Optional[Mapping[str, str]] = None,
                       timeout_s: float = PROBE_TIMEOUT_S) -> Endpoint:
    """The endpoint the image is built at, after asking it; :class:`NoBuildDaemon` (one line, naming the setting
    that chose the address and what to change) when the build could not run there."""
    env = os.environ if env is None else env
    endpoint = resolve(host_config, env)
    found = problem(endpoint, env, timeout_s)
    if found:
        change = (f"start Docker there, or point docker-build:host, DOCKER_HOST or a Docker context at a daemon"
                  if endpoint.setting is None else f"change {endpoint.setting}")
        raise NoBuildDaemon(endpoint.setting or "DOCKER_HOST",
                            f"no Docker daemon to build the TPU workers' image at {endpoint.named()}: {found}; "
                            f"{change}, {instead}")
    return endpoint
