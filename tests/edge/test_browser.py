"""The web chat page at `/`, clicked through in a real browser (Debian's Chromium, headless)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import grpc
import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, Page, async_playwright, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from prometheus_client import CollectorRegistry

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.safety import Refusals
from edge.app import EdgeSettings, build_app
from store.factory import open_store

CHROMIUM = "/usr/bin/chromium"
# The background-networking flags keep Chromium from calling out: this machine's network is
# closed, and those connections would be refused.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MODEL = "smollm2-135m-instruct"
LONG = "Write a very long story about the sea, in many chapters."
SLOW_S = 240  # a whole answer on a busy 2-core machine
RETRACT_BLOCKLIST = Path(__file__).parents[1] / "e2e" / "data" / "blocks_the.json"


# Served as plain files ---------------------------------------------------------------------------


async def raw_get(server: TestServer, target: str) -> tuple[int, str]:
    """A GET of `target` exactly as written: clients would normalise the '..' away first."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = (await reader.read()).decode(errors="replace")
    writer.close()
    await writer.wait_closed()
    return int(answer.split(" ", 2)[1]), answer


async def test_the_page_is_served_with_a_policy_and_nothing_else_is() -> None:
    channel = grpc.aio.insecure_channel("127.0.0.1:1")  # never called by these routes
    server = TestServer(build_app(channel, EdgeSettings(), CollectorRegistry()))
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(server.make_url("/")) as response:
                assert response.status == 200
                assert response.content_type == "text/html"
                assert "default-src 'self'" in response.headers["Content-Security-Policy"]
                page = await response.text()
            assert '<script src="/static/chat.js"' in page
            for name, kind in [("chat.js", "text/javascript"), ("chat.css", "text/css")]:
                async with http.get(server.make_url(f"/static/{name}")) as response:
                    assert (response.status, response.content_type) == (200, kind)
        for target in [
            "/static/../app.py",
            "/static/..%2fapp.py",
            "/static/%2e%2e%2fapp.py",
            "/static/..%2F..%2Fpyproject.toml",
            "/static/app.py",
            "/static/missing.js",
        ]:
            status, answer = await raw_get(server, target)
            assert status == 404, target
            assert "Edge" not in answer  # no bit of app.py came back
    finally:
        await server.close()
        await channel.close()


# In the browser ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as driver:
        launched = await driver.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        await launched.close()


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()  # its own storage: no token, nothing pending
    opened = await context.new_page()
    yield opened
    await context.close()


async def sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/")
    await page.fill("#token", token)
    await page.click("#save-token")
    await expect(page.locator("#notice")).to_be_hidden()


async def ask(page: Page, text: str) -> None:
    await page.fill("#input", text)
    await page.click("#send")


async def stored_messages(platform: LocalPlatform, token: str, page: Page) -> list[dict]:
    conversation = urlsplit(page.url).fragment
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{platform.edge_url}/v1/conversations/{conversation}/messages",
            headers={"Authorization": f"Bearer {token}"},
        ) as response,
    ):
        assert response.status == 200
        return (await response.json())["messages"]


async def see_it_stream(page: Page, answer_index: int) -> None:
    """The answer's model is shown and its text grows while it is still streaming."""
    answer = page.locator(".assistant").nth(answer_index)
    await expect(answer.locator(".model")).to_contain_text(MODEL, timeout=60_000)
    await expect(answer.locator(".text")).not_to_be_empty(timeout=60_000)
    seen = len(await answer.locator(".text").text_content() or "")
    await page.wait_for_function(
        "([i, n]) => document.querySelectorAll('.assistant .text')[i].textContent.length > n",
        arg=[answer_index, seen],
        timeout=60_000,
    )
    await expect(answer).to_have_attribute("data-state", "streaming")


async def stopped_while_streaming(page: Page, answer_index: int) -> bool:
    """Clicks Stop while the answer streams. False when the model ended the answer first: at
    temperature 0.7 SmolLM sometimes closes even a 'very long story' after a few lines."""
    await see_it_stream(page, answer_index)
    answer = page.locator(".assistant").nth(answer_index)
    try:
        await page.click("#stop", timeout=5_000)
    except PlaywrightTimeoutError:  # disabled: nothing streams any more
        await expect(answer).not_to_have_attribute("data-state", "streaming")
        return False
    await expect(answer).not_to_have_attribute("data-state", "streaming", timeout=60_000)
    return await answer.get_attribute("data-state") == "cancelled"


