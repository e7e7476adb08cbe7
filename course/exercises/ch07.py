"""Checkers for chapter 07's exercises (sampler, executor, engine core)."""
import tempfile

import torch

from nanoserve.engine.config import EngineConfig
from nanoserve.engine.core import EngineCore
from nanoserve.engine.executor import Executor
from nanoserve.engine.model_runner import ModelRunner
from nanoserve.engine.sequence import Sequence
from nanoserve.model.loader import load_config
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampler import _filter_mask
from nanoserve.sampling import SamplingParams

__all__ = ["CHECKS"]


def check_top_k_removed(top_k_removed) -> str:
    """06.1: the top-k mask from torch.topk equals the sampler's sort-based one."""
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))  # continuous: no ties
    for k in (1, 3, 40, 100):
        want = _filter_mask(logits, torch.full((6,), min(k, 40)), torch.ones(6), torch.zeros(6), True, False)
        try:
            got = top_k_removed(logits, k)
        except NotImplementedError:
            raise
        except RuntimeError as err:
            raise AssertionError(f"hint: top_k_removed(logits, {k}) failed ({err}); a k beyond the "
                                 "vocabulary keeps every token") from None
        assert isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.shape == logits.shape, (
            "hint: return a bool tensor shaped like the logits, True where a token is removed")
        assert torch.equal(got, want), (f"hint: with k={k} your mask removes {int(got.sum())} tokens, "
                                        f"the sampler's removes {int(want.sum())}: keep exactly the k largest")
    return "top-k needs the k-th largest value per row, not a full sort"


_CHECKPOINT = {}  # one tiny checkpoint per process, made on first use


def _tiny_core(executor_factory):
    """An engine core over a tiny checkpoint, its executor built by `executor_factory(runner)`."""
    if "path" not in _CHECKPOINT:
        _CHECKPOINT["path"] = make_tiny_checkpoint(tempfile.mkdtemp(prefix="ch07-exercise-") + "/tiny", seed=3,
                                                   max_position_embeddings=64)
    path = _CHECKPOINT["path"]
    model_config = load_config(path)
    config = EngineConfig(path, device="cpu", block_size=4, num_kv_blocks=16, max_num_batched_tokens=8,
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
    """06.2: a wrapper executor that records each step's batch size and changes nothing else."""
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


CHECKS = {"07.1": check_top_k_removed, "07.2": check_logging_executor}
