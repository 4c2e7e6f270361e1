"""Engine adapter for vLLM's OpenAI-compatible server: the production engine.

It either starts a local vLLM server as a child process or attaches to one already running (a
GPU pod runs vLLM in its own container and the nodeagent beside it). Answers stream from
`/v1/chat/completions`; closing that HTTP stream aborts the request inside vLLM, which frees its
KV blocks at once. Plus is served ahead of Free through vLLM's priority scheduler (lower number
first). Load comes from vLLM's own `/metrics`, read by the pure parser in vllm_metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
import structlog

from domain.types import Finish, Tier, Usage
from infra.process import dies_with_parent
from nodeagent import chat_wire, citation_grammar
from nodeagent.engine import (
    Chunk,
    EngineError,
    EngineLoad,
    EngineLost,
    Finished,
    GenerationRequest,
)
from nodeagent.engine_http import engine_session, sse_events
from nodeagent.engine_speed import EngineSpeed, tokens_per_event
from nodeagent.llamacpp import free_port
from nodeagent.vllm_check import check_engine_flags
from nodeagent.vllm_flags import UnknownModelFamily
from nodeagent.vllm_launch import DEFAULT_HOME, VllmLaunch
from nodeagent.vllm_metrics import (
    MetricsParseError,
    VllmMetrics,
    parse_vllm_metrics,
    prefix_hit_rate,
)

# vLLM's priority scheduler serves the lowest number first.
PRIORITY = {Tier.PLUS: 0, Tier.FREE: 10}
# Any other reason vLLM gives (tool_calls, repetition) ended the answer normally: STOP.
_FINISH = {
    "stop": Finish.STOP,
    "length": Finish.LENGTH,
    "tool_calls": Finish.STOP,
    "abort": Finish.CANCELLED,
    "error": Finish.ERROR,
}
_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=5)
_LOG_TAIL_BYTES = 2000


@dataclass(slots=True)
class _Accounting:
    # Prompt tokens of requests that have not produced their first token: vLLM's metrics count
    # waiting requests but not the prefill work they hold, which the picker needs.
    waiting_prompt_tokens: dict[str, int] = field(default_factory=dict)
    last_metrics: VllmMetrics | None = None
    last_hit_rate: float = 0.0
    speed: EngineSpeed = field(default_factory=EngineSpeed)


class VllmEngine:
    def __init__(
        self,
        model: str,
        context_tokens: int = 8192,
        base_url: str = "",
        launch: VllmLaunch | None = None,
        startup_timeout_s: float = 300.0,
    ) -> None:
        """With base_url, attaches to a running vLLM server; otherwise starts one with launch."""
        self.model = model
        self.context_tokens = context_tokens
        self._base_url = base_url.rstrip("/")
        self._launch = None if base_url else (launch or VllmLaunch())
        # An attached server's --max-num-seqs is its own business: not known here.
        self.max_running_requests = self._launch.max_num_seqs if self._launch else 0
        self._startup_timeout_s = startup_timeout_s
        self._process: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._accounting = _Accounting()

    @property
    def base_url(self) -> str:
        """vLLM's own HTTP address, for benchmarks that call the engine directly."""
        return self._base_url

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    async def start(self) -> None:
        if self._launch is not None:
            await self._spawn(self._launch)
        # No total timeout: an answer may queue behind others for long under load.
        self._session = engine_session(aiohttp.ClientTimeout(total=None, sock_connect=5))
        try:
            await self._wait_ready()
            await self._check_flags()
        except EngineError:
            await self.stop()
            raise

    async def _check_flags(self) -> None:
        """Refuses a server started without a flag the node's requests rely on (vllm_check)."""
        found = await check_engine_flags(self._http(), self._base_url, self.model)
        if found.missing:
            raise EngineError(found.refusal(self._base_url))
        for flag in found.unverified:
            structlog.get_logger(component="vllm").warning(
                "vLLM does not show whether it was started with this flag", flag=flag
            )

    async def _spawn(self, launch: VllmLaunch) -> None:
        port = free_port()
        self._base_url = f"http://127.0.0.1:{port}"
        if not launch.log_path:
            launch = replace(launch, log_path=str(DEFAULT_HOME / "logs" / f"vllm-{port}.log"))
            self._launch = launch
        try:
            command = launch.command(self.model, port, self.context_tokens)
        except UnknownModelFamily as exc:
            raise EngineError(str(exc)) from exc
        with _open_server_log(launch) as log:
            self._process = await asyncio.create_subprocess_exec(
                *dies_with_parent(command),
                env=launch.environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                # Its own process group: vLLM runs its engine core in a child process, and stop()
                # must end both.
                start_new_session=True,
            )

    async def _wait_ready(self) -> None:
        deadline = asyncio.get_running_loop().time() + self._startup_timeout_s
        while not await self.healthy():
            if self._process and self._process.returncode is not None:
                code = self._process.returncode
                raise EngineError(f"vLLM exited with {code} while starting: {self._log_tail()}")
            if asyncio.get_running_loop().time() > deadline:
                raise EngineError(
                    f"vLLM at {self._base_url} was not ready within {self._startup_timeout_s} s"
                )
            await asyncio.sleep(0.5)

    def _log_tail(self) -> str:
        if self._launch is None:
            return ""
        with contextlib.suppress(OSError), open(self._launch.log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - _LOG_TAIL_BYTES))
            return log.read().decode(errors="replace")
        return "(no log)"

    async def stop(self) -> None:
        if self._session:
            await self._session.close()
            self._session = None
        process, self._process = self._process, None
        if process is None:
            return
        # The whole group, even when the API server already died: its engine core may not have.
        _signal_group(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 30)
        except TimeoutError:
            pass
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise EngineError("the vLLM engine is not started")
        return self._session

    async def healthy(self) -> bool:
        try:
            async with self._http().get(
                f"{self._base_url}/health", timeout=_PROBE_TIMEOUT
            ) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def tokenize(self, texts: list[str]) -> list[int]:
        return list(await asyncio.gather(*(self._count_tokens(text) for text in texts)))

    async def _count_tokens(self, text: str) -> int:
        # No special tokens: the count of the text itself, as stored with each turn.
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        try:
            async with self._http().post(f"{self._base_url}/tokenize", json=body) as response:
                if response.status != 200:
                    raise EngineError(f"vLLM tokenize: {await _error_reason(response)}")
                return int((await response.json())["count"])
        except aiohttp.ClientError as exc:
            raise EngineError(f"vLLM tokenize failed: {exc}") from exc

    async def metrics(self) -> VllmMetrics:
        """One scrape of vLLM's /metrics, parsed."""
        try:
            async with self._http().get(
                f"{self._base_url}/metrics", timeout=_PROBE_TIMEOUT
            ) as response:
                if response.status != 200:
                    raise EngineError(f"vLLM /metrics answered {response.status}")
                text = await response.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise EngineError(f"vLLM /metrics failed: {exc!r}") from exc
        try:
            return parse_vllm_metrics(text)
        except MetricsParseError as exc:
            raise EngineError(f"vLLM /metrics unreadable: {exc}") from exc

    async def load(self) -> EngineLoad:
        acc = self._accounting
        current = await self.metrics()
        rate = prefix_hit_rate(acc.last_metrics, current)
        if rate is not None:
            acc.last_hit_rate = rate
        acc.last_metrics = current
        return EngineLoad(
            kv_usage=current.kv_usage,
            free_kv_tokens=current.free_kv_tokens,
            kv_capacity_tokens=current.kv_capacity_tokens,
            queued_prefill_tokens=sum(acc.waiting_prompt_tokens.values()),
            running_requests=current.running_requests,
            waiting_requests=current.waiting_requests,
            prefix_hit_rate=acc.last_hit_rate,
            prefill_tokens_per_s=acc.speed.prefill_tokens_per_s,
            decode_step_s=acc.speed.decode_step_s,
            answer_s=acc.speed.answer_s,
        )

    def _body(self, request: GenerationRequest) -> dict[str, object]:
        messages = chat_wire.messages(request.turns)
        body: dict[str, object] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "priority": PRIORITY[request.tier],
            "stream": True,
            "stream_options": {"include_usage": True},
            **chat_wire.option_fields(request.options, citation_grammar.Engine.VLLM),
        }
        gathered = tokens_per_event(request.stream_interval_s, self._accounting.speed.decode_step_s)
        if gathered > 1:
            # vLLM sends the first token at once and then every `stream_interval` tokens (and
            # the last): fewer events to write, read and parse for the same text. Each event
            # then says how many tokens the answer has, so each chunk's count is known.
            body["stream_interval"] = gathered
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if request.continue_from:
            # The answer so far goes in as an open assistant turn that vLLM extends; it streams
            # only the new text.
            messages.append({"role": "assistant", "content": request.continue_from})
            body["continue_final_message"] = True
            body["add_generation_prompt"] = False
        return body

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Chunk | Finished]:
        waiting = self._accounting.waiting_prompt_tokens
        waiting[request.request_id] = request.prompt_tokens
        finish: Finish | None = None
        usage = Usage()
        calls = chat_wire.ToolCallAssembler(request)
        loop = asyncio.get_running_loop()
        sent_at, first_at = loop.time(), 0.0
        counted = 0  # the answer's tokens carried by the chunks so far
        try:
            # Leaving this block (a finished answer, or the caller closing this generator)
            # closes the HTTP stream, and vLLM aborts the request and frees its KV blocks.
            async with self._http().post(
                f"{self._base_url}/v1/chat/completions", json=self._body(request)
            ) as response:
                if response.status != 200:
                    raise EngineError(f"vLLM refused the request: {await _error_reason(response)}")
                async for event in sse_events(response.content):
                    _raise_on_error_event(event)
                    choice = _first_choice(event)
                    calls.feed(choice.get("delta") or {})
                    text = (choice.get("delta") or {}).get("content")
                    if isinstance(event.get("usage"), dict):
                        usage = _usage_of(event["usage"])
                    if text:
                        waiting.pop(request.request_id, None)
                        first_at = first_at or loop.time()
                        # With usage on every event, the tokens since the last chunk; else 1.
                        tokens = max(1, usage.output_tokens - counted)
                        counted += tokens
                        yield Chunk(calls.shown(text), tokens)
                    if choice.get("finish_reason"):
                        finish = _FINISH.get(str(choice["finish_reason"]), Finish.STOP)
        except aiohttp.ClientError as exc:
            raise EngineLost(f"vLLM stream failed: {exc!r}") from exc
        finally:
            waiting.pop(request.request_id, None)
        if finish is None:
            # A stream cut off cleanly (vLLM died between events) is not a finished answer.
            raise EngineError("vLLM ended the stream without a finish reason")
        if first_at:
            # vLLM reports no timings: the first token's wait over the uncached prompt tokens
            # (a queue before it counts too, so the figure errs slow under load), then the rest.
            speed = self._accounting.speed
            speed.prompt_read(usage.input_tokens - usage.cached_tokens, first_at - sent_at)
            speed.decoded(usage.output_tokens - 1, loop.time() - first_at)
            speed.answered(loop.time() - sent_at)
        yield Finished(finish, usage, calls.calls(finish))


