"""Every command the README (and docs/) shows runs as written, or at least parses.

Each fenced shell block (``sh``, ``bash``, ``console``, or an untagged block of ``$ `` lines) is
read as a user would copy it. Shell blocks must pass ``bash -n``. Every ``longjobs`` command in
them is parsed by the CLI itself (its click command: unknown commands, flags and extra arguments
fail here); the cheap ones then run for real, in order, against one ``longjobs local`` shared by
the module. Not run: ``deploy`` as the docs' shell blocks write it (it needs the stack's
outputs; docs/deploying.md's CI workflow, which names them, is run against local mode by its
own test below), ``local``, ``demo`` and ``console`` (long-running; test_first_hour.py,
test_demo.py and test_console_cli.py run them)
and ``top`` without ``--once``/``--json`` (a live view). A transcript line ``error: ...`` right
after a command is its expected output: that command must fail with exactly that line's text as
the start of its one-line error.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dispatcher.cli.app import app, command
from tests.helpers import local_exports, wait_for

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = {"sh", "bash", "shell", "console", ""}
AWS_ONLY = {"deploy"}
LONG_RUNNING = {"local", "demo", "console"}
# Shell words that end a command's own arguments (`longjobs local > /tmp/longjobs.env`).
STOP_WORDS = {">", ">>", "|", "||", "&&", ";", "&", "2>", "2>&1", "<"}
NOT_BEFORE = "2100-01-01T00:00:00Z"  # jobs the runner sets up stay held, never launched


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


@dataclass
class Block:
    where: str  # file:line of the opening fence
    lang: str
    lines: list[str]


@dataclass
class Command:
    where: str  # file:line
    argv: list[str]  # after `longjobs`
    expect_error: str | None = None
    assigns: str | None = None  # `VAR=$(longjobs ...)`: stdout becomes $VAR


@dataclass
class Tally:
    blocks: int = 0
    commands: int = 0
    parsed: int = 0
    ran: int = 0
    aws_only: int = 0
    failures: list[str] = field(default_factory=list)


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    current: Block | None = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and current is None:
            current = Block(f"{path.relative_to(ROOT)}:{n}", fence.group(1).lower(), [])
        elif fence and current is not None:
            out.append(current)
            current = None
        elif current is not None:
            current.lines.append(line)
    return [b for b in out if b.lang in SHELL_LANGS]


def is_transcript(block: Block) -> bool:
    return any(line.startswith("$ ") for line in block.lines)


def _joined(lines: list[str]) -> list[tuple[int, str]]:
    """Lines with backslash continuations joined, with their index in the block."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for i, line in enumerate(lines):
        if not buf:
            start = i
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    return out


def commands_of(block: Block) -> list[Command]:
    path, first = block.where.rsplit(":", 1)
    out: list[Command] = []
    if is_transcript(block):
        lines = [(i, line[2:]) for i, line in enumerate(block.lines) if line.startswith("$ ")]
    else:
        lines = _joined(block.lines)
    for i, text in lines:
        assigns = None
        sub = re.match(r"^\s*([A-Z_][A-Z0-9_]*)=\$\((.*)\)\s*(#.*)?$", text)
        if sub:
            assigns, text = sub.group(1), sub.group(2)
        try:
            words = shlex.split(text, comments=True)
        except ValueError:
            continue  # bash -n reports it
        for k, w in enumerate(words):
            if w in STOP_WORDS:
                words = words[:k]
                break
        if not words or not (words[0] == "longjobs" or words[0].endswith("/longjobs")):
            continue
        expect = None
        if is_transcript(block) and i + 1 < len(block.lines) \
                and block.lines[i + 1].startswith("error: "):
            expect = block.lines[i + 1]
        out.append(Command(f"{path}:{int(first) + 1 + i}", words[1:], expect, assigns))
    return out


def parse(argv: list[str]) -> None:
    """Parse ``longjobs ARGV`` as the console script would, without running it: walk to the
    subcommand, then let click bind its options and arguments (a UsageError if they don't)."""
    cmd = command()
    name = "longjobs"
    args = list(argv)
    while hasattr(cmd, "commands") and args and not args[0].startswith("-"):
        sub = cmd.commands.get(args[0])
        if sub is None:
            raise AssertionError(f"no such command: {args[0]!r}")
        cmd, name, args = sub, args[0], args[1:]
    try:
        cmd.make_context(name, args)
    except Exception as exc:
        if type(exc).__name__ == "Exit":  # --help, --version: parsed, then printed
            return
        raise


