"""The reference pages (docs/reference/) are complete, and stay so as the code changes.

Each page is checked against what the code has: every environment variable src/ reads is in
settings.md, every metric it registers in metrics.md (with its type), every table, view and
column of the migrated schema in schema.md, every public name rendered by the API pages, every
click command by the command-line page. Each check is a function returning what is missing, so
that the tests can also show it fails on a page that leaves something out.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import pytest

import cronbase
import cronbase.testing
from cronbase.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "cronbase"
REFERENCE = ROOT / "docs" / "reference"
SNAPSHOT = ROOT / "tests" / "integration" / "schema_snapshot.txt"


def _load_extension(path: Path) -> Any:
    # docs/reference is no package (mkdocs.yml names the extension by its file), so load it by path.
    spec = importlib.util.spec_from_file_location("griffe_roles", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


griffe_roles = _load_extension(REFERENCE / "griffe_roles.py")


def page(name: str) -> str:
    return (REFERENCE / name).read_text()


def sources() -> Iterator[tuple[Path, str]]:
    for path in sorted(SRC.rglob("*.py")):
        yield path, path.read_text()


# -- environment variables ------------------------------------------------------------------------

# An environment variable's name inside a string: cronbase's own are CRONBASE_*, wherever a string
# names one (an os.environ read, a click envvar=, a constant handed to a child, a message).
_OWN_VARIABLE = re.compile(r"\bCRONBASE_[A-Z0-9_]*[A-Z0-9]\b")
_ENVIRON = re.compile(r"(^|\.)(environ|env|environment)$")


def _constants() -> dict[str, set[str]]:
    """Module-level constants of src/ that are a string or a tuple/list of strings, by name."""
    found: dict[str, set[str]] = {}
    for _, text in sources():
        for node in ast.parse(text).body:
            target = value = None
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            if isinstance(target, ast.Name) and value is not None:
                strings = _literal_strings(value)
                if strings is not None:
                    found.setdefault(target.id, set()).update(strings)
    return found


def _literal_strings(node: ast.expr) -> set[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
    ):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)}
    return None


def _is_environ(node: ast.expr) -> bool:
    """``os.environ``, or a mapping standing for it (``env``, ``environ``, ``self._environment``)."""
    return bool(_ENVIRON.search(ast.unparse(node).lstrip("_").replace("._", ".")))


@dataclass
class _Scan:
    names: set[str]
    unresolved: list[str]


def environment_variables() -> _Scan:
    """Every environment variable src/ names: CRONBASE_* in any string, and the key of every
    environment access (``os.environ.get(K)``, ``os.getenv(K)``, ``os.environ[K]``,
    ``K in os.environ``, ``envvar=K``), K resolved through constants and loops over them."""
    constants = _constants()
    scan = _Scan(set(), [])
    for path, text in sources():
        tree = ast.parse(text)
        for string in _strings(tree):
            scan.names.update(_OWN_VARIABLE.findall(string))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            for key in _environment_keys(node):
                values = _resolve(key, parents, constants)
                if values is None:
                    where = f"{path.relative_to(ROOT)}:{key.lineno}"
                    scan.unresolved.append(f"{where}: {ast.unparse(key)}")
                else:
                    scan.names.update(values)
    return scan


def _strings(tree: ast.Module) -> Iterator[str]:
    """The string literals of a module (f-strings' literal parts too), docstrings left out: they
    may name a constant (the Django migrations' CRONBASE_VERSION) as well as a variable."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        is_string = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_string and id(node) not in docstrings:
            yield node.value


def _environment_keys(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and node.args:
            is_read = func.attr in ("get", "pop", "setdefault") and _is_environ(func.value)
            if is_read or (func.attr == "getenv" and ast.unparse(func.value) == "os"):
                yield node.args[0]
        for keyword in node.keywords:
            if keyword.arg == "envvar":
                yield keyword.value
    elif isinstance(node, ast.Subscript) and _is_environ(node.value):
        yield node.slice
    elif (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.In | ast.NotIn)
        and _is_environ(node.comparators[0])
    ):
        yield node.left


def _resolve(
    key: ast.expr, parents: dict[ast.AST, ast.AST], constants: dict[str, set[str]]
) -> set[str] | None:
    strings = _literal_strings(key)
    if strings is not None:
        return strings
    if not isinstance(key, ast.Name):
        return None
    # A loop (or comprehension) variable: the values of what it runs over.
    node: ast.AST | None = key
    while node is not None:
        loops: list[ast.For | ast.comprehension] = []
        if isinstance(node, ast.For):
            loops = [node]
        elif isinstance(node, ast.GeneratorExp | ast.ListComp | ast.SetComp | ast.DictComp):
            loops = list(node.generators)
        for loop in loops:
            if isinstance(loop.target, ast.Name) and loop.target.id == key.id:
                if isinstance(loop.iter, ast.Tuple | ast.List):
                    values: set[str] = set()
                    for element in loop.iter.elts:
                        resolved = _resolve(element, parents, constants)
                        if resolved is None:
                            return None
                        values |= resolved
                    return values
                return _resolve(loop.iter, parents, constants)
        node = parents.get(node)
    return constants.get(key.id)


# The first column of the environment table: `NAME`, or `NAME` (or `name`), or `A`, `B`, `C`.
_TABLE_ROW = re.compile(r"^\|([^|]*)\|", re.MULTILINE)


def documented_variables(text: str) -> set[str]:
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for cell in _TABLE_ROW.findall(section):
        names.update(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell))
    return names


def missing_variables(text: str) -> list[str]:
    return sorted(environment_variables().names - documented_variables(text))


def test_every_environment_variable_is_in_settings() -> None:
    scan = environment_variables()
    assert not scan.unresolved, (
        f"environment accesses whose key the scan cannot name: {scan.unresolved}; use a constant"
    )
    # The scan finds what it should: cronbase's own, and others read by key.
    assert {"CRONBASE_DATABASE_URL", "DATABASE_URL", "PROMETHEUS_MULTIPROC_DIR"} <= scan.names
    assert {"CRONBASE_DASHBOARD_TOKEN", "CRONBASE_SUPERVISOR_PIPE", "COLUMNS"} <= scan.names
    missing = missing_variables(page("settings.md"))
    assert not missing, f"docs/reference/settings.md's environment table lacks {missing}"


def test_settings_names_no_variable_the_code_does_not_read() -> None:
    stale = sorted(documented_variables(page("settings.md")) - environment_variables().names)
    assert not stale, f"settings.md documents environment variables src/ never names: {stale}"


def test_settings_has_every_option() -> None:
    """App(...), @app.task, defer, schedule, worker and retention options, and Django's keys."""
    from cronbase.db.database import DatabaseOptions
    from cronbase.enqueue.options import TaskOptions
    from cronbase.operations.retention import Retention
    from cronbase.schedule.scheduler import ScheduleOptions
    from cronbase.worker.options import WorkerOptions

    text = page("settings.md")
    expected = {
        "App": set(DatabaseOptions.__annotations__) | {"database_url"},
        "task": set(TaskOptions.__annotations__),
        "defer": set(inspect.signature(cronbase.Task.configure).parameters) - {"self"},
        "schedule": set(ScheduleOptions.__annotations__),
        "worker": set(inspect.signature(WorkerOptions.build).parameters) - {"cls"},
        "retention": set(inspect.signature(Retention.__init__).parameters) - {"self"},
        "Django": _django_settings_keys(),
    }
    missing = {
        what: sorted(name for name in names if f"`{name}`" not in text)
        for what, names in expected.items()
    }
    assert not any(missing.values()), f"settings.md lacks options: {missing}"


def _django_settings_keys() -> set[str]:
    """settings.CRONBASE's keys and the tasks backend's OPTIONS, read without importing Django."""
    keys: set[str] = set()
    for module, names in (
        ("config.py", ("DEFAULTS",)),
        ("options.py", ("TASK_OPTIONS", "SCHEDULE_OPTIONS")),
    ):
        tree = ast.parse((SRC / "contrib" / "django" / module).read_text())
        for node in tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and target.id in names:
                assert isinstance(node, ast.AnnAssign)
                assert isinstance(node.value, ast.Dict)
                keys.update(ast.literal_eval(k) for k in node.value.keys if k is not None)
    assert {"APP", "DATABASE", "max_attempts", "cron"} <= keys
    return keys


# -- metrics ---------------------------------------------------------------------------------------

_METRIC_TYPES = {
    "Counter": "counter",
    "CounterMetricFamily": "counter",
    "_counter": "counter",  # WorkerMetrics._counter: a Counter on the worker's registry
    "Gauge": "gauge",
    "GaugeMetricFamily": "gauge",
    "Histogram": "histogram",
    "HistogramMetricFamily": "histogram",
    "DurationHistogram": "histogram",
    "Summary": "summary",
    "SummaryMetricFamily": "summary",
    "Info": "info",
    "InfoMetricFamily": "info",
}


# cronbase's own metric makers (operations/metrics.py), called with a metric's name.
_HELPERS = {"_counter", "DurationHistogram"}


def registered_metrics() -> tuple[dict[str, str], list[str]]:
    """Every metric src/ makes, by the name Prometheus shows (counters with ``_total``), with its
    type; and the constructor calls whose name is not a literal (the scan cannot read them)."""
    metrics: dict[str, str] = {}
    unreadable: list[str] = []
    for path, text in sources():
        tree = ast.parse(text)
        # Names of prometheus_client's constructors imported here (collections.Counter is not).
        imported = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("prometheus_client")
            for alias in node.names
        }
        for node, forwarding in _calls(tree, forwarding=False):
            func = node.func
            if isinstance(func, ast.Attribute):
                called = func.attr
                is_metric = called in _HELPERS or ast.unparse(func.value).startswith(
                    "prometheus_client"
                )
            else:
                called = getattr(func, "id", "")
                is_metric = called in imported or called in _HELPERS
            kind = _METRIC_TYPES.get(called)
            if kind is None or not is_metric or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                # A metric helper passing on its own argument (WorkerMetrics._counter's name,
                # DurationHistogram's self.name): the calls of the helper carry the literal.
                if not forwarding:
                    unreadable.append(f"{path.relative_to(ROOT)}:{node.lineno}")
                continue
            name = first.value
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            metrics[name] = kind
    return metrics, unreadable


