"""Domain errors. Each maps to one gRPC status and one HTTP status in one place (infra.status)."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error a caller is meant to see, with a reason they can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvalidArgument(DomainError):
    pass


class MessageTooLarge(InvalidArgument):
    """The message is over what the caller's tier allows (HTTP 413)."""


class Unauthenticated(DomainError):
    pass


class PermissionDenied(DomainError):
    pass


class NotFound(DomainError):
    pass


class AlreadyExists(DomainError):
    pass


class Conflict(DomainError):
    """The same idempotency key was reused with a different request body."""


class FailedPrecondition(DomainError):
    """The call is well formed but the system is not in a state to do it (promote without a
    passing gate, a version that exists already)."""


class ResourceExhausted(DomainError):
    def __init__(self, reason: str, retry_after_s: float) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class Unavailable(DomainError):
    """retry_after_s: when the caller may try again, where that is known (None: not said)."""

    def __init__(self, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class NoReplica(Unavailable):
    """No replica of the pool is ready (or its breaker is open): a scheduler's answer, told
    apart from a scheduler that could not be reached, which a client asks another about."""


class Unimplemented(DomainError):
    """A call the contract names that this build does not serve yet."""
