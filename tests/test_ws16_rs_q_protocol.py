"""The q buffers of the register-operand 16-row FP8 decode (`kernels.mla_decode_ws16_rs`), on a model (CPU tier).

Since the twenty-fifth session consumer 1 widens each piece's q for both consumers into one of two buffers
(`q16_s`, `qrp_s`, `qd_s` at index pieces % 2): it waits `q16_empty[qb]` (consumer 0 done with the buffer's
previous piece), reads q_s once `q_ready` says the loader's copy landed, writes the buffer, then arrives
`q16_ready[qb]` and `q_empty`; consumer 0 waits `q16_ready[qb]`, reads `qd_s`, runs its blocks' MMAs on the
buffer and releases it with `q16_empty[qb]` after a barrier of its warps. At a piece's end consumer 1 hands
(m, l, O) to consumer 0 (`merge_full` / `merge_empty`) when it had a block of the piece.

The model runs each warp of both consumers and the loader as generators, picks the next step at random (with
warps slowed down now and then) and lands copies in any order. Shared buffers record the version each warp wrote
and who is reading them: a read of the wrong version, a write under a reader, an arrival with none pending or a
deadlock fails the run. A helper's review built the first version of this model (twenty-fifth session); it
found that consumer 0 released the q buffer from one thread with no barrier of its warps when the piece's only
block was consumer 1's, which `test_the_model_finds_a_release_without_barrier` reproduces.
"""

import inspect
import random

import pytest


