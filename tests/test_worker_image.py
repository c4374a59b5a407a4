"""The TPU workers' image as code (gke_ray_tpu.components.worker_image) under Pulumi's mocks: the Artifact Registry
repository, the image built from the lock and pushed with its build cache beside it, its digest in every Ray pod,
image streaming on every pool (the daemon check: tests/test_docker_daemon.py)."""

from __future__ import annotations

import pytest
from pulumi.runtime import rpc

from gke_ray_tpu.components import worker_image
from gke_ray_tpu.core import worker_env
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.mock_engine import MOCK_PROJECT_NUMBER, MockGke, OfflineRun, run_offline
from tests.conftest import with_keys
from tests.schemas import validate_ray_cluster
from tests.test_stack_dev import CLUSTER, NODE_POOL, RAYCLUSTER, RAYJOB

IMAGE = "docker-build:index:Image"
REPOSITORY = "gcp:artifactregistry/repository:Repository"
READER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
COMPONENT = "gke-ray-tpu:index:WorkerImage"


def pod_images(spec: dict) -> list[tuple[str, str]]:
    """(image, pull policy) of every container of a RayCluster spec, head and workers."""
    templates = [spec["headGroupSpec"]["template"]] + [group["template"] for group in spec["workerGroupSpecs"]]
    return [(c["image"], c["imagePullPolicy"]) for t in templates for c in t["spec"]["containers"]]


def test_the_dev_stack_builds_the_lock_onto_rays_image_and_pushes_it_to_a_repository_of_its_own(dev_run, dev_config):
    repository = dev_run.one(REPOSITORY).inputs
    assert (repository["repositoryId"], repository["format"], repository["location"], repository["project"]) == (
        "ray-tpu-multislice-images", "DOCKER", "us-east5", "my-tpu-project")
    reader = dev_run.one(READER).inputs
    assert reader["role"] == "roles/artifactregistry.reader"
    assert reader["member"] == f"serviceAccount:{MOCK_PROJECT_NUMBER}-compute@developer.gserviceaccount.com"
    image = dev_run.one(IMAGE)
    assert image.inputs["push"] is True and image.inputs["platforms"] == ["linux/amd64"]
    assert image.inputs["buildArgs"] == {"BASE_IMAGE": "rayproject/ray:2.60.0-py312"}
    assert image.inputs["context"] == {"location": "core/worker_env"}
    assert image.inputs["dockerfile"] == {"location": "core/worker_env/Dockerfile"}
    (tag,) = image.inputs["tags"]
    assert tag.startswith("us-east5-docker.pkg.dev/my-tpu-project/ray-tpu-multislice-images/ray-tpu-worker:lock-")
    # Each build starts from the cache the last one pushed beside the image, and pushes its own there (an image
    # manifest with OCI media types: BuildKit's registry cache in a form Artifact Registry stores).
    cache = "us-east5-docker.pkg.dev/my-tpu-project/ray-tpu-multislice-images/ray-tpu-worker:buildcache"
    assert image.inputs["cacheFrom"] == [{"registry": {"ref": cache}}]
    (cache_to,) = image.inputs["cacheTo"]
    assert cache_to["registry"]["ref"] == cache
    assert (cache_to["registry"]["imageManifest"], cache_to["registry"]["ociMediaTypes"]) == (True, True)
    # Pushed with a token of the gcp provider's credentials, never a key in the program, and kept secret in the state.
    registries = image.inputs["registries"]
    assert registries[rpc._special_sig_key] == rpc._special_secret_sig
    (registry,) = registries["value"]
    assert (registry["address"], registry["username"]) == ("us-east5-docker.pkg.dev", "oauth2accesstoken")
    assert registry["password"] == "mock-access-token"  # what getClientConfig answered
    assert "gcp:organizations/getClientConfig:getClientConfig" in dev_run.invokes
    # The image waits for the repository and the nodes' right to read it; all three are the component's children.
    component = dev_run.one(COMPONENT)
    assert {dev_run.one(REPOSITORY).urn, dev_run.one(READER).urn} <= set(image.dependencies)
    assert all(r.parent == component.urn for r in (image, dev_run.one(REPOSITORY), dev_run.one(READER)))


def test_every_ray_pod_runs_the_pushed_image_by_digest(dev_run):
    ref = dev_run.outputs["workerImage"]
    assert ref.startswith(dev_run.one(IMAGE).inputs["tags"][0] + "@sha256:")
    manifest = dev_run.one(RAYCLUSTER).inputs
    validate_ray_cluster(manifest)
    assert set(pod_images(manifest["spec"])) == {(ref, "IfNotPresent")}


def test_a_cluster_per_run_brings_the_image_by_digest_too(run_stack):
    run = run_stack(capacity="flex-start")
    ref = run.outputs["workerImage"]
    assert set(pod_images(run.outputs["rayClusterSpec"])) == {(ref, "IfNotPresent")}
    (job,) = run.of_type(RAYJOB)
    assert set(pod_images(job.inputs["spec"]["rayClusterSpec"])) == {(ref, "IfNotPresent")}


