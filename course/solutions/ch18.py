"""Solutions to chapter 18's exercises (speculative decoding)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def accept(p, q, draft, u, residual_draw):
    """Leviathan et al.'s rule: keep the draft with probability min(1, p/q), else draw from the residual."""
    if u < min(1.0, float(p[draft] / q[draft])):
        return int(draft)
    residual = (p - q).clamp(min=0)
    return residual_draw(residual / residual.sum())


def accept_always(p, q, draft, u, residual_draw):
    """A typical mistake: trusting the proposal. The output is then distributed as q, not p."""
    return int(draft)


SOLUTIONS = {"18.2": accept}
WRONG = {"18.2": accept_always}
EXPLANATIONS = {
    "18.1": ("More draft tokens help only while the proposer's guesses stay right: with num_speculative_tokens 8 "
             "the rewrite prompt's verify rows accept about as many tokens at positions 1-4 as before and few "
             "beyond, so the step count falls a little (the passage's n-grams run out at sentence ends). With "
             "prompt_lookup_min 1 the proposer guesses from a single repeated token, which fires far more often "
             "and is accepted far less: more draft tokens, a lower acceptance rate, and on the CPU, where a wider "
             "step costs real time, no fewer steps worth having. Measure both with spec_llm.llm_engine.stats."),
    "18.3": ("Section 1 measured a 5-position forward at some 1.1-1.6x a 1-position one on a laptop CPU. A verify "
             "row whose four drafts are all rejected pays that and emits one token, so such a step is 10-60% slower "
             "than plain decoding. A prompt with nothing to copy but with repeated bigrams (a list of numbers the "
             "model continues differently, say) proposes often and is rarely right: on the CPU it runs slower with "
             "speculation. On the H200 the wider step costs almost nothing, which is why the plain set there loses "
             "only a little at batch 1."),
    "18.4": ("At batch 256 every lane of a verify step computes 5 tokens instead of 1: 1,280 rows, which is no "
             "longer a weight read but real arithmetic, about five times the decode step's work, for drafts of "
             "which half are rejected. Large batches already fill the GPU, so speculation only adds work there. An "
             "engine should stop speculating above some batch size (vLLM's speculative_config has "
             "disable_by_batch_size) or when the acceptance rate of recent steps is low."),
}
