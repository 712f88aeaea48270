"""``python -m job_runner.image_check REQUIREMENT``: the worker image's build step that fails, in
one line naming the fix, when the handlers package it installed declares no handler (every job
of the image's first task would fail as an unknown kind). ``infra/worker/Dockerfile`` runs it."""

from __future__ import annotations

import sys

from job_runner.kinds import GROUP, HandlerRegistry


def problem(requirement: str) -> str | None:
    """Why an image with ``requirement`` installed registers no handler, or None."""
    if HandlerRegistry.load(()).kinds():
        return None
    return (f"error: {requirement} declares no {GROUP} entry point: add "
            f'[project.entry-points."{GROUP}"] kind = "module:function" to its pyproject.toml, '
            "or build with --build-arg HANDLERS_BY_STACK=1 and set the stack's Handlers "
            "parameter (LONGJOBS_HANDLERS)")


def main(argv: list[str]) -> int:
    said = problem(argv[0] if argv else "the handlers package")
    if said is not None:
        print(said, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
