"""The locustfile's own users: a locustfile other than the protocol's runs its `LLMUser`s as
Locust runs any users, with no plan; the test ends with `-t`, the web UI's Stop or Ctrl-C.

This is the mode of every run whose locustfile has no `ModeUser`: not in the `MODES` registry,
since no profile can ask for it. Its records carry the case "locust" and the stats name as cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gevent

from loadlib.modes.base import Coordination, Driver, LoadMode, ModeState, Phase
from loadlib.records import RequestLabel
from loadlib.scenarios.base import Job

if TYPE_CHECKING:
    from loadlib.profiles import Profile
    from loadlib.run.config import RunConfig
    from loadlib.run.users import ScenarioUser

OWN_CASE = "locust"  # the case of the records a locustfile's own users send


def own_label(name: str, users: int, stream: int, job: Job | None = None, **more: Any) -> RequestLabel:
    """The label of a request that a locustfile's own user sends (no plan, no cell): `name` is its
    scenario and its cell (its row in Locust's stats), `job` the scenario's job it sends if any,
    its concurrency the run's users; `more` sets other fields (`target`, `measured`)."""
    where = {"cell": name, "case": OWN_CASE, "concurrency": users, "slot": stream, **more}
    return job.label(scenario=name, **where) if job is not None else RequestLabel(name, **where)


class OpenEnded(Driver):
    def plan_done(self) -> bool:
        return True  # no plan to finish: Locust's -t or Stop is the end

    def play(self) -> None:
        self.phase = Phase("running", OWN_CASE, OWN_CASE, unplanned=True)
        gevent.sleep(float("inf"))


class OwnUsersState(ModeState):
    """A shipped scenario user in a locustfile of its own: a closed-loop stream of its scenario's
    requests, with the user's `wait_time` between them, each labelled with the scenario's name."""

    labels_cells = False

    def __init__(self, users: int) -> None:
        self.users = users

    def step(self, user: "ScenarioUser") -> None:
        job = user.scenario.next(user.stream)
        record = user.send(user.body_of(job), own_label(job.scenario, self.users, user.stream, job))
        user.scenario.observe(job, record.to_dict())


class OwnUsers(LoadMode):
    fixed_streams = ""  # Locust's own Edit applies

    @property
    def name(self) -> str:
        return OWN_CASE

    def user_kind(self, load: Any) -> str:
        return "locustfile"

    def driver(self, profile: "Profile | None", users: int, started_at: float, run: Coordination) -> Driver:
        return OpenEnded(run, users)

    def begin(self, config: "RunConfig", share: tuple[int, int]) -> ModeState:
        return OwnUsersState(config.users)


OWN_USERS = OwnUsers()