def _calls(node: ast.AST, forwarding: bool) -> Iterator[tuple[ast.Call, bool]]:
    """Every call under ``node``, and whether it is inside a metric helper (a function or
    class named as one of the constructors, such as ``_counter`` or ``DurationHistogram``)."""
    for child in ast.iter_child_nodes(node):
        inside = forwarding
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inside = forwarding or child.name in _METRIC_TYPES
        if isinstance(child, ast.Call):
            yield child, inside
        yield from _calls(child, inside)


_METRIC_ROW = re.compile(r"^\| `(cronbase_[a-z0-9_]+)` \| (\w+) \|", re.MULTILINE)


def documented_metrics(text: str) -> dict[str, str]:
    return dict(_METRIC_ROW.findall(text))


def metric_problems(text: str) -> list[str]:
    registered, _ = registered_metrics()
    documented = documented_metrics(text)
    problems = [
        f"{name} ({kind}) is missing" for name, kind in registered.items() if name not in documented
    ]
    problems += [
        f"{name} is a {registered[name]}, the page says {kind}"
        for name, kind in documented.items()
        if name in registered and registered[name] != kind
    ]
    problems += [
        f"{name} is not registered anywhere" for name in documented if name not in registered
    ]
    return sorted(problems)


def test_every_metric_is_in_metrics_page() -> None:
    registered, unreadable = registered_metrics()
    assert not unreadable, f"metrics whose name is not a literal string: {unreadable}"
    assert {
        "cronbase_jobs_claimed_total",
        "cronbase_job_duration_seconds",
        "cronbase_queue_jobs",
        "cronbase_supervisor_restarts_total",
    } <= set(registered)
    problems = metric_problems(page("metrics.md"))
    assert not problems, f"docs/reference/metrics.md: {problems}"


