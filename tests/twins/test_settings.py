"""The settings declaration: parsing, one error naming the variable, the configuration table
(docs/configuration.md) generated from it, and the module docstring's claim about who reads
``os.environ``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from dispatcher import settings, settings_page
from dispatcher.domain.errors import ConfigError
from dispatcher.settings import CapacityProvider, Config

ROOT = Path(__file__).resolve().parents[2]
BASE = {"LONGJOBS_QUEUE_URL": "q", "LONGJOBS_TABLE": "t", "LONGJOBS_CLUSTER": "c",
        "LONGJOBS_TASK_FAMILY": "f", "LONGJOBS_SUBNETS": "subnet-1"}


def test_every_field_is_one_declared_setting() -> None:
    declared = settings.declaration()
    assert [attr for attr, _ in declared] == list(Config.model_fields)
    names = [s.name for s in settings.SETTINGS]
    fallbacks = [s.fallback for s in settings.SETTINGS if s.fallback]
    assert len(set(names + fallbacks)) == len(names + fallbacks)
    assert all(s.meaning.endswith(".") and s.roles for s in settings.SETTINGS)


def test_defaults_are_the_fields_defaults() -> None:
    cfg = settings.load("dispatcher", BASE)
    assert cfg == Config(queue_url="q", table="t", cluster="c", task_family="f",
                         subnets=("subnet-1",))
    assert cfg.max_running_tasks == 10 and cfg.tick_seconds == 50.0
    assert cfg.metrics_namespace == "longjobs" and cfg.region is None


def test_values_are_parsed() -> None:
    cfg = settings.load("dispatcher", {
        **BASE, "LONGJOBS_SUBNETS": " a, b ,", "LONGJOBS_CAPACITY_STRATEGY": "FARGATE_SPOT:4,"
        "FARGATE:1:1", "LONGJOBS_MAX_RUNNING_TASKS": " 7 ", "LONGJOBS_TICK_SECONDS": "2.5",
        "POWERTOOLS_METRICS_NAMESPACE": "pt", "AWS_DEFAULT_REGION": "eu-west-1",
        "LONGJOBS_ASSIGN_PUBLIC_IP": "ENABLED"})
    assert cfg.subnets == ("a", "b")
    assert cfg.capacity_strategy == (CapacityProvider("FARGATE_SPOT", 4),
                                     CapacityProvider("FARGATE", 1, 1))
    assert cfg.max_running_tasks == 7 and cfg.tick_seconds == 2.5
    assert cfg.metrics_namespace == "pt" and cfg.region == "eu-west-1"
    assert settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_METRICS_NAMESPACE": "lj",
                                    "POWERTOOLS_METRICS_NAMESPACE": "pt",
                                    "LONGJOBS_RETRY_ANY_EXCEPTION": "false"}) == Config(
        table="t", metrics_namespace="lj", retry_any_exception=False)


def test_config_is_frozen() -> None:
    cfg = Config()
    with pytest.raises(ValueError, match="frozen"):
        cfg.max_running_tasks = 3
    assert not hasattr(cfg, "extra")


@pytest.mark.parametrize(("env", "named"), [
    ({"LONGJOBS_MAX_RUNNING_TASKS": "ten"}, "LONGJOBS_MAX_RUNNING_TASKS='ten' is invalid"),
    ({"LONGJOBS_MAX_RUNNING_TASKS": "0"}, "LONGJOBS_MAX_RUNNING_TASKS='0' is invalid"),
    ({"LONGJOBS_BUNDLE_MAX_JOBS": "100001"}, "LONGJOBS_BUNDLE_MAX_JOBS='100001' is invalid"),
    ({"LONGJOBS_TASK_KIND_CONCURRENCY": "report"},
     "LONGJOBS_TASK_KIND_CONCURRENCY='report' is invalid"),
    ({"LONGJOBS_LAUNCHER": "k8s"}, "LONGJOBS_LAUNCHER='k8s' is invalid: must be 'ecs' or"),
    ({"LONGJOBS_CAPACITY_STRATEGY": "FARGATE:x"}, "'FARGATE:x' is not provider:weight"),
    ({"LONGJOBS_RUNTASK_PER_SECOND": "50"}, "LONGJOBS_RUNTASK_PER_SECOND='50' is invalid"),
    ({"LONGJOBS_RETRY_ANY_EXCEPTION": "maybe"}, "LONGJOBS_RETRY_ANY_EXCEPTION='maybe'"),
    ({"LONGJOBS_SUBNETS": ""}, "LONGJOBS_SUBNETS is not set"),
    ({"LONGJOBS_TABLE": " "}, "LONGJOBS_TABLE is not set"),
    ({"POWERTOOLS_METRICS_NAMESPACE": "x", "LONGJOBS_LOG_LEVEL": "loud"},
     "LONGJOBS_LOG_LEVEL='loud' is invalid"),
])
def test_one_error_names_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=r"^invalid configuration: ") as caught:
        settings.load("dispatcher", {**BASE, **env})
    assert named in str(caught.value)


def test_every_problem_is_in_the_one_error() -> None:
    with pytest.raises(ConfigError) as caught:
        settings.load("runner", {"LONGJOBS_FLUSH_SECONDS": "soon"})
    assert "LONGJOBS_TABLE is not set" in str(caught.value)
    assert "LONGJOBS_FLUSH_SECONDS='soon' is invalid" in str(caught.value)


def test_required_by_role() -> None:
    assert settings.required("dispatcher") == ["LONGJOBS_QUEUE_URL", "LONGJOBS_TABLE",
                                               "LONGJOBS_CLUSTER", "LONGJOBS_TASK_FAMILY"]
    assert settings.required("client") == ["LONGJOBS_QUEUE_URL", "LONGJOBS_TABLE"]
    assert settings.required("runner") == ["LONGJOBS_TABLE"]
    assert settings.required("metrics") == []


# -- the configuration page -----------------------------------------------------------------------
def test_the_configuration_table_is_generated_from_the_declaration() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert settings_page.with_table(page) == page, (
        "docs/configuration.md's table differs from dispatcher/settings.py: run `make docs`")


def test_markdown_has_one_row_per_setting() -> None:
    rows = settings_page.markdown().splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == [s.name for s in settings.SETTINGS]
    assert "| `LONGJOBS_TABLE` | (required) | all |" in settings_page.markdown()
    assert "| `LONGJOBS_TICK_SECONDS` | `50` | dispatcher |" in settings_page.markdown()


def test_the_command_prints_and_updates_the_table(tmp_path: Path) -> None:
    printed = subprocess.run([sys.executable, "-m", "dispatcher.settings_page", "--markdown"],
                             cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    assert printed.stdout == settings_page.markdown()
    stale = tmp_path / "configuration.md"
    stale.write_text(f"# x\n{settings_page.TABLE_BEGIN}\n| old |\n{settings_page.TABLE_END}\nend\n")
    subprocess.run([sys.executable, "-m", "dispatcher.settings_page", "--update", str(stale)],
                   cwd=ROOT, check=True, timeout=60)
    assert stale.read_text() == (f"# x\n{settings_page.TABLE_BEGIN}\n{settings_page.markdown()}"
                                 f"{settings_page.TABLE_END}\nend\n")


# -- who reads os.environ -------------------------------------------------------------------------
def reads_environment(source: str) -> bool:
    """Whether the module touches ``os.environ`` or calls ``os.getenv`` / ``os.putenv``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv"):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "getenv", "putenv") for a in node.names):
            return True
    return False


def test_the_docstring_names_every_module_that_touches_the_environment() -> None:
    touching = sorted(str(p.relative_to(ROOT)) for pkg in ("dispatcher", "job_runner")
                      for p in (ROOT / pkg).rglob("*.py")
                      if reads_environment(p.read_text(encoding="utf-8")))
    documented = ["dispatcher/cli/dispatch_commands.py", "dispatcher/local/demo_handlers.py",
                  "dispatcher/local/environment.py", "dispatcher/local/local_launcher.py",
                  "dispatcher/local/recorded_run.py", "dispatcher/local/warm.py",
                  "dispatcher/ops/client.py",
                  "dispatcher/settings.py"]
    assert touching == documented
    doc = settings.__doc__ or ""
    for path in documented[:-1]:
        name = path.removeprefix("dispatcher/")
        assert name in doc or name.rsplit("/", 1)[-1] in doc, path
