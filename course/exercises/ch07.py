"""Checkers for chapter 07's exercises (step inputs, executor, engine core)."""
import random
import tempfile

import torch

from nanoserve.engine.config import EngineConfig
from nanoserve.engine.core import EngineCore
from nanoserve.engine.executor import Executor
from nanoserve.engine.model_runner import ModelRunner, build_step_inputs
from nanoserve.engine.sequence import Sequence
from nanoserve.model.loader import load_config
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

__all__ = ["CHECKS"]


def _random_step(rng: random.Random, block_size: int) -> tuple:
    """(token_chunks, starts, block_tables) of a batch of decodes and prompt chunks starting anywhere."""
    chunks, starts, tables = [], [], []
    for _ in range(rng.randint(1, 6)):
        start = rng.randint(0, 30)
        n = 1 if rng.random() < 0.5 else rng.randint(2, 20)
        chunks.append([rng.randrange(1000) for _ in range(n)])
        starts.append(start)
        tables.append(rng.sample(range(500), -(-(start + n) // block_size)))
    return chunks, starts, tables


def check_flat_step_layout(flat_step_layout) -> str:
    """07.1: flat input ids, positions and slots equal build_step_inputs' on random mixed batches."""
    rng, batches = random.Random(0), 0
    for block_size in (1, 4, 16):
        for _ in range(20):
            chunks, starts, tables = _random_step(rng, block_size)
            want = build_step_inputs(chunks, starts, tables, [True] * len(chunks), block_size)
            got = flat_step_layout(chunks, starts, tables, block_size)
            assert isinstance(got, (tuple, list)) and len(got) == 3, (
                "hint: return three flat sequences: (input_ids, positions, slot_mapping)")
            ids, positions, slots = (torch.as_tensor(x, dtype=torch.int64).reshape(-1).tolist() for x in got)
            assert ids == want.input_ids.tolist(), "hint: input_ids are every sequence's new tokens, back to back"
            assert positions == want.positions.tolist(), (
                "hint: sequence b's new tokens sit at positions starts[b], starts[b] + 1, ... (its cached "
                "tokens come first)")
            assert slots == want.slot_mapping.tolist(), (
                f"hint: at block_size={block_size}, the token at position p goes to slot "
                "block_table[p // block_size] * block_size + p % block_size")
            batches += 1
    return f"{batches} random batches laid out exactly as build_step_inputs does"


_CHECKPOINT = {}  # one tiny checkpoint per process, made on first use


def _tiny_core(executor_factory):
    """An engine core over a tiny checkpoint, its executor built by `executor_factory(runner)`."""
    if "path" not in _CHECKPOINT:
        _CHECKPOINT["path"] = make_tiny_checkpoint(tempfile.mkdtemp(prefix="ch07-exercise-") + "/tiny", seed=3,
                                                   max_position_embeddings=64)
    path = _CHECKPOINT["path"]
    model_config = load_config(path)
    config = EngineConfig(path, device="cpu", block_size=4, num_kv_blocks=16, max_num_batched_tokens=8, max_num_seqs=4,
                          skip_tokenizer_init=True).resolve(model_config)
    return EngineCore(config, model_config, executor_factory(ModelRunner(config, model_config)))


def _run(core) -> tuple:
    """(tokens of two greedy sequences, len(batch) of every step)."""
    seqs = [Sequence(i, list(range(1 + i, 6 + 2 * i)), max_tokens=3, params=SamplingParams(temperature=0))
            for i in range(2)]
    core.add(seqs)
    sizes = []
    while core.has_unfinished():
        sizes.append(len(core.step().batch))
    return [s.output_token_ids for s in seqs], sizes


def check_logging_executor(logging_executor) -> str:
    """07.2: a wrapper executor that records each step's batch size and changes nothing else."""
    made = []

    def factory(runner):
        made.append(logging_executor(runner))
        return made[-1]

    plain, want_sizes = _run(_tiny_core(lambda runner: runner))
    got, _ = _run(_tiny_core(factory))
    wrapper = made[0]
    assert isinstance(wrapper, Executor), ("hint: the engine core needs profile_num_kv_blocks, init_kv_cache, "
                                           "execute, shutdown and a num_eager_steps attribute")
    assert got == plain, "hint: the wrapper must hand execute() through unchanged"
    sizes = getattr(wrapper, "batch_sizes", None)
    assert sizes == want_sizes, (f"hint: batch_sizes should list len(batch) of every executed step "
                                 f"({want_sizes}), got {sizes}")
    assert wrapper.num_eager_steps == len(want_sizes), "hint: num_eager_steps should be the wrapped runner's count"
    return f"batch sizes per step: {sizes}"


CHECKS = {"07.1": check_flat_step_layout, "07.2": check_logging_executor}
