"""Solutions to chapter 19's exercises (Hopper attention)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def visible_keys(n_queries, n_keys):
    """Query i of the last n_queries sits at position n_keys - n_queries + i and sees every key up to it."""
    return [n_keys - n_queries + i + 1 for i in range(n_queries)]


def visible_keys_from_the_start(n_queries, n_keys):
    """A typical mistake: aligning the mask to the first key, as if nothing were cached."""
    return [i + 1 for i in range(n_queries)]


SOLUTIONS = {"19.1": visible_keys}
WRONG = {"19.1": visible_keys_from_the_start}
EXPLANATIONS = {
    "19.2": ("Chapter 12's MixedStep: a mixed step's graph runs the decode kernel over every lane slot of its bucket "
             "(up to max_num_seqs, 256 here), real or padding, and keeps the result only on real lanes. high-churn "
             "is almost all mixed steps, so its decode kernel runs at large batch sizes even when few requests are "
             "decoding. Alone, at 256 lanes, flash-attn-4's decode was barely ahead of flash-attn 2's (1.03x, "
             "section 1); inside the engine's mixed steps it measured slower, for a reason the chapter did not measure. "
             "Sending those steps to flash-attn 2 from 64 lanes on brings high-churn back to 1.00x."),
    "19.3": ("With flash2_decode_from = None every decode runs on flash-attn-4, and a batch of 256 short requests "
             "decodes at 256 lanes, where section 1 measured flash-attn-4 barely ahead alone (1.03x): expect it no "
             "faster, and slower once prompts arrive and mixed steps run (high-churn lost 13% in section 5). At 128 "
             "the lanes between 32 and 127 go back to flash-attn-4, which section 6's table shows slower there, so "
             "expect the default (32) to be the fastest of the three on an H200. On another GPU the crossing need not "
             "sit at 32: run scripts/gpu/decode_splits_probe.py, which times both kernels at each bucket and "
             "context, and set the threshold where flash-attn 2 starts winning, rather than carrying 32 over."),
    "19.4": ("About the same place. At one lane flash-attn-4 runs one thread block per KV head, each walking the "
             "whole context for its head: with 4 heads there are 4 such blocks instead of 8, each with the same walk, "
             "so its time hardly changes. flash-attn 2 has half the bytes to read, but at one lane its time is nearly "
             "flat in the context (16.5 us at 128 keys, 20.0 us at 4,096 in section 6's table): it is mostly the fixed "
             "cost of splitting for max_model_len and combining the splits, which the head count does not change. "
             "What would move the crossing is max_model_len (the width flash-attn 2 splits for) or another GPU. "
             "LONG_CONTEXT_KEYS belongs to a model, a max_model_len and a GPU: measure it with "
             "scripts/gpu/decode_splits_probe.py before you trust it elsewhere."),
    "19.5": ("Qwen3-1.7B starts on flash-attn-4 and compiles nothing: the marker's key is the versions of "
             "flash-attn-4, the CUTLASS DSL, tvm-ffi and Python, the GPU's compute capability and the attention geometry (16 query heads, 8 KV heads, head dimension "
             "128), the same as Qwen3-0.6B's, and flash-attn-4's kernels are specialised for the head dimension and "
             "the heads per KV head, not for the hidden size or the layer count, so the cache already holds them. "
             "Llama 3.2 1B has another geometry (32 query heads of 64 dimensions): no marker, so its first start "
             "serves on flash-attn 2 and starts a background compile; neither start waits for a compile. (Had "
             "the engine settings changed, say a larger max_num_seqs, a flash-attn-4 start could still meet a "
             "kernel shape the cache lacks and compile it then: the marker is per geometry, not per setting.)"),
    "19.6": ("No, and yes. torch.compile loads torch._dynamo, so by the time the engine imports flash-attn-4 the "
             "compiler's price is paid; compiler_marks_skipped sees torch._dynamo in sys.modules and leaves the real "
             "decorator in place, so quack's autotuner methods are marked as the library intends, and the import "
             "costs what the CUTLASS DSL and flash-attn-4 cost. In the check, torch.compiler.disable(f) returns a "
             "wrapper, not f itself. The marks are skipped only in a process that has not loaded the compiler; "
             "one that loads it later and compiles code calling those few functions would trace them (section 8 "
             "says what that gives up)."),
}
