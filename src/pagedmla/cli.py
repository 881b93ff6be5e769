"""`pagedmla demo` and `pagedmla bench`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pagedmla", description="MLA kernels over a paged KV cache")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="serve a tiny DeepSeek-style model end to end and check it", add_help=False)
    sub.add_parser("bench", help="benchmark the kernels on a CUDA device", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "demo":
        from .model.demo import main as demo_main

        return demo_main(rest)
    from .bench import main as bench_main

    return bench_main(rest)


if __name__ == "__main__":
    sys.exit(main())
