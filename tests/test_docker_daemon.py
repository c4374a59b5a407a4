"""The build daemon found as pulumi-docker-build 0.0.22's Docker client finds it (gke_ray_tpu.components.docker_daemon),
asked over the network as Docker's client asks it: a TLS daemon on 127.0.0.1 that wants the client's certificate
(as ``dockerd --tlsverify`` does), Docker context directories laid out as ``docker context create`` writes them, an
SSH server's banner; and the stack asks only when its update will build.

Held once to Docker's own client (docker 28.2.2 on this machine, 2026-12-06): with DOCKER_TLS_VERIFY and these
certificates, and with these context directories, it reached this daemon over TLS and asked for its ping and version;
`docker context ls` listed the context as current at its address; with the other CA it refused the certificate; in
plain HTTP it printed this daemon's answer as dockerd's ("Client sent an HTTP request to an HTTPS server.")."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gke_ray_tpu.components import docker_daemon
from gke_ray_tpu.components.docker_daemon import NoBuildDaemon, check_build_daemon, context_id, problem, resolve
from gke_ray_tpu.stack.mock_engine import MockGke, OfflineRun, run_offline
from tests.conftest import with_keys

PING_OK = b"HTTP/1.1 200 OK\r\nApi-Version: 1.50\r\nContent-Length: 2\r\n\r\nOK"
PLAIN_TO_TLS = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
"""What Go's net/http server (dockerd's) answers a plain-HTTP request on a TLS port (``server.go``: ``serve``)."""


# -- certificates and servers ----------------------------------------------------------------------------------------


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool = False, ip: str | None = None,
          client: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ip:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), False)
    if not ca:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH if client else x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert: x509.Certificate, key=None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        (directory / f"{name.replace('cert', 'key')}.pem").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA, the daemon's certificate for 127.0.0.1, and a client certificate, as ``dockerd --tlsverify`` and the
    client's DOCKER_CERT_PATH hold them (``ca.pem``, ``cert.pem``, ``key.pem``); and a CA that signed nothing here."""
    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test docker CA", ca_key, _name("test docker CA"), ca_key, ca=True)
    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    _write(root / "server", "ca", ca)
    _write(root / "server", "cert", _cert("dockerd", server_key, ca.subject, ca_key, ip="127.0.0.1"), server_key)
    _write(root / "client", "ca", ca)
    _write(root / "client", "cert", _cert("client", client_key, ca.subject, ca_key, client=True), client_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    _write(root / "other", "ca", _cert("another CA", other_key, _name("another CA"), other_key, ca=True))
    (root / "client-without-cert").mkdir()
    (root / "client-without-cert" / "ca.pem").write_bytes((root / "client" / "ca.pem").read_bytes())
    return {name: root / name for name in ("server", "client", "other", "client-without-cert")}


class Daemon:
    """A daemon on 127.0.0.1 that answers Docker's ping: over TLS requiring a client certificate signed by its CA
    (answering plain HTTP as Go's server does), or over plain HTTP; or one that accepts and never answers."""

    def __init__(self, tls_dir: Path | None = None, silent: bool = False):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[bytes] = []
        self.silent = silent
        self.tls = None
        if tls_dir is not None:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(tls_dir / "cert.pem", tls_dir / "key.pem")
            self.tls.load_verify_locations(tls_dir / "ca.pem")
            self.tls.verify_mode = ssl.CERT_REQUIRED
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            connection.settimeout(10)
            try:
                if self.silent:  # reads the ping, then holds the connection open until the client gives up
                    while connection.recv(1024):
                        pass
                    return
                if self.tls is not None:
                    if connection.recv(1, socket.MSG_PEEK) != b"\x16":  # not a TLS handshake
                        connection.recv(1024)
                        connection.sendall(PLAIN_TO_TLS)
                        return
                    connection = self.tls.wrap_socket(connection, server_side=True)
                self.requests.append(connection.recv(1024).split(b"\r\n", 1)[0])
                connection.sendall(PING_OK)
            except (OSError, ssl.SSLError):
                return

    @property
    def host(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def tls_daemon(pki):
    daemon = Daemon(pki["server"])
    yield daemon
    daemon.close()


@pytest.fixture
def plain_daemon():
    daemon = Daemon()
    yield daemon
    daemon.close()


def docker_context(config: Path, name: str, host: str, tls_dir: Path | None = None, current: bool = True,
                   skip_verify: bool = False) -> Path:
    """A context as ``docker context create <name> --docker host=...,ca=,cert=,key=`` and ``docker context use``
    write it (docker/cli 28: ``contexts/meta/<sha256>/meta.json``, ``contexts/tls/<sha256>/docker/*.pem``)."""
    meta = config / "contexts" / "meta" / context_id(name)
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps(
        {"Name": name, "Metadata": {}, "Endpoints": {"docker": {"Host": host, "SkipTLSVerify": skip_verify}}}))
    if tls_dir is not None:
        tls = config / "contexts" / "tls" / context_id(name) / "docker"
        tls.mkdir(parents=True)
        for file in ("ca.pem", "cert.pem", "key.pem"):
            if (tls_dir / file).exists():
                (tls / file).write_bytes((tls_dir / file).read_bytes())
    if current:
        (config / "config.json").write_text(json.dumps({"auths": {}, "currentContext": name}))
    return config


@pytest.fixture
def home(tmp_path, monkeypatch) -> dict[str, str]:
    """An environment with a home of its own and Docker's default socket where nothing serves it."""
    monkeypatch.setattr(docker_daemon, "DEFAULT_HOST", f"unix://{tmp_path}/no-docker.sock")
    (tmp_path / "home").mkdir()
    return {"HOME": str(tmp_path / "home")}


# -- where the provider builds ---------------------------------------------------------------------------------------


def test_the_address_is_chosen_in_the_providers_order(home, tmp_path):
    config = docker_context(Path(home["HOME"]) / ".docker", "colima", "unix:///home/me/.colima/docker.sock")
    docker_context(config, "remote", "tcp://10.0.0.5:2376", current=False)
    assert resolve(None, home) == docker_daemon.Endpoint(
        "unix:///home/me/.colima/docker.sock", f"currentContext in {config / 'config.json'}", "colima")
    assert resolve(None, {**home, "DOCKER_CONTEXT": "remote"}).host == "tcp://10.0.0.5:2376"
    assert resolve(None, {**home, "DOCKER_CONTEXT": "remote", "DOCKER_HOST": "tcp://b:2375"}).setting == "DOCKER_HOST"
    assert resolve("tcp://a:2375", {**home, "DOCKER_HOST": "tcp://b:2375"}) == docker_daemon.Endpoint(
        "tcp://a:2375", "docker-build:host", "tcp://a:2375")
    # DOCKER_CONFIG moves the whole client config, contexts included.
    assert resolve(None, {**home, "DOCKER_CONFIG": str(tmp_path)}) == docker_daemon.Endpoint(
        docker_daemon.DEFAULT_HOST, None)
    assert resolve(None, {**home, "DOCKER_CONTEXT": "default"}).host == docker_daemon.DEFAULT_HOST


def test_a_tls_context_on_127_0_0_1_is_asked_with_its_own_certificates(home, pki, tls_daemon):
    docker_context(Path(home["HOME"]) / ".docker", "tpu-build", tls_daemon.host, pki["client"])
    endpoint = check_build_daemon(None, "or set buildImage false", home)
    assert endpoint.host == tls_daemon.host and tls_daemon.requests == [b"GET /_ping HTTP/1.1"]


def test_a_context_whose_ca_did_not_sign_the_daemon_fails_in_one_line_naming_the_context(home, pki, tls_daemon):
    config = docker_context(Path(home["HOME"]) / ".docker", "tpu-build", tls_daemon.host, pki["other"])
    with pytest.raises(NoBuildDaemon) as raised:
        check_build_daemon(None, "or set buildImage false", {**home, "DOCKER_CONTEXT": "tpu-build"})
    message = str(raised.value)
    assert "\n" not in message and raised.value.setting == "DOCKER_CONTEXT"
    assert f"DOCKER_CONTEXT=tpu-build ({tls_daemon.host})" in message and "TLS handshake" in message
    assert "change DOCKER_CONTEXT" in message and str(config) not in message
    assert tls_daemon.requests == []


def test_a_context_that_skips_verification_still_offers_its_certificate(home, pki, tls_daemon):
    docker_context(Path(home["HOME"]) / ".docker", "insecure", tls_daemon.host, pki["client"], skip_verify=True)
    assert problem(resolve(None, home), home) is None


def test_a_named_context_that_does_not_exist_is_one_line_naming_where_it_is_set(home):
    with pytest.raises(NoBuildDaemon, match=r"^DOCKER_CONTEXT=gone names no Docker context .*meta\.json does not exist"):
        check_build_daemon(None, "", {**home, "DOCKER_CONTEXT": "gone"})
    (Path(home["HOME"]) / ".docker").mkdir()
    (Path(home["HOME"]) / ".docker" / "config.json").write_text('{"currentContext": "gone"}')
    with pytest.raises(NoBuildDaemon) as raised:
        check_build_daemon(None, "", home)
    assert raised.value.setting.startswith("currentContext in ") and raised.value.setting.endswith("config.json")


def test_docker_tls_verify_is_honoured_and_the_provider_gap_named(home, pki, tls_daemon):
    env = {**home, "DOCKER_HOST": tls_daemon.host, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(pki["client"])}
    with pytest.raises(NoBuildDaemon) as raised:
        check_build_daemon(None, "or set buildImage false", env)
    message = str(raised.value)
    # The daemon answered the ping over TLS with the client's certificates, as the docker command would ask it ...
    assert tls_daemon.requests == [b"GET /_ping HTTP/1.1"]
    # ... but the provider would not: the line says so and what to set instead, under the setting the user made.
    assert "\n" not in message and raised.value.setting == "DOCKER_HOST"
    assert "does not read for an address given as DOCKER_HOST" in message and "DOCKER_CONTEXT=tpu-build" in message
    assert "invalid" not in message


def test_a_tls_port_asked_in_plain_http_says_so(home, tls_daemon):
    message = problem(resolve(tls_daemon.host, home), home)
    assert "answered 'HTTP/1.0 400 Bad Request' to Docker's ping (a TLS port answering plain HTTP?)" in message


def test_without_the_client_certificate_the_handshake_fails(home, pki, tls_daemon):
    env = {**home, "DOCKER_HOST": tls_daemon.host, "DOCKER_TLS_VERIFY": "1",
           "DOCKER_CERT_PATH": str(pki["client-without-cert"])}
    assert "asked over TLS as DOCKER_TLS_VERIFY says" in problem(resolve(None, env), env)


def test_a_plain_context_daemon_answers(home, plain_daemon):
    docker_context(Path(home["HOME"]) / ".docker", "lan", plain_daemon.host)
    assert problem(resolve(None, home), home) is None and plain_daemon.requests == [b"GET /_ping HTTP/1.1"]


def test_nothing_set_and_no_daemon_claims_no_key_is_invalid(home):
    with pytest.raises(NoBuildDaemon) as raised:
        check_build_daemon(None, "or set gke-ray-tpu:buildImage false", home)
    message = str(raised.value)
    assert "\n" not in message and "invalid" not in message
    assert "Docker's default socket unix://" in message and "(no docker-build:host, DOCKER_HOST" in message
    assert "start Docker there, or point docker-build:host, DOCKER_HOST or a Docker context" in message


def test_a_silent_daemon_is_a_bounded_wait(home):
    silent = Daemon(silent=True)
    try:
        assert "timed out" in problem(resolve(silent.host, home), home, timeout_s=0.2)
    finally:
        silent.close()


def test_ssh_is_checked_as_far_as_it_can_be_without_logging_in(monkeypatch):
    banner = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        connection, _ = banner.accept()
        with connection:
            connection.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    threading.Thread(target=answer, daemon=True).start()
    port = banner.getsockname()[1]
    try:
        assert docker_daemon.ssh_problem(f"ssh://builder@127.0.0.1:{port}", ssh="/usr/bin/ssh") is None
    finally:
        banner.close()
    assert "no SSH server answers at 127.0.0.1:" in docker_daemon.ssh_problem(f"ssh://builder@127.0.0.1:{port}",
                                                                               ssh="/usr/bin/ssh")
    monkeypatch.setattr(docker_daemon.shutil, "which", lambda command: None)
    assert "through the ssh command, and none is on PATH" in docker_daemon.ssh_problem("ssh://builder@127.0.0.1")


# -- when the stack asks ---------------------------------------------------------------------------------------------


def test_a_preview_builds_nothing_and_asks_no_daemon(dev_config):
    run = run_offline(dev_config, preview=True, gke=MockGke(docker_daemon=False))
    assert run.of_type("docker-build:index:Image")


def test_an_update_without_a_daemon_stops_in_one_line_before_registering_anything(dev_config):
    run = OfflineRun()
    with pytest.raises(NoBuildDaemon) as raised:
        run_offline(dev_config, preview=False, run=run, gke=MockGke(docker_daemon=False))
    message = str(raised.value)
    assert "\n" not in message and raised.value.setting == "docker-build:host"
    assert "nothing answers at unix:///nonexistent/" in message and "gke-ray-tpu:buildImage false" in message
    assert run.resources == []


def test_an_update_that_does_not_build_asks_no_daemon(dev_config):
    run = run_offline(with_keys(dev_config, buildImage="false"), preview=False, gke=MockGke(docker_daemon=False))
    assert run.of_type("docker-build:index:Image") == []


PROGRAM = """
from gke_ray_tpu.components.worker_image import WorkerImage, WorkerImageArgs
WorkerImage("image", WorkerImageArgs(project="p", location="us-east5", build_on_preview={build_on_preview}))
"""


@pytest.mark.parametrize("build_on_preview", [True, False])
def test_the_component_asks_at_preview_only_when_it_builds_on_preview(tmp_path, build_on_preview):
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM.format(build_on_preview=build_on_preview))
    if build_on_preview:
        with pytest.raises(NoBuildDaemon):
            run_offline({}, program=program, project="team", gke=MockGke(docker_daemon=False))
    else:
        run_offline({}, program=program, project="team", gke=MockGke(docker_daemon=False))
