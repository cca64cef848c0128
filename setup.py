"""The package is described in pyproject.toml; this adds one file beside it: `uni_locust_help.pth`,
which lets `locust -f FILE --help` list FILE's options (loadlib/run/locust_help.py says how)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HELP_PTH = "uni_locust_help.pth"
HELP_HOOK = ('import sys; ("-h" in sys.argv or "--help" in sys.argv) and '
             '__import__("loadlib.run.locust_help", fromlist=["_"]).load_locustfiles()\n')


class BuildPyWithHelpHook(build_py):
    def run(self) -> None:
        super().run()
        # an editable install's wheel is made of what install_lib holds, a regular one's of build_lib
        where = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        with open(os.path.join(where, HELP_PTH), "w") as pth:
            pth.write(HELP_HOOK)


setup(cmdclass={"build_py": BuildPyWithHelpHook})