@pytest.mark.slow
async def test_an_answer_streams_with_its_model_stops_and_regenerates(
    platform: LocalPlatform, page: Page
) -> None:
    token = platform.tokens["free"]
    await sign_in(page, platform.edge_url, token)
    await ask(page, LONG)
    stopped = [await stopped_while_streaming(page, 0)]
    # Regenerate (a new answer to the same question, in the same turn) until two answers were
    # stopped mid-stream, at least one of them a regenerated one.
    while stopped.count(True) < 2 and len(stopped) < 5:
        await page.locator(".assistant").nth(0).locator(".regen").click()
        await expect(page.locator(".turn")).to_have_count(1)
        await expect(page.locator(".turn .assistant")).to_have_count(len(stopped) + 1)
        stopped.append(await stopped_while_streaming(page, len(stopped)))
    assert stopped.count(True) == 2, stopped
    await expect(page.locator("#stop")).to_be_disabled()
    ended_itself = re.compile(r"^(|cut at the length limit)$")  # the labels of stop, length
    finishes = ["stopped" if was_stopped else ended_itself for was_stopped in stopped]
    await expect(page.locator(".assistant .finish")).to_have_text(finishes)

    stored = await stored_messages(platform, token, page)
    questions = [m for m in stored if m["role"] == "user"]
    answers = [m for m in stored if m["role"] == "assistant"]
    assert [q["content"] for q in questions] == [LONG] * len(stopped)
    assert [a["parentId"] for a in answers] == [q["messageId"] for q in questions]
    for answer, was_stopped in zip(answers, stopped, strict=True):
        if was_stopped:
            assert answer["finish"] == "cancelled"
        else:
            assert answer["finish"] in ("stop", "length")
    on_page = await page.locator(".assistant .text").all_text_contents()
    assert on_page == [a["content"] for a in answers]
    # The conversation is listed (and marked as the one on screen).
    listed = page.locator(f"#conversations button[data-cid='{urlsplit(page.url).fragment}']")
    await expect(listed).to_have_class("current")


@pytest.fixture(scope="module")
async def short_answers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """Free answers of at most 200 tokens, so a whole one ends soon even on a busy machine, and
    a small Free bucket: a message reserves its prompt + 4 x 200 answer tokens (about 840 for a
    short question, 950 for the long one below), which 1,000 affords once, then a 429."""
    short = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("page"),
            edge_listen="127.0.0.1:0",
            slot_context_tokens=2048,
            extra_env={
                "CHAT_GATEWAY_FREE_MAX_ANSWER_TOKENS": "200",
                "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1000",
            },
        )
    )
    try:
        await short.start()
        yield short
    finally:
        await short.stop()


@pytest.mark.slow
async def test_a_reload_mid_answer_resumes_it_to_the_end(
    short_answers: LocalPlatform, page: Page
) -> None:
    platform = short_answers
    # The model mostly writes on to the 200 tokens, time to reload within; at temperature 0.7
    # it sometimes ends within the output check's 50-token hold-back, and the answer comes as
    # one delta, nothing to reload in the middle of: then a new user (the Free bucket affords
    # one long question) asks again, up to three times.
    for _ in range(3):
        async with AdminClient(
            platform.scheduler_address, platform.admin_token, tls=platform.tls()
        ) as admin:
            token = (await admin.create_user(f"reload-{uuid.uuid4().hex[:8]}", "free")).token
        await sign_in(page, platform.edge_url, token)
        await ask(page, LONG)
        # What the page keeps for a resume, once a few deltas have arrived; or the answer's end.
        kept = await page.wait_for_function(
            """() => {
                const p = JSON.parse(sessionStorage.getItem('chat.pending') || 'null');
                if (p && p.lastEventId >= 4) return p;
                const a = document.querySelector('.assistant');
                return !p && a && a.dataset.state && a.dataset.state !== 'streaming'
                    ? 'ended' : null;
            }""",
            timeout=60_000,
        )
        pending = await kept.json_value()
        if pending != "ended":
            break
    assert pending != "ended", "the model ended its answer within the hold-back three times"
    async with page.expect_request(re.compile(r"/v1/messages/[^/]+/stream$")) as resumed:
        await page.reload()
    request = await resumed.value
    assert request.url.endswith(f"/v1/messages/{pending['messageId']}/stream")
    assert int(request.headers["last-event-id"]) >= pending["lastEventId"]
    assert token not in request.url and token not in page.url

    answer = page.locator(".assistant")
    await expect(answer).to_have_count(1)
    await expect(answer.locator(".model")).to_contain_text(MODEL)
    await expect(answer).not_to_have_attribute("data-state", "streaming", timeout=SLOW_S * 1000)
    text = await answer.locator(".text").text_content()
    assert text is not None and text.startswith(pending["text"])
    stored = await stored_messages(platform, token, page)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[1]["parentId"] == stored[0]["messageId"] == pending["messageId"]
    assert text == stored[1]["content"]
    assert await page.evaluate("sessionStorage.getItem('chat.pending')") is None


