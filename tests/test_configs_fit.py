"""Every launch config the decode and prefill heuristics pick fits the H200's shared memory (227 KiB per block).

`scripts/compile_sm90.py` compiles the kernels for sm_90a on the CPU with the triton wheel's own ptxas; nothing
runs. A config that does not fit fails at launch on the GPU with OutOfResources, which the CPU tier (the
interpreter) never sees. It runs in a subprocess without TRITON_INTERPRET (under the interpreter, `triton.jit`
makes functions that cannot be compiled).
"""

import os
import subprocess
import sys

import pytest
import triton

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
H200_SHARED_BYTES = 232448
H200_SM_SHARED_BYTES = 233472  # per SM, shared by the blocks resident on it


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="the triton wheel has no bundled ptxas")
def test_heuristic_configs_fit_shared_memory():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_sm90.py"), "heuristic-*",
                          "--max-shared", str(H200_SHARED_BYTES)], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # every case was compiled: the FP8 decode matrix of head counts, scale granularities and q dtypes (24), its
    # two-programs-per-SM picks (6), the bf16 decode (5) and the prefill (4)
    assert res.stdout.count("shared bytes:") >= 39, res.stdout[-2000:]


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="the triton wheel has no bundled ptxas")
def test_two_programs_per_sm_tiles_fit_half_an_sm():
    """The 4-warp FP8 tiles picked for two programs per SM fit twice in an SM's shared memory (each block also
    takes 1 KiB reserved by the driver; 4 warps at 255 registers fit twice in the register file)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    cases = "heuristic-fp8-h16-q1-g0-bf16q-2sm,heuristic-fp8-h16-q1-g576-bf16q-2sm"
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_sm90.py"), cases,
                          "--max-shared", str(H200_SM_SHARED_BYTES // 2 - 1024)], capture_output=True, text=True,
                         env=env, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout.count("shared bytes:") == 2, res.stdout[-2000:]


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="the triton wheel has no bundled ptxas")
@pytest.mark.parametrize("case", ["heuristic-bf16-h128-q1-b64", "heuristic-fp8-h128-q1-g0-bf16q", "sparse-fp8-h128"])
def test_64_row_logits_split_across_warpgroups(case, tmp_path):
    """The logits' warpgroup MMAs of 64-row tiles (8 warps) are laid out as warps [4, 2]: each warpgroup takes half
    of the keys. As the head of a dot chain they get [8, 1], and both warpgroups compute all of them (on the H200
    that cost 128-head decode 293 -> 254 us at B64 N4096): a layout regression the CPU tier cannot time."""
    import re

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    prefix = str(tmp_path / "k")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_sm90.py"), case, "--dump", prefix],
                         capture_output=True, text=True, env=env, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    with open(prefix + ".ttgir") as f:
        ttgir = f.read()
    layouts = dict(re.findall(r"^(#mma\d*) = #ttg.nvidia_mma<\{[^}]*warpsPerCTA = \[(\d+, \d+)\]", ttgir,
                              re.MULTILINE))
    logits = re.findall(r"ttng.warp_group_dot .*-> tensor<64x\d+xf32, (#mma\d*)>", ttgir)
    logits = [m for m in logits if m]
    assert logits, "no 64-row logits MMA found"
    # every 64 x BLOCK_N result (the logits; the P @ V result is 64 x 512) has warps split over M and N
    assert all(layouts[m] == "4, 2" for m in logits), (logits, layouts)


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="the triton wheel has no bundled ptxas")
def test_hopper_only_kernels_compile_and_fit():
    """The Gluon warp-specialized prefill and decode (the CPU interpreter cannot run Gluon, so this is their
    CPU-tier check: they compile for sm_90a and fit shared memory; the prefill spills nothing; the decode's
    logits MMAs are not serialized, which ptxas does when registers run short: with a third partition every
    thread was capped at 168 registers and the 128-head decode ran 30% slower) and k_matmul's 5-stage
    tail_in_main tiles."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    cases = "prefill-ws,prefill-ws-n64-s3,k-matmul-tail-in-main-w4-s5,decode-ws"
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_sm90.py"), cases,
                          "--max-shared", str(H200_SHARED_BYTES)], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if "shared bytes:" in ln]
    assert len(lines) == 4, res.stdout[-2000:]
    assert all("0 bytes spill stores" in ln for ln in lines[:2]), lines
    assert "serialized due to insufficient register" not in lines[3], lines[3]
    assert res.stdout.count("'wgmma': 0") == 0 and res.stdout.count("'st.local': 0") == 4, res.stdout[-2000:]


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="the triton wheel has no bundled ptxas")
def test_ring_kernels_fit_twice_per_sm():
    """The Gluon ring kernels at their default 2 slots (sparse: bf16 with sink and split, fp16 whole rows, the
    rope-aware FP8 row; dense: bf16 with sink, fp16 on 16-slot pages, the rope-aware FP8 row) fit twice in an
    SM's shared memory, as their configs schedule them, and spill nothing (the CPU tier's check of kernels the
    interpreter cannot run)."""
    from pagedmla.configs import decode, sparse_decode

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    assert sparse_decode.RING_SLOTS == 2 and decode.RING_SLOTS == 2
    cases = ("sparse-ring-s2,sparse-ring-s2-fp16-whole,sparse-ring-s2-fp8,decode-ring-s2,decode-ring-s2-fp16-p16,"
             "decode-ring-s2-fp8")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_sm90.py"), cases,
                          "--max-shared", str(H200_SM_SHARED_BYTES // 2 - 1024)], capture_output=True, text=True,
                         env=env, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = [ln for ln in res.stdout.splitlines() if "shared bytes:" in ln]
    assert len(lines) == 6, res.stdout[-2000:]
    assert all("0 bytes spill stores" in ln for ln in lines), lines
