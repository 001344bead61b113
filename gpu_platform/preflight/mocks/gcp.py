"""pulumi-gcp answers: the outputs GCP computes (endpoints, e-mails, URLs, resource names) derived
from the inputs, so the program's applies (kubeconfig, IAM members, budget channels) run offline.

Addresses are from documentation ranges (RFC 5737) and the CA is a stand-in string, never a real key.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
from typing import Any

PLACEHOLDER_PROJECT = "preflight-project"
# Not a certificate: base64 of a marker, enough for a kubeconfig to be well-formed.
MOCK_CA = base64.b64encode(b"preflight stand-in cluster CA (no key material)").decode()


def _number(text: str, digits: int = 12) -> str:
    """A stable fake numeric ID derived from a name."""
    return str(int(hashlib.sha256(text.encode()).hexdigest(), 16))[:digits]


def _project(inputs: dict[str, Any]) -> str:
    return inputs.get("project") or PLACEHOLDER_PROJECT


def _cluster(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    private = dict(inputs.get("privateClusterConfig") or {})
    # GKE gives the control plane an address inside masterIpv4CidrBlock (the block's second address
    # in practice); with enablePrivateEndpoint, the cluster's `endpoint` is that private address
    # (GKE API Cluster.endpoint / PrivateClusterConfig.privateEndpoint).
    block = ipaddress.ip_network(private.get("masterIpv4CidrBlock") or "172.16.0.16/28")
    private_ip = str(block.network_address + 2)
    private.update({"privateEndpoint": private_ip, "publicEndpoint": "198.51.100.10"})
    location = inputs.get("location", "us-central1")
    cluster = inputs.get("name", name)
    return {
        "name": cluster,
        "endpoint": private_ip if private.get("enablePrivateEndpoint") else "198.51.100.10",
        "masterAuth": {**(inputs.get("masterAuth") or {}), "clusterCaCertificate": MOCK_CA},
        "privateClusterConfig": private,
        # Pinned minor, or what the REGULAR channel would pick (the newest minor in standard support).
        "masterVersion": f"{inputs.get('minMasterVersion') or _channel_minor()}.1-gke.1000",
        "selfLink": f"https://container.googleapis.com/v1/projects/{_project(inputs)}/locations/{location}/clusters/{cluster}",
    }


def _channel_minor() -> str:
    from gpu_platform.data.versions_calendar import default_minor

    return default_minor("gcp") or "none-in-standard-support"


def _node_pool(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    return {"name": inputs.get("name", name), "instanceGroupUrls": [], "managedInstanceGroupUrls": []}


def _service_account(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    email = f"{inputs['accountId']}@{_project(inputs)}.iam.gserviceaccount.com"
    return {
        "email": email,
        "member": f"serviceAccount:{email}",
        "name": f"projects/{_project(inputs)}/serviceAccounts/{email}",
        "uniqueId": _number(email, 21),
    }


def _bucket(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    bucket = inputs.get("name", name)
    return {"name": bucket, "url": f"gs://{bucket}",
            "selfLink": f"https://www.googleapis.com/storage/v1/b/{bucket}"}


def _self_link(kind: str):
    def answer(inputs: dict[str, Any], name: str) -> dict[str, Any]:
        own = inputs.get("name", name)
        where = f"regions/{inputs['region']}" if inputs.get("region") else "global"
        return {"name": own,
                "selfLink": f"https://www.googleapis.com/compute/v1/projects/{_project(inputs)}/{where}/{kind}/{own}"}
    return answer


def _notification_channel(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    return {"name": f"projects/{_project(inputs)}/notificationChannels/{_number(name, 19)}", "verificationStatus": ""}


def _budget(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    return {"name": f"billingAccounts/{inputs.get('billingAccount', '')}/budgets/{_number(name, 16)}"}


def _get_project(args: dict[str, Any]) -> dict[str, Any]:
    project = args.get("projectId") or PLACEHOLDER_PROJECT
    return {"projectId": project, "number": _number(project), "name": project, "id": f"projects/{project}",
            "labels": {}, "effectiveLabels": {}, "pulumiLabels": {}, "tags": {}}


def _artifact_repository(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    """Artifact Registry: `name` is the resource path, `registryUri` <location>-docker.pkg.dev/<project>/<id>
    for a regional Docker repository (pulumi_gcp artifactregistry.Repository docstrings)."""
    project, location, repo = _project(inputs), inputs.get("location", "us-central1"), inputs.get("repositoryId", name)
    return {"name": f"projects/{project}/locations/{location}/repositories/{repo}",
            "registryUri": f"{location}-docker.pkg.dev/{project}/{repo}", "mode": "STANDARD_REPOSITORY"}


RESOURCES = {
    "gcp:artifactregistry/repository:Repository": _artifact_repository,
    "gcp:container/cluster:Cluster": _cluster,
    "gcp:container/nodePool:NodePool": _node_pool,
    "gcp:serviceaccount/account:Account": _service_account,
    "gcp:storage/bucket:Bucket": _bucket,
    "gcp:compute/network:Network": _self_link("networks"),
    "gcp:compute/subnetwork:Subnetwork": _self_link("subnetworks"),
    "gcp:compute/router:Router": _self_link("routers"),
    "gcp:compute/firewall:Firewall": _self_link("firewalls"),
    "gcp:monitoring/notificationChannel:NotificationChannel": _notification_channel,
    "gcp:billing/budget:Budget": _budget,
}

def _client_config(args: dict[str, Any]) -> dict[str, Any]:
    """The provider's own settings and the caller's OAuth access token (ya29.…; gcp.organizations.getClientConfig)."""
    import pulumi

    from gpu_platform.preflight.mocks import sensitive

    section = pulumi.Config("gpu-platform").get_object("gcp") or {}
    project, region = section.get("project") or PLACEHOLDER_PROJECT, section.get("region") or "us-central1"
    return {"accessToken": sensitive("ya29.preflight-" + _number(project, 20)), "project": project, "region": region,
            "zone": "", "id": f"projects/{project}/regions/{region}/zones/"}


INVOKES = {
    "gcp:organizations/getProject:getProject": _get_project,
    "gcp:organizations/getClientConfig:getClientConfig": _client_config,
}
