"""Build-time generator (mkdocs-gen-files): one reference page per public module, each name of
its ``__all__`` rendered by mkdocstrings from the docstrings, so the reference follows the code."""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
from public_api import PUBLIC_MODULES, is_module, public_names, shadowed_home  # noqa: E402

PAGES = {module: page for module, page, _ in PUBLIC_MODULES}

index = ["# Reference", "",
         "Generated at build time from the docstrings of every public name (each module's "
         "`__all__`), so it follows the code. The command line: [the trainop command](cli.md).",
         "", "| module | holds | names |", "|---|---|---|"]
for module, page, what in PUBLIC_MODULES:
    names = public_names(module)
    index.append(f"| [`{module}`]({page}.md) | {what} | {len(names)} |")
    lines = [f"# `{module}`", "", f"::: {module}", "    options:", "      members: false",
             "      show_root_heading: false", ""]
    for name in sorted(names, key=lambda n: (not n[0].isupper(), n.lower())):
        if is_module(module, name):
            target = PAGES.get(f"{module}.{name}")
            lines += [f"## `{module}.{name}`", "",
                      f"The submodule: [`{module}.{name}`]({target}.md)." if target else
                      f"The submodule `{module}.{name}`.", ""]
            continue
        home = shadowed_home(module, name)
        if home:  # a function in a module of its own name: point at the function itself
            lines += [f"[](){{#{module}.{name}}}", f"::: {home}", "    options:",
                      f"      heading: {module}.{name}", ""]
            continue
        lines += [f"::: {module}.{name}", ""]
    with mkdocs_gen_files.open(f"reference/{page}.md", "w") as f:
        f.write("\n".join(lines))
with mkdocs_gen_files.open("reference/index.md", "w") as f:
    f.write("\n".join(index) + "\n")
