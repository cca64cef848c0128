"""A profile's [server] table: its defaults, and every mistake refused in one line naming the key."""

from __future__ import annotations

import sys

import pytest

from loadlib.profiles import ProfileError, load_profile
from loadlib.sweep.grid import configurations
from loadlib.sweep.spec import ServerSpec

SCENARIO = "[scenarios.vision]\n"


def profile(tmp_path, text: str):
    path = tmp_path / "p.toml"
    path.write_text(SCENARIO + text, encoding="utf-8")
    return path


def test_a_server_table_has_its_defaults(tmp_path):
    spec = load_profile(profile(tmp_path, '[server]\ncommand = "srv --port {port}"\n')).server
    assert spec == ServerSpec(command="srv --port {port}")
    assert (spec.health, spec.ready_timeout_s, spec.stop_grace_s, spec.env, spec.grid, spec.configs) == \
        ("/health", 600.0, 10.0, {}, None, None)


def test_a_profile_without_a_server_table_has_none(tmp_path):
    assert load_profile(profile(tmp_path, "")).server is None


def test_a_grid_and_named_configurations_are_read(tmp_path):
    grid = load_profile(profile(tmp_path, '[server]\ncommand = "srv --port {port} -d {draft} -m {mrr}"\n'
                                          'env = {CUDA_VISIBLE_DEVICES = "0,1"}\n'
                                          '[server.grid]\ndraft = [4, 8]\nmrr = [2, 4]\n')).server
    assert grid.grid == {"draft": [4, 8], "mrr": [2, 4]} and grid.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    named = load_profile(profile(tmp_path, '[server]\ncommand = "srv --port {port} --attn {attn}"\n'
                                           '[[server.configs]]\nlabel = "fa3"\nvalues = {attn = "fa3"}\n'
                                           '[[server.configs]]\nlabel = "triton"\nvalues = {attn = "triton"}\n')).server
    assert [(c.label, c.values) for c in named.configs] == [("fa3", {"attn": "fa3"}), ("triton", {"attn": "triton"})]


def test_python_is_the_interpreter_running_the_tool(tmp_path):
    """`{python}`: the built-in simulator runs from the tool's own venv, activated or not."""
    spec = load_profile(profile(tmp_path, '[server]\ncommand = "{python} -m loadlib.sim --port {port}"\n')).server
    [config] = configurations(spec)
    assert config.argv(8000) == [sys.executable, "-m", "loadlib.sim", "--port", "8000"]


@pytest.mark.parametrize("text, message", [
    ('[server]\ncommand = "srv --port {port} {draft}"\n',
     "server: command: placeholder {draft} is neither {port}, {python} nor filled by a grid or configs"),
    ('[server]\ncommand = "srv --port {port} {drfat}"\n[server.grid]\ndraft = [4]\n',
     "server: command: placeholder {drfat} is neither {port}, {python} nor a key of grid (draft)"),
    ('[server]\ncommand = "srv --port {port}"\n[server.grid]\ndraft = [4]\n',
     "server: grid.draft: not a placeholder of the command"),
    ('[server]\ncommand = "srv {draft}"\n[server.grid]\ndraft = [4]\n',
     "server.command: no {port}: the server must listen on the port the tool picks"),
    ('[server]\ncommand = "srv --port {port} {0}"\n', "server.command: placeholder {0}: only {name} is filled"),
    ('[server]\ncommand = "srv --port {port} {d:02}"\n[server.grid]\nd = [4]\n',
     "server.command: placeholder {d:02}: only {name} is filled"),
    ('[server]\ncommand = "srv --port {port} --json {\\"a\\": 1}"\n', "server.command: "),
    ('[server]\ncommand = "srv --port {port} \'a"\n', "server.command: No closing quotation"),
    ('[server]\ncommand = "srv --port {port} {d}"\n[server.grid]\nd = []\n', "server.grid.d: List should have at least 1 item"),
    ('[server]\ncommand = "srv --port {port} {d}"\n[server.grid]\nd = [4, 4]\n', "server.grid: d: 4 is listed twice"),
    ('[server]\ncommand = "srv --port {port} {d}"\n[server.grid]\nd = [[4]]\n',
     "server.grid.d.0: expected a number, string or boolean, got list"),
    ('[server]\ncommand = "srv --port {port} --model {m}"\n[server.grid]\nm = ["/models/a"]\n',
     "server.grid: m: '/models/a' cannot be part of a label (letters, digits, _ . -); name such configurations in "
     "[[server.configs]]"),
    ('[server]\ncommand = "srv --port {port} {a_very_long_key_name_indeed} {another_very_long_key_name}"\n'
     '[server.grid]\na_very_long_key_name_indeed = ["0123456789abcdef"]\nanother_very_long_key_name = ["0123456789abcdef"]\n',
     "server.grid: its labels (key=value,...) would be longer than 80 characters"),
    ('[server]\ncommand = "srv --port {port} {port}"\n[server.grid]\nport = [1]\n',
     "server.grid: port is the tool's: it fills {port}"),
    ('[server]\ncommand = "{python} -m srv --port {port}"\n[server.grid]\npython = ["python3"]\n',
     "server.grid: python is the tool's: it fills {python}"),
    ('[server]\ncommand = "srv --port {port} {d}"\n[server.grid]\nd = [1]\n[[server.configs]]\nlabel = "a"\n'
     'values = {d = 1}\n', "server: grid or configs, not both"),
    ('[server]\ncommand = "srv --port {port} {d}"\n[[server.configs]]\nlabel = "a"\nvalues = {d = 1}\n'
     '[[server.configs]]\nlabel = "b"\n', "server: command: placeholder {d} is neither {port}, {python} nor filled"),
    ('[server]\ncommand = "srv --port {port}"\n[[server.configs]]\nlabel = "a"\nvalues = {d = 1}\n',
     "server: configs.0.values.d: not a placeholder of the command"),
    ('[server]\ncommand = "srv --port {port}"\n[[server.configs]]\nlabel = "a"\n[[server.configs]]\nlabel = "a"\n',
     "server.configs: label 'a' names two configurations"),
    ('[server]\ncommand = "srv --port {port}"\n[[server.configs]]\nlabel = "a b"\n',
     "server.configs.0.label: String should match pattern"),
    ('[server]\ncommand = "srv --port {port}"\nhealth = "health"\n',
     "server.health: a path on the server, starting with /, got 'health'"),
    ('[server]\ncommand = "srv --port {port}"\nready_timeout_s = 0\n', "server.ready_timeout_s: Input should be greater than 0"),
    ('[server]\ncommand = "srv --port {port}"\nready_timeout = 5\n', "server.ready_timeout: unknown key"),
    ('[server]\ncommand = "srv --port {port}"\nenv = {A = 1}\n', "server.env.A: Input should be a valid string"),
    ('[server]\nhealth = "/health"\n', "server.command: missing (required)"),
])
def test_a_bad_server_table_is_one_line_naming_the_key(tmp_path, text, message):
    path = profile(tmp_path, text)
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    assert str(error.value).startswith(f"{path}: {message}")
    assert "\n" not in str(error.value)
