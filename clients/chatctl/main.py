"""chatctl: the operators' command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path

from clients.chatctl.platform import LocalPlatform, PlatformError, PlatformSettings


async def _up(args: argparse.Namespace) -> int:
    settings = PlatformSettings(
        state_dir=Path(args.state_dir),
        edge_listen=args.listen,
        nodes=args.nodes,
        pool=args.pool,
        schedulers=args.schedulers,
        etcd_endpoint=args.etcd,
        redis_url=args.redis,
        store_url=args.store,
    )
    platform = LocalPlatform(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"starting the local platform ({args.nodes} node(s), llama.cpp + SmolLM2-135M)...")
    try:
        await platform.start()
    except PlatformError as error:
        print(f"chatctl up: {error}", file=sys.stderr)
        await platform.stop()
        return 1
    summary = {
        "edge": platform.edge_url,
        "gateway": platform.gateway_address,
        "scheduler": platform.scheduler_address,
        "nodes": platform.node_addresses(),
        "tokens_file": str(settings.state_dir / "dev-tokens.json"),
        "tokens": platform.tokens,
    }
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print(f"edge       {platform.edge_url}")
        print(f"gateway    {platform.gateway_address} (gRPC)")
        print(f"scheduler  {platform.scheduler_address} (gRPC)")
        print(f"free token {platform.tokens['free']}")
        print(f"plus token {platform.tokens['plus']}")
        print(f"tokens written to {summary['tokens_file']}")
        print("try:")
        print(
            f"  curl -N {platform.edge_url}/v1/conversations/c1/messages "
            f"-H 'Authorization: Bearer {platform.tokens['free']}' "
            "-H 'Content-Type: application/json' -d '{\"content\": \"Hello!\"}'"
        )
        print("Ctrl-C stops everything.", flush=True)
    await stop.wait()
    print("stopping...", flush=True)
    await platform.stop()
    print("stopped.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chatctl", description="operate the chat platform")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the whole platform on this machine")
    up.add_argument("--listen", default="127.0.0.1:8080", help="the edge's address")
    up.add_argument("--nodes", type=int, default=1, help="nodeagents to start")
    up.add_argument("--pool", default="small", help="the model pool the nodes serve")
    up.add_argument("--state-dir", default=".chat", help="logs, database and dev tokens")
    up.add_argument(
        "--schedulers", type=int, default=1, help="schedulers (more than 1 needs --etcd)"
    )
    up.add_argument(
        "--etcd",
        default="",
        metavar="HOST:PORT",
        help="share membership and the ladder through this etcd",
    )
    up.add_argument("--redis", default="", metavar="URL", help="token buckets in this Redis")
    up.add_argument(
        "--store",
        default="",
        metavar="URL",
        help="conversations in this store (postgresql://... or sqlite:///...)",
    )
    up.add_argument("--json", action="store_true", help="print the addresses as JSON")
    args = parser.parse_args(argv)
    if args.command == "up":
        if args.nodes < 1 or args.schedulers < 1:
            parser.error("--nodes and --schedulers must be at least 1")
        if args.schedulers > 1 and not args.etcd:
            parser.error("more than one scheduler needs --etcd")
        return asyncio.run(_up(args))
    return 2


if __name__ == "__main__":
    sys.exit(main())
