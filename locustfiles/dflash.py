"""The uniform LLM-serving protocol ("uni-bench") as a Locust test.

    locust -f locustfiles/dflash.py --headless -u 8                      # built-in simulator
    locust -f locustfiles/dflash.py --headless -u 8 --host http://gpu-box:8000
    locust -f locustfiles/dflash.py --headless -u 8 --profile profiles/issue-bot.toml

Single stream over the thread's four scenarios, then 2, 4 and 8 streams started together on the
same prompt (prefix-cache hit) and on different prompts, `--rounds` rounds each. Every request
is kept in runs/<run>/records.jsonl; the summary at the end is the thread's tables.

A profile (profiles/*.toml) swaps in other scenarios and load modes: rounds keep these users;
closed and ladder run one user class per scenario of the profile (its weight, Locust's weight),
open runs the arrival schedule on every worker. To write your own users, see `loadlib.LLMUser`.
"""

from loadlib import ModeUser
from loadlib.run.shape import ProtocolShape  # noqa: F401  (Locust picks the shape up from here)


class ProtocolUser(ModeUser):
    """One stream of the load mode: in the protocol's rounds, it sends what the driver assigns
    to it, when it says."""
