"""The fake Kubernetes API's errors (tests.fakes) held to the API server's: apimachinery's and the apiserver's own
test cases (k8s.io/apimachinery and k8s.io/apiserver v0.35, the GKE minor the stack pins), translated into data, run
against the fakes' Status constructors; then each fake API's answer, as the Python client raises it."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from tests.fakes import (FakeCoreV1, FakeJobsClient, FakeKubeRay, already_exists, api_error, conflict, field_error,
                         forbidden, invalid, not_found, status_of, unauthorized, webhook_denied)
from tests.test_crd_rules import manifest

ERRORS_TEST = "k8s.io/apimachinery pkg/api/errors/errors_test.go"
STATUSERROR_TEST = "k8s.io/apiserver pkg/admission/plugin/webhook/errors/statuserror_test.go"

KNOWN = {"AlreadyExists": 409, "Conflict": 409, "NotFound": 404, "Invalid": 422, "Forbidden": 403,
         "Unauthorized": 401}
"""The reasons TestErrorNew tells apart, and their codes (``errors.go``: IsAlreadyExists ... IsUnauthorized)."""


def is_reason(status: dict, reason: str) -> bool:
    """apimachinery's ``Is<Reason>``: the reason, or an unknown reason with the reason's code
    (``reasonAndCodeForError``)."""
    return status["reason"] == reason or (status["reason"] not in KNOWN and status["code"] == KNOWN[reason])


ERROR_NEW = [  # (what TestErrorNew builds, the fake's Status for it, the one reason it must be)
    ('NewAlreadyExists(resource("tests"), "1")', already_exists("", "tests", "1"), "AlreadyExists"),
    ('NewConflict(resource("tests"), "2", errors.New("message"))', conflict("", "tests", "2", "message"), "Conflict"),
    ('NewNotFound(resource("tests"), "3")', not_found("", "tests", "3"), "NotFound"),
    ('NewInvalid(kind("Test"), "2", nil)', invalid("", "Test", "2", []), "Invalid"),
    ('NewForbidden(resource("tests"), "2", errors.New("reason"))', forbidden("", "tests", "2", "reason"), "Forbidden"),
    ('NewUnauthorized("reason")', unauthorized("reason"), "Unauthorized"),
]


@pytest.mark.parametrize("built, status, reason", ERROR_NEW, ids=[case[0].split("(")[0] for case in ERROR_NEW])
def test_each_error_is_its_reason_and_no_other_as_in_apimachinerys_test_error_new(built, status, reason):
    """errors_test.go TestErrorNew: each constructor's error is its own kind (and AlreadyExists none of the others)."""
    assert [r for r in KNOWN if is_reason(status, r)] == [reason], (ERRORS_TEST, built, status)
    assert status["code"] == KNOWN[reason] and status["status"] == "Failure"


NEW_INVALID = [  # errors_test.go TestNewInvalid: a field error, the cause it gives, the message
    (field_error("FieldValueDuplicate", "field[0].name", "bar"), "FieldValueDuplicate",
     'Kind "name" is invalid: field[0].name: Duplicate value: "bar"'),
    (field_error("FieldValueInvalid", "field[0].name", "bar", "detail"), "FieldValueInvalid",
     'Kind "name" is invalid: field[0].name: Invalid value: "bar": detail'),
    (field_error("FieldValueNotFound", "field[0].name", "bar"), "FieldValueNotFound",
     'Kind "name" is invalid: field[0].name: Not found: "bar"'),
    (field_error("FieldValueNotSupported", "field[0].name", "bar"), "FieldValueNotSupported",
     'Kind "name" is invalid: field[0].name: Unsupported value: "bar"'),
    (field_error("FieldValueRequired", "field[0].name"), "FieldValueRequired",
     'Kind "name" is invalid: field[0].name: Required value'),
    (None, None, 'Kind "name" is invalid'),
]


@pytest.mark.parametrize("error, cause, message", NEW_INVALID, ids=[m.split(": ", 2)[-1][:30] for *_, m in NEW_INVALID])
def test_an_invalid_object_is_422_with_its_causes_as_in_apimachinerys_test_new_invalid(error, cause, message):
    status = invalid("", "Kind", "name", [error] if error else [])
    assert (status["code"], status["reason"], status["message"]) == (422, "Invalid", message), ERRORS_TEST
    causes = [{"reason": cause, "message": error["message"], "field": "field[0].name"}] if error else []
    assert status["details"] == {"kind": "Kind", "name": "name", **({"causes": causes} if causes else {})}


