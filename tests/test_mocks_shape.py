"""The preflight mocks answer in the shapes the real APIs use for the attributes the program reads
(docs/mocks.md lists them and where each shape comes from)."""

from __future__ import annotations

import ipaddress

from gpu_platform.preflight.mocks import gcp


def test_gke_private_endpoint_comes_from_the_master_block_and_is_the_endpoint_when_private():
    inputs = {"privateClusterConfig": {"masterIpv4CidrBlock": "172.16.8.0/28", "enablePrivateEndpoint": True}}
    out = gcp.RESOURCES["gcp:container/cluster:Cluster"](inputs, "c")
    private = out["privateClusterConfig"]["privateEndpoint"]
    assert ipaddress.ip_address(private) in ipaddress.ip_network("172.16.8.0/28")
    assert out["endpoint"] == private
    public = gcp.RESOURCES["gcp:container/cluster:Cluster"]({"privateClusterConfig": {"masterIpv4CidrBlock": "172.16.8.0/28"}}, "c")
    assert public["endpoint"] == public["privateClusterConfig"]["publicEndpoint"] != private


def test_the_docker_build_image_answers_a_digest_and_a_tag_at_that_digest():
    """pulumi-docker-build v0.0.22 provider/internal/image.go: `digest` sha256:<64 hex>, `ref` one pushed
    tag with it (addDigest: name:tag@digest); a new tag (new sources) is a new digest."""
    import re

    from gpu_platform.preflight.mocks import docker_build

    tag = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpu-prod/gpu-platform-scale-in:src-0123456789abcdef"
    out = docker_build.RESOURCES["docker-build:index:Image"]({"push": True, "tags": [tag]}, "img")
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", out["digest"])
    assert out["ref"] == f"{tag}@{out['digest']}"
    other = docker_build.RESOURCES["docker-build:index:Image"]({"push": True, "tags": [tag[:-1] + "0"]}, "img")
    assert other["digest"] != out["digest"]
    # a host with a port is not a tag
    out = docker_build.RESOURCES["docker-build:index:Image"]({"push": True, "tags": ["registry.example.com:5000/ml/x"]}, "i")
    assert out["ref"] == f"registry.example.com:5000/ml/x:latest@{out['digest']}"


def test_ecr_repository_and_authorization_token_look_like_the_api_answers():
    """terraform-provider-aws internal/service/ecr: repositoryUrl <account>.dkr.ecr.<region>.amazonaws.com/<name>;
    the authorization token is base64 of user:password, user AWS."""
    import base64

    from gpu_platform.preflight.mocks import aws

    repo = aws.RESOURCES["aws:ecr/repository:Repository"]({"name": "gpu-prod/gpu-platform-scale-in"}, "r")
    assert repo["repositoryUrl"] == f"{aws.ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/gpu-prod/gpu-platform-scale-in"
    assert repo["registryId"] == aws.ACCOUNT
    token = aws.INVOKES["aws:ecr/getAuthorizationToken:getAuthorizationToken"]({"registryId": repo["registryId"]})
    assert base64.b64decode(token["authorizationToken"]).decode() == f"{token['userName']}:{token['password']}"
    assert token["userName"] == "AWS" and token["proxyEndpoint"] == "https://" + repo["repositoryUrl"].split("/")[0]


def test_artifact_registry_uri_is_the_regional_docker_host_project_and_repository():
    repo = gcp.RESOURCES["gcp:artifactregistry/repository:Repository"](
        {"project": "p", "location": "us-central1", "repositoryId": "gpu-prod-images", "format": "DOCKER"}, "r")
    assert repo["registryUri"] == "us-central1-docker.pkg.dev/p/gpu-prod-images"
    assert repo["name"] == "projects/p/locations/us-central1/repositories/gpu-prod-images"


def test_mock_certificates_start_on_the_day_preflight_judges_not_the_wall_clocks(monkeypatch):
    """A run that crosses midnight UTC planned the session's shared linode-dev plan with one day's certificates
    and a later plan with the next day's (tests/test_linear_wait.py failed at 00:0x): the mocks' day is
    preflight's, GPU_PLATFORM_TODAY when set, so one stack's plan is the same all day and across midnight."""
    import datetime

    from cryptography import x509

    from gpu_platform.preflight.mocks import command, tls

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-03-04")
    key = tls.RESOURCES["tls:index/privateKey:PrivateKey"]({"algorithm": "ECDSA", "ecdsaCurve": "P256"}, "k")
    cert = tls.RESOURCES["tls:index/selfSignedCert:SelfSignedCert"](
        {"privateKeyPem": key["privateKeyPem"], "subject": {"commonName": "kubernetes"}, "isCaCertificate": True,
         "validityPeriodHours": 24}, "ca")
    parsed = x509.load_pem_x509_certificate(cert["certPem"].encode())
    assert parsed.not_valid_before_utc == datetime.datetime(2026, 3, 4, tzinfo=datetime.timezone.utc)
    assert command._day() == datetime.datetime(2026, 3, 4, tzinfo=datetime.timezone.utc)
