"""Written answers to appendix A6's exercises (serving hardening)."""

__all__ = ["EXPLANATIONS"]

EXPLANATIONS = {
    "A6.1": (
        "All six are 400s. \"max_tokens\": \"8\" fails pydantic's strict types (param max_tokens: a string is\n"
        "not an integer). n=129 is over --max-n (128). max_tokens=600 is more than max_model_len (512),\n"
        "refused in vLLM's words. n=64 with max_tokens=500 needs up to 32,000 tokens of KV, more than the\n"
        "cache's 256 x 16 = 4,096 (param n). temperature=-1 is SamplingParams' own range check (param\n"
        "temperature). The 70,000-character prompt is over 512 x 128 = 65,536 characters, refused before\n"
        "it is tokenized (param prompt).\n"
        "The engine alone refuses three of them: the string max_tokens and the negative temperature\n"
        "(SamplingParams), and the long prompt, but only after tokenizing it (8,750 tokens, more than\n"
        "max_model_len). It accepts n=129 and n=64 x 500 (each sequence fits; together they would wait\n"
        "and evict each other) and caps max_tokens=600 at the room left (511 tokens), which a server\n"
        "client would read as a silently shorter answer."),
    "A6.2": (
        "In a process, like the templates. The Rust tokenizer lets go of the interpreter lock while it\n"
        "encodes, so on a thread it costs a CPU core but not the worker's interpreter time: the timing\n"
        "cell shows the worker never waiting much longer than the switch interval. A Python tokenizer\n"
        "holds the lock, so a thread running it takes the interpreter from the worker for a switch\n"
        "interval at a time, over and over, for as long as it tokenizes: the worker's steps slow down\n"
        "while any prompt is being tokenized. Replacing the encode call by a Python loop shows it: the\n"
        "longest wait grows to the switch interval or more, and the worker's own loop gets only a share\n"
        "of the interpreter for the whole time. A child process (or a pool of them, as TemplateRenderer\n"
        "keeps one) competes only for a core."),
}
