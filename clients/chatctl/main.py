"""chatctl: the operators' command line.

Every command takes --json (machine-readable output). Errors print `chatctl: <reason>` on stderr
and exit 1; usage errors exit 2. Addresses and tokens come from flags (--scheduler, --gateway,
--admin-token, --token / --user), else the environment (CHAT_SCHEDULER, CHAT_GATEWAY,
CHAT_ADMIN_TOKEN, CHAT_TOKEN), else the files `chatctl up` leaves in its state dir
(platform.json, admin-token, dev-tokens.json).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clients.chat_client import (
    MODELS,
    TIERS,
    AdminClient,
    ChatClient,
    ChatEvent,
    ClientError,
    Delta,
    Done,
    Error,
    Ladder,
    Meta,
    Node,
    new_conversation_id,
    new_message_id,
)
from clients.chatctl.platform import (
    ADMIN_TOKEN_FILE,
    DEV_TOKENS_FILE,
    PLATFORM_FILE,
    LocalPlatform,
    PlatformError,
    PlatformSettings,
)

# plan.py is written separately; chatctl must work before (or without) it.
PLAN_MISSING = ""
try:
    from clients.chatctl.plan import add_plan_parser, run_plan
except ImportError as missing_plan:
    add_plan_parser = run_plan = None  # type: ignore[assignment]
    PLAN_MISSING = str(missing_plan)

PID_FILE = "chatctl.pid"
BACKGROUND_LOG = "chatctl.log"
# How long `up --background` waits for the platform: a cold llama.cpp start included.
BACKGROUND_START_S = 300.0


class CtlError(Exception):
    """A failure chatctl explains itself (no address, nothing running...): exit 1."""


# Output -----------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """Dataclasses, datetimes and lists as JSON values."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    print(json.dumps(plain(value)), flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60)}s"
    return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60)}m"


def percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def when(at: datetime) -> str:
    return at.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def note(text: str) -> None:
    """Chrome for people (prompts, summaries) goes to stderr, so stdout stays the data."""
    print(text, file=sys.stderr, flush=True)


# Where the platform is ------------------------------------------------------------------------


def state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir)


def platform_state(args: argparse.Namespace) -> dict[str, Any]:
    path = state_dir(args) / PLATFORM_FILE
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise CtlError(f"cannot read {path}: {error}") from error


def read_secret(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def resolve(flag: str | None, env: str, fallback: Callable[[], str], what: str) -> str:
    value = flag or os.environ.get(env) or fallback()
    if not value:
        option = "--" + what.replace(" address", "").replace(" ", "-")
        raise CtlError(
            f"no {what}: pass {option}, set {env}, or start a platform with `chatctl up`"
        )
    return value


def scheduler_address(args: argparse.Namespace) -> str:
    return resolve(
        args.scheduler,
        "CHAT_SCHEDULER",
        lambda: str(platform_state(args).get("scheduler", "")),
        "scheduler address",
    )


def gateway_address(args: argparse.Namespace) -> str:
    return resolve(
        args.gateway,
        "CHAT_GATEWAY",
        lambda: str(platform_state(args).get("gateway", "")),
        "gateway address",
    )


def admin_token(args: argparse.Namespace) -> str:
    return resolve(
        args.admin_token,
        "CHAT_ADMIN_TOKEN",
        lambda: read_secret(state_dir(args) / ADMIN_TOKEN_FILE),
        "admin token",
    )


def dev_token(args: argparse.Namespace, user: str) -> str:
    path = state_dir(args) / DEV_TOKENS_FILE
    try:
        return str(json.loads(path.read_text()).get(user, ""))
    except FileNotFoundError:
        return ""
    except (OSError, ValueError) as error:
        raise CtlError(f"cannot read {path}: {error}") from error


def user_token(args: argparse.Namespace) -> str:
    """--token, else --user's dev token, else CHAT_TOKEN, else the dev Free user's token."""
    if args.user:
        token = dev_token(args, args.user)
        if not token:
            raise CtlError(f"no {args.user} token in {state_dir(args) / DEV_TOKENS_FILE}")
        return token
    return resolve(args.token, "CHAT_TOKEN", lambda: dev_token(args, "free"), "token")


def admin_client(args: argparse.Namespace) -> AdminClient:
    return AdminClient(scheduler_address(args), admin_token(args))


def chat_client(args: argparse.Namespace) -> ChatClient:
    return ChatClient(gateway_address(args), user_token(args))


# up / down --------------------------------------------------------------------------------------


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
    return PlatformSettings(
        state_dir=Path(args.state_dir),
        edge_listen=args.listen,
        nodes=args.nodes,
        pool=args.pool,
        schedulers=args.schedulers,
        etcd_endpoint=args.etcd,
        redis_url=args.redis,
        store_url=args.store,
    )


async def up(args: argparse.Namespace) -> int:
    settings = platform_settings(args)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    refuse_second_platform(settings.state_dir)
    pid_file = settings.state_dir / PID_FILE
    # The owner's pid, so `chatctl down` can stop a foreground platform too.
    pid_file.write_text(f"{os.getpid()}\n")
    try:
        return await serve_platform(args, settings)
    finally:
        if read_secret(pid_file) == str(os.getpid()):
            pid_file.unlink(missing_ok=True)


async def serve_platform(args: argparse.Namespace, settings: PlatformSettings) -> int:
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
        "tokens_file": str(settings.state_dir / DEV_TOKENS_FILE),
        "tokens": platform.tokens,
    }
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        print_up_summary(summary)
        print("Ctrl-C stops everything.", flush=True)
    await stop.wait()
    print("stopping...", flush=True)
    await platform.stop()
    print("stopped.")
    return 0


