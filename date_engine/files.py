"""Reading the small files a user names (a spec, probe.json, bench.json): one guard for all; and
writing a small file so that it is whole or absent (:func:`write_durably`).

Only a regular file is opened (a FIFO or a device such as /dev/zero would block the read or never
end it), and at most ``limit`` bytes of it are read: a file larger than any such file can be is
refused in one sentence, not read into memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from date_engine.errors import DateError

__all__ = ["SMALL_FILE_BYTES", "read_small_text", "write_durably"]

SMALL_FILE_BYTES = 16 << 20
"""The most a spec, probe.json or bench.json can sensibly hold: 16 MiB (the largest written here
is a probe's, a few kilobytes)."""


def read_small_text(path: str | Path, what: str, fix: str, limit: int = SMALL_FILE_BYTES,
                    error: type[DateError] = DateError) -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes, or ``error`` with
    one sentence: "{what} {path}: {the problem}; {fix}."."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} {path}: does not exist; {fix}.") from None
    except OSError as exc:
        raise error(f"{what} {path}: cannot be read ({exc.strerror}); {fix}.") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise error(f"{what} {path}: {kind}; {fix}.")
    try:
        # O_NONBLOCK: should the path become a FIFO between the stat and the open, the open
        # returns at once instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise error(f"{what} {path}: cannot be read ({exc.strerror}); {fix}.") from None
    if len(data) > limit:
        raise error(f"{what} {path}: larger than {limit >> 20} MiB, more than such a file "
                    f"holds; {fix}.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} {path}: not UTF-8 text; {fix}.") from None


def write_durably(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, flushed to disk, then
    renamed: a reader finds the whole file or none."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
