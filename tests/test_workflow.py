"""``.github/workflows/pulumi.yml``: valid against GitHub's workflow schema, and shaped as promised.

Schema: SchemaStore's ``github-workflow.json`` as vendored (offline) by
check-jsonschema, plus its ``github-workflows-require-timeout`` rule.
Structure: PRs run pytest then ``pulumi preview`` with the policy pack on the
dev and prod stacks; pushes to main run pytest then ``pulumi up`` on dev,
then prod behind the ``prod`` environment; Google auth is keyless (Workload
Identity Federation); the only secret is PULUMI_ACCESS_TOKEN; every action is
version-pinned; permissions are least-privilege per job.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import check_jsonschema
import jsonschema
import pytest
import yaml

from gke_ray_tpu.stack.config import config_key

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "pulumi.yml"


class GitHubLoader(yaml.SafeLoader):
    """YAML as GitHub reads it: only true/false are booleans, so the key ``on`` stays a string."""


GitHubLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
GitHubLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


@pytest.fixture(scope="module")
def text() -> str:
    return WORKFLOW.read_text()


@pytest.fixture(scope="module")
def workflow(text) -> dict:
    return yaml.load(text, Loader=GitHubLoader)


def steps_using(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").split("@")[0] == action]


def pulumi_step(job: dict) -> dict:
    (step,) = steps_using(job, "pulumi/actions")
    return step


def index_of(job: dict, predicate) -> int:
    return next(i for i, s in enumerate(job["steps"]) if predicate(s))


# ----------------------------------------------------------------------------- YAML + schema


def test_plain_pyyaml_would_turn_on_into_true_so_we_load_like_github(text, workflow):
    assert True in yaml.safe_load(text)  # the YAML 1.1 trap
    assert "on" in workflow and True not in workflow


def _vendored_schema(name: str) -> dict:
    base = Path(check_jsonschema.__file__).parent / "builtin_schemas"
    return json.loads((base / name).read_text())


def test_workflow_matches_the_github_workflow_schema(workflow):
    schema = _vendored_schema("vendor/github-workflows.json")
    assert schema["$id"] == "https://json.schemastore.org/github-workflow.json"
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(workflow), key=lambda e: list(e.path))
    assert [f"{list(e.path)}: {e.message}" for e in errors] == []


def test_every_job_has_a_timeout(workflow):
    schema = _vendored_schema("custom/github-workflows-require-timeout.json")
    assert list(jsonschema.Draft7Validator(schema).iter_errors(workflow)) == []


TIMEOUT_MARGIN = 1.5
"""The test job's timeout is the measured fresh-clone run (bin/setup, then pytest, on 2 cores) times this."""


def test_the_test_jobs_timeout_is_the_measured_run_with_its_margin(workflow):
    """tests/durations.json holds the last measured run (``bench/bench_suite_time.py --write-durations``): a suite
    that grows past the timeout, or a timeout left far above it, shows here after the next measurement."""
    measured = json.loads((ROOT / "tests" / "durations.json").read_text())["measured"]
    assert measured["cores"] == 2, measured  # what a 2-core runner has
    minutes = math.ceil(TIMEOUT_MARGIN * (measured["setup_s"] + measured["pytest_s"]) / 60)
    assert workflow["jobs"]["test"]["timeout-minutes"] == minutes, measured


def test_check_jsonschema_cli_accepts_the_workflow():
    result = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_validation_catches_a_broken_workflow(workflow):
    schema = _vendored_schema("vendor/github-workflows.json")
    broken = json.loads(json.dumps(workflow))
    broken["jobs"]["preview"]["permissions"]["id-token"] = "admin"
    del broken["jobs"]["test"]["runs-on"]
    assert len(list(jsonschema.Draft7Validator(schema).iter_errors(broken))) >= 2


# ----------------------------------------------------------------------------- triggers + permissions


def test_triggers_are_prs_into_main_and_pushes_to_main(workflow):
    assert workflow["on"] == {"pull_request": {"branches": ["main"]}, "push": {"branches": ["main"]}}
    assert "pull_request_target" not in workflow["on"]  # would run PR code with secrets