# -- schema ----------------------------------------------------------------------------------------


def snapshot_relations() -> tuple[dict[str, list[str]], set[str]]:
    """The migrated schema as tests/integration/schema_snapshot.txt records it (a test there
    keeps it equal to the migrations' result): columns per table or view, and the partitions."""
    columns: dict[str, list[str]] = {}
    partitions: set[str] = set()
    for line in SNAPSHOT.read_text().splitlines():
        kind, _, rest = line.partition(": ")
        fields = [f.strip() for f in rest.split("|")]
        if kind == "column":
            columns.setdefault(fields[0], []).append(fields[1])
        elif kind == "partitioned" and fields[2]:  # a partition's bound: FOR VALUES / DEFAULT
            partitions.add(fields[0])
    return columns, partitions


def schema_problems(text: str, columns: dict[str, list[str]], partitions: set[str]) -> list[str]:
    """Each table and view has a ``### name`` section naming every column; a partition without
    a section of its own is at least named."""
    sections = {
        part.split("\n", 1)[0].strip(): part
        for part in re.split(r"^### ", text, flags=re.MULTILINE)[1:]
    }
    problems = []
    for relation, names in sorted(columns.items()):
        section = sections.get(relation)
        if section is None:
            if relation not in partitions:
                problems.append(f"{relation}: no '### {relation}' section")
            elif f"`{relation}`" not in text:
                problems.append(f"{relation}: the partition is not named")
            continue
        absent = [name for name in names if f"`{name}`" not in section]
        if absent:
            problems.append(f"{relation}: columns {absent} are not in its section")
    return problems


