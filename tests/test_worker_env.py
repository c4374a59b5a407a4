"""The TPU workers' lock (core/worker_env): the same JAX, libtpu, MaxText, Orbax and Ray as the compile
check and the local run, complete, wheels for the pods' platform; and install.py, the image's build step, run here
into a fresh virtual environment on a lock of wheels made here (no network: the real lock is installed by
bench/bench_lock_install.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from gke_ray_tpu.core import worker_env
from gke_ray_tpu.core.worker_env.install import read_lock
from gke_ray_tpu.training.worker import trainer
from tests.conftest import REPO_ROOT

KEY = ("jax", "jaxlib", "libtpu", "maxtext", "orbax-checkpoint", "ray")
NOT_REQUIREMENTS_TXTS = {"sympy"}
"""requirements.txt's sympy 1.14.0 caps mpmath below 1.4, which maxtext[tpu] 0.2.5 asks for (bin/lock-worker-env)."""
POD_PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(31, 4, -1)] + [
    f"{legacy}_x86_64" for legacy in ("manylinux2014", "manylinux2010", "manylinux1", "linux")]
"""What pip on the pods' Python 3.12 (glibc 2.31 or newer, x86_64) installs."""


def requirements_txt_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            requirement = Requirement(line.split("#")[0].strip())
            pins[canonicalize_name(requirement.name)] = str(requirement.specifier).removeprefix("==")
    return pins


def test_the_lock_the_compile_check_and_the_local_run_have_one_jax_libtpu_maxtext_orbax_and_ray():
    locked = worker_env.locked_versions(KEY)
    pinned = {name: requirements_txt_pins()[name] for name in KEY}
    installed = {name: metadata.version(name) for name in KEY}
    assert locked == pinned == installed
    assert worker_env.KEY_PACKAGES == KEY


def test_every_other_package_requirements_txt_pins_is_locked_at_the_same_version():
    locked = worker_env.locked_versions()
    shared = {name: version for name, version in requirements_txt_pins().items() if name in locked}
    differ = {name: (version, locked[name]) for name, version in shared.items() if locked[name] != version}
    assert set(differ) == NOT_REQUIREMENTS_TXTS, differ
    assert {"flax", "optax", "tokamax", "qwix", "aqtp", "chex", "grain", "tensorstore"} <= set(shared)


def test_every_locked_package_is_one_version_of_wheels_the_pods_python_installs():
    supported = {*cpython_tags((3, 12), platforms=POD_PLATFORMS), *compatible_tags((3, 12), platforms=POD_PLATFORMS)}
    names = [canonicalize_name(p["name"]) for p in worker_env.packages()]
    assert len(names) == len(set(names)) > 200
    for package in worker_env.packages():
        assert package["wheels"], package["name"]
        for wheel in package["wheels"]:
            name, version, _, tags = parse_wheel_filename(wheel["url"].rsplit("/", 1)[1])
            assert (name, str(version)) == (canonicalize_name(package["name"]), package["version"])
            assert tags & supported, wheel["url"]
            assert re.fullmatch(r"[0-9a-f]{64}", wheel["hashes"]["sha256"]) and wheel["size"] > 0


def test_the_lock_is_what_its_command_writes_from_requirements_in():
    text = worker_env.LOCK_FILE.read_text()
    assert text.splitlines()[1] == "#    bin/lock-worker-env"
    wanted = [Requirement(line) for line in (worker_env.CONTEXT_DIR / "requirements.in").read_text().splitlines()
              if line and not line.startswith("#")]
    assert {canonicalize_name(r.name) for r in wanted} >= set(KEY)
    assert all(not r.specifier for r in wanted)  # versions come from requirements.txt, never twice
    assert {canonicalize_name(r.name) for r in wanted} <= set(worker_env.locked_versions())
    assert re.search(r"uv==([\d.]+)", (REPO_ROOT / "requirements-dev.txt").read_text())[1] == worker_env.UV_VERSION