class Barrier:
    """An mbarrier: a phase completes when its pending arrivals and transaction bytes are both zero."""

    def __init__(self, name: str, count: int = 1):
        self.name, self.count, self.pending, self.tx, self.phase = name, count, count, 0, 0

    def arrive(self, nbytes: int = 0) -> None:
        assert self.pending > 0, f"{self.name}: arrival with none pending"
        self.pending -= 1
        self.tx += nbytes
        self._complete()

    def land(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._complete()

    def _complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passes(self, parity: int) -> bool:
        return parity != self.phase & 1


class Buffer:
    """Shared memory: the version each writer warp left, and the warps reading it now."""

    def __init__(self, name: str):
        self.name, self.version, self.readers = name, {}, set()

    def write(self, who: str, version) -> None:
        assert not self.readers, f"{self.name} written by {who} ({version}) while {sorted(self.readers)} read it"
        self.version[who] = version

    def read(self, who: str, version, writers) -> None:
        for writer in writers:
            got = self.version.get(writer)
            assert got == version, f"{self.name} read by {who} for {version}: {writer} left {got}"
        self.readers.add(who)


def run(blocks_per_piece, seed: int, *, buffers: int = 2, release_barrier: bool = True, wait_empty: bool = True,
        slots: int = 6, warps: int = 4) -> None:
    """One program over pieces of `blocks_per_piece` blocks. Raises AssertionError on a protocol violation."""
    rng = random.Random(seed)
    k_ready = [Barrier(f"k_ready{i}") for i in range(slots)]
    k_empty = [Barrier(f"k_empty{i}") for i in range(slots)]
    q_ready, q_empty = Barrier("q_ready"), Barrier("q_empty")
    merge_full, merge_empty = Barrier("merge_full"), Barrier("merge_empty")
    q16_ready = [Barrier(f"q16_ready{i}") for i in range(buffers)]
    q16_empty = [Barrier(f"q16_empty{i}") for i in range(buffers)]
    q_s = Buffer("q_s")
    q16 = [Buffer(f"q16_{i}") for i in range(buffers)]
    qd = [Buffer(f"qd_{i}") for i in range(buffers)]
    ring = [Buffer(f"slot{i}") for i in range(slots)]
    handover = Buffer("ox_s")
    in_flight = []  # (buffer, version, barrier): copies issued, not landed
    written = {}  # piece -> times its rows were written
    warps_of = {0: [f"c0w{j}" for j in range(warps)], 1: [f"c1w{j}" for j in range(warps)]}

    def loader():
        c = pieces = 0
        for b, n_blocks in enumerate(blocks_per_piece):
            if n_blocks == 0:
                continue
            yield ("wait", q_empty, (pieces & 1) ^ 1)
            q_ready.arrive(1)
            in_flight.append((q_s, ("q", b), q_ready))
            pieces += 1
            for _ in range(n_blocks):
                for n in (2 * c, 2 * c + 1):
                    yield ("wait", k_empty[n % slots], ((n // slots) & 1) ^ 1)
                    k_ready[n % slots].arrive(1)
                    in_flight.append((ring[n % slots], ("k", n), k_ready[n % slots]))
                    yield ("step",)
                c += 1

    def consumer(wg: int, j: int):
        me, lead = warps_of[wg][j], j == 0
        c0 = pieces = merges = 0
        for b, n_blocks in enumerate(blocks_per_piece):
            other_has = n_blocks >= 2 or (n_blocks == 1 and c0 % 2 == 1)
            if n_blocks > 0:
                qb = pieces % buffers
                if wg == 1:
                    if wait_empty:
                        yield ("wait", q16_empty[qb], ((pieces // buffers) & 1) ^ 1)
                    yield ("wait", q_ready, pieces & 1)
                    q_s.read(me, ("q", b), ["ld"])
                    yield ("step",)
                    q16[qb].write(me, b)
                    qd[qb].write(me, b)
                    yield ("step",)
                    q_s.readers.discard(me)
                    yield ("sync", wg)  # fence_async_shared, thread_barrier
                    if lead:
                        q16_ready[qb].arrive()
                        q_empty.arrive()
                else:
                    yield ("wait", q16_ready[qb], (pieces // buffers) & 1)
                    qd[qb].read(me, b, warps_of[1])
                    yield ("step",)
                    qd[qb].readers.discard(me)
                pieces += 1
                for i in range((c0 + wg) % 2, n_blocks, 2):
                    halves = (2 * (c0 + i), 2 * (c0 + i) + 1)
                    for n in halves:  # the pair's previous block released (twenty-fourth session's guard)
                        yield ("wait", k_empty[n % slots], ((n // slots) & 1) ^ 1)
                    for n in halves:
                        yield ("wait", k_ready[n % slots], (n // slots) & 1)
                    for n in halves:
                        ring[n % slots].read(me, ("k", n), ["ld"])
                    q16[qb].read(me, b, warps_of[1])  # the MMAs read q from the buffer
                    yield ("step",)
                    q16[qb].readers.discard(me)  # warpgroup_mma_wait
                    for n in halves:
                        ring[n % slots].readers.discard(me)
                    yield ("sync", wg)
                    if lead:
                        for n in halves:
                            k_empty[n % slots].arrive()
                if wg == 0:
                    if release_barrier:
                        yield ("sync", wg)
                    if lead and wait_empty:
                        q16_empty[qb].arrive()
            if other_has and wg == 1:
                yield ("wait", merge_empty, (merges & 1) ^ 1)
                handover.write(me, b)
                yield ("sync", wg)
                if lead:
                    merge_full.arrive()
                merges += 1
            elif other_has:
                yield ("wait", merge_full, merges & 1)
                handover.read(me, b, warps_of[1])
                yield ("step",)
                handover.readers.discard(me)
                yield ("sync", wg)
                if lead:
                    merge_empty.arrive()
                merges += 1
            if wg == 0 and lead:
                written[b] = written.get(b, 0) + 1
            c0 += n_blocks

    procs = {"ld": loader()}
    for j in range(warps):
        procs[warps_of[0][j]] = consumer(0, j)
        procs[warps_of[1][j]] = consumer(1, j)
    request = {}

    def advance(name):
        try:
            request[name] = next(procs[name])
        except StopIteration:
            request[name] = ("done",)

    for name in procs:
        advance(name)
    speed = {}
    for step in range(10 ** 6):
        runnable = [k for k, r in request.items()
                    if r[0] == "step" or (r[0] == "wait" and r[1].passes(r[2]))]
        runnable += [("sync", g) for g in (0, 1) if all(request[w][0] == "sync" for w in warps_of[g])]
        if not runnable and not in_flight:
            stuck = {k: r[1].name for k, r in request.items() if r[0] == "wait"}
            assert all(r[0] == "done" for r in request.values()), f"deadlock: {stuck}"
            break
        if step % 100 == 0:  # now and then a warp (or a warpgroup's barrier) runs far behind
            speed = {k: rng.choice([1.0, 1.0, 0.01, 0.001]) for k in [*procs, ("sync", 0), ("sync", 1), "land"]}
        weights = [speed[k] for k in runnable] + ([speed["land"]] if in_flight else [])
        pick = rng.choices(range(len(weights)), weights=weights)[0]
        if pick == len(runnable):
            buffer, version, barrier = in_flight.pop(rng.randrange(len(in_flight)))
            buffer.write("ld", version)
            barrier.land(1)
        elif isinstance(runnable[pick], tuple):
            for w in warps_of[runnable[pick][1]]:
                advance(w)
        else:
            advance(runnable[pick])
    active = [b for b, n in enumerate(blocks_per_piece)]
    assert all(written.get(b) == 1 for b in active), f"rows written {written}"


def random_pieces(rng: random.Random):
    return [rng.choice([0, 0, 1, 1, 1, 2, 3, 5]) for _ in range(rng.randint(1, 9))]


def find_violation(runs: int, **kwargs) -> str | None:
    rng = random.Random(7)
    for seed in range(runs):
        pieces = random_pieces(rng)
        try:
            run(pieces, seed, **kwargs)
        except AssertionError as exc:
            return f"{pieces}, seed {seed}: {exc}"
    return None


def test_the_shipped_protocol_holds():
    """Random programs (pieces of 0 to 5 blocks, so pieces where either consumer has no block) on the protocol
    as the kernel has it: no violation."""
    assert find_violation(400) is None


def test_one_buffer_is_slower_not_wrong():
    """With one q buffer the protocol still holds (consumer 1 waits for consumer 0's release before widening the
    next piece's q: no overlap); two let the next piece's q be widened while consumer 0 still reads this one."""
    assert find_violation(200, buffers=1) is None


def test_the_model_finds_a_missing_release_wait():
    """Consumer 1 widening into a buffer without waiting for consumer 0's release: it overwrites q under
    consumer 0's MMAs (or its read of `qd_s`)."""
    assert find_violation(400, wait_empty=False) is not None


def test_the_model_finds_a_release_without_barrier():
    """Consumer 0 releasing the buffer from its first warp with no barrier of its warps (the hole the review
    found): a slow warp can still be about to read `qd_s` when consumer 1 writes the buffer's next piece."""
    assert find_violation(1500, release_barrier=False) is not None


def test_the_kernel_has_what_the_model_checks():
    """The kernel's source: two q buffers indexed by the piece's parity, q_empty counting consumer 1 alone, and
    consumer 0's barrier before it releases the buffer."""
    from pagedmla.kernels import mla_decode_ws16_rs as rs
    source = inspect.getsource(rs)
    assert "qb = pieces % 2" in source
    assert "gl.allocate_shared_memory(gl.float16, [2 * N_CHUNKS, ROWS, CHUNK]" in source
    assert "mbarrier.init(q_empty, count=1)" in source
    release = source.index("mbarrier.arrive(q16_empty.index(qb))")
    assert source[:release].rstrip().endswith("gl.thread_barrier()"), "consumer 0 must barrier before the release"


@pytest.mark.parametrize("pieces", [[1, 1, 1, 1], [2, 1, 1, 3], [0, 1, 0, 1, 2]])
def test_hand_picked_programs(pieces):
    """Pieces whose only block alternates between the consumers, with empty pieces between."""
    for seed in range(50):
        run(pieces, seed)
