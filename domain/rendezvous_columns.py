"""Rendezvous scores over numpy columns: `domain.picker.mix64` and the favourite of many
conversations at once, for `domain.pool_index.PoolIndex`. Pure, no I/O."""

from __future__ import annotations

import numpy as np


def uint64_constant(value: int) -> np.ndarray:
    # 0-d arrays: numpy converts them faster per call than numpy scalars or Python ints.
    return np.array(value, dtype=np.uint64)


_K1, _K2 = uint64_constant(0xBF58476D1CE4E5B9), uint64_constant(0x94D049BB133111EB)
_S30, _S27, _S31 = uint64_constant(30), uint64_constant(27), uint64_constant(31)


def mix64_inplace(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """`domain.picker.mix64` over a uint64 array, in place. Array multiplies wrap modulo 2**64
    silently (only numpy scalars warn), which is the & _MASK64 of the reference."""
    np.right_shift(x, _S30, scratch)
    np.bitwise_xor(x, scratch, x)
    np.multiply(x, _K1, x)
    np.right_shift(x, _S27, scratch)
    np.bitwise_xor(x, scratch, x)
    np.multiply(x, _K2, x)
    np.right_shift(x, _S31, scratch)
    # numpy's stubs type a ufunc's result as Any; with out= it is x itself.
    mixed: np.ndarray = np.bitwise_xor(x, scratch, x)
    return mixed


def favourite_rows(
    conversation_hashes: np.ndarray, replica_hashes: np.ndarray, score_mask: np.ndarray
) -> np.ndarray:
    """Each conversation's highest-scoring replica row (a block of conversations by every
    replica in one call); replicas whose mask is 0 score 0, and the first row wins ties."""
    scores = np.bitwise_xor(conversation_hashes[:, None], replica_hashes[None, :])
    mix64_inplace(scores, np.empty_like(scores))
    np.multiply(scores, score_mask[None, :], scores)
    rows: np.ndarray = scores.argmax(axis=1)
    return rows
