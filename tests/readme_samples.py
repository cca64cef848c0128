"""The README's printed samples as the tests compare them with what the code prints now: a sample
is the first unlabelled fence after the block holding its command; numbers, addresses and run
directories are masked, and a `...` ends what the README leaves out of a line."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
ELIDED = "..."
_RUN_DIR = re.compile(r"runs/[^\s)]+")
_URL = re.compile(r"https?://[^\s,)]+")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


def sample_after(command: str) -> list[str]:
    """The lines of the README's first printed sample (a fence without a language) after the code
    block holding `command`."""
    blocks = re.findall(r"^```(\w*)\n(.*?)^```", README.read_text(encoding="utf-8"), flags=re.M | re.S)
    start = next((index for index, (_language, body) in enumerate(blocks) if command in body), None)
    assert start is not None, f"README: no block holds `{command}`"
    sample = next((body for language, body in blocks[start + 1:] if not language), None)
    assert sample is not None, f"README: no printed sample after `{command}`"
    return sample.splitlines()


def headings(sample: list[str]) -> list[str]:
    """A sample's titles (lines flush left) and, at its start and under each title, the first
    indented line without a number: a table's header."""
    found, under_title = [], True
    for line in sample:
        if line and not line[0].isspace():
            found.append(line)
            under_title = True
        elif under_title and masked(line) not in ("", ELIDED) and "#" not in masked(line):
            found.append(line)
            under_title = False
    return found


def masked(line: str) -> str:
    """`line` with its numbers, addresses and run directories masked and its spaces collapsed."""
    line = _NUMBER.sub("#", _URL.sub("URL", _RUN_DIR.sub("RUN", line)))
    return " ".join(line.split())


def missing_lines(lines: list[str], output: str) -> list[str]:
    """The sample lines the output does not print (masked alike; a line's `...` ends what is compared;
    a line of `...` alone stands for lines left out)."""
    printed = [masked(line) for line in output.splitlines()]
    missing = []
    for line in lines:
        wanted = masked(line)
        if wanted == ELIDED:
            continue
        head = wanted.split(ELIDED)[0].rstrip()
        if not any(shown == wanted or (ELIDED in wanted and shown.startswith(head)) for shown in printed):
            missing.append(line)
    return missing
