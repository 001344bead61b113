"""The cluster CA as kubeadm's token discovery reads it: the `cluster-info` ConfigMap (kube-public, readable
without credentials), accepted only with a valid signature for a bootstrap token the reader holds.

cp-0 generates the cluster's CAs itself (`kubeadm init`); nothing about them is known when the program
writes user data. The kube-controller-manager's bootstrap signer adds to `cluster-info` one detached JWS per
bootstrap token marked `usage-bootstrap-signing` (`jws-kubeconfig-<token id>`): HS256 over the ConfigMap's
`kubeconfig`, keyed with the token's secret (k8s.io/cluster-bootstrap token/jws/jws.go
ComputeDetachedSignature, v0.35.4). A reader that holds a token checks that signature: only someone holding
the token's secret (the program, the node it was written for, the cluster) could have made it, so the CA it
carries is the cluster's. The standard library only: it runs in two places,

- on the operator's machine, as a pulumi-command `local.Command` (`python3 - ca`, this source on stdin): the
  program reads the CA back once cp-0's API answers (env API_HOST, TOKENS: bootstrap tokens, one a line: the
  init token, the read-back token that never expires and signs only, cp-0's join token), checks that the CA
  verifies the API server's own certificate,
  and `admin` reads the admin client certificate cp-0 signed for the program's key (env API_HOST,
  CLUSTER_CA_PEM), verified with that CA;
- on a replaced cp-0 (render.CLUSTER_INFO_SCRIPT_PATH, `verify` reads the ConfigMap's JSON on stdin, TOKENS
  in the environment: the tokens cp-0's configuration holds): its user data was written before the CA existed, so it pins the CA hash it passes to
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


# kubeadm init's token lives this long (render.INIT_TOKEN_TTL), and the bootstrap signer signs cluster-info for the
# read-back token (no expiry) within seconds of init: a cluster-info older than that, signed for none of the
# program's tokens, never will be.
INIT_TOKEN_TTL_SECONDS = 24 * 3600
# The stack config key that keeps gpu-platform 0.2.0's program-owned CAs (config/linode.py, LinodeSection.pki).
PKI_KEY = "linode.pki"


class ClusterInfoError(Exception):
    pass


class NotSignedError(ClusterInfoError):
    """cluster-info answered, but carries no valid signature for any of the reader's tokens. `advice`: what to
    say if it stays so (not_signed_message)."""

    def __init__(self, message: str, advice: str = "") -> None:
        super().__init__(message)
        self.advice = advice


class StaleClusterInfoError(ClusterInfoError):
    """cluster-info is signed, but its CA does not verify the API server's certificate."""


class UnsignedClusterError(ClusterInfoError):
    """Final (not retried): a cluster this program's tokens will never be signed for."""


# cp-0's script that creates the read-back token's Secret (render.READBACK_TOKEN_SCRIPT_PATH, from the token its user
# data holds). Not `kubeadm init phase bootstrap-token`: kubeadm refuses a signing-only token in its configuration.
READBACK_TOKEN_SCRIPT_PATH = "/usr/local/sbin/gpu-platform-readback-token.sh"


def program_ca(cluster_info: dict[str, Any]) -> Optional[bool]:
    """Whether cluster-info's (unverified) CA is one gpu-platform 0.2.0's program made (pulumi-tls, subject
    O=gpu-platform) rather than kubeadm's (subject CN=kubernetes only); None when it carries no readable CA.
    Only picks the message: nothing is trusted on it. The standard library has no X.509 parser, so the
    organizationName attribute (OID 2.5.4.10, DER 06 03 55 04 0a) is found in the DER as a Printable- or
    UTF8String "gpu-platform"."""
    found = re.search(r"certificate-authority-data:\s*(\S+)", (cluster_info.get("data") or {}).get("kubeconfig", ""))
    if not found:
        return None
    try:
        pem = base64.b64decode(found.group(1)).decode()
        body = "".join(line for line in pem.splitlines() if line and not line.startswith("-----"))
        der = base64.b64decode(body)
    except (ValueError, UnicodeDecodeError):
        return None
    org = b"gpu-platform"
    return any(b"\x06\x03\x55\x04\x0a" + bytes([tag, len(org)]) + org in der for tag in (0x0C, 0x13))


def expired_tokens_message(host: str, ids: str) -> str:
    """The cluster's CA is kubeadm's (this flow's), yet its cluster-info is signed for none of the program's tokens:
    the read-back token's Secret is gone (deleted by hand, or etcd restored from a snapshot of another cluster)."""
    return (f"the cluster at {host} answers with a CA kubeadm generated, but its cluster-info carries no valid "
            f"signature for the bootstrap token(s) this program holds ({ids}): the read-back token (no expiry) is "
            f"gone from kube-system. On cp-0 (Lish) run `{READBACK_TOKEN_SCRIPT_PATH}` (it creates the read-back "
            "token's Secret again from cp-0's own copy: signing only, no expiry), "
            f"then `pulumi up` again; `{PKI_KEY}` does not apply to this cluster (docs/linode.md, \"How control "
            "planes get the CAs\")")


