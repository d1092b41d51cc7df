"""A non-editable install (`pip install .`) gives a working `taso` and the three packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_non_editable_install_runs(tmp_path: Path) -> None:
    source, target = tmp_path / "src", tmp_path / "site"
    # build from a copy: setuptools writes build/ and egg-info into the tree it builds
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "out", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True)
    for package in ("taso_py", "taso_py/verifier", "taso_py/codegen", "taso_py/codegen/backends/c"):
        assert (target / package / "__init__.py").is_file()
    # no generic top-level packages that would collide with others of the same name
    assert not (target / "verifier").exists() and not (target / "codegen").exists()
    assert (target / "taso_py" / "ops" / "conv.py").is_file()
    env = {**os.environ, "PYTHONPATH": str(target)}
    example = ROOT / "examples" / "inception_v3_small.onnx"
    # run from an unrelated directory so the checkout itself is not importable
    out = subprocess.run([str(target / "bin" / "taso"), "info", str(example), "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True)
    assert '"opaque_nodes": 0' in out.stdout
    version = subprocess.run([sys.executable, "-c", "import taso_py; print(taso_py.__file__)"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, check=True)
    assert version.stdout.startswith(str(target))
