"""Reading a recipe file: a regular file of bounded size, UTF-8 text.

The path is opened without blocking (a FIFO does not wait for a writer) and checked on the
opened descriptor: anything but a regular file (a FIFO, ``/dev/zero`` or a link to it, a
directory) is a ``RecipeError``, and so is a file over ``MAX_FILE_BYTES`` or bytes that are not
UTF-8 (the line named).
"""

from __future__ import annotations

import os
import stat

from trainop.configs.bounds import MAX_FILE_BYTES
from trainop.configs.errors import RecipeError

__all__ = ["read_text"]


def read_text(path: str) -> str:
    """The text of the recipe file at ``path`` (a leading UTF-8 byte-order mark dropped).

    Raises:
        RecipeError: the path cannot be opened, is not a regular file, is larger than
            ``MAX_FILE_BYTES``, or is not UTF-8.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise RecipeError(path, None, f"cannot be opened: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RecipeError(path, None, f"is not a regular file ({_kind(info.st_mode)}); a "
                                          f"recipe is read from a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise RecipeError(path, None, f"is {info.st_size:,} bytes, more than the "
                                          f"{MAX_FILE_BYTES:,} a recipe may have "
                                          f"(MAX_FILE_BYTES)")
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise RecipeError(path, None, f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_FILE_BYTES:  # grew while read
        raise RecipeError(path, None, f"is more than the {MAX_FILE_BYTES:,} bytes a recipe may "
                                      f"have (MAX_FILE_BYTES)")
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
