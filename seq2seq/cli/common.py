"""What every ``seq2seq-*`` command does the same way: one-line errors, exit status 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def run_command(prog: str, run: Callable[[Any], None], args: Any) -> None:
    """Call ``run(args)``; bad input (``ValueError``, ``OSError``, hence ``CheckpointError``)
    becomes ``PROG: error: ...`` on one line and exit status 2."""
    try:
        run(args)
    except BrokenPipeError:  # `| head`: the reader left; not an error (an OSError: first)
        sys.stdout = None  # nothing more to flush at exit
        sys.exit(0)
    except (ValueError, OSError) as e:
        msg = " ".join(str(e).split())  # one line, whatever the exception text
        print(f"{prog}: error: {msg}", file=sys.stderr)
        sys.exit(2)
