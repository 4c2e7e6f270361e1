"""Simulated GPU replicas as OpenAI-compatible HTTP servers, many in one process, one port each:
the engines the peer routers route to in the GPU-scale race (bench/sim_race.py).

Each replica is `nodeagent.sim.SimEngine`, the very engine a nodeagent runs in its own process
with engine `sim` (domain/replica_sim.py's step loop on a GPU's hardware model, paced in real
time by `speed`), so a peer's replica and a platform node are one model: the same batching,
queueing, prefix cache, tokenizer and answers. The HTTP front is here, in bench/, because
only the benches need it: a nodeagent holds its simulated engine in process and never talks
to one over HTTP.

    POST /v1/chat/completions   messages (system, user, assistant), max_tokens, stream,
                                stream_options.include_usage; answers Plus-priority, as the
                                race's platform user is; usage.prompt_tokens_details
                                .cached_tokens is what the replica's prefix cache held
    GET  /health, /v1/models    up, and the model's name
    GET  /metrics               sim:prompt_tokens_total (read, cached excluded),
                                sim:cached_tokens_total, sim:requests_total

Every answer names its replica: the X-Replica header and each chunk's system_fingerprint (a
router passes the body through untouched even where it drops headers), so the race can tell
which replica a peer chose.

    .venv/bin/python bench/sim_server.py --replicas 16 --speed 0.05 --ready-file ready.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from domain.replica_hardware import PRESETS
from domain.types import Role, Tier
from nodeagent.engine import Chunk, EngineError, Finished, GenerationRequest, PromptTurn
from nodeagent.sim import SimEngine

ROLES = {Role.SYSTEM.value: Role.SYSTEM, Role.USER.value: Role.USER,
         Role.ASSISTANT.value: Role.ASSISTANT}  # fmt: skip
DEFAULT_MAX_TOKENS = 256


class BadRequest(ValueError):
    pass


@dataclass
class Counts:
    requests: int = 0
    prompt_tokens: int = 0  # read by the replica: cached tokens excluded
    cached_tokens: int = 0


def turns_of(body: object) -> tuple[tuple[PromptTurn, ...], int, bool, bool]:
    """(turns, max_tokens, stream, include_usage) of a chat completion request, or BadRequest
    with the reason."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    turns = []
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role not in ROLES:
            raise BadRequest(f"messages[{index}].role must be one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            raise BadRequest(f"messages[{index}].content must be a string")
        turns.append(PromptTurn(ROLES[role], content))
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("max_tokens must be a whole number of at least 1")
    options = body.get("stream_options") or {}
    return tuple(turns), max_tokens, bool(body.get("stream")), bool(options.get("include_usage"))


def error(status: int, message: str) -> web.Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


class Replica:
    """One simulated replica behind its own port."""

    def __init__(self, name: str, engine: SimEngine) -> None:
        self.name = name
        self.engine = engine
        self.counts = Counts()
        self.url = ""
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/chat/completions", self.completions)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        await self.engine.start()
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{host}:{bound}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self.engine.stop()

    async def health(self, request: web.Request) -> web.Response:
        if await self.engine.healthy():
            return web.json_response({"status": "ok"})
        return error(503, "the simulated engine is not running")

    async def models(self, request: web.Request) -> web.Response:
        model = {"id": self.engine.model, "object": "model", "owned_by": "sim"}
        return web.json_response({"object": "list", "data": [model]})

    async def metrics(self, request: web.Request) -> web.Response:
        c = self.counts
        text = (
            f"sim:requests_total {c.requests}\n"
            f"sim:prompt_tokens_total {c.prompt_tokens}\n"
            f"sim:cached_tokens_total {c.cached_tokens}\n"
        )
        return web.Response(text=text, content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            turns, max_tokens, stream, include_usage = turns_of(await request.json())
        except json.JSONDecodeError:
            return error(400, "the body is not JSON")
        except BadRequest as exc:
            return error(400, str(exc))
        generation = GenerationRequest(
            f"chatcmpl-{uuid.uuid4().hex[:16]}", turns, max_tokens, tier=Tier.PLUS
        )
        if stream:
            return await self._stream(request, generation, include_usage)
        return await self._whole(generation)

    def _chunk(self, request_id: str, choices: list[dict], usage: dict | None = None) -> bytes:
        event = {"id": request_id, "object": "chat.completion.chunk",
                 "created": int(time.time()), "model": self.engine.model,
                 "system_fingerprint": self.name, "choices": choices}  # fmt: skip
        if usage is not None:
            event["usage"] = usage
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    def _usage(self, finished: Finished) -> dict:
        usage = finished.usage
        self.counts.requests += 1
        self.counts.prompt_tokens += usage.input_tokens - usage.cached_tokens
        self.counts.cached_tokens += usage.cached_tokens
        return {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        }

    async def _stream(
        self, request: web.Request, generation: GenerationRequest, include_usage: bool
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                     "X-Replica": self.name},
        )  # fmt: skip
        await response.prepare(request)
        rid = generation.request_id
        first = {"role": "assistant", "content": ""}
        await response.write(
            self._chunk(rid, [{"index": 0, "delta": first, "finish_reason": None}])
        )
        try:
            async for item in self.engine.generate(generation):
                if isinstance(item, Chunk):
                    delta = {"content": item.text}
                    choice = {"index": 0, "delta": delta, "finish_reason": None}
                    await response.write(self._chunk(rid, [choice]))
                    continue
                usage = self._usage(item)
                end = {"index": 0, "delta": {}, "finish_reason": item.finish.value}
                await response.write(self._chunk(rid, [end]))
                if include_usage:
                    await response.write(self._chunk(rid, [], usage))
        except EngineError as exc:
            failure = {"error": {"message": str(exc), "type": "server_error"}}
            await response.write(b"data: " + json.dumps(failure).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _whole(self, generation: GenerationRequest) -> web.Response:
        texts: list[str] = []
        finished: Finished | None = None
        try:
            async for item in self.engine.generate(generation):
                if isinstance(item, Chunk):
                    texts.append(item.text)
                else:
                    finished = item
        except EngineError as exc:
            return error(503, str(exc))
        if finished is None:
            return error(500, "the simulated engine ended the answer without a finish")
        body = {
            "id": generation.request_id, "object": "chat.completion", "created": int(time.time()),
            "model": self.engine.model, "system_fingerprint": self.name,
            "choices": [{"index": 0, "finish_reason": finished.finish.value,
                         "message": {"role": "assistant", "content": "".join(texts)}}],
            "usage": self._usage(finished),
        }  # fmt: skip
        return web.json_response(body, headers={"X-Replica": self.name})


def make_replicas(
    count: int, preset: str, speed: float, answer_tokens: tuple[int, int], first: int = 0
) -> list[Replica]:
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
    return [
        Replica(f"sim-{i}", SimEngine(PRESETS[preset], speed=speed, answer_lengths=answer_tokens))
        for i in range(first, first + count)
    ]


async def serve(args: argparse.Namespace) -> None:
    lengths = tuple(int(n) for n in args.answer_tokens.split(","))
    if len(lengths) != 2 or not 1 <= lengths[0] <= lengths[1]:
        raise SystemExit("--answer-tokens is SHORTEST,LONGEST with 1 <= SHORTEST <= LONGEST")
    replicas = make_replicas(
        args.replicas, args.preset, args.speed, (lengths[0], lengths[1]), args.name_from
    )
    urls = [await r.start(args.host) for r in replicas]
    if args.ready_file:
        ready = Path(args.ready_file)
        ready.with_suffix(".tmp").write_text(json.dumps({"urls": urls}))
        ready.with_suffix(".tmp").rename(ready)  # whole or absent: a reader never sees half
    else:
        print(json.dumps({"urls": urls}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for replica in replicas:
        with contextlib.suppress(Exception):
            await replica.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--preset", default="70b-4xh100", choices=sorted(PRESETS))
    parser.add_argument(
        "--speed", type=float, default=1.0,
        help="simulated seconds per real second (below 1: slower than a GPU)",
    )  # fmt: skip
    parser.add_argument("--answer-tokens", default="100,700", help="SHORTEST,LONGEST")
    parser.add_argument("--name-from", type=int, default=0, help="the first replica's number")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ready-file", default="", help="where to write the replicas' URLs")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
