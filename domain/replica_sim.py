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
compute, whichever is longer (a roofline), plus any cached blocks copied back from host RAM.

Speed: a fleet simulation steps hundreds of replicas thousands of times a second, so a step
never visits every answer. An answer that is decoding costs nothing per step: its token count
is `step - origin`, its finish step sits in a heap, and the KV blocks the batch needs this step
are counted by the answers' position within their last block (16 buckets). The cache keeps one
run of blocks per conversation, not one entry per block. Work per step is a few dict operations
per admission, prefill chunk and finish, whatever the prompt's length.

Calibration against sizing 000. Decode: "each step reads the weights (140 GB over 4 GPUs) plus
100 x 1.1 GB of KV; at 3.35 TB/s a GPU one step takes about 30 ms" needs 62 % of the peak
bandwidth. Prefill: "reading 3,000 tokens takes 1.05 GPU-seconds" is 140 GFLOP a token at 40 %
of an H100's 989 dense TFLOPS, and then a full 512-token step takes about 45 ms (sizing 000's
"512 prompt tokens add about 45 ms", read as: such a step takes about 45 ms; read as 45 ms on
top of a 30 ms decode it would contradict sizing 000's own 20 tokens/s and 3.5 s). With those
two figures the single-server case comes out as sizing 000 tells it (see
tests/domain/test_replica_sim.py). Attention's own FLOPs, which grow with the context, are
left out as sizing 000 leaves them out.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final, NamedTuple

BLOCK_TOKENS: Final = 16  # tokens per KV cache block: memory is handed out in pages
# Admission priority: lower goes first.
PAID: Final = 0
FREE: Final = 1


