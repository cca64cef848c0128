"""The load shape of the protocol's locustfile: Locust's own `LoadTestShape`, reading `-u`, `-r`
and `-t` as Locust documents them (`use_common_options`)."""

from __future__ import annotations

from locust.shape import LoadTestShape

from loadlib.run.wiring import session_of


class ProtocolShape(LoadTestShape):
    """Spawns the users the load mode wants (all `-u`; the ladder's current level) at `-r` users
    per second (all at once without `-r`), ends the test at `-t`, and when the mode is done."""

    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        environment = self.runner.environment
        session = session_of(environment)
        opts = environment.parsed_options
        if session is None:
            users = opts.num_users or 1
            return users, float(users)
        driver = session.driver
        # A driver from an earlier test (the web UI starts again) is finished and summarized.
        if driver is not None and driver.finished.is_set() and not session.summarized:
            return None
        if session.cut_short and not session.summarized:
            return None
        if opts.run_time and self.get_run_time() >= opts.run_time and not session.summarized:
            session.cut_short = f"-t/--run-time {opts.run_time:g} s reached"
            return None
        users = session.users_wanted()
        rate = opts.spawn_rate if session.spawn_rate_given else float(users)
        return users, rate
