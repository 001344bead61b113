"""The cluster CA as kubeadm's token discovery reads it: the `cluster-info` ConfigMap (kube-public, readable
without credentials), accepted only with a valid signature for a bootstrap token the reader holds.

cp-0 generates the cluster's CAs itself (`kubeadm init`); nothing about them is known when the program
writes user data. The kube-controller-manager's bootstrap signer adds to `cluster-info` one detached JWS per
bootstrap token marked `usage-bootstrap-signing` (`jws-kubeconfig-<token id>`): HS256 over the ConfigMap's
`kubeconfig`, keyed with the token's secret (k8s.io/cluster-bootstrap token/jws/jws.go
ComputeDetachedSignature, v0.35.4). A reader that holds a token checks that signature: only someone holding
the token's secret (the program, the node it was written for, the cluster) could have made it, so the CA it
carries is the cluster's. The standard library only: it runs in two places,

- on the operator's machine, as a pulumi-command `local.Command` (`python3 .../cluster_info.py ca`): the
  program reads the CA back once cp-0's API answers (env API_HOST, TOKENS: bootstrap tokens, one a line),
  and `admin` reads the admin client certificate cp-0 signed for the program's key (env API_HOST,
  CLUSTER_CA_PEM), verified with that CA;
- on a replaced cp-0 (render.CLUSTER_INFO_SCRIPT_PATH, `verify` reads the ConfigMap's JSON on stdin, TOKEN
  in the environment): its user data was written before the CA existed, so it pins the CA hash it passes to
  `kubeadm join` (`caCertHashes`) from this check, the same one the program made.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import ssl
import sys
import time
from typing import Any, Optional

CLUSTER_INFO_PATH = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
# Where cp-0 publishes the admin client certificate it signs for the program (public: a certificate).
ADMIN_CERT_CONFIGMAP = "gpu-platform-admin"
ADMIN_CERT_KEY = "cert.pem"
ADMIN_CERT_PATH = f"/api/v1/namespaces/kube-public/configmaps/{ADMIN_CERT_CONFIGMAP}"
TLS_SERVER_NAME = "kubernetes"


class ClusterInfoError(Exception):
    pass


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def detached_signature(content: str, token_id: str, token_secret: str, header: Optional[str] = None) -> str:
    """`header..signature` as kubeadm's bootstrap signer writes it (HS256, `kid` = the token id). With
    `header` (the encoded protected header of a signature being checked), the signature over that header."""
    if header is None:
        header = _b64url(json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode())
    mac = hmac.new(token_secret.encode(), f"{header}.{_b64url(content.encode())}".encode(), hashlib.sha256).digest()
    return f"{header}..{_b64url(mac)}"


def verified_ca(cluster_info: dict[str, Any], tokens: list[str]) -> str:
    """The CA certificate (PEM) of a `cluster-info` ConfigMap, if its kubeconfig is signed for one of
    `tokens` ("<id>.<secret>"); else ClusterInfoError naming what is missing."""
    data = cluster_info.get("data") or {}
    kubeconfig = data.get("kubeconfig", "")
    if not kubeconfig:
        raise ClusterInfoError("cluster-info has no kubeconfig")
    for token in tokens:
        token_id, _, secret = token.strip().partition(".")
        signature = data.get(f"jws-kubeconfig-{token_id}", "")
        header, sep, _ = signature.partition("..")
        if not sep:
            continue
        try:
            fields = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
        except ValueError:
            continue
        if fields.get("alg") != "HS256" or fields.get("kid") != token_id:
            continue
        if hmac.compare_digest(signature, detached_signature(kubeconfig, token_id, secret, header)):
            found = re.search(r"certificate-authority-data:\s*(\S+)", kubeconfig)
            if not found:
                raise ClusterInfoError("the signed cluster-info kubeconfig has no certificate-authority-data")
            return base64.b64decode(found.group(1)).decode()
    ids = ", ".join(t.strip().partition(".")[0] for t in tokens)
    raise ClusterInfoError(f"cluster-info carries no valid signature for the bootstrap token(s) {ids}")


def _get(host: str, path: str, context: ssl.SSLContext) -> dict[str, Any]:
    """GET https://host:6443/path; the certificate (when `context` verifies) checked for TLS_SERVER_NAME,
    whatever address the API is reached at (kubeadm's default SANs always name "kubernetes")."""
    import http.client
    import socket

    conn = http.client.HTTPConnection(host, 6443, timeout=10)
    conn.sock = context.wrap_socket(socket.create_connection((host, 6443), 10), server_hostname=TLS_SERVER_NAME)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise ClusterInfoError(f"GET {path}: HTTP {resp.status}")
    return json.loads(body)


def _unverified() -> ssl.SSLContext:
    # The content is checked (the token's signature), not the channel: kubeadm's discovery does the same.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _verified(ca_pem: str) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem)


def _poll(fetch, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            return fetch()
        except (OSError, ClusterInfoError, ValueError) as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise ClusterInfoError(f"{what} not available after {int(timeout)} s (last: {last}); check cp-0's console "
                                   "(Lish): `journalctl -u gpu-platform-bootstrap`")
        time.sleep(10)


def read_ca(host: str, tokens: list[str], timeout: float = 1800) -> str:
    return _poll(lambda: verified_ca(_get(host, CLUSTER_INFO_PATH, _unverified()), tokens),
                 f"a signed cluster-info at {host}", timeout)


def read_admin_cert(host: str, ca_pem: str, timeout: float = 900) -> str:
    """The admin certificate cp-0 published, over TLS verified with the CA."""
    def fetch() -> str:
        cert = (_get(host, ADMIN_CERT_PATH, _verified(ca_pem)).get("data") or {}).get(ADMIN_CERT_KEY, "")
        if "BEGIN CERTIFICATE" not in cert:
            raise ClusterInfoError(f"{ADMIN_CERT_CONFIGMAP} holds no certificate yet")
        return cert

    return _poll(fetch, f"the admin certificate (kube-public/{ADMIN_CERT_CONFIGMAP}) at {host}", timeout)


def main(argv: list[str]) -> int:
    mode = argv[1] if len(argv) > 1 else ""
    try:
        if mode == "ca":
            tokens = [t for t in os.environ["TOKENS"].splitlines() if t.strip()]
            sys.stdout.write(read_ca(os.environ["API_HOST"], tokens))
        elif mode == "admin":
            sys.stdout.write(read_admin_cert(os.environ["API_HOST"], os.environ["CLUSTER_CA_PEM"]))
        elif mode == "verify":
            sys.stdout.write(verified_ca(json.load(sys.stdin), [os.environ["TOKEN"]]))
        else:
            print("usage: cluster_info.py ca|admin|verify", file=sys.stderr)
            return 2
    except (ClusterInfoError, KeyError, ValueError) as exc:
        print(f"cluster-info: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
