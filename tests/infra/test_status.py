import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from domain import errors
from infra.status import grpc_code_of, to_rpc_status


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.InvalidArgument("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.MessageTooLarge("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.Unauthenticated("x"), grpc.StatusCode.UNAUTHENTICATED),
        (errors.NotFound("x"), grpc.StatusCode.NOT_FOUND),
        (errors.Conflict("x"), grpc.StatusCode.ABORTED),
        (errors.ResourceExhausted("x", 3.0), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.Unavailable("x"), grpc.StatusCode.UNAVAILABLE),
    ],
)
def test_each_domain_error_has_its_own_code(error, code) -> None:
    assert grpc_code_of(error) == code


def test_resource_exhausted_carries_retry_info() -> None:
    status = to_rpc_status(errors.ResourceExhausted("bucket empty", 2.5))
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert status.details == "bucket empty"
    ((key, value),) = status.trailing_metadata
    assert key == rpc_status.GRPC_DETAILS_METADATA_KEY
    from google.rpc import status_pb2

    decoded = status_pb2.Status.FromString(value)
    info = error_details_pb2.RetryInfo()
    decoded.details[0].Unpack(info)
    assert info.retry_delay.seconds == 2 and info.retry_delay.nanos == 500_000_000


def test_an_endless_wait_is_capped_to_a_number() -> None:
    from google.rpc import status_pb2

    status = to_rpc_status(errors.ResourceExhausted("never", float("inf")))
    decoded = status_pb2.Status.FromString(status.trailing_metadata[0][1])
    info = error_details_pb2.RetryInfo()
    decoded.details[0].Unpack(info)
    assert info.retry_delay.seconds == 24 * 3600


@pytest.mark.parametrize("char", ["x", "\u4e2d"])
def test_a_reason_quoting_a_huge_value_is_cut_to_fit_the_trailers(char: str) -> None:
    status = to_rpc_status(errors.NotFound(f"no user {char * 300_000!r}"))
    assert status.code == grpc.StatusCode.NOT_FOUND
    assert status.details.startswith(f"no user '{char * 100}")
    assert status.details.endswith("\u2026")
    assert len(status.details.encode()) <= 1024
    ((_, value),) = status.trailing_metadata
    assert len(value) < 1200


def test_a_short_reason_is_kept_whole() -> None:
    assert to_rpc_status(errors.NotFound("no user 'u1'")).details == "no user 'u1'"
