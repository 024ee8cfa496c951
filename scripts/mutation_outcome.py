"""How a mutant's test run ended, read from pytest's JUnit XML (issue #40).

A mutant counts as *caught* only when a test fails on an assertion about behaviour: an
``assert``, ``pytest.fail``, ``pytest.raises`` that saw nothing (``DID NOT RAISE``) or a message
that did not match, or ``pytest.raises`` that saw another exception type than the one it names
(the test asserted the error). Anything else that ends a test, an error in a fixture's set-up or
tear-down, a collection error, an exception the test did not expect, is a *crash*: the mutant
broke something, but no test pinned the behaviour it changed, so it is not counted as caught.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: failure messages that come from an assertion about behaviour
_ASSERTIVE = re.compile(r"^(AssertionError|assert |Failed: |hypothesis\.errors\.Flaky|"
                        r"E\s+AssertionError)")
#: inside the test's own frame, the failing line sits under a ``pytest.raises`` block
_RAISES_BLOCK = re.compile(r"^\s*with pytest\.raises\(", re.M)


@dataclass
class Outcome:
    """Tests failed on assertions, tests ended by other errors, and the verdict."""

    asserted: list[str] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if self.asserted:
            return "caught"
        return "crash" if self.crashed else "survived"

    def note(self) -> str:
        if self.asserted:
            return self.asserted[0][:110]
        return self.crashed[0][:110] if self.crashed else ""


def _test_frame(text: str) -> str:
    """The first frame of a pytest long traceback (the test function's own source)."""
    return re.split(r"\n\n[\w/.\-]+:\d+: ", text, maxsplit=1)[0]


def _wrong_error_inside_raises(text: str) -> bool:
    """True when the test's failing line is inside a ``with pytest.raises(...)`` block."""
    frame = _test_frame(text)
    lines = frame.splitlines()
    marked = [i for i, ln in enumerate(lines) if ln.startswith(">")]
    if not marked:
        return False
    i = marked[0]
    indent = len(lines[i][1:]) - len(lines[i][1:].lstrip())
    for j in range(i - 1, -1, -1):
        ln = lines[j].lstrip(">")
        stripped = ln.lstrip()
        if not stripped:
            continue
        own = len(ln) - len(stripped)
        if own < indent:
            if _RAISES_BLOCK.match(ln):
                return True
            if stripped.startswith(("def ", "with ", "for ", "if ", "while ", "try:")):
                return False
            indent = own
    return False


def read_junit(path: Path) -> Outcome:
    """Classify every failed or errored test case of a JUnit XML file."""
    out = Outcome()
    if not path.is_file():
        out.crashed.append("no JUnit XML written (pytest did not finish)")
        return out
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        for child in case:
            message = (child.get("message") or "").strip()
            text = child.text or ""
            if child.tag == "failure" and (_ASSERTIVE.match(message)
                                           or _wrong_error_inside_raises(text)):
                out.asserted.append(f"{name}: {message}")
            elif child.tag in ("failure", "error"):
                out.crashed.append(f"{child.tag} {name}: {message}")
    return out
