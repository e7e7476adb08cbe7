"""Chapter 10 section 8 as exported: the engine's decode time per token with `o` and `down` split (the default) and
with `SPLIT_MAX_ROWS = 0` (every projection one cuBLAS GEMM), engines in turn, twice, on one GPU.

Run from the repository root: python scripts/gpu/split_engine_probe.py OUT_JSON
"""
import contextlib
import sys

import nanoserve.kernels.fused as fused
from probe_timing import (TPOT_CONFIG, compare_engines, print_tpot_table, random_qwen3_0_6b,  # this folder
                          tokens_equal_to, write_result)


@contextlib.contextmanager
def split_rows(rows: int):
    """fused.SPLIT_MAX_ROWS set to `rows` inside the block (read when the graphs are captured)."""
    old, fused.SPLIT_MAX_ROWS = fused.SPLIT_MAX_ROWS, rows
    try:
        yield
    finally:
        fused.SPLIT_MAX_ROWS = old


def main():
    model = random_qwen3_0_6b()
    runs = []
    for again in ("", " again"):
        runs += [(f"split{again}", fused.fuse_model, split_rows(fused.SPLIT_MAX_ROWS),
                  {"split_max_rows": fused.SPLIT_MAX_ROWS}),
                 (f"not split{again}", fused.fuse_model, split_rows(0), {"split_max_rows": 0})]
    engine, tokens = compare_engines(model, runs, [list(range(100, 164)), list(range(500, 900))])
    same = tokens_equal_to(tokens, "not split")
    write_result(sys.argv[1], TPOT_CONFIG, engine=engine, greedy_tokens_equal_to_not_split=same)
    print_tpot_table(engine, "split_max_rows")
    print("greedy tokens equal to 'not split' (of 128):", same)


if __name__ == "__main__":
    main()
