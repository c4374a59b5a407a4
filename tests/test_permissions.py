"""The roles the deployer needs, from what the program registers (gke_ray_tpu.core.permissions): every kind of stack
runs under the mock engine, every type it registers or reads and every invoke it makes has an entry, and the roles
the docs name grant every permission; the docs' table and preview's section come from the same table."""

from __future__ import annotations

import json

import pytest

from gke_ray_tpu.core import permissions
from gke_ray_tpu.core.permissions import ROLES, Role, needs, roles_for, uncovered
from gke_ray_tpu.stack import preview
from gke_ray_tpu.stack.permissions import check_roles, custom_role, roles_section, roles_table, run_needs
from tests.conftest import REPO_ROOT

TPU7X_RUNS = json.dumps([{"name": "b", "preset": "llama3-8b", "overrides": {"steps": 100, "ici_fsdp_parallelism": 8}}])
BASE = {"roles/container.admin", "roles/storage.admin"}
NODES = {"roles/iam.serviceAccountUser"}
DCN = {"roles/compute.networkAdmin", "roles/compute.securityAdmin"}
IMAGE = {"roles/artifactregistry.admin"}
VARIANTS = {
    # name: (config changes, the roles the stack needs: the docs' "needed by" column, stack by stack)
    "dev": ({}, BASE | NODES | DCN | IMAGE),
    "spot": ({"capacity": "spot"}, BASE | NODES | DCN | IMAGE),
    "reservation": ({"capacity": "reservation", "reservation": "trillium-res"}, BASE | NODES | DCN | IMAGE),
    "flex-start, scale to zero, Kueue installed": ({"capacity": "flex-start"}, BASE | NODES | DCN | IMAGE),
    "queued provisioning": ({"capacity": "flex-start", "numSlices": "1", "queuedProvisioning": "true",
                             "elasticMinSlices": None}, BASE | NODES | DCN | IMAGE),
    "scale to zero on the cluster's own Kueue": ({"scaleToZero": "true", "installKueue": "false"},
                                                 BASE | NODES | DCN | IMAGE),
    "existing cluster": ({"existingClusterName": "shared-gke", "existingClusterLocation": "us-east5-b"},
                         BASE | NODES | DCN | IMAGE),
    "existing image repository": ({"existingImageRepository": "team-images"},
                                  BASE | NODES | DCN | {"roles/artifactregistry.repoAdmin"}),
    "no image": ({"buildImage": "false"}, BASE | NODES | DCN),
    "autopilot": ({"clusterMode": "autopilot"}, BASE | NODES | IMAGE),
    "tpu7x": ({"tpuGeneration": "tpu7x", "tpuTopology": "2x2x4", "runs": TPU7X_RUNS},
              BASE | NODES | DCN | IMAGE | {"roles/compute.storageAdmin"}),
    "own namespace, force-deleted bucket": ({"namespace": "training", "bucketDeletion": "force"},
                                            BASE | NODES | DCN | IMAGE),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, run_stack):
    changes, roles = VARIANTS[request.param]
    return request.param, run_stack(**changes), roles


def test_every_type_and_invoke_has_an_entry_and_the_documented_roles_grant_all_it_needs(variant):
    name, run, _ = variant
    try:
        required = run_needs(run)
    except KeyError as error:
        pytest.fail(f"{name}: {error.args[0]} is registered, read or invoked and has no entry in core/permissions.py")
    missing = uncovered(required, ROLES)
    assert missing == [], f"{name}: " + "; ".join(f"{t} needs {p}: no role of the docs grants it" for t, p in missing)


def test_each_stack_needs_the_roles_the_docs_say_it_does(variant):
    name, run, expected = variant
    required = run_needs(run)
    chosen = roles_for(required)
    assert {role.name for role in chosen} == expected, name
    assert uncovered(required, chosen) == []  # the chosen few grant it all


