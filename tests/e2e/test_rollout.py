"""Model versions behind the real local platform (scheduler, llama.cpp SmolLM2 node, gateway,
edge), on a platform of their own: versions that differ only in the system prompt share the
node; a split by user puts the same users on the candidate every time and a conversation
keeps its version when the split changes; a candidate whose answers fail is rolled back by
itself; a user past the daily allowance is served by the small pool; a completion through the
OpenAI-compatible API is served by the same version and the same allowance."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from clients.admin_client import AdminClient
from clients.base import ClientError
from clients.chat_client import ChatClient, Rated
from clients.chatctl.platform import LocalPlatform
from domain.guardrails import Tally
from domain.refusal import is_refusal
from domain.rollout import GateRecord, Slice, Version
from domain.types import Tier
from store.factory import open_store
from tests.api_schema import assert_conforms
from tests.clients.test_chatctl import admin_flags, clean_env, start, tls_dir
from tests.e2e.rollout_support import (
    complete,
    eval_chatctl,
    gate_rows,
    gateway_caught_up,
    gateway_metric,
    new_id,
    new_user,
    rate,
    rollout_admin,
    rollout_platform_settings,
    score_row,
    send,
    users_in_slices,
)

pytestmark = pytest.mark.slow

# Long enough that its token count tells it apart from the configured prompt in `usage`.
CANDIDATE_PROMPT = (
    "You are a careful assistant for a travel company. Answer in one short sentence, "
    "politely, and never use lists, headings or emoji in any answer you give."
)


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(rollout_platform_settings(tmp_path_factory.mktemp("rollout")))
    try:
        await local.start()
        yield local
    finally:
        await local.stop()


async def test_a_split_keeps_users_on_their_slice_and_conversations_on_their_version(
    platform: LocalPlatform,
) -> None:
    name = f"terse-{uuid.uuid4().hex[:6]}"
    async with rollout_admin(platform) as admin:
        await admin.create(Version(name, system_prompt=CANDIDATE_PROMPT, temperature=0.7))
        state = await admin.split(name, "free", 10.0)
        current = state.current
        # The change reaches the gateway (through the scheduler) within a second.
        assert await gateway_caught_up(platform, admin) < 1.0
        try:
            users = await users_in_slices(platform, state, Tier.FREE,
                                          {Slice.CANDIDATE: 2, Slice.CURRENT: 1})  # fmt: skip
            on_candidate = [token for _, token in users[Slice.CANDIDATE]]
            on_current = [token for _, token in users[Slice.CURRENT]]
            firsts = {}
            for token in on_candidate + on_current:
                conversation = new_id("c")
                first = await send(platform, token, conversation, "Say hi.")
                again = await send(platform, token, new_id("c"), "Say hi.")
                firsts[token] = (conversation, first)
                expected = name if token in on_candidate else current
                # The same users on the candidate every time, in every new conversation.
                assert (first.status, first.version, again.version) == (200, expected, expected)
            # The candidate's own system prompt reached the model: the same message costs
            # more prompt tokens on it.
            base_input = firsts[on_current[0]][1].input_tokens
            assert firsts[on_candidate[0]][1].input_tokens > base_input + 20

            await admin.rollback("the test moves the split")
            await gateway_caught_up(platform, admin)
            conversation, _ = firsts[on_candidate[0]]
            kept = await send(platform, on_candidate[0], conversation, "Thanks. Say bye.")
            fresh = await send(platform, on_candidate[0], new_id("c"), "Say hi.")
            assert (kept.version, fresh.version) == (name, current)
        finally:
            latest = await admin.rollout()
            if latest.candidate == name and any(p for _, p in latest.percent):
                await admin.rollback("test cleanup")


async def test_a_candidate_whose_answers_fail_is_rolled_back_automatically(
    platform: LocalPlatform,
) -> None:
    # A model no node serves: every answer of the candidate fails (a composed "busy").
    name = f"broken-{uuid.uuid4().hex[:6]}"
    async with rollout_admin(platform) as admin:
        await admin.create(Version(name, model="no-such-model"))
        state = await admin.split(name, "free", 50.0)
        await gateway_caught_up(platform, admin)
        users = await users_in_slices(platform, state, Tier.FREE, {Slice.CANDIDATE: 1})
        ((_, token),) = users[Slice.CANDIDATE]
        for _ in range(4):
            failed = await send(platform, token, new_id("c"), "Say hi.")
            assert (failed.version, failed.model, failed.finish) == (name, "busy", "error")
        # The gateway reports within 0.5 s and the check runs every second: polled against a
        # deadline, not a count of calls, which a fast machine made in well under a second.
        deadline = time.monotonic() + 30.0
        latest = await admin.rollout()
        while latest.history[-1].action != "rollback" and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # a poll of the scheduler's state, not a wait for timing
            latest = await admin.rollout()
        await gateway_caught_up(platform, admin)
        change = latest.history[-1]
        assert (change.action, change.version, dict(latest.percent)) == (
            "rollback",
            name,
            {"free": 0.0},
        )
        assert change.detail.startswith("automatic: error share 1.00 > 0.00 + 0.05 (4 answers)")
        await gateway_caught_up(platform, admin)
        back = await send(platform, token, new_id("c"), "Say hi.")
        assert (back.version, back.finish) == (latest.current, back.finish)
        assert back.model != "busy"


async def test_a_user_past_the_daily_allowance_is_served_by_the_small_pool(
    platform: LocalPlatform,
) -> None:
    user_id, token = await new_user(platform, Tier.PLUS)
    within = await send(platform, token, new_id("c"), "Say hi.", model="large")
    over = await send(platform, token, new_id("c"), "Say hi.", model="large")
    # The first answer was written (not failed): what it cost is what spends the allowance.
    assert (within.status, within.downgraded, within.finish in ("stop", "length")) == (
        200,
        "",
        True,
    )
    # Written too, to its end or to the cap: a short greeting may end before 12 tokens.
    assert (over.status, over.downgraded, over.finish in ("stop", "length")) == (
        200,
        "daily_budget",
        True,
    )
    store = await open_store(f"sqlite:///{platform.settings.state_dir / 'chat.db'}")
    try:
        first = await store.serving_of(user_id, within.message_id)
        second = await store.serving_of(user_id, over.message_id)
    finally:
        await store.close()
    # Which tier actually served: the router chose large; the first fell back to small (this
    # platform has no large node), the second was sent there by the allowance.
    assert (first.routed_pool, first.budget, first.served_pool) == ("large", "within", "small")
    assert (second.routed_pool, second.budget, second.served_pool) == ("large", "over", "small")
    # And the client is told so, in the meta event and the response's headers alike.
    assert (within.pool, within.headers) == (("small", "fallback"), ("small", "fallback"))
    assert (over.pool, over.headers) == (("small", "allowance"), ("small", "allowance"))


async def test_a_completion_is_served_by_the_version_of_the_users_slice(
    platform: LocalPlatform,
) -> None:
    name = f"terse-{uuid.uuid4().hex[:6]}"
    async with rollout_admin(platform) as admin:
        await admin.create(Version(name, system_prompt=CANDIDATE_PROMPT))
        state = await admin.split(name, "free", 10.0)
        await gateway_caught_up(platform, admin)
        try:
            users = await users_in_slices(platform, state, Tier.FREE,
                                          {Slice.CANDIDATE: 1, Slice.CURRENT: 1})  # fmt: skip
            before = await gateway_metric(platform, "gateway_version_answers_total")
            prompts = {}
            for where, version in ((Slice.CANDIDATE, name), (Slice.CURRENT, state.current)):
                ((_, token),) = users[where]
                chat = await send(platform, token, new_id("c"), "Say hi.")
                done = await complete(platform, token, "Say hi.")
                assert (done.status, chat.version) == (200, version), done.body
                # OpenAI's system_fingerprint names the version and the replica that served.
                assert done.body["system_fingerprint"] == f"{version}@{done.replica}"
                # The version's system prompt led the completion exactly as it leads the
                # user's messages: the same system prompt and message, the same prompt tokens.
                assert done.body["usage"]["prompt_tokens"] == chat.input_tokens
                prompts[where] = chat.input_tokens
            assert prompts[Slice.CANDIDATE] > prompts[Slice.CURRENT] + 20
            after = await gateway_metric(platform, "gateway_version_answers_total")
        finally:
            await admin.rollback("test cleanup")
    # Label values as the exposition sorts them: finish, tier, version. The candidate's
    # message and completion, each counted once in its per-version series.
    counted = sum(after[key] - before.get(key, 0.0) for key in after if key[1:] == ("free", name))
    assert counted == 2.0


async def test_a_completion_past_the_daily_allowance_is_routed_down_a_tier(
    platform: LocalPlatform,
) -> None:
    _, token = await new_user(platform, Tier.PLUS)
    seen = [await gateway_metric(platform, "gateway_fallbacks_total"),
            await gateway_metric(platform, "gateway_budget_downgrades_total")]  # fmt: skip
    for _ in range(2):
        done = await complete(platform, token, "Say hi.", model="large")
        assert done.status == 200, done.body
        seen += [await gateway_metric(platform, "gateway_fallbacks_total"),
                 await gateway_metric(platform, "gateway_budget_downgrades_total")]  # fmt: skip
    fallbacks = [f.get(("large", "small"), 0.0) for f in seen[0::2]]
    downgrades = [d[("plus",)] for d in seen[1::2]]
    # The first completion, within the allowance, went to the large pool the caller asked for
    # and fell back to small (this platform has no large node); the second, past the
    # allowance its answer spent, was sent to the small pool by the allowance.
    assert (fallbacks[1] - fallbacks[0], downgrades[1] - downgrades[0]) == (1.0, 0.0)
    assert (fallbacks[2] - fallbacks[1], downgrades[2] - downgrades[1]) == (0.0, 1.0)


async def test_a_user_rates_their_answer_and_the_rating_counts_for_its_version(
    platform: LocalPlatform,
) -> None:
    user_id, token = await new_user(platform, Tier.FREE)
    _, stranger = await new_user(platform, Tier.FREE)
    conversation = new_id("c")
    sent = await send(platform, token, conversation, "Say hi.")
    answer_id, version = sent.message_id + ".answer", sent.version
    before = await gateway_metric(platform, "gateway_feedback_total")
    # Label values in the order the exposition sorts them: rating, tier, version. Every known
    # label is there at zero before any rating.
    assert before[("up", "plus", version)] == 0.0

    down = {"rating": "down", "comment": "Too short, and it ignored my question."}
    assert await rate(platform, token, answer_id, down) == (
        200,
        {"messageId": answer_id, "rating": "down", "version": version},
    )
    assert_conforms("Rating", (await rate(platform, token, answer_id, down))[1])
    # Rating again replaces the rating: one row, the newest rating and comment.
    again = {"rating": "up", "comment": None}
    assert await rate(platform, token, answer_id, again) == (
        200,
        {"messageId": answer_id, "rating": "up", "version": version},
    )
    refused = [
        (token, answer_id, {"rating": "meh"}, 400, "'rating' must be up or down"),
        (token, answer_id, {"comment": "no rating"}, 400, "'rating' must be up or down"),
        (token, answer_id, {"rating": "up", "comment": 7}, 400, "'comment' must be a string"),
        (token, answer_id, {"rating": "up", "coment": "typo"}, 400,
         "unrecognized request argument supplied: coment"),
        (token, answer_id, {"rating": "up", "comment": "x" * 2001}, 400,
         "a comment is at most 2000 characters (this one is 2001)"),
        (token, sent.message_id, {"rating": "up"}, 400,
         f"message {sent.message_id!r} is not an answer: only answers are rated"),
        (token, new_id("m") + ".answer", {"rating": "up"}, 404, None),
        (stranger, answer_id, {"rating": "down"}, 404, None),
        ("", answer_id, {"rating": "down"}, 401, "send 'Authorization: Bearer <token>'"),
    ]  # fmt: skip
    for who, message_id, body, status, reason in refused:
        got_status, reply = await rate(platform, who, message_id, body)
        assert (got_status, reply["error"]["status"]) == (status, status), (body, reply)
        assert_conforms("Error", reply)
        if reason is not None:
            assert reply["error"]["message"] == reason

    # Through the Python client (gRPC), the same answer rated down again.
    async with ChatClient(platform.gateway_address, token, tls=platform.tls()) as chat:
        assert await chat.rate(answer_id, "down", "On second thought.") == Rated(
            answer_id, "down", version
        )
        with pytest.raises(ClientError) as refused_call:
            await chat.rate(sent.message_id, "up")
        assert refused_call.value.code == "INVALID_ARGUMENT"

    # And from the terminal: up again, with another comment.
    env = clean_env(CHAT_GATEWAY=platform.gateway_address, CHAT_TOKEN=token,
                    CHAT_TLS_DIR=tls_dir(platform))  # fmt: skip
    process = await start("feedback", answer_id, "up", "--comment", "Fine after all.", env=env)
    out, err = await process.communicate()
    assert (process.returncode, out.decode(), err.decode()) == (
        0,
        f"rated {answer_id} up (version {version})\n",
        "",
    )

    store = await open_store(f"sqlite:///{platform.settings.state_dir / 'chat.db'}")
    try:
        stored = await store.feedback_of(user_id, answer_id)
    finally:
        await store.close()
    assert (stored.message_id, stored.conversation_id, stored.rating, stored.comment,
            stored.version) == (answer_id, conversation, "up", "Fine after all.",
                                version)  # fmt: skip
    after = await gateway_metric(platform, "gateway_feedback_total")
    counted = {rating: after[(rating, "free", version)] - before[(rating, "free", version)]
               for rating in ("up", "down")}  # fmt: skip
    # down, down again, up, down, up: each change counts its new rating; the same rating again
    # and the refused ones count nothing.
    assert counted == {"up": 2.0, "down": 2.0}


async def test_versions_show_prints_a_versions_answers_and_thumbs_from_the_gateways_tallies(
    platform: LocalPlatform,
) -> None:
    name = f"scored-{uuid.uuid4().hex[:6]}"
    async with rollout_admin(platform) as admin:
        await admin.create(Version(name))
        user_id, token = await new_user(platform, Tier.FREE)
        await admin.pin(user_id, name)  # its answers, and only its, are the version's
        await gateway_caught_up(platform, admin)
        # A version the gateway learnt of has its feedback series at zero.
        assert (await gateway_metric(platform, "gateway_feedback_total"))[
            ("down", "plus", name)
        ] == 0.0
        failovers = await gateway_metric(platform, "gateway_version_failovers_total")
        assert failovers[("plus", name)] == 0.0
        try:
            sent = [await send(platform, token, new_id("c"), "Say hi.") for _ in range(3)]
            assert [s.version for s in sent] == [name] * 3
            # The second answer is rated up first, then changed to down: it counts once, down.
            assert (await rate(platform, token, sent[1].message_id + ".answer",
                               {"rating": "up"}))[0] == 200  # fmt: skip
            for s, rating in zip(sent, ("up", "down", "down"), strict=True):
                assert (await rate(platform, token, s.message_id + ".answer",
                                   {"rating": rating}))[0] == 200  # fmt: skip
            # The gateway sends them with its next poll (every 0.5 s).
            deadline = time.monotonic() + 20
            while (await admin.scores(name))[1].get((name, Tier.FREE), Tally()).thumbs_down < 2:
                assert time.monotonic() < deadline, "the scheduler never got the ratings"
                await asyncio.sleep(0.1)
            shown = await eval_chatctl("versions", "show", name, *admin_flags(platform))
            as_json = await eval_chatctl("versions", "show", name, "--json",
                                         *admin_flags(platform))  # fmt: skip
            every = await eval_chatctl("versions", "show", *admin_flags(platform))
            unknown = await eval_chatctl("versions", "show", "no-such", *admin_flags(platform))
        finally:
            await admin.pin(user_id, "")
    print(shown.out)
    assert (shown.code, shown.err) == (0, "")
    assert shown.out.startswith("online scores over the last 60 s")
    errors = sum(s.finish == "error" for s in sent)
    refusals = sum(is_refusal(s.text, s.finish) for s in sent)
    row = score_row(shown.out, name)
    # No citations: none checked, so no share of them.
    assert row[:11] == [name, "free", "3", f"{errors / 3:.0%}", f"{refusals / 3:.0%}",
                        row[5], "0%", "0", "-", "1", "2"]  # fmt: skip
    # TTFT p50/p95/p99 in seconds, tokens/s p50/p5: read from the tallies' histograms.
    assert all(re.fullmatch(r">?[0-9.e+-]+s", cell) for cell in row[11:14]), row
    assert all(re.fullmatch(r">?[0-9.e+-]+|-", cell) for cell in row[14:]), row
    # The answers are held back (the free tier's output mode) and short: each one's text is
    # shown at once at its end. Their rate is over the whole answer, never the open bucket
    # over 1,000 a second a rate from the first shown text put them in.
    assert all(not cell.startswith(">") and 0 < float(cell) <= 1000 for cell in row[14:]), row
    assert score_row(every.out, name) == row  # every version's, this one's among them
    assert (unknown.code, unknown.out, unknown.err) == (1, "", "chatctl: no version 'no-such'\n")
    (scores,) = as_json.json()["scores"]
    assert (scores["version"], scores["tier"], scores["answers"], scores["thumbs_up"],
            scores["thumbs_down"]) == (name, "free", 3, 1, 2)  # fmt: skip


# The eval gate, through chatctl as an operator runs it: a sample of the golden set (the
# whole set takes minutes on one CPU node; the thresholds need it, the mechanics do not).
# One request at a time: llama.cpp's greedy answers are the same for the same prompt only when
# the batch around them is. The latency rule gets slack: this machine is shared.
SAMPLE = ["--per-category", "1", "--harmful", "3", "--harmless", "2", "--concurrency", "1",
          "--latency-slack", "60"]  # fmt: skip
# SmolLM2-135M does not follow a system prompt that tells it to refuse (it answers as before;
# docs/decisions.md, "The eval gate"), so the failing candidate's prompt breaks it another
# way: too long for the window, so every answer fails.
BROKEN_PROMPT = "7 " * 3900


async def test_the_gate_passes_an_identical_candidate_and_fails_a_broken_one(
    platform: LocalPlatform, tmp_path
) -> None:
    same, refuser = f"same-{uuid.uuid4().hex[:6]}", f"broken-{uuid.uuid4().hex[:6]}"
    async with rollout_admin(platform) as admin:
        state = await admin.rollout()
        current = state.version(state.current)
        await admin.create(Version(same, current.model, current.system_prompt,
                                   current.temperature))  # fmt: skip
        await admin.create(Version(refuser, system_prompt=BROKEN_PROMPT))
        flags = [*admin_flags(platform), "--gateway", platform.gateway_address,
                 "--state-dir", str(tmp_path)]  # fmt: skip
        # The sample is far under the 100 a set a gate needs: the run prints its rules, is no
        # gate, and promote does not see it.
        quick = await eval_chatctl("eval", "run", "--candidate", same, *SAMPLE, *flags)
        print(quick.out)
        assert (quick.code, quick.err) == (3, "")
        assert quick.out.rstrip().splitlines()[-2:] == [
            "sets: 4 golden pairs, 3 harmful and 2 harmless prompts (a gate needs 100 a set)",
            "verdict: NOT A GATE (golden 4, harmful 3, harmless 2 under 100): the rules above "
            "decide nothing and no verdict was recorded for promote",
        ]
        assert gate_rows(quick.out)["win rate"] == ("50.0 %", ">= 50.0 %", "pass")
        assert [g for g in (await admin.rollout()).gates if g.candidate == same] == []
        with pytest.raises(ClientError) as unproven:
            await admin.promote(same)
        assert "it has no gate result" in unproven.value.message

        # An operator who knows the sample resolves what they look at lowers the minimum.
        lowered = [*SAMPLE, "--min-set-size", "2"]
        passed = await eval_chatctl("eval", "run", "--candidate", same, *lowered, *flags)
        failed = await eval_chatctl("eval", "run", "--candidate", refuser, *lowered, *flags)
        # The tables, for whoever reads the test's output.
        print(passed.out, failed.out, sep="\n")
        assert (passed.code, passed.err) == (0, "")
        assert passed.out.rstrip().splitlines()[-2:] == [
            "sets: 4 golden pairs, 3 harmful and 2 harmless prompts (a gate needs 2 a set)",
            "verdict: PASSED",
        ]
        rules = gate_rows(passed.out)
        assert rules["harmful refused"] == ("100.0 %", ">= 99.0 %", "pass")
        assert rules["win rate"] == ("50.0 %", ">= 50.0 %", "pass")
        # The false-refusal rule, read end to end: no harmless prompt refused. Its failing
        # side is unit-tested only (SmolLM2 cannot be prompted into refusing).
        assert rules["harmless refused"] == ("0.0 %", "<= 2.0 %", "pass")
        assert failed.code == 3
        assert failed.out.rstrip().endswith("verdict: FAILED")
        failing = {name for name, row in gate_rows(failed.out).items() if row[2] == "FAIL"}
        assert {"win rate", "error share"} <= failing
        # A failed answer is an error, not a refusal: the broken candidate refuses nothing.
        assert gate_rows(failed.out)["harmless refused"] == ("0.0 %", "<= 2.0 %", "pass")
        shown = await eval_chatctl(
            "eval",
            "show",
            "--candidate",
            same,
            *admin_flags(platform),
            "--state-dir",
            str(tmp_path),
        )
        assert (shown.code, shown.err, shown.out) == (0, "", passed.out)

        # What the gate stood on is in the rollout's gate line and its history.
        sizes = "4 golden pairs, 3 harmful and 2 harmless prompts (minimum 2 a set)"
        listed = await eval_chatctl("versions", "list", *admin_flags(platform))
        (line,) = [ln for ln in listed.out.splitlines() if ln.startswith(f"gate        {same}")]
        assert line.startswith(f"gate        {same} vs {state.current}: passed over {sizes}, ")
        recorded = [c for c in (await admin.rollout()).history if c.action == "gate"]
        assert recorded[-2].detail.startswith(
            f"passed against {state.current} over {sizes}: win rate 50.0 % (>= 50.0 %); "
        )

        # Promotion follows the recorded verdicts: refused without a pass, unless forced.
        with pytest.raises(ClientError) as refused:
            await admin.promote(refuser)
        assert refused.value.code == "FAILED_PRECONDITION"
        assert "its gate against" in refused.value.message
        promoted = await admin.promote(same)
        assert (promoted.current, promoted.history[-1].detail) == (same, "gate passed")


async def test_an_eval_of_an_unknown_version_the_current_one_or_bad_numbers_is_refused(
    platform: LocalPlatform, tmp_path
) -> None:
    flags = [*admin_flags(platform), "--gateway", platform.gateway_address,
             "--state-dir", str(tmp_path)]  # fmt: skip
    async with rollout_admin(platform) as admin:
        state = await admin.rollout()
        names = ", ".join(v.name for v in state.versions)
        unknown = await eval_chatctl("eval", "run", "--candidate", "no-such", *flags)
        itself = await eval_chatctl("eval", "run", "--candidate", state.current, *flags)
        # The scheduler refuses a verdict of a version on itself whoever sends it.
        with pytest.raises(ClientError) as refused:
            await admin.record_gate(GateRecord(state.current, state.current, True, 0.0,
                                               "all rules", 100, 100, 100, 100))  # fmt: skip
    assert (unknown.code, unknown.out, unknown.err) == (
        1,
        "",
        f"chatctl: no version 'no-such' (the versions: {names})\n",
    )
    assert (itself.code, itself.out, itself.err) == (
        1,
        "",
        f"chatctl: {state.current!r} is the current version: the gate compares a candidate "
        "with the current version, and a version against itself passes whatever it answers\n",
    )
    assert (refused.value.code, refused.value.message) == (
        "INVALID_ARGUMENT",
        f"a gate compares a candidate with another version: {state.current!r} against itself "
        "passes whatever it answers",
    )
    for flag, value, reason in (
        ("--harmful", "-1", "'-1' is not a whole number of 0 or more"),
        ("--per-category", "x", "'x' is not a whole number of 0 or more"),
        ("--concurrency", "0", "'0' is not a whole number of 1 or more"),
        ("--min-set-size", "0", "'0' is not a whole number of 1 or more"),
        ("--latency-slack", "nan", "'nan' is not a number of seconds (0 or more)"),
    ):
        bad = await eval_chatctl("eval", "run", "--candidate", "x", flag, value, *flags)
        assert (bad.code, bad.out) == (2, ""), bad.err
        assert bad.err.endswith(f"chatctl eval run: error: argument {flag}: {reason}\n")


async def test_versions_create_refuses_a_model_no_node_serves_unless_forced(
    platform: LocalPlatform,
) -> None:
    async with AdminClient(platform.scheduler_address, platform.admin_token,
                           tls=platform.tls()) as fleet:  # fmt: skip
        served = sorted({node.model for node in await fleet.nodes()})
    typo, later, fine = (f"{what}-{uuid.uuid4().hex[:6]}" for what in ("typo", "later", "fine"))
    flags = admin_flags(platform)
    refused = await eval_chatctl("versions", "create", typo, "--model", "smollm-typo", *flags)
    forced = await eval_chatctl(
        "versions", "create", later, "--model", "smollm-typo", "--force", *flags
    )
    served_one = await eval_chatctl("versions", "create", fine, "--model", served[0], *flags)
    assert (refused.code, refused.out, refused.err) == (
        1,
        "",
        f"chatctl: no node serves the model 'smollm-typo' (the fleet serves: "
        f"{', '.join(served)}); --force creates the version for nodes still to come\n",
    )
    assert (forced.code, forced.err, served_one.code, served_one.err) == (0, "", 0, "")
    async with rollout_admin(platform) as admin:
        state = await admin.rollout()
    assert (state.has(typo), state.version(later).model, state.version(fine).model) == (
        False,
        "smollm-typo",
        served[0],
    )
