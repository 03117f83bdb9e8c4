"""Write copies of native libraries whose `cpuid` instructions trap, for avx2only.c.

Usage: python patch_cpuid.py OUT_DIR LIBRARY...   (prints the AVX2ONLY_MAP value)

Each copy lives in OUT_DIR/<n>/ beside symbolic links to the original's siblings, so that
`$ORIGIN` run paths still resolve. Every `cpuid` that objdump finds in an executable section
becomes `int3; nop`; avx2only.so answers the trap with AVX-512 and friends cleared.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CPUID = re.compile(r"^\s*([0-9a-f]+):\s+0f a2\s+cpuid\b", re.MULTILINE)
SECTION = re.compile(r"^\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", re.MULTILINE)


def sections(lib: Path) -> list[tuple[int, int, int]]:
    """(address, file offset, size) of every section."""
    text = subprocess.run(["readelf", "-SW", str(lib)], check=True, capture_output=True, text=True).stdout
    return [(int(a, 16), int(o, 16), int(s, 16)) for _, a, o, s in SECTION.findall(text)]


def patch(lib: Path, dest: Path) -> int:
    listing = subprocess.run(["objdump", "-d", str(lib)], check=True, capture_output=True, text=True).stdout
    addresses = [int(a, 16) for a in CPUID.findall(listing)]
    data = bytearray(lib.read_bytes())
    table = sections(lib)
    for address in addresses:
        start, offset, _ = next(t for t in table if t[0] <= address < t[0] + t[2] and t[0])
        at = offset + address - start
        assert data[at : at + 2] == b"\x0f\xa2", hex(address)
        data[at : at + 2] = b"\xcc\x90"
    dest.write_bytes(bytes(data))
    return len(addresses)


def main() -> None:
    out = Path(sys.argv[1])
    pairs = []
    for n, name in enumerate(sys.argv[2:]):
        lib = Path(name).resolve()
        folder = out / str(n)
        folder.mkdir(parents=True, exist_ok=True)
        for sibling in lib.parent.iterdir():
            link = folder / sibling.name
            if sibling.name != lib.name and not link.exists():
                link.symlink_to(sibling)
        count = patch(lib, folder / lib.name)
        print(f"{lib.name}: {count} cpuid patched", file=sys.stderr)
        pairs.append(f"{lib.name}={folder / lib.name}")
    print(":".join(pairs))


if __name__ == "__main__":
    main()
