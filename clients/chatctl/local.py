"""`chatctl up` and `chatctl down`: the whole platform on this machine, in the foreground or
detached, found again by the pid file in its state dir."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from clients.chatctl.addresses import read_secret, state_dir
from clients.chatctl.output import CtlError, emit, print_json
from clients.chatctl.platform import (
    DEV_TOKENS_FILE,
    PLATFORM_FILE,
    LocalPlatform,
    PlatformError,
    PlatformSettings,
)
from clients.chatctl.regions import REGIONS_FILE, print_background_summary, serve_regions

PID_FILE = "chatctl.pid"
BACKGROUND_LOG = "chatctl.log"
# How long `up --background` waits for the platform: a cold llama.cpp start included.
BACKGROUND_START_S = 300.0
# `up`'s flags that become PlatformSettings, and the settings' name for each.
SETTINGS_FLAGS = {
    "listen": "edge_listen",
    "nodes": "nodes",
    "pool": "pool",
    "schedulers": "schedulers",
    "gateways": "gateways",
    "etcd": "etcd_endpoint",
    "redis": "redis_url",
    "store": "store_url",
    "edge_workers": "edge_workers",
}


def pid_alive(pid: int) -> bool:
    """Whether pid is a live chatctl (a zombie or a recycled pid is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc to look closer: trust the signal
    with contextlib.suppress(OSError):
        if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return b"chatctl" in (proc / "cmdline").read_bytes()
    return False


def running_pid(state: Path) -> int | None:
    text = read_secret(state / PID_FILE)
    if text.isdigit() and pid_alive(int(text)):
        return int(text)
    return None


def refuse_second_platform(state: Path) -> None:
    pid = running_pid(state)
    if pid is not None:
        raise CtlError(f"a platform already runs from {state} (pid {pid}); `chatctl down` stops it")


def platform_settings(args: argparse.Namespace) -> PlatformSettings:
    settings = {name: getattr(args, flag) for flag, name in SETTINGS_FLAGS.items()}
    return PlatformSettings(state_dir=Path(args.state_dir), insecure=args.insecure, **settings)


def up(args: argparse.Namespace) -> Any:
    """The platform in the foreground (a coroutine), or detached with --background; with
    --regions, one platform per region and the global directory (clients/chatctl/regions.py)."""
    return up_background(args) if args.background else up_foreground(args)


def up_foreground(args: argparse.Namespace) -> Any:
    """The platform, or with --regions every region, until stopped (a coroutine)."""
    settings = None if getattr(args, "regions", None) else platform_settings(args)
    state = Path(args.state_dir).resolve() if settings is None else settings.state_dir
    state.mkdir(parents=True, exist_ok=True)
    refuse_second_platform(state)
    pid_file = state / PID_FILE
    # The owner's pid, so `chatctl down` can stop a foreground platform too.
    pid_file.write_text(f"{os.getpid()}\n")
    return serve_owning(args, state, settings)


async def serve_owning(
    args: argparse.Namespace, state: Path, settings: PlatformSettings | None
) -> int:
    """Serves until stopped, then gives the pid file up (when it is still this process's)."""
    pid_file = state / PID_FILE
    try:
        if settings is None:
            return await serve_regions(args, state)
        return await serve_platform(args, settings)
    finally:
        if read_secret(pid_file) == str(os.getpid()):
            pid_file.unlink(missing_ok=True)


async def serve_platform(args: argparse.Namespace, settings: PlatformSettings) -> int:
    quiet = args.json
    platform = LocalPlatform(
        settings,
        on_ready=None
        if quiet
        else lambda name, s: print(f"  {name:<12} ready ({s:4.1f} s)", flush=True),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if not quiet:
        print(f"starting the local platform ({args.nodes} node(s), llama.cpp + SmolLM2-135M)...")
    try:
        return await run_until_stopped(platform, args, settings, stop)
    except PlatformError as error:
        print(f"chatctl up: {error}", file=sys.stderr)
        return 1
    finally:
        # Whatever ended us (Ctrl-C, a failed start, a closed stdout), no child outlives us.
        await platform.stop()


async def run_until_stopped(
    platform: LocalPlatform,
    args: argparse.Namespace,
    settings: PlatformSettings,
    stop: asyncio.Event,
) -> int:
    await platform.start()
    summary = {
        "edge": platform.edge_url,
        "gateway": platform.gateway_address,
        "scheduler": platform.scheduler_address,
        "nodes": platform.node_addresses(),
        "tls_dir": str(platform.tls_dir or ""),
        "tokens_file": str(settings.state_dir / DEV_TOKENS_FILE),
        "tokens": platform.tokens,
    }
    if args.json:
        print_json(summary)
    else:
        print_up_summary(summary)
        print("Ctrl-C stops everything.", flush=True)
    await stop.wait()
    print("stopping...", flush=True)
    return 0


def print_up_summary(summary: dict[str, Any]) -> None:
    print(f"edge       {summary['edge']}")
    print(f"gateway    {summary['gateway']} (gRPC)")
    print(f"scheduler  {summary['scheduler']} (gRPC)")
    if summary["tls_dir"]:
        print(f"tls        mutual TLS; CA and certificates in {summary['tls_dir']}")
    else:
        print("tls        off: the services talk plaintext (--insecure)")
    print(f"free token {summary['tokens']['free']}")
    print(f"plus token {summary['tokens']['plus']}")
    print(f"tokens written to {summary['tokens_file']}")
    print("try:")
    print(
        f"  curl -N {summary['edge']}/v1/conversations/c1/messages "
        f"-H 'Authorization: Bearer {summary['tokens']['free']}' "
        "-H 'Content-Type: application/json' -d '{\"content\": \"Hello!\"}'"
    )


def up_child_argv(args: argparse.Namespace, state: Path) -> list[str]:
    """The foreground `up` that `up --background` detaches, with this command's settings."""
    flags = [f"--{flag.replace('_', '-')}={getattr(args, flag)}" for flag in SETTINGS_FLAGS]
    if args.insecure:
        flags.append("--insecure")
    if getattr(args, "regions", None):
        flags.append(f"--regions={','.join(args.regions)}")
    return [sys.executable, "-m", "clients.chatctl.main", "up", *flags, f"--state-dir={state}"]


def spawn_detached(argv: list[str], log: Path) -> int:
    """A process in its own session (the terminal's Ctrl-C never reaches it), no object kept:
    it outlives this command and is stopped by pid (`chatctl down`)."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True)


def up_background(args: argparse.Namespace) -> int:
    state = Path(args.state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    refuse_second_platform(state)
    # What the platform writes once up: every region's addresses with --regions.
    up_file = state / (REGIONS_FILE if getattr(args, "regions", None) else PLATFORM_FILE)
    up_file.unlink(missing_ok=True)
    log = state / BACKGROUND_LOG
    pid = spawn_detached(up_child_argv(args, state), log)
    wait_until_up(pid, up_file, log)
    summary = {**json.loads(up_file.read_text()), "pid": pid}
    if up_file.name == REGIONS_FILE:
        print_json(summary) if args.json else print_background_summary(summary, pid, log)
        return 0
    summary["tokens_file"] = str(state / DEV_TOKENS_FILE)
    summary["tokens"] = json.loads((state / DEV_TOKENS_FILE).read_text())
    if args.json:
        print_json(summary)
        return 0
    print_up_summary(summary)
    print(f"running in the background (pid {pid}, log {log}); `chatctl down` stops it.")
    return 0


def wait_until_up(pid: int, up_file: Path, log: Path) -> None:
    deadline = time.monotonic() + BACKGROUND_START_S
    while not up_file.exists():
        exited, status = os.waitpid(pid, os.WNOHANG)
        if exited:
            code = os.waitstatus_to_exitcode(status)
            raise CtlError(f"the platform did not start (exit {code}); see {log}")
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGTERM)
            raise CtlError(f"the platform was not up in {BACKGROUND_START_S:.0f} s; see {log}")
        time.sleep(0.1)


def down(args: argparse.Namespace) -> int:
    state = state_dir(args)
    pid = running_pid(state)
    if pid is None:
        (state / PID_FILE).unlink(missing_ok=True)
        raise CtlError(f"no platform is running from {state}")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise CtlError(
                f"pid {pid} still runs after {args.timeout:.0f} s; kill -9 {pid} ends it"
            )
        time.sleep(0.1)
    (state / PID_FILE).unlink(missing_ok=True)
    emit(
        args.json,
        {"stopped": True, "pid": pid, "state_dir": str(state)},
        f"stopped the platform (pid {pid}) of {state}",
    )
    return 0