def test_permissions_are_least_privilege_per_job(workflow):
    assert workflow["permissions"] == {"contents": "read"}
    jobs = workflow["jobs"]
    assert "permissions" not in jobs["test"]  # inherits contents: read
    assert jobs["preview"]["permissions"] == {"contents": "read", "id-token": "write", "pull-requests": "write"}
    assert jobs["up-dev"]["permissions"] == {"contents": "read", "id-token": "write"}
    assert jobs["up-prod"]["permissions"] == {"contents": "read", "id-token": "write"}


# ----------------------------------------------------------------------------- jobs


def test_test_job_runs_pytest_on_python_312(workflow):
    job = workflow["jobs"]["test"]
    assert workflow["env"]["PYTHON_VERSION"] == "3.12"
    (setup,) = steps_using(job, "actions/setup-python")
    assert setup["with"]["python-version"] == "${{ env.PYTHON_VERSION }}"
    assert [s["run"] for s in job["steps"] if "run" in s] == ["bash .ci/run"]
    # .ci/run is the repository's one test command: bin/setup (.venv with both requirement files) + pytest.
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "bin/setup" in ci_run and ".venv/bin/python -m pytest" in ci_run


def test_pr_job_previews_dev_and_prod_with_the_policy_pack(workflow):
    job = workflow["jobs"]["preview"]
    assert job["needs"] == "test"
    assert job["if"] == (
        "github.event_name == 'pull_request' && github.event.pull_request.head.repo.full_name == github.repository"
    )
    assert job["strategy"]["matrix"] == {"stack": ["dev", "prod"]}
    assert job["strategy"]["fail-fast"] is False
    step = pulumi_step(job)
    assert step["with"]["command"] == "preview"
    assert step["with"]["stack-name"] == (
        "${{ vars.PULUMI_ORG && format('{0}/{1}', vars.PULUMI_ORG, matrix.stack) || matrix.stack }}"
    )
    assert step["with"]["policyPacks"] == "${{ github.workspace }}/policy"
    assert step["with"]["comment-on-pr"] is True
    assert step["env"] == {"PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}
    assert "environment" not in job  # previews must not wait for prod's reviewers
    assert job["concurrency"] == {
        "group": "pulumi-preview-${{ matrix.stack }}-${{ github.event.pull_request.number }}",
        "cancel-in-progress": True,
    }


def test_pr_preview_asks_xla_about_every_declared_run(workflow):
    job = workflow["jobs"]["preview"]
    config = yaml.safe_load(pulumi_step(job)["with"]["config-map"])
    assert config == {config_key("compile_check"): {"value": "true", "secret": False}}
    (cache,) = steps_using(job, "actions/cache")
    # The compile check's default cache dir (gke_ray_tpu.preflight.xla_check.cache_dir), restored before preview runs.
    assert cache["with"]["path"] == "~/.cache/gke-ray-tpu/compile-check"
    assert cache["with"]["restore-keys"] == "compile-check-${{ matrix.stack }}-"
    assert index_of(job, lambda s: s is cache) < index_of(job, lambda s: s.get("uses", "").startswith("pulumi/actions@"))
    for name in ("up-dev", "up-prod"):  # `pulumi up` follows a preview that already compiled
        assert "config-map" not in pulumi_step(workflow["jobs"][name])["with"]


@pytest.mark.parametrize("stack,needs", [("dev", "test"), ("prod", "up-dev")])
def test_main_runs_up_per_stack_behind_its_environment(workflow, stack, needs):
    job = workflow["jobs"][f"up-{stack}"]
    assert job["needs"] == needs
    assert job["if"] == "github.event_name == 'push' && github.ref == 'refs/heads/main'"
    assert job["environment"] == stack
    assert job["concurrency"] == {"group": f"pulumi-up-{stack}", "cancel-in-progress": False}
    step = pulumi_step(job)
    assert step["with"]["command"] == "up"
    assert step["with"]["stack-name"] == (
        f"${{{{ vars.PULUMI_ORG && format('{{0}}/{{1}}', vars.PULUMI_ORG, '{stack}') || '{stack}' }}}}"
    )
    assert step["with"]["policyPacks"] == "${{ github.workspace }}/policy"
    assert step["env"] == {"PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}


def test_only_the_four_expected_jobs_exist(workflow):
    assert list(workflow["jobs"]) == ["test", "preview", "up-dev", "up-prod"]
    commands = {name: pulumi_step(job)["with"]["command"] for name, job in workflow["jobs"].items() if name != "test"}
    assert commands == {"preview": "preview", "up-dev": "up", "up-prod": "up"}


@pytest.mark.parametrize("job_name", ["preview", "up-dev", "up-prod"])
def test_cloud_jobs_authenticate_keylessly_before_pulumi_runs(workflow, job_name):
    job = workflow["jobs"][job_name]
    (auth,) = steps_using(job, "google-github-actions/auth")
    assert auth["with"]["workload_identity_provider"] == "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}"
    expected_sa = "GCP_PREVIEW_SERVICE_ACCOUNT" if job_name == "preview" else "GCP_DEPLOY_SERVICE_ACCOUNT"
    assert auth["with"]["service_account"] == f"${{{{ vars.{expected_sa} }}}}"
    assert not {"credentials_json", "credentials"} & set(auth["with"])
    (gcloud,) = steps_using(job, "google-github-actions/setup-gcloud")
    assert gcloud["with"]["install_components"] == "gke-gcloud-auth-plugin"
    pulumi_at = index_of(job, lambda s: s.get("uses", "").startswith("pulumi/actions@"))
    assert index_of(job, lambda s: s is auth) < pulumi_at
    assert index_of(job, lambda s: s is gcloud) < pulumi_at


@pytest.mark.parametrize("job_name", ["preview", "up-dev", "up-prod"])
def test_both_venvs_are_built_where_the_project_files_expect_them(workflow, job_name):
    job = workflow["jobs"][job_name]
    pulumi_at = index_of(job, lambda s: s.get("uses", "").startswith("pulumi/actions@"))
    runs = "\n".join(s.get("run", "") for s in job["steps"][:pulumi_at])
    policy_project = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    policy_venv = policy_project["runtime"]["options"]["virtualenv"]
    assert f"python -m venv policy/{policy_venv}" in runs
    assert f"policy/{policy_venv}/bin/pip install -r policy/requirements.txt" in runs
    # The program's venv: bin/setup builds .venv, the virtualenv Pulumi.yaml names.
    assert "bash bin/setup" in runs.splitlines()
    program_project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert program_project["runtime"]["options"]["virtualenv"] == ".venv"
    setup = (ROOT / "bin" / "setup").read_text()
    assert "-m venv .venv" in setup and "-r requirements.txt" in setup


def test_pulumi_cli_version_matches_the_sdk_pin(workflow):
    version = workflow["env"]["PULUMI_VERSION"]
    for name in ("preview", "up-dev", "up-prod"):
        assert pulumi_step(workflow["jobs"][name])["with"]["pulumi-version"] == "${{ env.PULUMI_VERSION }}"
    pins = [ROOT / "requirements.txt", ROOT / "policy" / "requirements.txt"]
    found = [re.search(r"^pulumi==(\S+)", p.read_text(), re.M) for p in pins if p.exists()]
    assert found and all(m and m.group(1) == version for m in found), (version, found)


# ----------------------------------------------------------------------------- secrets + pins


def test_the_only_secret_is_the_pulumi_token(text, workflow):
    assert set(re.findall(r"secrets\.([A-Za-z_][A-Za-z0-9_]*)", text)) == {"PULUMI_ACCESS_TOKEN"}
    assert "secrets[" not in text
    assert "env" not in {k for job in workflow["jobs"].values() for k in job}  # not exposed job-wide
    assert not re.search(r"credentials_json|private_key|BEGIN PRIVATE KEY", text)
    # The token only reaches the pulumi steps.
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "secrets." in json.dumps(step):
                assert step.get("uses", "").startswith("pulumi/actions@"), step


PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@(v\d+(\.\d+){0,2}|[0-9a-f]{40})$")


def test_every_action_is_version_pinned(workflow):
    uses = [s["uses"] for job in workflow["jobs"].values() for s in job["steps"] if "uses" in s]
    assert uses and all(PINNED.match(u) for u in uses), [u for u in uses if not PINNED.match(u)]
    assert {u.split("@")[0]: u.split("@")[1] for u in uses} == {
        "actions/cache": "v5",
        "actions/checkout": "v5",
        "actions/setup-python": "v6",
        "google-github-actions/auth": "v3",
        "google-github-actions/setup-gcloud": "v3",
        "pulumi/actions": "v7",
    }
    for bad in ("pulumi/actions@main", "actions/checkout@master", "pulumi/actions", "actions/checkout@latest"):
        assert not PINNED.match(bad)
