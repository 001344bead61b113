"""pulumi-command mocks: what the Linode program reads back from cp-0 (components/linode/cluster_info.py).

A real cluster answers with the CA cp-0's kubeadm generated and the admin certificate it signed for the
program's key; offline, a deterministic throwaway CA stands in for cp-0's (the same stack gives the same
plan), so user data, join hashes and the kubeconfig are rendered end to end. Every other command echoes
its inputs (no stdout)."""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpu_platform.data.versions_calendar import today

_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def _ca_key(name: str) -> ec.EllipticCurvePrivateKey:
    secret = int.from_bytes(hashlib.sha256(f"preflight-mock-cp0-ca|{name}".encode()).digest(), "big") % (_P256_ORDER - 1) + 1
    return ec.derive_private_key(secret, ec.SECP256R1())


def _day() -> datetime.datetime:
    """Midnight UTC of the day preflight judges the stack on (GPU_PLATFORM_TODAY when set), as tls.py's."""
    return datetime.datetime.combine(today(), datetime.time(), tzinfo=datetime.timezone.utc)


def _ca_name() -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])


def _ca_pem(name: str) -> str:
    key = _ca_key(name)
    cert = (x509.CertificateBuilder().subject_name(_ca_name()).issuer_name(_ca_name()).public_key(key.public_key())
            .serial_number(1).not_valid_before(_day()).not_valid_after(_day() + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256(), ecdsa_deterministic=True))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _admin_pem(ca_pem: str, name: str, public_key_pem: str) -> str:
    ca_key = _ca_key(name)
    pub = serialization.load_pem_public_key(public_key_pem.encode())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kubeadm:cluster-admins"),
                         x509.NameAttribute(NameOID.COMMON_NAME, "gpu-platform-admin")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(_ca_name()).public_key(pub)
            .serial_number(2).not_valid_before(_day()).not_valid_after(_day() + datetime.timedelta(days=365))
            .sign(ca_key, hashes.SHA256(), ecdsa_deterministic=True))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


# The CA each cluster-ca command answered with, by the CA PEM, for the admin command that follows.
_CA_OWNER: dict[str, str] = {}


def _command(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    create = inputs.get("create") or ""
    # The read-back runs cluster_info.py's source from stdin (`python3 - ca|admin`, cluster.READ_BACK_CA).
    if create not in ("python3 - ca", "python3 - admin") or "CLUSTER_INFO_PATH" not in (inputs.get("stdin") or ""):
        return {}
    env = inputs.get("environment") or {}
    if create.endswith(" ca"):
        pem = _ca_pem(name)
        _CA_OWNER[pem] = name
        return {"stdout": pem, "stderr": ""}
    ca_pem = env.get("CLUSTER_CA_PEM", "")
    owner = _CA_OWNER.get(ca_pem)
    if owner is None:
        return {}
    # What cp-0 signs: the program's CSR, whose public key the command is given (ADMIN_PUBLIC_KEY_PEM).
    return {"stdout": _admin_pem(ca_pem, owner, env.get("ADMIN_PUBLIC_KEY_PEM", "")), "stderr": ""}


RESOURCES = {"command:local:Command": _command}
