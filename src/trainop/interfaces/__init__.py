"""The interfaces layer: the ``trainop`` command's subcommands (``doctor``; ``bench`` lives in
``trainop.bench``)."""
