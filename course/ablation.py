"""Chapter 15's H200 ablation (ladder and leave-one-out), read from its committed JSON so that chapters 09-13 can cite it."""
import json
import re
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
FILES = ("base_partial", "ladder-rest", "loo")  # ablation_<name>_h200.json: first rung, the other rungs, leave-one-out
WORKLOADS = ("random", "shared-prefix", "high-churn", "prefill-bound")


def load_ablation(results_dir=RESULTS_DIR) -> dict:
    """{'ladder': rows, 'loo': rows, 'provenance': the leave-one-out call's}; each row records the call it came from."""
    calls = {name: json.loads((Path(results_dir) / f"ablation_{name}_h200.json").read_text()) for name in FILES}
    rows = {name: [dict(row, call=name) for row in calls[name]["rows"]] for name in FILES}
    return {"ladder": rows["base_partial"][:1] + rows["ladder-rest"], "loo": rows["loo"],
            "provenance": calls["loo"]["provenance"]}


def median_tok_s(row, workload):
    """Median output tok/s of a row's runs on one workload, or None where the workload was not run."""
    runs = row["workloads"].get(workload, {}).get("tok_s_runs")
    return sorted(runs)[len(runs) // 2] if runs else None


def tpot_ms(row):
    """Batch-1 time per output token in ms, or None where the latency workload was not run."""
    return row.get("latency", {}).get("1", {}).get("tpot_ms")


def chapters_of(row) -> set:
    """The chapter numbers a row's name gives in parentheses: '+ decode graphs (09)' -> {'09'}."""
    return {n for group in re.findall(r"\(([\d, ]+)\)", row["name"]) for n in re.findall(r"\d\d", group)}


def idea(chapter: str, ablation=None) -> dict:
    """One chapter's idea: its ladder rung and the rung before, its leave-one-out row and the full engine."""
    if not isinstance(chapter, str):
        raise TypeError(f"chapter must be a string such as '09', got {type(chapter).__name__}")
    if not re.fullmatch(r"\d\d", chapter):
        raise ValueError(f"chapter must be two digits such as '09', got {chapter!r}")
    ablation = ablation or load_ablation()
    ladder, loo = ablation["ladder"], ablation["loo"]
    rung = next((i for i, row in enumerate(ladder) if chapter in chapters_of(row)), None)
    left_out = next((row for row in loo[1:] if chapters_of(row) == {chapter}), None)  # the idea alone first,
    left_out = left_out or next((row for row in loo[1:] if chapter in chapters_of(row)), None)  # then with others
    if rung is None and left_out is None:
        raise ValueError(f"the ablation measures no idea of chapter {chapter}")
    return {"rung": ladder[rung] if rung else None, "before": ladder[rung - 1] if rung else None,
            "left_out": left_out, "full": loo[0]}


def ratio(a, b, same_call=True):
    """a / b, or None when either is missing or the two come from different calls (not one session's pair)."""
    return a / b if a and b and same_call else None


def idea_ratios(chapter: str, ablation=None) -> dict:
    """Per workload: the rung over the rung before ('ladder') and the engine without the idea over the full one ('loo')."""
    parts = idea(chapter, ablation)
    rung, before, left_out, full = parts["rung"], parts["before"], parts["left_out"], parts["full"]
    same = bool(rung and before and rung["call"] == before["call"])
    return {
        "ladder": {w: ratio(median_tok_s(rung, w), median_tok_s(before, w), same) if rung else None
                   for w in WORKLOADS},
        "loo": {w: ratio(median_tok_s(left_out, w), median_tok_s(full, w)) if left_out else None for w in WORKLOADS},
        "tpot_ms": {"before": tpot_ms(before) if same else None, "rung": tpot_ms(rung) if rung else None,
                    "full": tpot_ms(full), "left_out": tpot_ms(left_out) if left_out else None},
        "names": {k: row["name"] if row else None for k, row in parts.items()},
        "same_call": same,
    }


def print_idea(chapter: str, ablation=None) -> None:
    """Print one chapter's idea in chapter 15's ablation: ladder and leave-one-out ratios per workload, batch-1 TPOT."""
    ablation = ablation or load_ablation()
    r, prov = idea_ratios(chapter, ablation), ablation["provenance"]
    show = lambda x: f"{x:.2f}x" if x else "not run"  # noqa: E731
    ms = lambda x: f"{x:.2f} ms" if x else "not run"  # noqa: E731
    print(f"chapter 15's ablation: {prov['gpu_name']}, {prov['date']}, nanoserve commit {prov['nanoserve_commit']}, "
          f"{prov['config']['runs']} runs per workload, ratios of median output tok/s")
    names = r["names"]
    if names["rung"] and not r["same_call"]:
        print(f"ladder: '{names['before']}' ran in another call, so '{names['rung']}' has no ratio to it")
    elif names["rung"]:
        print(f"ladder: '{names['rung']}' over '{names['before']}'")
        print("  " + "  ".join(f"{w} {show(r['ladder'][w])}" for w in WORKLOADS))
        print(f"  batch-1 TPOT: {ms(r['tpot_ms']['before'])} -> {ms(r['tpot_ms']['rung'])}")
    if names["left_out"]:
        print(f"leave-one-out: '{names['left_out']}' over '{names['full']}'")
        print("  " + "  ".join(f"{w} {show(r['loo'][w])}" for w in WORKLOADS))
        print(f"  batch-1 TPOT: {ms(r['tpot_ms']['full'])} -> {ms(r['tpot_ms']['left_out'])}")
