"""What runs where: the versions of longjobs and of the AWS libraries it calls AWS through, as
this process has them. ``longjobs --version`` prints them, every tick's record and every job
runner's first log line carry them, so an operator can tell which build a task or a tick ran.

longjobs's own is :data:`VERSION`, written here alone (pyproject.toml reads it from here), as
the Lambda package holds the ``dispatcher`` folder without the installed distribution's
metadata; the libraries' come from their metadata (the Lambda layer and the image install them
with it).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

VERSION = "0.1.0"
LIBRARIES = ("boto3", "botocore", "pynamodb")


def running() -> dict[str, str]:
    """``{"longjobs": ..., "boto3": ..., "botocore": ..., "pynamodb": ...}``."""
    found = {"longjobs": VERSION}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def line() -> str:
    """One line for people: ``longjobs 0.1.0 (boto3 1.44.8, botocore 1.44.8, pynamodb 6.1.0)``."""
    found = running()
    rest = ", ".join(f"{name} {found[name]}" for name in LIBRARIES)
    return f"longjobs {found['longjobs']} ({rest})"