def test_a_new_lock_is_a_new_tag_and_so_a_new_build_and_digest(tmp_path, monkeypatch):
    args = worker_image.WorkerImageArgs(project="p", location="us-east5")
    before = worker_image.image_tag(args)
    assert worker_image.image_tag(args) == before  # an unchanged lock: the same tag, nothing rebuilt or pulled
    changed = tmp_path / "pylock.toml"
    changed.write_bytes(worker_env.LOCK_FILE.read_bytes().replace(b'version = "0.12.8"', b'version = "0.12.9"', 1))
    monkeypatch.setattr(worker_env, "LOCK_FILE", changed)
    assert worker_image.image_tag(args) != before


def test_image_streaming_is_on_for_every_pool_that_runs_ray_pods(dev_run, run_stack):
    pools = dev_run.of_type(NODE_POOL)
    assert {p.inputs["name"] for p in pools} == {"ray-head-pool", "v6e-16-0", "v6e-16-1"}
    assert all(p.inputs["nodeConfig"]["gcfsConfig"] == {"enabled": True} for p in pools)
    defaults = dev_run.one(CLUSTER).inputs["nodePoolDefaults"]["nodeConfigDefaults"]
    assert defaults["gcfsConfig"] == {"enabled": True}
    scaled = run_stack(capacity="flex-start")  # the system pool too
    assert len(scaled.of_type(NODE_POOL)) == 4
    assert all(p.inputs["nodeConfig"]["gcfsConfig"] == {"enabled": True} for p in scaled.of_type(NODE_POOL))
    off = run_stack(imageStreaming="false")
    assert all(p.inputs["nodeConfig"]["gcfsConfig"] == {"enabled": False} for p in off.of_type(NODE_POOL))


def test_without_the_build_the_pods_run_ray_image_and_nothing_is_pushed(dev_config):
    run = run_offline(with_keys(dev_config, buildImage="false"), gke=MockGke(docker_daemon=False))
    assert run.of_type(IMAGE) == run.of_type(REPOSITORY) == []
    assert run.outputs["workerImage"] is None
    assert set(pod_images(run.one(RAYCLUSTER).inputs["spec"])) == {("rayproject/ray:2.60.0-py312", "IfNotPresent")}


def test_an_existing_repository_is_pushed_to_and_not_created(run_stack):
    run = run_stack(existingImageRepository="team-images")
    assert run.of_type(REPOSITORY) == run.of_type(READER) == []
    assert run.one(IMAGE).inputs["tags"][0].startswith("us-east5-docker.pkg.dev/my-tpu-project/team-images/")


@pytest.mark.parametrize(
    "changes, key, expected",
    [
        ({"existingImageRepository": "Team_Images"}, "gke-ray-tpu:existingImageRepository", "an Artifact Registry repository ID"),
        ({"existingImageRepository": "team-images", "buildImage": "false"}, "gke-ray-tpu:existingImageRepository",
         "unset: nothing is pushed while gke-ray-tpu:buildImage is false"),
        ({"buildImage": "yes"}, "gke-ray-tpu:buildImage", "true or false"),
    ],
)
def test_bad_image_keys_are_refused_under_their_key(dev_config, changes, key, expected):
    with pytest.raises(ConfigError) as raised:
        run_offline(with_keys(dev_config, **changes))
    assert raised.value.key == key and expected in str(raised.value)


PROGRAM = """
import pulumi
import pulumi_gcp as gcp
from gke_ray_tpu.components import GcsWorkloadIdentity, GcsWorkloadIdentityArgs, RayTpuCluster, RayTpuClusterArgs
from gke_ray_tpu.components.worker_image import WorkerImage, WorkerImageArgs

team = gcp.Provider("team", project="team-project")
image = WorkerImage("tpu-image", WorkerImageArgs(project="team-project", location="europe-west4", repository="tpu",
                    image_name="trainer"), opts=pulumi.ResourceOptions(providers=[team]))
storage = GcsWorkloadIdentity("storage", GcsWorkloadIdentityArgs(
    bucket_name="team-ckpt", location="europe-west4", project="team-project", project_number="1", namespace="default",
    ksa_name="trainer"))
RayTpuCluster("ray", RayTpuClusterArgs(workload_identity=storage, image=image))
"""


def test_another_stack_builds_the_image_with_its_own_provider_and_hands_the_component_to_ray_tpu_cluster(tmp_path):
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM)
    run = run_offline({}, program=program, project="team")
    provider = next(r for r in run.resources if r.type == "pulumi:providers:gcp")
    repository, image = run.one(REPOSITORY), run.one(IMAGE)
    assert repository.provider.startswith(provider.urn) and repository.inputs["repositoryId"] == "tpu"
    assert image.inputs["tags"][0].startswith("europe-west4-docker.pkg.dev/team-project/tpu/trainer:lock-")
    assert run.of_type(READER) == []  # no readers given
    cluster = run.one(RAYCLUSTER).inputs["spec"]
    assert {ref for ref, _ in pod_images(cluster)} == {image.inputs["tags"][0] + "@" + _digest_of(run)}


def _digest_of(run: OfflineRun) -> str:
    return run.one(RAYCLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"].split("@")[1]
