"""The ring protocol of the register-operand 16-row FP8 decode (`kernels.mla_decode_ws16_rs`), on a model.

The kernel's loader fills ring slot pair c % (SLOTS / 2) with block c and its two consumers take alternate
blocks. With an odd number of pairs (SLOTS = 6) a pair's previous block belongs to the other consumer, so a
consumer can reach its k_ready wait for block c while the pair's previous copies are still in flight; the
parity wait then matches the phase before and passes at once. On the H200 that read a stale slot and, once the
slot was released, made the loader arrive on a phase with no arrival pending: "warp illegal instruction" at its
expect, about once in 400 B64 + B128 harness runs (BENCHMARKS.md, twenty-fourth session). The kernel now waits
for the other consumer's release of the pair's previous block (k_empty) before its k_ready waits.

The model has mbarriers with the PTX rules that matter here (a phase completes when its pending arrivals and
transaction bytes are both zero; `try_wait.parity(p)` passes when the current phase's parity is not p) and copies
that land in any order. It checks that no consumer passes a k_ready wait before its block's bytes landed, that
no arrival finds no arrival pending, and that the run finishes.
"""

import inspect
import random

import pytest


class Barrier:
    def __init__(self):
        self.pending, self.tx, self.phase = 1, 0, 0

    def arrive(self, nbytes=0):
        if self.pending == 0:
            raise AssertionError("arrival on a phase with no arrival pending")
        self.pending -= 1
        self.tx += nbytes
        self._complete()

    def land(self, nbytes):
        self.tx -= nbytes
        self._complete()

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = 1

    def passes(self, parity: int) -> bool:
        return parity != self.phase & 1


def run_ring(n_blocks: int, slots: int, delays, compute: float, guard: bool) -> None:
    """One program's ring over `n_blocks` blocks; `delays(n)`: when half n's copies land after they are issued.
    Raises AssertionError on an early pass, an arrival with none pending, or a stall."""
    k_ready = [Barrier() for _ in range(slots)]
    k_empty = [Barrier() for _ in range(slots)]
    landed = [False] * (2 * n_blocks)
    in_flight = []  # (time, half)
    issued = 0
    busy_until = [0.0, 0.0]
    next_block = [0, 1]
    holding = [None, None]  # (block, release time)
    now = 0.0
    while next_block[0] < n_blocks or next_block[1] < n_blocks or holding != [None, None]:
        progress = False
        while issued < 2 * n_blocks and k_empty[issued % slots].passes(((issued // slots) & 1) ^ 1):
            k_ready[issued % slots].arrive(nbytes=1)
            in_flight.append((now + delays(issued), issued))
            issued += 1
            progress = True
        for x in (0, 1):
            if holding[x] is not None and holding[x][1] <= now:
                c = holding[x][0]
                k_empty[(2 * c) % slots].arrive()
                k_empty[(2 * c + 1) % slots].arrive()
                holding[x] = None
                progress = True
            c = next_block[x]
            if holding[x] is not None or c >= n_blocks:
                continue
            halves = (2 * c, 2 * c + 1)
            if guard and not all(k_empty[n % slots].passes(((n // slots) & 1) ^ 1) for n in halves):
                continue
            if all(k_ready[n % slots].passes((n // slots) & 1) for n in halves):
                assert all(landed[n] for n in halves), f"block {c} read before its copies landed"
                holding[x] = (c, max(now, busy_until[x]) + compute)
                busy_until[x] = holding[x][1]
                next_block[x] += 2
                progress = True
        if progress:
            continue
        future = [t for t, _ in in_flight] + [h[1] for h in holding if h is not None]
        assert future, "the ring stalled"
        now = min(future)
        for t, n in [f for f in in_flight if f[0] <= now]:
            in_flight.remove((t, n))
            landed[n] = True
            k_ready[n % slots].land(1)


def test_the_unguarded_protocol_fails_when_a_pairs_previous_copies_are_late():
    """Without the guard, consumer 0 reaches block 4 (pair 1) while block 1's copies (pair 1, consumer 1's)
    are still in flight: the model catches it (the test below is not vacuous)."""
    with pytest.raises(AssertionError, match="read before its copies landed|no arrival pending"):
        run_ring(8, 6, lambda n: 50.0 if n in (2, 3) else 1.0, compute=1.0, guard=False)


def _failures(slots: int, guard: bool, runs: int = 300) -> int:
    """Runs of 32 blocks with heavy-tailed landing times (most copies quick, a tenth very late, in any order)
    that break the protocol."""
    rng = random.Random(slots)
    failed = 0
    for _ in range(runs):
        late = {n for n in range(64) if rng.random() < 0.1}
        try:
            run_ring(32, slots,
                     lambda n, late=late: rng.uniform(20, 60) if n in late else rng.uniform(0.5, 2),
                     compute=rng.uniform(0.5, 3), guard=guard)
        except AssertionError:
            failed += 1
    return failed


@pytest.mark.parametrize("slots", [4, 6, 8])
def test_the_guarded_protocol_holds_with_copies_landing_in_any_order(slots):
    assert _failures(slots, guard=True) == 0


def test_the_random_runs_reach_the_unguarded_protocols_failure():
    """The same runs find the bug without the guard, and only with an odd number of slot pairs (4 and 8 slots
    give each consumer pairs of its own)."""
    assert _failures(6, guard=False) > 0
    assert _failures(4, guard=False) == 0 and _failures(8, guard=False) == 0


def test_the_kernel_guards_its_k_ready_waits():
    """The model's guard is the kernel's: each consumer waits on k_empty before its k_ready waits."""
    from pagedmla.kernels import mla_decode_ws16_rs

    src = inspect.getsource(mla_decode_ws16_rs._consumer.fn)
    empty = src.index("mbarrier.wait(k_empty.index((2 * c) % SLOTS)")
    assert empty < src.index("mbarrier.wait(k_ready.index((2 * c) % SLOTS)")
    assert "mbarrier.wait(k_empty.index((2 * c + 1) % SLOTS)" in src
