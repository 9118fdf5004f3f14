"""The code, the docs and the README say what is and why; which issue asked for it lives in the commits and the
issues' notes. An issue number in a comment or a page is history that no reader of the code can act on."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"\b[Ii]ssue #?\d+|\b[Ii]ssues #\d+")
WHERE = ("gpu_health/**/*.py", "gpu_health_tests/**/*.py", "bench/*.py", "scripts/*", "scenarios/**/*.y*ml",
         "scenarios/*.py", "deploy/**/*.yml", "docs/*.md", "README.md", "Makefile")


def test_no_issue_numbers_in_code_or_docs():
    hits = [f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}"
            for pattern in WHERE for path in sorted(REPO.glob(pattern))
            if path.is_file() and path.name != Path(__file__).name
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if ISSUE.search(line)]
    assert not hits, "history belongs in commits and issue notes:\n" + "\n".join(hits)
