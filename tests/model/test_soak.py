"""A bounded soak: random requests from several threads on a tight pool; greedy rows equal a roomy engine's."""
import importlib.util
from pathlib import Path


def load_soak():
    path = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"
    spec = importlib.util.spec_from_file_location("soak_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bounded_soak_has_no_wrong_tokens_and_no_leaks(tmp_path):
    stats = load_soak().soak(seconds=15, seed=1, threads=3, tight_blocks=24, workdir=tmp_path)
    assert not stats.errors, stats.errors[:3]
    assert stats.requests >= 20 and stats.greedy_checked >= 5
    assert stats.preemptions > 0  # the pool is tight enough to matter
    assert stats.mismatches == 0
    assert stats.unfinished == 0
    assert stats.leaked_blocks == 0
