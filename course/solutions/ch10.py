"""Solutions to chapter 10's exercises (kernel fusion)."""
from nanoserve.kernels.fused import _next_pow2

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def kernels_after_fusion_on_cpu():
    """On a CPU the fused modules run their parent's torch code: the count does not move."""
    return 52


def kernels_after_fusion_as_on_the_gpu():
    """A typical mistake: the GPU's count (eight launches) for a layer that ran on the CPU."""
    return 8


def rotary_launch(tokens, q_heads, k_heads, head_dim):
    """One program per token; the tile holds every q and k head, rounded up to a power of two."""
    block_h = _next_pow2(q_heads + k_heads)
    return tokens, block_h, block_h - q_heads - k_heads


def rotary_launch_query_heads_only(tokens, q_heads, k_heads, head_dim):
    """A typical mistake: size the tile for the query heads alone."""
    block_h = _next_pow2(q_heads)
    return tokens, block_h, block_h - q_heads


def sample_launch(rows, vocab):
    """One program per (row, chunk of SAMPLE_CHUNK columns); the last chunk of a row runs past the vocabulary."""
    from nanoserve.kernels.sampling import SAMPLE_CHUNK

    chunks = -(-vocab // SAMPLE_CHUNK)
    return (rows, chunks), chunks * SAMPLE_CHUNK - vocab


def sample_launch_rounding_down(rows, vocab):
    """A typical mistake: whole chunks only, as if the columns past the last full chunk were dropped."""
    from nanoserve.kernels.sampling import SAMPLE_CHUNK

    return (rows, vocab // SAMPLE_CHUNK), 0


def split_launch(rows, n, k):
    """Column tiles of SPLIT_TILE[0] times split_count(k) slices; the row tile is a power of two, 16 at least (the
    tensor cores' smallest), so small steps are mostly padding."""
    from nanoserve.kernels.fused import SPLIT_TILE, split_count

    block_m = max(16, _next_pow2(rows))
    return (-(-n // SPLIT_TILE[0]), split_count(k)), block_m, block_m - rows


def split_launch_without_the_floor(rows, n, k):
    """A typical mistake: a row tile of the next power of two, forgetting the 16 rows a tensor-core dot needs."""
    from nanoserve.kernels.fused import SPLIT_TILE, split_count

    block_m = _next_pow2(rows)
    return (-(-n // SPLIT_TILE[0]), split_count(k)), block_m, block_m - rows


SOLUTIONS = {"10.1": kernels_after_fusion_on_cpu, "10.2": rotary_launch, "10.4": sample_launch,
             "10.5": split_launch}
WRONG = {"10.1": kernels_after_fusion_as_on_the_gpu, "10.2": rotary_launch_query_heads_only,
         "10.4": sample_launch_rounding_down, "10.5": split_launch_without_the_floor}

EXPLANATIONS = {
    "10.3": """The fused launch writes bf16 rows at `slot * kv_heads * head_dim` of a contiguous
[slots, kv_heads, head_dim] view: an fp8 cache with block scales has another element size and a scale to update, so the
launch would write rows the backend cannot read. For fp8 the user would see the engine fail to start: `rotary`
checks shapes, dtypes and contiguity (`_check_cache`), and refuses a cache of another dtype with a TypeError at the
first forward (the memory profile). A cache of the same dtype in another layout is worse: it passes those checks, and
the model quietly produces wrong tokens, which only a test against the reference catches. The choice belongs to the backend, which owns the layout: it could declare whether it keeps
chapter 03's layout (say `fused_store = True`), and `FusedQwen3Attention.attend` would fold the store only for
backends that say so, passing k and v on to the backend's own `store` otherwise. One flag on the backend, read in
one place, instead of a layout test in every kernel.""",

    "10.6": """The one-token step splits `o` and `down`, so its norms are the partial-sum kind; a step of more than
SPLIT_MAX_ROWS tokens uses the plain RMSNorm with its residual add, a second RMSNorm variant (the recorder shows
rms_norm: 1 for (1,) and 2 for (1, 17)). Left out of the rehearsal, that variant would be compiled by the first step
that needs it: the memory profile's scratch forward of 8,192 tokens, at start, alone on the main thread. Nothing
would be wrong, only the start one compile (about 0.4 s on an H100) slower, and the GPU test that asserts nothing
compiles after the rehearsal would fail.

Without `do_not_specialize_on_alignment`, Triton keys the rotary variant on whether `pos_ptr` is a multiple of 16
bytes. `pack_to_device` puts a step's positions right after its token ids, at 8 bytes times its token count: steps of
1 or 17 tokens put them at an odd multiple of 8, steps of 2 or 16 at a multiple of 16, and the graphs' static
buffers are aligned. So the rehearsal would compile the unaligned variant, and the graph capture after it the aligned
one, alone on the main thread. A start without any rehearsal has the opposite hole: its profile and its graphs meet
only the aligned variant, and the first eager step of odd length compiles the other in the middle of serving, once
per machine. The kernel reads one position per program, so the alignment hint buys nothing; declaring the pointer
unspecialised makes every step one variant.""",

}
