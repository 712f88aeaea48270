"""The ``longjobs`` console script. It imports nothing but the standard library until it knows
the CLI's dependencies (the ``cli`` extra) are installed, so without them it prints one line."""

from __future__ import annotations

import sys
from importlib.util import find_spec

CLI_EXTRA = "pip install 'longjobs[cli]'"


def missing(*modules: str) -> list[str]:
    """The top-level modules among ``modules`` that cannot be imported."""
    return [m for m in modules if find_spec(m) is None]


def main() -> None:
    absent = missing("typer", "rich")
    if absent:
        print(f"error: the longjobs CLI needs {' and '.join(absent)}: {CLI_EXTRA}",
              file=sys.stderr)
        sys.exit(2)
    from dispatcher.cli.app import main as app_main

    app_main()


if __name__ == "__main__":
    main()
