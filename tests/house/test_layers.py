"""Who may import whom (ARCHITECTURE.md), asserted from every module's imports (ast).

Each row of ARCHITECTURE.md's table is one entry of LAYERS; the standard library
and the layer's own package are always allowed. Imports inside functions count.

No import cycles among the project's own modules either: an import inside a
function (or under TYPE_CHECKING) counts like one at the top, since deferring it
only hides the cycle until that function runs. An edge goes to the module named
(and `from pkg import mod` to pkg.mod as well, when that is a module); importing
a submodule runs its package's __init__ first, but that edge is left out: a
package whose __init__ gathers its submodules (conformance.checks) would
otherwise be a cycle with each of them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# layer -> the top-level modules it may import (besides the standard library and itself)
LAYERS: dict[str, set[str]] = {
    "contract": {
        "yaml",
        "openapi_spec_validator",
        "fastjsonschema",
        "jsonschema_rs",
        "quicktok",
        "zstandard",
        "numpy",
    },
    "api_server": {
        "contract",
        "flask",
        "werkzeug",
        "gunicorn",
        "gevent",
        "redis",
        "orjson",
        "prometheus_client",
    },
    "mock_server": {"contract", "api_server", "flask", "numpy", "prometheus_client"},
    "reference_impl": {"contract", "api_server", "orjson"},  # no httpx: wire.py is its one client
    "conformance": {
        "contract",
        "httpx",
        "schemathesis",
        "rich",
        "jsonschema",
        "zstandard",
        "yaml",
        "pytest",
    },
}
# Single modules with more than their layer (each said in ARCHITECTURE.md).
EXTRA: dict[str, set[str]] = {
    "reference_impl/vllm_server.py": {"vllm", "vllm_lens"},  # runs in vLLM's own interpreter
    "reference_impl/wire.py": {
        "httptools",
        "gevent",
    },  # vLLM's answers parsed in C; gevent's loop timer
    "reference_impl/front.py": {"yaml"},  # ingress-nginx's manifests (pyyaml: contract's own)
    "conformance/golden/lens.py": {"numpy"},  # writes steering vectors' wire form
    # schemathesis's transport (its 429s sent again); the ledger's negative bodies validated
    "conformance/checks/schema.py": {"requests", "jsonschema_rs"},
    "conformance/wire/sdk.py": {
        "openai",
        "httpx2",
    },  # the SDK whose headers the gate's requests carry
    "mock_server/testing.py": {
        "httpx",
        "anyio",
        "pytest",
        "werkzeug",
    },  # client developers' transports, fixture and in-process server (Flask's own)
    "mock_server/cassettes/cassette.py": {"httpx"},  # --record's client to the upstream
    "mock_server/cassettes/tape.py": {
        "fastjsonschema"
    },  # a cassette's lines against x-mock-cassette's schemas
    "conformance/spec/metrics.py": {"prometheus_client"},  # its parser reads a /metrics scrape
    "conformance/checks/metrics.py": {"prometheus_client"},
    "conformance/wire/rawhttp.py": {"h11"},  # answers read as a client reads them
    "conformance/cli/main.py": {"hypothesis"},  # its caches kept out of the working directory
}
# conformance reads the spec through contract, never the core's validators.
CONFORMANCE_CONTRACT_NAMES = {"spec", "Spec", "ModelInfo", "SpecError"}
# contract.version: the versions reports record; contract.tokens: the model's tokenizer, which
# counts a plain answer's text (the gate's meter: conformance/wire/meter.py)
CONFORMANCE_CONTRACT_MODULES = {"contract.spec", "contract.version", "contract.tokens"}
GENERATOR_CONTRACT_MODULES = {"contract.spec", "contract.tensors"}  # encode_tensor
# golden/cheap.py (offline, like generate.py) asks the core which refusals stay the same when
# cheap; generate.py asks it whether each accepted case, and each rule's refused example, is so
GENERATOR_CONTRACT_NAMES = {
    "conformance/golden/cheap.py": {"ApiError", "Contract"},
    "conformance/golden/generate.py": {"ApiError", "Contract"},
}
PYTEST_MODULES = {"conformance/pytest_plugin.py", "conformance/pytest_suite.py"}


def imports(path: Path) -> Iterator[tuple[str, list[str]]]:
    """(module, the names imported from it) for every absolute import in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [a.name for a in node.names]