@pytest.mark.slow
async def test_a_429_says_when_to_try_again(short_answers: LocalPlatform, page: Page) -> None:
    question = "Give this one title: " + "the quick brown fox jumps over the lazy dog, " * 10
    # A Free user of its own: draining the dev user's bucket would refuse the other tests'.
    async with AdminClient(
        short_answers.scheduler_address, short_answers.admin_token, tls=short_answers.tls()
    ) as admin:
        created = await admin.create_user(f"drain-{uuid.uuid4().hex[:8]}", "free")
    await sign_in(page, short_answers.edge_url, created.token)
    refused = None
    # The bucket affords one answer, so the second question is refused.
    for _ in range(3):
        await page.click("#new-chat")
        # Its headers come with the answer's first event, after the pick: on a busy machine
        # (the whole suite, llama.cpp on two shared cores) that once took over the 30 s default.
        async with page.expect_response(
            lambda r: r.request.method == "POST", timeout=SLOW_S * 1000
        ) as sent:
            await ask(page, question)
        response = await sent.value
        if response.status == 429:
            refused = response
            break
        assert response.status == 200
        await expect(page.locator(".assistant").last).not_to_have_attribute(
            "data-state", "streaming", timeout=SLOW_S * 1000
        )
    assert refused is not None
    wait = int(await refused.header_value("retry-after") or "0")
    assert wait >= 1
    await expect(page.locator("#notice")).to_have_text(
        f"You've reached your limit — try again in {wait} s."
    )
    # Nothing is left on the page of the refused question; it is back in the box.
    await expect(page.locator(".turn")).to_have_count(0)
    await expect(page.locator("#input")).to_have_value(question.strip())
    await expect(page.locator("#send")).to_be_enabled()


@pytest.fixture(scope="module")
async def retracting(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    """Plus in its shipped retract mode on the simulated engine, whose answers hold the word
    the test blocklist flags ("the"); slower than real time, so the text is on the page a
    while."""
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("page-retract"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
                "CHAT_NODEAGENT_SIM_SPEED": "0.3",
                "CHAT_GATEWAY_SAFETY_BLOCKLIST": str(RETRACT_BLOCKLIST),
                "CHAT_GATEWAY_ROUTER": "false",
            },
        )
    )
    try:
        await platform.start()
        yield platform
    finally:
        await platform.stop()


@pytest.mark.slow
async def test_a_withdrawn_answer_leaves_only_the_refusal_on_the_page(
    retracting: LocalPlatform, page: Page
) -> None:
    token = retracting.tokens["plus"]
    await sign_in(page, retracting.edge_url, token)
    await ask(page, "Describe a quiet morning.")  # the simulator says "the" 57 tokens in
    answer = page.locator(".assistant")
    await expect(answer.locator(".text")).not_to_be_empty(timeout=30_000)
    assert not (await answer.locator(".text").text_content() or "").startswith("I can't")
    await expect(answer).to_have_attribute("data-state", "refused", timeout=30_000)
    refusal = Refusals().output
    await expect(answer.locator(".text")).to_have_text(refusal)
    stored = await stored_messages(retracting, token, page)
    assert [m["content"] for m in stored] == ["Describe a quiet morning.", refusal]


