"""Solutions to chapter 17's exercises (structured outputs)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]

# 17.2: the year literally, a month 01-12, a day 01-31, ASCII digits only ([0-9], never \d)
DATE_REGEX = r"2026-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
# a typical mistake: \d matches digits of every script, and 00 or 13 pass as months
DATE_REGEX_LOOSE = r"2026-\d{2}-\d{2}"

CITY_SCHEMA = {"type": "object",
               "properties": {"name": {"type": "string", "maxLength": 40},
                              "country": {"type": "string", "maxLength": 40},
                              "population": {"type": "integer", "minimum": 0},
                              "is_capital": {"type": "boolean"}},
               "required": ["name", "country", "population", "is_capital"],
               "additionalProperties": False}
# a typical mistake: JSON Schema allows extra keys unless told otherwise, and "number" allows 2.5
CITY_SCHEMA_OPEN = {"type": "object",
                    "properties": {"name": {"type": "string"}, "country": {"type": "string"},
                                   "population": {"type": "number"}, "is_capital": {"type": "boolean"}},
                    "required": ["name", "country", "population", "is_capital"]}

SOLUTIONS = {"17.2": DATE_REGEX, "17.3": CITY_SCHEMA}
WRONG = {"17.2": DATE_REGEX_LOOSE, "17.3": CITY_SCHEMA_OPEN}
EXPLANATIONS = {
    "17.1": ("Compile the section-4 schema twice, with disable_any_whitespace True and False, and count "
             "constraint.mask(tokenizer.encode('{')). Compact, the grammar knows the next character exactly: the "
             "first key is \"city\", so one token is allowed, the quote. Flexible, JSON allows any whitespace "
             "after '{', and Qwen3's vocabulary holds hundreds of tokens made of spaces, tabs and newlines: the "
             "mask allows 425 tokens, the quote and whitespace. More, never fewer. The gibberish model shows why "
             "that matters: with flexible whitespace its greedy output is '{' followed by whitespace until "
             "max_tokens, a valid prefix that never ends. Compact JSON is shorter and cannot ramble, which is "
             "why the chapter and the server's forced tool calls use it."),
    "17.4": ("The choice completes after a token or two (one of the colours). From then on the grammar allows only "
             "end-of-sequence, and min_tokens forbids exactly that token, so every logit of the row is -inf and "
             "the sampler falls back to token id 0, which is '!' in Qwen3's vocabulary. The matcher is already "
             "stopped, so GrammarConstraint.advance ignores the extra tokens rather than marking the constraint "
             "broken, and the mask stays 'end-of-sequence only'. The output is the colour followed by a run of '!' "
             "until min_tokens is met, and the first token allowed after that ends it (finish_reason 'stop'). "
             "Two rules that together allow nothing are a request error, which is why SamplingParams refuses "
             "min_tokens beside a grammar (StructuredOutputsParams.check_params), as it refuses allowed_token_ids "
             "and bad_words, whose masks can empty the grammar's the same way. A grammar that needs a minimum "
             "length says so itself, e.g. a regex with {30,}."),
    "17.5": (
        "Keep a float table counts[max_num_seqs, V] on the device and give each sequence a row when it\n"
        "is admitted (zeroed). After each step, one `counts.index_put_((rows, tokens), ones,\n"
        "accumulate=True)` adds the sampled tokens; the penalties then read `counts[rows]` directly\n"
        "instead of rebuilding it from Python lists. Rebuilding costs O(output length) host work and a\n"
        "host-to-device copy per penalised row per step, so at batch 64 with 2,000-token outputs it\n"
        "grows with every token; the table costs V floats per running sequence (600 KiB at V=151,936)\n"
        "and one small scatter per step, whatever the length. Free or zero the row when the sequence\n"
        "finishes or is preempted (a recompute re-adds its tokens)."),
}