def runs_for_real(c: Command) -> bool:
    if not c.argv or c.argv[0] in AWS_ONLY or c.argv[0] in LONG_RUNNING:
        return False
    if "--help" in c.argv:
        return False
    return not (c.argv[0] == "top" and not {"--once", "--json"} & set(c.argv))


def all_commands() -> tuple[list[Block], list[Command]]:
    bs = [b for p in documents() for b in blocks(p)]
    return bs, [c for b in bs for c in commands_of(b)]


# -- the shared local mode ------------------------------------------------------------------------
def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGJOBS_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), POWERTOOLS_LOG_LEVEL="WARNING")
    return env


@pytest.fixture(scope="module")
def local_mode() -> Iterator[dict[str, str]]:
    """``longjobs local`` as the README starts it; yields the client environment it exports."""
    env = _clean_env()
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher.cli.entry", "local",
                             "--tick-seconds", "1"], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        exports = local_exports(proc.stdout)
        assert "LONGJOBS_QUEUE_URL" in exports, "longjobs local printed no exports"
        yield {**env, **exports}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def invoke(env: dict[str, str], argv: list[str]) -> tuple[int, str, str]:
    # Every variable the shared environment leaves out is unset for the command, as in a shell
    # that ran the `eval` only.
    unset = {k: None for k in os.environ if k.startswith(("LONGJOBS_", "AWS_")) and k not in env}
    result = CliRunner().invoke(app, argv, env={**env, **unset, "COLUMNS": "80"})
    return result.exit_code, result.stdout, result.stderr


def _prepare(env: dict[str, str], cmds: list[Command]) -> None:
    """The jobs the examples name (`jobs show spot-1`, `jobs retry new-1`) exist, held until
    2100 so that nothing runs them; the ones an example retries are cancelled first. A
    selection (`jobs cancel --status ...`) names no job."""
    named = {c.argv[2] for c in cmds if len(c.argv) >= 3 and c.argv[0] == "jobs"
             and c.argv[1] in ("show", "cancel", "retry") and not c.expect_error
             and not c.argv[2].startswith(("$", "-"))}
    for job in sorted(named):
        code, _, err = invoke(env, ["submit", "report", "--job-id", job, "--not-before",
                                    NOT_BEFORE])
        assert code == 0, err
    for job in sorted(named):
        wait_for(lambda job=job: invoke(env, ["jobs", "show", job])[0] == 0, 60,
                 f"{job} recorded")
    for c in cmds:
        if c.argv[:2] == ["jobs", "retry"] and c.argv[2] in named:
            assert invoke(env, ["jobs", "cancel", c.argv[2]])[0] == 0


# -- the tests ------------------------------------------------------------------------------------
def test_shell_blocks_are_valid_shell() -> None:
    bad = []
    shell = [b for b in all_commands()[0] if b.lang in ("sh", "bash", "shell")]
    for b in shell:
        done = subprocess.run(["bash", "-n"], input="\n".join(b.lines), text=True,
                              capture_output=True, check=False)
        if done.returncode:
            bad.append(f"{b.where}: {done.stderr.strip()}")
    assert shell, "no shell blocks found: has the README moved?"
    assert not bad, "\n".join(bad)


def test_make_targets_and_paths_in_shell_blocks_exist() -> None:
    """`make demo` names a Makefile target, `-f infra/worker/Dockerfile` a file of the repo."""
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))
    missing = []
    for b in all_commands()[0]:
        if b.lang not in ("sh", "bash", "shell"):
            continue
        for _, text in _joined(b.lines):
            try:
                words = shlex.split(text, comments=True)
            except ValueError:
                continue
            if words[:1] == ["make"]:
                missing += [f"{b.where}: make {t}" for t in words[1:] if t not in targets]
            missing += [f"{b.where}: {w}" for w in words
                        if re.fullmatch(r"(infra|dispatcher|job_runner|bench|docs)/[\w./-]+", w)
                        and not (ROOT / w).exists()]
    assert not missing, "\n".join(missing)


def test_every_command_parses() -> None:
    bs, cmds = all_commands()
    bad = []
    for c in cmds:
        argv = [a if not a.startswith("$") else "placeholder" for a in c.argv]
        try:
            parse(argv)
        except Exception as exc:
            bad.append(f"{c.where}: longjobs {shlex.join(c.argv)}: {exc}")
    assert len(cmds) >= 15, f"only {len(cmds)} longjobs commands in {len(bs)} blocks"
    assert not bad, "\n".join(bad)


