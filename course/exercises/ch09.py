"""Checkers for chapter 09's exercises (CUDA graphs)."""
import contextlib
import dataclasses
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from nanoserve.attention.paged_decode import PagedDecode
from nanoserve.attention.paged_decode import pick_bucket as bucket_for
from nanoserve.attention.torch_ref import TorchAttentionBackend
from nanoserve.engine.cuda_graphs import DecodeGraphRunner, StaticInputs, graph_buckets
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
    """(forward graphs, head graphs) a DecodeGraphRunner captures, counted on the CPU."""
    runner = SimpleNamespace(model=None, table=None, device=torch.device("cpu"), dtype=torch.float32,
                             model_config=SimpleNamespace(hidden_size=8), kv_caches=[], generator=None,
                             backend=TorchAttentionBackend(), init_kv_cache=lambda num_blocks: None)
    graphs = DecodeGraphRunner(runner, PagedDecode(runner.backend, graph_buckets(max_num_seqs), 64, 16))
    graphs.init_kv_cache(1)  # off CUDA this keeps each graph's function instead of capturing it
    return len(graphs.graphs), len(graphs.head_graphs)


def check_graph_count(graphs_to_capture) -> str:
    """09.2 (predict, then measure): the forward and head graphs a DecodeGraphRunner captures."""
    for max_num_seqs in (1, 8, 20, 100, 256, 512):
        want, got = _measured_graphs(max_num_seqs), graphs_to_capture(max_num_seqs)
        if not isinstance(got, tuple) or tuple(got) != want:
            raise AssertionError(f"graphs_to_capture({max_num_seqs}) = {got!r}, measured {want}: one forward graph "
                                 "per bucket; count the head graphs per bucket in _capture")
    forward, head = _measured_graphs(256)
    return f"max_num_seqs=256 captures {forward} forward and {head} head graphs"


def _steps() -> list:
    """(what, step) pairs that exercise every case of the decode bucket choice and staging."""
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


def _graphed_tokens(decode_class=PagedDecode, runner_class=DecodeGraphRunner) -> tuple:
    """Greedy tokens of the tiny engine on this CPU: eager, and through `runner_class` with `decode_class`."""
    from nanoserve import LLM, SamplingParams
    from nanoserve.engine import selector
    from nanoserve.engine.model_runner import ModelRunner
    from nanoserve.model.tiny import make_tiny_checkpoint

    tiny = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=3, tie_word_embeddings=False)
    prompts = [dict(prompt_token_ids=list(range(3 + 5 * i, 9 + 7 * i))) for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=6)
    kwargs = dict(skip_tokenizer_init=True, device="cpu", block_size=4, num_kv_blocks=64, max_num_seqs=8)
    want = [o.outputs[0].token_ids for o in LLM(str(tiny), **kwargs).generate(prompts, params, use_tqdm=False)]

    def build(config, model_config):
        runner = ModelRunner(config, model_config)
        decode = decode_class(runner.backend, graph_buckets(config.max_num_seqs), config.max_model_len,
                              config.block_size)
        return runner_class(runner, decode)

    built, selector.build_executor = selector.build_executor, build
    try:
        llm = LLM(str(tiny), **kwargs)
    finally:
        selector.build_executor = built
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    return want, got, llm.engine.executor.replays