def modules(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the project's modules it imports (see the module docstring for what counts)."""
    paths = {module_name(p): p for layer in LAYERS for p in modules(layer)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for module, names in imports(path):
            targets |= ({module} | {f"{module}.{n}" for n in names}) & paths.keys()
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_layer_imports_only_what_its_row_allows(layer: str) -> None:
    assert modules(layer), layer
    wrong = []
    for path in modules(layer):
        rel = path.relative_to(ROOT).as_posix()
        allowed = LAYERS[layer] | EXTRA.get(rel, set()) | STDLIB | {layer}
        for module, _ in imports(path):
            if module.split(".")[0] not in allowed:
                wrong.append(f"{rel}: {module}")
    assert wrong == []


def test_the_reference_never_imports_the_mock() -> None:
    """No fault, no simulated latency in a deployment of the real API: the code is not there."""
    found = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in modules("reference_impl")
        for m, _ in imports(p)
        if m.split(".")[0] == "mock_server"
    ]
    assert found == []


def test_the_api_server_knows_no_engine() -> None:
    """api_server serves both engines: it imports neither."""
    found = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in modules("api_server")
        for m, _ in imports(p)
        if m.split(".")[0] in ("mock_server", "reference_impl")
    ]
    assert found == []


def test_conformance_reads_only_spec_data_from_contract() -> None:
    wrong = []
    for path in modules("conformance"):
        rel = path.relative_to(ROOT).as_posix()
        submodules = (
            GENERATOR_CONTRACT_MODULES
            if rel == "conformance/golden/lens.py"
            else CONFORMANCE_CONTRACT_MODULES
        )
        for module, names in imports(path):
            allowed = CONFORMANCE_CONTRACT_NAMES | GENERATOR_CONTRACT_NAMES.get(rel, set())
            if module == "contract" and not set(names) <= allowed:
                wrong.append(f"{rel}: from contract import {names}")
            elif module.startswith("contract.") and module not in submodules:
                wrong.append(f"{rel}: {module}")
            elif module.split(".")[0] == "pytest" and rel not in PYTEST_MODULES:
                wrong.append(f"{rel}: pytest outside the plugin")
    assert wrong == []


def test_the_core_imports_no_web_framework_http_client_or_vllm() -> None:
    banned = {
        "flask",
        "werkzeug",
        "gunicorn",
        "httpx",
        "requests",
        "vllm",
        "vllm_lens",
        "torch",
        "api_server",
        "mock_server",
        "reference_impl",
        "conformance",
    }
    found = [
        f"{p.relative_to(ROOT)}: {m}"
        for p in modules("contract")
        for m, _ in imports(p)
        if m.split(".")[0] in banned
    ]
    assert found == []


def test_no_import_cycles_among_the_projects_modules() -> None:
    graph = import_graph()
    assert {"conformance.cli.main", "conformance.engine.diff", "api_server.budget"} <= graph.keys()
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_through_three_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({**graph, "c": {"d"}}) == []


# Where a package may call contract.spec(): its entry points (the commands' mains, the
# --version line, the developers' golden scripts) and the app factories' default `api`.
# Everything below them reads the spec it is handed (create_app's, RunConfig.api, ctx.api).
SPEC_CALLS_ALLOWED = {
    ("api_server/app.py", "create_app"),
    ("mock_server/server.py", "create_app"),
    ("mock_server/testing.py", "reset_fail_counts"),  # LiveMock's: the spec its process reads
    ("reference_impl/__main__.py", "main"),
    ("contract/version.py", "version_line"),
    ("conformance/cli/main.py", "main"),
    ("conformance/cli/main.py", "diff_main"),
    ("conformance/pytest_suite.py", "run_config"),  # the pytest plugin's entry: its options' spec
    ("conformance/golden/cheap.py", "__main__"),
    ("conformance/golden/record.py", "corpus"),
    ("conformance/golden/record.py", "record"),
    ("conformance/golden/generate.py", "generate"),
}
PACKAGES = ("contract", "api_server", "mock_server", "reference_impl", "conformance")


def spec_calls(path: Path) -> Iterator[tuple[str, int]]:
    """(the enclosing function, or __main__ / <module>, line) of every call of spec()."""

    def visit(node: ast.AST, where: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = child.name
            elif isinstance(child, ast.If) and "__main__" in ast.unparse(child.test):
                inner = "__main__"
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, (ast.Name, ast.Attribute))
                and (getattr(child.func, "id", None) or getattr(child.func, "attr", None)) == "spec"
            ):
                yield where, child.lineno
            yield from visit(child, inner)

    yield from visit(ast.parse(path.read_text(), str(path)), "<module>")


