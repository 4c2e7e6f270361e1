"""Users' ratings of their answers: checked, stored with the version that served the answer,
counted in the gateway's metrics and in the tallies the scheduler gets with the rollout poll."""

from __future__ import annotations

import structlog

from domain.errors import InvalidArgument, NotFound
from domain.feedback import RatedAnswer, Rating, check_comment
from domain.types import Role, User
from gateway.ids import ANSWER_SUFFIX, check_id
from gateway.metrics import GatewayMetrics
from gateway.versions import VersionBook
from store.base import FeedbackStore
from store.records import FeedbackRecord


class RatingDesk:
    def __init__(
        self, store: FeedbackStore, versions: VersionBook, metrics: GatewayMetrics
    ) -> None:
        self._store = store
        self._versions = versions
        self._metrics = metrics
        self._log = structlog.get_logger(component="feedback")

    async def rate(
        self, user: User, message_id: str, rating: Rating, comment: str
    ) -> FeedbackRecord:
        """Stores the user's rating of their answer `message_id`; rating it again replaces the
        rating. A rating the same as the stored one is stored again (its comment may differ)
        but not counted twice."""
        question_id = message_id.removesuffix(ANSWER_SUFFIX)
        check_id("message id", question_id)
        check_comment(comment)
        message = await self._store.get_message(user.user_id, message_id)
        if message.role is not Role.ASSISTANT:
            raise InvalidArgument(
                f"message {message_id!r} is not an answer: only answers are rated"
            )
        version = await self._version_of(user, question_id)
        record = FeedbackRecord(message_id, message.conversation_id, rating.value, comment, version)
        earlier = await self._store.rate_message(user.user_id, record)
        if earlier != rating.value and version:
            self._metrics.feedback.labels(version, user.tier.value, rating.value).inc()
            rated = RatedAnswer(user.user_id, message_id, version, user.tier, rating)
            self._versions.tally_rating(rated)
        self._log.info("answer rated", message_id=message_id, rating=rating.value,
                       version=version, earlier=earlier)  # fmt: skip
        return record

    async def _version_of(self, user: User, question_id: str) -> str:
        """The version that served the answer, recorded with its question (migration 005); ''
        for an answer the input check gave, which no version served."""
        try:
            return (await self._store.serving_of(user.user_id, question_id)).version
        except NotFound:
            return ""
