"""Build-time generator (mkdocs-gen-files): the CLI reference page from the argparse parser."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
from cli_markdown import markdown  # noqa: E402

from trainop.__main__ import build_parser  # noqa: E402

with mkdocs_gen_files.open("reference/cli.md", "w") as f:
    f.write(markdown(build_parser()))
