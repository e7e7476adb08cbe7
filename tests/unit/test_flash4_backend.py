"""Chapter 19's flash-attn-4 backend on a CPU: what 'auto' offers, the door, the argument mapping, the fallbacks."""
import pytest
import torch

from course.paged_batch import paged_case, scenario
from nanoserve.attention import flash4
from nanoserve.attention.flash4 import Flash4AttentionBackend


class Recorder:
    """Stands in for flash-attn-4's attention function: records each call, returns zeros of the right shapes."""

    def __init__(self):
        self.calls = []

    def __call__(self, q, k_cache, v_cache, **kwargs):
        self.calls.append((q.shape, kwargs))
        lse = torch.zeros(q.shape[:-1]).transpose(-1, -2) if kwargs.get("return_lse") else None  # [H, T] or [B, H, Sq]
        return torch.zeros_like(q), lse


def small_case(name):
    specs, shared = scenario(name, 16)
    return paged_case(specs, None, block_size=16, n_heads=4, n_kv_heads=2, head_dim=16, shared_prefix_blocks=shared,
                      dtype=torch.float32, device="cpu")


def test_auto_offers_flash4_but_picks_torch_on_a_cpu():
    from nanoserve.engine.selector import attention_backends, backend_class

    backends = attention_backends()
    assert next(iter(backends)) == "torch" and backends["flash4"] is Flash4AttentionBackend
    assert backend_class("flash4") is Flash4AttentionBackend
    assert not flash4.flash4_available()


def test_flash4_on_a_cpu_is_refused_at_the_door(tmp_path):
    from nanoserve import LLM
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m")
    with pytest.raises(ValueError, match="flash4.*CUDA"):
        LLM(str(path), device="cpu", attention_backend="flash4", skip_tokenizer_init=True)


def test_varlen_passes_key_counts_and_block_tables():
    recorder = Recorder()
    q, _, _, batch = small_case("chunked_prefill")
    out = Flash4AttentionBackend(attention=recorder).varlen(q, *batch.kv_caches[0], batch)
    (shape, kwargs), = recorder.calls
    assert out.shape == q.shape and shape == q.shape
    assert kwargs["seqused_k"] is batch.context_lens and kwargs["page_table"] is batch.block_tables
    assert kwargs["cu_seqlens_q"] is batch.cu_seqlens_q and kwargs["causal"] is True
    assert "cu_seqlens_k" not in kwargs  # flash-attn-4 refuses cumulative key offsets with a page table


@pytest.mark.parametrize("lanes", [6, 64, 100])
def test_decode_is_a_batch_of_one_token_sequences_without_flash_attn_2(lanes):
    recorder = Recorder()
    q, _, _, batch = paged_case([(20, 1)] * lanes, None, block_size=16, n_heads=4, n_kv_heads=2, head_dim=16,
                                dtype=torch.float32, device="cpu")
    out = Flash4AttentionBackend(attention=recorder).decode(q, *batch.kv_caches[0], batch)
    (shape, kwargs), = recorder.calls  # no flash-attn 2 here: every lane count stays with flash-attn-4
    assert out.shape == q.shape and shape == (lanes, 1, 4, 16)
    assert kwargs["seqused_k"] is batch.context_lens and kwargs.get("num_splits", 1) == 1


class Flash2Recorder:
    """Stands in for chapter 13's flash-attn 2 kernels: records each suffix call, returns zeros and an lse [B, H]."""

    def __init__(self):
        self.calls = []

    def suffix(self, q, k_cache, v_cache, batch):
        self.calls.append(q.shape)
        return torch.zeros_like(q), torch.zeros(q.shape[:2])


def decode_case(lanes):
    q, _, _, batch = paged_case([(20, 1)] * lanes, None, block_size=16, n_heads=4, n_kv_heads=2, head_dim=16,
                                dtype=torch.float32, device="cpu")
    return q, batch


