"""The documentation holds together: README.md is a front door of at most 220 lines whose test
command is exactly the one CI runs, every relative link in README.md and docs/*.md reaches a file
(and a heading, when it names one), every docs page is reachable from the README, and the paths
and Python examples the pages show exist and parse. Pure file reading: no process is started."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
CI = REPO / ".ci" / "run"

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
REPO_PATH = re.compile(r"`((?:loadlib|analysis|benchmarks|profiles|locustfiles|tests|docs)/[\w./-]*)`")
RETIRED = ("conductor", "RoundsUser")  # names the code no longer uses (the glossary's "driver", `ModeUser`)


def prose(text: str) -> str:
    """The text without fenced code blocks (whose `#` lines are not headings, nor their brackets links)."""
    return FENCE.sub("", text)


def code_blocks(text: str, language: str = "") -> list[str]:
    return re.findall(rf"^```{language}[ \t]*\n(.*?)^```", text, flags=re.S | re.M)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]{2,}|\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # bold markers, links -> their text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _level, title in HEADING.findall(prose(page.read_text(encoding="utf-8"))):
        slug = github_anchor(title)
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def relative_links(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", prose(page.read_text(encoding="utf-8")))
    return [target for target in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


def test_the_readme_is_a_front_door_of_at_most_220_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 220


def test_there_are_docs_pages_to_link_to():
    assert len(DOCS) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_reaches_a_file_and_its_heading(page):
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(REPO)}")
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in relative_links(README)}
    assert [page.name for page in DOCS if page.resolve() not in linked] == []


def commands(lines: list[str], word: str) -> list[list[str]]:
    """The shell commands among `lines` that run `word` (comments and blank lines left out)."""
    out = []
    for line in lines:
        tokens = shlex.split(line, comments=True)
        if word in tokens:
            out.append(tokens)
    return out


def test_the_readme_test_command_is_exactly_the_one_ci_runs():
    ci = commands(CI.read_text(encoding="utf-8").splitlines(), "pytest")
    readme = commands([line for block in code_blocks(README.read_text(encoding="utf-8"), "bash")
                       for line in block.splitlines()], "pytest")
    assert len(ci) == 1 and ci[0] == ["python", "-m", "pytest", "-q"]
    assert readme == ci


def test_the_readme_installs_what_ci_installs():
    def installed(tokens: list[str]) -> list[str]:
        return tokens[tokens.index("install") + 1:]

    ci = [installed(t) for t in commands(CI.read_text(encoding="utf-8").splitlines(), "install") if "-e" in t]
    readme = [installed(t) for block in code_blocks(README.read_text(encoding="utf-8"), "bash")
              for t in commands(block.splitlines(), "install") if t[0] == "pip"]
    assert len(ci) == 1 and readme == ci


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_the_paths_a_page_names_exist(page):
    named = REPO_PATH.findall(prose(page.read_text(encoding="utf-8")))
    assert [path for path in named if "<" not in path and not (REPO / path).exists()] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_the_python_examples_parse(page):
    for block in code_blocks(page.read_text(encoding="utf-8"), "python"):
        ast.parse(block)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_a_page_uses_no_retired_name(page):
    text = page.read_text(encoding="utf-8")
    assert [name for name in RETIRED if name in text] == []
