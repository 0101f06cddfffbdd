"""The house's shape, checked in CI: no import cycle counting a package and its children
(import-linter's contracts do not see a child importing its own package's `__init__`);
benchmarks/size.py counts it."""

from __future__ import annotations

import importlib.util
import re
import shlex
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


def test_ci_runs_the_readmes_test_command_in_what_the_readme_installs():
    """The README's two lines (install + demo; the tests) are what CI runs first: the same extras,
    the same test command, before any other extra is installed (else a test that needs one passes
    in CI and fails for a reader, as the GGUF cache tests did)."""
    block = (PROJECT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    install, tests = block.splitlines()[:2]
    readme_extras = re.search(r"-e '(\.\[[^\]]*\])'", install).group(1)
    ci = [ln.split("#")[0].strip() for ln in (PROJECT / ".ci" / "run").read_text().splitlines()]
    first_install = next(ln for ln in ci if ln.startswith("pip install") and " -e " in ln)
    assert shlex.split(first_install)[-1] == readme_extras
    first_test = next(ln for ln in ci if "pytest" in ln)
    assert first_test == tests.strip()
    between = ci[ci.index(first_install) + 1 : ci.index(first_test)]
    assert not [ln for ln in between if ln.startswith("pip install")]
