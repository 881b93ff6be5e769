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


@pytest.mark.skipif(not os.path.exists(PTXAS), reason="the triton wheel has no bundled ptxas")
def test_heuristic_configs_fit_shared_memory():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.path.join(ROOT, "src") + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compile_sm90.py"), "heuristic-*",
                          "--max-shared", str(H200_SHARED_BYTES)], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # every case was compiled: the FP8 decode matrix of head counts, scale granularities and q dtypes (24), the
    # bf16 decode (5) and the prefill (4)
    assert res.stdout.count("shared bytes:") >= 33, res.stdout[-2000:]
