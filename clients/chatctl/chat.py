"""A user's commands: `chat` from the terminal, `conversations` and `limits`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import threading

from clients.base import ClientError
from clients.chat_client import (
    ChatClient,
    ChatEvent,
    Delta,
    Done,
    Error,
    Meta,
    Retract,
    new_conversation_id,
    new_message_id,
)
from clients.chatctl.addresses import chat_client
from clients.chatctl.output import (
    duration,
    emit,
    note,
    percent,
    plain,
    print_json,
    shorten,
    table_or,
    when,
)

# conversations, limits --------------------------------------------------------------------------


async def conversations(args: argparse.Namespace) -> int:
    async with chat_client(args) as client:
        found = await client.conversations(args.limit)
    rows = [
        [c.conversation_id, shorten(c.title, 40), c.model, c.total_tokens, when(c.updated_at)]
        for c in found
    ]
    headers = ("CONVERSATION", "TITLE", "MODEL", "TOKENS", "UPDATED")
    emit(args.json, found, table_or(headers, rows, "no conversations"))
    return 0


async def feedback(args: argparse.Namespace) -> int:
    """Rates one of the user's answers (rating again replaces the rating)."""
    async with chat_client(args) as client:
        rated = await client.rate(args.message_id, args.rating, args.comment)
    version = f" (version {rated.version})" if rated.version else ""
    emit(args.json, rated, f"rated {rated.message_id} {rated.rating}{version}")
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
            case Retract():
                # Printed text cannot be taken back reliably (it may have wrapped or
                # scrolled), so the withdrawal is said; the refusal follows on its own line.
                print(flush=True)
                note("[the text above was withdrawn: the output check flagged it]")
            case Error():
                print(flush=True)
                self.failed = True
                note(f"chatctl: {event.message} ({event.code})")
            case Meta():
                # A pool other than the one asked for is said, with why ("tier": Free
                # cannot pick one); "router" only says auto was asked for.
                moved = event.pool_reason not in ("", "router")
                why = f"; the {event.pool} pool: {event.pool_reason}" if moved else ""
                note(f"[{event.model} on {event.replica_id}{why}]")


async def chat(args: argparse.Namespace) -> int:
    async with chat_client(args) as client:
        return await ChatSession(client, args).run()
