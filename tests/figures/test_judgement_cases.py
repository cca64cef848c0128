"""The cheap rows of `benchmarks/judgements.py`, from its own case definitions (so the two cannot
drift): a healthy run stays silent, and each fault fires the check that exists for it in every
cell the fault is in. The whole matrix, with repeats and the costly cases, is the benchmark's."""

from __future__ import annotations

import pytest

from benchmarks.judgements import CASES, RUN, Judgement, Outcome, Running, Sample, score

HEALTHY = ("rounds", "radix")
FAULTS = {"count-skew": ("tokens",), "merged-chunks": ("accept_length",), "front-queue": ("ttft",),
          "front-queue-llamacpp": ("in_flight",), "cache-drop": ("cache_state",),
          "other-client": ("requests", "spec_account"), "starved-client": ("client_headroom",)}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """One run of each case: the healthy ones together, the faults together (against the
    time-scaled simulator they mostly wait), and the starved client alone, as its spinning thread
    takes a core from whatever runs beside it."""
    out = tmp_path_factory.mktemp("judgements")
    done = {}
    for names in (HEALTHY, [name for name in FAULTS if name != "starved-client"], ["starved-client"]):
        running = [Running(CASES[name], out) for name in names]
        done.update({run.case.name: run.finish() for run in running})
    return done


def scored(outcome: Outcome) -> list[Sample]:
    assert not outcome.problem, outcome.problem
    return score(outcome)


@pytest.mark.processes
@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_run_fires_no_check(outcomes, name):
    # client_headroom on a healthy run is this machine's load, not the case's: starved-client tests it
    fired = [(s.cell, s.check, s.detail) for s in scored(outcomes[name]) if s.fired and s.check != "client_headroom"]
    assert fired == []


@pytest.mark.processes
@pytest.mark.parametrize("name", FAULTS)
def test_a_fault_fires_its_checks_in_every_cell_it_is_in(outcomes, name):
    for check in FAULTS[name]:
        assert check in CASES[name].fire
        where = [s for s in scored(outcomes[name]) if s.check == check and s.should_fire]
        assert where, f"no cell of {name} holds its fault"
        assert [(s.cell, s.detail) for s in where if not s.fired] == []


# --- the scoring itself, on hand-built judgements ------------------------------------------------------

def outcome_of(name: str, *judgements: tuple[str, str, bool | None], **loads: float) -> Outcome:
    """A run of the case `name` whose report said `judgements` (cell, check, ok); `loads` by cell
    name, spelled with underscores."""
    outcome = Outcome(CASES[name], 1, None, 1.0, 0, 0.0)
    outcome.judgements = [Judgement(cell, check, ok, f"{check} said so") for cell, check, ok in judgements]
    outcome.loads = {cell.replace("_", "-"): load for cell, load in loads.items()}
    return outcome


def test_where_the_fault_is_its_checks_should_fire_and_the_others_not():
    samples = score(outcome_of("front-queue", ("single", "ttft", True), ("c4-same", "ttft", False),
                               ("c4-same", "tokens", False), (RUN, "cut_short", True), c4_same=4))
    assert {(s.cell, s.check): (s.should_fire, s.fired) for s in samples} == {
        ("single", "ttft"): (False, False),  # one stream: nothing waits in the queue in front
        ("c4-same", "ttft"): (True, True),
        ("c4-same", "overlap"): (True, False),  # a check that exists for the fault but is missing is silent
        ("c4-same", "tokens"): (False, True),  # a false alarm
        (RUN, "cut_short"): (False, False)}
    assert [s.detail for s in samples if s.check == "overlap"] == ["no `overlap` check in this cell"]


def test_checks_the_fault_also_moves_and_cells_of_unknown_truth_are_not_scored():
    other = score(outcome_of("other-client", ("single", "accept_length", False), ("single", "requests", False)))
    assert [(s.check, s.should_fire, s.fired) for s in other] == [
        ("requests", True, True), ("spec_account", True, False), ("tokens", True, False)]
    killed = score(outcome_of("server-killed", ("c2-same", "tokens", False), (RUN, "cut_short", False)))
    assert [(s.cell, s.check, s.should_fire, s.fired) for s in killed] == [(RUN, "cut_short", True, True)]


def test_a_search_level_is_judged_only_where_its_truth_is_known():
    samples = score(outcome_of("search-client-queue", ("search-6rps", "capacity", True),
                               ("search-51rps", "capacity", False), ("search-96rps", "capacity", True),
                               ("search-96rps-r2", "capacity", False),
                               search_6rps=6, search_51rps=51, search_96rps=96, search_96rps_r2=96))
    assert [(s.cell, s.should_fire, s.fired) for s in samples] == [
        ("search-6rps", False, False), ("search-96rps", True, False), ("search-96rps-r2", True, True)]
