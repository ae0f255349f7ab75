"""Every package folder ships in the wheel: setuptools lists mapped packages by hand in pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    # An unlisted folder still imports from an editable install but is missing from `pip install .`,
    # which is what the README's first command and CI run.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folder_of = {name: folder for name, folder in config["package-dir"].items()}
    missing = []
    for package, folder in folder_of.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            relative = init.parent.relative_to(ROOT / folder).parts
            name = ".".join((package, *relative))
            if name not in listed:
                missing.append(name)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(set(missing))}"
