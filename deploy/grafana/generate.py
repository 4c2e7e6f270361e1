"""The platform's Grafana dashboards, written from this code (grafanalib) into dashboards/.

    .venv/bin/python deploy/grafana/generate.py           # writes dashboards/*.json
    .venv/bin/python deploy/grafana/generate.py --check   # fails if they differ from this code

Four dashboards: the fleet (KV use, queues, prefix hits per node), what users get (TTFT,
tokens/s, refusals, failovers per tier, thumbs up and down per version, the platform's tool
calls and personal memory), the ladder and the
limits, and the cost (GPU-seconds per message by pool, the router's small/large split). Each
panel reads the recording rules in deploy/prometheus/rules/ or the services' own series;
tests/deploy checks every name against a running platform. Per-node and per-pool series come
from every scheduler (each holds the whole table), hence the max by.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard, GridPos, Target, Template, Templating, Time, TimeSeries

OUT = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = "${datasource}"
BY_NODE = "{{pool}} {{node}}"


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[tuple[str, str], ...]  # (expr, legend)
    description: str = ""


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]


FLEET = Board(
    "chat-fleet",
    "Chat platform: fleet",
    "Each node's KV cache, queue and prefix cache, and each pool's replicas, as the schedulers "
    "see them from the nodes' load reports.",
    (
        Panel("KV cache in use, per node", "percentunit",
              (("max by (pool, node) (scheduler_node_kv_usage)", BY_NODE),)),
        Panel("Prompt tokens queued, per node", "short",
              (("max by (pool, node) (scheduler_node_queued_prefill_tokens)", BY_NODE),)),
        Panel("Requests waiting for a batch place, per node", "short",
              (("max by (pool, node) (scheduler_node_waiting_requests)", BY_NODE),)),
        Panel("Prefix cache hits, per node", "percentunit",
              (("max by (pool, node) (scheduler_node_prefix_hit_rate)", BY_NODE),)),
        Panel("Replicas by state, per pool", "short",
              (("pool_state:scheduler_pool_replicas:max", "{{pool}} {{state}}"),)),
        Panel("Since each node's last load report", "s",
              (("max by (pool, node) (scheduler_node_report_age_seconds)", BY_NODE),),
              "Over the schedulers' report_timeout_s (2 s) a node is taken as dead."),
        Panel("Answers generating, per pool", "short",
              (("max by (pool) (scheduler_pool_running_requests)", "{{pool}}"),)),
        Panel("KV cache in use, per vLLM engine", "percentunit",
              (("max by (pool, pod) (vllm:kv_cache_usage_perc)", "{{pool}} {{pod}}"),),
              "vLLM's own gauge (job vllm): at 1 it preempts running requests."),
        Panel("Preemptions per second, per pool (vLLM)", "ops",
              (("sum by (pool) (rate(vllm:num_preemptions_total[5m]))", "{{pool}}"),),
              "Requests vLLM evicted from the KV cache to recompute later: their answers stall."),
        Panel("Prompt tokens queued, per pool (the pools' autoscaling metric)", "short",
              (("pool:scheduler_pool_queued_prefill_tokens:max", "{{pool}} queued tokens"),
               ("pool:scheduler_pool_waiting_requests:max", "{{pool}} waiting requests"))),
    ),
)  # fmt: skip

EXPERIENCE = Board(
    "chat-experience",
    "Chat platform: what users get",
    "Time to first text against the goals (Plus 1 s, Free 2 s, for 95 % of messages), "
    "streaming speed, refusals and failovers, by tier.",
    (
        Panel("Time to first text p95, by tier and pool", "s",
              (("tier_pool:gateway_ttft_seconds:p95_5m", "{{tier}} {{pool}} p95"),)),
        Panel("Time to first text p50, by tier and pool", "s",
              (("tier_pool:gateway_ttft_seconds:p50_5m", "{{tier}} {{pool}} p50"),)),
        Panel("Messages over their tier's first-text goal", "percentunit",
              (("tier:gateway_ttft_over_goal:ratio_rate5m", "{{tier}} (5 m)"),
               ("tier:gateway_ttft_over_goal:ratio_rate1h", "{{tier}} (1 h)")),
              "The goal allows 5 %; the burn-rate alerts fire at 72 % over 1 h and 30 % over 6 h."),
        Panel("Output tokens per second of an answer", "short",
              (("tier_model:gateway_output_tokens_per_second:mean_5m", "{{tier}} {{model}}"),)),
        Panel("Refusals, by tier and reason", "reqps",
              (("tier_reason:gateway_refusals:rate5m", "{{tier}} {{reason}}"),
               ("tier:gateway_limiter_refusals:rate5m", "{{tier}} token bucket spent"))),
        Panel("Failovers mid-answer, by tier and pool", "ops",
              (("tier_pool:gateway_failovers:rate5m", "{{tier}} {{pool}}"),)),
        Panel("Streams carried on by another gateway or edge", "ops",
              (("sum (rate(gateway_takeovers_total[5m]))", "taken over from a dead gateway"),
               ("sum by (outcome) (rate(edge_stream_reattaches_total[5m]))",
                "edge re-attach {{outcome}}"))),
        Panel("Answers, by tier", "reqps",
              (("tier:gateway_answers:rate5m", "{{tier}}"),)),
        Panel("Thumbs up and down share, by version and tier", "percentunit",
              (("version_tier_rating:gateway_feedback:share_1h",
                "{{version}} {{tier}} {{rating}}"),
               ("tier:gateway_feedback_down_current:share_1h", "current version {{tier}} down")),
              "Each rating's share of a version's ratings over the last hour. The alert "
              "VersionThumbsDownAboveCurrent fires at 10 points over the current version's "
              "thumbs-down share, on at least 50 ratings."),
        Panel("Platform tool calls, by server and outcome", "ops",
              (("sum by (server, outcome) (rate(gateway_tool_calls_total[5m]))",
                "{{server}} {{outcome}}"),),
              "Calls the harness ran for the model (MCP servers, send_email, remember): ok, "
              "error, or not run (arguments withheld by the output check, result withheld, "
              "a remember after untrusted content). Security events are "
              "gateway_security_events_total."),
        Panel("Memory: entries written, and read per stored turn", "short",
              (("sum by (source) (rate(gateway_memory_writes_total[5m]))",
                "written by {{source}} /s"),
               ("sum(rate(gateway_memory_entries_per_turn_sum[5m])) "
                "/ sum(rate(gateway_memory_entries_per_turn_count[5m]))",
                "entries read per turn (mean)")),
              "Entries come only from the user's list and the model's remember calls; a "
              "stored turn reads at most its tier's top_k, none on another subject."),
        Panel("Citations: markers by outcome, and the hallucinated share", "short",
              (("sum by (outcome) (rate(gateway_citations_total[5m]))", "{{outcome}} /s"),
               ('(sum(rate(gateway_citations_total{outcome=~"not_retrieved|unresolved"}[5m])) '
                "or vector(0)) / sum(rate(gateway_citations_total"
                '{outcome=~"resolved|not_retrieved|unresolved"}[5m]))',
                "hallucinated share of cited ids")),
              "Markers in answers that read the user's files. not_retrieved (an id the turn "
              "did not read) and unresolved (an id of nothing) are invented and were removed "
              "before they were shown; uncited_form is citation-shaped prose removed; missed "
              "was found after it was shown. The canary rolls a version back on its share."),
    ),
)  # fmt: skip

LADDER = Board(
    "chat-ladder",
    "Chat platform: ladder and limits",
    "The shedding ladder (0 normal, 1 Free to small, 2 Free answers capped, 3 Free refused when "
    "it would wait over 2 s), what it took from messages, and the token buckets.",
    (
        Panel("Ladder rung", "short",
              (("chat:scheduler_ladder_rung:max", "rung"),
               ("max (scheduler_ladder_pinned)", "pinned by an operator"))),
        Panel("Busy share the ladder ticks on, and each pool's", "percentunit",
              (("max (scheduler_ladder_busy_share)", "ladder"),
               ("pool:scheduler_pool_busy_share:max", "{{pool}}")),
              "Up a rung at 85 / 92 / 97 %, down 7 points below."),
        Panel("What the ladder took, by tier", "ops",
              (("sum by (tier, what) (rate(gateway_sheds_total[5m]))", "{{tier}} {{what}}"),)),
        Panel("Refused as busy (rung 3)", "reqps",
              (('sum by (tier) (rate(gateway_refusals_total{reason="busy"}[5m]))', "{{tier}}"),)),
        Panel("Refused by the token bucket", "reqps",
              (("tier:gateway_limiter_refusals:rate5m", "{{tier}}"),)),
        Panel("Token-bucket calls without Redis", "ops",
              (("sum by (tier, outcome) (rate(gateway_bucket_store_unavailable_total[5m]))",
                "{{tier}} {{outcome}}"),),
              "admitted: failed open, unmetered; refused: failed closed."),
        Panel("Which scheduler moves the ladder", "short",
              (("max by (instance) (scheduler_ladder_leader)", "{{instance}}"),)),
    ),
)  # fmt: skip

COST = Board(
    "chat-cost",
    "Chat platform: cost",
    "Accelerator-seconds each pool holds per message it answers, the GPUs held, and the "
    "router's split between the small and the large model.",
    (
        Panel("GPU-seconds per message, by pool", "s",
              (("pool:gpu_seconds_per_message:ratio_rate5m", "{{pool}}"),),
              "GPUs held (busy or idle) over messages answered: the sizing's 0.67 (70B) and "
              "0.18 (8B) GPU-s per message are the reference."),
        Panel("GPUs held, by pool", "short",
              (("pool:nodeagent_gpus:sum", "{{pool}}"),)),
        Panel("Router's split: share of messages per pool", "percentunit",
              (("pool:gateway_routes:share_5m", "{{pool}}"),)),
        Panel("Routing, by reason", "reqps",
              (("sum by (reason, pool) (rate(gateway_routes_total[5m]))", "{{reason}} {{pool}}"),)),
        Panel("Prompt tokens computed (not cached), per second", "short",
              (("sum by (model) (rate(gateway_prefill_tokens_sum[5m]))", "{{model}}"),)),
        Panel("Share of the prompt found in the prefix cache", "percentunit",
              (("model:gateway_cached_prompt_share:mean_5m", "{{model}}"),
               ("pool:scheduler_node_prefix_hit_rate:avg", "{{pool}} (engines)"))),
    ),
)  # fmt: skip

BOARDS = (FLEET, EXPERIENCE, LADDER, COST)


def dashboard(board: Board) -> Dashboard:
    panels = []
    for index, panel in enumerate(board.panels):
        targets = [Target(expr=expr, legendFormat=legend, refId=chr(ord("A") + n))
                   for n, (expr, legend) in enumerate(panel.queries)]  # fmt: skip
        position = GridPos(h=8, w=12, x=12 * (index % 2), y=8 * (index // 2))
        panels.append(TimeSeries(title=panel.title, description=panel.description,
                                 dataSource=DATASOURCE, targets=targets, unit=panel.unit,
                                 gridPos=position))  # fmt: skip
    datasource = Template(name="datasource", label="Prometheus", type="datasource",
                          query="prometheus")  # fmt: skip
    board_json = Dashboard(title=board.title, uid=board.uid, description=board.description,
                           tags=["chat-platform"], timezone="utc", time=Time("now-6h", "now"),
                           panels=panels, templating=Templating(list=[datasource]))  # fmt: skip
    return board_json.auto_panel_ids()


def render(board: Board) -> str:
    data = dashboard(board).to_json_data()
    return json.dumps(data, cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def rendered() -> dict[str, str]:
    """File name -> JSON, for every dashboard."""
    return {f"{board.uid}.json": render(board) for board in BOARDS}


def _differs(path: Path, text: str) -> bool:
    return not path.exists() or path.read_text() != text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if dashboards/ differs")
    args = parser.parse_args()
    wanted = rendered()
    if args.check:
        stale = sorted(name for name, text in wanted.items() if _differs(OUT / name, text))
        extra = sorted(p.name for p in OUT.glob("*.json") if p.name not in wanted)
        for name in stale + extra:
            print(f"deploy/grafana/dashboards/{name} does not match generate.py", file=sys.stderr)
        return 1 if stale or extra else 0
    OUT.mkdir(exist_ok=True)
    for name, text in wanted.items():
        (OUT / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
