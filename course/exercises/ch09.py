"""Checkers for chapter 09's exercises (CUDA graphs)."""
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from nanoserve.attention.paged_decode import PagedDecode
from nanoserve.attention.paged_decode import pick_bucket as bucket_for
from nanoserve.attention.torch_ref import TorchAttentionBackend
from nanoserve.engine.graph_runner import GraphRunner, StaticInputs, graph_buckets
from nanoserve.engine.model_runner import build_step_inputs

__all__ = ["CHECKS"]


def _worst_padding(buckets) -> float:
    return max((bucket_for(n, buckets) - n) / bucket_for(n, buckets) for n in range(1, max(buckets) + 1))


def check_worst_padding(worst_padding) -> str:
    """09.1: the worst share of padding lanes over every batch size a bucket grid serves."""
    grids = [graph_buckets(256), [1 << i for i in range(9)], [4, 8], [1], graph_buckets(20)]
    for buckets in grids:
        want, got = _worst_padding(buckets), worst_padding(list(buckets))
        if not isinstance(got, (int, float)) or abs(got - want) > 1e-9:
            raise AssertionError(f"worst_padding({buckets}) = {got!r}, expected {want:.4f}: try every batch size n "
                                 "from 1 to the largest bucket, pad it to bucket_for(n, buckets), and take the "
                                 "largest (bucket - n) / bucket")
    ours, pow2 = _worst_padding(graph_buckets(256)), _worst_padding([1 << i for i in range(9)])
    return f"the engine's grid wastes at most {ours:.0%} of a step, powers of two up to {pow2:.0%}"


def _measured_graphs(max_num_seqs: int) -> tuple:
    """(forward graphs, head graphs) a GraphRunner with the decode variant captures, counted on the CPU."""
    runner = SimpleNamespace(model=None, table=None, device=torch.device("cpu"), dtype=torch.float32,
                             model_config=SimpleNamespace(hidden_size=8), kv_caches=[], generator=None,
                             backend=TorchAttentionBackend(), init_kv_cache=lambda num_blocks: None)
    graphs = GraphRunner(runner, [PagedDecode(runner.backend, graph_buckets(max_num_seqs), 64, 16)])
    graphs.init_kv_cache(1)  # off CUDA this keeps each graph's function instead of capturing it
    return len(graphs.graphs), len(graphs.head_graphs)


def check_graph_count(graphs_to_capture) -> str:
    """09.2 (predict, then measure): the forward and head graphs a GraphRunner captures."""
    for max_num_seqs in (1, 8, 20, 100, 256, 512):
        want, got = _measured_graphs(max_num_seqs), graphs_to_capture(max_num_seqs)
        if not isinstance(got, tuple) or tuple(got) != want:
            raise AssertionError(f"graphs_to_capture({max_num_seqs}) = {got!r}, measured {want}: one forward graph "
                                 "per bucket; count the head graphs per row count in _capture")
    forward, head = _measured_graphs(256)
    return f"max_num_seqs=256 captures {forward} forward and {head} head graphs"


def _steps() -> list:
    """(what, step) pairs that exercise every case of the decode variant's plan and staging."""
    return [("three decodes (one padding lane)", build_step_inputs([[5], [6], [7]], [9, 3, 4],
                                                                   [[2, 3, 4], [1], [4, 8]], [True] * 3, 4)),
            ("a full bucket of four", build_step_inputs([[1], [2], [3], [4]], [0, 5, 12, 30],
                                                        [[9], [3, 4], [5, 6, 7, 2], [1, 2, 3, 4, 5, 6, 7, 8]],
                                                        [True] * 4, 4)),
            ("five decodes (bucket 8)", build_step_inputs([[i] for i in range(5)], [1, 2, 3, 4, 20],
                                                          [[1], [2], [3], [4], [5, 6, 7, 8, 9, 10]], [True] * 5, 4)),
            ("nine decodes (too many)", build_step_inputs([[i] for i in range(9)], list(range(9)),
                                                          [[i + 1, i + 2, i + 3] for i in range(9)], [True] * 9, 4)),
            ("a prefill", build_step_inputs([[1, 2, 3]], [0], [[1]], [True], 4)),
            ("a decode next to a prefill chunk", build_step_inputs([[4], [1, 2]], [5, 0], [[1, 2], [3]],
                                                                   [True, True], 4))]


def _graphed_tokens(variant_class) -> tuple:
    """Greedy tokens of the tiny engine on this CPU: eager, and through a GraphRunner with `variant_class`."""
    from nanoserve import LLM, SamplingParams
    from nanoserve.engine import selector
    from nanoserve.model.tiny import make_tiny_checkpoint

    tiny = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=3, tie_word_embeddings=False)
    prompts = [dict(prompt_token_ids=list(range(3 + 5 * i, 9 + 7 * i))) for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=6)
    kwargs = dict(skip_tokenizer_init=True, device="cpu", block_size=4, num_kv_blocks=64)
    want = [o.outputs[0].token_ids for o in LLM(str(tiny), **kwargs).generate(prompts, params, use_tqdm=False)]

    def build(config, model_config):
        runner = selector.build_runner(config, model_config)
        variant = variant_class(runner.backend, graph_buckets(config.max_num_seqs), config.max_model_len,
                                config.block_size)
        return GraphRunner(runner, [variant])

    built, selector.build_executor = selector.build_executor, build
    try:
        llm = LLM(str(tiny), **kwargs)
    finally:
        selector.build_executor = built
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    return want, got, llm.engine.executor.replays["decode"]


def check_decode_staging(variant_class) -> str:
    """09.6 (build it yourself): plan and stage of the decode variant match the chapter's; replay = eager."""
    assert any(c.__name__ == "PagedDecode" for c in getattr(variant_class, "__mro__", ())), \
        "hint: subclass PagedDecode and override plan() and stage()"
    backend = TorchAttentionBackend()
    for what, step in _steps():
        ours, yours = (cls(backend, [1, 2, 4, 8], max_model_len=32, block_size=4) for cls in (PagedDecode, variant_class))
        want, got = ours.plan(step), yours.plan(step)
        if want is None:
            assert got is None, f"hint: with {what} plan() must return None (no decode graph holds it), got {got!r}"
            continue
        assert got is not None and got.bucket == want.bucket, \
            f"hint: with {what} the step replays bucket {want.bucket}, your plan says {got!r}"
        views = {}
        for name, variant, plan in (("ours", ours, want), ("yours", yours, got)):
            views[name] = StaticInputs(ours.fields(), "cpu").host()
            variant.stage(views[name], step, plan)
        for field, expected in views["ours"].items():
            assert np.array_equal(views["yours"][field], expected), (
                f"hint: with {what}, {field} is {views['yours'][field].tolist()}, expected {expected.tolist()}: real "
                "lanes first; padding lanes keep context 1 over block 0, and cu_seqlens_k sums every lane")
    want, got, replays = _graphed_tokens(variant_class)
    assert replays > 0, "hint: no decode step replayed through your variant"
    assert got == want, f"hint: replay through your variant gave {got}, eager {want}"
    return (f"{replays} decode steps replayed through your staging, same greedy tokens as eager; "
            "set USE_MY_DECODE_STAGING = True and re-run")


CHECKS = {"09.1": check_worst_padding, "09.2": check_graph_count, "09.6": check_decode_staging}
