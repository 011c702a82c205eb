"""tests/skips.txt, read by the e2e stage (tests/e2e/conftest.py) and the VM stage
(tests/vm/conftest.py): the skips a stage accepts (the file's header says its format)."""
from pathlib import Path

SKIPS_FILE = Path(__file__).resolve().parents[1] / "skips.txt"


def listed_skips(where, path=SKIPS_FILE):
    """The node-id globs tests/skips.txt accepts for `where`."""
    globs = []
    for line in path.read_text().splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and not line.startswith("#") and where in parts[0].split(","):
            globs.append(parts[1])
    return globs
