"""EXPERIMENT (session 9): time the warp-specialized decode with the diagnostic knobs of decode_ws_knobs.py.

    DECODE_WS_KNOBS=<mask> [DECODE_WS_KNOB_MODULE=decode_ws_seesaw_knobs] \
        PYTHONPATH=src:benchmarks:benchmarks/experiments python3 benchmarks/experiments/decode_ws_knob_probe.py

Runs the knob copy of the kernel (decode_ws_knobs: the key-split kernel of 9ccb1d8; decode_ws_seesaw_knobs: the
seesaw kernel of a9a7285; each must match the launcher's arguments) in place of `kernels.mla_decode_ws` (through the launcher) at B64 N4096 and
B128 N8192, 128 heads, and prints microseconds per call. Outputs are wrong for every mask but 0.
"""

import os

import importlib

import decode_probe

from pagedmla.configs.decode import DecodeConfig
from pagedmla.ops import _triton_decode

knobs = importlib.import_module(os.environ.get('DECODE_WS_KNOB_MODULE', 'decode_ws_knobs'))
_triton_decode._mla_decode_ws_kernel = knobs._mla_decode_ws_kernel
cfg = DecodeConfig(block_m=64, block_n=64, num_warps=8, num_stages=2, warp_specialized=True)
for b, n, q in ((64, 4096, 1), (128, 8192, 1)):
    case = decode_probe.Case(b, n, 128, q)
    plan = case.plan()
    us = decode_probe._time_graph(case.run(plan, cfg)) / case.copies * 1e3
    print(f"knobs {os.environ.get('DECODE_WS_KNOBS', '0')} B{b} N{n} q{q} W{plan.num_partitions}: {us:.1f} us "
          f"({case.flops / us / 1e6:.0f} TFLOP/s)", flush=True)
