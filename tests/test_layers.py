"""The package's shape: layers that import downward only, no circles, no logic hidden in ``__init__`` files, and
project modules imported at module level (where the layer contract sees them), not inside functions."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shardplan.cli

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDERS = ("core", "contracts", "knowledge", "validators", "tools", "agent", "evals", "cli")
MAX_LOCAL_IMPORTS = 19


def _sources() -> list[Path]:
    return sorted(p for folder in PACKAGE_FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _local_project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each import of a shardplan module inside a function of ``path``."""
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("shardplan")):
                    found.append((node.lineno, lines[node.lineno - 1]))
    return found


def test_project_modules_are_imported_inside_functions_rarely_and_each_time_with_its_reason() -> None:
    local = [(path, line, text) for path in _sources() for line, text in _local_project_imports(path)]
    assert len(local) <= MAX_LOCAL_IMPORTS, [f"{p.relative_to(ROOT)}:{n}" for p, n, _ in local]
    for path, line, text in local:
        above = path.read_text().splitlines()[line - 2]
        assert "#" in text or above.strip().startswith("#"), f"{path.relative_to(ROOT)}:{line} says no reason"


def test_a_local_import_without_a_reason_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from shardplan.errors import InputError\n    return InputError\n")
    assert _local_project_imports(module) == [(2, "    from shardplan.errors import InputError")]


def test_package_init_files_hold_only_their_docstring() -> None:
    for init in (ROOT / folder for folder in PACKAGE_FOLDERS):
        for path in init.rglob("__init__.py"):
            body = ast.parse(path.read_text()).body
            statements = body[1:] if body and isinstance(body[0], ast.Expr) else body
            allowed = [s for s in statements if isinstance(s, ast.Assign) and path == ROOT / "core" / "__init__.py"]
            assert statements == allowed, f"{path.relative_to(ROOT)} holds code beside its docstring"


def test_the_import_contract_holds() -> None:
    """``lint-imports`` (import-linter, configured in pyproject.toml): the layers and no circles at any depth.

    It reads the installed package; an editable install maps the folders through a finder import-linter cannot
    follow, as mypy cannot, so there the README's second command (a regular install) runs it."""
    if "site-packages" not in Path(shardplan.cli.__file__).resolve().parts:
        pytest.skip("editable install: `lint-imports` needs the regular install of the README's second command")
    linter = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert linter is not None, "import-linter is a dev dependency: pip install '.[dev]'"
    result = subprocess.run([linter], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout
