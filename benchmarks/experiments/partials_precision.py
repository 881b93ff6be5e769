"""What fp16 split partials would cost in accuracy: the merged decode output of one 16384-key sequence cut into
66 pieces (128 heads at batch 1 on 132 SMs), with each piece's normalized partial kept in float32 (as shipped)
or in fp16 scaled per row and 256-column half by a power of two so that the half's largest magnitude lands in
[2^14, 2^15) (the design of a3b4830-3876d75, reverted in 65451be). CPU, float64 reference; the latent cache is
bf16 with 8 outlier channels scaled by 1, 30 or 300 (latent caches have outlier channels). The error is given
in bf16 steps of each reference element, over the ordinary channels that share a column half with the outliers
(a correctly rounded bf16 output is within 0.5).

Twenty-ninth session: float32 partials 0.50 steps at most (mean 0.25) at every scale; fp16 partials 35.2 /
50.7 / 82.4 steps at most (mean 0.32 / 0.37 / 0.38) with outliers x1 / x30 / x300: the small outputs of a row
lose what the row's largest value leaves of fp16's 11 bits. This is why the split partials stay float32 even
though half their bytes would save about 2 us at batch 1 (BENCHMARKS.md, twenty-ninth session).

    PYTHONPATH=src python3 benchmarks/experiments/partials_precision.py
"""

from __future__ import annotations

import itertools

import torch

KEYS, HEADS, PIECES, D_LAT, OUTLIERS = 16384, 16, 66, 512, 8


def _fp16_scaled(p: torch.Tensor) -> torch.Tensor:
    """p's rows in fp16, each 256-column half scaled by 2^k so that its largest magnitude is in [2^14, 2^15),
    and back."""
    out = torch.empty_like(p)
    for cols in (slice(0, 256), slice(256, 512)):
        x = p[:, cols]
        k = 14 - torch.floor(torch.log2(x.abs().amax(-1, keepdim=True)))
        out[:, cols] = (x * 2.0 ** k).half().float() * 2.0 ** -k
    return out


def main() -> None:
    torch.manual_seed(0)
    for scale in (1.0, 30.0, 300.0):
        lat = torch.randn(KEYS, D_LAT, dtype=torch.float64)
        lat[:, :OUTLIERS] *= scale
        lat = lat.to(torch.bfloat16).double()
        q = torch.randn(HEADS, D_LAT, dtype=torch.float64) / scale ** 0.5
        logits = (q @ lat.T) * 0.1352 / scale ** 0.5
        ref = torch.softmax(logits, -1) @ lat
        cuts = torch.linspace(0, KEYS, PIECES + 1).long().tolist()
        parts, lses = [], []
        for a, b in itertools.pairwise(cuts):
            lses.append(torch.logsumexp(logits[:, a:b], -1))
            parts.append((torch.softmax(logits[:, a:b], -1) @ lat[a:b]).float())
        weights = torch.softmax(torch.stack(lses), 0)  # [pieces, heads]
        step = (ref.abs().clamp_min(1e-30).log2().floor() - 7).exp2()  # one bf16 step of each element
        for name, keep in (("float32", lambda p: p), ("fp16 scaled", _fp16_scaled)):
            merged = sum(weights[i][:, None] * keep(parts[i]).double() for i in range(PIECES))
            err = ((merged.to(torch.bfloat16).double() - ref).abs() / step)[:, OUTLIERS:256]
            print(f"outliers x{scale:g}, {name} partials: max {err.max():.2f} bf16 steps, mean {err.mean():.3f}")


if __name__ == "__main__":
    main()
