"""A model of the warp-specialized decode's two-consumer barrier protocol with the TMA-store epilogue
(`pagedmla.kernels.mla_decode_ws`: `_consumer`, `_stage_and_store`), run over random interleavings.

    python3 benchmarks/experiments/ws_protocol_model.py [--protocol=landed|v1|v2] [MUTATION ...]

Each consumer (one warpgroup, one agent: the kernel's arrivals are one thread's after a partition barrier) is a
generator of operations: mbarrier waits (by phase, with the hardware's parity rule) and arrivals, TMA loads and
stores and warpgroup MMAs (asynchronous, ended by their completion or wait), and plain shared-memory writes and
reads, each on named regions (q tiles, ring slots' halves, rope/P tiles, stats). Vector clocks give the
happens-before order. For random lists of pieces (inactive, active with 0 to 5 key blocks, whole or split; up to
6 per program) it checks: deadlock; a parity wait that could match two phases or pass early; and conflicting
accesses to a region not ordered by happens-before. The model is written by hand from the kernel's source
(2ddeb6e: `landed`, with q's copies issued before the first pair's since the twenty-sixth session; branch
exp/ws-epilogue-odd-half: `v1` c9f32b3, `v2` 6164bf4): change it with the kernel. The four quarter stores of a
partial tile (twenty-sixth session) are one store here: each quarter has a tile of its own.
MUTATIONS drop one wait each: without no_piece_gate, no_epi_gate or no_c0done's wait the landed protocol fails
(a race or a two-phase parity wait); the epilogue's q_empty wait (no_qempty_epi) is implied by other orderings.
The model came from a helper's review of 2ddeb6e (BENCHMARKS.md, eighteenth session).
"""
import random
import sys


class VC(dict):
    def join(self, o):
        for k, v in o.items():
            if self.get(k, 0) < v: self[k] = v
    def copy(self):
        return VC(self)

class Bar:
    def __init__(s, name): s.name, s.k, s.clocks = name, 0, []

