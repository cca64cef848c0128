"""The web UI's start and Edit forms, checked the way the command line is.

Locust's `/swarm` handler is wrapped (its view function replaced by one that calls it):
- this tool's options go through the same argparse type functions as on the command line, and a
  bad value is one line on the form ("--rounds: must be at least 1, got 0");
- a Host that is not `http(s)://HOST[:PORT]` is refused on the form, never a traceback in the log
  and a UI stuck in SPAWNING;
- with a profile, the form leaves out the settings the profile makes (rounds, concurrency,
  scenarios, max tokens, thinking: they are changed in the profile), and a value typed for one of
  them beside a profile named in the form is refused rather than silently replacing the profile's;
- a concurrency typed in the form above its Number of users is refused on the form, as beside
  `-u` on the command line;
- Edit during a run changes the streams of a closed-loop run (the load shape picks the new count
  up at its next tick); in the rounds, ladder and open modes the plan fixes the streams, and the
  form says so at once. A locustfile's own users are Locust's to edit, as always.
"""

from __future__ import annotations

import argparse
import copy
from typing import TYPE_CHECKING, Any, Callable, Protocol

from flask import jsonify, request
from locust import argument_parser
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING
from werkzeug.datastructures import ImmutableMultiDict

from loadlib.profiles import ProfileError
from loadlib.run import options
from loadlib.run.inputs import profile_settings, refuse_streams_beyond_users, run_profile
from loadlib.wire.connection import Endpoint

if TYPE_CHECKING:
    from loadlib.modes import LoadMode
    from loadlib.run.shape import StreamsWanted


class EditableRun(Protocol):
    """What the forms read of the run's session (`loadlib.run.session.RunSession`)."""

    plays_load_modes: bool  # locustfiles/dflash.py's modes (else the locustfile's own users, Locust's to edit)
    streams: StreamsWanted  # a closed run's Edit

    @property
    def mode(self) -> LoadMode: ...


def install(environment: Environment, session: EditableRun) -> None:
    web_ui = environment.web_ui
    views = web_ui.app.view_functions
    views["locust.swarm"] = _checked_swarm(environment, session, views["locust.swarm"])
    views["locust.index"] = _with_edit_notice(views["locust.index"])
    original = web_ui.update_template_args

    def update_template_args() -> None:
        original()
        _show_current_settings(web_ui.template_args.get("extra_options", {}), environment.parsed_options)

    web_ui.update_template_args = update_template_args
    update_template_args()


# Locust's Edit dialog closes on submit whatever the answer, so a refusal it would show inside the
# dialog is never seen: the page is told to show such an answer itself.
EDIT_NOTICE_SCRIPT = """<script>(() => {
  const fetch0 = window.fetch;
  window.fetch = async (...args) => {
    const response = await fetch0(...args);
    if (String(args[0].url || args[0]).endsWith("swarm")) {
      response.clone().json().then(body => { if (body.edit_refused) window.alert(body.message); }).catch(() => {});
    }
    return response;
  };
})();</script>"""


def _with_edit_notice(locust_index: Callable[[], Any]) -> Callable[[], Any]:
    def index() -> Any:
        page = locust_index()
        if isinstance(page, str) and "</head>" in page:
            return page.replace("</head>", EDIT_NOTICE_SCRIPT + "</head>", 1)
        return page
    return index


def _show_current_settings(extra_options: dict[str, dict[str, Any]], opts: Any) -> None:
    """The form shows the settings the run will use: the options' values, or with a profile none
    of the settings it makes itself."""
    for name in options.PROFILE_SETTINGS:
        if name in extra_options:
            if opts.profile:
                del extra_options[name]
            else:
                extra_options[name]["default_value"] = _form_text(getattr(opts, name))


def _form_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


