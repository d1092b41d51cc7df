"""The shipped rule library (rules/ of the repository) installs as the package taso_py.rules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "rules" / "default.json"


def _package_folders() -> set[str]:
    """Every folder with an __init__.py in the three installed trees, as the dotted name it installs under."""
    found = set()
    for top, prefix in (("taso_py", ()), ("verifier", ("taso_py",)), ("codegen", ("taso_py",))):
        for init in (ROOT / top).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join(prefix + init.parent.relative_to(ROOT).parts))
    return found


def test_pyproject_lists_every_package() -> None:
    """pyproject.toml lists packages explicitly (to map rules/ to taso_py.rules); a new one must be added there."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(setuptools["packages"])
    assert _package_folders() - packages == set(), "add these packages to [tool.setuptools] packages"
    assert setuptools["package-dir"] == {"taso_py.rules": "rules", "taso_py.verifier": "verifier",
                                         "taso_py.codegen": "codegen"}
    assert (ROOT / "rules" / "__init__.py").is_file()
    assert "*.json" in setuptools["package-data"]["taso_py.rules"]


@pytest.mark.slow
@pytest.mark.skipif(not DEFAULT.is_file(), reason="rules/default.json has not been generated yet")
def test_non_editable_install_ships_the_library(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "site"
    # build from a copy: setuptools writes build/ and egg-info into the tree it builds
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "out", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True)
    installed = target / "taso_py" / "rules" / "default.json"
    assert installed.is_file()
    assert (target / "taso_py" / "rules" / "README.md").is_file()
    # from an unrelated directory, so the checkout itself is not importable and its rules/ is not found
    probe = ("import json; from taso_py.library.store import default_path, load; "
             "print(json.dumps({'path': str(default_path()), 'rules': len(load())}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert Path(found["path"]) == installed
    assert found["rules"] == len(json.loads(DEFAULT.read_text())["rules"])