class Sim:
    def __init__(s, pieces, rng, tma_out=True, mutate=None, protocol="landed"):
        s.rng = rng; s.pieces = pieces; s.tma_out = tma_out; s.mutate = mutate or set()
        # landed: 2ddeb6e; v1, v2: branch exp/ws-epilogue-odd-half (c9f32b3, 6164bf4)
        s.early = protocol in ("v1", "v2"); s.whole_only = protocol == "v2"
        s.bars = {n: Bar(n) for n in ["q_ready","q_empty","got_a","got_b","got_pa","stats_free","c0_done","c1_stored",
                                       "k_ready0","k_ready1","k_empty0","k_empty1"]}
        s.vc = {0: VC({0: 0}), 1: VC({1: 0})}
        s.accesses = []   # dict(regions, write, actor, start_vc, end=(actor,time) or None, tag)
        s.open = {0: {}, 1: {}}  # actor -> tag -> list of access idx (mma / store)
        s.pending = []   # async completions: (name, vc, regions access idxs, bar)
        s.nasync = 0
        s.errors = []
    def tick(s, a):
        s.vc[a][a] = s.vc[a].get(a, 0) + 1
        return s.vc[a].copy()
    def access(s, a, regions, write, tag=None, end_now=True, vc=None, actor=None):
        v = vc if vc is not None else s.tick(a)
        rec = dict(regions=set(regions), write=write, actor=a, start=v.copy(), end=None, tag=tag)
        if end_now: rec['end'] = (a, v[a])
        s.accesses.append(rec)
        return rec
    def check_races(s):
        acc = s.accesses
        for i in range(len(acc)):
            A = acc[i]
            for j in range(i+1, len(acc)):
                B = acc[j]
                if not (A['regions'] & B['regions']) or not (A['write'] or B['write']): continue
                if A['end'] is None or B['end'] is None:
                    s.errors.append(f"unended access {A['tag']} / {B['tag']}"); continue
                ea, ta = A['end']; eb, tb = B['end']
                if B['start'].get(ea, 0) >= ta or A['start'].get(eb, 0) >= tb: continue
                s.errors.append(f"RACE on {sorted(A['regions'] & B['regions'])}: {A['tag']} vs {B['tag']}")
                return

    # ---------------- programs (generators yield ops)
    def c0(s):
        c = pairs = pairs_b = pieces = epis = 0
        for (active, n, whole) in s.pieces:
            if not active: continue
            if n > 0:
                if s.tma_out and 'no_piece_gate' not in s.mutate:
                    yield ('wait', 'c1_stored', epis - 1)
                if s.tma_out and s.early and whole:
                    yield ('arrive', 'c0_done')
                # q first, then the first pair's blocks (the kernel's order since the twenty-sixth session)
                yield ('wait', 'q_empty', pieces - 1)
                yield ('load', ['q0', 'q1', 'qr'], 'q_ready', 'qload')
                yield from s.load_block(c)
                if n > 1: yield from s.load_block(c + 1)
                yield ('wait', 'q_ready', pieces)
                for j in range((n + 1) // 2):
                    has_b = 2*j+1 < n
                    sa, sb = c % 2, (c+1) % 2
                    yield from s.logits(0, c)
                    yield ('wait', 'stats_free', pairs - 1)
                    yield ('gw', ['st01'], 'c0 stats a')
                    yield ('arrive', 'got_a')
                    yield ('mma', [f's{sa}e'], 'c0 PaVa')
                    if has_b:
                        yield ('wait', 'got_b', pairs_b)
                        yield ('gr', ['st23'], 'c0 read stats b')
                        yield ('gw', [f'kr{sa}'], 'c0 store Pa')
                        yield ('arrive', 'got_pa')
                        yield ('mmawait',)
                        yield ('mma', [f'kr{sb}', f's{sb}e'], 'c0 PbVb')
                        if 2*j+2 < n: yield from s.load_block(c + 2)
                    else:
                        yield ('gw', [f'kr{sa}'], 'c0 store Pa')
                        yield ('arrive', 'got_pa')
                    yield ('mmawait',)
                    if 2*j+3 < n: yield from s.load_block(c + 3)
                    c += 1 + has_b; pairs_b += has_b; pairs += 1
                pieces += 1
            if s.tma_out and (whole or not s.whole_only):
                if 'no_epi_gate' not in s.mutate and (n == 0 or not s.early):
                    yield ('wait', 'c1_stored', epis - 1)
                if not (s.early and whole and n > 0):
                    yield ('arrive', 'c0_done')
                if pieces > 0 and 'no_qempty_epi' not in s.mutate: yield ('wait', 'q_empty', pieces - 1)
                regs = ['q0'] if whole else ['q0', 'q1']
                yield ('gw', regs, 'c0 stage')
                yield ('store', regs, 'c0 TMA store')
                yield ('storewait',)
                epis += 1
    def load_block(s, c):
        st = c % 2
        yield ('wait', f'k_empty{st}', c // 2 - 1)
        yield ('load', [f's{st}e', f's{st}o', f'kr{st}'], f'k_ready{st}', f'kload c={c}')
    def logits(s, a, c):
        st = c % 2
        yield ('wait', f'k_ready{st}', c // 2)
        yield ('gw', [f's{st}e', f's{st}o'], f'c{a} edge zero c={c}')
        yield ('mma', ['q0', 'q1', 'qr', f's{st}e', f's{st}o', f'kr{st}'], f'c{a} logits c={c}')
        yield ('mmawait',)
    def c1(s):
        c = pairs = pairs_b = pieces = epis = 0
        for (active, n, whole) in s.pieces:
            if not active: continue
            if n > 0:
                yield ('wait', 'q_ready', pieces)
                for j in range((n + 1) // 2):
                    has_b = 2*j+1 < n
                    sa, sb = c % 2, (c+1) % 2
                    if has_b: yield from s.logits(1, c + 1)
                    yield ('wait', 'got_a', pairs)
                    yield ('gr', ['st01'], 'c1 read stats a')
                    yield ('arrive', 'stats_free')
                    if has_b:
                        yield ('gw', [f'kr{sb}', 'st23'], 'c1 store Pb')
                        yield ('arrive', 'got_b')
                        yield ('mma', [f's{sb}o'], 'c1 PbVb')
                        yield ('wait', 'got_pa', pairs)
                        yield ('mma', [f'kr{sa}', f's{sa}o'], 'c1 PaVa')
                    else:
                        yield ('wait', 'got_pa', pairs)
                        yield ('mma', [f'kr{sa}', f's{sa}o'], 'c1 PaVa')
                    yield ('mmawait',)
                    yield ('arrive', f'k_empty{sa}')
                    if has_b: yield ('arrive', f'k_empty{sb}')
                    c += 1 + has_b; pairs_b += has_b; pairs += 1
                yield ('arrive', 'q_empty')
                pieces += 1
            if s.tma_out and (whole or not s.whole_only):
                if 'no_c0done' not in s.mutate:
                    yield ('wait', 'c0_done', epis)
                regs = ([('s1o' if s.early else 's1e')] if whole else ['s1e', 's1o'])
                yield ('gw', regs, 'c1 stage')
                yield ('store', regs, 'c1 TMA store')
                yield ('storewait',)
                yield ('arrive', 'c1_stored')
                epis += 1

    def run(s):
        progs = {0: s.c0(), 1: s.c1()}
        cur = {0: None, 1: None}
        done = {0: False, 1: False}
        for a in (0, 1):
            cur[a] = next(progs[a], None); done[a] = cur[a] is None
        steps = 0
        while True:
            steps += 1
            runnable = []
            for a in (0, 1):
                if done[a]: continue
                op = cur[a]
                if op[0] == 'wait':
                    b = s.bars[op[1]]; T = op[2]
                    if b.k >= T + 2:
                        s.errors.append(f"AMBIGUOUS: actor {a} waits {op[1]} phase {T}, completions {b.k}"); return
                    parity_pass = (b.k & 1) != (T & 1)
                    if parity_pass:
                        if b.k != T + 1:
                            s.errors.append(f"PREMATURE: actor {a} waits {op[1]} phase {T}, completions {b.k}"); return
                        runnable.append(('actor', a))
                else:
                    runnable.append(('actor', a))
            for i in range(len(s.pending)): runnable.append(('async', i))
            if not runnable:
                if done[0] and done[1]: break
                s.errors.append(f"DEADLOCK: c0 at {cur[0]}, c1 at {cur[1]}"); return
            kind, x = s.rng.choice(runnable)
            if kind == 'async':
                name, vc, recs, bar = s.pending.pop(x)
                aid = ('tma', name, s.nasync); s.nasync += 1
                vc = vc.copy(); vc[aid] = 1
                for r in recs: r['end'] = (aid, 1)
                b = s.bars[bar]; b.k += 1; b.clocks.append(vc)
                continue
            a = x; op = cur[a]
            self_vc = s.vc[a]
            if op[0] == 'wait':
                b = s.bars[op[1]]
                for cl in b.clocks: self_vc.join(cl)
                s.tick(a)
            elif op[0] == 'arrive':
                v = s.tick(a); b = s.bars[op[1]]; b.k += 1; b.clocks.append(v)
            elif op[0] == 'load':
                v = s.tick(a)
                rec = s.access(a, op[1], True, tag=op[3], end_now=False, vc=v)
                s.pending.append((op[3], v, [rec], op[2]))
            elif op[0] in ('gw', 'gr'):
                s.access(a, op[1], op[0] == 'gw', tag=op[2])
            elif op[0] == 'mma':
                rec = s.access(a, op[1], False, tag=op[2], end_now=False)
                s.open[a].setdefault('mma', []).append(rec)
            elif op[0] == 'mmawait':
                v = s.tick(a)
                for r in s.open[a].pop('mma', []): r['end'] = (a, v[a])
            elif op[0] == 'store':
                rec = s.access(a, op[1], False, tag=op[2], end_now=False)
                s.open[a].setdefault('store', []).append(rec)
            elif op[0] == 'storewait':
                v = s.tick(a)
                for r in s.open[a].pop('store', []): r['end'] = (a, v[a])
            cur[a] = next(progs[a], None)
            if cur[a] is None: done[a] = True
        s.check_races()

def random_pieces(rng):
    k = rng.randint(1, 6)
    out = []
    for _ in range(k):
        active = rng.random() < 0.8
        n = rng.choice([0, 0, 1, 2, 3, 4, 5])
        out.append((active, n, rng.random() < 0.5))
    return out

def main(mutate=(), trials=3000, seed=1, protocol="landed"):
    rng = random.Random(seed)
    bad = {}
    for t in range(trials):
        pcs = random_pieces(rng)
        for r in range(5):
            sim = Sim(pcs, random.Random(rng.random()), mutate=set(mutate), protocol=protocol)
            sim.run()
            if sim.errors:
                key = sim.errors[0].split(':')[0]
                bad.setdefault(key, (pcs, sim.errors[0]))
    return bad

if __name__ == '__main__':
    args = sys.argv[1:]
    protocol = "landed"
    if args and args[0].startswith("--protocol="):
        protocol = args.pop(0).split("=", 1)[1]
    muts = args
    res = main(muts, protocol=protocol)
    print('protocol', protocol, 'mutations', muts, '->', 'OK' if not res else '')
    for pcs, e in res.values():
        print(' ', e, '| pieces', pcs)