def test_the_kinds_of_types_are_counted_as_the_module_says(dev_run):
    required = run_needs(dev_run)
    # A custom resource (KubeRay's RayCluster) goes through GKE's thirdPartyObjects, a built-in kind through its own.
    assert required["kubernetes:ray.io/v1:RayCluster"] >= {"container.thirdPartyObjects.create",
                                                          "container.thirdPartyObjects.delete"}
    assert "container.networkPolicies.update" in required["kubernetes:networking.k8s.io/v1:NetworkPolicy"]
    # DRA's claim templates have no IAM permission: their RBAC rule, which only container.admin covers.
    claim = required["kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"]
    assert claim == {f"rbac:resource.k8s.io/resourceclaimtemplates.{verb}" for verb in ("create", "get", "update",
                                                                                        "delete")}
    assert [role.name for role in ROLES if all(role.grants_permission(p) for p in claim)] == ["roles/container.admin"]
    # Read, not created: the served CRDs; invoked: getProject. Components call nothing themselves.
    assert required["kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"] == {
        "container.customResourceDefinitions.get"}
    assert required["gcp:organizations/getProject:getProject"] == {"resourcemanager.projects.get"}
    assert required["gke-ray-tpu:index:WorkerImage"] == frozenset()
    # Creating the cluster runs its nodes as the default compute service account.
    assert "iam.serviceAccounts.actAs" in required["gcp:container/cluster:Cluster"]


def test_kueues_chart_counts_as_every_object_it_renders(run_stack):
    required = run_needs(run_stack(capacity="flex-start"))
    chart = required["kubernetes:helm.sh/v4:Chart"]
    assert {"container.customResourceDefinitions.create", "container.clusterRoles.create",
            "container.validatingWebhookConfigurations.create", "container.apiServices.create"} <= chart


def test_a_type_without_an_entry_is_named():
    with pytest.raises(KeyError, match="gcp:compute/router:Router"):
        needs({"gcp:compute/router:Router"})
    with pytest.raises(KeyError, match="kubernetes:batch/v1:Job"):
        needs({"kubernetes:batch/v1:Job"})
    with pytest.raises(KeyError, match="gcp:compute/getZones:getZones"):
        needs((), invokes={"gcp:compute/getZones:getZones"})


def test_the_roles_docs_deploy_md_named_before_miss_the_firewall_the_repository_and_the_nodes_account(dev_run):
    """container.admin, iam.serviceAccountAdmin, compute.networkAdmin, storage.admin: the image repository, its IAM
    and the pushes, the DCN firewall rules and running the nodes as the compute service account were all denied."""
    before = [role for role in ROLES if role.name in permissions.TUTORIAL_ROLES]
    before.append(Role("roles/iam.serviceAccountAdmin", "", "", frozenset({"resourcemanager.projects.get"})))
    assert {role.name for role in before} == set(permissions.TUTORIAL_ROLES)
    denied = {permission for _, permission in uncovered(run_needs(dev_run), before)}
    assert {"compute.firewalls.create", "artifactregistry.repositories.create",
            "artifactregistry.repositories.setIamPolicy", "artifactregistry.repositories.uploadArtifacts",
            "iam.serviceAccounts.actAs"} <= denied


def test_docs_deploy_md_renders_the_role_table():
    table = roles_table()
    assert table in (REPO_ROOT / "docs" / "deploy.md").read_text()
    assert len(table.splitlines()) == 2 + len(ROLES)


def test_preview_prints_the_roles_the_update_needs(dev_run, capsys):
    assert preview.main(["--section", "permissions"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == roles_section(dev_run)
    for role in roles_for(run_needs(dev_run)):
        assert f"  {role.name} " in printed


def test_the_custom_role_holds_exactly_the_iam_permissions_and_names_the_rbac_rest(dev_run):
    role = custom_role(dev_run, "dev")
    listed = [line.removeprefix("- ") for line in role.splitlines() if line.startswith("- ")]
    required = {p for ps in run_needs(dev_run).values() for p in ps}
    assert listed == sorted(p for p in required if not p.startswith("rbac:"))
    assert "Kubernetes RBAC for resource.k8s.io/resourceclaimtemplates.create" in role
    assert "iam.serviceAccounts.actAs" in listed and "container.clusters.create" in listed


def test_the_role_table_is_checked_against_google_role_definitions(tmp_path):
    for role in ROLES:
        (tmp_path / f"{role.name.removeprefix('roles/')}.json").write_text(json.dumps(
            {"name": role.name, "includedPermissions": sorted(role.grants | {"some.other.permission"})}))
    assert check_roles(tmp_path) == []
    storage = tmp_path / "storage.admin.json"
    storage.write_text(json.dumps({"includedPermissions": ["storage.buckets.get"]}))
    (tmp_path / "compute.securityAdmin.json").unlink()
    problems = check_roles(tmp_path)
    assert "roles/storage.admin does not include storage.buckets.create" in problems
    assert any(line.startswith("roles/compute.securityAdmin: no role definition at ") for line in problems)
