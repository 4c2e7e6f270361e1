"""Hypothesis strategies made from protobuf descriptors, for fuzzing gRPC services.

`requests(descriptor, hints)` walks a message's fields (scalars at their edges, enums with
numbers the enum does not name, repeated and nested fields, oneofs, maps), so a field added to
a .proto file is fuzzed without touching a test. `hints` lets a test say what is plausible
for a field it knows (ids that exist, a pool the fleet has), to mix with the rest.

`encodings` turns those messages into the bytes a caller puts on the wire, and adds bytes a
well-behaved client never sends: garbage, truncated messages, strings that are not UTF-8,
fields the message does not have, fields of its own with the wrong wire type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
_INTEGERS = {
    FieldDescriptor.TYPE_INT32: INT32,
    FieldDescriptor.TYPE_SINT32: INT32,
    FieldDescriptor.TYPE_SFIXED32: INT32,
    FieldDescriptor.TYPE_INT64: INT64,
    FieldDescriptor.TYPE_SINT64: INT64,
    FieldDescriptor.TYPE_SFIXED64: INT64,
    FieldDescriptor.TYPE_UINT32: UINT32,
    FieldDescriptor.TYPE_FIXED32: UINT32,
    FieldDescriptor.TYPE_UINT64: UINT64,
    FieldDescriptor.TYPE_FIXED64: UINT64,
}
# Wire types (the low 3 bits of a field's tag).
VARINT, LENGTH_DELIMITED = 0, 2
# More than gRPC takes by default (4 MiB): the server must refuse it before any servicer runs.
OVER_GRPC_LIMIT = 4 * 1024 * 1024 + 1
MAX_REPEATED = 4
# How often a field is set rather than left unset: a request with most fields set reaches
# further into a servicer than one that misses a required field.
SET_WEIGHT, UNSET_WEIGHT = 9, 1
T = TypeVar("T")
# A test's values for one value of a field (one item of a repeated field), or None: the
# field's type alone decides.
Hints = Callable[[FieldDescriptor], st.SearchStrategy[Any] | None]
# A hint that asks for a field to be set one time in ten, its values drawn by its type: for a
# field any value of which takes the request down a path of its own (a request's tools),
# which would otherwise crowd out the paths of the other fields.
RARELY: st.SearchStrategy[Any] = st.nothing()
# Field numbers protobuf keeps for itself.
RESERVED = range(19_000, 20_000)


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """One of the strategies, each `weight` times as likely as a strategy of weight 1.

    One draw picks the strategy: st.one_of would flatten choices that are one_of themselves
    into as many branches, skewing the weights. Hypothesis falls back on the first choice
    when it simplifies an example, and often draws it besides: put the plausible one first."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(table.__getitem__)


def integers(bounds: tuple[int, int]) -> st.SearchStrategy[int]:
    low, high = bounds
    edges = sorted({low, high, 0, 1, min(high, 2**31), max(low, -1)})
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def enums(enum: EnumDescriptor) -> st.SearchStrategy[int]:
    """The enum's own numbers, and (open enums only) any int32 it does not name. Zero comes
    after the others: by proto3's convention it is UNSPECIFIED, rarely a valid choice."""
    numbers = [value.number for value in enum.values]
    chosen = [n for n in numbers if n != 0]
    named = [(3, st.sampled_from(chosen))] if chosen else []
    named += [(1, st.just(0))] if 0 in numbers else []
    if enum.is_closed:
        return weighted(*named)
    return weighted(*named, (1, integers(INT32)))


def no_hints(field: FieldDescriptor) -> None:
    return None


def huge_texts(
    sizes: tuple[int, ...] = (1_000, 40_000, 300_000, OVER_GRPC_LIMIT),
) -> st.SearchStrategy[str]:
    """Long strings: past the API's own limits, and (by default) past what gRPC accepts."""
    sizes = st.sampled_from(sizes)
    return st.builds(lambda size, char: char * size, sizes, st.sampled_from("x\u00e9\u4e2d"))


def default_strings() -> st.SearchStrategy[str]:
    return weighted((6, st.text(min_size=1, max_size=40)), (1, st.just("")), (1, huge_texts()))


def scalars(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INTEGERS:
        return integers(_INTEGERS[kind])
    if kind == FieldDescriptor.TYPE_STRING:
        return default_strings()
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats()
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32)
    if kind == FieldDescriptor.TYPE_ENUM:
        return enums(field.enum_type)
    raise TypeError(f"no strategy for {field.full_name} (type {kind})")


