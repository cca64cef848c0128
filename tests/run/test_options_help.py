"""`locust -f FILE --help` lists the tool's options under their headings, each with its default,
for the protocol's locustfile and for a user's own (Locust itself prints its help before it loads
a locustfile: loadlib/run/locust_help.py)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadlib.run import options
from tests.conftest import LOCUSTFILE

OWN_LOCUSTFILE = '''
from locust import between, task
from loadlib import LLMUser


class Chat(LLMUser):
    wait_time = between(0.5, 1.0)

    @task
    def short(self):
        self.chat([{"role": "user", "content": "Name three prime numbers."}], name="short")
'''


def tool_groups() -> dict[str, list[argparse.Action]]:
    """The headings the tool adds to a parser, with their options."""
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    return {group.title: group._group_actions for group in parser._action_groups  # argparse keeps no public list
            if group.title.startswith("uni-bench")}


def help_sections(command: list[str], cwd: Path) -> dict[str, str]:
    """`--help`'s output (one help line per option) as heading -> its block."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "1000"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr == ""
    sections: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            sections[line[:-1]] = []
        elif sections:
            sections[list(sections)[-1]].append(line)
    return {heading: "\n".join(lines) for heading, lines in sections.items()}


def default_text(action: argparse.Action) -> str:
    """What the help must say of the option's default."""
    if isinstance(action.default, float):
        return f"(default {action.default:g}"
    if action.default in ("", None, False, []):
        return "default: "  # a phrase: "(default: none)", "(default: $OPENAI_API_KEY)"...
    return f"(default {action.default}"


def assert_lists_the_tool_options(sections: dict[str, str]) -> None:
    groups = tool_groups()
    assert len(groups) == 4
    for title, actions in groups.items():
        assert title in sections, f"no heading {title!r} in --help: {list(sections)}"
        entries = option_entries(sections[title])
        for action in actions:
            flag = action.option_strings[0]
            assert flag in entries, f"{flag} not under {title!r}"
            assert default_text(action) in entries[flag], entries[flag]


def option_entries(section: str) -> dict[str, str]:
    """flag -> its help entry (a long flag's help starts on the next line)."""
    entries: dict[str, list[str]] = {}
    for line in section.splitlines():
        if line.startswith("  -"):
            entries[line.split()[0]] = [line]
        elif entries:
            entries[list(entries)[-1]].append(line.strip())
    return {flag: " ".join(lines) for flag, lines in entries.items()}


@pytest.mark.processes
def test_help_of_the_protocol_locustfile_lists_the_tool_options_with_defaults(tmp_path):
    sections = help_sections([str(Path(sys.executable).parent / "locust"), "-f", str(LOCUSTFILE), "--help"],
                             tmp_path)
    assert_lists_the_tool_options(sections)
    rounds = sections["uni-bench: the protocol's rounds"]
    assert "--rounds N            Rounds per cell (default 3)" in rounds
    assert "--profile FILE" in rounds  # Locust's option that this tool reads as a profile file
    assert "--thinking server|on|off" in sections["uni-bench: the server and its requests"]
    assert "(default 2,4,8)" in rounds


@pytest.mark.processes
def test_help_of_a_users_own_locustfile_lists_them_too(tmp_path):
    (tmp_path / "mylocust.py").write_text(OWN_LOCUSTFILE)
    assert_lists_the_tool_options(help_sections([sys.executable, "-m", "locust", "-f", "mylocust.py", "-h"],
                                                tmp_path))


@pytest.mark.processes
def test_help_without_a_locustfile_is_locusts_own(tmp_path):
    """Nothing to load (no locustfile.py here): Locust's help as it was, with no word about it."""
    sections = help_sections([sys.executable, "-m", "locust", "--help"], tmp_path)
    assert "Common options" in sections
    assert not [title for title in sections if title.startswith("uni-bench")]
