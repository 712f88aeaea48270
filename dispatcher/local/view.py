"""How the demo shows itself: a rich live table on a terminal, plain lines anywhere else.

A terminal gets a table redrawn twice a second, because the point of the demo is to watch
admission hold the backlog in SQS while tasks come and go. CI logs and tests get one plain
progress line every few seconds instead, because a redrawn table there is only noise.
Events (the kill, the deploy) and the final summary go to both.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.table import Table

Say = Callable[[str], None]


@dataclass(frozen=True)
class DemoSnapshot:
    """What the demo measured at one moment; counts come from SQS, the table and the launcher."""

    elapsed: float = 0.0
    submitted: int = 0
    backlog: int = 0  # messages still in SQS (visible + in flight): held back by admission
    admitted: int = 0  # job records in the table
    running_tasks: int = 0
    succeeded: int = 0
    failed: int = 0
    reruns: int = 0  # task exits that led to a rerun
    revision: str = ""
    bundles: int = 0
    tasks: int = 0
    by_priority: dict[str, int] = field(default_factory=dict)  # backlog per priority queue
    report_slots: int = 0  # demo.report jobs its active bundles may run at once
    report_limit: int = 0

    def rows(self) -> list[tuple[str, str]]:
        return [("elapsed", f"{self.elapsed:5.1f} s"),
                ("submitted to SQS", str(self.submitted)),
                ("backlog in SQS", str(self.backlog)),
                ("admitted (job records)", str(self.admitted)),
                ("running tasks", str(self.running_tasks)),
                ("succeeded", str(self.succeeded)),
                ("failed", str(self.failed)),
                ("reruns (task exits rerun)", str(self.reruns)),
                ("backlog by priority", " / ".join(f"{p} {n}" for p, n in
                                                   self.by_priority.items())),
                ("demo.report running / limit", f"{self.report_slots} / {self.report_limit}"),
                ("bundles launched / tasks started", f"{self.bundles} / {self.tasks}"),
                ("task-definition revision", self.revision)]

    def line(self) -> str:
        return (f"{self.elapsed:5.1f}s | backlog {self.backlog:3d} | admitted {self.admitted:3d}"
                f" | running tasks {self.running_tasks} | succeeded {self.succeeded:3d} | "
                f"failed {self.failed} | reruns {self.reruns} | {self.revision}")


class View:
    """Plain output: events at once, progress at most every ``every`` seconds."""

    def __init__(self, say: Say = print, every: float = 3.0) -> None:
        self.say = say
        self.every = every
        self._last = float("-inf")

    def __enter__(self) -> View:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def update(self, snap: DemoSnapshot, *, force: bool = False) -> None:
        if force or time.monotonic() - self._last >= self.every:
            self._last = time.monotonic()
            self.say(_fit(snap.line(), "    "))

    def event(self, text: str) -> None:
        self.say(_fit(text, "    "))

    def summary(self, title: str, rows: list[tuple[str, str]]) -> None:
        self.say(title)
        width = max((len(k) for k, _ in rows), default=0)
        for key, value in rows:
            self.say(_fit(f"  {key:<{width}}  {value}", " " * (width + 4)))


def _fit(text: str, indent: str, columns: int = 80) -> str:
    """One logical line wrapped at word boundaries to ``columns``, continued under ``indent``
    (one ``say`` call still carries the whole line, so a reader of the log greps it whole)."""
    return textwrap.fill(text, width=columns, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


class LiveView(View):
    """rich.live.Live around a table rebuilt from the latest snapshot (refreshed ~2x/s)."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.console = console or Console()
        self._snap = DemoSnapshot()
        self._live = Live(get_renderable=self._render, console=self.console,
                          refresh_per_second=2, transient=False)

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._live.stop()

    def _render(self) -> Table:
        table = Table(title="longjobs demo (live)", show_header=False, min_width=50)
        table.add_column("what", style="bold")
        table.add_column("value", justify="right")
        for key, value in self._snap.rows():
            table.add_row(key, value)
        return table

    def update(self, snap: DemoSnapshot, *, force: bool = False) -> None:
        self._snap = snap

    def event(self, text: str) -> None:
        self.console.print(f"[bold yellow]>[/] {text}", highlight=False)

    def summary(self, title: str, rows: list[tuple[str, str]]) -> None:
        table = Table(title=title, show_header=False)
        table.add_column("what", style="bold")
        table.add_column("value", overflow="fold")
        for key, value in rows:
            table.add_row(key, value)
        self.console.print(table)


def make_view(say: Say | None) -> View:
    """A live table only when nobody captures the output and stdout is a terminal."""
    if say is None and sys.stdout.isatty():
        return LiveView()
    return View(say or print)