def test_readme_commands_run_against_local_mode(local_mode: dict[str, str]) -> None:
    bs, cmds = all_commands()
    tally = Tally(blocks=len(bs), commands=len(cmds))
    real = [c for c in cmds if runs_for_real(c)]
    _prepare(local_mode, real)
    variables = {"JOB_ID": "spot-1"}
    for c in cmds:
        parse([a if not a.startswith("$") else "placeholder" for a in c.argv])
        tally.parsed += 1
        if not runs_for_real(c):
            tally.aws_only += c.argv[0] in AWS_ONLY
            continue
        argv = [variables.get(a.lstrip("$").strip("{}"), a) if a.startswith("$") else a
                for a in c.argv]
        result = invoke(local_mode, argv)
        if any(a.startswith("$") for a in c.argv) and "no such job" in result[2]:
            def admitted(argv: list[str] = argv) -> bool:  # as a user would: again, until a
                nonlocal result                            # tick has admitted the job
                result = invoke(local_mode, argv)
                return "no such job" not in result[2]

            wait_for(admitted, 30, "the job admitted")
        code, out, err = result
        tally.ran += 1
        shown = f"{c.where}: longjobs {shlex.join(c.argv)}"
        if c.expect_error:
            if code != 2 or not err.startswith(c.expect_error):
                tally.failures.append(f"{shown}: expected {c.expect_error!r}, got exit {code}: "
                                      f"{err.strip()}")
        elif code != 0:
            tally.failures.append(f"{shown}: exit {code}: {err.strip() or out.strip()}")
        elif c.assigns:
            variables[c.assigns] = out.strip()
    assert tally.ran >= 10, f"only {tally.ran} of {tally.commands} commands ran"
    assert tally.parsed == tally.commands
    assert not tally.failures, "\n".join(tally.failures)


def test_the_ci_workflow_deploys_against_local_mode(local_mode: dict[str, str]) -> None:
    """docs/deploying.md's CI recipe, run as GitHub would run its deploy step: the workflow's
    own `env`, its `${{ vars.X }}` being the repository variables the guide sets from the
    stack's outputs (here: local mode's exports, and the stack's task-definition revision),
    then its `longjobs deploy` line. No AWS key or setting of the shell leaks in."""
    import boto3
    from samtranslator.yaml_helper import yaml_parse

    guide = (ROOT / "docs" / "deploying.md").read_text()
    section = guide[guide.index("## CI: ship an image on every tag"):]
    workflow = yaml_parse(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    job = workflow["jobs"]["ship"]
    settable = re.findall(r"gh variable set (\w+)", section)
    ecs = boto3.client("ecs", endpoint_url=local_mode["AWS_ENDPOINT_URL"],
                       region_name=local_mode["AWS_DEFAULT_REGION"],
                       aws_access_key_id=local_mode.get("AWS_ACCESS_KEY_ID", "testing"),
                       aws_secret_access_key=local_mode.get("AWS_SECRET_ACCESS_KEY", "testing"))
    outputs = {**local_mode, "LONGJOBS_STACK_TASK_DEFINITION": ecs.describe_task_definition(
        taskDefinition=local_mode["LONGJOBS_TASK_FAMILY"])["taskDefinition"]["taskDefinitionArn"]}
    env: dict[str, str] = {}
    for name, value in job["env"].items():
        used = re.fullmatch(r"\$\{\{ vars\.(\w+) \}\}", str(value))
        if used is not None:
            assert used.group(1) in settable, f"{name}: the guide never sets {used.group(1)}"
            value = outputs[used.group(1)]
        env[name] = str(value)
    assert "LONGJOBS_TABLE" in env  # the deployment record's table
    (step,) = [s["run"] for s in job["steps"] if str(s.get("run", "")).startswith(
        "longjobs deploy")]
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/longjobs-worker:v1.4.0"
    argv = [image if a == "$IMAGE" else a for a in shlex.split(step)[1:]]
    # The runner's own credentials and endpoint (GitHub's: the OIDC role; here local mode's).
    creds = {k: v for k, v in local_mode.items() if k.startswith("AWS_")}
    code, out, err = invoke({**creds, **env}, argv)
    assert code == 0, err
    assert re.fullmatch(rf"{env['LONGJOBS_TASK_FAMILY']}:\d+", out.strip()), out
