"""How an edge link's session frames its streams (gateway/edge_link.py), with scripted answer
streams in place of the pipeline: every event of every stream arrives once and in order, a
frame never carries much more than MOST_FRAME_EVENTS, and a stream's failure ends that stream
alone with its status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import edge_link_pb2 as pb
from domain.errors import NotFound
from domain.types import Finish, Usage
from gateway.edge_link import MOST_FRAME_EVENTS, EdgeLinkSession
from gateway.metrics import GatewayMetrics
from gateway.runs import Delta, Done


class ScriptedStreams:
    """Answers of a given number of events, in batches of `batch` events; a message id
    starting with "missing" is refused as an unknown message would be."""

    def __init__(self, batch: int = 64) -> None:
        self._batch = batch

    async def send(self, caller: Any, request: Any, interval_s: float | None = None
                   ) -> AsyncIterator[list[tuple[int, Any]]]:  # fmt: skip
        if request.message_id.startswith("missing"):
            raise NotFound(f"no message {request.message_id!r}")
        count = int(request.content)
        events: list[Any] = [Delta(f"{request.message_id}:{i} ") for i in range(1, count)]
        events.append(Done(Finish.STOP, Usage()))
        for start in range(0, count, self._batch):
            yield list(enumerate(events[start : start + self._batch], start=start + 1))
            await asyncio.sleep(0)


def opening(stream_id: int, message_id: str, events: int) -> pb.EdgeLinkRequest:
    send = chat_pb.SendMessageRequest(message_id=message_id, content=str(events))
    return pb.EdgeLinkRequest(open=pb.EdgeLinkOpen(stream_id=stream_id, send_message=send))


async def test_streams_arrive_whole_and_in_order_in_frames_of_bounded_size() -> None:
    session = EdgeLinkSession(ScriptedStreams(), GatewayMetrics(CollectorRegistry()), 0.0)
    sizes = {1: 3000, 2: 5, 3: 2500}
    opens = [opening(i, f"m{i}", count) for i, count in sizes.items()]
    opens.append(opening(4, "missing", 1))

    async def requests() -> AsyncIterator[pb.EdgeLinkRequest]:
        for request in opens:
            yield request

    received: dict[int, list[str]] = {i: [] for i in (1, 2, 3, 4)}
    ids: dict[int, list[int]] = {i: [] for i in (1, 2, 3, 4)}
    ends: dict[int, pb.EdgeLinkEnd] = {}
    frames = 0
    async for frame in session.run(requests()):
        frames += 1
        for _ in range(50):  # a slow link: the streams run on while this frame is written
            await asyncio.sleep(0)
        assert sum(len(part.events) for part in frame.parts) <= MOST_FRAME_EVENTS + 64
        for part in frame.parts:
            assert part.stream_id not in ends, "nothing comes after a stream's end"
            for event in part.events:
                ids[part.stream_id].append(event.event_id)
                if event.WhichOneof("kind") == "delta":
                    received[part.stream_id].append(event.delta.text)
            if part.HasField("end"):
                ends[part.stream_id] = part.end
    for stream_id, count in sizes.items():
        assert ids[stream_id] == list(range(1, count + 1))
        assert "".join(received[stream_id]) == "".join(
            f"m{stream_id}:{i} " for i in range(1, count)
        )
        assert ends[stream_id].code == 0
    assert ids[4] == []
    assert ends[4].code == 5  # NOT_FOUND, as the call's status
    assert ends[4].message == "no message 'missing'"
    assert ends[4].status, "with the status details the call's trailers carry"
    assert frames >= (sum(sizes.values()) // MOST_FRAME_EVENTS)
