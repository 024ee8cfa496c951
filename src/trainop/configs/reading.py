"""Reading a recipe file: a regular file of bounded size, UTF-8 text.

The path is opened without blocking (a FIFO does not wait for a writer) and checked on the
opened descriptor: anything but a regular file (a FIFO, ``/dev/zero`` or a link to it, a
directory) is a ``RecipeError``, and so is a file over ``MAX_FILE_BYTES`` or bytes that are not
UTF-8 (the line named). ``open_regular`` and ``read_regular`` are the same checks for any
file a layer reads (TF checkpoint files, optimizer files), raising the caller's error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from trainop.configs.bounds import MAX_FILE_BYTES
from trainop.configs.errors import RecipeError

__all__ = ["open_regular", "read_regular", "read_text"]

Fail = Callable[[str], Exception]


def open_regular(path: str, limit: int, fail: Fail, *, noun: str = "a recipe",
                 missing: Fail | None = None) -> tuple[int, int]:
    """``(descriptor, size)`` of the regular file at ``path``, opened without blocking.

    Raises ``fail(message)`` when the path cannot be opened (``missing(message)`` instead
    where it does not exist and ``missing`` is given), is not a regular file or has more than
    ``limit`` bytes; ``noun`` names what the file should be in the message.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        message = f"cannot be opened: {exc.strerror or exc}"
        if missing is not None and isinstance(exc, FileNotFoundError):
            raise missing(message) from None
        raise fail(message) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise fail(f"is not a regular file ({_kind(info.st_mode)}); {noun} is read from a "
                       f"regular file")
        if info.st_size > limit:
            raise fail(f"is {info.st_size:,} bytes, more than the {limit:,} {noun} may have")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def read_regular(path: str, limit: int, fail: Fail, *, noun: str = "a recipe",
                 missing: Fail | None = None) -> bytes:
    """The bytes of the regular file at ``path``: at most ``limit`` (a file that grows past it
    while read is refused too), errors as ``open_regular``."""
    fd, _ = open_regular(path, limit, fail, noun=noun, missing=missing)
    try:
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise fail(f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # grew while read
        raise fail(f"is more than the {limit:,} bytes {noun} may have")
    return b"".join(chunks)


def read_text(path: str) -> str:
    """The text of the recipe file at ``path`` (a leading UTF-8 byte-order mark dropped).

    Raises:
        RecipeError: the path cannot be opened, is not a regular file, is larger than
            ``MAX_FILE_BYTES``, or is not UTF-8.
    """
    data = read_regular(path, MAX_FILE_BYTES, lambda message: RecipeError(
        path, None, message.replace(" may have", " may have (MAX_FILE_BYTES)")))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RecipeError(path, line, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                                      f"offset {exc.start})") from None
    return text.removeprefix("\ufeff")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"
