"""WorkerImage: the TPU workers' image, Ray's release image with the lock installed, built by ``pulumi up`` and pushed to Artifact Registry.

The build context is ``core/worker_env`` (its ``Dockerfile`` runs ``install.py`` on
``pylock.toml``, the file tests/test_worker_env.py runs), built with pulumi-docker-build's ``Image``
for linux/amd64 and pushed under a tag named by the lock's digest. ``ref`` is that tag with the
build's digest (``<tag>@sha256:...``): RayTpuCluster puts it in every Ray pod, so a changed lock
rolls out as a new digest and an unchanged one changes nothing (pulumi-docker-build rebuilds only
when the context's hash, the tags or the build's inputs change, and a pod of an unchanged digest
is not pulled again on a node that has it).

Building needs a Docker daemon where ``pulumi up`` runs, found as the provider finds it
(:mod:`gke_ray_tpu.components.docker_daemon`): :func:`check_build_daemon` asks it before anything is registered,
whenever the update will build (at ``pulumi up``; at preview only with ``build_on_preview``). Each build starts from
the cache the last one pushed beside the image (``<image>:buildcache``) and pushes its own there.
"""

from __future__ import annotations

import os
import re
from typing import NotRequired, Optional, Sequence, TypedDict

import pulumi
import pulumi_docker_build as docker_build
import pulumi_gcp as gcp

from gke_ray_tpu.components import docker_daemon
from gke_ray_tpu.components._options import child_options
from gke_ray_tpu.components.ray_tpu_cluster import DEFAULT_IMAGE, check_image
from gke_ray_tpu.core import worker_env
from gke_ray_tpu.core.errors import ConfigError

BUILT_BY_DEFAULT = True
"""A stack builds its TPU workers' image unless told not to (``buildImage``)."""
DEFAULT_REPOSITORY = "gke-ray-tpu"
DEFAULT_IMAGE_NAME = "ray-tpu-worker"
READER_ROLE = "roles/artifactregistry.reader"
CACHE_TAG = "buildcache"
"""The tag, beside the image, of the build cache each build starts from and pushes (BuildKit's registry cache)."""
_REPOSITORY_ID = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
_IMAGE_NAME = re.compile(r"[a-z0-9]+([._-][a-z0-9]+)*")


class WorkerImageArgs(TypedDict):
    """Inputs of WorkerImage."""

    project: str
    """Project of the Artifact Registry repository."""
    location: str
    """Region of the repository: the cluster's, so nodes pull within the region (image streaming needs the image in Artifact Registry)."""
    repository: NotRequired[str]
    """Repository ID (lowercase letters, digits, hyphens; at most 63). Default: gke-ray-tpu."""
    existing_repository: NotRequired[bool]
    """Push to repository as it exists instead of creating it (a Docker-format repository in location). Default: false."""
    base_image: NotRequired[str]
    """The image the lock is installed on. Default: rayproject/ray:2.60.0-py312, RayTpuCluster's default image, whose Ray is the lock's."""
    image_name: NotRequired[str]
    """Name of the image in the repository. Default: ray-tpu-worker."""
    readers: NotRequired[Sequence[pulumi.Input[str]]]
    """IAM members that pull the image (the node pools' service account), given roles/artifactregistry.reader on the repository this component creates. Default: none."""
    build_on_preview: NotRequired[bool]
    """Build during pulumi preview too (pulumi-docker-build's default; a preview build is never pushed). Default: false: a preview takes seconds, not the minutes of installing the lock."""


def will_build(build_on_preview: bool = False) -> bool:
    """Whether this run of the program builds the image: an update does; a preview only with ``build_on_preview``
    (pulumi-docker-build 0.0.22 skips the build, and needs no daemon, at a preview without it)."""
    return build_on_preview or not pulumi.runtime.is_dry_run()


def check_build_daemon(instead: str = "or build the image elsewhere and give RayTpuCluster its reference (docs/image.md: Cloud Build)") -> docker_daemon.Endpoint:
    """The daemon the image is built at, after asking it; :class:`~gke_ray_tpu.components.docker_daemon.NoBuildDaemon`
    (one line naming the setting to change) when none the provider could use answers."""
    return docker_daemon.check_build_daemon(pulumi.Config("docker-build").get("host"), instead)


def check_repository(repository: object, key: str) -> str:
    if not isinstance(repository, str) or not _REPOSITORY_ID.fullmatch(repository):
        raise ConfigError(key, repository, "an Artifact Registry repository ID: lowercase letters, digits and hyphens, "
                          "starting with a letter, at most 63 characters")
    return repository


