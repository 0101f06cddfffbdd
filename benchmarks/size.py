"""The size of runner/ as the team counts it: Python tokens (tokenize, without comments, blank lines
or layout) and lines per folder, the largest modules and functions, and the import cycles counting a
package and its children (a package's `__init__` imported by a module inside it).

    python benchmarks/size.py [ROOT]      # ROOT: the package folder (default: runner/ beside this
    file)
"""

from __future__ import annotations

import ast
import sys
import tokenize
from collections import defaultdict
from pathlib import Path

SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
}
SKIP |= {tokenize.ENDMARKER}


def tokens(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(t.type not in SKIP for t in tokenize.tokenize(f.readline))


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(root: Path) -> dict[str, set[str]]:
    """module -> the runner modules it imports, at any depth of the file (imports inside functions
    too): `from X import y` counts X (a package's `__init__` runs) and X.y where that is a module;
    `import X.y as z` counts X.y."""
    files = {module_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                graph[mod] |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                if base in files:  # `from package import x` names the package: its __init__ runs
                    graph[mod].add(base)
                graph[mod] |= {
                    f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files
                }
        graph[mod].discard(mod)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (scipy's csgraph)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    names = sorted(set(graph) | {w for ws in graph.values() for w in ws})
    at = {name: i for i, name in enumerate(names)}
    edges = [(at[v], at[w]) for v, ws in graph.items() for w in ws]
    rows, cols = zip(*edges) if edges else ((), ())
    m = csr_matrix(([1] * len(edges), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(m, directed=True, connection="strong")
    comps: dict[int, list[str]] = defaultdict(list)
    for name, c in zip(names, label):
        comps[c].append(name)
    return sorted(c for c in comps.values() if len(c) > 1)


def largest_functions(root: Path, k: int = 5) -> list[tuple[int, str]]:
    found = []
    for p in root.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(
                    (node.end_lineno - node.lineno + 1, f"{p.relative_to(root.parent)}:{node.name}")
                )
    return sorted(found, reverse=True)[:k]


def main(root: Path) -> int:
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    modules = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        folder = rel.parts[0] if len(rel.parts) > 1 else "."
        t, lines = tokens(p), len(p.read_text(encoding="utf-8").splitlines())
        per[folder][0] += t
        per[folder][1] += lines
        modules.append((t, lines, str(rel)))
    total_t, total_l = sum(v[0] for v in per.values()), sum(v[1] for v in per.values())
    print(f"{'folder':<12} {'tokens':>8} {'lines':>7}")
    for folder, (t, lines) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"{folder:<12} {t:>8,} {lines:>7,}")
    print(f"{'all':<12} {total_t:>8,} {total_l:>7,}")
    print(
        "largest modules:",
        ", ".join(f"{m} ({t:,} tokens, {n} lines)" for t, n, m in sorted(modules)[::-1][:3]),
    )
    print(
        "largest functions:",
        ", ".join(f"{name} ({n} lines)" for n, name in largest_functions(root)),
    )
    found = cycles(imports(root))
    print("import cycles (a package and its children counted):", found or "none")
    return 1 if found else 0


if __name__ == "__main__":
    default = Path(__file__).resolve().parents[1] / "runner"
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else default))
