"""chatctl: the operators' command line. This module is its parser and dispatch; each
command lives in a module of its own (local, fleet, users, chat, plan, simulate).

Every command takes --json (machine-readable output). Errors print `chatctl: <reason>` on stderr
and exit 1; usage errors exit 2. Addresses, tokens and certificates come from flags (--scheduler,
--gateway, --admin-token, --token / --user, --tls-dir), else the environment (CHAT_SCHEDULER,
CHAT_GATEWAY, CHAT_ADMIN_TOKEN, CHAT_TOKEN, CHAT_TLS_DIR), else the context (--context, a named
platform such as a cluster: `chatctl context`), else the files `chatctl up` leaves in its state
dir (platform.json, admin-token, dev-tokens.json, tls/).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from clients.admin_client import TIERS
from clients.base import ClientError
from clients.chat_client import MODELS
from clients.chatctl.chat import chat, conversations, feedback, limits
from clients.chatctl.contexts import CONTEXT_ENV, CONTEXTS_ENV, DEFAULT_FILE, add_context_parser
from clients.chatctl.evaluate import add_eval_parser
from clients.chatctl.fleet import drain, ladder, nodes, undrain
from clients.chatctl.local import down, up
from clients.chatctl.output import CtlError
from clients.chatctl.plan import add_plan_parser, run_plan
from clients.chatctl.prompts import add_prompts_parser
from clients.chatctl.region_control import add_region_actions
from clients.chatctl.regions import list_regions, region_names, region_state_dir
from clients.chatctl.simulate import add_simulate_parser, run_simulate
from clients.chatctl.users import users
from clients.chatctl.versions import add_versions_parser
from domain.feedback import Rating
from infra.convert import AUTO_MODEL
from infra.directory import DEFAULT_PREFIX

# Flag types and the flags commands share --------------------------------------------------------


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def add_state_dir(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--state-dir", default=os.environ.get("CHAT_STATE_DIR", ".chat"), help=what)


def common_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--json", action="store_true", help="print machine-readable JSON")
    add_state_dir(flags, "where `chatctl up` keeps its files (default .chat, or CHAT_STATE_DIR)")
    flags.add_argument(
        "--region",
        metavar="NAME",
        help="the region of `chatctl up --regions` to act on (its files in "
        "STATE_DIR/regions/NAME); for `users create`, also the user's home",
    )
    return flags


def calling_flags() -> argparse.ArgumentParser:
    """The flags of commands that call a service over gRPC."""
    flags = argparse.ArgumentParser(add_help=False, parents=[common_flags()])
    flags.add_argument(
        "--tls-dir",
        metavar="DIR",
        help="the CA and operator certificate (ca.crt, operator.crt, operator.key) for a "
        "platform with mutual TLS (CHAT_TLS_DIR; default: the one `chatctl up` made)",
    )
    flags.add_argument(
        "--context",
        metavar="NAME",
        help=f"a named platform from the contexts file ({CONTEXT_ENV}; default: its current one)",
    )
    flags.add_argument(
        "--contexts", metavar="FILE", help=f"the contexts file ({CONTEXTS_ENV}; {DEFAULT_FILE})"
    )
    return flags


def admin_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False, parents=[calling_flags()])
    flags.add_argument("--scheduler", metavar="HOST:PORT", help="a scheduler (CHAT_SCHEDULER)")
    flags.add_argument("--admin-token", metavar="TOKEN", help="an admin token (CHAT_ADMIN_TOKEN)")
    return flags


def user_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False, parents=[calling_flags()])
    flags.add_argument("--gateway", metavar="HOST:PORT", help="a gateway (CHAT_GATEWAY)")
    who = flags.add_mutually_exclusive_group()
    who.add_argument("--token", metavar="TOKEN", help="a user's bearer token (CHAT_TOKEN)")
    who.add_argument(
        "--user", choices=("free", "plus"), help="a dev user of `chatctl up` (its dev-tokens.json)"
    )
    return flags


# The commands -----------------------------------------------------------------------------------


def add_up(commands: Any) -> None:
    up_parser = commands.add_parser("up", help="start the whole platform on this machine")
    up_parser.add_argument("--listen", default="127.0.0.1:8080", help="the edge's address")
    up_parser.add_argument(
        "--edge-workers",
        type=int,
        default=1,
        help="edge processes sharing its port (SO_REUSEPORT): one per core serves more streams",
    )
    up_parser.add_argument("--nodes", type=int, default=1, help="nodeagents to start")
    up_parser.add_argument("--pool", default="small", help="the model pool the nodes serve")
    add_state_dir(up_parser, "logs, database and dev tokens")
    up_parser.add_argument(
        "--schedulers",
        type=int,
        default=1,
        help="schedulers (more than 1 needs --etcd, or --regions: each region's own)",
    )
    up_parser.add_argument(
        "--etcd",
        default="",
        metavar="HOST:PORT",
        help="share membership and the ladder through this etcd",
    )
    up_parser.add_argument(
        "--gateways",
        type=int,
        default=1,
        help="gateways (more than 1 needs --redis: they share answers in flight)",
    )
    up_parser.add_argument(
        "--redis",
        default="",
        metavar="URL",
        help="token buckets and answers in flight in this Redis",
    )
    up_parser.add_argument(
        "--store",
        default="",
        metavar="URL",
        help="conversations in this store (postgresql://... or sqlite:///...)",
    )
    up_parser.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext between the services, for debugging (default: mutual TLS, with a "
        "throwaway CA and certificates in STATE_DIR/tls)",
    )
    up_parser.add_argument("--json", action="store_true", help="print the addresses as JSON")
    up_parser.add_argument(
        "--background", action="store_true", help="start detached; `chatctl down` stops it"
    )
    up_parser.add_argument(
        "--regions",
        type=region_names,
        metavar="A,B,C",
        help="start one whole platform per region and the global directory (in --etcd, else "
        "an etcd of its own); edges listen on --listen's port, the next, and so on",
    )
    up_parser.set_defaults(handler=up)


def add_down(commands: Any) -> None:
    down_parser = commands.add_parser(
        "down", parents=[common_flags()], help="stop the platform `chatctl up` started"
    )
    down_parser.add_argument(
        "--timeout", type=positive_float, default=90.0, help="seconds to wait for it to stop"
    )
    down_parser.set_defaults(handler=down)


def add_fleet(commands: Any) -> None:
    listing = commands.add_parser("nodes", parents=[admin_flags()], help="the fleet and its load")
    listing.add_argument("--pool", default="", help="only this pool's nodes")
    listing.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=positive_float,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    listing.set_defaults(handler=nodes)
    for name, handler, what in (
        ("drain", drain, "send no new answers to a node; running ones finish"),
        ("undrain", undrain, "let a drained node take answers again"),
    ):
        command = commands.add_parser(name, parents=[admin_flags()], help=what)
        command.add_argument("node", metavar="NODE")
        command.set_defaults(handler=handler)


def add_ladder(commands: Any) -> None:
    command = commands.add_parser(
        "ladder", parents=[admin_flags()], help="the shedding ladder; pin or unpin its rung"
    )
    move = command.add_mutually_exclusive_group()
    move.add_argument("--pin", type=int, choices=range(4), metavar="N", help="hold rung N (0-3)")
    move.add_argument("--unpin", action="store_true", help="let the ladder move by itself")
    command.set_defaults(handler=ladder)


def add_users(commands: Any) -> None:
    # Flags go after the action (`users list --json`): argparse would let an action's defaults
    # overwrite flags given before it.
    command = commands.add_parser("users", help="users and their tokens")
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")
    flags = [admin_flags()]
    create = actions.add_parser("create", parents=flags, help="a new user; prints its token")
    create.add_argument("user_id", metavar="ID")
    create.add_argument("--tier", choices=sorted(TIERS), default="free")
    create.add_argument(
        "--pinned", action="store_true", help="residency: never served outside its home region"
    )
    actions.add_parser("list", parents=flags, help="every user")
    tier = actions.add_parser("tier", parents=flags, help="move a user to another tier")
    tier.add_argument("user_id", metavar="ID")
    tier.add_argument("tier", choices=sorted(TIERS))
    for name, what in (
        ("rotate", "issue a new token"),
        ("revoke", "end every token"),
        ("delete", "the user, their conversations, ratings, captured prompts, memories and files"),
        ("memories", "export the user's personal memory"),
    ):
        actions.add_parser(name, parents=flags, help=what).add_argument("user_id", metavar="ID")
    forget = actions.add_parser(
        "forget", parents=flags, help="delete the memory entries named, or all of the user's"
    )
    forget.add_argument("user_id", metavar="ID")
    forget.add_argument("memory_ids", metavar="MEMORY_ID", nargs="*")
    command.set_defaults(handler=users)


def add_chat(commands: Any) -> None:
    command = commands.add_parser("chat", parents=[user_flags()], help="chat from this terminal")
    command.add_argument("--model", choices=sorted(MODELS), default=AUTO_MODEL)
    command.add_argument("--conversation", metavar="ID", help="continue this conversation")
    command.set_defaults(handler=chat)
    listing = commands.add_parser(
        "conversations", parents=[user_flags()], help="the user's conversations, newest first"
    )
    listing.add_argument("--limit", type=positive_int, default=20, help="at most this many")
    listing.set_defaults(handler=conversations)
    bucket = commands.add_parser("limits", parents=[user_flags()], help="the user's token bucket")
    bucket.set_defaults(handler=limits)
    rating = commands.add_parser(
        "feedback", parents=[user_flags()], help="rate one of the user's answers up or down"
    )
    rating.add_argument("message_id", metavar="MESSAGE_ID", help="the answer's id (...answer)")
    rating.add_argument("rating", choices=[r.value for r in Rating])
    rating.add_argument("--comment", default="", help="why, at most 2000 characters")
    rating.set_defaults(handler=feedback)


def add_versions(commands: Any) -> None:
    add_versions_parser(commands, admin_flags())


def add_prompts(commands: Any) -> None:
    add_prompts_parser(commands, admin_flags())


def add_eval(commands: Any) -> None:
    add_eval_parser(commands, admin_flags())


def add_plan(commands: Any) -> None:
    add_plan_parser(commands).set_defaults(handler=run_plan)


def add_simulate(commands: Any) -> None:
    add_simulate_parser(commands).set_defaults(handler=run_simulate)


def add_regions(commands: Any) -> None:
    command = commands.add_parser(
        "regions", parents=[common_flags()], help="the regions: capacity, rung and age"
    )
    command.add_argument(
        "--etcd", default="", metavar="HOST:PORT", help="the global directory's etcd"
    )
    command.add_argument("--prefix", default=DEFAULT_PREFIX, help="the directory's key prefix")
    command.set_defaults(handler=list_regions)
    add_region_actions(command)


def add_context(commands: Any) -> None:
    add_context_parser(commands, common_flags())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatctl", description="operate the chat platform")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        add_up,
        add_down,
        add_fleet,
        add_ladder,
        add_users,
        add_versions,
        add_prompts,
        add_eval,
        add_chat,
        add_plan,
        add_simulate,
        add_context,
        add_regions,
    ):
        add(commands)
    return parser


def check_up(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if min(args.nodes, args.schedulers, args.gateways) < 1:
        parser.error("--nodes, --schedulers and --gateways must be at least 1")
    # With --regions the directory's etcd (given or started) holds each region's share.
    if args.schedulers > 1 and not args.etcd and not args.regions:
        parser.error("more than one scheduler needs --etcd (or --regions)")
    if args.gateways > 1 and not args.redis:
        parser.error("more than one gateway needs --redis")


def dispatch(args: argparse.Namespace) -> int:
    """Runs the command's handler: a coroutine (most talk gRPC) or a plain result."""
    result = args.handler(args)
    return int(asyncio.run(result) if inspect.iscoroutine(result) else result)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "up":
        check_up(parser, args)
    if getattr(args, "region", None):
        args.state_dir = str(region_state_dir(Path(args.state_dir), args.region))
    try:
        return dispatch(args)
    except (ClientError, CtlError) as error:
        print(f"chatctl: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`chatctl users list | head`): not an error worth a trace.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
