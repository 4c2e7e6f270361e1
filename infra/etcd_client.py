"""The platform's etcd client: aetcd's, in plaintext or over mutual TLS.

aetcd.Client has no TLS settings: its `connect()` always opens `grpc.aio.insecure_channel`.
TlsEtcdClient overrides `connect()` to open a secure channel instead, with the CA that signed
etcd's certificate and a client certificate and key for etcd's `--client-cert-auth`; every
other call of aetcd's reaches etcd through the channel and stubs made here.

The files are a TlsConfig (infra.tls), as for the services' own TLS: `insecure: true` is
plaintext (a scheduler's `etcd_tls` defaults to it, as etcd was reached before it had one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aetcd
from aetcd import rpc, watcher

from infra.tls import TlsConfig
from infra.tls_channel import RenewingChannel
from infra.tls_files import CertificateFiles

# etcd as it was reached before the platform had TLS settings for it.
PLAINTEXT = TlsConfig(insecure=True)


class TlsEtcdClient(aetcd.Client):
    """An aetcd.Client whose channel is a secure one (mutual TLS)."""

    # aetcd's own attribute, declared for the type checker: the library ships no types.
    _is_connecting: bool

    def __init__(self, host: str, port: int, tls: TlsConfig, **kwargs: Any) -> None:
        self._files = CertificateFiles(tls)
        super().__init__(host=host, port=port, **kwargs)

    async def connect(self) -> None:
        # aetcd's own connect() less its username and password login (unused here), with a
        # secure channel where it opens an insecure one, its certificate following renewed
        # files. Errors surface on the first call, as with aetcd's: opening a channel does not
        # dial.
        if self._connected.is_set():
            return
        if self._is_connecting:
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            target = f"{self._host}:{self._port}"
            self.channel = RenewingChannel(target, self._files, list(self._options.items()))
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(
                rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
            )
            self._connected.set()
        finally:
            self._is_connecting = False


def etcd_client(
    host: str,
    port: int,
    tls: TlsConfig,
    *,
    timeout: float | None = None,
    options: Mapping[str, Any] | None = None,
) -> aetcd.Client:
    """A client for etcd at host:port: over mutual TLS with tls's files, plaintext when tls is
    insecure. A TlsConfig with neither raises ConfigError (infra.tls)."""
    tls.check()
    kwargs: dict[str, Any] = {"timeout": timeout, "options": dict(options or {})}
    if tls.insecure:
        return aetcd.Client(host=host, port=port, **kwargs)
    return TlsEtcdClient(host, port, tls, **kwargs)