DENIED_BY = 'admission webhook "foo" denied the request'
TO_STATUS_ERR = [  # statuserror_test.go TestToStatusErr: (name, the webhook's result, message, code, status)
    ("nil result", None, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("only message", {"message": "you shall not pass"}, f"{DENIED_BY}: you shall not pass", 400, "Failure"),
    ("only reason", {"reason": "Forbidden"}, f"{DENIED_BY}: Forbidden", 400, "Failure"),
    ("message and reason", {"message": "you shall not pass", "reason": "Forbidden"},
     f"{DENIED_BY}: you shall not pass", 400, "Failure"),
    ("no message, no reason", {}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("custom 4xx status code", {"code": 401}, f"{DENIED_BY} without explanation", 401, "Failure"),
    ("custom 5xx status code", {"code": 500}, f"{DENIED_BY} without explanation", 500, "Failure"),
    ("200 status code", {"code": 200}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("300 status code", {"code": 300}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("399 status code", {"code": 399}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("missing status", {}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("success status overridden", {"status": "Success"}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("failure status preserved", {"status": "Failure"}, f"{DENIED_BY} without explanation", 400, "Failure"),
    ("custom status preserved", {"status": "custom"}, f"{DENIED_BY} without explanation", 400, "custom"),
]


@pytest.mark.parametrize("name, result, message, code, status", TO_STATUS_ERR, ids=[c[0] for c in TO_STATUS_ERR])
def test_a_webhooks_denial_is_the_api_servers_as_in_its_test_to_status_err(name, result, message, code, status):
    denied = webhook_denied("foo", result)
    assert (denied["message"], denied["code"], denied["status"]) == (message, code, status), (STATUSERROR_TEST, name)


# --- each fake API's answer, as the client raises it ------------------------------------------------------------


def test_the_fake_kuberay_api_answers_as_the_api_server_does():
    kube = FakeKubeRay(FakeJobsClient())
    with pytest.raises(k8s.ApiException) as missing:
        kube.custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", "nobody")
    assert type(missing.value).__name__ == "NotFoundException"
    assert (missing.value.status, missing.value.reason) == (404, "Not Found")
    assert status_of(missing.value) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'rayjobs.ray.io "nobody" not found', "reason": "NotFound",
        "details": {"group": "ray.io", "kind": "rayjobs", "name": "nobody"}, "code": 404}

    kube.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", manifest())
    with pytest.raises(k8s.ApiException) as taken:
        kube.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", manifest())
    assert (type(taken.value).__name__, taken.value.status, taken.value.reason) == ("ConflictException", 409, "Conflict")
    assert (status_of(taken.value)["reason"], status_of(taken.value)["message"]) == (
        "AlreadyExists", 'rayjobs.ray.io "job" already exists')

    # A RayJob its CRD's CEL rules refuse (spec.managedBy: one of two controllers) is 422 Invalid, not stored.
    with pytest.raises(k8s.ApiException) as refused:
        kube.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs",
                                                    manifest("other", managedBy="someone-else"))
    assert (type(refused.value).__name__, refused.value.status) == ("UnprocessableEntityException", 422)
    status = status_of(refused.value)
    assert status["reason"] == "Invalid" and status["message"].startswith('RayJob.ray.io "other" is invalid: ')
    assert "the managedBy field value must be either 'ray.io/kuberay-operator' or 'kueue.x-k8s.io/multikueue'" in \
        status["message"]
    assert "other" not in kube.ray_jobs


def test_an_object_two_rules_refuse_is_one_422_with_both_causes_in_brackets():
    """NewInvalid's message is its causes' aggregate (k8s.io/apimachinery pkg/util/errors aggregate.Error): one cause
    alone, several in brackets, each ``<field>: Invalid value: "<type>": <the rule's message>``."""
    kube = FakeKubeRay(FakeJobsClient())
    with pytest.raises(k8s.ApiException) as refused:
        kube.custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs",
                                                    manifest(managedBy="someone-else", deletionStrategy={}))
    status = status_of(refused.value)
    causes = {c["field"]: c["message"] for c in status["details"]["causes"]}
    assert sorted(causes) == ["spec.deletionStrategy", "spec.managedBy"]
    assert status["message"] == 'RayJob.ray.io "job" is invalid: [' + ", ".join(
        f"{c['field']}: {c['message']}" for c in status["details"]["causes"]) + "]"
    assert causes["spec.deletionStrategy"] == (
        'Invalid value: "object": deletionStrategy requires either BOTH onSuccess and onFailure, OR the deletionRules '
        'field (cannot be empty)')


def test_the_fake_core_api_answers_a_secret_it_may_not_read_with_the_api_servers_403():
    api = FakeCoreV1([], secrets={"token": 403})
    with pytest.raises(k8s.ApiException) as denied:
        api.read_namespaced_secret("token", "default")
    assert (type(denied.value).__name__, denied.value.status, denied.value.reason) == (
        "ForbiddenException", 403, "Forbidden")
    assert status_of(denied.value)["message"].startswith('secrets "token" is forbidden: User ')


@pytest.mark.parametrize("code, name", [(400, "BadRequestException"), (401, "UnauthorizedException"),
                                        (403, "ForbiddenException"), (404, "NotFoundException"),
                                        (409, "ConflictException"), (422, "UnprocessableEntityException"),
                                        (500, "ServiceException"), (429, "ApiException")])
def test_the_client_raises_its_class_for_each_code_with_the_status_lines_reason(code, name):
    """kubernetes-client's ApiException.from_response picks the class; the reason is Go's http.StatusText."""
    error = api_error({"status": "Failure", "message": "m", "reason": "r", "code": code})
    assert type(error).__name__ == name and error.status == code and error.reason
    assert status_of(error)["message"] == "m"
