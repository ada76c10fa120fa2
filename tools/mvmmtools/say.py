"""One line on stderr, named after who says it."""

import sys
from pathlib import Path


def say(msg, who=None):
    """Prints "WHO: msg" on stderr at once; WHO defaults to the program's name."""
    print(f"{who or Path(sys.argv[0]).name}: {msg}", file=sys.stderr, flush=True)
