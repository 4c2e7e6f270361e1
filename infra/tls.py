"""Mutual TLS between the services: every server asks its callers for a certificate signed by
the platform's CA, every client shows one, and each certificate says who holds it.

A certificate names its holder twice:

- its role, in a URI subject alternative name `urn:chat:role:<role>` (ROLE_URI_PREFIX): one of
  Role below. Access is decided by role (infra.access holds the table).
- its name, in the subject's common name: a node's id for a node, else the role again. The
  scheduler takes a node's stream only when the registration's node id is this name.

Its DNS and IP alternative names are the hosts it serves on (`localhost` and `127.0.0.1` for a
platform on one machine), which clients check as usual.

Every service config embeds `tls: TlsConfig` the same way (`gateway.tls.ca_file` in a file,
`CHAT_GATEWAY_TLS_CA_FILE` in the environment). There is no silent default: a service without
its three files refuses to start unless told `insecure: true`, which serves and calls in
plaintext, for debugging only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

import grpc

from infra.config import ConfigError

ROLE_URI_PREFIX = "urn:chat:role:"


class Role(enum.StrEnum):
    SCHEDULER = "scheduler"
    NODE = "node"
    GATEWAY = "gateway"
    EDGE = "edge"
    # chatctl: the admin API (with its token as well) and chatting from a terminal.
    OPERATOR = "operator"
    # A program of the operator's that calls the gateway with the Python client.
    CLIENT = "client"


@dataclass(frozen=True)
class TlsConfig:
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    insecure: bool = False
    # How often a running service looks whether its files were renewed (infra.tls_files).
    reload_check_s: float = 5.0

    @classmethod
    def in_folder(cls, folder: str | Path, stem: str) -> TlsConfig:
        """The layout `chatctl up` writes: ca.crt, and <stem>.crt with <stem>.key beside it."""
        folder = Path(folder)
        return cls(str(folder / "ca.crt"), str(folder / f"{stem}.crt"), str(folder / f"{stem}.key"))

    def check(self) -> None:
        """A service's config must choose: all three files, or plaintext said out loud."""
        files = (self.ca_file, self.cert_file, self.key_file)
        if self.insecure:
            if any(files):
                raise ConfigError(
                    "tls: insecure is true and files are set too; choose one or the other"
                )
            return
        if not all(files):
            raise ConfigError(
                "tls: set ca_file, cert_file and key_file (mutual TLS), or insecure: true "
                "to serve and call in plaintext"
            )

    def read(self) -> tuple[bytes, bytes, bytes]:
        """The CA's certificate, this holder's key and its certificate (chain)."""
        self.check()
        paths = (self.ca_file, self.key_file, self.cert_file)
        try:
            ca, key, cert = (Path(f).read_bytes() for f in paths)
        except OSError as error:
            raise ConfigError(f"tls: cannot read {error.filename}: {error.strerror}") from error
        return ca, key, cert


@dataclass(frozen=True, slots=True)
class Peer:
    role: str
    name: str


def peer(context: grpc.aio.ServicerContext) -> Peer | None:
    """Who is calling, from the certificate the handshake verified; None on a plaintext server.

    A TLS server requires a client certificate, so every TLS caller has one; one that names no
    role, or several, gets role "" and is refused by every rule."""
    auth = context.auth_context()
    if auth.get("transport_security_type") != [b"ssl"]:
        return None
    roles = [
        uri.decode().removeprefix(ROLE_URI_PREFIX)
        for uri in auth.get("peer_uri", [])
        if uri.decode().startswith(ROLE_URI_PREFIX)
    ]
    names = auth.get("x509_common_name") or [b""]
    return Peer(roles[0] if len(roles) == 1 else "", names[0].decode())