def _checked_swarm(environment: Environment, session: EditableRun, locust_view: Callable[[], Any]) -> Callable[[], Any]:
    types = _web_ui_option_types()

    def refuse(message: str) -> Any:
        return jsonify({"success": False, "message": message, "host": environment.host})

    def swarm() -> Any:
        if environment.runner.state in (STATE_SPAWNING, STATE_RUNNING) and session.plays_load_modes:
            return _edit(environment, session, refuse)
        ours = {}
        for name in types.keys() & request.form.keys():
            try:
                ours[name] = types[name](request.form[name])
            except (argparse.ArgumentTypeError, ValueError) as exc:
                return refuse(f"--{name.replace('_', '-')}: {exc}")
        if "host" in request.form:
            try:
                Endpoint.parse(request.form["host"].strip())
            except ValueError as exc:
                return refuse(f"Host: {exc}")
        if session.plays_load_modes:
            conflict = (_profile_conflict(environment.parsed_options, ours, request.form.get("profile"))
                        or _streams_beyond_users(environment.parsed_options, ours, request.form))
            if conflict:
                return refuse(conflict)
        request.form = ImmutableMultiDict([(k, v.strip() if k == "host" else v)
                                           for k, v in request.form.items(multi=True) if k not in ours])
        vars(environment.parsed_options).update(ours)
        return locust_view()
    return swarm


def _edit(environment: Environment, session: EditableRun, refuse: Callable[[str], Any]) -> Any:
    """Edit during a run of a load mode: a closed run's streams change; elsewhere, why not."""
    mode = session.mode
    fixed = mode.fixed_streams
    if fixed:
        message = (f"Edit cannot change the streams of a {mode.name} run: its plan fixes them "
                   f"({fixed}). Stop it and start a new test instead.")
        return jsonify({"success": False, "edit_refused": True, "message": message, "host": environment.host})
    try:
        users = int(request.form.get("user_count", ""))
    except ValueError:
        return refuse(f"Number of users: expected a whole number, got {request.form.get('user_count')!r}")
    if users < 1:
        return refuse(f"Number of users: must be at least 1, got {users}")
    session.streams.edit(users, float(request.form["spawn_rate"]) if request.form.get("spawn_rate") else None)
    return jsonify({"success": True, "message": f"Closed loop now runs {users} streams", "host": environment.host})


def _profile_conflict(opts: Any, submitted: dict[str, Any], form_profile: str | None) -> str | None:
    """Why the form's settings cannot run as given with the profile it names, or None."""
    profile_file = opts.profile if form_profile is None else form_profile.strip()
    if not profile_file:
        return None
    probe = copy.copy(opts)
    probe.profile = profile_file
    try:
        settings = profile_settings(run_profile(probe))  # the profile's settings, as the run would take them
    except ProfileError as exc:
        return str(exc)
    for name, default in options.PROFILE_SETTINGS.items():
        if name in submitted and submitted[name] not in (default, settings[name]):
            made = f"sets it to {_form_text(settings[name])}" if settings[name] is not None else "has no such setting"
            return (f"--{name.replace('_', '-')}: the profile {profile_file} {made}; change it in the profile, "
                    "not in the form")
    return None


def _streams_beyond_users(opts: Any, submitted: dict[str, Any], form: Any) -> str | None:
    """Why the form's Number of users cannot run the concurrency typed in the form, or None."""
    try:
        users = int(form.get("user_count", ""))
    except ValueError:
        return None  # Locust's own check of the form says so
    probe = copy.copy(opts)
    vars(probe).update(submitted)
    if form.get("profile") is not None:
        probe.profile = form["profile"].strip()
    try:
        refuse_streams_beyond_users(probe, users, "Number of users")
    except ProfileError as exc:
        return str(exc)
    return None


def _web_ui_option_types() -> dict[str, Callable[[str], Any]]:
    """dest -> parser for the options that the locustfile added to the web UI's form."""
    parser = argument_parser.get_parser()
    locust_own = argument_parser.default_args_dict()
    return {action.dest: _form_value_parser(action) for action in parser._actions  # no public list
            if action.dest in parser.args_included_in_web_ui and action.dest not in locust_own}


def _form_value_parser(action: argparse.Action) -> Callable[[str], Any]:
    """The command line's parsing of one option, for its form field.

    A flag is a checkbox, sent as "true"/"false"; an empty field of an option that is unset by
    default (an empty default) stays unset, as when the option is left off the command line.
    """
    if action.type is None and isinstance(action.default, bool):
        return lambda value: value == "true"
    parse = action.type or str
    return lambda value: action.default if value == "" and action.default in ("", None) else parse(value)
