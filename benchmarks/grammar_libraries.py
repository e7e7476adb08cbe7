"""Measure llguidance against xgrammar on the Qwen3 vocabulary: set-up, grammar compile, and the mask per step.

    python benchmarks/grammar_libraries.py [--out benchmarks/results/checks/grammar_libraries_cpu.json]

Needs both libraries importable (xgrammar is not a project dependency: install it beside, e.g. with
`pip install --target DIR --no-deps xgrammar apache-tvm-ffi` and PYTHONPATH=DIR). Both matchers walk the same valid
token sequences (each target text tokenized by the Qwen3 tokenizer), so they compute the same masks.
"""
import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24},
                                           "population": {"type": "integer", "minimum": 0}},
          "required": ["city", "population"], "additionalProperties": False}
CASES = {  # name -> (kind, grammar, a valid output)
    "json_schema": ("json", SCHEMA, '{"city":"Paris","population":2148000}'),
    "regex_date": ("regex", r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "2026-12-02"),
}


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, (time.perf_counter() - start) * 1e3


def run_llguidance(tok, vocab, cases):
    from nanoserve.structured import StructuredOutputsParams, guidance_tokenizer

    _, setup_ms = timed(guidance_tokenizer, tok, vocab)
    res = {"setup_ms": setup_ms}
    for name, (kind, grammar, text) in cases.items():
        spec = StructuredOutputsParams(**({"json": grammar, "disable_any_whitespace": True} if kind == "json"
                                          else {"regex": grammar}))
        constraint, compile_ms = timed(spec.compile, tok, vocab)
        ids, steps = tok.encode(text, add_special_tokens=False), []
        for i in range(len(ids) + 1):
            _, ms = timed(constraint.mask, ids[:i])
            steps.append(ms)
        res[name] = {"compile_ms": compile_ms, "mask_ms_median": statistics.median(steps), "mask_ms_max": max(steps),
                     "steps": len(steps), "accepting": constraint.is_accepting}
    return res


def run_xgrammar(tok, vocab, cases):
    import xgrammar as xgr

    info, setup_ms = timed(lambda: xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab))
    compiler = xgr.GrammarCompiler(info)
    res = {"setup_ms": setup_ms}
    for name, (kind, grammar, text) in cases.items():
        if kind == "json":
            compiled, compile_ms = timed(lambda: compiler.compile_json_schema(json.dumps(grammar), any_whitespace=False, separators=(",", ":")))
        else:
            compiled, compile_ms = timed(lambda: compiler.compile_regex(grammar))
        matcher, bitmask = xgr.GrammarMatcher(compiled), xgr.allocate_token_bitmask(1, vocab)
        ids, steps = tok.encode(text, add_special_tokens=False), []
        for i in range(len(ids) + 1):
            _, ms = timed(matcher.fill_next_token_bitmask, bitmask, 0)
            steps.append(ms)
            if i < len(ids):
                assert matcher.accept_token(ids[i]), (name, i)
        res[name] = {"compile_ms": compile_ms, "mask_ms_median": statistics.median(steps), "mask_ms_max": max(steps),
                     "steps": len(steps), "accepting": matcher.is_terminated() or matcher.accept_token(tok.eos_token_id)}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/checks/grammar_libraries_cpu.json")
    args = ap.parse_args(argv)
    from importlib.metadata import version

    from nanoserve.model.tiny import QWEN3_VOCAB_SIZE
    from nanoserve.tokenizer import build_qwen3_tokenizer, load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        build_qwen3_tokenizer(tmp)
        tok = load_tokenizer(tmp)
        results = {"llguidance": run_llguidance(tok, QWEN3_VOCAB_SIZE, CASES),
                   "xgrammar": run_xgrammar(tok, QWEN3_VOCAB_SIZE, CASES)}
    provenance = {"command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "machine": platform.processor() or
                  platform.machine(), "python": platform.python_version(), "device": "cpu",
                  "versions": {p: version(p) for p in ("llguidance", "xgrammar", "torch", "transformers")},
                  "vocabulary": QWEN3_VOCAB_SIZE, "cases": {k: [v[0], v[2]] for k, v in CASES.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"provenance": provenance, "results": results}, indent=1) + "\n")
    print(f"{'library':11s} {'set-up ms':>10s} " + " ".join(f"{c + ' compile/mask ms':>32s}" for c in CASES))
    for lib, r in results.items():
        cells = [f"{r[c]['compile_ms']:10.1f} / {r[c]['mask_ms_median']:.3f} (max {r[c]['mask_ms_max']:.3f})"
                 for c in CASES]
        print(f"{lib:11s} {r['setup_ms']:10.0f} " + " ".join(f"{c:>32s}" for c in cells))
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