POD_MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def test_the_lock_is_complete_for_every_locked_package_this_venv_has_at_its_version():
    """pip installs the lock with --no-deps: a requirement the lock lacked would only show as an ImportError on
    the slices. Checked from the metadata of each locked package this venv has at the locked version (about
    150 of 250, MaxText, JAX and Ray among them), with the extras requirements.in asks for."""
    locked = worker_env.locked_versions()
    extras: dict[str, set[str]] = {}
    for line in (worker_env.CONTEXT_DIR / "requirements.in").read_text().splitlines():
        if line and not line.startswith("#"):
            extras.setdefault(canonicalize_name(Requirement(line).name), set()).update(Requirement(line).extras)
    here = {name for name, version in locked.items() if _installed(name) == version}
    assert {"maxtext", "jax", "ray", "flax", "orbax-checkpoint"} <= here
    unmet = []
    for name in sorted(here):
        for requirement in map(Requirement, metadata.requires(name) or []):
            wanted = [""] + sorted(extras.get(name, ()))
            if requirement.marker and not any(requirement.marker.evaluate({**POD_MARKERS, "extra": e}) for e in wanted):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency not in locked or not requirement.specifier.contains(locked[dependency], prereleases=True):
                unmet.append(f"{name} needs {requirement} (lock: {locked.get(dependency)})")
    assert not unmet


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_the_stack_image_leaves_the_tpu_workers_nothing_to_install_and_rays_image_the_rest():
    assert trainer.tpu_worker_env(worker_env.locked_versions()) == {"env_vars": trainer.WORKER_ENV}
    without = dict(worker_env.locked_versions())
    del without["libtpu"]
    without["protobuf"] = "5.29.6"
    uv = trainer.tpu_worker_env(without)["uv"]
    assert [line.split(" ")[0] for line in uv["packages"]] == ["libtpu==0.0.50.1", "protobuf==7.36.2"]
    assert "--resolution=lowest" not in str(uv)


# -- install.py: the image's build step, run on wheels made here ------------------------------------------------