def unsigned_message(host: str, ids: str, age_hours: Optional[float]) -> str:
    """What the program says when the cluster's CA cannot be read back from a cluster whose CA is the program's
    own (pulumi-tls): one gpu-platform 0.2.0 created; the fix is the stack config key that keeps that flow."""
    age = f", created {age_hours:.0f} hours ago," if age_hours is not None else ""
    return (f"the cluster at {host} answers, but its cluster-info{age} carries no valid signature for the bootstrap "
            f"token(s) this program holds ({ids}), so its CA cannot be trusted or read back. A cluster created by "
            f"gpu-platform 0.2.0 holds the program's own CAs (pulumi-tls), not ones kubeadm generated: set "
            f"`{PKI_KEY}: program` (`pulumi config set --path 'gpu-platform:{PKI_KEY}' program`) and run `pulumi up` "
            f"again; this run changed "
            f"nothing on the cluster (docs/linode.md, \"Upgrading a 0.2.0 cluster\")")


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
    raise NotSignedError(f"cluster-info carries no valid signature for the bootstrap token(s) {ids}")


def age_seconds(cluster_info: dict[str, Any], now: Optional[float] = None) -> Optional[float]:
    """How long ago the ConfigMap was created (metadata.creationTimestamp, RFC 3339 UTC), or None."""
    import calendar

    stamp = (cluster_info.get("metadata") or {}).get("creationTimestamp", "")
    try:
        created = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None
    return (time.time() if now is None else now) - created


def not_signed_message(host: str, cluster_info: dict[str, Any], tokens: list[str],
                       age_hours: Optional[float]) -> str:
    """The message for a cluster-info signed for none of the tokens, by whose CA it carries: the program's own
    (a 0.2.0 cluster: `linode.pki: program`) or kubeadm's (the read-back token is gone: re-create it)."""
    ids = ", ".join(t.strip().partition(".")[0] for t in tokens)
    if program_ca(cluster_info) is False:
        return expired_tokens_message(host, ids)
    return unsigned_message(host, ids, age_hours)


def checked_cluster_ca(host: str, cluster_info: dict[str, Any], tokens: list[str],
                       now: Optional[float] = None) -> str:
    """verified_ca, with the verdict the program acts on: a cluster-info older than the init token's TTL that is
    signed for none of the tokens never will be (the read-back token never expires), so that is final
    (UnsignedClusterError, not_signed_message); a younger one may still be signed (the bootstrap signer has not
    run yet) and is retried."""
    try:
        return verified_ca(cluster_info, tokens)
    except NotSignedError as exc:
        age = age_seconds(cluster_info, now)
        if age is not None and age > INIT_TOKEN_TTL_SECONDS:
            raise UnsignedClusterError(not_signed_message(host, cluster_info, tokens, age / 3600)) from None
        raise NotSignedError(str(exc), not_signed_message(host, cluster_info, tokens, None)) from None


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


def _poll(fetch, what: str, timeout: float, unsigned: str = "", interval: float = 10) -> Any:
    """fetch() until it returns, an UnsignedClusterError (final), or `timeout`; then ClusterInfoError. `unsigned`:
    the message for a timeout whose last answer was a cluster-info signed for none of the tokens (the error's
    own advice first)."""
    deadline = time.monotonic() + timeout
    last: Exception = ClusterInfoError("no answer")
    while True:
        try:
            return fetch()
        except UnsignedClusterError:
            raise
        except (OSError, ClusterInfoError, ValueError) as exc:
            last = exc
        if time.monotonic() >= deadline:
            if isinstance(last, NotSignedError) and (last.advice or unsigned):
                raise ClusterInfoError(f"after {int(timeout)} s, {last.advice or unsigned}")
            if isinstance(last, StaleClusterInfoError):
                raise ClusterInfoError(f"after {int(timeout)} s, {last}")
            raise ClusterInfoError(f"{what} not available after {int(timeout)} s (last: {last}); check cp-0's console "
                                   "(Lish): `journalctl -u gpu-platform-bootstrap`")
        time.sleep(interval)


STALE_MESSAGE = ("cluster-info at {host} is signed for the program's token, but its CA does not verify the API "
                 "server's certificate ({error}): cluster-info is older than the node's CAs (etcd restored from a "
                 "snapshot taken before the control plane was initialised again). On the control plane run "
                 "`/usr/local/sbin/gpu-platform-republish-cluster-info.sh` (docs/linode.md, \"Restoring a single "
                 "control plane\"); the program pins nothing until both agree")


def current_ca(host: str, cluster_info: dict[str, Any], tokens: list[str], now: Optional[float] = None) -> str:
    """checked_cluster_ca, then the CA must verify the API server's own certificate (GET /version over TLS
    verified with it): a cluster-info restored from a snapshot can be signed for the program's tokens yet carry
    a CA the running control plane no longer has (StaleClusterInfoError, retried)."""
    ca = checked_cluster_ca(host, cluster_info, tokens, now)
    try:
        _get(host, "/version", _verified(ca))
    except ssl.SSLError as exc:
        raise StaleClusterInfoError(STALE_MESSAGE.format(host=host, error=exc)) from None
    return ca


def read_ca(host: str, tokens: list[str], timeout: float = 1800, interval: float = 10) -> str:
    ids = ", ".join(t.strip().partition(".")[0] for t in tokens)
    return _poll(lambda: current_ca(host, _get(host, CLUSTER_INFO_PATH, _unverified()), tokens),
                 f"a signed cluster-info at {host}", timeout, unsigned_message(host, ids, None), interval)


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
            tokens = [t for t in os.environ.get("TOKENS", os.environ.get("TOKEN", "")).split() if t.strip()]
            sys.stdout.write(verified_ca(json.load(sys.stdin), tokens))
        else:
            print("usage: cluster_info.py ca|admin|verify", file=sys.stderr)
            return 2
    except (ClusterInfoError, KeyError, ValueError) as exc:
        print(f"cluster-info: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
