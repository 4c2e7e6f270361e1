"""When the first words show with the output check on, and what a flagged answer showed first:
the simulated engine at about 40 tokens/s an answer, Plus messages through the edge, the
gateway settings in one run (a platform each, one after the other):

- off: no safety check at all, the floor;
- shipped: the gateway's defaults for Plus, whatever they are (retract mode since Plus's first
  words are promised within 1 s);
- holdback: the output check holding text back (text shows once a check read it with 50
  tokens after it);
- holdback-coarse: the hold-back with the node asked for chunks 0.25 s apart instead of its
  own interval (0.05 s);
- retract: the same check in retract mode (text shows as it comes; a flag withdraws it).

The checked gateways load a bench blocklist that flags "blue" and "sky" within two words of
each other, which about a fifth of the simulator's answers hold somewhere; the simulator's answer
is a function of the prompt, so each mode sees the same answers and the same flags.

Per mode: TTFT (request sent -> first `delta` through the edge; a refusal shown first counts as
the first words) p50/p95 and the share within 1 s; for clean answers the TTFT p95, the time to
`done` and tokens/s over the whole answer (the engine's pace: no mode changes it); per flagged
answer, the text shown before the refusal (holdback: clean text, kept) or before the `retract`
(retract: withdrawn, flagged text included), in characters and tokens, and how long the flagged
words were on screen before the retract took them off. And the CPU the gateway and the nodes
spent per message (utime + stime over the measured messages).

    .venv/bin/python bench/first_words.py [--messages 160] [--concurrency 8]

Prints a table and ends with one JSON line. Results land in bench/results/first_words.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from benchkit import cpu_seconds, publish

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.safety import BlocklistClassifier

# The 8B preset steps in ~10 ms at small batches (~100 tokens/s an answer in real time); at 0.4x
# an answer streams at ~40 tokens/s, a large model's pace. The run measures it (`off`).
SIM_PRESET = "8b-1xh100"
SIM_SPEED = "0.4"
ANSWER_TOKENS = "100,400"
TOPICS = ["rivers", "bridges", "owls", "volcanoes", "bread", "comets", "glass", "tides"]
BLOCKLIST = {
    "about": "bench only: flags two of the simulator's words close together",
    "version": 1,
    "char_map": {},
    "categories": {
        "bench_pair": {"rules": [{"id": "blue-sky", "near": [["blue"], ["sky"]], "span_words": 2}]}
    },
}
MODES: dict[str, dict[str, str]] = {
    "off": {"CHAT_GATEWAY_SAFETY": "false"},
    # Nothing set: what a Plus user gets from a gateway left on its defaults.
    "shipped": {},
    "holdback": {"CHAT_GATEWAY_PLUS_OUTPUT_MODE": "holdback"},
    # The hold-back with its node asked for chunks 0.25 s apart instead of at the node's own
    # interval (0.05 s): what the coarser chunks save and cost.
    "holdback-coarse": {
        "CHAT_GATEWAY_PLUS_OUTPUT_MODE": "holdback",
        "CHAT_GATEWAY_OUTPUT_HOLDBACK_CHUNK_INTERVAL_S": "0.25",
    },
    "retract": {"CHAT_GATEWAY_PLUS_OUTPUT_MODE": "retract"},
}
TOKEN = re.compile(r"\w+|[^\w\s]")  # the simulator's tokens: a word or a punctuation mark
GOAL_S = 1.0


def prompt(index: int) -> str:
    return f"Tell me about {TOPICS[index % len(TOPICS)]}, take {index}."


@dataclass
class Answer:
    ttft_s: float = 0.0
    total_s: float = 0.0
    output_tokens: int = 0
    finish: str = ""
    # (seconds since the request, event name, data) for every event.
    events: list[tuple[float, str, dict]] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return self.finish == "refused"

    def first(self, name: str) -> float | None:
        return next((at for at, event, _ in self.events if event == name), None)

    def text_before(self, name: str) -> str:
        """The delta text that came before the first `name` event (the whole answer if none)."""
        texts = []
        for _, event, data in self.events:
            if event == name:
                break
            if event == "delta":
                texts.append(data["text"])
        return "".join(texts)


async def send(http: aiohttp.ClientSession, platform: LocalPlatform, text: str) -> Answer:
    answer = Answer()
    started = time.perf_counter()
    async with http.post(
        f"{platform.edge_url}/v1/conversations/fw_{uuid.uuid4().hex[:10]}/messages",
        json={"content": text},
        headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
    ) as response:
        if response.status != 200:
            raise RuntimeError(f"edge answered {response.status}: {await response.text()}")
        name = ""
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                answer.events.append((time.perf_counter() - started, name, json.loads(line[6:])))
    answer.total_s = time.perf_counter() - started
    first = answer.first("delta")
    if first is None or answer.events[-1][1] != "done":
        raise RuntimeError(f"an answer without text or done: {answer.events[-3:]}")
    answer.ttft_s = first
    done = answer.events[-1][2]
    answer.finish, answer.output_tokens = done["finish"], done["usage"]["output"]
    return answer


async def run_mode(
    mode: str, state: Path, blocklist: Path, messages: int, concurrency: int
) -> tuple[list[Answer], dict[str, float]]:
    """The answers, and the CPU seconds the gateway and the nodes spent on them."""
    env = {
        "CHAT_NODEAGENT_ENGINE": "sim",
        "CHAT_NODEAGENT_SIM_PRESET": SIM_PRESET,
        "CHAT_NODEAGENT_SIM_SPEED": SIM_SPEED,
        "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ANSWER_TOKENS,
        "CHAT_GATEWAY_SAFETY_BLOCKLIST": str(blocklist),
        "CHAT_GATEWAY_ROUTER": "false",
        "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
        "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": str(concurrency * 2),
        "CHAT_GATEWAY_LOG_LEVEL": "warning",
        **MODES[mode],
    }
    platform = LocalPlatform(PlatformSettings(state_dir=state / mode, edge_listen="127.0.0.1:0",
                                              extra_env=env))  # fmt: skip
    await platform.start()
    try:
        async with aiohttp.ClientSession() as http:
            await send(http, platform, "Warm up, please.")  # channels, the first prompt
            pids = {c.name: c.process.pid for c in platform.children}
            nodes = [pid for name, pid in pids.items() if name.startswith("nodeagent")]
            before = cpu_seconds(pids["gateway"]), sum(map(cpu_seconds, nodes))
            queue = list(range(messages))
            answers: dict[int, Answer] = {}

            async def worker() -> None:
                while queue:
                    index = queue.pop(0)
                    answers[index] = await send(http, platform, prompt(index))

            await asyncio.gather(*(worker() for _ in range(concurrency)))
            cpu = {"gateway": cpu_seconds(pids["gateway"]) - before[0],
                   "nodes": sum(map(cpu_seconds, nodes)) - before[1]}  # fmt: skip
    finally:
        await platform.stop()
    return [answers[i] for i in range(messages)], cpu


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def spread(values: list[float], digits: int = 0) -> dict[str, float]:
    return {
        "p50": round(pct(values, 0.5), digits),
        "p95": round(pct(values, 0.95), digits),
        "max": round(max(values, default=0.0), digits),
    }


def on_screen_s(answer: Answer, classifier) -> float | None:
    """How long the flagged words were shown before the retract took them off (None: the
    flagged words never reached the screen before it)."""
    retract_at = answer.first("retract")
    if retract_at is None:
        return None
    text = ""
    for at, event, data in answer.events:
        if event == "retract":
            return None
        if event == "delta":
            text += data["text"]
            if not classifier.classify(text).allowed:
                return retract_at - at
    return None


def summarize(mode: str, answers: list[Answer], cpu: dict[str, float], classifier) -> dict:
    ttft = [a.ttft_s for a in answers]
    clean = [a for a in answers if not a.refused]
    # Over each answer's whole time, so text held back and released at once cannot inflate it.
    rates = [a.output_tokens / a.total_s for a in clean if a.output_tokens]
    flagged = [a for a in answers if a.refused]
    row: dict = {
        "messages": len(answers),
        "flagged": len(flagged),
        "ttft_p50_ms": round(pct(ttft, 0.5) * 1000),
        "ttft_p95_ms": round(pct(ttft, 0.95) * 1000),
        "within_1s": round(sum(t <= GOAL_S for t in ttft) / len(ttft), 3),
        "clean_ttft_p95_ms": round(pct([a.ttft_s for a in clean], 0.95) * 1000),
        "tokens_per_s_p50": round(statistics.median(rates), 1) if rates else 0.0,
        "clean_done_p50_ms": round(pct([a.total_s for a in clean], 0.5) * 1000),
        "gateway_cpu_ms_per_message": round(cpu["gateway"] * 1000 / len(answers), 1),
        "nodes_cpu_ms_per_message": round(cpu["nodes"] * 1000 / len(answers), 1),
    }
    if mode == "off":
        return row
    # Told by what came, not by the mode's name: "shipped" is whichever mode is the default.
    retracted = any(a.first("retract") is not None for a in flagged)
    # What a flagged answer showed before the refusal (holdback: kept) or the retract.
    before = [a.text_before("retract" if retracted else "done") for a in flagged]
    if not retracted:
        refusal_tail = re.compile(r"(\n\n)?I can't continue this answer\..*$", re.DOTALL)
        before = [refusal_tail.sub("", text) for text in before]
    row["shown_before_chars"] = spread([len(t) for t in before])
    row["shown_before_tokens"] = spread([len(TOKEN.findall(t)) for t in before])
    row["flagged_text_shown"] = sum(not classifier.classify(t).allowed for t in before)
    if retracted:
        row["retracts"] = sum(a.first("retract") is not None for a in flagged)
        exposure = [s for a in flagged if (s := on_screen_s(a, classifier)) is not None]
        row["flagged_on_screen_ms"] = spread([s * 1000 for s in exposure])
    return row


def report(results: dict[str, dict], args: argparse.Namespace) -> str:
    lines = [
        f"first_words: {args.messages} Plus messages per mode, {args.concurrency} at a time, "
        f"through the edge; simulated {SIM_PRESET} at {SIM_SPEED}x ({ANSWER_TOKENS} tokens an "
        "answer); output check: 200-token window, 50 lookback, 50 hold-back (holdback only), "
        "a check every 16 tokens; bench blocklist 'blue' near 'sky'",
        f"{'mode':<13} {'msgs':>5} {'flagged':>7} {'TTFT p50':>9} {'p95':>7} {'<=1 s':>6} "
        f"{'clean p95':>9} {'done p50':>9} {'tok/s':>6} {'gateway CPU':>11} {'nodes CPU':>9}",
    ]
    for mode, row in results.items():
        lines.append(
            f"{mode:<13} {row['messages']:>5} {row['flagged']:>7} {row['ttft_p50_ms']:>7} ms "
            f"{row['ttft_p95_ms']:>4} ms {row['within_1s']:>6.1%} "
            f"{row['clean_ttft_p95_ms']:>6} ms {row['clean_done_p50_ms']:>6} ms "
            f"{row['tokens_per_s_p50']:>6.1f} {row['gateway_cpu_ms_per_message']:>6} ms "
            f"{row['nodes_cpu_ms_per_message']:>6} ms"
        )
    lines.append("flagged answers: text shown before the refusal (holdback, kept: never flagged "
                 "text) or before the retract (retract, withdrawn), p50 / p95 / max")  # fmt: skip
    for mode, row in results.items():
        if "shown_before_chars" not in row:
            continue
        chars, tokens = row["shown_before_chars"], row["shown_before_tokens"]
        line = (
            f"{mode:<13} chars {chars['p50']:.0f} / {chars['p95']:.0f} / {chars['max']:.0f}, "
            f"tokens {tokens['p50']:.0f} / {tokens['p95']:.0f} / {tokens['max']:.0f}; "
            f"answers whose flagged words were shown: {row['flagged_text_shown']}"
        )
        if "flagged_on_screen_ms" in row:
            shown = row["flagged_on_screen_ms"]
            line += (
                f"; flagged words on screen before the retract "
                f"{shown['p50']:.0f} / {shown['p95']:.0f} / {shown['max']:.0f} ms"
            )
        lines.append(line)
    result = {"bench": "first_words", "messages": args.messages,
              "concurrency": args.concurrency, "sim_speed": float(SIM_SPEED),
              "goal": {"ttft_s": GOAL_S, "share": 0.95}, "results": results}  # fmt: skip
    lines.append(json.dumps(result))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> str:
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder)
        blocklist = state / "blocklist.json"
        blocklist.write_text(json.dumps(BLOCKLIST))
        classifier = BlocklistClassifier.from_data(BLOCKLIST)
        for mode in args.modes.split(","):
            answers, cpu = await run_mode(mode, state, blocklist, args.messages,
                                          args.concurrency)  # fmt: skip
            results[mode] = summarize(mode, answers, cpu, classifier)
    return report(results, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=160)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    publish("first_words", asyncio.run(run(args)))


if __name__ == "__main__":
    main()
