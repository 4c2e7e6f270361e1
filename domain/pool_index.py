"""One pool's replicas laid out as columns, so a pick scores them all in a few numpy calls
instead of hashing every replica in a Python loop.

An uncharged pick gives exactly what `domain.picker.pick_replica` gives for `index.replicas`:
the same rendezvous favourite, the same idlest replica (the first one on ties, as `min()`
takes), the same escape or cold placement, and the very ReplicaLoad objects. A charged pick
(one that is sent) also counts itself against its replica until that replica's next report,
and remembers where the conversation now runs (`domain.homes`): its next turn starts from
there, where its cache is, rather than from its rendezvous favourite (docs/decisions.md,
"Where a conversation's cache is"). Load reports update one row in place; only membership
changes rebuild. Pure policy, no I/O. Not thread-safe: a pick reuses scratch buffers, and one
event loop owns the index.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable, Iterator
from typing import Final

import numpy as np

from domain.homes import Homes
from domain.picker import (
    DEFAULT_ESCAPE,
    EscapeRule,
    Pick,
    PickReason,
    ReplicaLoad,
    fnv1a64,
    is_cold,
    replica_start_wait_s,
    settle,
)
from domain.rendezvous_columns import favourite_rows, mix64_inplace, uint64_constant
from domain.start_wait import FULL_KV_USAGE, start_wait_s

# The queue key of a replica that cannot be picked: above any queue a node reports (uint32).
_NOT_PICKABLE: Final = np.iinfo(np.int64).max


class PoolIndex:
    def __init__(
        self,
        replicas: Iterable[ReplicaLoad] = (),
        rule: EscapeRule = DEFAULT_ESCAPE,
        remembered_favourites: int = 65_536,
        remembered_homes: int = 262_144,
    ) -> None:
        """`remembered_favourites`: how many conversations' favourites to keep between picks
        (a conversation comes back every turn, and its favourite only changes with the pool's
        membership or a replica's pickability); past it the memory starts again.
        `remembered_homes`: how many conversations' last replicas to keep (`domain.homes`)."""
        self._rule = rule
        self._favourites: dict[int, int] = {}  # conversation hash -> row
        self._remembered_favourites = remembered_favourites
        self._homes = Homes(remembered_homes)
        self._aside: frozenset[int] = frozenset()  # rows set aside for the pick under way
        loads = list(replicas)
        self._build(loads, np.array([fnv1a64(r.node_id) for r in loads], dtype=np.uint64))

    def _build(self, loads: list[ReplicaLoad], hashes: np.ndarray) -> None:
        positions = {r.node_id: i for i, r in enumerate(loads)}
        if len(positions) != len(loads):
            raise ValueError("a pool lists each node_id once")
        # The columns that can fail (a number past int64) before any attribute changes.
        free_kv = np.array([r.free_kv_tokens for r in loads], dtype=np.int64)
        queued = np.array([r.queued_prefill_tokens for r in loads], dtype=np.int64)
        self._loads, self._positions = loads, positions
        self._free_kv, self._queued = free_kv, queued
        hashes.flags.writeable = False  # never changes until the next rebuild
        self._hashes = hashes
        self._pickable = np.array([r.pickable for r in loads], dtype=bool)
        self._pickable_count = int(self._pickable.sum())
        # The idlest is one argmin over this, no masking per pick.
        self._queue_key = np.where(self._pickable, self._queued, _NOT_PICKABLE)
        # The pickable column as uint64 1/0: multiplying by bools costs a cast on every pick.
        self._score_mask = self._pickable.astype(np.uint64)
        # Messages picked for each replica since its last report (which does not know them yet);
        # a membership change starts the count again.
        self._sent = np.zeros(len(loads), dtype=np.int64)
        # What a cold placement's start waits read, besides the queues.
        self._running = np.array([r.running_requests for r in loads], dtype=np.int64)
        self._waiting = np.array([r.waiting_requests for r in loads], dtype=np.int64)
        self._max_running = np.array([r.max_running_requests for r in loads], dtype=np.int64)
        self._kv_usage = np.array([r.kv_usage for r in loads], dtype=np.float64)
        self._speed = np.array([r.prefill_tokens_per_s for r in loads], dtype=np.float64)
        self._conversation = uint64_constant(0)
        self._scores = np.empty(len(loads), dtype=np.uint64)
        self._scratch = np.empty(len(loads), dtype=np.uint64)
        self._favourites = {}

    def __len__(self) -> int:
        return len(self._loads)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._positions

    @property
    def replicas(self) -> tuple[ReplicaLoad, ...]:
        """The loads in index order: the order in which pick_replica would see them."""
        return tuple(self._loads)

    @property
    def hashes(self) -> np.ndarray:
        """fnv1a64 of each node_id, read-only; a new array only after add or remove."""
        return self._hashes

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """Read-only views of the load columns, for vectorised reads by the scheduler."""
        views = {
            "pickable": self._pickable.view(),
            "free_kv_tokens": self._free_kv.view(),
            "queued_prefill_tokens": self._queued.view(),
        }
        for view in views.values():
            view.flags.writeable = False
        return views

    def update(self, node_id: str, load: ReplicaLoad) -> None:
        """One load report: overwrites one row in O(1). Unknown nodes raise KeyError; they
        join through add()."""
        if load.node_id != node_id:
            raise ValueError(f"a load for {load.node_id!r} reported as {node_id!r}")
        i = self._positions[node_id]
        # Converted before any write: a number past int64 raises with the row left whole.
        free_kv, queued = np.int64(load.free_kv_tokens), np.int64(load.queued_prefill_tokens)
        self._free_kv[i] = free_kv
        self._queued[i] = queued
        self._sent[i] = 0
        self._running[i] = load.running_requests
        self._waiting[i] = load.waiting_requests
        self._max_running[i] = load.max_running_requests
        self._kv_usage[i] = load.kv_usage
        self._speed[i] = load.prefill_tokens_per_s
        self._queue_key[i] = queued if load.pickable else _NOT_PICKABLE
        returned = load.pickable and not self._pickable[i]
        if load.pickable != self._pickable[i]:
            self._favourites.clear()  # the rendezvous scores of every conversation changed
        self._pickable_count += int(load.pickable) - int(self._pickable[i])
        self._pickable[i] = load.pickable
        self._score_mask[i] = load.pickable
        self._loads[i] = load
        if returned:
            self._return_homes_to(i)

    def add(self, load: ReplicaLoad) -> None:
        """A replica joins at the end; rebuilds the columns (membership changes are rare) but
        hashes only the newcomer."""
        if load.node_id in self._positions:
            raise ValueError(f"{load.node_id!r} is already in the pool")
        hashes = np.append(self._hashes, np.uint64(fnv1a64(load.node_id)))
        self._build([*self._loads, load], hashes)
        if load.pickable:
            self._return_homes_to(len(self._loads) - 1)

    def remove(self, node_id: str) -> None:
        """A replica leaves; the others keep their order, so ties still break the same way."""
        i = self._positions[node_id]
        self._build(self._loads[:i] + self._loads[i + 1 :], np.delete(self._hashes, i))

    def pick(
        self,
        conversation_id: str,
        prompt_tokens: int,
        reusable_prefix_tokens: int,
        charge: bool = False,
        rule: EscapeRule | None = None,
        set_aside: Collection[str] = (),
    ) -> Pick:
        """The replica for a message, among the pickable ones less `set_aside` (a version's
        pick leaves out the nodes serving another model: the conversation keeps its cache and
        the escape rule among the rest, where a failed node's retry moves, `pick_move`)."""
        with self._setting_aside(set_aside):
            return self._pick(conversation_id, prompt_tokens, reusable_prefix_tokens, charge, rule)

    def _pick(
        self,
        conversation_id: str,
        prompt_tokens: int,
        reusable_prefix_tokens: int,
        charge: bool,
        rule: EscapeRule | None,
    ) -> Pick:
        """The replica for a message. With charge, an escape's prefill (the whole prompt,
        nothing is cached there) joins the idlest replica's queue until its next report,
        which by then counts the message itself. Without it, every escape between two reports
        sees the same idlest replica, and at a peak they all herd onto it: the fleet
        simulator showed the cached share of history collapsing from ~90 % to ~3 %. A stay
        is not charged: a conversation's next turn, sent before the next report, must not
        find its own finished turn still queued on its favourite and leave. Either way a
        charged pick counts as sent to its replica until that replica's next report
        (`sent_since_report`), for the wait a message would have there. `rule` replaces the
        index's escape rule for this pick.

        The pick starts from where the conversation's cache is: the replica its last charged
        pick went to, while that replica stays pickable; else, with nothing of it cached
        (`reusable_prefix_tokens` 0), where it starts soonest (`PickReason.COLD`, charged like
        an escape so that a burst of new conversations spreads); else its rendezvous favourite
        (unknown, as after a scheduler restart). A rule that never escapes keeps to the
        favourite and remembers nothing."""
        if self._pickable_count == 0:
            return Pick(None, PickReason.NO_REPLICA)
        rule = rule or self._rule
        conversation_hash = fnv1a64(conversation_id)
        remembers = not math.isinf(rule.min_wait_s)
        f = self._home(conversation_hash) if remembers else None
        if f is None and is_cold(reusable_prefix_tokens, rule):
            row = self._soonest(conversation_hash, prompt_tokens, rule)
            if charge:
                self._send(row, prompt_tokens, conversation_hash)
            return Pick(self._loads[row], PickReason.COLD)
        if f is None:
            f = self._favourite(conversation_hash)
        i = self._idlest()
        pick = settle(
            self._loads[f],
            self._loads[i],
            prompt_tokens,
            reusable_prefix_tokens,
            int(self._queued[f]),
            int(self._queued[i]),
            rule=rule,
            favourite_sent=int(self._sent[f]),
            idlest_sent=int(self._sent[i]),
        )
        if charge:
            if pick.reason is PickReason.AFFINITY:
                self._sent[f] += 1
                if remembers:
                    self._homes.set(conversation_hash, self._loads[f].node_id)
            else:
                # The escape takes the conversation's cache with it: its next turn stays there.
                self._send(i, prompt_tokens, conversation_hash if remembers else None)
        return pick

    def pick_move(
        self, prompt_tokens: int, excluded: Collection[str] = (), conversation_id: str = ""
    ) -> Pick:
        """The replica for an answer moved off failed ones (`excluded`). Its cache died with
        its replica, so nothing pulls it to its conversation's next favourite: it goes where a
        prompt starts soonest, the shortest prompt queue counting what was charged since the
        reports, and is charged there. A dead replica's answers all move at once; following
        their favourites, several landed on one survivor and waited behind each other's
        re-read prompts (the fleet simulator's longest pause was 4.6 s against 2-3 s). With a
        `conversation_id`, its next turn stays where the answer moved (its cache is there)."""
        allowed = self._pickable.copy()
        allowed[[self._positions[n] for n in excluded if n in self._positions]] = False
        if not allowed.any():
            return Pick(None, PickReason.NO_REPLICA)
        row = int(np.where(allowed, self._queue_key, _NOT_PICKABLE).argmin())
        if not allowed[row]:  # every allowed queue is at the int64 limit too: the first one
            row = int(allowed.argmax())
        self._send(row, prompt_tokens, fnv1a64(conversation_id) if conversation_id else None)
        return Pick(self._loads[row], PickReason.MOVED)

    def favourite(self, conversation_id: str) -> ReplicaLoad | None:
        """The conversation's rendezvous favourite among the pickable replicas (what a pick
        stays on when nothing makes it escape); None when none is pickable."""
        if self._pickable_count == 0:
            return None
        return self._loads[self._favourite(fnv1a64(conversation_id))]

    def remember_favourites(self, conversation_ids: Iterable[str], chunk: int = 1024) -> None:
        """Scores many conversations at once (a block of conversations by all replicas per
        numpy call) and remembers their favourites, for a scheduler or a simulation that
        starts with many conversations under way. Picks afterwards are what they would be."""
        if self._pickable_count == 0:
            return
        hashes = np.array([fnv1a64(c) for c in conversation_ids], dtype=np.uint64)
        first_pickable = self._first_pickable()
        for start in range(0, len(hashes), chunk):
            block = hashes[start : start + chunk]
            if len(self._favourites) + len(block) > self._remembered_favourites:
                return  # the memory is full: later picks score their conversations one by one
            best = favourite_rows(block, self._hashes, self._score_mask)
            rows = np.where(self._pickable[best], best, first_pickable)
            self._favourites.update(zip(block.tolist(), rows.tolist(), strict=True))

    def start_wait_s(self, node_id: str, paid: bool) -> float:
        """The wait before a request just picked for the node starts (domain/start_wait.py,
        with the escape rule's model): its last report, with the prompts charged and the
        requests sent to it since, less the request itself. Unknown nodes raise KeyError."""
        i = self._positions[node_id]
        load = self._loads[i]
        ahead = max(0, int(self._sent[i]) - 1)
        return start_wait_s(
            self._rule.wait,
            int(self._queued[i]),
            load.running_requests,
            load.waiting_requests + ahead,
            load.max_running_requests,
            load.kv_usage,
            paid=paid,
            prefill_tokens_per_s=load.prefill_tokens_per_s,
            answer_s=load.answer_s,
        )

    def home(self, conversation_id: str) -> ReplicaLoad | None:
        """The replica the conversation's last charged pick went to, while it is pickable;
        None when not remembered (then its rendezvous favourite counts)."""
        row = self._home(fnv1a64(conversation_id))
        return None if row is None else self._loads[row]

    def sent_since_report(self, node_id: str) -> int:
        """Picks charged to the replica since its last report: requests on their way to it
        that its report does not count yet. Unknown nodes raise KeyError."""
        return int(self._sent[self._positions[node_id]])

    def _send(self, row: int, prompt_tokens: int, conversation_hash: int | None) -> None:
        """A pick away from the conversation's cache: its whole prompt joins the replica's
        queue, it counts as sent there, and the conversation's cache is there from now on."""
        self._charge(row, prompt_tokens)
        self._sent[row] += 1
        if conversation_hash is not None:
            self._homes.set(conversation_hash, self._loads[row].node_id)

    def _return_homes_to(self, row: int, chunk: int = 4096) -> None:
        """A replica back from a drain or an outage, or new: the conversations whose rendezvous
        favourite it is go back to it, as they did before homes were remembered; every other
        conversation stays where its cache is. Forgetting every home instead sent the ones
        placed cold or moved elsewhere away from their caches at each restart."""
        hashes = np.array(self._homes.hashes(), dtype=np.uint64)
        for start in range(0, len(hashes), chunk):
            block = hashes[start : start + chunk]
            favourites = favourite_rows(block, self._hashes, self._score_mask)
            for conversation_hash in block[favourites == row].tolist():
                self._homes.forget(conversation_hash)

    @contextlib.contextmanager
    def _setting_aside(self, node_ids: Collection[str]) -> Iterator[None]:
        """For one pick, the pickable nodes named are not: no favourite, home or idlest there.
        The remembered favourites are the whole pool's, so the pick scores afresh."""
        rows = [self._positions[n] for n in node_ids if n in self._positions]
        rows = [row for row in rows if self._pickable[row]]
        if not rows:
            yield
            return
        favourites, self._favourites = self._favourites, {}
        self._aside = frozenset(rows)
        self._pickable[rows] = False
        self._score_mask[rows] = 0
        self._queue_key[rows] = _NOT_PICKABLE
        self._pickable_count -= len(rows)
        try:
            yield
        finally:
            self._pickable[rows] = True
            self._score_mask[rows] = 1
            self._queue_key[rows] = self._queued[rows]
            self._pickable_count += len(rows)
            self._favourites, self._aside = favourites, frozenset()

    def _home(self, conversation_hash: int) -> int | None:
        node_id = self._homes.get(conversation_hash)
        if node_id is None:
            return None
        row = self._positions.get(node_id)
        if row in self._aside:
            return None  # only for this pick: its cache is still there
        if row is None or not self._pickable[row]:
            self._homes.forget(conversation_hash)  # its cache cannot be reached any more
            return None
        return row

    def _soonest(self, conversation_hash: int, prompt_tokens: int, rule: EscapeRule) -> int:
        """The row a cold message starts on soonest, counting what was charged and sent since
        the reports: `domain.picker.pick_replica`'s cold order, vectorised."""
        waits = self._queued / np.where(
            self._speed > 0, self._speed, rule.wait.prefill_tokens_per_s
        )
        waiting = self._waiting + self._sent
        behind = np.where(self._max_running > 0, self._running + waiting + 1 - self._max_running, 0)
        full = (self._kv_usage >= FULL_KV_USAGE) & (waiting > 0)
        batch_bound = ((behind > 0) | full) & (self._running > 0) & self._pickable
        for row in np.flatnonzero(batch_bound).tolist():  # few: only where a batch is full
            waits[row] = replica_start_wait_s(
                rule, self._loads[row], int(self._queued[row]), int(self._sent[row]), expected=True
            )
        scores = self._scores_of(conversation_hash)
        order = np.lexsort(
            (
                ~scores,
                waiting + self._running,
                waits,
                self._free_kv < prompt_tokens,
                ~self._pickable,
            )
        )
        return int(order[0])

    def _charge(self, row: int, tokens: int) -> None:
        # Saturates: a queue reported at the int64 limit stays there rather than wrapping.
        self._queued[row] = min(int(self._queued[row]) + max(0, tokens), int(_NOT_PICKABLE))
        if self._pickable[row]:
            self._queue_key[row] = self._queued[row]

    def _favourite(self, conversation_hash: int) -> int:
        row = self._favourites.get(conversation_hash)
        if row is None:
            if len(self._favourites) >= self._remembered_favourites:
                self._favourites.clear()
            row = self._favourites[conversation_hash] = self._score_favourite(conversation_hash)
        return row

    def _scores_of(self, conversation_hash: int) -> np.ndarray:
        """Every replica's rendezvous score for the conversation, in the scratch buffer."""
        self._conversation[()] = conversation_hash
        scores = np.bitwise_xor(self._hashes, self._conversation, self._scores)
        mix64_inplace(scores, self._scratch)
        # One we cannot pick scores 0. (numpy's stubs type the result Any: it is scores.)
        masked: np.ndarray = np.multiply(scores, self._score_mask, scores)
        return masked

    def _score_favourite(self, conversation_hash: int) -> int:
        scores = self._scores_of(conversation_hash)
        best = int(scores.argmax())
        # argmax takes the first highest, as max() does. Landing on an unpickable replica
        # means every pickable one scored 0 too, and then max() takes the first pickable.
        return best if self._pickable[best] else self._first_pickable()

    def _idlest(self) -> int:
        idlest = int(self._queue_key.argmin())
        # argmin takes the first lowest, as min() does. Landing on an unpickable replica means
        # every pickable queue sits at _NOT_PICKABLE too, and then min() takes the first one.
        return idlest if self._pickable[idlest] else self._first_pickable()

    def _first_pickable(self) -> int:
        return int(self._pickable.argmax())