@pytest.mark.parametrize("lanes", [6, 31, 32, 100])
def test_decode_and_the_cascade_suffix_follow_the_threshold(lanes):
    flash4_fn, flash2 = Recorder(), Flash2Recorder()
    backend = Flash4AttentionBackend(attention=flash4_fn, flash2=flash2)
    q, batch = decode_case(lanes)
    batch.backend = backend  # the cascade's kernels take the backend from their batch
    out = backend.decode(q, *batch.kv_caches[0], batch)
    own, lse = flash4.CASCADE_KERNELS["flash4"].suffix(q, *batch.kv_caches[0], batch)
    to_flash2 = lanes >= Flash4AttentionBackend.flash2_decode_from
    assert len(flash2.calls) == (2 if to_flash2 else 0) and len(flash4_fn.calls) == (0 if to_flash2 else 2)
    assert out.shape == own.shape == q.shape and lse.shape == q.shape[:2]
    if not to_flash2:
        assert [kwargs.get("return_lse", False) for _, kwargs in flash4_fn.calls] == [False, True]


def test_no_threshold_keeps_every_decode_on_flash4():
    flash4_fn, flash2 = Recorder(), Flash2Recorder()
    backend = Flash4AttentionBackend(attention=flash4_fn, flash2=flash2)
    backend.flash2_decode_from = None
    q, batch = decode_case(100)
    flash4.flash4_decode(backend, q, *batch.kv_caches[0], batch)
    assert not flash2.calls and len(flash4_fn.calls) == 1


def test_flash2_is_used_only_when_installed(monkeypatch):
    backend = Flash4AttentionBackend(attention=Recorder())
    assert backend.flash2_kernels(100) is None  # a CPU: no flash-attn 2
    monkeypatch.setattr(flash4, "flash_attn_available", lambda: True)
    assert backend.flash2_kernels(100) is flash4.CASCADE_KERNELS["flash"] and backend.flash2_kernels(31) is None


def test_shared_decode_matches_the_torch_reference_with_its_lse():
    from nanoserve.attention.cascade import TorchCascadeKernels, attend_with_lse
    from nanoserve.attention.torch_ref import TorchAttentionBackend, gather_context

    def flash4_contract(q, k_cache, v_cache, seqused_k=None, page_table=None, return_lse=False, **_):
        """flash-attn-4's batched decode (one query per sequence) in torch: out [B, 1, H, D], lse [B, H, 1]."""
        pairs = [attend_with_lse(q[b], *gather_context(k_cache, v_cache, page_table[b], n))
                 for b, n in enumerate(seqused_k.tolist())]
        lse = torch.stack([l.t() for _, l in pairs])
        return torch.stack([o for o, _ in pairs]), (lse if return_lse else None)

    q, k, v, batch = paged_case([(20, 1), (37, 1), (5, 1)], None, block_size=16, n_heads=4, n_kv_heads=2,
                                head_dim=16, dtype=torch.float32, device="cpu")
    k_cache, v_cache = batch.kv_caches[0]
    TorchAttentionBackend().store(k, v, k_cache, v_cache, batch.slot_mapping)
    want, want_lse = TorchCascadeKernels.suffix(q, k_cache, v_cache, batch)
    for threshold in (None, 1):  # flash-attn-4's path, then flash-attn 2's (torch suffix standing in)
        backend = Flash4AttentionBackend(attention=flash4_contract, flash2=TorchCascadeKernels)
        backend.flash2_decode_from = threshold
        out, lse = flash4.flash4_decode(backend, q, k_cache, v_cache, batch, return_lse=True)
        torch.testing.assert_close(out, want)
        torch.testing.assert_close(lse, want_lse)  # the same [B, H] layout from either library
        torch.testing.assert_close(flash4.flash4_decode(backend, q, k_cache, v_cache, batch), want)


