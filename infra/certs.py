"""A throwaway certificate authority and the certificates it signs, in the form infra.tls reads:
the role in a URI alternative name, the holder's name as the common name, and the hosts it
serves on as DNS and IP alternative names.

`chatctl up` makes a new one under its state dir each time it starts; tests make their own.
Keys are P-256: quick to make, and every TLS stack gRPC uses takes them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from infra.tls import ROLE_URI_PREFIX, TlsConfig

LOCAL_HOSTS = ("localhost", "127.0.0.1")
# Leaves some room for clocks a little behind this one's.
_BACKDATE = datetime.timedelta(minutes=5)


def _signs_certificates_only() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    # Created 0600 rather than chmod-ed after: a key is never readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


@dataclass(frozen=True)
class Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str = "chat throwaway CA", days: int = 365) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_signs_certificates_only(), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def load(cls, folder: Path) -> Authority:
        """The authority save() wrote, to issue more holders (or renew one) later."""
        cert = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{folder / 'ca.key'} is not an EC key")
        return cls(cert, key)

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self, role: str, name: str, hosts: Sequence[str] = LOCAL_HOSTS, days: int = 365
    ) -> tuple[bytes, bytes]:
        """A certificate and key (PEM) for `name` in `role`, good as server and as client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        names = [x509.UniformResourceIdentifier(ROLE_URI_PREFIX + role), *map(_san, hosts)]
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)

    def save(self, folder: Path) -> None:
        """ca.crt for everyone, and ca.key (0600) so more holders can be issued later."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "ca.crt").write_bytes(self.cert_pem)
        _write_private(folder / "ca.key", _key_pem(self.key))

    def save_holder(
        self, folder: Path, role: str, name: str = "", hosts: Sequence[str] = LOCAL_HOSTS
    ) -> TlsConfig:
        """Issues and writes <stem>.crt and <stem>.key beside ca.crt: the stem is the role, or
        role-name when the name differs (a node's id)."""
        name = name or role
        stem = role if name == role else f"{role}-{name}"
        cert, key = self.issue(role, name, hosts)
        (folder / f"{stem}.crt").write_bytes(cert)
        _write_private(folder / f"{stem}.key", key)
        return TlsConfig.in_folder(folder, stem)
