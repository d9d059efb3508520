#!/usr/bin/env python3
"""Stubs of the macOS system frameworks switchyard links against, so its macOS binaries link here.

A Mac binary names the frameworks it uses (Security and CoreFoundation for TLS certificate checks,
CoreServices for file watching) and the symbols it takes from each. Apple ships them in its SDK,
which no registry carries; the linker needs only their text stubs (.tbd: the install name and
the exported symbols), and the binary then loads the real frameworks on a Mac.

Usage: macos_stubs.py DIR LINK_LOG
Reads a failed link's output and adds to DIR what it lacked: a framework it could not find (a
stub with no symbols yet), or undefined symbols (each given to its framework by its prefix).
Exits 0 when something was added (link again with -F DIR), 1 when the log shows nothing this
script can supply (the link failed for another reason, printed).
"""

import re
import sys
from pathlib import Path

# Which framework exports a symbol, by its prefix (longest first).
OWNERS = [
    ("___CF", "CoreFoundation"),
    ("_kCF", "CoreFoundation"),
    ("_CF", "CoreFoundation"),
    ("_kSec", "Security"),
    ("_Sec", "Security"),
    ("_SSL", "Security"),
    ("_kFSEvent", "CoreServices"),
    ("_FSEvent", "CoreServices"),
]

TARGETS = "[ x86_64-macos, arm64-macos ]"


def stub(name: str, symbols: list[str]) -> str:
    listed = ", ".join(sorted(set(symbols))) or f"_switchyard_stub_{name}"
    return (
        "--- !tapi-tbd\n"
        "tbd-version:     4\n"
        f"targets:         {TARGETS}\n"
        f"install-name:    '/System/Library/Frameworks/{name}.framework/Versions/A/{name}'\n"
        "exports:\n"
        f"  - targets:         {TARGETS}\n"
        f"    symbols:         [ {listed} ]\n"
        "...\n"
    )


def read_symbols(path: Path) -> list[str]:
    if not path.exists():
        return []
    m = re.search(r"symbols:\s*\[(.*)\]", path.read_text())
    return [s.strip() for s in m.group(1).split(",") if s.strip() and "_switchyard_stub_" not in s] if m else []


def main() -> int:
    root, log = Path(sys.argv[1]), Path(sys.argv[2]).read_text(errors="replace")
    added = False
    for name in sorted(set(re.findall(r'unable to find system framework "([A-Za-z]+)"', log))):
        tbd = root / f"{name}.framework" / f"{name}.tbd"
        if not tbd.exists():
            tbd.parent.mkdir(parents=True, exist_ok=True)
            tbd.write_text(stub(name, []))
            added = True
    wanted: dict[str, list[str]] = {}
    unknown = []
    for symbol in sorted(set(re.findall(r"undefined symbol: (\S+)", log))):
        owner = next((fw for prefix, fw in OWNERS if symbol.startswith(prefix)), None)
        if owner is None:
            unknown.append(symbol)
        else:
            wanted.setdefault(owner, []).append(symbol)
    for name, symbols in wanted.items():
        tbd = root / f"{name}.framework" / f"{name}.tbd"
        have = read_symbols(tbd)
        if set(symbols) - set(have):
            tbd.parent.mkdir(parents=True, exist_ok=True)
            tbd.write_text(stub(name, have + symbols))
            added = True
    if unknown:
        print(f"macos_stubs: no framework known for: {' '.join(unknown)} (add its prefix to OWNERS)", file=sys.stderr)
        return 1
    if not added:
        errors = [l for l in log.splitlines() if "error" in l.lower()][-20:]
        print("macos_stubs: the link failed for a reason stubs cannot fix:\n" + "\n".join(errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
