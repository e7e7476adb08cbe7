"""A short soak of the HTTP server: mixed valid, bad and abandoned requests; no error, nothing left running."""
import importlib.util
from pathlib import Path


def load_soak():
    path = Path(__file__).resolve().parents[2] / "scripts" / "serve_soak.py"
    spec = importlib.util.spec_from_file_location("serve_soak_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_short_server_soak_is_clean(tmp_path):
    stats = load_soak().soak(seconds=12, clients=8, seed=1, workdir=tmp_path)
    assert stats.errors == []
    assert stats.ok > 20 and stats.refused > 0 and stats.hung_up > 0  # every kind of request was sent
    assert not any(stats.final_metrics.values())  # nothing running or waiting, no KV block held