@pytest.mark.slow
async def test_the_thumbs_under_a_finished_answer_rate_it_and_the_last_one_counts(
    short_answers: LocalPlatform, page: Page
) -> None:
    user_id = f"thumbs-{uuid.uuid4().hex[:8]}"
    async with AdminClient(
        short_answers.scheduler_address, short_answers.admin_token, tls=short_answers.tls()
    ) as admin:
        token = (await admin.create_user(user_id, "free")).token
    await sign_in(page, short_answers.edge_url, token)
    # Saving the token starts the page's first reads (the conversation list, an answer left
    # pending): a question asked before they end can be wiped by them on a slow machine.
    await page.wait_for_load_state("networkidle")
    await ask(page, "Say hi.")
    answer = page.locator(".assistant")
    await expect(answer).not_to_have_attribute("data-state", "streaming", timeout=SLOW_S * 1000)
    (_, stored_answer) = await stored_messages(short_answers, token, page)
    store = await open_store(f"sqlite:///{short_answers.settings.state_dir / 'chat.db'}")
    try:
        for rating, other in (("down", "up"), ("up", "down")):
            async with page.expect_response(re.compile(r"/feedback$")) as sent:
                await answer.locator(f".rate-{rating}").click()
            assert (await sent.value).status == 200
            await expect(answer.locator(f".rate-{rating}")).to_have_attribute(
                "aria-pressed", "true"
            )
            await expect(answer.locator(f".rate-{other}")).to_have_attribute(
                "aria-pressed", "false"
            )
            stored = await store.feedback_of(user_id, stored_answer["messageId"])
            assert (stored.rating, stored.comment) == (rating, "")
    finally:
        await store.close()
    # A stored answer, shown again after a reload, has its thumbs too.
    await page.reload()
    await expect(page.locator(".assistant .rate-up")).to_have_count(1)


@pytest.mark.slow
async def test_the_memory_panel_keeps_pins_and_forgets_entries_and_the_model_may_save_one(
    retracting: LocalPlatform, page: Page
) -> None:
    """The panel over /v1/memories, and the composer's switch that names the remember tool
    (the simulated model calls the tool it is offered; its prose after, which says "the", is
    withdrawn by this platform's blocklist, but the entry was written before)."""
    async with AdminClient(
        retracting.scheduler_address, retracting.admin_token, tls=retracting.tls()
    ) as admin:
        token = (await admin.create_user(f"memory-{uuid.uuid4().hex[:8]}", "plus")).token
    await sign_in(page, retracting.edge_url, token)
    await page.wait_for_load_state("networkidle")
    await page.click("#memory summary")
    await page.fill("#memory-text", "I keep bees")
    await page.click("#memory-form button")
    entries = page.locator("#memories li")
    await expect(entries).to_have_count(1)
    await expect(entries.locator(".memory-text")).to_have_text("I keep bees")
    await entries.locator(".memory-pin").click()
    await expect(entries.locator(".memory-pin")).to_have_attribute("aria-pressed", "true")

    async def listed() -> list[dict]:
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                f"{retracting.edge_url}/v1/memories", headers={"Authorization": f"Bearer {token}"}
            ) as response,  # fmt: skip
        ):
            return (await response.json())["memories"]

    assert [(m["text"], m["pinned"]) for m in await listed()] == [("I keep bees", True)]
    await entries.locator(".memory-delete").click()
    await expect(entries).to_have_count(0)
    assert await listed() == []

    await page.check("#remember")
    async with page.expect_request(re.compile(r"/messages$")) as sent:
        await ask(page, "Please remember this.")
    assert (await sent.value).post_data_json["tools"] == [{"type": "remember"}]
    answer = page.locator(".assistant")
    await expect(answer).not_to_have_attribute("data-state", "streaming", timeout=30_000)
    (saved,) = await listed()
    assert saved["source"] == "model"
    await expect(entries.locator(".memory-text")).to_have_text(saved["text"])