@dataclass(frozen=True, slots=True)
class ReplicaPreset:
    """One replica's hardware and model. Bytes and FLOPs are decimal, as the sizings count."""

    name: str
    model: str
    params: float  # parameters; a token costs 2 FLOPs per parameter
    weight_bytes: float
    kv_bytes_per_token: float
    gpus: int
    hbm_bytes_per_s: float  # per GPU
    peak_flops: float  # per GPU, dense BF16
    kv_cache_bytes: float  # the whole replica's KV pool: memory less weights and activations
    host_kv_bytes: float  # host RAM for KV blocks spilled from the GPUs
    host_link_bytes_per_s: float  # per GPU, host RAM to GPU (PCIe)
    bandwidth_efficiency: float = 0.62
    flops_efficiency: float = 0.40
    step_tokens: int = 512
    context_tokens: int = 131_072
    # Answers in the batch at most (vLLM's max_num_seqs). Sizing 000 sizes its fleet on "about
    # 100 people at once" a server; without a cap the batch grows until the KV cache is full.
    max_running: int = 100

    @property
    def kv_blocks(self) -> int:
        return int(self.kv_cache_bytes // (self.kv_bytes_per_token * BLOCK_TOKENS))

    @property
    def host_blocks(self) -> int:
        return int(self.host_kv_bytes // (self.kv_bytes_per_token * BLOCK_TOKENS))


# Sizing 000's large model: a 70B on four 80 GB H100s. KV: 80 layers x 8 KV heads x 128 x 2 (K, V)
# x 2 bytes = 327,680 B a token ("about 320 KB"). KV pool: 320 GB - 140 GB - 4 x 5 GB of
# activations = 160 GB. Host RAM: "about 300 GB per server".
H100x4_70B = ReplicaPreset(
    name="70b-4xh100",
    model="llama-70b",
    params=70e9,
    weight_bytes=140e9,
    kv_bytes_per_token=327_680,
    gpus=4,
    hbm_bytes_per_s=3.35e12,
    peak_flops=989e12,
    kv_cache_bytes=160e9,
    host_kv_bytes=300e9,
    host_link_bytes_per_s=50e9,
)

# Sizing 000's small model: an 8B on one H100. KV: 32 layers x 8 x 128 x 2 x 2 B = 131,072 B a
# token; the KV budget is 80 GB - 16 GB of weights - 4 GB of activations = 60 GB. Sizing 000 gives
# no step time for it, only its cost: 0.18 GPU-seconds a message against the 70B's 0.67. At the
# 70B's 62 % of peak bandwidth the 8B would cost 0.21 of the 70B's GPU time on the same
# messages; 48 % makes it sizing 000's 0.27 (a small model's short kernels use less of the
# bandwidth). Measured on a saturated replica, batch 100, 3,000-token prompts 87 % cached.
H100_8B = ReplicaPreset(
    name="8b-1xh100",
    model="llama-8b",
    params=8e9,
    weight_bytes=16e9,
    kv_bytes_per_token=131_072,
    gpus=1,
    hbm_bytes_per_s=3.35e12,
    peak_flops=989e12,
    kv_cache_bytes=60e9,
    host_kv_bytes=300e9,
    host_link_bytes_per_s=50e9,
    bandwidth_efficiency=0.48,
)

PRESETS = {preset.name: preset for preset in (H100x4_70B, H100_8B)}


def step_seconds(
    preset: ReplicaPreset, batch_tokens: int, kv_tokens_read: int, host_blocks_loaded: int = 0
) -> float:
    """One forward pass: memory-bound when the batch is small (decode), compute-bound when it
    holds prompt chunks (prefill); a pass waits for the slower of the two."""
    bytes_read = preset.weight_bytes + preset.kv_bytes_per_token * kv_tokens_read
    memory_s = bytes_read / (preset.gpus * preset.hbm_bytes_per_s * preset.bandwidth_efficiency)
    flops = 2.0 * preset.params * batch_tokens
    compute_s = flops / (preset.gpus * preset.peak_flops * preset.flops_efficiency)
    host_bytes = host_blocks_loaded * BLOCK_TOKENS * preset.kv_bytes_per_token
    return max(memory_s, compute_s) + host_bytes / (preset.gpus * preset.host_link_bytes_per_s)


# The records a step hands out are NamedTuples, not dataclasses: a fleet makes tens of
# thousands a second, and a frozen dataclass costs several times as much to build.


class SimFinish(NamedTuple):
    request_id: str
    prompt_tokens: int
    cached_tokens: int  # prompt tokens found in the prefix cache (GPU or host) at admission
    output_tokens: int
    submitted_s: float
    first_token_s: float  # -1 when it never got one
    finished_s: float
    cancelled: bool = False


class StepResult(NamedTuple):
    step: int
    started_s: float
    duration_s: float
    decoded: tuple[str, ...]  # answers that got their next token (empty unless named)
    started: tuple[str, ...]  # prompts read to the end: each got its first token
    prefilled: tuple[tuple[str, int], ...]  # (request, prompt tokens read this step)
    admitted: tuple[str, ...]
    finished: tuple[SimFinish, ...]
    preempted: tuple[str, ...] = ()

    @property
    def idle(self) -> bool:
        return self.duration_s == 0.0


class SimLoad(NamedTuple):
    kv_usage: float  # share of KV blocks held by admitted requests
    free_kv_tokens: int  # free blocks plus evictable cached ones, in tokens
    kv_capacity_tokens: int
    # Prompt tokens not yet read, admitted or waiting (a waiting prompt counts whole: what of
    # it is cached is known when it is admitted).
    queued_prefill_tokens: int
    running_requests: int
    waiting_requests: int
    prefix_hit_rate: float  # cached share of admitted prompt tokens
    cached_kv_tokens: int  # evictable prefix blocks on the GPUs, in tokens
    host_kv_tokens: int  # prefix blocks spilled to host RAM, in tokens


# A request's state. Final: mypyc compiles the constants in, not a module lookup per use.
_WAITING: Final = 0
_PREFILLING: Final = 1
_DECODING: Final = 2
_DONE: Final = 3


# _Seq, _Run and _Shared are plain classes with their own __init__, not dataclasses: the
# dataclass-made __init__ stays interpreted Python when mypyc compiles this module
# (fleet/compiled.py), and a region makes one of each per message.


class _Seq:
    __slots__ = (
        "answer",
        "blocks",
        "cached",
        "conversation",
        "emitted",
        "first_cached",
        "first_token_s",
        "left",
        "order",
        "origin",
        "priority",
        "prompt",
        "queue_epoch",
        "request_id",
        "reusable",
        "shared",
        "shared_tokens",
        "state",
        "submitted_s",
    )

    def __init__(
        self,
        request_id: str,
        priority: int,
        order: int,
        prompt: int,
        answer: int,
        conversation: Hashable | None,
        reusable: int,
        submitted_s: float,
    ) -> None:
        self.request_id = request_id
        self.priority = priority
        self.order = order  # arrival order: ties in priority go to the earlier request
        self.prompt = prompt  # the prompt as submitted
        self.answer = answer  # tokens the answer will have
        self.conversation = conversation
        self.reusable = reusable  # leading prompt tokens equal to what the cache holds
        self.submitted_s = submitted_s
        self.emitted = 0  # tokens emitted before this admission (after a preemption)
        self.state = _WAITING
        self.left = 0  # prompt tokens of this admission not yet read
        self.cached = 0
        self.first_cached = -1  # cache hit of the first admission, for the finish record
        self.blocks = 0  # blocks held while prefilling
        self.origin = 0  # while decoding, tokens emitted after step t are t - origin
        self.first_token_s = -1.0
        self.queue_epoch = 0
        self.shared: Hashable | None = None  # the key of a prefix many conversations open with
        self.shared_tokens = 0

    @property
    def to_read(self) -> int:
        """This admission's prompt: the prompt plus what a preempted answer already wrote."""
        return self.prompt + self.emitted


class _Run:
    """One conversation's cached KV: blocks [0, gpu) on the GPUs, [gpu, gpu + host) in host RAM.
    Eviction takes a run's tail first, so what stays is always a prefix: the part a next turn
    can use."""

    __slots__ = ("conversation", "gpu", "host")

    def __init__(self, conversation: Hashable, gpu: int = 0, host: int = 0) -> None:
        self.conversation = conversation
        self.gpu = gpu
        self.host = host


class _Shared:
    """A shared opening's key in the cache: never equal to a conversation's."""

    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Shared) and other.key == self.key

    def __hash__(self) -> int:
        return hash((_Shared, self.key))


@dataclass(slots=True)
class _PrefixCache:
    """KV blocks of finished turns, kept by conversation until the room is needed: evicted from
    the GPUs least recently used first, spilled to host RAM (also LRU) while it has room.

    A run is one conversation's blocks, not one entry per block: admitting or finishing a
    request costs a few dict operations whatever its length, which the fleet simulation needs.
    The price: two requests of one conversation in flight at once do not share their blocks
    (a conversation has one message in flight). Across conversations only a shared opening
    (the system prompt) is shared: one run of its own, read by every conversation that has
    nothing cached yet; each conversation's own run still holds a copy of it."""

    free: int  # GPU blocks that hold nothing
    host_capacity: int
    cached: int = 0  # GPU blocks in runs: evictable
    host_used: int = 0
    gpu_lru: OrderedDict[Hashable, _Run] = field(default_factory=OrderedDict)
    host_lru: OrderedDict[Hashable, _Run] = field(default_factory=OrderedDict)
    # The runs at the LRUs' ends, remembered (None: look it up): growing answers nibble the
    # oldest run a few blocks a step into host RAM's newest, and with these most steps touch
    # no OrderedDict. Whatever moves or removes a remembered run forgets it (_forget).
    gpu_oldest: _Run | None = None
    host_oldest: _Run | None = None
    host_newest: _Run | None = None

    @property
    def available(self) -> int:
        return self.free + self.cached

    def take(self, blocks: int) -> None:
        """Hands out blocks: free ones first, then the least recently used cached ones."""
        from_free = min(blocks, self.free)
        self.free -= from_free
        blocks -= from_free
        while blocks:
            run = self.gpu_oldest
            if run is None:
                run = self.gpu_oldest = next(iter(self.gpu_lru.values()))
            evicted = min(blocks, run.gpu)
            run.gpu -= evicted
            self.cached -= evicted
            blocks -= evicted
            if not run.gpu:
                del self.gpu_lru[run.conversation]
                self.gpu_oldest = None
            self._spill(run, evicted)

    def _spill(self, run: _Run, blocks: int) -> None:
        if not self.host_capacity:
            return
        run.host += blocks
        self.host_used += blocks
        if run is not self.host_newest:
            self.host_lru[run.conversation] = run
            self.host_lru.move_to_end(run.conversation)
            self.host_newest = run
            if run is self.host_oldest:  # it moved off the front
                self.host_oldest = None
        while self.host_used > self.host_capacity:
            oldest = self.host_oldest
            if oldest is None:
                oldest = self.host_oldest = next(iter(self.host_lru.values()))
            dropped = min(oldest.host, self.host_used - self.host_capacity)
            oldest.host -= dropped
            self.host_used -= dropped
            if not oldest.host:
                del self.host_lru[oldest.conversation]
                self._forget(oldest)

    def claim(self, conversation: Hashable, usable: int) -> tuple[int, int]:
        """Takes a conversation's run for a request that can use its first `usable` blocks:
        returns (blocks it keeps on the GPUs, blocks it copies back from host RAM). Blocks past
        `usable` no longer match the conversation and are freed."""
        run = self.gpu_lru.pop(conversation, None) or self.host_lru.get(conversation)
        if run is None:
            return 0, 0
        self.host_lru.pop(conversation, None)
        self._forget(run)
        on_gpu = min(run.gpu, usable)
        in_host = min(run.host, usable - on_gpu) if on_gpu == run.gpu else 0
        self.cached -= run.gpu
        self.free += run.gpu - on_gpu
        self.host_used -= run.host
        return on_gpu, in_host

    def shared_hit(self, key: Hashable, usable: int) -> int:
        """How many of a shared opening's first `usable` blocks are on the GPUs; keeps them
        fresh. Missing ones are computed by the request and kept, as a real server would."""
        shared = _Shared(key)
        run = self.gpu_lru.get(shared)
        found = min(run.gpu, usable) if run is not None else 0
        if run is not None:
            self.gpu_lru.move_to_end(shared)
            if run is self.gpu_oldest:
                self.gpu_oldest = None
        if found < usable:
            self.claim(shared, 0)  # the shorter copy goes
            kept = min(usable, self.available)
            if kept:
                self.take(kept)
                self.gpu_lru[shared] = _Run(shared, gpu=kept)
                self.cached += kept
        return found

    def _forget(self, run: _Run) -> None:
        """The run left both LRUs, or moved within them: no end remembers it."""
        if run is self.gpu_oldest:
            self.gpu_oldest = None
        if run is self.host_oldest:
            self.host_oldest = None
        if run is self.host_newest:
            self.host_newest = None

    def keep(self, conversation: Hashable | None, full: int, blocks: int) -> None:
        """A request lets go of `blocks`: its `full` leading blocks become the conversation's run
        (the newest content wins over an older run of it), the rest are free."""
        if conversation is None or not full:
            self.free += blocks
            return
        self.claim(conversation, 0)  # frees an older run, if a request of it finished meanwhile
        self.gpu_lru[conversation] = _Run(conversation, gpu=full)
        self.cached += full
        self.free += blocks - full


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
        self._cache = _PrefixCache(free=self._total_blocks, host_capacity=preset.host_blocks)
        self._seqs: dict[str, _Seq] = {}
        self._waiting: list[tuple[int, int, int, _Seq]] = []  # heap: priority, arrival, epoch
        self._waiting_count = 0
        self._running: dict[str, _Seq] = {}  # admission order
        self._prefilling: list[_Seq] = []  # admission order
        self._decoders: dict[str, _Seq] = {}
        self._decoder_ids: tuple[str, ...] | None = ()
        self._decode_kv_tokens = 0  # the decoders' contexts, summed
        # Decoders by (prompt - origin - 1) % 16: the bucket (-t) % 16 needs a block at step t.
        self._block_phase = [0] * BLOCK_TOKENS
        self._finishes: list[tuple[int, int, _Seq]] = []  # heap: finish step, arrival
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
        seq = _Seq(
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

    def _enqueue(self, seq: _Seq) -> None:
        seq.state = _WAITING
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
        if seq.state == _WAITING:
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
        if seq.state != _WAITING or seq.queue_epoch != epoch:
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
            if seq.state != _WAITING or seq.queue_epoch != self._waiting[0][2]:
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

    def _try_admit(self, seq: _Seq) -> int:
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
        seq.state = _PREFILLING
        self._waiting_count -= 1
        self._queued_prefill -= seq.cached
        self._running[seq.request_id] = seq
        self._prefilling.append(seq)
        return in_host

    def _prefill(self, budget: int, t: int) -> tuple[tuple[tuple[str, int], ...], list[_Seq], int]:
        """Spends what is left of the budget on prompts, oldest admission first (chunked);
        returns the chunks read, the requests whose prompt ended, and the KV the chunks read."""
        if budget <= 0 or not self._prefilling:
            return (), [], 0
        chunks: list[tuple[str, int]] = []
        started: list[_Seq] = []
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
            self._prefilling = [s for s in self._prefilling if s.state == _PREFILLING]
        return tuple(chunks), started, kv_read

    def _start_decoding(self, seq: _Seq, t: int) -> None:
        """The last prompt chunk yields the first token; from the next step on it decodes."""
        seq.state = _DECODING
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
            if seq.state != _DECODING or seq.origin + seq.answer != due:
                continue  # cancelled or preempted since
            self._unload(seq, t)
            finished.append(self._close(seq, cancelled=False))
        return tuple(finished)

    # --- leaving ---

    def _unload(self, seq: _Seq, done_step: int) -> None:
        """Takes an admitted request out of the batch and hands its blocks back."""
        del self._running[seq.request_id]
        if seq.state == _PREFILLING:
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
        seq.state = _WAITING  # until it is queued again or closed

    def _close(self, seq: _Seq, cancelled: bool) -> SimFinish:
        output = seq.emitted
        seq.state = _DONE
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
        if seq.state == _DECODING:
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


__all__ = [
    "BLOCK_TOKENS",
    "H100_8B",
    "PRESETS",
    "H100x4_70B",
    "ReplicaPreset",
    "ReplicaSim",
    "SimFinish",
    "SimLoad",
    "StepResult",
]
