"""Written answers to appendix A4's exercises (the benchmark harness)."""

__all__ = ["EXPLANATIONS"]

EXPLANATIONS = {
    "A4.1": (
        "Two problems, no engine built. The latency workload sends prompts of --latency-len tokens and\n"
        "asks for as many again, so its longest request needs 2 x 100 = 200 tokens, more than\n"
        "--max-model-len 128. And on a CPU it would generate (latency_reps + 1) x (1 + 8 + 32) x 100 =\n"
        "6 x 41 x 100 = 24,600 output tokens (the warm-up call of each batch size included), over the\n"
        "20,000-token CPU limit. --max-token-id 500 is inside the vocabulary of 512, and 128 is within\n"
        "the model's 2,048 positions. A length check that read only the throughput workloads would\n"
        "miss the first: each latency request would stop at max_model_len, and the token count check\n"
        "in measure_latency would then fail after minutes of work instead of before any."),
    "A4.2": (
        "For nanoserve, process_ready_s - startup_s is 4 to 6 s and import_s is 0.1 s: importing\n"
        "nanoserve is lazy. The rest is the interpreter's start and the imports the harness does\n"
        "before it builds the engine, above all torch: _is_smoke() runs `import torch` to ask\n"
        "torch.cuda.is_available() while run_benchmark works out the result's label. With --measure-gpu\n"
        "the CUDA context is made there too (timed_gpu_rates), and BenchEngine.__init__ asks nvidia-smi\n"
        "for the memory in use before its clocks start. vLLM and nano-vllm are GPU-only engines, so\n"
        "_is_smoke() returns before importing torch, and their package import (torch inside it) is\n"
        "import_s: their difference is mostly import_s. `python -X importtime -c 'import torch'`\n"
        "shows what torch's import costs on your machine."),
}
