"""The gateway's Prometheus series: how fast answers start and flow, what the prompts cost,
and every way a message is refused, shed or moved. One object per gateway, on the registry
its /metrics serves; labels are tier, model or pool, never a user or a message.

Every series whose label values are known in advance (tiers, pools, reasons) exists at zero
from the start: a rate or an alert over it reads 0 before the first event, not "no data"."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from domain.feedback import Rating
from domain.pools import POOLS
from domain.rollout import RolloutState
from domain.router import RouteReason
from domain.types import Tier, Usage

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)
_TOKEN_SECONDS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
_TOKENS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768)
_CHARS = (50, 100, 200, 400, 800, 1600, 3200, 6400)
_RATES = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 200.0)
_SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0)
# Refusals before the model: rung 3's "busy", the input check, the output check.
REFUSAL_REASONS = ("busy", "safety_input", "safety_output")
SHED_KINDS = ("small_pool", "capped_answer")
# The fallback chain: large falls to small, small to a composed "busy" answer.
FALLBACKS = (("large", "small"), ("small", "busy"))


class CurrentVersion(Collector):
    """gateway_version_current{version}: 1 for the rollout's current version, 0 for every other
    it names, read at each scrape from the rollout the gateway applies. What the alerts compare
    a version's series with: the current version's name changes with every promotion."""

    def __init__(self, rollout: Callable[[], RolloutState]) -> None:
        self._rollout = rollout

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._rollout()
        family = GaugeMetricFamily("gateway_version_current",
                                   "1 for the rollout's current model version, 0 for the others",
                                   labels=["version"])  # fmt: skip
        for version in state.versions:
            family.add_metric([version.name], float(version.name == state.current))
        yield family


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.ttft = Histogram("gateway_ttft_seconds",
                              "from a message's arrival to its answer's first text",
                              ["tier", "pool"], buckets=_SECONDS, registry=registry)  # fmt: skip
        self.time_per_output_token = Histogram(
            "gateway_time_per_output_token_seconds", "between output tokens, after the first",
            ["tier", "model"], buckets=_TOKEN_SECONDS, registry=registry,
        )  # fmt: skip
        self.queue_wait = Histogram(
            "gateway_expected_queue_wait_seconds",
            "the scheduler's expected wait to start, for the replica it picked",
            ["tier", "pool"], buckets=_SECONDS, registry=registry,
        )  # fmt: skip
        self.prefill_tokens = Histogram("gateway_prefill_tokens",
                                        "prompt tokens the engine computed (not cached)",
                                        ["tier", "model"], buckets=_TOKENS,
                                        registry=registry)  # fmt: skip
        self.cached_share = Histogram("gateway_cached_prompt_share",
                                      "share of the prompt found in the prefix cache",
                                      ["tier", "model"], buckets=_SHARES,
                                      registry=registry)  # fmt: skip
        self.answers = Counter("gateway_answers_total", "answers ended, by how",
                               ["tier", "model", "finish"], registry=registry)  # fmt: skip
        self.refusals = Counter("gateway_refusals_total",
                                "messages refused before the model: busy (rung 3), safety",
                                ["tier", "reason"], registry=registry)  # fmt: skip
        self.retracted_chars = Histogram(
            "gateway_retracted_chars",
            "text shown then withdrawn by the output check (retract mode), in characters",
            ["tier"], buckets=_CHARS, registry=registry,
        )  # fmt: skip
        self.sheds = Counter("gateway_sheds_total",
                             "what the ladder took from a message: small_pool, capped_answer",
                             ["tier", "what"], registry=registry)  # fmt: skip
        self.limiter_refusals = Counter("gateway_limiter_refusals_total",
                                        "messages refused because the token bucket was spent",
                                        ["tier"], registry=registry)  # fmt: skip
        self.failovers = Counter("gateway_failovers_total",
                                 "answers moved to another replica mid-answer",
                                 ["tier", "pool"], registry=registry)  # fmt: skip
        self.fallbacks = Counter("gateway_fallbacks_total",
                                 "messages sent past a failing pool down the fallback chain",
                                 ["from_pool", "to"], registry=registry)  # fmt: skip
        self.security_events = Counter(
            "gateway_security_events_total",
            "turns the tool loop ended with nothing more run: lethal_trifecta, "
            "call_outside_capabilities",
            ["kind"], registry=registry,
        )  # fmt: skip
        self.tool_calls = Counter("gateway_tool_calls_total",
                                  "tool calls the platform ran, by server (or tool) and outcome",
                                  ["server", "outcome"], registry=registry)  # fmt: skip
        self.retrieval_decisions = Counter(
            "gateway_retrieval_decisions_total",
            "turns with tools that bring outside content, by whether the retrieval gate let "
            "them be offered (needed) or left them out (skipped)",
            ["decision"], registry=registry,
        )  # fmt: skip
        self.tool_steps_exhausted = Counter(
            "gateway_tool_steps_exhausted_total",
            "turns that asked for another tool step past the tier's max_tool_steps",
            ["tier"], registry=registry,
        )  # fmt: skip
        self.memory_writes = Counter(
            "gateway_memory_writes_total",
            "memory entries written, by who wrote them (user: their list; model: a remember "
            "call)",
            ["source"], registry=registry,
        )  # fmt: skip
        self.citations = Counter(
            "gateway_citations_total",
            "citation markers in answers of turns that read the user's files, by what the "
            "resolver made of them (resolved: kept; not_retrieved, unresolved: invented ids, "
            "removed; uncited_form: citation-shaped prose removed; allowed_form: kept as the "
            "surface allows; missed: found after it was shown)",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.file_uploads = Counter(
            "gateway_file_uploads_total",
            "files users uploaded for file_search, by outcome (kept; refused: not UTF-8 "
            "text, too large, too many)",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.memory_reads = Histogram(
            "gateway_memory_entries_per_turn",
            "memory entries read into a stored conversation's turn (turns with searchable "
            "words, on tiers that read memory)",
            buckets=(0, 1, 2, 3, 5, 8, 13), registry=registry,
        )  # fmt: skip
        self.routes = Counter("gateway_routes_total",
                              "where the router sent messages, and why",
                              ["reason", "pool"], registry=registry)  # fmt: skip
        self.runaways = Counter("gateway_runaway_answers_total",
                                "answers stopped because they kept repeating themselves",
                                ["pool"], registry=registry)  # fmt: skip
        self.takeovers = Counter("gateway_takeovers_total",
                                 "answers taken over from a gateway that died",
                                 registry=registry)  # fmt: skip
        self.owners_found_gone = Counter(
            "gateway_owners_found_gone_total",
            "gateways taken for dead before their liveness ran out, because the address they "
            "serve on refused a connection when a run of theirs was read here",
            registry=registry,
        )  # fmt: skip
        self.bucket_store_unavailable = Counter(
            "gateway_bucket_store_unavailable_total",
            "token-bucket calls made while Redis was unreachable, by what the tier's policy "
            "did: admitted (failed open, unmetered) or refused (failed closed)",
            ["tier", "outcome"], registry=registry,
        )  # fmt: skip
        # Per model version (the online scores of a rollout: docs/runbook.md, "Rolling out").
        self.version_answers = Counter(
            "gateway_version_answers_total",
            "answers ended, by the model version that served, tier and how they ended "
            "(refused counts the input and output checks and the model's own refusals)",
            ["version", "tier", "finish"], registry=registry,
        )  # fmt: skip
        self.version_ttft = Histogram("gateway_version_ttft_seconds",
                                      "from a message's arrival to its first text, per version",
                                      ["version", "tier"], buckets=_SECONDS,
                                      registry=registry)  # fmt: skip
        self.version_tokens_per_s = Histogram(
            "gateway_version_output_tokens_per_second",
            "an answer's output tokens a second of its whole time (question to end)",
            ["version", "tier"], buckets=_RATES, registry=registry,
        )  # fmt: skip
        self.version_failovers = Counter("gateway_version_failovers_total",
                                         "answers moved to another replica, per version",
                                         ["version", "tier"], registry=registry)  # fmt: skip
        # Edges' answer streams on EdgeLinkService: frames against streams show how many
        # streams' news a frame carries.
        self.edge_link_streams = Counter("gateway_edge_link_streams_total",
                                         "answer streams opened on edges' links",
                                         registry=registry)  # fmt: skip
        self.edge_link_frames = Counter(
            "gateway_edge_link_frames_total",
            "frames sent on edges' links, each with the news of every stream that had some",
            registry=registry,
        )
        self.budget_downgrades = Counter(
            "gateway_budget_downgrades_total",
            "messages sent to the small pool because the user spent the day's allowance",
            ["tier"], registry=registry,
        )  # fmt: skip
        self.feedback = Counter(
            "gateway_feedback_total",
            "users' ratings of their answers, by the version that served the answer, the "
            "user's tier and the rating (a rating changed to the other counts the new one)",
            ["version", "tier", "rating"], registry=registry,
        )  # fmt: skip
        self._start_at_zero()

    def know_versions(self, names: Iterable[str]) -> None:
        """The per-version series at zero for versions the rollout names: versions appear
        while the gateway runs, so they cannot all be made at the start."""
        for name in names:
            for tier in Tier:
                # A failover share over a version without failovers reads 0, not "no data".
                self.version_failovers.labels(name, tier.value)
                for rating in Rating:
                    self.feedback.labels(name, tier.value, rating.value)

    def observe_version(
        self, version: str, tier: Tier, finish: str, ttft_s: float | None, rate: float | None
    ) -> None:
        """rate: domain/scores.py's tokens_per_s of the answer; None for none."""
        self.version_answers.labels(version, tier.value, finish).inc()
        if ttft_s is not None:
            self.version_ttft.labels(version, tier.value).observe(ttft_s)
        if rate is not None:
            self.version_tokens_per_s.labels(version, tier.value).observe(rate)

    def _start_at_zero(self) -> None:
        for tier in Tier:
            for pool in POOLS:
                self.ttft.labels(tier.value, pool)
                self.queue_wait.labels(tier.value, pool)
                self.failovers.labels(tier.value, pool)
            for reason in REFUSAL_REASONS:
                self.refusals.labels(tier.value, reason)
            for what in SHED_KINDS:
                self.sheds.labels(tier.value, what)
            for outcome in ("admitted", "refused"):
                self.bucket_store_unavailable.labels(tier.value, outcome)
            self.limiter_refusals.labels(tier.value)
            self.budget_downgrades.labels(tier.value)
            self.retracted_chars.labels(tier.value)
        for pool in POOLS:
            self.runaways.labels(pool)
            for reason in RouteReason:
                self.routes.labels(reason.value, pool)
        for from_pool, to in FALLBACKS:
            self.fallbacks.labels(from_pool, to)

    def observe_bucket_store_unavailable(self, tier: Tier, admitted: bool) -> None:
        outcome = "admitted" if admitted else "refused"
        self.bucket_store_unavailable.labels(tier.value, outcome).inc()

    def observe_answer(
        self,
        tier: Tier,
        pool: str,
        model: str,
        ttft_s: float | None,
        stream_s: float,
        usage: Usage,
        finish: str,
    ) -> None:
        labels = (tier.value, model)
        self.answers.labels(*labels, finish).inc()
        if ttft_s is not None:
            self.ttft.labels(tier.value, pool).observe(ttft_s)
            if usage.output_tokens > 1:
                per_token = stream_s / (usage.output_tokens - 1)
                self.time_per_output_token.labels(*labels).observe(per_token)
        if usage.input_tokens:
            self.prefill_tokens.labels(*labels).observe(usage.input_tokens - usage.cached_tokens)
            self.cached_share.labels(*labels).observe(usage.cached_tokens / usage.input_tokens)
