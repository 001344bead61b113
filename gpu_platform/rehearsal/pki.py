"""Keys and certificates of the throwaway control plane, made with `cryptography`: a CA, the API
server's serving certificate, the service-account signing key, and the serving certificate the
platform controllers' webhooks present on 127.0.0.1."""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_PEM = serialization.Encoding.PEM


def _key_pem(key) -> bytes:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(_PEM)

    @classmethod
    def new(cls, cn: str, days: int = 2) -> "CA":
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=days))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False, key_agreement=False,
                                             encipher_only=False, decipher_only=False), critical=True)
                .sign(key, hashes.SHA256()))
        return cls(key, cert)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> "CA":
        return cls(serialization.load_pem_private_key(key_pem, None), x509.load_pem_x509_certificate(cert_pem))  # type: ignore[arg-type]

    def issue(self, cn: str, dns: list[str] = (), ips: list[str] = (), server: bool = True, days: int = 2) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                                  critical=False))
        sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(_PEM), _key_pem(key)


def service_account_key() -> tuple[bytes, bytes]:
    """(private PEM, public PEM) for --service-account-signing-key-file / --service-account-key-file."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub = key.public_key().public_bytes(_PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), pub


def write(path: Path, data: bytes, private: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    if private:
        tmp.chmod(0o600)
    tmp.replace(path)
    return path


# Kubeflow Trainer watches its webhook certificate in a fixed folder (pkg/util/cert: certDir =
# /tmp/k8s-webhook-server/serving-certs, not configurable), so every rehearsal on this machine must serve
# the same certificate there: one webhook CA and 127.0.0.1 certificate per cache, made once, reused.
WEBHOOK_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def webhook_serving(cache: Path) -> tuple[bytes, Path]:
    """(CA bundle PEM, folder with tls.crt/tls.key for 127.0.0.1) under `cache`/webhook-pki, made once."""
    folder = cache / "webhook-pki"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ca_crt, crt = folder / "ca.crt", folder / "tls.crt"
        fresh = False
        if crt.exists():
            cert = x509.load_pem_x509_certificate(crt.read_bytes())
            fresh = cert.not_valid_after_utc > datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=2)
        if not fresh:
            ca = CA.new("gpu-platform rehearsal webhook CA", days=365)
            cert_pem, key_pem = ca.issue("127.0.0.1", dns=["localhost"], ips=["127.0.0.1"], days=365)
            write(folder / "tls.key", key_pem, private=True)
            write(crt, cert_pem)
            write(ca_crt, ca.cert_pem)
        return ca_crt.read_bytes(), folder


# Kueue 0.19.2 with its internal certificate management off reads its metrics certificate from this fixed
# folder (cmd/kueue/main.go: metricsCertPath := "/etc/kueue/metrics/certs") and exits without it.
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def install_fixed_dir(source: Path, dest_dir: Path = WEBHOOK_CERT_DIR) -> None:
    """Copy the shared 127.0.0.1 certificate into a fixed folder a controller reads, if it differs.
    OSError (e.g. PermissionError) when the folder cannot be written."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        data = (source / name).read_bytes()
        dest = dest_dir / name
        if not dest.exists() or dest.read_bytes() != data:
            write(dest, data, private=name == "tls.key")
