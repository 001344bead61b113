"""Real throwaway key material for pulumi-tls, so rendered artifacts (kubeconfig, join hashes) are
exercised end to end offline. Nothing here leaves preflight: plan.json redacts secrets.

Deterministic, so the same stack gives the same plan on every run: ECDSA keys derived from the
resource name, serial numbers from the certificate's content, validity from the start of the UTC day,
and deterministic (RFC 6979) ECDSA signatures. RSA keys, which cannot be derived, are random, generated once
per process for each resource name and size (a 4096-bit key takes about half a CPU-second, as long as the rest
of a Linode plan): every plan in one process (a preflight run of several stacks, a test session) sees the same
key for the same resource."""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from gpu_platform.data.versions_calendar import today
from gpu_platform.preflight.mocks import sensitive

_KEYS: dict[str, Any] = {}
_RSA_KEYS: dict[tuple[str, int], Any] = {}


def _rsa_key(name: str, bits: int):
    if (name, bits) not in _RSA_KEYS:
        _RSA_KEYS[(name, bits)] = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    return _RSA_KEYS[(name, bits)]


def _private_key(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    if inputs.get("algorithm", "RSA") == "ECDSA":
        curve = ec.SECP256R1()
        order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # P-256's group order
        secret = int.from_bytes(hashlib.sha256(f"preflight-mock-key|{name}".encode()).digest(), "big") % (order - 1) + 1
        key = ec.derive_private_key(secret, curve)
    else:
        key = _rsa_key(name, int(inputs.get("rsaBits", 2048)))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    _KEYS[pem] = key
    sensitive(pem)
    return {"privateKeyPem": pem, "privateKeyPemPkcs8": pem, "publicKeyPem": pub}


def _load_key(pem: str):
    return _KEYS.get(pem) or serialization.load_pem_private_key(pem.encode(), password=None)


def _name(subject: dict[str, Any] | None) -> x509.Name:
    subject = subject or {}
    attrs = []
    if subject.get("commonName"):
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, subject["commonName"]))
    for org in ([subject["organization"]] if isinstance(subject.get("organization"), str) else []):
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _sign_kwargs(signer) -> dict[str, Any]:
    return {"ecdsa_deterministic": True} if isinstance(signer, ec.EllipticCurvePrivateKey) else {}


def _build(subject: x509.Name, issuer: x509.Name, public_key, signer, inputs: dict[str, Any]) -> str:
    # The day preflight judges the stack on (GPU_PLATFORM_TODAY when set), at midnight UTC: two plans of one day agree,
    # and a run that crosses midnight plans the same certificates throughout.
    now = datetime.datetime.combine(today(), datetime.time(), tzinfo=datetime.timezone.utc)
    hours = int(inputs.get("validityPeriodHours", 8760))
    pub = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    serial = int.from_bytes(hashlib.sha256(subject.public_bytes() + issuer.public_bytes() + pub).digest()[:19], "big") or 1
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(public_key).serial_number(serial)
               .not_valid_before(now).not_valid_after(now + datetime.timedelta(hours=hours)))
    if inputs.get("isCaCertificate"):
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    cert = builder.sign(signer, hashes.SHA256(), **_sign_kwargs(signer))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _self_signed(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    key = _load_key(inputs["privateKeyPem"])
    subject = _name(inputs.get("subject"))
    return {"certPem": _build(subject, subject, key.public_key(), key, inputs)}


def _cert_request(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    key = _load_key(inputs["privateKeyPem"])
    csr = (x509.CertificateSigningRequestBuilder().subject_name(_name(inputs.get("subject")))
           .sign(key, hashes.SHA256(), **_sign_kwargs(key)))
    return {"certRequestPem": csr.public_bytes(serialization.Encoding.PEM).decode()}


def _locally_signed(inputs: dict[str, Any], name: str) -> dict[str, Any]:
    csr = x509.load_pem_x509_csr(inputs["certRequestPem"].encode())
    ca = x509.load_pem_x509_certificate(inputs["caCertPem"].encode())
    ca_key = _load_key(inputs["caPrivateKeyPem"])
    return {"certPem": _build(csr.subject, ca.subject, csr.public_key(), ca_key, inputs)}


RESOURCES = {
    "tls:index/privateKey:PrivateKey": _private_key,
    "tls:index/selfSignedCert:SelfSignedCert": _self_signed,
    "tls:index/certRequest:CertRequest": _cert_request,
    "tls:index/locallySignedCert:LocallySignedCert": _locally_signed,
}
