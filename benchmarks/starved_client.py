"""The protocol's locustfile with a client short of CPU, for `benchmarks/judgements.py`.

An OS thread in the client's own process spins from the test's start to its end: the process
wants more than a core, and every time the event loop wakes it waits for the interpreter's lock
(up to `sys.getswitchinterval()`, 5 ms). What the client measures is then limited by the client
itself, which is what the validity block's `client_headroom` check exists to say.

    locust -f benchmarks/starved_client.py --headless -u 2 --rounds 2 --concurrency 2
"""

from gevent import monkey
from locust import events

from loadlib import ModeUser
from loadlib.run.shape import ProtocolShape  # noqa: F401  (Locust picks the shape up from here)

start_thread = monkey.get_original("_thread", "start_new_thread")  # Locust's threads are greenlets
spinning = [False]


class ProtocolUser(ModeUser):
    """One stream of the load mode, as in `locustfiles/dflash.py`."""


def _spin() -> None:
    while spinning[0]:
        sum(range(1000))


@events.test_start.add_listener
def _start_spinning(**_kwargs) -> None:
    spinning[0] = True
    start_thread(_spin, ())


@events.test_stop.add_listener
def _stop_spinning(**_kwargs) -> None:
    spinning[0] = False