def values(field: FieldDescriptor, hints: Hints, depth: int) -> st.SearchStrategy[Any]:
    """One value for a field as the message's constructor takes it."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = values(field.message_type.fields_by_name["key"], hints, depth)
        value = values(field.message_type.fields_by_name["value"], hints, depth)
        return st.dictionaries(key, value, max_size=MAX_REPEATED)
    hinted = hints(field)
    if hinted is not None and hinted is not RARELY:
        single = hinted
    elif field.message_type is not None:
        single = requests(field.message_type, hints, depth - 1)
    else:
        single = scalars(field)
    if field.is_repeated:
        # st.lists alone is empty a third of the time; a list with items reaches further.
        return weighted((4, st.lists(single, min_size=1, max_size=MAX_REPEATED)), (1, st.just([])))
    return single


def requests(
    descriptor: Descriptor, hints: Hints = no_hints, depth: int = 3
) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`: each field set or left unset, at most one field per oneof,
    nested messages down to `depth`, `hints` first for the fields it names."""
    cls = message_class(descriptor)
    if depth <= 0:
        return st.just(cls())
    plain = [f for f in descriptor.fields if f.containing_oneof is None]
    # None leaves a field unset.
    fields = {
        f.name: weighted(
            *(((UNSET_WEIGHT, values(f, hints, depth)), (SET_WEIGHT, st.none()))
              if hints(f) is RARELY
              else ((SET_WEIGHT, values(f, hints, depth)), (UNSET_WEIGHT, st.none())))
        )
        for f in plain
    }  # fmt: skip
    oneofs = [
        weighted(
            (
                SET_WEIGHT,
                st.sampled_from(list(oneof.fields)).flatmap(
                    lambda f: st.tuples(st.just(f.name), values(f, hints, depth))
                ),
            ),
            (UNSET_WEIGHT, st.none()),
        )
        for oneof in descriptor.oneofs
    ]

    def build(chosen: dict[str, Any], members: list[tuple[str, Any] | None]) -> Message:
        kwargs = {name: value for name, value in chosen.items() if value is not None}
        kwargs.update(member for member in members if member is not None)
        return cls(**kwargs)

    return st.builds(build, st.fixed_dictionaries(fields), st.tuples(*oneofs).map(list))


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def _string_fields(descriptor: Descriptor) -> list[FieldDescriptor]:
    return [f for f in descriptor.fields if f.type == FieldDescriptor.TYPE_STRING]


def mangled(descriptor: Descriptor) -> st.SearchStrategy[bytes]:
    """Bytes that claim to be a `descriptor` message but break protobuf's rules."""
    encoded = requests(descriptor).map(lambda m: m.SerializeToString())
    broken = [
        # Not protobuf at all (mostly: a few random strings happen to parse).
        st.binary(min_size=1, max_size=64),
        # Cut short: a field's length or varint runs past the end.
        encoded.filter(len).map(lambda raw: raw[:-1]),
        # A varint longer than ten bytes.
        st.just(tag(1, VARINT) + b"\xff" * 11),
        # A length past the end of the message.
        st.just(tag(1, LENGTH_DELIMITED) + varint(1_000)),
        # A field number of zero, which no message may use.
        st.just(tag(0, VARINT) + b"\x01"),
    ]
    if strings := _string_fields(descriptor):
        # A string field (proto3 strings are UTF-8) carrying bytes that are not.
        bad = st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"ok\xfe"])
        broken.append(
            st.builds(
                lambda field, raw: tag(field.number, LENGTH_DELIMITED) + varint(len(raw)) + raw,
                st.sampled_from(strings),
                bad,
            )
        )
    return st.one_of(broken)


_LENGTH_DELIMITED_TYPES = frozenset(
    {FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE}
)


def _wire_type_swapped(field: FieldDescriptor) -> st.SearchStrategy[bytes]:
    """The field under its own number with the other wire type: a number where a string or a
    message belongs, bytes where a number does (or a packed list, for a repeated number)."""
    if field.type in _LENGTH_DELIMITED_TYPES:
        return st.integers(0, 2**63).map(lambda v: tag(field.number, VARINT) + varint(v))
    return st.binary(max_size=16).map(
        lambda raw: tag(field.number, LENGTH_DELIMITED) + varint(len(raw)) + raw
    )


def skipped_fields(descriptor: Descriptor, hints: Hints = no_hints) -> st.SearchStrategy[bytes]:
    """A valid message followed by a field it does not have, or by one of its own fields with
    the wrong wire type: protobuf skips both as unknown fields (or, for some, cannot parse)."""
    known = {f.number for f in descriptor.fields}
    numbers = st.integers(1, 2**29 - 1).filter(lambda n: n not in known and n not in RESERVED)
    unknown = st.builds(lambda n, v: tag(n, VARINT) + varint(v), numbers, st.integers(0, 2**63))
    extras = [(1, unknown)]
    if descriptor.fields:
        swapped = st.sampled_from(list(descriptor.fields)).flatmap(_wire_type_swapped)
        extras.append((1, swapped))
    encoded = requests(descriptor, hints).map(lambda m: m.SerializeToString())
    return st.builds(bytes.__add__, encoded, weighted(*extras))


def encodings(descriptor: Descriptor, hints: Hints = no_hints) -> st.SearchStrategy[bytes]:
    """What a caller may send for a `descriptor` message: mostly well-formed messages (they
    reach the servicers), also ones with fields protobuf skips, and bytes that do not parse."""
    encoded = requests(descriptor, hints).map(lambda m: m.SerializeToString())
    return weighted((8, encoded), (1, skipped_fields(descriptor, hints)), (1, mangled(descriptor)))
