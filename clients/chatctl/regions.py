"""Several regions on one machine (`chatctl up --regions a,b,c`) and the regions as the global
directory has them (`chatctl regions`).

Each region is a whole platform of its own, as `chatctl up` starts one (its scheduler,
nodes, gateway, edge and SQLite store), in `STATE_DIR/regions/<name>`, so `--region NAME` on
any other command finds it there. Above them the global directory lives in one etcd: `--etcd`
names one, else an etcd is started in `STATE_DIR/global-etcd`. With one scheduler a region
keeps membership and the ladder in memory; with `--schedulers N` its schedulers share them in
that etcd under a prefix of the region's own (`region_etcd_prefix`), so no region sees
another's nodes, ladder, rollout or leader. With `--redis` every region's gateways use that
Redis under a key prefix of the region's own (`region_redis_prefix`): buckets, daily spend and
answers in flight never meet another region's.

`--background` detaches it as plain `up --background` does (the pid file and log in
STATE_DIR; `chatctl down` stops every region), and `chatctl regions restart NAME` restarts one
region of it (clients/chatctl/region_control.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from clients.chatctl.addresses import read_state_json, state_dir
from clients.chatctl.output import CtlError, emit, table_or
from clients.chatctl.platform import LocalPlatform, PlatformError, PlatformSettings
from clients.chatctl.region_control import control_server
from infra.certs import Authority
from infra.directory import DEFAULT_PREFIX, ETCD_ERRORS, Directory
from infra.process import dies_with_parent

REGIONS_FILE = "regions.json"
REGIONS_DIR = "regions"
ETCD_START_S = 30.0
# What `chatctl regions` calls out: a region older than this has stopped publishing.
OUT_AFTER_S = 6.0


def region_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of distinct region names")
    for name in names:
        if not name.replace("-", "").isalnum():
            raise argparse.ArgumentTypeError(f"a region name is letters, digits and '-': {name!r}")
    return names


def region_state_dir(state: Path, region: str) -> Path:
    return state / REGIONS_DIR / region


def region_etcd_prefix(region: str) -> str:
    """A region's schedulers' keys in the shared etcd, beside the directory's
    (`/chat/v1/global/`). A region name has no '/', so no region's prefix holds another's."""
    return f"/chat/v1/regions/{region}/"


def region_redis_prefix(region: str) -> str:
    """A region's gateways' keys and stop channel in a shared Redis. A region name has no ':',
    so no region's prefix holds another's, nor the default `chat:`'s keys."""
    return f"chat:regions:{region}:"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_etcd(folder: Path) -> tuple[asyncio.subprocess.Process, str]:
    """An etcd of the state dir's own, on free loopback ports; (process, host:port)."""
    etcd = shutil.which("etcd")
    if etcd is None:
        raise PlatformError("no etcd on PATH for the global directory: install it or pass --etcd")
    client, peer = _free_port(), _free_port()
    client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    log = await asyncio.to_thread(open, folder / "etcd.log", "ab")
    process = await asyncio.create_subprocess_exec(
        *dies_with_parent([etcd, "--name", "global", "--data-dir", str(folder / "data"),
                           "--listen-client-urls", client_url, "--advertise-client-urls",
                           client_url, "--listen-peer-urls", peer_url,
                           "--initial-advertise-peer-urls", peer_url,
                           "--initial-cluster", f"global={peer_url}"]),
        stdout=log, stderr=log,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + ETCD_START_S
    while True:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", client)
            writer.close()
            return process, f"127.0.0.1:{client}"
        if process.returncode is not None or time.monotonic() > deadline:
            raise PlatformError(f"etcd did not start; see {folder / 'etcd.log'}")
        await asyncio.sleep(0.1)


def _edge_listen(base: str, index: int) -> str:
    host, _, port = base.rpartition(":")
    return f"{host}:{int(port) + index}" if port.isdigit() and int(port) else f"{host}:0"


async def serve_regions(args: argparse.Namespace, state: Path) -> int:
    """Every region and the global directory, until Ctrl-C or SIGTERM (`chatctl down`); one
    region restarted on request meanwhile (clients/chatctl/region_control.py)."""
    (state / "global-etcd").mkdir(parents=True, exist_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    etcd_process = None
    platforms: dict[str, LocalPlatform] = {}
    try:
        endpoint = args.etcd
        if not endpoint:
            etcd_process, endpoint = await start_etcd(state / "global-etcd")
        authority = None if args.insecure else Authority.create()
        for index, name in enumerate(args.regions):
            platforms[name] = LocalPlatform(region_settings(args, name, index, endpoint, authority))
        await asyncio.gather(*(p.start() for p in platforms.values()))

        def write_summary() -> dict[str, Any]:
            summary = _summary(endpoint, platforms)
            (state / REGIONS_FILE).write_text(json.dumps(summary, indent=2) + "\n")
            return summary

        async with control_server(state, platforms, write_summary) as off:
            summary = write_summary()
            emit(args.json, summary, _summary_text(summary) + (f"\n{off}" if off else ""))
            await stop.wait()
        return 0
    except PlatformError as error:
        print(f"chatctl up: {error}", file=sys.stderr)
        return 1
    finally:
        (state / REGIONS_FILE).unlink(missing_ok=True)
        await asyncio.gather(*(p.stop() for p in platforms.values()))
        if etcd_process is not None and etcd_process.returncode is None:
            etcd_process.terminate()
            await etcd_process.wait()


def region_settings(
    args: argparse.Namespace, name: str, index: int, endpoint: str, authority: Authority | None
) -> PlatformSettings:
    """One region's platform; several schedulers share membership in the directory's etcd."""
    shared_etcd = endpoint if args.schedulers > 1 else ""
    return PlatformSettings(
        state_dir=region_state_dir(Path(args.state_dir).resolve(), name),
        edge_listen=_edge_listen(args.listen, index),
        nodes=args.nodes, pool=args.pool, schedulers=args.schedulers, gateways=args.gateways,
        etcd_endpoint=shared_etcd, etcd_prefix=region_etcd_prefix(name) if shared_etcd else "",
        redis_url=args.redis, redis_prefix=region_redis_prefix(name) if args.redis else "",
        insecure=args.insecure, region=name, global_etcd_endpoint=endpoint, authority=authority,
    )  # fmt: skip


def _summary(endpoint: str, platforms: dict[str, LocalPlatform]) -> dict[str, Any]:
    return {"etcd": endpoint, "prefix": DEFAULT_PREFIX,
            "regions": {name: {"edge": p.edge_url, "gateway": p.gateway_address,
                               "scheduler": p.scheduler_address,
                               "schedulers": p.scheduler_addresses(), "tokens": p.tokens}
                        for name, p in platforms.items()}}  # fmt: skip


def _summary_text(summary: dict[str, Any], stopped_by: str = "Ctrl-C stops everything.") -> str:
    lines = [f"global directory  etcd {summary['etcd']}"]
    for name, region in summary["regions"].items():
        lines.append(f"region {name:<10} edge {region['edge']}  gateway {region['gateway']}")
    lines.append("`chatctl regions` lists their capacity, `chatctl regions restart NAME` "
                 "restarts one; `--region NAME` picks one for any command.")  # fmt: skip
    lines.append(stopped_by)
    return "\n".join(lines)


def print_background_summary(summary: dict[str, Any], pid: int, log: Path) -> None:
    """What `up --regions --background` prints once every region is up."""
    print(_summary_text(summary, f"running in the background (pid {pid}, log {log}); "
                                 "`chatctl down` stops everything."))  # fmt: skip


async def list_regions(args: argparse.Namespace) -> int:
    """`chatctl regions`: each region's capacity, rung and age as the directory has them."""
    endpoint = args.etcd or str(read_state_json(state_dir(args) / REGIONS_FILE).get("etcd", ""))
    if not endpoint:
        raise CtlError("no global directory: pass --etcd HOST:PORT or run `chatctl up --regions`")
    directory = Directory(endpoint, args.prefix)
    try:
        snapshot = await directory.snapshot()
    except ETCD_ERRORS as error:
        raise CtlError(f"the global directory at {endpoint} did not answer") from error
    finally:
        await directory.close()
    now = time.time()
    rows, plain_rows = [], []
    for name, region in sorted(snapshot.regions.items()):
        age = region.age_s(now)
        state = "up" if age <= OUT_AFTER_S else "OUT"
        for pool, capacity in sorted(region.pools.items()):
            rows.append((name, state, f"{age:.1f}s", pool, capacity.rung,
                         f"{capacity.busy_share:.0%}", capacity.ready_replicas,
                         ",".join(region.gateways)))  # fmt: skip
            plain_rows.append({"region": name, "up": state == "up", "age_s": round(age, 1),
                               "pool": pool, "rung": capacity.rung,
                               "busy_share": capacity.busy_share,
                               "ready_replicas": capacity.ready_replicas,
                               "gateways": list(region.gateways)})  # fmt: skip
    headers = ("REGION", "STATE", "AGE", "POOL", "RUNG", "BUSY", "READY", "GATEWAYS")
    emit(args.json, plain_rows, table_or(headers, rows, "no region has published"))
    return 0
