#!/usr/bin/env python3
"""Regenerates the key reference block of configs/README.md from
`syncopt keys` (a unit test checks that the README holds the current one).

    scripts/gen-config-readme.py [path/to/syncopt]   (default build/syncopt)
"""
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
exe = sys.argv[1] if len(sys.argv) > 1 else str(root / "build" / "syncopt")
ref = subprocess.run([exe, "keys"], check=True, capture_output=True, text=True).stdout
readme = root / "configs" / "README.md"
text = readme.read_text()
head = text.index("## Key reference")
start = text.index("```text\n", head) + len("```text\n")
end = text.index("```", start)
readme.write_text(text[:start] + ref + text[end:])
print(f"{readme}: key reference regenerated ({ref.count(chr(10))} lines)")
