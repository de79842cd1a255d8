#!/usr/bin/env python3
"""Lists the pairs of files of a crate that import each other (ARCHITECTURE.md: none may).

Usage: scripts/import_pairs.py crates/roformer/src crates/rotary/src

A file "imports" another when its code (comments aside) names a path into it: `crate::a::b`,
`super::x` (relative to the file's module), or, in a `mod.rs` / `lib.rs`, `use child::...`.
`super` counts from the inline module (`mod tests { ... }`) it is written in. A path resolves to the longest prefix that is a file of the crate (an item re-exported by
`lib.rs` or a `mod.rs` counts as that file). Exits 1 when a pair is found.
"""

import os
import re
import sys


def crate_files(root):
    """Every `.rs` file under `root`, by path relative to it."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    files[os.path.relpath(path, root)] = f.read()
    return files


def module_of(rel):
    """The module path of a file: `a/b.rs` and `a/b/mod.rs` are both `a::b`."""
    parts = rel[:-3].split("/")
    return parts[:-1] if parts[-1] in ("mod", "lib", "main") else parts


def file_of(files, parts):
    """The file holding the longest prefix of `parts` that is a module."""
    for n in range(len(parts), -1, -1):
        prefix = parts[:n]
        candidates = (
            ["/".join(prefix) + ".rs", "/".join(prefix + ["mod.rs"])] if prefix else ["lib.rs"]
        )
        for candidate in candidates:
            if candidate in files:
                return candidate
    return None


def inline_modules(code):
    """The inline modules (`mod name { ... }`) of `code` as (start, end, name) spans, found by
    counting braces (strings holding braces could mislead it; none of ours do)."""
    spans = []
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", code):
        depth, at = 0, m.end() - 1
        while at < len(code):
            depth += {"{": 1, "}": -1}.get(code[at], 0)
            if depth == 0:
                break
            at += 1
        spans.append((m.start(), at, m.group(1)))
    return spans


def imports(files, rel, source):
    """The files `rel` names paths into."""
    code = "\n".join(l for l in source.split("\n") if not l.strip().startswith("//"))
    module = module_of(rel)
    found = set()
    for m in re.finditer(r"\bcrate((?:::\w+)+)", code):
        found.add(file_of(files, m.group(1).strip(":").split("::")))
    spans = inline_modules(code)
    for m in re.finditer(r"\b((?:super::)+)(\{|(?:\w+::)*\w+)", code):
        # `super` inside `mod tests { ... }` is the file's own module, not its parent
        here = module + [name for start, end, name in spans if start < m.start() < end]
        base = here[: max(len(here) - m.group(1).count("super::"), 0)]
        tail = [] if m.group(2) == "{" else m.group(2).split("::")
        found.add(file_of(files, base + tail))
    if rel.endswith("mod.rs") or rel == "lib.rs":
        for m in re.finditer(r"^\s*(?:pub(?:\([\w:]+\))?\s+)?use\s+(\w+)::", code, re.M):
            if m.group(1) not in ("crate", "super", "self", "std", "core"):
                found.add(file_of(files, module + [m.group(1)]))
    found.discard(None)
    found.discard(rel)
    return found


def main():
    pairs = []
    for root in sys.argv[1:]:
        files = crate_files(root)
        edges = {rel: imports(files, rel, src) for rel, src in files.items()}
        pairs += sorted(
            {(root, *sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())}
        )
    for root, a, b in pairs:
        print(f"{root}: {a} <-> {b}")
    return 1 if pairs else 0


if __name__ == "__main__":
    sys.exit(main())