def make_wheel(directory: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of ``name`` (one module that knows its version) that requires ``requires``."""
    dist = f"{name}-{version}.dist-info"
    requirements = "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requirements}",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_b64(hashlib.sha256(text.encode()).digest())},{len(text.encode())}" for path, text in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def write_lock(path: Path, wheels: list[Path], sha256: dict[str, str] | None = None) -> Path:
    """A PEP 751 lock of ``wheels``, as bin/lock-worker-env writes one (``sha256``: a hash to put instead)."""
    blocks = []
    for wheel in wheels:
        name, version, _, _ = parse_wheel_filename(wheel.name)
        digest = (sha256 or {}).get(str(name), hashlib.sha256(wheel.read_bytes()).hexdigest())
        blocks.append(f'[[packages]]\nname = "{name}"\nversion = "{version}"\nwheels = [{{ url = "{wheel.as_uri()}", '
                      f'size = {wheel.stat().st_size}, hashes = {{ sha256 = "{digest}" }} }}]\n')
    path.write_text('lock-version = "1.0"\ncreated-by = "tests"\n\n' + "\n".join(blocks))
    return path


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("wheels")
    for name, version in (("tpu_dep_a", "1.0"), ("tpu_dep_b", "2.1"), ("tpu_dep_b", "2.0")):
        make_wheel(directory, name, version)
    return directory


@pytest.fixture()
def venv(tmp_path) -> Path:
    """A fresh Python 3.12 virtual environment with pip, as Ray's image has."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True)
    return tmp_path / "venv" / "bin" / "python"


def run_install(python: Path, lock: Path, wheels: Path) -> subprocess.CompletedProcess:
    """The Dockerfile's RUN line with the paths of this machine: this venv's python runs install.py on ``lock``."""
    env = {"PATH": "/usr/bin:/bin", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    return subprocess.run([str(python), str(worker_env.CONTEXT_DIR / "install.py"), str(lock)],
                          env=env, capture_output=True, text=True, timeout=300)


def versions_in(python: Path) -> dict[str, str]:
    script = "import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    return json.loads(subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True).stdout)


def test_the_dockerfile_runs_install_py_on_the_lock_of_its_context():
    run = [line for line in worker_env.DOCKERFILE.read_text().splitlines() if line.startswith("RUN ")]
    assert len(run) == 1
    mount = re.search(r"--mount=type=bind,source=\.,target=(\S+)", run[0])[1]
    assert run[0].endswith(f" python {mount}/install.py {mount}/pylock.toml")
    kept = [line for line in (worker_env.CONTEXT_DIR / ".dockerignore").read_text().splitlines()
            if line.startswith("!")]
    assert kept == ["!pylock.toml", "!install.py"]


def test_install_py_installs_exactly_the_locked_versions_into_a_fresh_python(venv, wheels, tmp_path):
    lock = write_lock(tmp_path / "pylock.toml", [wheels / "tpu_dep_a-1.0-py3-none-any.whl", wheels / "tpu_dep_b-2.0-py3-none-any.whl"])
    result = run_install(venv, lock, wheels)
    assert result.returncode == 0, result.stderr
    found = versions_in(venv)
    assert (found["tpu_dep_a"], found["tpu_dep_b"]) == ("1.0", "2.0")  # 2.0 as locked, though 2.1 is on the index
    # What the image already has at the locked version is left alone (Ray's packages on Ray's image).
    again = run_install(venv, lock, wheels)
    assert again.returncode == 0 and "Successfully installed" not in again.stdout


def test_install_py_refuses_a_wheel_whose_sha256_is_not_the_locks(venv, wheels, tmp_path):
    lock = write_lock(tmp_path / "pylock.toml", [wheels / "tpu_dep_a-1.0-py3-none-any.whl"], sha256={"tpu-dep-a": "0" * 64})
    result = run_install(venv, lock, wheels)
    assert result.returncode != 0
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in result.stderr
    assert "tpu_dep_a" not in versions_in(venv)


# -- install.py over Ray's image ------------------------------------------------------------------------------------

RAY_IMAGE_PIP = {"urllib3": "1.26.20", "protobuf": "6.33.6", "msgpack": "1.1.2", "click": "8.3.2", "filelock": "3.29.0",
                 "jsonschema": "4.24.1", "packaging": "26.1", "pyyaml": "6.0.3", "requests": "2.33.1"}
"""Ray's wheel's dependencies as Ray's image has them, pip-installed beside Ray (Ray's published freeze of its image,
``doc/source/ray-overview/pip_freeze_ray-py310-cpu.txt`` at Ray 2.58.0, the newest Ray publishes)."""
RAY_IMAGE_CONDA = {"tqdm": "4.67.1"}
"""What conda installed in the image's prefix before Ray (the same freeze: ``tqdm @ file:///home/conda/feedstock_root/...``)."""


def conda_installed(python: Path, name: str) -> None:
    """Mark ``name``'s distribution as conda's packages leave it: INSTALLER ``conda`` and a direct_url.json naming the
    feedstock it was built from (what makes ``pip freeze`` print ``tqdm @ file:///home/conda/...``)."""
    script = ("import importlib.metadata as m, sys; d = m.distribution(sys.argv[1]); print(d._path)")
    dist_info = Path(subprocess.run([str(python), "-c", script, name], capture_output=True, text=True,
                                    check=True).stdout.strip())
    (dist_info / "INSTALLER").write_text("conda\n")
    (dist_info / "direct_url.json").write_text(json.dumps(
        {"url": f"file:///home/conda/feedstock_root/build_artifacts/{name}_1735661334605/work", "dir_info": {}}))


@pytest.fixture()
def ray_image(tmp_path) -> Path:
    """A Python 3.12 prefix laid out as ``rayproject/ray``'s ``/home/ray/anaconda3``: conda's packages first, then
    Ray's own wheel (ray 2.60.0, with the requirements of Ray's real wheel as this environment has them) and its
    dependencies at the image's versions; the lock goes on top, as the Dockerfile's RUN puts it."""
    assert sys.version_info[:2] == (3, 12)  # the image's Python, and the lock's
    python = tmp_path / "anaconda3" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
    base = tmp_path / "ray-image-wheels"
    base.mkdir()
    ray_requires = tuple(r for r in metadata.requires("ray") if "extra ==" not in r)
    assert {canonicalize_name(Requirement(r).name) for r in ray_requires} == set(RAY_IMAGE_PIP) - {"urllib3"}
    layers = [[make_wheel(base, name, version) for name, version in RAY_IMAGE_CONDA.items()],
              [make_wheel(base, "ray", metadata.version("ray"), ray_requires),
               *(make_wheel(base, name, version) for name, version in RAY_IMAGE_PIP.items())]]
    for index, layer in enumerate(layers):
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                        "--disable-pip-version-check", *map(str, layer)], check=True)
        if index == 0:
            for name in RAY_IMAGE_CONDA:
                conda_installed(python, name)
    return python


def installers(python: Path) -> dict[str, str]:
    script = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: (d.read_text('INSTALLER') "
              "or '').strip() for d in m.distributions()}))")
    return json.loads(subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True).stdout)


