"""A calibrated simulator of one GPU replica's step loop, in virtual time. Pure: no I/O, no clock.

`ReplicaSim` is what sizing 000 calls "the step loop" of one model server. Each `step()` is one
forward pass with a token budget (512): every running answer gets its next token first, then
waiting requests are admitted paid before free while KV blocks last and the batch has room
(`max_running`, vLLM's max_num_seqs; a head that does not fit
blocks the queue), and the rest of the budget prefills admitted prompts in chunks, oldest
admission first; the step that reads a prompt's last chunk also yields its first token. A
finished answer frees its blocks at once, but its full blocks stay behind as its conversation's
prefix cache, so the next turn reads only what is new; cached blocks are evicted least recently
used first, a conversation's tail before its head, and spill to a host-RAM tier while it has
room. An answer that outgrows the memory left preempts the newest admission (Free before Plus),
which queues again and re-reads what it had (mostly from cache), as vLLM does. The step's
duration comes from the hardware: weights and KV bytes over memory bandwidth, or FLOPs over
compute, whichever is longer (a roofline: domain/replica_hardware.py), plus any cached blocks
copied back from host RAM. The prefix cache is domain/prefix_cache.py, a request's state and the
records a step hands out domain/replica_requests.py.

Speed: a fleet simulation steps hundreds of replicas thousands of times a second, so a step
never visits every answer. An answer that is decoding costs nothing per step: its token count
is `step - origin`, its finish step sits in a heap, and the KV blocks the batch needs this step
are counted by the answers' position within their last block (16 buckets). Work per step is a
few dict operations per admission, prefill chunk and finish, whatever the prompt's length.

The calibration against sizing 000 is domain/replica_hardware.py's.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable

from domain.prefix_cache import PrefixCache
from domain.replica_hardware import BLOCK_TOKENS, H100x4_70B, ReplicaPreset, step_seconds
from domain.replica_requests import (
    DECODING,
    DONE,
    FREE,
    PAID,
    PREFILLING,
    WAITING,
    ReplicaRequest,
    SimFinish,
    SimLoad,
    StepResult,
)


class ReplicaSim:
    """One replica's continuous batching in virtual time: `submit`, then `step` repeatedly."""

    def __init__(self, preset: ReplicaPreset = H100x4_70B, *, name_decoders: bool = True) -> None:
        """`name_decoders`: whether each step lists the answers that got a token (a node
        agent streams them); a fleet simulation only needs the starts and finishes."""
        self.preset = preset
        self._name_decoders = name_decoders
        self.now_s = 0.0
        self._step = 0  # the last step taken
        self._total_blocks = preset.kv_blocks
        self._cache = PrefixCache(free=self._total_blocks, host_capacity=preset.host_blocks)
        self._seqs: dict[str, ReplicaRequest] = {}
        # A heap by priority, arrival and queue epoch.
        self._waiting: list[tuple[int, int, int, ReplicaRequest]] = []
        self._waiting_count = 0
        self._running: dict[str, ReplicaRequest] = {}  # admission order
        self._prefilling: list[ReplicaRequest] = []  # admission order
        self._decoders: dict[str, ReplicaRequest] = {}
        self._decoder_ids: tuple[str, ...] | None = ()
        self._decode_kv_tokens = 0  # the decoders' contexts, summed
        # Decoders by (prompt - origin - 1) % 16: the bucket (-t) % 16 needs a block at step t.
        self._block_phase = [0] * BLOCK_TOKENS
        self._finishes: list[tuple[int, int, ReplicaRequest]] = []  # heap: finish step, arrival
        self._orders = 0
        self._queued_prefill = 0
        self._prompt_tokens_admitted = 0
        self._cached_tokens_admitted = 0

    # --- requests in ---

    def submit(
        self,
        request_id: str,
        prompt_tokens: int,
        answer_tokens: int,
        *,
        paid: bool = False,
        conversation: Hashable | None = None,
        reusable_prefix_tokens: int | None = None,
        shared_prefix: tuple[Hashable, int] | None = None,
    ) -> None:
        """Queues a request whose answer will be `answer_tokens` long. Requests of one
        `conversation` (any key: the hash of its opening turns, say) share a prefix: the first
        `reusable_prefix_tokens` of this prompt (all of it when None, as when each turn only
        appends) equal what the conversation's last request read and wrote, so whatever of that
        is still cached is not read again. `shared_prefix` (key, tokens): the prompt opens with
        `tokens` that many conversations open with (a system prompt, named by key); a
        conversation with less than that cached reads them from the replica's shared copy."""
        if request_id in self._seqs:
            raise ValueError(f"request {request_id!r} is already on this replica")
        if prompt_tokens < 1 or answer_tokens < 1:
            raise ValueError("a request needs at least one prompt and one answer token")
        if _blocks_for(prompt_tokens + answer_tokens) > self._total_blocks:
            raise ValueError(
                f"{prompt_tokens} + {answer_tokens} tokens do not fit this replica's KV cache "
                f"of {self._total_blocks * BLOCK_TOKENS} tokens"
            )
        self._orders += 1
        seq = ReplicaRequest(
            request_id,
            PAID if paid else FREE,
            self._orders,
            prompt_tokens,
            answer_tokens,
            conversation,
            prompt_tokens if reusable_prefix_tokens is None else reusable_prefix_tokens,
            self.now_s,
        )
        if shared_prefix is not None:
            seq.shared, seq.shared_tokens = shared_prefix
        self._seqs[request_id] = seq
        self._enqueue(seq)

    def _enqueue(self, seq: ReplicaRequest) -> None:
        seq.state = WAITING
        seq.queue_epoch += 1
        heapq.heappush(self._waiting, (seq.priority, seq.order, seq.queue_epoch, seq))
        self._waiting_count += 1
        self._queued_prefill += seq.to_read

    def warm_prefix(self, conversation: Hashable, tokens: int) -> int:
        """Puts a conversation's first `tokens` in the prefix cache, as if its last request had
        just ended here; returns the tokens kept (whole blocks, as much as the memory holds).
        A simulation that starts mid-day starts with warm caches, not with every conversation
        re-reading its history at once (that is the cache-flush scenario, not the normal day)."""
        blocks = min(tokens // BLOCK_TOKENS, self._cache.available)
        if blocks:
            self._cache.claim(conversation, 0)  # an older run of it goes first
            self._cache.take(blocks)
            self._cache.keep(conversation, blocks, blocks)
        return blocks * BLOCK_TOKENS

    def cancel(self, request_id: str) -> SimFinish | None:
        """Stops a request wherever it is; its blocks go back at once. None if unknown."""
        seq = self._seqs.get(request_id)
        if seq is None:
            return None
        if seq.state == WAITING:
            self._waiting_count -= 1
            self._queued_prefill -= seq.to_read
        else:
            self._unload(seq, self._step)
        return self._close(seq, cancelled=True)

    # --- the step ---

    @property
    def idle(self) -> bool:
        return not self._running and not self._waiting_count

    def step(self) -> StepResult:
        if self.idle:
            return StepResult(self._step, self.now_s, 0.0, (), (), (), (), ())
        t = self._step + 1
        preempted = self._grow_answers(t)
        decoders = len(self._decoders)
        decoded = self._decoding_ids() if self._name_decoders else ()
        budget = self.preset.step_tokens - decoders
        kv_read = self._decode_kv_tokens
        admitted, host_loaded = self._admit(budget) if self._waiting_count else ((), 0)
        prefilled, started, chunk_kv = self._prefill(budget, t)
        prefill_tokens = 0
        for _, tokens in prefilled:
            prefill_tokens += tokens
        duration = step_seconds(
            self.preset, decoders + prefill_tokens, kv_read + chunk_kv, host_loaded
        )
        started_s = self.now_s
        self.now_s += duration
        self._step = t
        self._decode_kv_tokens += decoders
        for seq in started:  # at the end of the step that read the prompt's last chunk
            if seq.first_token_s < 0:
                seq.first_token_s = self.now_s
        finished = self._finish_due(t) if self._finishes and self._finishes[0][0] <= t else ()
        return StepResult(
            t,
            started_s,
            duration,
            decoded,
            tuple(seq.request_id for seq in started),
            prefilled,
            admitted,
            finished,
            preempted,
        )

    def fast_forward(self, until_s: float) -> int:
        """Takes, in one call, the steps before `until_s` in which nothing but decoding can
        happen; returns how many. Each is exactly the step `step()` would take (same blocks
        handed out, same duration, same clock), without building its result: nothing starts,
        finishes or is admitted in them. It stops before a step that would finish an answer,
        admit a request, read a prompt chunk or preempt; `step()` takes that one. An idle
        replica waits: its clock moves to `until_s`. A fleet simulation calls this between its
        events, so a replica's quiet stretches cost a few operations a step."""
        if self.idle:
            self.now_s = max(self.now_s, until_s)
            return 0
        decoders = len(self._decoders)
        if self._prefilling or not decoders or self._head_would_be_admitted(decoders):
            return 0
        # A stale heap entry (a preempted or cancelled answer) only makes the stretch shorter.
        next_finish = self._finishes[0][0] if self._finishes else math.inf
        cache, phase, preset = self._cache, self._block_phase, self.preset
        t, now, kv_read = self._step, self.now_s, self._decode_kv_tokens
        # step_seconds() for a decode-only step, its terms hoisted out of the loop but summed
        # in the same order, so every duration is the very float step() would compute.
        weight_bytes, kv_bytes = preset.weight_bytes, preset.kv_bytes_per_token
        bandwidth = preset.gpus * preset.hbm_bytes_per_s * preset.bandwidth_efficiency
        compute_s = (
            2.0
            * preset.params
            * decoders
            / (preset.gpus * preset.peak_flops * preset.flops_efficiency)
        )
        # Blocks are taken once at the end: taking a then b evicts and spills exactly what
        # taking a + b does (least recently used first, a run's tail before its head).
        room, taking = cache.available, 0
        # Growth only takes blocks, so a head that does not fit now will not fit later.
        while now < until_s and t + 1 < next_finish:
            grow = phase[-(t + 1) % BLOCK_TOKENS]
            if taking + grow > room:
                break  # a preemption: step() decides who goes
            taking += grow
            memory_s = (weight_bytes + kv_bytes * kv_read) / bandwidth
            now += (memory_s if memory_s > compute_s else compute_s) + 0.0
            kv_read += decoders
            t += 1
        if taking:
            cache.take(taking)
        taken = t - self._step
        self._step, self.now_s, self._decode_kv_tokens = t, now, kv_read
        return taken

    def _head_would_be_admitted(self, decoders: int) -> bool:
        """Whether the next step would admit (or clean up) the head of the waiting queue."""
        if not self._waiting_count or self.preset.step_tokens - decoders <= 0:
            return False
        _, _, epoch, seq = self._waiting[0]
        if seq.state != WAITING or seq.queue_epoch != epoch:
            return True  # a stale entry: step() pops it, and the next head may fit
        if len(self._running) >= self.preset.max_running:
            return False
        return _blocks_for(seq.to_read + 1) <= self._cache.available

    def _decoding_ids(self) -> tuple[str, ...]:
        # Rebuilt only when the decoders change; most steps hand back the same tuple.
        if self._decoder_ids is None:
            self._decoder_ids = tuple(self._decoders)
        return self._decoder_ids

    def _grow_answers(self, t: int) -> tuple[str, ...]:
        """Gives a new block to every answer that fills its last one this step. With no room,
        the newest admission (Free before Plus) is preempted and queued again, as vLLM does."""
        bucket = -t % BLOCK_TOKENS
        if not self._block_phase[bucket]:
            return ()
        preempted: list[str] = []
        while self._block_phase[bucket] > self._cache.available:
            preempted.append(self._preempt(t - 1))
        self._cache.take(self._block_phase[bucket])
        return tuple(preempted)

    def _preempt(self, done_step: int) -> str:
        running = list(self._running.values())
        victim = next((s for s in reversed(running) if s.priority == FREE), running[-1])
        self._unload(victim, done_step)
        self._enqueue(victim)
        return victim.request_id

    def _admit(self, budget: int) -> tuple[tuple[str, ...], int]:
        """Admits waiting requests, paid before free, while blocks last. A head that does not fit
        stops the queue: letting smaller requests jump it would starve a long paid prompt."""
        admitted: list[str] = []
        host_loaded = 0
        while self._waiting_count and budget > 0:
            seq = self._waiting[0][3]
            if seq.state != WAITING or seq.queue_epoch != self._waiting[0][2]:
                heapq.heappop(self._waiting)  # cancelled or queued again since
                continue
            if len(self._running) >= self.preset.max_running:
                break
            loaded = self._try_admit(seq)
            if loaded < 0:
                break
            heapq.heappop(self._waiting)
            admitted.append(seq.request_id)
            host_loaded += loaded
        return tuple(admitted), host_loaded

    def _try_admit(self, seq: ReplicaRequest) -> int:
        """Admits seq if its blocks fit: returns how many came back from host RAM, else -1."""
        to_read = seq.to_read
        blocks = _blocks_for(to_read + 1)
        # The conversation's own cached blocks are freed or kept for it, so they count as room.
        if blocks > self._cache.available:
            return -1
        # At least the prompt's last token is computed again: its logits give the next token.
        usable = min(seq.reusable + seq.emitted, to_read - 1) // BLOCK_TOKENS
        on_gpu, in_host = self._cache.claim(seq.conversation, usable)
        self._cache.take(blocks - on_gpu)
        found = on_gpu + in_host
        if seq.shared is not None:
            shared_usable = min(seq.shared_tokens, to_read - 1) // BLOCK_TOKENS
            if found < shared_usable:
                found = max(found, self._cache.shared_hit(seq.shared, shared_usable))
        seq.cached = found * BLOCK_TOKENS
        if seq.first_cached < 0:
            seq.first_cached = seq.cached
            self._prompt_tokens_admitted += seq.prompt
            self._cached_tokens_admitted += seq.cached
        seq.left = to_read - seq.cached
        seq.blocks = blocks
        seq.state = PREFILLING
        self._waiting_count -= 1
        self._queued_prefill -= seq.cached
        self._running[seq.request_id] = seq
        self._prefilling.append(seq)
        return in_host

    def _prefill(
        self, budget: int, t: int
    ) -> tuple[tuple[tuple[str, int], ...], list[ReplicaRequest], int]:
        """Spends what is left of the budget on prompts, oldest admission first (chunked);
        returns the chunks read, the requests whose prompt ended, and the KV the chunks read."""
        if budget <= 0 or not self._prefilling:
            return (), [], 0
        chunks: list[tuple[str, int]] = []
        started: list[ReplicaRequest] = []
        kv_read = read = 0
        for seq in self._prefilling:
            if budget <= 0:
                break
            chunk = min(seq.left, budget)
            budget -= chunk
            read += chunk
            seq.left -= chunk
            kv_read += seq.to_read - seq.left
            chunks.append((seq.request_id, chunk))
            if seq.left == 0:
                self._start_decoding(seq, t)
                started.append(seq)
        self._queued_prefill -= read
        if started:
            self._prefilling = [s for s in self._prefilling if s.state == PREFILLING]
        return tuple(chunks), started, kv_read

    def _start_decoding(self, seq: ReplicaRequest, t: int) -> None:
        """The last prompt chunk yields the first token; from the next step on it decodes."""
        seq.state = DECODING
        seq.origin = t - (seq.emitted + 1)
        heapq.heappush(self._finishes, (seq.origin + seq.answer, seq.order, seq))
        self._block_phase[(seq.prompt - seq.origin - 1) % BLOCK_TOKENS] += 1
        self._decoders[seq.request_id] = seq
        self._decoder_ids = None
        self._decode_kv_tokens += seq.to_read + 1

    def _finish_due(self, t: int) -> tuple[SimFinish, ...]:
        finished: list[SimFinish] = []
        while self._finishes and self._finishes[0][0] <= t:
            due, _, seq = heapq.heappop(self._finishes)
            if seq.state != DECODING or seq.origin + seq.answer != due:
                continue  # cancelled or preempted since
            self._unload(seq, t)
            finished.append(self._close(seq, cancelled=False))
        return tuple(finished)

    # --- leaving ---

    def _unload(self, seq: ReplicaRequest, done_step: int) -> None:
        """Takes an admitted request out of the batch and hands its blocks back."""
        del self._running[seq.request_id]
        if seq.state == PREFILLING:
            self._prefilling.remove(seq)
            self._queued_prefill -= seq.left
            computed, blocks = seq.to_read - seq.left, seq.blocks
        else:
            seq.emitted = done_step - seq.origin
            context = seq.prompt + seq.emitted
            computed, blocks = context - 1, _blocks_for(context)  # the last token's KV is unwritten
            del self._decoders[seq.request_id]
            self._decoder_ids = None
            self._decode_kv_tokens -= context
            self._block_phase[(seq.prompt - seq.origin - 1) % BLOCK_TOKENS] -= 1
        self._cache.keep(seq.conversation, computed // BLOCK_TOKENS, blocks)
        # What it wrote is now the conversation's cached prefix: a requeue may reuse all of it.
        seq.reusable = seq.prompt
        seq.state = WAITING  # until it is queued again or closed

    def _close(self, seq: ReplicaRequest, cancelled: bool) -> SimFinish:
        output = seq.emitted
        seq.state = DONE
        del self._seqs[seq.request_id]
        return SimFinish(
            seq.request_id,
            seq.prompt,
            max(0, seq.first_cached),
            output,
            seq.submitted_s,
            seq.first_token_s,
            self.now_s,
            cancelled,
        )

    # --- what the node reports ---

    def generated(self, request_id: str) -> int:
        """Tokens the request's answer has so far."""
        seq = self._seqs[request_id]
        if seq.state == DECODING:
            return self._step - seq.origin
        return seq.emitted

    def load(self) -> SimLoad:
        cache = self._cache
        capacity = self._total_blocks
        return SimLoad(
            kv_usage=(capacity - cache.available) / capacity,
            free_kv_tokens=cache.available * BLOCK_TOKENS,
            kv_capacity_tokens=capacity * BLOCK_TOKENS,
            queued_prefill_tokens=self._queued_prefill,
            running_requests=len(self._running),
            waiting_requests=self._waiting_count,
            prefix_hit_rate=(
                self._cached_tokens_admitted / self._prompt_tokens_admitted
                if self._prompt_tokens_admitted
                else 0.0
            ),
            cached_kv_tokens=cache.cached * BLOCK_TOKENS,
            host_kv_tokens=cache.host_used * BLOCK_TOKENS,
        )


def _blocks_for(tokens: int) -> int:
    return -(-tokens // BLOCK_TOKENS)


__all__ = ["ReplicaSim"]