def test_every_package_reads_the_global_spec_only_at_its_entry_points() -> None:
    found = [
        f"{rel}:{line} in {where}"
        for package in PACKAGES
        for path in modules(package)
        for rel in [path.relative_to(ROOT).as_posix()]
        for where, line in spec_calls(path)
        if (rel, where) not in SPEC_CALLS_ALLOWED
    ]
    assert found == []


def test_spec_calls_are_found_at_module_level_and_in_functions(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "X = spec().caps\ndef f():\n    return contract.spec()\nif __name__ == '__main__':\n    spec()\n"
    )
    assert list(spec_calls(source)) == [("<module>", 1), ("f", 3), ("__main__", 5)]


@pytest.mark.parametrize(
    "entry", ["mock_server.__main__", "reference_impl.__main__", "bench.servers.bare_app"]
)
def test_no_servers_entry_imports_prometheus_client_before_it_prepares(entry: str) -> None:
    """api_server/metrics.py's rule: prometheus_client picks its multiprocess mode when first
    imported, so importing a server's entry (before serve.prepare runs) must not import it."""
    code = f"import sys, importlib; importlib.import_module({entry!r}); print('prometheus_client' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (out.returncode, out.stdout.strip()) == (0, "False"), out.stderr[-2000:]


# The gate's own layers, lowest first: a module imports its own layer's and the ones below,
# never one above (ARCHITECTURE.md, "The gate's layers"). The package's top modules (its entry
# points, the pytest plugin) stand above them all.
GATE_LAYERS = (("spec",), ("wire",), ("golden", "engine"), ("checks",), ("reports",), ("cli",))