def test_install_py_over_rays_image_replaces_what_differs_keeps_the_rest_and_checks_the_whole(ray_image, tmp_path):
    wheels = tmp_path / "lock-wheels"
    wheels.mkdir()
    locked = {"ray": metadata.version("ray"), "msgpack": "1.1.2", **worker_env.locked_versions(
        ["protobuf", "urllib3", "tqdm", "libtpu"])}
    lock = write_lock(tmp_path / "pylock.toml", [make_wheel(wheels, name, version) for name, version in locked.items()])
    result = run_install(ray_image, lock, wheels)
    assert result.returncode == 0, result.stdout + result.stderr
    found = versions_in(ray_image)
    assert {name: found[name] for name in locked} == locked
    # What the image has at the locked version is left as it is; what differs is replaced, conda's package too.
    (installed,) = [line for line in result.stdout.splitlines() if line.startswith("Successfully installed")]
    assert sorted(installed.split()[2:]) == sorted(f"{name}-{locked[name]}" for name in ("libtpu", "protobuf", "tqdm",
                                                                                          "urllib3"))
    assert installers(ray_image)["tqdm"] == "pip"
    assert "No broken requirements found." in result.stdout


def test_install_py_over_rays_image_fails_the_build_when_the_lock_breaks_what_it_leaves(ray_image, tmp_path):
    """Ray's wheel asks for msgpack<2.0.0: a lock that moved msgpack past it, beside the image's Ray, would
    install; ``pip check`` stops the build with the line naming both."""
    wheels = tmp_path / "lock-wheels"
    wheels.mkdir()
    lock = write_lock(tmp_path / "pylock.toml", [make_wheel(wheels, "msgpack", "2.0.0")])
    result = run_install(ray_image, lock, wheels)
    assert result.returncode != 0
    assert f"ray {metadata.version('ray')} has requirement msgpack<2.0.0,>=1.0.0, but you have msgpack 2.0.0." in (
        result.stdout)


@pytest.fixture()
def other_lock(tmp_path, monkeypatch):
    """The lock with libtpu moved to 0.0.52 (the pods would run another compiler than this venv's)."""
    text = worker_env.LOCK_FILE.read_text()
    moved = text.replace('name = "libtpu"\nversion = "0.0.50.1"', 'name = "libtpu"\nversion = "0.0.52"')
    assert moved != text
    (tmp_path / "pylock.toml").write_text(moved)
    monkeypatch.setattr(worker_env, "LOCK_FILE", tmp_path / "pylock.toml")
    worker_env.packages.cache_clear()
    yield
    worker_env.packages.cache_clear()


def test_the_compile_check_compiles_with_the_locks_compiler_or_not_at_all(other_lock):
    from gke_ray_tpu.preflight.xla_check import CompileCheckError, versions

    with pytest.raises(CompileCheckError, match=r"libtpu 0\.0\.50\.1 \(the pods' lock: 0\.0\.52\)"):
        versions()


def test_the_compile_checks_verdict_names_the_locks_compiler():
    from gke_ray_tpu.preflight.xla_check import versions

    assert versions() == {name: metadata.version(name) for name in ("maxtext", "libtpu", "jax", "jaxlib")}
    assert versions()["libtpu"] == worker_env.locked_versions(["libtpu"])["libtpu"] == "0.0.50.1"


RAY_UV_SCRIPT = """
import json, sys
import ray
env = json.loads(sys.argv[1])
ray.init(num_cpus=1, include_dashboard=False)

@ray.remote(runtime_env=env)
def versions():
    import importlib.metadata as m
    import tpu_dep_a
    return [tpu_dep_a.VERSION, m.version("tpu_dep_a"), m.version("jax")]

print(json.dumps(ray.get(versions.remote(), timeout=300)))
"""


def test_rays_uv_runtime_env_installs_the_missing_part_of_a_lock_with_the_trainers_options(wheels, tmp_path, monkeypatch):
    """The trainer's runtime env as Ray 2.60's uv plugin runs it: a virtualenv over this Python, the lock's lines
    with their hashes, --no-deps --require-hashes --only-binary :all:. The workers see the installed wheel and this
    Python's own packages. Without ``uv_version``: Ray would pip-install that uv from PyPI; this venv has the same
    uv (requirements-dev.txt), which Ray then uses."""
    lock = write_lock(tmp_path / "pylock.toml", [wheels / "tpu_dep_a-1.0-py3-none-any.whl"])
    monkeypatch.setattr(trainer, "packages", lambda: tuple(read_lock(lock)))
    env = trainer.tpu_worker_env(worker_env.installed_here())
    assert env["uv"].pop("uv_version") == f"=={worker_env.UV_VERSION}"
    env["env_vars"] = {**env["env_vars"], "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels)}
    result = subprocess.run([sys.executable, "-c", RAY_UV_SCRIPT, json.dumps(env)], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ["1.0", "1.0", metadata.version("jax")]