def test_every_table_view_and_column_is_in_schema_page() -> None:
    columns, partitions = snapshot_relations()
    assert {"jobs", "jobs_all", "job_attempts_all", "workers"} <= set(columns)
    assert "jobs_history_dead_default" in partitions
    problems = schema_problems(page("schema.md"), columns, partitions)
    assert not problems, f"docs/reference/schema.md: {problems}"


def test_schema_page_names_no_table_that_is_gone() -> None:
    columns, _ = snapshot_relations()
    headings = re.findall(r"^### (\w+)$", page("schema.md"), flags=re.MULTILINE)
    stale = [name for name in headings if name not in columns]
    assert not stale, f"schema.md has sections for relations the schema lacks: {stale}"


# -- the API pages ---------------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n|\n(?=    ))*)", re.MULTILINE)


def directives(text: str) -> dict[str, str]:
    """mkdocstrings' ``::: path`` directives of a page, each with its options' text."""
    return {m.group(1): m.group(2) for m in _DIRECTIVE.finditer(text)}


def lookup(path: str) -> Any:
    """What a directive's path names, as the reference's griffe extension finds it."""
    found = griffe_roles.lookup(path)
    assert found is not None, f"nothing is at {path}"
    return found


def unrendered(module: Any, text: str) -> list[str]:
    """The names of ``module.__all__`` that no directive of ``text`` renders."""
    rendered = [lookup(path) for path in directives(text)]
    return [
        name for name in module.__all__ if not any(obj is getattr(module, name) for obj in rendered)
    ]


def test_api_page_renders_every_public_name() -> None:
    assert len(cronbase.__all__) > 50
    missing = unrendered(cronbase, page("api.md"))
    assert not missing, f"docs/reference/api.md has no '::: cronbase.NAME' for {missing}"


def test_testing_page_renders_every_public_name() -> None:
    missing = unrendered(cronbase.testing, page("testing.md"))
    assert not missing, f"docs/reference/testing.md renders no {missing}"
    from cronbase.testing import pytest_plugin

    fixtures = [
        name
        for name, value in vars(pytest_plugin).items()
        if name.startswith("cronbase_") and callable(value)
    ]
    options = directives(page("testing.md"))["cronbase.testing.pytest_plugin"]
    assert fixtures
    assert all(name in options for name in fixtures), (fixtures, options)


def _module_all(relative: str) -> list[str]:
    """A module's ``__all__``, read from its source (Django's modules need settings to import)."""
    for node in ast.parse((SRC / relative).read_text()).body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "__all__":
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{relative} has no __all__")


def _rendered_names(text: str) -> set[str]:
    """What the directives of a page render: each path's last name, and a module's members."""
    names = set()
    for path, options in directives(text).items():
        names.add(path.rsplit(".", 1)[-1])
        members = re.search(r"members: \[([^\]]*)\]", options)
        if members:
            names.update(m.strip() for m in members.group(1).split(","))
    return names


@pytest.mark.parametrize(
    ("page_name", "module_path", "unrenderable"),
    [
        ("django.md", "contrib/django/__init__.py", {"app"}),  # a lazy module attribute
        ("django.md", "contrib/django/tasks.py", set()),
        ("opentelemetry.md", "contrib/opentelemetry.py", set()),
        ("celery.md", "contrib/celery/__init__.py", set()),
    ],
)
def test_contrib_pages_render_every_public_name(
    page_name: str, module_path: str, unrenderable: set[str]
) -> None:
    text = page(page_name)
    public = set(_module_all(module_path))
    missing = sorted(public - unrenderable - _rendered_names(text))
    assert not missing, f"docs/reference/{page_name} renders no {missing}"
    assert all(f"`{name}`" in text or name in text for name in unrenderable)


# -- the command line ------------------------------------------------------------------------------


def click_directive(text: str) -> dict[str, str]:
    match = re.search(r"^::: mkdocs-click\n((?:    :\w+: .*\n)+)", text, flags=re.MULTILINE)
    assert match, "no '::: mkdocs-click' directive"
    return dict(re.findall(r"^    :(\w+): (.*)$", match.group(1), flags=re.MULTILINE))


