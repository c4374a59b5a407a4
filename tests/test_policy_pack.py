"""The policy pack as the engine runs it: a separate analyzer process spoken to over gRPC.

The Pulumi CLI starts a Python pack with ``python -u -m pulumi.policy
<engine address> <pack dir>`` (the ``pulumi-analyzer-policy-python`` shim);
``policy/__main__.py`` then serves the Analyzer service and prints its port.
This test does the same and plays the engine's part: GetAnalyzerInfo,
Configure, ConfigureStack and Analyze. Only the CLI itself is missing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime import proto
from pulumi.runtime.proto import analyzer_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "policy"

CLUSTER_URN = "urn:pulumi:{stack}::gke-ray-tpu::gke-ray-tpu:index:GkeRayCluster$gcp:container/cluster:Cluster::gke-cluster"
NETWORK_URN = "urn:pulumi:prod::gke-ray-tpu::gke-ray-tpu:index:DcnNetworks$gcp:compute/network:Network::dcn-net-1"


@pytest.fixture(scope="module")
def analyzer(tmp_path_factory):
    stderr_path = tmp_path_factory.mktemp("analyzer") / "stderr.log"
    stderr = stderr_path.open("w")  # a file, not a pipe: nobody reads it while the server runs
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", str(PACK)],
        cwd=PACK,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        port_line = process.stdout.readline().strip()
        if not port_line.isdigit():
            process.kill()
            process.wait(timeout=10)
            pytest.fail(f"analyzer did not print its port: {port_line!r}\n{stderr_path.read_text()}")
        channel = grpc.insecure_channel(f"127.0.0.1:{port_line}")
        grpc.channel_ready_future(channel).result(timeout=10)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        process.kill()
        process.wait(timeout=10)
        stderr.close()


def struct(value: dict) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    message.update(value)
    return message


def analyze(stub, type_: str, urn: str, props: dict):
    request = proto.AnalyzeRequest(type=type_, urn=urn, name=urn.rsplit("::", 1)[1], properties=struct(props))
    return list(stub.Analyze(request).diagnostics)


def configure(stub, config: dict):
    request = proto.ConfigureAnalyzerRequest()
    for policy, settings in config.items():
        settings = dict(settings)
        entry = request.policyConfig[policy]
        level = settings.pop("enforcementLevel", None)
        if level is not None:
            entry.enforcementLevel = level
        entry.properties.update(settings)
    stub.Configure(request)


def test_analyzer_info_describes_the_pack(analyzer):
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "gke-ray-tpu-guardrails"
    assert info.supportsConfig
    policies = {p.name: p for p in info.policies}
    assert set(policies) == {
        "dcn-network-mtu",
        "dcn-network-custom-subnets",
        "tpu-node-pool-gvnic",
        "bucket-public-access-prevention",
        "bucket-uniform-access",
        "bucket-iam-not-public",
        "storage-iam-bucket-scoped",
        "ray-dashboard-not-exposed",
        "ray-token-auth",
        "ray-pods-network-policy",
        "cluster-deletion-protection",
    }
    assert {p.enforcementLevel for p in policies.values()} == {proto.MANDATORY}
    schema = policies["cluster-deletion-protection"].configSchema.properties["nonProdStacks"]
    assert list(schema["default"]) == ["dev"]
    assert policies["dcn-network-mtu"].configSchema.properties["mtu"]["default"] == 8896


def test_analyze_reports_mandatory_violations_and_passes_good_resources(analyzer):
    configure(analyzer, {})
    bad = analyze(analyzer, "gcp:compute/network:Network", NETWORK_URN, {"mtu": 1460, "autoCreateSubnetworks": False})
    assert [(d.policyName, d.enforcementLevel) for d in bad] == [("dcn-network-mtu", proto.MANDATORY)]
    assert "mtu=1460" in bad[0].message
    good = analyze(analyzer, "gcp:compute/network:Network", NETWORK_URN, {"mtu": 8896, "autoCreateSubnetworks": False})
    assert good == []


def test_stack_name_comes_from_the_urn_the_engine_sends(analyzer):
    configure(analyzer, {})
    props = {"name": "ray-tpu-multislice", "deletionProtection": False}
    prod = analyze(analyzer, "gcp:container/cluster:Cluster", CLUSTER_URN.format(stack="prod"), props)
    assert [d.policyName for d in prod] == ["cluster-deletion-protection"]
    assert analyze(analyzer, "gcp:container/cluster:Cluster", CLUSTER_URN.format(stack="dev"), props) == []


def test_policy_pack_config_changes_settings_and_enforcement_level(analyzer):
    # What `--policy-pack-config` sends: per-policy properties and enforcementLevel.
    configure(
        analyzer,
        {
            "cluster-deletion-protection": {"nonProdStacks": ["dev", "staging"]},
            "dcn-network-mtu": {"enforcementLevel": proto.ADVISORY},
        },
    )
    try:
        props = {"deletionProtection": False}
        assert analyze(analyzer, "gcp:container/cluster:Cluster", CLUSTER_URN.format(stack="staging"), props) == []
        assert len(analyze(analyzer, "gcp:container/cluster:Cluster", CLUSTER_URN.format(stack="prod"), props)) == 1
        advisory = analyze(analyzer, "gcp:compute/network:Network", NETWORK_URN, {"mtu": 1500, "autoCreateSubnetworks": False})
        assert [(d.policyName, d.enforcementLevel) for d in advisory] == [("dcn-network-mtu", proto.ADVISORY)]
    finally:
        configure(analyzer, {})


def test_unknown_preview_values_become_an_advisory_note_not_a_pass(analyzer):
    from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE

    configure(analyzer, {})
    diagnostics = analyze(
        analyzer, "gcp:compute/network:Network", NETWORK_URN, {"mtu": UNKNOWN_NUMBER_VALUE, "autoCreateSubnetworks": False}
    )
    assert [(d.policyName, d.enforcementLevel) for d in diagnostics] == [("dcn-network-mtu", proto.ADVISORY)]
    assert "can't be known during preview" in diagnostics[0].message
