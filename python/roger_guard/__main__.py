"""`python -m roger_guard ARGS`: run the `roger` this package finds (as `python -m ruff` does),
for when the venv's scripts directory is not on PATH."""
import os
import subprocess
import sys

from ._core import RogerNotFound, roger_bin


def main():
    try:
        exe = roger_bin()
    except RogerNotFound as e:
        print(f"roger_guard: {e}", file=sys.stderr)
        return 127
    if os.name == "posix":
        os.execv(exe, [exe, *sys.argv[1:]])
    return subprocess.call([exe, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
