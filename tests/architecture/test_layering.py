"""The layers of docs/ARCHITECTURE.md, enforced: no module imports a layer above its own,
and every module says what it owns in a docstring."""
import ast
import os

import pytest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src", "streamlog")

# Lowest first. A module may import its own layer and the ones before it.
LAYERS = [
    ("shared", ["streamlog.errors", "streamlog.structs", "streamlog.parsing",
                "streamlog.re2j"]),
    ("native", ["streamlog.native", "streamlog._native", "streamlog.timer",
                "streamlog.timer_py"]),
    ("storage", ["streamlog.storage"]),
    ("broker", ["streamlog.broker"]),
    ("coordination", ["streamlog.coordinator"]),
    # The Kafka wire-protocol server: over the broker and coordinators, never the client
    # layer (Database.serve starts one).
    ("server", ["streamlog.server"]),
    # Brokers in one process, replicated (issue: the cluster): runs a server per broker.
    ("cluster", ["streamlog.cluster"]),
    ("client", ["streamlog.client"]),
    ("integrations", ["streamlog.cli", "streamlog.testing", "streamlog.progress"]),
]
# Public facades re-export lower layers; inside the library only the integrations (which
# are meant to use nothing but the public API) may import them.
FACADES = {"streamlog", "streamlog.assignors"}
INTEGRATIONS = len(LAYERS) - 1


def layer_of(module):
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def modules():
    for dirpath, _, names in os.walk(SRC):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.dirname(SRC))[:-3].replace(os.sep, ".")
                yield rel.removesuffix(".__init__"), path


def imports(module, path):
    with open(path, encoding="utf-8") as f:
        return list(imports_in_source(module, f.read(), path.endswith("__init__.py")))


def imports_in_source(module, source, is_package=False):
    """Every streamlog module named by an import statement, relative imports resolved."""
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("streamlog"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                target = ".".join(parts + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("streamlog"):
                continue
            if node.module is None:  # `from . import x`: x is a module of the package
                yield from (f"{target}.{a.name}" for a in node.names)
            else:
                yield target


ALL = sorted(modules())


@pytest.mark.parametrize("module,path", ALL, ids=[m for m, _ in ALL])
def test_no_upward_imports(module, path):
    if module in FACADES:
        return
    mine = layer_of(module)
    assert mine is not None, f"{module} belongs to no layer; add it to LAYERS"
    for target in imports(module, path):
        theirs = layer_of(target)
        if theirs is None and target in FACADES:
            assert mine == INTEGRATIONS, f"{module} imports the facade {target}"
            continue
        assert theirs is None or theirs <= mine, (
            f"{module} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]})")


@pytest.mark.parametrize("module,path", ALL, ids=[m for m, _ in ALL])
def test_every_module_has_a_docstring(module, path):
    tree = ast.parse(open(path, encoding="utf-8").read())
    doc = ast.get_docstring(tree)
    assert doc and len(doc.split()) >= 4, f"{module} needs a docstring saying what it owns"


def test_the_checker_sees_upward_imports():
    found = list(imports_in_source("streamlog.storage.x",
                                   "from ..client import producer\nfrom . import codec\n"
                                   "import streamlog.broker.purgatory\n"))
    assert found == ["streamlog.client", "streamlog.storage.codec", "streamlog.broker.purgatory"]
    assert layer_of(found[0]) > layer_of("streamlog.storage.x")
    assert layer_of(found[2]) > layer_of("streamlog.storage.x")
