"""The house's shape, checked in CI: no import cycle counting a package and its children
(import-linter's contracts do not see a child importing its own package's `__init__`);
benchmarks/size.py counts it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]


def _size():
    spec = importlib.util.spec_from_file_location("size", PROJECT / "benchmarks" / "size.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_cycle_counting_a_package_and_its_children():
    size = _size()
    assert size.cycles(size.imports(PROJECT / "runner")) == []


def test_the_cycle_check_finds_a_child_that_imports_its_package(tmp_path):
    """The two cycles of issue 40, planted: `pkg/__init__` registers its child, which imports a name
    from `pkg` (cli/__init__ <-> cli/go); a module that imports a sibling through its package (`from
    pkg import other`)."""
    size = _size()
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\nfrom pkg import child\n")
    (pkg / "child.py").write_text("from pkg import X\n")
    assert size.cycles(size.imports(pkg)) == [["pkg", "pkg.child"]]
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "child.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n")
    (pkg / "b.py").write_text("")
    assert size.cycles(size.imports(pkg)) == [["pkg", "pkg.a"]]
    (pkg / "a.py").write_text("def f():\n    import pkg.b as b\n")
    assert size.cycles(size.imports(pkg)) == []
