"""Temporary diagnostic: the sparse ring kernel with its row copies reading nothing (DIAG 1), its math skipped
(DIAG 2) or both (DIAG 3), at 16 heads, B64 / B128, 2 query tokens, topk 2048 (times only; outputs wrong)."""
import os
from dataclasses import replace

import torch  # noqa: I001

import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sparse_probe import launcher_call, make_case  # noqa: E402
from pagedmla.configs.sparse_decode import ring_config
from pagedmla.testing import perf

dev = torch.device("cuda")
gen = torch.Generator(device=dev).manual_seed(0)
for batch in (64, 128):
    c = make_case("h16", heads=16, kind="bf16", q_kind="bf16", batch=batch, tokens=32768, new=2, topk=2048,
                  page_size=64, fold=False, gen=gen, device=dev)
    out = torch.empty((c["q"].shape[0], 16, 512), dtype=torch.bfloat16, device=dev)
    lse = torch.empty((c["q"].shape[0], 16), dtype=torch.float32, device=dev)
    for slots, splits in ((2, 264 // (2 * batch)), (2, 1), (3, 1), (5, 1)):
        splits = max(1, splits)
        cfg = replace(ring_config(num_groups=2 * batch, topk=2048, num_sms=132, slots=slots), num_splits=splits)
        for diag in (0, 1, 2, 3):
            os.environ["PAGEDMLA_RING_DIAG"] = str(diag)
            fn = launcher_call(c, out, lse, cfg)
            fn()
            torch.cuda.synchronize()
            t = perf.time_gpu(fn, warmup_ms=10, rep_ms=40)
            print(f"B{batch} slots {slots} splits {splits} diag {diag}: {t.median_us:7.1f} us", flush=True)
    del c
    torch.cuda.empty_cache()
