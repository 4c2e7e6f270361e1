"""Renewing a certificate the way a running platform sees it, and reading which one a server
presents to a fresh connection."""

from __future__ import annotations

import asyncio
import os
import ssl
from pathlib import Path

from cryptography import x509

from infra.tls import TlsConfig


def serial(cert_pem: bytes) -> int:
    return x509.load_pem_x509_certificate(cert_pem).serial_number


def replace(path: str, data: bytes) -> None:
    """A file's new contents in one step (a reader sees the old or the new, whole)."""
    fresh = Path(f"{path}.new")
    fresh.write_bytes(data)
    fresh.chmod(0o600)
    os.replace(fresh, path)


class SecretVolume:
    """A folder laid out as kubelet mounts a Secret: each file a symlink through `..data` to a
    timestamped folder, renewed by writing a new folder and swapping the `..data` link."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True)
        self._writes = 0

    def write(self, files: dict[str, bytes]) -> None:
        self._writes += 1
        data = self.folder / f"..{self._writes}"
        data.mkdir()
        for name, content in files.items():
            (data / name).write_bytes(content)
            link = self.folder / name
            if not link.is_symlink():
                link.symlink_to(f"..data/{name}")
        swap = self.folder / "..data_tmp"
        swap.symlink_to(data.name)
        os.replace(swap, self.folder / "..data")

    def tls(self, reload_check_s: float) -> TlsConfig:
        return TlsConfig(*(str(self.folder / f) for f in ("ca.crt", "tls.crt", "tls.key")),
                         reload_check_s=reload_check_s)  # fmt: skip


async def peer_serial(address: str, tls: TlsConfig) -> int:
    """The serial of the certificate a gRPC server at address shows a new TLS connection."""
    context = ssl.create_default_context(cafile=tls.ca_file)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    context.set_alpn_protocols(["h2"])
    host, port = address.rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), ssl=context,
                                              server_hostname="localhost")  # fmt: skip
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der).serial_number