def print_up_summary(summary: dict[str, Any]) -> None:
    print(f"edge       {summary['edge']}")
    print(f"gateway    {summary['gateway']} (gRPC)")
    print(f"scheduler  {summary['scheduler']} (gRPC)")
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
    return [
        sys.executable,
        "-m",
        "clients.chatctl.main",
        "up",
        f"--listen={args.listen}",
        f"--nodes={args.nodes}",
        f"--pool={args.pool}",
        f"--state-dir={state}",
        f"--schedulers={args.schedulers}",
        f"--etcd={args.etcd}",
        f"--redis={args.redis}",
        f"--store={args.store}",
    ]


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
    (state / PLATFORM_FILE).unlink(missing_ok=True)
    log = state / BACKGROUND_LOG
    pid = spawn_detached(up_child_argv(args, state), log)
    wait_until_up(pid, state, log)
    summary = {**json.loads((state / PLATFORM_FILE).read_text()), "pid": pid}
    summary["tokens_file"] = str(state / DEV_TOKENS_FILE)
    summary["tokens"] = json.loads((state / DEV_TOKENS_FILE).read_text())
    if args.json:
        print_json(summary)
        return 0
    print_up_summary(summary)
    print(f"running in the background (pid {pid}, log {log}); `chatctl down` stops it.")
    return 0


def wait_until_up(pid: int, state: Path, log: Path) -> None:
    deadline = time.monotonic() + BACKGROUND_START_S
    while not (state / PLATFORM_FILE).exists():
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
    if args.json:
        print_json({"stopped": True, "pid": pid, "state_dir": str(state)})
    else:
        print(f"stopped the platform (pid {pid}) of {state}")
    return 0


# nodes, drain, undrain --------------------------------------------------------------------------


def report_age_s(node: Node, now: datetime) -> float | None:
    # A scheduler that stamps reports with its monotonic clock instead of wall time sends a
    # 1970 date; an age computed from it would be nonsense, so there is none.
    if node.last_report_at.year < 2000:
        return None
    return (now - node.last_report_at).total_seconds()


def node_rows(nodes: Sequence[Node], now: datetime) -> list[list[object]]:
    return [
        [
            n.node_id,
            n.model,
            n.pool,
            n.state,
            percent(n.kv_usage),
            n.free_kv_tokens,
            n.queued_prefill_tokens,
            n.running_requests,
            n.waiting_requests,
            percent(n.prefix_hit_rate),
            "?" if (age := report_age_s(n, now)) is None else duration(age),
        ]
        for n in nodes
    ]


NODE_HEADERS = (
    "NODE",
    "MODEL",
    "POOL",
    "STATE",
    "KV%",
    "FREE KV",
    "QUEUED PREFILL",
    "RUNNING",
    "WAITING",
    "PREFIX HIT",
    "AGE",
)


async def show_nodes(admin: AdminClient, args: argparse.Namespace) -> None:
    nodes = await admin.nodes(args.pool)
    now = datetime.now(UTC)
    if args.json:
        print_json([{**plain(n), "last_report_age_s": report_age_s(n, now)} for n in nodes])
    elif nodes:
        print(table(NODE_HEADERS, node_rows(nodes, now)), flush=True)
    else:
        print("no nodes", flush=True)


