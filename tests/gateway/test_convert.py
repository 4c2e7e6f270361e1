"""A batch of events in one stream message, each event as event_to_pb writes it alone."""

from __future__ import annotations

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from domain.types import Finish, Usage
from gateway.convert import events_response
from gateway.runs import Delta, Done, Failed, Meta, Retract


def test_every_kind_of_event_in_one_message_in_order() -> None:
    batch = [(1, Meta("m1", "c1", "small-model", "node-a")), (2, Delta("Hé\n")),
             (3, Retract(3)), (4, Delta("No.")),
             (5, Done(Finish.REFUSED, Usage(10, 4, 2)))]  # fmt: skip
    response = events_response(pb.AttachMessageResponse, batch)
    assert response == pb.AttachMessageResponse(
        event=pb.ChatEvent(event_id=1, meta=pb.MetaEvent(message_id="m1", conversation_id="c1",
                                                          model="small-model",
                                                          replica_id="node-a")),
        more=[
            pb.ChatEvent(event_id=2, delta=pb.DeltaEvent(text="Hé\n")),
            pb.ChatEvent(event_id=3, retract=pb.RetractEvent(withdrawn_chars=3)),
            pb.ChatEvent(event_id=4, delta=pb.DeltaEvent(text="No.")),
            pb.ChatEvent(event_id=5, done=pb.DoneEvent(
                finish=common_pb2.FINISH_REASON_REFUSED,
                usage=common_pb2.Usage(input_tokens=10, cached_tokens=4, output_tokens=2))),
        ],
    )  # fmt: skip


def test_a_failure_alone() -> None:
    response = events_response(pb.SendMessageResponse, [(7, Failed(14, "lost"))])
    assert response == pb.SendMessageResponse(
        event=pb.ChatEvent(event_id=7, error=pb.ErrorEvent(code=14, message="lost"))
    )
    assert not response.more
