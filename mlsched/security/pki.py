"""X.509 plumbing of the cluster CA: keys, the CA certificate, certificates it signs.

Keys are ECDSA P-256; every certificate is PEM. Nothing here touches files but ``write_secret``
and ``write_public`` (a key is written 0600, created that way, never widened later).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
LEAF_DAYS = 825


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC key")
    return key


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def fingerprint(pem: bytes) -> str:
    """``sha256:<hex>`` of a certificate's DER form (what an operator pins)."""
    der = x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mlsched"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _validity(builder: x509.CertificateBuilder, now: datetime.datetime, days: int):  # type: ignore[no-untyped-def]
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=days)
    )


def make_ca(common_name: str, now: datetime.datetime) -> tuple[bytes, bytes]:
    """A new self-signed CA: (key PEM, certificate PEM)."""
    key = new_key()
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    cert = _validity(builder, now, CA_DAYS).sign(key, hashes.SHA256())
    return key_pem(key), cert_pem(cert)


def _alt_names(names: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def issue(
    ca_key_pem: bytes,
    ca_cert_pem: bytes,
    common_name: str,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    *,
    server_names: Iterable[str] = (),
) -> bytes:
    """A leaf certificate for ``public_key`` signed by the CA. With ``server_names`` it serves
    TLS under those DNS names/IP addresses; without, it is a client certificate."""
    ca_key = load_key(ca_key_pem)
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    names = list(server_names)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if names else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(names)), False)
    return cert_pem(_validity(builder, now, LEAF_DAYS).sign(ca_key, hashes.SHA256()))


def make_csr(key: ec.EllipticCurvePrivateKey, common_name: str) -> bytes:
    csr = x509.CertificateSigningRequestBuilder().subject_name(_name(common_name))
    return csr.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_public_key(csr_pem: bytes) -> ec.EllipticCurvePublicKey:
    """The key of a certificate request whose signature checks; ValueError otherwise."""
    csr = x509.load_pem_x509_csr(csr_pem)
    if not csr.is_signature_valid:
        raise ValueError("the certificate request's signature does not check")
    key = csr.public_key()
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ValueError("the certificate request must hold an EC key")
    return key


def common_name(cert_pem_bytes: bytes) -> str:
    cert = x509.load_pem_x509_certificate(cert_pem_bytes)
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[0].value) if attrs else ""


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_secret(path: Path, data: bytes) -> None:
    """Write a private key: created 0600 under a temporary name, then renamed into place."""
    tmp = _tmp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_public(path: Path, data: bytes) -> None:
    tmp = _tmp_name(path)
    tmp.write_bytes(data)
    os.replace(tmp, path)
