import pytest

from domain.errors import AlreadyExists, NotFound
from domain.types import Role, Tier
from store.records import NewMessage
from store.sqlite import SqliteStore


@pytest.fixture
async def store(tmp_path):
    s = SqliteStore(str(tmp_path / "chat.db"))
    await s.open()
    yield s
    await s.close()


def msg(mid: str, role: Role, parent: int | None, tokens: int = 5) -> NewMessage:
    return NewMessage(mid, role, f"text of {mid}", tokens, parent, model="m")


async def test_migrations_are_versioned_and_idempotent(tmp_path) -> None:
    path = str(tmp_path / "chat.db")
    for _ in range(2):
        s = SqliteStore(path)
        await s.open()
        assert await s.schema_version() == 1
        await s.close()


async def test_first_message_creates_the_conversation_scoped_to_its_user(store) -> None:
    first = await store.add_message("alice", "c1", msg("m1", Role.USER, None), title="hi")
    await store.add_message("alice", "c1", msg("m1.answer", Role.ASSISTANT, first.seq, 7))
    conversation = await store.get_conversation("alice", "c1")
    assert conversation.title == "hi" and conversation.total_tokens == 12
    assert [m.seq for m in await store.list_messages("alice", "c1")] == [1, 2]
    # Bob may use the same ids; neither sees the other's.
    await store.add_message("bob", "c1", msg("m1", Role.USER, None))
    assert len(await store.list_messages("bob", "c1")) == 1
    with pytest.raises(NotFound):
        await store.get_conversation("carol", "c1")
    with pytest.raises(NotFound):
        await store.get_message("carol", "m1")


async def test_a_reused_message_id_stores_nothing(store) -> None:
    await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    with pytest.raises(AlreadyExists):
        await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    assert len(await store.list_messages("alice", "c1")) == 1
    assert (await store.get_conversation("alice", "c1")).total_tokens == 5


async def test_delete_removes_messages_too(store) -> None:
    await store.add_message("alice", "c1", msg("m1", Role.USER, None))
    await store.delete_conversation("alice", "c1")
    with pytest.raises(NotFound):
        await store.get_message("alice", "m1")
    with pytest.raises(NotFound):
        await store.delete_conversation("alice", "c1")


async def test_users_tokens_and_tiers(store) -> None:
    await store.create_user("u1", Tier.FREE, "hash-1")
    with pytest.raises(AlreadyExists):
        await store.create_user("u1", Tier.PLUS, "hash-2")
    assert (await store.user_by_token_hash("hash-1")).user_id == "u1"
    assert (await store.set_user_tier("u1", Tier.PLUS)).tier is Tier.PLUS
    await store.set_user_token_hash("u1", None)
    assert await store.user_by_token_hash("hash-1") is None
    with pytest.raises(NotFound):
        await store.set_user_tier("nobody", Tier.FREE)


async def test_concurrent_appends_to_one_conversation_get_distinct_seqs(store) -> None:
    import asyncio

    await asyncio.gather(
        *(store.add_message("alice", "busy", msg(f"m{i}", Role.USER, None)) for i in range(20))
    )
    seqs = [m.seq for m in await store.list_messages("alice", "busy")]
    assert seqs == list(range(1, 21))
