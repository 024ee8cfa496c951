"""TF's checkpoint folder: the ``checkpoint`` state file that names its latest checkpoint.

TF's ``Saver.save`` (and ``tf.train.CheckpointManager``) writes, beside the checkpoint files,
a file named ``checkpoint`` in the text format of TF's ``CheckpointState`` message::

    model_checkpoint_path: "model.ckpt-2"
    all_model_checkpoint_paths: "model.ckpt-1"
    all_model_checkpoint_paths: "model.ckpt-2"

``tf.train.latest_checkpoint(folder)`` and ``tf.train.load_checkpoint(folder)`` read it: the
latest is ``model_checkpoint_path``, relative to the folder (TF2's writers) or absolute (TF1's
``Saver`` by default). ``resolve_prefix`` gives the checkpoint prefix for a path that is either
a prefix or such a folder; ``write_state`` writes the file after ``save_tf``/``write_tf`` as
TF does (the new checkpoint as the latest, with relative names, earlier checkpoints of the
file kept in its list while their files are there).

A state file is data read from disk: it is at most ``MAX_STATE_BYTES``, its lines are TF's
text format (``field: value``, strings quoted with C escapes, ``#`` comments), it names
``model_checkpoint_path`` once, and that path must lie inside the folder (after symbolic links:
a name that climbs out with ``..`` or an absolute path elsewhere is refused, naming the file
and the entry); anything else is a ``CorruptCheckpoint`` (a ``ValueError``).
"""

from __future__ import annotations

import os
import re
import tempfile

from trainop.configs.reading import read_regular
from trainop.interfaces.checkpoints.wire import CorruptCheckpoint

__all__ = ["MAX_STATE_BYTES", "STATE_FILE", "resolve_prefix", "write_state"]

#: TF's name of the state file in a checkpoint folder.
STATE_FILE = "checkpoint"
#: The largest state file read (TF's lists a few names; 1 MiB is thousands of them).
MAX_STATE_BYTES = 1 << 20
_LATEST, _ALL = "model_checkpoint_path", "all_model_checkpoint_paths"
_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "'": "'", "\\": "\\", "a": "\a",
            "b": "\b", "f": "\f", "v": "\v", "?": "?"}


def _unquote(text: str, where: str) -> str:
    """The string of a text-format quoted value (C escapes, octal and hex bytes, UTF-8)."""
    text = text.strip()
    if len(text) < 2 or text[0] not in "\"'" or text[-1] != text[0]:
        raise CorruptCheckpoint(f"{where}: expected a quoted string, got {text[:80]!r}")
    body, out, i = text[1:-1], bytearray(), 0
    while i < len(body):
        char = body[i]
        if char == text[0]:
            raise CorruptCheckpoint(f"{where}: an unescaped quote inside the string")
        if char != "\\":
            out += char.encode("utf-8")
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        octal = re.match(r"[0-7]{1,3}", body[i + 1:i + 4])
        hexa = re.match(r"x([0-9A-Fa-f]{1,2})", body[i + 1:i + 4])
        if octal:
            out.append(int(octal.group(), 8) & 0xFF)
            i += 1 + len(octal.group())
        elif hexa:
            out.append(int(hexa.group(1), 16))
            i += 1 + len(hexa.group())
        elif nxt in _ESCAPES:
            out += _ESCAPES[nxt].encode()
            i += 2
        else:
            raise CorruptCheckpoint(f"{where}: an unknown escape {body[i:i + 2]!r}")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpoint(f"{where}: the string is not UTF-8") from None


def _read_state(folder: str) -> tuple[str | None, list[str]]:
    """``(model_checkpoint_path, all_model_checkpoint_paths)`` of ``folder``'s state file;
    ``(None, [])`` where there is none."""
    path = os.path.join(folder, STATE_FILE)
    if not os.path.lexists(path):
        return None, []
    data = read_regular(path, MAX_STATE_BYTES, lambda message: CorruptCheckpoint(
        f"{path}: {message}"), noun="a TF checkpoint state file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptCheckpoint(f"{path}: not text (UTF-8): not TF's checkpoint state "
                                f"file") from None
    latest, every = None, []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}, line {number}"
        match = _LINE.fullmatch(line)
        if match is None:
            raise CorruptCheckpoint(f"{where}: expected TF's text format `field: value`, got "
                                    f"{line[:80]!r}")
        field, value = match.groups()
        if field == _LATEST:
            if latest is not None:
                raise CorruptCheckpoint(f"{where}: `{_LATEST}` given twice")
            latest = _unquote(value, where)
        elif field == _ALL:
            every.append(_unquote(value, where))
    return latest, every


def _inside(folder: str, name: str, where: str) -> str:
    """The prefix ``name`` names, relative to ``folder`` unless absolute; refused unless it
    lies inside ``folder`` (after symbolic links)."""
    if not name or "\x00" in name:
        raise CorruptCheckpoint(f"{where}: names no checkpoint ({name!r})")
    prefix = name if os.path.isabs(name) else os.path.join(folder, name)
    root = os.path.realpath(folder)
    real = os.path.realpath(prefix)
    if real == root or os.path.commonpath([root, real]) != root:
        raise CorruptCheckpoint(
            f"{where}: the checkpoint {name!r} lies outside the folder {folder!r}; a state "
            f"file may only name checkpoints inside its folder (pass the checkpoint's prefix "
            f"itself to read one elsewhere, e.g. after the folder was moved)")
    return prefix


def resolve_prefix(path: str | os.PathLike) -> str:
    """``path`` itself, or for a folder the prefix of its latest checkpoint as TF's
    ``tf.train.latest_checkpoint`` finds it (see the module docstring)."""
    path = os.fspath(path)
    if not isinstance(path, str) or not os.path.isdir(path):
        return path
    latest, _ = _read_state(path)
    state = os.path.join(path, STATE_FILE)
    if latest is None:
        found = "has no" if not os.path.lexists(state) else "names no"
        raise FileNotFoundError(
            f"No TF checkpoint at {path!r}: a folder is read through its {STATE_FILE!r} file "
            f"(TF's Saver writes it), and this one {found} `{_LATEST}`; pass a checkpoint's "
            f"prefix (the path Saver.save returned, without '.index')")
    return _inside(path, latest, f"{state}: `{_LATEST}`")


def _quote(text: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in "\\\"'":
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def write_state(prefix: str | os.PathLike) -> None:
    """Write the state file of ``prefix``'s folder naming ``prefix`` as the latest checkpoint
    (relative to the folder), keeping the earlier names of a readable state file there whose
    checkpoints still exist inside the folder; replaced in one rename."""
    prefix = os.fspath(prefix)
    folder, name = os.path.split(prefix)
    folder = folder or os.curdir
    try:
        _, earlier = _read_state(folder)
    except (CorruptCheckpoint, OSError):
        earlier = []  # an unreadable state file is replaced, as TF's writers replace it
    kept = []
    for old in earlier:
        try:
            old_prefix = _inside(folder, old, STATE_FILE)
        except CorruptCheckpoint:
            continue
        relative = os.path.relpath(old_prefix, folder)
        if relative != name and relative not in kept and os.path.isfile(old_prefix + ".index"):
            kept.append(relative)
    lines = [f"{_LATEST}: {_quote(name)}",
             *(f"{_ALL}: {_quote(n)}" for n in [*kept, name])]
    fd, partial = tempfile.mkstemp(prefix=f".{STATE_FILE}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as file:
            file.write("\n".join(lines) + "\n")
        os.replace(partial, os.path.join(folder, STATE_FILE))
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