def check_args(args: WorkerImageArgs, prefix: str = "WorkerImageArgs.") -> None:
    check_repository(args.get("repository", DEFAULT_REPOSITORY), f"{prefix}repository")
    name = args.get("image_name", DEFAULT_IMAGE_NAME)
    if not isinstance(name, str) or not _IMAGE_NAME.fullmatch(name):
        raise ConfigError(f"{prefix}image_name", name, f"an image name such as {DEFAULT_IMAGE_NAME}")
    check_image(args.get("base_image", DEFAULT_IMAGE), f"{prefix}base_image")


def image_tag(args: WorkerImageArgs) -> str:
    """``<location>-docker.pkg.dev/<project>/<repository>/<name>:lock-<12 hex>``: the tag names the lock it holds."""
    registry = f"{args['location']}-docker.pkg.dev/{args['project']}/{args.get('repository', DEFAULT_REPOSITORY)}"
    return f"{registry}/{args.get('image_name', DEFAULT_IMAGE_NAME)}:lock-{worker_env.lock_digest()[:12]}"


class WorkerImage(pulumi.ComponentResource):
    """The TPU workers' image in Artifact Registry: give it (or its ref) to RayTpuCluster as image.

    Needs the gcp provider (passed with opts providers, or the default one) for the repository and the
    access token docker uses to push, and a Docker daemon where ``pulumi up`` runs.
    """

    ref: pulumi.Output[str]
    """The pushed image by tag and digest (``<tag>@sha256:...``): what the Ray pods run. Unknown at preview unless build_on_preview."""
    digest: pulumi.Output[str]
    """The image's sha256 digest."""
    repository_url: pulumi.Output[str]
    """``<location>-docker.pkg.dev/<project>/<repository>``."""

    def __init__(self, name: str, args: WorkerImageArgs, opts: Optional[pulumi.ResourceOptions] = None):
        check_args(args)
        if will_build(args.get("build_on_preview", False)):
            check_build_daemon()
        super().__init__("gke-ray-tpu:index:WorkerImage", name, None, opts)
        child = child_options(self, opts)
        repository_id = args.get("repository", DEFAULT_REPOSITORY)
        registry = f"{args['location']}-docker.pkg.dev"

        self.repository = None
        ready: list[pulumi.Resource] = []
        if not args.get("existing_repository", False):
            self.repository = gcp.artifactregistry.Repository(
                f"{name}-repository", repository_id=repository_id, format="DOCKER", location=args["location"],
                project=args["project"], description="TPU workers' images (gke-ray-tpu WorkerImage)", opts=child,
            )
            ready.append(self.repository)
            for index, member in enumerate(args.get("readers") or []):
                ready.append(gcp.artifactregistry.RepositoryIamMember(
                    f"{name}-reader-{index}", repository=self.repository.name, location=args["location"],
                    project=args["project"], role=READER_ROLE, member=member, opts=child,
                ))

        # A short-lived token of the credentials Pulumi's gcp provider runs with: docker logs in with it for
        # the push, and pulumi-docker-build leaves a new password out of its diff, so it rebuilds nothing.
        token = gcp.organizations.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self)).access_token
        tag = image_tag(args)
        cache = f"{tag.rsplit(':', 1)[0]}:{CACHE_TAG}"
        self.image = docker_build.Image(
            f"{name}-image",
            tags=[tag],
            push=True,
            context=docker_build.BuildContextArgs(location=os.path.relpath(worker_env.CONTEXT_DIR)),
            dockerfile=docker_build.DockerfileArgs(location=os.path.relpath(worker_env.DOCKERFILE)),
            build_args={"BASE_IMAGE": args.get("base_image", DEFAULT_IMAGE)},
            platforms=[docker_build.Platform.LINUX_AMD64],
            # BuildKit's cache in the repository: a rebuild on another machine (a CI runner) starts warm.
            cache_from=[docker_build.CacheFromArgs(registry=docker_build.CacheFromRegistryArgs(ref=cache))],
            cache_to=[docker_build.CacheToArgs(registry=docker_build.CacheToRegistryArgs(
                ref=cache, image_manifest=True, oci_media_types=True))],
            build_on_preview=args.get("build_on_preview", False),
            registries=[docker_build.RegistryArgs(
                address=registry, username="oauth2accesstoken", password=pulumi.Output.secret(token),
            )],
            opts=child_options(self, opts, depends_on=ready),
        )
        self.ref = self.image.ref
        self.digest = self.image.digest
        self.repository_url = pulumi.Output.from_input(f"{registry}/{args['project']}/{repository_id}")
        self.register_outputs({"ref": self.ref, "digest": self.digest, "repositoryUrl": self.repository_url})