def command_paths(command: click.Command, prefix: str) -> Iterator[str]:
    """Every command's path (``cronbase jobs list``), nested groups included, hidden ones not."""
    yield prefix
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                yield from command_paths(sub, f"{prefix} {name}")


def rendered_cli(options: dict[str, str]) -> str:
    """The Markdown mkdocs-click makes of the directive, as the site's build does."""
    from mkdocs_click._extension import replace_command_docs

    return "\n".join(replace_command_docs(has_attr_list=True, **options))


def cli_problems(text: str) -> list[str]:
    options = click_directive(text)
    command = getattr(importlib.import_module(options["module"]), options["command"])
    if command is not cli:
        return [
            f"the directive renders {options['module']}:{options['command']}, not the root group"
        ]
    if options.get("prog_name") != "cronbase":
        return [f"prog_name is {options.get('prog_name')!r}, not 'cronbase'"]
    rendered = rendered_cli(options)
    headings = set(re.findall(r"^#+ (.+?)\s*(?:\{.*\})?$", rendered, flags=re.MULTILINE))
    problems = [f"no heading for {p}" for p in command_paths(cli, "cronbase") if p not in headings]
    if "Sentinel." in rendered:
        # mkdocs-click's table style prints click 8.3's UNSET defaults as Sentinel.UNSET.
        problems.append("the rendered options show Sentinel.UNSET: use :style: plain")
    return problems


def test_cli_page_renders_every_command() -> None:
    paths = list(command_paths(cli, "cronbase"))
    assert {"cronbase worker", "cronbase jobs list", "cronbase queues weight"} <= set(paths)
    problems = cli_problems(page("cli.md"))
    assert not problems, f"docs/reference/cli.md: {problems}"


# -- statements and the index ----------------------------------------------------------------------


def test_statements_page_includes_the_checked_in_file() -> None:
    text = page("statements.md")
    assert re.search(r'```sql\n--8<-- "statements\.sql"\n```', text), "no snippet of statements.sql"
    assert (ROOT / "docs" / "statements.sql").read_text().count("-- name: ") > 50


def test_index_links_every_reference_page() -> None:
    text = page("index.md")
    pages = sorted(p.name for p in REFERENCE.glob("*.md") if p.name != "index.md")
    unlinked = [name for name in pages if f"]({name})" not in text]
    assert not unlinked, f"docs/reference/index.md does not link {unlinked}"


# -- the checks fail when a page leaves something out ----------------------------------------------


def _without_line(text: str, needle: str) -> str:
    lines = text.splitlines(keepends=True)
    kept = [line for line in lines if needle not in line]
    assert len(kept) < len(lines), f"{needle!r} is not on the page"
    return "".join(kept)


def test_the_checks_fail_on_pages_that_leave_something_out() -> None:
    settings = _without_line(page("settings.md"), "| `CRONBASE_POOLER` |")
    assert missing_variables(settings) == ["CRONBASE_POOLER"]

    metrics = _without_line(page("metrics.md"), "| `cronbase_queue_paused` |")
    assert metric_problems(metrics) == ["cronbase_queue_paused (gauge) is missing"]
    mistyped = page("metrics.md").replace(
        "| `cronbase_jobs_claimed_total` | counter |", "| `cronbase_jobs_claimed_total` | gauge |"
    )
    assert metric_problems(mistyped) == [
        "cronbase_jobs_claimed_total is a counter, the page says gauge"
    ]

    columns, partitions = snapshot_relations()
    schema = _without_line(page("schema.md"), "| `last_seen_at` |")
    assert schema_problems(schema, columns, partitions) == [
        "workers: columns ['last_seen_at'] are not in its section"
    ]
    no_view = page("schema.md").replace("### job_attempts_all", "### attempts_view")
    assert "job_attempts_all: no '### job_attempts_all' section" in schema_problems(
        no_view, columns, partitions
    )

    api = page("api.md").replace("::: cronbase.Snooze\n", "")
    assert unrendered(cronbase, api) == ["Snooze"]
    testing = page("testing.md").replace(
        "::: cronbase.testing.inline.inline", "::: cronbase.testing.inline"
    )
    assert unrendered(cronbase.testing, testing) == ["inline"]

    wrong_root = page("cli.md").replace(":command: cli", ":command: jobs")
    assert cli_problems(wrong_root) == [
        "the directive renders cronbase.cli:jobs, not the root group"
    ]
    shallow = rendered_cli({**click_directive(page("cli.md"))})
    assert "#### cronbase jobs list" in shallow
