"""Print tests/slow_first.txt's lines from a pytest junit XML: each test file's summed test
time, heaviest first, files of 5 s or more (tests/slow_first.py orders the workers' files by it).

    python scripts/slow_first.py JUNIT.xml > tests/slow_first.txt
"""
from __future__ import annotations

import collections
import sys
import xml.etree.ElementTree as ET

HEADER = """\
# The test files that take longest (idle seconds of test time, 2 pytest-xdist workers), heaviest
# first: tests/slow_first.py hands them to the workers first, so that no heavy file starts last
# while the other worker idles (xdist's own order is by number of tests, which puts the
# spawned-rank and subprocess files, few tests each, at the end). Only the order depends on it:
# a stale list costs time, never a result. Regenerate from a run's junit XML:
#   python scripts/slow_first.py JUNIT.xml > tests/slow_first.txt"""


def main(path: str) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").split(".")
        if len(module) > 1:
            seconds[module[1] + ".py"] += float(case.get("time", 0))
    print(HEADER)
    for name, total in seconds.most_common():
        if total >= 5:
            print(f"{name} {total:.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
