"""The import direction web -> actors -> storage -> svc_engine, and a pure core."""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = ["svc_engine", "storage", "actors", "web"]  # each may import only those before it
FORBIDDEN_IN_ENGINE = {"trio", "lmdb", "cbor2", "quart", "quart_trio", "hypercorn", "httpx",
                       "orjson", "time", "random", "secrets", "asyncio", "socket", "os",
                       "subprocess", "threading", "anyio", "h11", "argon2"}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def _files(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _files("svc_engine"), ids=lambda p: p.name)
def test_engine_imports_only_stdlib_and_attrs(path: pathlib.Path) -> None:
    # idna: pure tables and functions (host names as browsers encode them)
    allowed = set(sys.stdlib_module_names) - FORBIDDEN_IN_ENGINE | {"attrs", "idna",
                                                                     "svc_engine"}
    bad = _imports(path) - allowed
    assert not bad, f"{path.name} imports {sorted(bad)}"


def test_layering_detector_catches_a_forbidden_import(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("import trio\nfrom lmdb import open\n")
    assert {"trio", "lmdb"} <= _imports(f)


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_point_down_only(layer: str) -> None:
    higher = set(LAYERS[LAYERS.index(layer) + 1:])
    for path in _files(layer):
        bad = _imports(path) & higher
        assert not bad, f"{path.relative_to(ROOT)} imports higher layer {sorted(bad)}"


def test_no_grab_bag_modules() -> None:
    for layer in LAYERS:
        for path in _files(layer):
            assert path.stem not in {"utils", "helpers", "common", "misc"}, path
