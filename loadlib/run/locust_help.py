"""`locust -f FILE --help` lists FILE's own options, this tool's among them.

Locust prints `--help` before it imports the locustfile (locustio/locust#2917), so the options a
locustfile adds in `init_command_line_parser` never show there. The installed
`uni_locust_help.pth` (setup.py) calls `load_locustfiles` as Python starts: for `locust` (or
`python -m locust`) asking for help, it imports the named locustfiles with Locust's own loader
first, and Locust's help then lists what they added. It does nothing for any other command, and
where -f names no file here (none given, a URL, the master's) it leaves Locust's help as it was.
"""

from __future__ import annotations

import os
import sys

_loaded = False  # the .pth runs twice where lib64 links to lib


def load_locustfiles() -> None:
    """Imports the locustfiles of a `locust ... --help` command (for any other, nothing)."""
    global _loaded
    argv = sys.argv
    if _loaded or not _runs_locust() or not {"-h", "--help"} & set(argv[1:]):
        return
    _loaded = True
    from locust.argument_parser import parse_locustfile_option, parse_locustfile_paths
    from locust.util.load_locustfile import load_locustfile

    named = parse_locustfile_option([arg for arg in argv[1:] if arg not in ("-h", "--help")]).locustfile
    paths = [path.strip() for path in named.split(",")]
    if not all(os.path.exists(path) for path in paths):  # Locust's help says what -f wants
        return
    for path in parse_locustfile_paths(paths):
        try:
            load_locustfile(path)
        except Exception as exc:  # noqa: BLE001 (the help is still printed: say why it lacks FILE's options)
            sys.stderr.write(f"{path}: not loaded for --help, its options are not listed: {exc!r}\n")


def _runs_locust() -> bool:
    """`locust ...` or `python -m locust ...` (as Python starts, the latter's sys.argv[0] is "-m")."""
    if os.path.basename(sys.argv[0]) == "locust":
        return True
    command = sys.orig_argv
    return "-m" in command and command[command.index("-m") + 1:][:1] == ["locust"]