async def nodes(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        if args.watch is None:
            await show_nodes(admin, args)
            return 0
        await watch(lambda: show_nodes(admin, args), args.watch, args.json)
    return 0


async def watch(render: Callable[[], Any], every_s: float, as_json: bool) -> None:
    """Renders until Ctrl-C; a terminal is redrawn in place, a pipe gets one block per tick."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    while not stop.is_set():
        if not as_json and sys.stdout.isatty():
            print("\x1b[H\x1b[2J", end="")
            print(f"every {every_s:g}s, Ctrl-C stops    {datetime.now().strftime('%H:%M:%S')}\n")
        await render()
        if not as_json and not sys.stdout.isatty():
            print(flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


async def drain(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        await admin.drain(args.node)
    if args.json:
        print_json({"node_id": args.node, "draining": True})
    else:
        print(f"node {args.node} is draining: no new answers go to it, running ones finish")
    return 0


async def undrain(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        await admin.undrain(args.node)
    if args.json:
        print_json({"node_id": args.node, "draining": False})
    else:
        print(f"node {args.node} takes new answers again")
    return 0


# ladder -----------------------------------------------------------------------------------------

HISTORY_SHOWN = 10


def print_ladder(state: Ladder) -> None:
    print(f"rung        {state.rung}{' (pinned)' if state.pinned else ''}")
    print(f"busy share  {percent(state.busy_share)}  (the large pool's, at the last tick)")
    print(f"pinned      {'yes' if state.pinned else 'no'}")
    print(f"leading     {'yes' if state.leading else 'no'}  (whether this scheduler moves it)")
    if not state.history:
        print("history     none")
        return
    print(f"history     (newest last; {len(state.history)} kept)")
    rows = [
        [when(c.at), c.from_rung, c.to_rung, percent(c.busy_share), c.reason]
        for c in state.history[-HISTORY_SHOWN:]
    ]
    print(table(("AT", "FROM", "TO", "BUSY", "REASON"), rows), flush=True)


async def ladder(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        if args.pin is not None:
            state = await admin.pin(args.pin)
        elif args.unpin:
            state = await admin.pin(None)
        else:
            state = await admin.ladder()
    if args.json:
        print_json(state)
    else:
        print_ladder(state)
    return 0


# users ------------------------------------------------------------------------------------------


async def users_create(admin: AdminClient, args: argparse.Namespace) -> None:
    created = await admin.create_user(args.user_id, args.tier)
    if args.json:
        print_json(created)
        return
    print(f"created user {created.user.user_id} ({created.user.tier})")
    print(f"token {created.token}")
    note("the token is shown once: the platform keeps only its hash")


async def users_list(admin: AdminClient, args: argparse.Namespace) -> None:
    found = await admin.users()
    if args.json:
        print_json(found)
        return
    rows = [[u.user_id, u.tier, "yes" if u.has_token else "no", when(u.created_at)] for u in found]
    print(table(("USER", "TIER", "TOKEN", "CREATED"), rows) if rows else "no users")


async def users_tier(admin: AdminClient, args: argparse.Namespace) -> None:
    user = await admin.set_tier(args.user_id, args.tier)
    if args.json:
        print_json(user)
    else:
        print(f"user {user.user_id} is now {user.tier}")


async def users_rotate(admin: AdminClient, args: argparse.Namespace) -> None:
    token = await admin.rotate_token(args.user_id)
    if args.json:
        print_json({"user_id": args.user_id, "token": token})
        return
    print(f"token {token}")
    note(f"{args.user_id}'s old token no longer works; this one is shown once")


async def users_revoke(admin: AdminClient, args: argparse.Namespace) -> None:
    await admin.revoke_tokens(args.user_id)
    if args.json:
        print_json({"user_id": args.user_id, "revoked": True})
    else:
        print(f"user {args.user_id} has no working token now (`chatctl users rotate` issues one)")


USER_ACTIONS = {
    "create": users_create,
    "list": users_list,
    "tier": users_tier,
    "rotate": users_rotate,
    "revoke": users_revoke,
}


async def users(args: argparse.Namespace) -> int:
    async with admin_client(args) as admin:
        await USER_ACTIONS[args.action](admin, args)
    return 0


# conversations, limits --------------------------------------------------------------------------


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


async def conversations(args: argparse.Namespace) -> int:
    async with chat_client(args) as client:
        found = await client.conversations(args.limit)
    if args.json:
        print_json(found)
        return 0
    rows = [
        [c.conversation_id, shorten(c.title, 40), c.model, c.total_tokens, when(c.updated_at)]
        for c in found
    ]
    headers = ("CONVERSATION", "TITLE", "MODEL", "TOKENS", "UPDATED")
    print(table(headers, rows) if rows else "no conversations")
    return 0


async def limits(args: argparse.Namespace) -> int:
    async with chat_client(args) as client:
        bucket = await client.limits()
    if args.json:
        print_json(bucket)
        return 0
    share = bucket.level / bucket.capacity if bucket.capacity else 0.0
    full = "now" if bucket.full_in_seconds <= 0 else f"in {duration(bucket.full_in_seconds)}"
    print(f"tier     {bucket.tier}")
    print(f"level    {bucket.level:,.0f} of {bucket.capacity:,.0f} tokens ({percent(share)})")
    print(f"refill   {bucket.refill_per_second:,.2f} tokens/s")
    print(f"full     {full}")
    return 0


# chat -------------------------------------------------------------------------------------------

INTERRUPT = object()  # Ctrl-C at the prompt, queued like a line so one loop handles both


def read_lines_into(queue: asyncio.Queue[object], loop: asyncio.AbstractEventLoop) -> None:
    """Feeds stdin's lines to the loop from a daemon thread (a blocking read never holds up
    the exit); None marks the end of input."""

    def pump() -> None:
        for line in sys.stdin:
            if not put(line.rstrip("\n")):
                return
        put(None)

    def put(item: object) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop has closed: chatctl is exiting
            return False
        return True

    threading.Thread(target=pump, name="stdin", daemon=True).start()


class ChatSession:
    """One terminal chat: a prompt, then the answer streamed; Ctrl-C stops the answer."""

    def __init__(self, client: ChatClient, args: argparse.Namespace) -> None:
        self.client = client
        self.args = args
        self.conversation_id = args.conversation or new_conversation_id()
        self.inbox: asyncio.Queue[object] = asyncio.Queue()
        self.answering: str | None = None  # the message id of the answer on screen
        self.stops: set[asyncio.Task[None]] = set()
        self.failed = False

    def on_interrupt(self) -> None:
        if self.answering is None:
            self.inbox.put_nowait(INTERRUPT)
            return
        task = asyncio.create_task(self.stop(self.answering))
        self.stops.add(task)
        task.add_done_callback(self.stops.discard)

    async def stop(self, message_id: str) -> None:
        note("\n[stopping the answer]")
        try:
            await self.client.stop(message_id)
        except ClientError as error:
            note(f"chatctl: could not stop {message_id}: {error}")

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self.on_interrupt)
        read_lines_into(self.inbox, loop)
        note(
            f"conversation {self.conversation_id} (model {self.args.model}); "
            "Ctrl-C stops an answer, Ctrl-D exits"
        )
        while (line := await self.prompt()) is not None:
            if line.strip():
                await self.turn(line)
        return 1 if self.failed else 0

    async def prompt(self) -> str | None:
        if sys.stdin.isatty():
            print("> ", end="", file=sys.stderr, flush=True)
        line = await self.inbox.get()
        if line is INTERRUPT and sys.stdin.isatty():
            note("")  # leave the prompt's line before the shell prints its own
        return line if isinstance(line, str) else None

    async def turn(self, content: str) -> None:
        self.answering = new_message_id()
        events = self.client.send(
            self.conversation_id, content, self.answering, model=self.args.model
        )
        try:
            async with contextlib.aclosing(events):
                async for event in events:
                    self.show(event)
        except ClientError as error:
            self.failed = True
            note(f"chatctl: {error}")
        finally:
            self.answering = None
            await asyncio.gather(*self.stops)

    def show(self, event: ChatEvent) -> None:
        if self.args.json:
            print_json({"event": type(event).__name__.lower(), **plain(event)})
            return
        match event:
            case Delta():
                print(event.text, end="", flush=True)
            case Done():
                print(flush=True)
                u = event.usage
                note(
                    f"[{event.finish}; {u.input_tokens} tokens in "
                    f"({u.cached_tokens} cached), {u.output_tokens} out]"
                )
            case Error():
                print(flush=True)
                self.failed = True
                note(f"chatctl: {event.message} ({event.code})")
            case Meta():
                note(f"[{event.model} on {event.replica_id}]")


async def chat(args: argparse.Namespace) -> int:
    async with chat_client(args) as client:
        return await ChatSession(client, args).run()


# plan -------------------------------------------------------------------------------------------


def plan_unavailable(args: argparse.Namespace) -> int:
    raise CtlError(f"plan is not available in this build ({PLAN_MISSING})")


# The parser -------------------------------------------------------------------------------------


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


def common_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--json", action="store_true", help="print machine-readable JSON")
    flags.add_argument(
        "--state-dir",
        default=os.environ.get("CHAT_STATE_DIR", ".chat"),
        help="where `chatctl up` keeps its files (default .chat, or CHAT_STATE_DIR)",
    )
    return flags


def admin_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False, parents=[common_flags()])
    flags.add_argument("--scheduler", metavar="HOST:PORT", help="a scheduler (CHAT_SCHEDULER)")
    flags.add_argument("--admin-token", metavar="TOKEN", help="an admin token (CHAT_ADMIN_TOKEN)")
    return flags


def user_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False, parents=[common_flags()])
    flags.add_argument("--gateway", metavar="HOST:PORT", help="a gateway (CHAT_GATEWAY)")
    who = flags.add_mutually_exclusive_group()
    who.add_argument("--token", metavar="TOKEN", help="a user's bearer token (CHAT_TOKEN)")
    who.add_argument(
        "--user", choices=("free", "plus"), help="a dev user of `chatctl up` (its dev-tokens.json)"
    )
    return flags


def add_up(commands: Any) -> None:
    up_parser = commands.add_parser("up", help="start the whole platform on this machine")
    up_parser.add_argument("--listen", default="127.0.0.1:8080", help="the edge's address")
    up_parser.add_argument("--nodes", type=int, default=1, help="nodeagents to start")
    up_parser.add_argument("--pool", default="small", help="the model pool the nodes serve")
    up_parser.add_argument(
        "--state-dir",
        default=os.environ.get("CHAT_STATE_DIR", ".chat"),
        help="logs, database and dev tokens",
    )
    up_parser.add_argument(
        "--schedulers", type=int, default=1, help="schedulers (more than 1 needs --etcd)"
    )
    up_parser.add_argument(
        "--etcd",
        default="",
        metavar="HOST:PORT",
        help="share membership and the ladder through this etcd",
    )
    up_parser.add_argument("--redis", default="", metavar="URL", help="token buckets in this Redis")
    up_parser.add_argument(
        "--store",
        default="",
        metavar="URL",
        help="conversations in this store (postgresql://... or sqlite:///...)",
    )
    up_parser.add_argument("--json", action="store_true", help="print the addresses as JSON")
    up_parser.add_argument(
        "--background", action="store_true", help="start detached; `chatctl down` stops it"
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
    actions.add_parser("list", parents=flags, help="every user")
    tier = actions.add_parser("tier", parents=flags, help="move a user to another tier")
    tier.add_argument("user_id", metavar="ID")
    tier.add_argument("tier", choices=sorted(TIERS))
    for name, what in (("rotate", "issue a new token"), ("revoke", "end every token")):
        actions.add_parser(name, parents=flags, help=what).add_argument("user_id", metavar="ID")
    command.set_defaults(handler=users)


def add_chat(commands: Any) -> None:
    command = commands.add_parser("chat", parents=[user_flags()], help="chat from this terminal")
    command.add_argument("--model", choices=sorted(MODELS), default="auto")
    command.add_argument("--conversation", metavar="ID", help="continue this conversation")
    command.set_defaults(handler=chat)
    listing = commands.add_parser(
        "conversations", parents=[user_flags()], help="the user's conversations, newest first"
    )
    listing.add_argument("--limit", type=positive_int, default=20, help="at most this many")
    listing.set_defaults(handler=conversations)
    bucket = commands.add_parser("limits", parents=[user_flags()], help="the user's token bucket")
    bucket.set_defaults(handler=limits)


def add_plan(commands: Any) -> None:
    if add_plan_parser is not None:
        add_plan_parser(commands)
        return
    command = commands.add_parser("plan", help="capacity planner (not available in this build)")
    command.add_argument("rest", nargs=argparse.REMAINDER)
    command.set_defaults(handler=plan_unavailable)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatctl", description="operate the chat platform")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_up, add_down, add_fleet, add_ladder, add_users, add_chat, add_plan):
        add(commands)
    return parser


def check_up(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.nodes < 1 or args.schedulers < 1:
        parser.error("--nodes and --schedulers must be at least 1")
    if args.schedulers > 1 and not args.etcd:
        parser.error("more than one scheduler needs --etcd")


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "plan" and run_plan is not None:
        return int(run_plan(args))
    if args.command == "up" and args.background:
        return up_background(args)
    result = args.handler(args)
    return int(asyncio.run(result) if inspect.iscoroutine(result) else result)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "up":
        check_up(parser, args)
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
