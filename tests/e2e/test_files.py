"""Files and file_search end to end, on real processes: an edge, a gateway, a scheduler and a
simulated replica over real sockets, driven through the OpenAI SDK. A user uploads a text
file (the Files API), asks the Responses API with `{"type": "file_search"}`, and reads an
answer that cites the passage it was given; bad uploads get a clear 4xx and keep nothing.

The simulated model is the script (nodeagent/sim.py): it searches for what the user asked,
then answers and cites each passage marker it read, as far as the engine's citation grammar
lets it. The resolver's repairs are tested with a scripted model in
tests/gateway/test_turn_citations.py; the grammar on the real engines in tests/nodeagent."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from chat.v1 import common_pb2
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.passages import passages
from domain.types import Role
from gateway.files import search_result
from store.records import FilePassage
from tests.e2e.responses_support import gateway_counter, new_user, sdk, simulated_answer

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a careful assistant."
ANSWER_TOKENS = (12, 18)
NOTES = (
    "Gateway launch plan.\n\nThe gateway ships in May, after the load tests pass.\n\n"
    "Budget review happens every quarter; the caf\u00e9 opens at nine."
)
QUESTION = "When does the gateway launch, according to my notes?"


@pytest.fixture(scope="module")
async def platform(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalPlatform]:
    local = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("files"),
            edge_listen="127.0.0.1:0",
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                # Small passages, so the notes are several and a search picks one.
                "CHAT_GATEWAY_FILES_PASSAGE_CHARS": "60",
                "CHAT_GATEWAY_FILES_MAX_BYTES": "4096",
            },
        )
    )
    await local.start()
    yield local
    await local.stop()


async def test_a_file_is_kept_listed_read_back_and_deleted(platform: LocalPlatform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        kept = await client.files.create(file=("notes.txt", NOTES.encode()), purpose="user_data")
        assert (kept.object, kept.filename, kept.purpose, kept.bytes, kept.status) == (
            "file", "notes.txt", "user_data", len(NOTES.encode()), "processed")  # fmt: skip
        assert kept.id.startswith("file-")
        assert [f.id for f in (await client.files.list()).data] == [kept.id]
        assert (await client.files.retrieve(kept.id)).model_dump() == kept.model_dump()
        assert (await client.files.content(kept.id)).text == NOTES
        deleted = await client.files.delete(kept.id)
        assert (deleted.id, deleted.deleted) == (kept.id, True)
        with pytest.raises(openai.NotFoundError):
            await client.files.retrieve(kept.id)
        assert (await client.files.list()).data == []


async def test_another_users_file_is_not_found(platform: LocalPlatform) -> None:
    async with sdk(platform, await new_user(platform)) as owner:
        kept = await owner.files.create(file=("notes.txt", NOTES.encode()), purpose="user_data")
    async with sdk(platform, await new_user(platform)) as other:
        for read in (other.files.retrieve, other.files.content, other.files.delete):
            with pytest.raises(openai.NotFoundError):
                await read(kept.id)
        assert (await other.files.list()).data == []


@pytest.mark.parametrize(
    ("content", "purpose", "status", "reason"),
    [
        (b"\xff\xfe binary", "user_data", 400, "not UTF-8 text (byte 0)"),
        (b"", "user_data", 400, "the file is empty"),
        (b"a\x00b", "user_data", 400, "holds NUL bytes"),
        (b"   \n\n ", "user_data", 400, "holds no words"),
        (b"text", "fine-tune", 400, "purpose 'fine-tune'"),
        (b"x" * 4097, "user_data", 400, "the file is 4097 bytes; at most 4096"),
    ],
)
async def test_a_bad_upload_is_refused_with_its_reason_and_nothing_kept(
    platform: LocalPlatform, content: bytes, purpose: str, status: int, reason: str
) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        with pytest.raises(openai.APIStatusError) as refused:
            await client.files.create(file=("notes.txt", content), purpose=purpose)  # type: ignore[arg-type]
        assert refused.value.status_code == status
        assert reason in refused.value.message
        assert (await client.files.list()).data == []


async def test_an_upload_must_be_a_form_with_a_file_and_a_purpose(platform: LocalPlatform) -> None:
    token = await new_user(platform)
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http:
        url = f"{platform.edge_url}/v1/files"
        async with http.post(url, json={"file": "x"}, headers=headers) as reply:
            assert reply.status == 400
            assert "multipart/form-data" in (await reply.json())["error"]["message"]
        form = aiohttp.FormData(default_to_multipart=True)
        form.add_field("purpose", "user_data")
        async with http.post(url, data=form, headers=headers) as reply:
            assert (reply.status, (await reply.json())["error"]["param"]) == (400, "file")
        async with http.get(f"{url}/not-a-file-id", headers=headers) as reply:
            assert reply.status == 404


async def test_file_search_answers_citing_the_passage_it_read(platform: LocalPlatform) -> None:
    before = await gateway_counter(platform, "gateway_citations_total", "outcome", "resolved")
    async with sdk(platform, await new_user(platform, common_pb2.TIER_FREE)) as client:
        kept = await client.files.create(file=("notes.txt", NOTES.encode()), purpose="user_data")
        response = await client.responses.create(
            model="auto", input=QUESTION, store=False,
            tools=[{"type": "file_search"}],  # type: ignore[list-item]
        )  # fmt: skip
    listed, searched, message = response.output
    assert [tool.name for tool in listed.tools] == ["file_search"]
    assert (searched.type, searched.name) == ("file_search_call", "file_search")
    # The passage that holds "gateway" and "launch" first; the model searched what was asked.
    found = [FilePassage(kept.id, "notes.txt", 0, "Gateway launch plan."),
             FilePassage(kept.id, "notes.txt", 1,
                         "The gateway ships in May, after the load tests pass.")]  # fmt: skip
    assert searched.output == search_result(found)
    assert message.type == "message" and response.status == "completed"
    prose = simulated_answer(ANSWER_TOKENS, (Role.SYSTEM, SYSTEM_PROMPT), (Role.USER, QUESTION),
                             (Role.ASSISTANT, ""), (Role.TOOL, searched.output))  # fmt: skip
    # The model copies the markers it read; both were retrieved, so both stay.
    assert response.output_text == f"{prose} [[cite:{kept.id}#0]] [[cite:{kept.id}#1]]"
    after = await gateway_counter(platform, "gateway_citations_total", "outcome", "resolved")
    assert after == before + 2


async def test_a_deleted_file_is_searched_no_more(platform: LocalPlatform) -> None:
    async with sdk(platform, await new_user(platform)) as client:
        kept = await client.files.create(file=("notes.txt", NOTES.encode()), purpose="user_data")
        await client.files.delete(kept.id)
        response = await client.responses.create(
            model="auto", input=QUESTION, store=False,
            tools=[{"type": "file_search"}],  # type: ignore[list-item]
        )  # fmt: skip
    searched = response.output[1]
    assert searched.output == search_result([])
    assert kept.id not in response.output_text


def test_the_notes_are_cut_where_the_test_expects() -> None:
    """The passages the search test names, as the gateway cuts the notes at 60 characters."""
    assert passages(NOTES, 60)[:2] == [
        "Gateway launch plan.",
        "The gateway ships in May, after the load tests pass.",
    ]
