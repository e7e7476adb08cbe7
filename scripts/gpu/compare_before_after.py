"""Side-by-side table of two nanoserve trees' bench JSON (before and after a refactor), with after/before ratios.

Usage: python scripts/gpu/compare_before_after.py BEFORE_DIR AFTER_DIR
"""
import json
import sys
from pathlib import Path


def metrics_of(directory: Path) -> dict:
    """(workload, metric) -> value from every bench JSON in `directory`."""
    out = {}
    for path in sorted(Path(directory).glob("*.json")):
        data = json.loads(path.read_text())
        m, name = data.get("metrics", {}), data.get("workload")
        if "tok_s" in m:
            out[(name, "output tok/s")] = m["tok_s"]
        for batch, row in m.get("batches", {}).items():
            out[(name, f"batch {batch} TTFT ms")] = row["ttft_ms"]
            out[(name, f"batch {batch} TPOT ms")] = row["tpot_ms"]
        if "startup" in data:
            out[("start", f"{name}: constructor s")] = data["startup"].get("startup_s")
    return out


def main(before: str, after: str) -> None:
    b, a = metrics_of(Path(before)), metrics_of(Path(after))
    print(f"{'workload':14} {'metric':24} {'before':>10} {'after':>10} {'after/before':>13}")
    for key in sorted(set(b) | set(a)):
        x, y = b.get(key), a.get(key)
        ratio = f"{y / x:13.3f}" if x and y else f"{'-':>13}"
        fmt = lambda v: f"{v:10.2f}" if isinstance(v, (int, float)) else f"{'-':>10}"
        print(f"{key[0]:14} {key[1]:24} {fmt(x)} {fmt(y)} {ratio}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
