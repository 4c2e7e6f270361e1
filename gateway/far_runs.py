"""Answers that stream in another region, reached from the gateway a resume or a stop arrives
at. A turn records the region it ran in, and is kept at the user's home: a conversation that
spilled runs away from the gateways its user's edge reaches, and a user who reached another
region's edge has their answers run at home. Such a call is passed to a gateway of the region
the answer runs in, once: a call already passed on is served where it arrives."""

from __future__ import annotations

from typing import Protocol

from domain.errors import NotFound, Unavailable
from domain.types import User
from gateway.histories import Histories
from gateway.ids import check_id
from gateway.pipeline import ChatPipeline
from gateway.regions import Forward
from gateway.run_sharing import FollowedRun
from gateway.runs import MessageRun


class RunRegions(Protocol):
    """gateway/regions.py's routers."""

    async def running_in(self, user: User, region: str) -> Forward | None: ...

    def pipeline_for(self, serve_for: str) -> ChatPipeline: ...


class FarRuns:
    def __init__(self, histories: Histories, regions: RunRegions) -> None:
        self._histories = histories
        self._regions = regions

    async def attach(
        self, user: User, message_id: str, serve_for: str
    ) -> MessageRun | FollowedRun | Forward:
        """The answer's run here, or where to pass the call: this region's runs are looked
        up first (a resume is most often where the answer runs)."""
        pipeline = self._regions.pipeline_for(serve_for)
        try:
            return await pipeline.attach(user, message_id)
        except NotFound:
            route = await self.route(user, message_id, serve_for)
            if route is None:
                raise
            return route

    async def route(self, user: User, message_id: str, serve_for: str) -> Forward | None:
        """Where to pass a call about the answer to message_id (None: serve it here, also when
        no such turn is kept: the answer here says so)."""
        check_id("message id", message_id)
        if serve_for:
            return None
        history = await self._histories.of(user)
        try:
            turn = await history.get_message(user.user_id, message_id)
        except (NotFound, Unavailable):
            # Not kept, or home is out: while it is, the user's answers run here.
            return None
        return await self._regions.running_in(user, turn.region)