def check_decode_staging(decode_class) -> str:
    """09.6 (build it yourself): bucket_for and stage of PagedDecode match the chapter's; replay = eager."""
    assert any(c.__name__ == "PagedDecode" for c in getattr(decode_class, "__mro__", ())), \
        "hint: subclass PagedDecode and override bucket_for() and stage()"
    backend = TorchAttentionBackend()
    for what, step in _steps():
        ours, yours = (cls(backend, [1, 2, 4, 8], max_model_len=32, block_size=4) for cls in (PagedDecode, decode_class))
        want, got = ours.bucket_for(step), yours.bucket_for(step)
        if want is None:
            assert got is None, f"hint: with {what} bucket_for() must return None (no decode graph holds it), got {got!r}"
            continue
        assert got == want, f"hint: with {what} the step replays bucket {want}, your bucket_for says {got!r}"
        views = {}
        for name, decode in (("ours", ours), ("yours", yours)):
            views[name] = StaticInputs(ours.fields(), "cpu").host()
            decode.stage(views[name], step)
        for field, expected in views["ours"].items():
            assert np.array_equal(views["yours"][field], expected), (
                f"hint: with {what}, {field} is {views['yours'][field].tolist()}, expected {expected.tolist()}: real "
                "lanes first; padding lanes keep context 1 over block 0, and cu_seqlens_k sums every lane")
    want, got, replays = _graphed_tokens(decode_class)
    assert replays > 0, "hint: no decode step replayed through your staging"
    assert got == want, f"hint: replay through your staging gave {got}, eager {want}"
    return (f"{replays} decode steps replayed through your staging, same greedy tokens as eager; "
            "set USE_MY_DECODE_STAGING = True and re-run")


class EmulatedGraph:
    """A CUDA graph on a CPU: replay re-runs the decode call recorded in it on the SAME tensors, into the same output."""

    def __init__(self):
        self.calls, self.pool = [], None

    def replay(self) -> None:
        for fn, args, out in self.calls:
            out.copy_(fn(*args))


class EmulatedCUDA:
    """Just enough of torch.cuda to capture a decode graph on a CPU, and a log of what was called in which order."""

    def __init__(self):
        self.capturing, self.log = None, []

    def graph_pool_handle(self):
        return ("pool", id(self))

    def synchronize(self) -> None:
        self.log.append("synchronize")

    def CUDAGraph(self) -> EmulatedGraph:  # noqa: N802  torch.cuda's name
        return EmulatedGraph()

    @contextlib.contextmanager
    def graph(self, graph: EmulatedGraph, pool=None):
        if self.capturing is not None:
            raise RuntimeError("a capture is already under way")
        self.capturing, graph.pool = graph, pool
        self.log.append("capture")
        try:
            yield graph
        finally:
            self.capturing = None

    def recorded(self, decode):
        """`decode`, recorded into the graph being captured when called inside `graph(...)`."""
        def call(*args):
            out = decode(*args)
            if self.capturing is None:
                self.log.append("decode")
            else:
                self.log.append("decode in capture")
                self.capturing.calls.append((decode, args, out))
            return out
        return call


def graph_runner_with(graph_class):
    """DecodeGraphRunner whose buckets replay the reader's `graph_class` (captured for real on CUDA, emulated off it)."""
    class ReadersGraphRunner(DecodeGraphRunner):
        """Chapter 09's graph runner; each decode bucket's forward is the reader's captured graph."""

        def _capture(self) -> None:
            super()._capture()  # head graphs as the chapter captures them
            on_cuda = self.runner.device.type == "cuda"
            api = torch.cuda if on_cuda else EmulatedCUDA()
            pool = api.graph_pool_handle()
            for bucket in sorted(self.batches, reverse=True):  # largest bucket first, as the chapter captures
                decode = self._decode_fn(self.batches[bucket], bucket)
                graph = graph_class(decode if on_cuda else api.recorded(decode), bucket, self.runner.device, pool, api)
                self.graphs[bucket] = self._replay_fn(graph, bucket)

        def _decode_fn(self, batch, bucket: int):
            def decode(ids, positions, slots):
                return self.model(ids, positions, dataclasses.replace(batch, slot_mapping=slots))
            return decode

        def _replay_fn(self, graph, bucket: int):
            c = self.common

            def replay():
                n = self._num_tokens
                hidden = graph.replay(c["input_ids"][:n], c["positions"][:n], c["slot_mapping"][:n])
                torch.index_select(hidden, 0, c["logits_indices"][:bucket], out=self.hidden[:bucket])
            return replay

        def _stage_common(self, step, temperatures) -> None:
            self._num_tokens = step.num_tokens
            super()._stage_common(step, temperatures)

    return ReadersGraphRunner


