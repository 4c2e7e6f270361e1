"""A TlsConfig's files as they are now: certificates renew without a restart.

cert-manager (and kubelet, for a mounted Secret) renews a certificate by rewriting the files in
place: a new `..data` directory, then a symlink swap. A service that read its files once at
start goes on presenting the old certificate, and past its expiry every new connection to it,
or from it, fails. CertificateFiles reads them again when they change: a stat of the three
resolved files at most every `reload_check_s` (5 s by default: well inside the third of a
certificate's lifetime cert-manager leaves before its expiry, and a stat of three files this
often costs nothing), the contents read only when a stat differs, and taken only when the key
matches the certificate (a half-written renewal keeps the old pair until the next check finds
the whole new one).

Servers (grpc's dynamic server credentials) and client channels (RenewingChannel) ask it at
each handshake or call; the expiry gauge (TlsExpiry) at each scrape. Nothing runs in the
background: a service that is not called does not look.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import grpc
import structlog
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from infra.config import ConfigError
from infra.tls import TlsConfig

_Stamp = tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True, slots=True)
class Material:
    """One consistent read of the files; version counts the changes seen since start."""

    ca: bytes
    key: bytes
    cert: bytes
    version: int
    # Unix times: when this holder's certificate, and the first of the CA bundle's, expire.
    cert_expiry: float
    ca_expiry: float
    # From valid-from to expiry: cert-manager renews a certificate with a third of it left.
    cert_lifetime: float
    ca_lifetime: float


def _stamp(paths: Iterable[str]) -> _Stamp:
    # stat follows the symlinks: a swapped `..data` is a new inode, an overwrite a new mtime.
    stats = (os.stat(path) for path in paths)
    return tuple((s.st_dev, s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)


def _expiry(cert: x509.Certificate) -> float:
    return cert.not_valid_after_utc.timestamp()


def _lifetime(cert: x509.Certificate) -> float:
    return (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()


def _parse(tls: TlsConfig, version: int) -> Material:
    """The files read and checked: ValueError when they do not make a usable pair."""
    ca, key, cert = tls.read()
    chain = x509.load_pem_x509_certificates(cert)
    authorities = x509.load_pem_x509_certificates(ca)
    private = serialization.load_pem_private_key(key, password=None)
    raw = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if private.public_key().public_bytes(*raw) != chain[0].public_key().public_bytes(*raw):
        raise ValueError(f"{tls.key_file} is not the key of {tls.cert_file}")
    first_ca = min(authorities, key=_expiry)
    return Material(ca, key, cert, version, _expiry(chain[0]), _expiry(first_ca),
                    _lifetime(chain[0]), _lifetime(first_ca))  # fmt: skip


class CertificateFiles:
    """The CA bundle, key and certificate of one TlsConfig (not insecure), re-read on change.

    Safe from any thread: gRPC's core asks for a server's certificate from its own."""

    def __init__(self, tls: TlsConfig, clock: Callable[[], float] = time.monotonic) -> None:
        tls.check()
        self.tls = tls
        self._paths = (tls.ca_file, tls.key_file, tls.cert_file)
        self._check_every_s = tls.reload_check_s
        self._clock = clock
        self._lock = threading.Lock()
        try:
            self._stamp = _stamp(self._paths)
            self._material = _parse(tls, 0)
        except ValueError as error:
            raise ConfigError(f"tls: {error}") from error
        except OSError as error:
            raise ConfigError(f"tls: cannot read {error.filename}: {error.strerror}") from error
        self._next_check = clock() + tls.reload_check_s
        self._log = structlog.get_logger(component="tls", cert_file=tls.cert_file)

    def current(self) -> Material:
        """The files as last read, read again first when the last check is reload_check_s old."""
        with self._lock:
            now = self._clock()
            if now >= self._next_check:
                self._next_check = now + self._check_every_s
                self._reload()
            return self._material

    def _reload(self) -> None:
        try:
            stamp = _stamp(self._paths)
            if stamp == self._stamp:
                return
            material = _parse(self.tls, self._material.version + 1)
        except (OSError, ValueError, ConfigError) as error:
            # Mid-renewal, or broken: the old pair serves until a whole new one is there.
            self._log.warning("tls files unusable, keeping the loaded ones", error=str(error))
            return
        self._stamp = stamp
        old = self._material
        if (material.ca, material.key, material.cert) != (old.ca, old.key, old.cert):
            self._material = material
            self._log.info("tls files reloaded", expires=material.cert_expiry)


class ServerCertificates:
    """grpc's certificate configuration fetcher: called by gRPC's core before each handshake,
    it hands over a new configuration when the files changed (None: keep the one it has)."""

    def __init__(self, files: CertificateFiles) -> None:
        self._files = files
        self._served = -1

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        material = self._files.current()
        self._served = material.version
        return grpc.ssl_server_certificate_configuration(
            [(material.key, material.cert)], root_certificates=material.ca
        )

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        if self._files.current().version == self._served:
            return None
        return self.configuration()


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """This service's certificate as its files are now; callers must show one from the CA."""
    fetcher = ServerCertificates(CertificateFiles(tls))
    return grpc.dynamic_ssl_server_credentials(
        fetcher.configuration(), fetcher, require_client_authentication=True
    )


class TlsExpiry(Collector):
    """When each certificate this service presents or trusts expires, and its whole lifetime
    (the alert's threshold is a share of it), by {service,file}, as its files are now (read at
    scrape, reload_check_s apart). An insecure TlsConfig holds none."""

    def __init__(self, service: str, configs: Iterable[TlsConfig]) -> None:
        self._service = service
        self._files = [CertificateFiles(tls) for tls in configs if not tls.insecure]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        expiry = GaugeMetricFamily(
            "chat_tls_certificate_expiry_timestamp_seconds",
            "when a certificate this service presents or trusts expires (Unix time)",
            labels=["service", "file"],
        )
        lifetime = GaugeMetricFamily(
            "chat_tls_certificate_lifetime_seconds",
            "how long a certificate this service presents or trusts is valid in all",
            labels=["service", "file"],
        )
        seen: set[str] = set()
        for files in self._files:
            now = files.current()
            for path, ends, lasts in (
                (files.tls.cert_file, now.cert_expiry, now.cert_lifetime),
                (files.tls.ca_file, now.ca_expiry, now.ca_lifetime),
            ):
                if path not in seen:
                    seen.add(path)
                    expiry.add_metric([self._service, path], ends)
                    lifetime.add_metric([self._service, path], lasts)
        yield expiry
        yield lifetime
