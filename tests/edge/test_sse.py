import json

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from edge.sse import encode


def test_done_event_is_written_with_id_name_and_usage() -> None:
    event = pb.ChatEvent(
        event_id=57,
        done=pb.DoneEvent(
            finish=common_pb2.FINISH_REASON_STOP,
            usage=common_pb2.Usage(input_tokens=3010, cached_tokens=2610, output_tokens=412),
        ),
    )
    assert encode(event) == (
        b'id: 57\nevent: done\ndata: {"finish":"stop","usage":'
        b'{"input":3010,"cached":2610,"output":412}}\n\n'
    )


def test_delta_keeps_unicode_and_newlines_inside_json() -> None:
    event = pb.ChatEvent(event_id=2, delta=pb.DeltaEvent(text="héllo\nworld"))
    assert encode(event) == b'id: 2\nevent: delta\ndata: {"text":"h\xc3\xa9llo\\nworld"}\n\n'


def test_retract_names_how_much_was_withdrawn() -> None:
    event = pb.ChatEvent(event_id=9, retract=pb.RetractEvent(withdrawn_chars=312))
    assert encode(event) == b'id: 9\nevent: retract\ndata: {"withdrawnChars":312}\n\n'


def test_a_delta_is_written_as_json_dumps_writes_it() -> None:
    texts = ["", ' "quoted" \\ back', "tab\there\r\x00\x1f", "😀 emoji and \u2028 separator"]
    for text in texts:
        event = pb.ChatEvent(event_id=7, delta=pb.DeltaEvent(text=text))
        data = json.dumps({"text": text}, separators=(",", ":"), ensure_ascii=False)
        assert encode(event) == f"id: 7\nevent: delta\ndata: {data}\n\n".encode()