def _toy_decode(writes: list):
    """A decode 'model': each call logs the cache slots it writes (-1: nowhere) and returns features of its lanes."""
    weights = torch.arange(1.0, 9.0).reshape(4, 2)

    def decode(ids, positions, slots):
        writes.append(sorted(slots[slots >= 0].tolist()))
        return torch.stack([ids.float(), positions.float()], dim=1) @ weights.T
    return decode


def check_decode_graph(graph_class) -> str:
    """09.7 (build it yourself): one decode bucket as a graph: static buffers, warm-up, capture, and replay."""
    writes, api = [], EmulatedCUDA()
    pool = api.graph_pool_handle()
    graph = graph_class(api.recorded(_toy_decode(writes)), 4, torch.device("cpu"), pool, api)
    assert api.log[:3] == ["decode", "synchronize", "capture"], (
        f"hint: building the graph called {api.log}: run decode once outside the capture (warm-up), "
        "synchronize, then capture")
    captured = [g for g in vars(graph).values() if isinstance(g, EmulatedGraph)]
    assert api.log[3:] == ["decode in capture"] and captured and len(captured[0].calls) == 1, (
        f"hint: call decode exactly once inside `with cuda.graph(graph, pool=pool)` and keep the graph; "
        f"building it called {api.log}")
    assert captured[0].pool == pool, "hint: capture into the pool you were given, so all buckets share one"
    assert writes == [[], []], f"hint: warm-up and capture wrote into cache slots {writes}: static slots start at -1"
    t = lambda xs: torch.tensor(xs, dtype=torch.int64)
    steps = [("three lanes", t([5, 6, 7]), t([9, 3, 4]), t([20, 13, 8])),
             ("one lane after three (the old lanes are padding now)", t([2]), t([11]), t([1])),
             ("a full bucket", t([1, 2, 3, 4]), t([4, 3, 2, 1]), t([0, 2, 30, 31])),
             ("two lanes after four", t([8, 9]), t([5, 7]), t([16, 17]))]
    for what, ids, positions, slots in steps:
        log, writes[:] = len(api.log), []
        out = graph.replay(ids, positions, slots)
        assert api.log[log:] == [], (f"hint: with {what} replay called {api.log[log:]}: copy the step into the "
                                     "static buffers and call the graph's replay(), never decode itself")
        want = _toy_decode([])(ids, positions, slots)
        assert isinstance(out, torch.Tensor) and out.shape == want.shape, \
            f"hint: with {what} return the first {len(ids)} rows of the captured output, got {out!r}"
        assert torch.equal(out, want), (
            f"hint: with {what} the replay computed {out[:, 0].tolist()} for ids {ids.tolist()}: a graph reads the "
            "tensors it was captured with, so copy the step into them (copy_ or slice assignment), never rebind them")
        assert writes == [sorted(slots.tolist())], (
            f"hint: with {what} the replay wrote cache slots {writes}, expected only {sorted(slots.tolist())}: every "
            "lane past the step's own is padding and must get slot -1 (write nowhere), also lanes an earlier, "
            "larger step used")
    want, got, replays = _graphed_tokens(runner_class=graph_runner_with(graph_class))
    assert replays > 0, "hint: no decode step replayed through your graphs"
    assert got == want, f"hint: the engine through your graphs gave {got}, eager {want}"
    return (f"{replays} decode steps of the tiny engine replayed through your graphs (emulated on this CPU), "
            "same greedy tokens as eager; set USE_MY_DECODE_GRAPH = True")


CHECKS = {"09.1": check_worst_padding, "09.2": check_graph_count, "09.6": check_decode_staging,
          "09.7": check_decode_graph}
