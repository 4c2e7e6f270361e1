"""The simulated gateway routes with the platform's router (domain.router) on the workload's
scores: a conversation starts where its opening's score sends it, a misjudged hard one escalates
once, nothing comes back down, and the router sends sizing 000's share of messages small."""

from __future__ import annotations

import pytest

from domain.pools import LARGE_POOL, SMALL_POOL
from domain.router import RouteReason
from domain.shedding import SheddingPolicy
from domain.types import Tier
from fleet.sim_gateway import Conversation, SimGateway
from fleet.workload import Workload, WorkloadSpec, easy_share_for

ROUTED = frozenset({LARGE_POOL, SMALL_POOL})


def gateway(pools: frozenset[str] = ROUTED) -> SimGateway:
    return SimGateway(pools, 400, SheddingPolicy(), score_threshold=0.5)


def conversation(easy: bool) -> Conversation:
    return Conversation("c1", "u1", Tier.FREE, easy, turns_left=5)


def sent(simulated: SimGateway, talk: Conversation, score: float) -> tuple[str, RouteReason]:
    """One message routed, planned and sent: where it ran and why (its reservation is given
    back at once, so no bucket runs dry)."""
    routed = simulated.route(talk, score)
    plan = simulated.plan(talk, routed, 100, rung=0, now=0.0)
    assert plan is not None
    simulated.sent(talk, plan)
    simulated.settle(talk, plan.reserved, 0.0, now=0.0)
    return plan.pool, routed.reason


def test_a_misjudged_hard_conversation_escalates_once_and_stays_large() -> None:
    simulated, talk = gateway(), conversation(easy=False)
    assert sent(simulated, talk, 0.2) == (SMALL_POOL, RouteReason.CLASSIFIER)
    assert talk.pool == SMALL_POOL
    assert sent(simulated, talk, 0.8) == (LARGE_POOL, RouteReason.ESCALATED)
    assert sent(simulated, talk, 0.1) == (LARGE_POOL, RouteReason.STICKY)
    assert talk.pool == LARGE_POOL


def test_the_ladders_rung_moves_a_free_message_but_not_its_conversation() -> None:
    simulated, talk = gateway(), conversation(easy=False)
    sent(simulated, talk, 0.9)
    plan = simulated.plan(talk, simulated.route(talk, 0.9), 100, rung=1, now=0.0)
    assert plan is not None and plan.pool == SMALL_POOL
    assert plan.conversation_pool == LARGE_POOL


def test_a_fleet_of_the_large_model_alone_sends_everything_large() -> None:
    simulated, talk = gateway(frozenset({LARGE_POOL})), conversation(easy=True)
    assert sent(simulated, talk, 0.1)[0] == LARGE_POOL
    assert sent(simulated, talk, 0.1)[0] == LARGE_POOL


@pytest.mark.parametrize("small_share", [0.5, 0.7])
def test_the_router_sends_the_wanted_share_of_messages_small(small_share: float) -> None:
    spec = WorkloadSpec(easy_share=easy_share_for(small_share, WorkloadSpec()))
    workload, simulated = Workload(spec, seed=11, scale=0.02), gateway()
    small = messages = 0
    for _, plan in workload.new_conversations(0.0, 3_000.0):
        talk = Conversation(plan.user_id, plan.user_id, plan.tier, plan.easy, plan.turns)
        for _ in range(plan.turns):
            routed = simulated.route(talk, workload.score(talk.easy, talk.pool is None))
            talk.pool = routed.conversation_pool  # what sending it stores
            small += routed.pool == SMALL_POOL
            messages += 1
    assert messages > 150_000
    # Conversations run 1 to 40 turns, so the share wanders by about half a point.
    assert small / messages == pytest.approx(small_share, abs=0.015)