def test_missing_library_names_what_to_install(monkeypatch, tmp_path):
    for name in (flash4.CACHE_SWITCH, flash4.CACHE_DIR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    flash4.start_import.cache_clear()
    try:
        with pytest.raises(ImportError, match="pip install flash-attn-4"):
            flash4.flash4_attention()
        assert flash4.kernel_cache_dir() == tmp_path / "nanoserve" / "flash4"
        import os

        assert os.environ[flash4.CACHE_SWITCH] == "1" and os.environ[flash4.CACHE_DIR] == str(flash4.kernel_cache_dir())
    finally:
        flash4.start_import.cache_clear()


def test_a_kernel_cache_setting_of_the_user_is_kept(monkeypatch, tmp_path):
    import os

    monkeypatch.setenv(flash4.CACHE_SWITCH, "0")
    monkeypatch.setenv(flash4.CACHE_DIR, str(tmp_path))
    flash4.start_import.cache_clear()
    try:
        flash4.start_import().exception()
        assert os.environ[flash4.CACHE_SWITCH] == "0" and os.environ[flash4.CACHE_DIR] == str(tmp_path)
    finally:
        flash4.start_import.cache_clear()


def test_long_context_graphs_take_few_lanes_over_long_contexts(tmp_path):
    """Chapter 19, section 6: with flash-attn 2 at hand, the flash4 backend's engine gets a second set of decode graphs
    below the threshold, on flash-attn 2's kernel, planned only for steps with few lanes and long contexts."""
    from nanoserve.engine.config import EngineConfig
    from nanoserve.engine.model_runner import build_step_inputs
    from nanoserve.engine.selector import graph_variants
    from nanoserve.model.loader import load_config
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "tiny")
    config = EngineConfig(str(path), device="cpu", max_num_seqs=64).resolve(load_config(path))
    backend = Flash4AttentionBackend(attention=Recorder(), flash2=Flash2Recorder())
    variants = graph_variants(config, backend)
    assert [v.name for v in variants] == ["cascade", "long-context decode", "decode", "mixed"]
    long = variants[1]
    assert long.buckets == [8] and long.decode.backend.flash2_decode_from == 1  # 9 lanes need 6,144 keys: no 16
    assert backend.flash2_decode_from == Flash4AttentionBackend.flash2_decode_from == 32  # the engine's, unchanged
    for lanes, keys, bucket in ((1, 2047, None), (1, 2048, 8), (4, 2048, 8), (5, 2048, None), (5, 4096, 8),
                                (9, 4096, None), (40, 4096, None)):
        step = build_step_inputs([[3]] * lanes, [keys - 1] * lanes, [list(range(keys // 16 + 1))] * lanes,
                                 [True] * lanes, 16)
        plan = long.plan(step)
        assert (plan and plan.bucket) == bucket, (lanes, keys)
    prefill = build_step_inputs([list(range(5))], [3000], [list(range(200))], [True], 16)
    assert long.plan(prefill) is None
    alone = Flash4AttentionBackend(attention=Recorder())  # a CPU: no flash-attn 2, no long-context graphs
    assert "long-context decode" not in [v.name for v in graph_variants(config, alone)]


def test_long_context_graphs_capture_only_the_buckets_a_long_step_can_reach():
    """A bucket's fewest lanes (one more than the bucket before) must fit their long-context keys in max_model_len."""
    from nanoserve.attention.flash4 import long_context_buckets, long_context_decode

    buckets = [8, 16, 32, 48, 64]
    assert long_context_buckets(buckets, 32, 4096) == [8]
    assert long_context_buckets(buckets, 32, 6144) == [8, 16]
    assert long_context_buckets(buckets, 64, 40960) == [8, 16, 32, 48]
    assert long_context_buckets(buckets, 32, 2047) == []
    backend = Flash4AttentionBackend(attention=Recorder(), flash2=Flash2Recorder())
    assert long_context_decode(backend, buckets, max_model_len=2047, block_size=256) is None  # no step reaches one


def test_flash4_by_name_is_refused_at_the_door_where_it_cannot_run():
    """Without flash-attn-4 on a Hopper-or-newer GPU, the real backend refuses before any weight loads."""
    if flash4.flash4_available():
        pytest.skip("flash-attn-4 runs here")
    with pytest.raises(ValueError, match="compute capability 9.0 or newer"):
        Flash4AttentionBackend()


def test_flash4_import_skips_the_compiler_marks_only_while_the_compiler_is_unloaded():
    import subprocess
    import sys

    code = """
import sys, torch
from nanoserve.attention.flash4 import compiler_marks_skipped
real = torch.compiler.disable
def f(): return 1
with compiler_marks_skipped():
    assert torch.compiler.disable(f) is f and torch.compiler.disable(recursive=False)(f) is f
assert torch.compiler.disable is real and "torch._dynamo" not in sys.modules
import torch._dynamo
with compiler_marks_skipped():
    assert torch.compiler.disable is real and torch.compiler.disable(f) is not f
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
