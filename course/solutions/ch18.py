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
    "18.1": ("More draft tokens help while the proposer's guesses stay right, and the passage copies well past "
             "four tokens. With num_speculative_tokens 8 most verify rows also keep drafts 5 to 8: the engine "
             "steps fall from 9 to 7, while the acceptance rate drops (92% to 79%): the last drafts of a longer "
             "proposal fail more often. With prompt_lookup_min 1 the proposer may guess from one repeated "
             "token; here the 2-token lookup already found the passage, so it adds one proposal where nothing "
             "longer matched (36 to 40 draft tokens, one more accepted): a lower acceptance rate (85%) and the "
             "same 9 steps. Measure both with spec_llm.llm_engine.stats (num_steps, "
             "num_draft_tokens, acceptance_rate, num_accepted_tokens_per_pos)."),
    "18.3": ("Section 1 measured a 5-position forward at under twice a 1-position one on a CPU (1.6-1.8x where "
             "the chapter ran). A verify row whose four drafts are all rejected pays that and emits one token, so "
             "such a step is up to about 80% slower "
             "than plain decoding. A prompt with nothing to copy but with repeated bigrams (a list of numbers the "
             "model continues differently, say) proposes often and is rarely right: on the CPU it runs slower with "
             "speculation. On the H200 the wider step costs little (section 8's profile: 1.72 ms for 1 + 8 "
             "positions against 1.43 ms for a plain synchronous step at batch 1), which is why even "
             "the plain set there gains a little at batch 1 (0.84x)."),
    "18.4": ("At batch 256 every lane of a verify step computes 5 tokens instead of 1: 1,280 rows, which is no "
             "longer a weight read but real arithmetic, about five times the decode step's work, for drafts of "
             "which half are rejected. Large batches already fill the GPU, so speculation only adds work there. An "
             "engine should stop speculating above some batch size (vLLM's speculative_config has "
             "disable_by_batch_size) or when the acceptance rate of recent steps is low."),
}
