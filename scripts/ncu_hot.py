"""Summarize an Nsight Compute report's source page: the SASS instructions with the most warp stall samples,
and the samples per opcode (what the kernel's warps wait on, and where).

    ncu -i report.ncu-rep --page source --csv --print-source sass > source.csv
    python3 scripts/ncu_hot.py source.csv [top]
"""

import collections
import csv
import sys


def _num(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    with open(sys.argv[1], newline="") as f:
        rows = [r for r in csv.reader(f)]
    header_at = next(i for i, r in enumerate(rows) if "Source" in r)
    header, body = rows[header_at], rows[header_at + 1:]
    col = {name: i for i, name in enumerate(header)}
    samples = col.get("Warp Stall Sampling (All Samples)", col.get("Warp Stall Sampling (All Cycles)"))
    executed = col.get("Instructions Executed")
    if samples is None:
        sys.exit(f"no stall-sampling column among: {header}")
    stall_cols = [(name, i) for name, i in col.items() if name.startswith("stall_")]
    total = sum(_num(r[samples]) for r in body if len(r) > samples) or 1.0
    by_op = collections.Counter()
    inst_by_op = collections.Counter()
    for r in body:
        if len(r) <= samples:
            continue
        op = r[col["Source"]].split()[0] if r[col["Source"]].split() else "?"
        if op.startswith("@"):
            op = r[col["Source"]].split()[1]
        op = op.split(".")[0]
        by_op[op] += _num(r[samples])
        if executed is not None:
            inst_by_op[op] += _num(r[executed])
    print(f"# {len(body)} instructions, {total:.0f} stall samples; executed warp-instructions "
          f"{sum(inst_by_op.values()):.0f}")
    print("# per opcode: samples %, executed warp-instructions")
    for op, n in by_op.most_common(top):
        print(f"{op:>12} {100 * n / total:6.2f}%  {inst_by_op[op]:.0f}")
    print(f"# top {top} instructions: samples %, main stall reasons")
    hot = sorted((r for r in body if len(r) > samples), key=lambda r: -_num(r[samples]))[:top]
    for r in hot:
        reasons = sorted(((_num(r[i]), name[6:]) for name, i in stall_cols if i < len(r)), reverse=True)[:3]
        why = ", ".join(f"{name} {100 * v / total:.1f}%" for v, name in reasons if v > 0)
        print(f"{r[col['Address']] if 'Address' in col else ''} {100 * _num(r[samples]) / total:5.2f}%  "
              f"{r[col['Source']][:60]:<60} {why}")


if __name__ == "__main__":
    main()