def gate_rank(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "conformance" or len(parts) < 2:
        raise ValueError(module)
    for rank, names in enumerate(GATE_LAYERS):
        if parts[1] in names:
            return rank
    return len(GATE_LAYERS)  # conformance/__main__.py, pytest_plugin.py, pytest_suite.py


def upward_imports(root: Path) -> list[str]:
    wrong = []
    for path in sorted((root / "conformance").rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for module, names in imports(path):
            targets = [module] if module != "conformance" else [f"conformance.{n}" for n in names]
            for target in targets:
                if target.startswith("conformance.") and gate_rank(target) > gate_rank(name):
                    wrong.append(f"{path.relative_to(root)}: {target}")
    return wrong


def test_the_gates_layers_import_downwards_only() -> None:
    assert upward_imports(ROOT) == []


def test_an_upward_import_of_the_gate_is_found(tmp_path: Path) -> None:
    for rel, text in {
        "conformance/wire/x.py": "from conformance.engine.results import Outcome\n",
        "conformance/engine/y.py": "def f():\n    from conformance.checks import REGISTRY\n",
        "conformance/reports/z.py": "from conformance import cli\n",
        "conformance/checks/ok.py": "from conformance.wire import sse\nimport conformance.spec\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert upward_imports(tmp_path) == [
        "conformance/engine/y.py: conformance.checks",
        "conformance/reports/z.py: conformance.cli",
        "conformance/wire/x.py: conformance.engine.results",
    ]


def test_no_test_module_imports_another() -> None:
    """What tests share lives in tests/support/ (or gallery/, the broken servers): a test
    module imported by another runs its module-level set-up twice and hides what it shares."""
    wrong = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for module, _ in imports(path)
        if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert wrong == []


def test_every_test_room_has_its_conftest() -> None:
    """tests/conftest.py's rule: a room's own fixtures are in its conftest.py."""
    rooms = {p.parent for p in (ROOT / "tests").rglob("test_*.py")}
    assert (
        rooms
        and sorted(str(r.relative_to(ROOT)) for r in rooms if not (r / "conftest.py").exists())
        == []
    )


# What makes a class a server a test stands up: a base of a server's kind, or a WSGI app's call.
SERVER_BASES = {"Engine", "FakeEngine", "UpstreamServer", "BaseHTTPRequestHandler", "HTTPTransport"}


def servers_in_test_modules(root: Path) -> list[str]:
    """Module-level classes of test modules that serve: a WSGI app (`__call__(environ,
    start_response)`), an engine, an upstream, a request handler or a transport."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {
                b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases
            }
            wsgi = any(
                isinstance(f, ast.FunctionDef)
                and f.name == "__call__"
                and [a.arg for a in f.args.args[1:3]] == ["environ", "start_response"]
                for f in node.body
            )
            if wsgi or bases & SERVER_BASES:
                found.append(f"{path.relative_to(root)}: {node.name}")
    return found


def test_the_fake_servers_live_in_the_gallery_or_support() -> None:
    """A test module holds tests: a server it stands up is in gallery/ (wrong on purpose) or
    tests/support (right), where the next test finds it."""
    assert servers_in_test_modules(ROOT / "tests") == []


def test_a_server_in_a_test_module_is_found(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "class App:\n    def __call__(self, environ, start_response):\n        return []\n\n"
        "class E(api_server.Engine):\n    pass\n\nclass Plain:\n    pass\n"
    )
    assert servers_in_test_modules(tmp_path) == ["test_x.py: App", "test_x.py: E"]


def reads_of_tests(folder: Path) -> set[str]:
    """The modules of tests/ that the modules under `folder` import."""
    return {
        module
        for path in sorted(folder.rglob("*.py"))
        for module, _ in imports(path)
        if module == "tests" or module.startswith("tests.")
    }


def test_bench_and_the_gallery_import_nothing_of_tests() -> None:
    """The power benches measure the gate against the gallery of wrong servers (gallery/), which
    the tests hold each check to: both read it, and neither bench nor the gallery reads tests/."""
    assert (reads_of_tests(ROOT / "bench"), reads_of_tests(ROOT / "gallery")) == (set(), set())


def test_a_read_of_tests_is_found(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("from tests.support.wsgi import serve\nimport gallery.wrong\n")
    assert reads_of_tests(tmp_path) == {"tests.support.wsgi"}


def group_imports(root: Path) -> list[str]:
    """Imports from one check group into another (conformance/checks/__init__.py: what groups
    share lives in helpers/, every group's)."""
    checks = root / "conformance" / "checks"
    wrong = []
    for path in sorted(checks.rglob("*.py")):
        group = path.relative_to(checks).parts[0].removesuffix(".py")
        if group in ("__init__", "helpers"):
            continue
        for module, names in imports(path):
            targets = (
                [f"{module}.{n}" for n in names] if module == "conformance.checks" else [module]
            )
            for target in targets:
                parts = target.split(".")
                inside = parts[:2] == ["conformance", "checks"] and len(parts) > 2
                if inside and parts[2] not in (group, "helpers"):
                    wrong.append(f"{path.relative_to(root)}: {target}")
    return wrong


def test_no_check_group_imports_another() -> None:
    assert group_imports(ROOT) == []


def test_an_import_between_check_groups_is_found(tmp_path: Path) -> None:
    for rel, text in {
        "conformance/checks/usage.py": "from conformance.checks.stream import PROMPTS\n",
        "conformance/checks/auth.py": "def f():\n    from conformance.checks import routes\n",
        "conformance/checks/robust/echo.py": "from conformance.checks.robust.raw import post\n",
        "conformance/checks/effects/x.py": "from conformance.checks.helpers.steer import norm\n",
        "conformance/checks/helpers/y.py": "from conformance.checks.helpers.agree import LOGPROBS\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert group_imports(tmp_path) == [
        "conformance/checks/auth.py: conformance.checks.routes",
        "conformance/checks/usage.py: conformance.checks.stream",
    ]


def test_the_mocks_top_holds_its_wiring_and_its_rooms() -> None:
    """mock_server/'s top is the server's wiring (at most 10 modules); the rest lives in rooms
    (engine/, hook/, cassettes/), each a package that says what it holds."""
    top = sorted(p.name for p in (ROOT / "mock_server").glob("*.py"))
    assert len(top) <= 10, top
    rooms = sorted(p.parent.name for p in (ROOT / "mock_server").glob("*/__init__.py"))
    assert rooms == ["cassettes", "engine", "hook"]
    for room in rooms:
        assert ast.get_docstring(
            ast.parse((ROOT / "mock_server" / room / "__init__.py").read_text())
        )


def test_the_registry_is_built_when_first_looked_at_not_on_import() -> None:
    """`import conformance.checks` imports no group's module (nor schemathesis, which the
    schema group's module brings with its global hook); the first look at the registry imports
    them all, and a group's module imported first for a constant of its own keeps its place."""
    code = (
        "import sys\n"
        "import conformance.checks as c\n"
        "loaded = [g for g in c.GROUPS if f'conformance.checks.{g}' in sys.modules]\n"
        "print(loaded, 'schemathesis' in sys.modules)\n"
        "import conformance.checks.isolation\n"
        "groups = list(dict.fromkeys(check.group for check in c.REGISTRY))\n"
        "print(groups == list(c.GROUPS), 'schemathesis' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.splitlines() == ["[] False", "True True"], out.stderr