def _open_server_log(launch: VllmLaunch) -> BinaryIO:
    """Checks the install is there (a clear error, not vLLM's traceback) and opens the log that
    takes the server's output: the reason a start failed is in its last lines."""
    if not Path(launch.python).exists():
        raise EngineError(f"no vLLM at {launch.python} (scripts/install_vllm.sh installs it)")
    if not (Path(launch.model_path) / "config.json").exists():
        raise EngineError(f"no model folder at {launch.model_path} (install_vllm.sh makes it)")
    Path(launch.log_path).parent.mkdir(parents=True, exist_ok=True)
    return open(launch.log_path, "wb")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _first_choice(event: Mapping[str, object]) -> dict[str, Any]:
    choices = event.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return {}


def _raise_on_error_event(event: Mapping[str, object]) -> None:
    """vLLM reports a failure after the stream began as an event with an "error" object."""
    error = event.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        raise EngineError(f"vLLM failed the request mid-stream: {message}")


def _usage_of(usage: Mapping[str, object]) -> Usage:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    # int() of a JSON value: a number as vLLM sends it, and an error (as wanted) for anything
    # else; mypy cannot take an object there.
    return Usage(
        input_tokens=int(usage.get("prompt_tokens") or 0),  # type: ignore[call-overload]
        cached_tokens=int(cached or 0),
        output_tokens=int(usage.get("completion_tokens") or 0),  # type: ignore[call-overload]
    )


async def _error_reason(response: aiohttp.ClientResponse) -> str:
    """vLLM's error body names the reason ({"error": {"message": ...}}); keep it for the user."""
    text = await response.text()
    reason = text[:500]
    with contextlib.suppress(ValueError):
        body = json.loads(text)
        error = body.get("error", body) if isinstance(body, dict) else body
        if isinstance(error, dict) and error.get("message"):
            reason = str(error["message"])
    return f"{response.status}: {reason}"
