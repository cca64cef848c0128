"""`--thinking server|on|off`: "server" sends the thread script's exact payload (no
chat_template_kwargs), and a Qwen3 server's template then thinks; through real HTTP against the
simulator."""

from __future__ import annotations

import argparse

import pytest

from loadlib.run.options import thinking_mode
from loadlib.scenarios.base import request_params
from loadlib.scenarios.thread import PROTOCOL_PROMPTS
from loadlib.wire.client import ChatClient, ChatSettings, chat_body

MESSAGES = [{"role": "user", "content": PROTOCOL_PROMPTS["code"]}]


@pytest.mark.parametrize("text, mode", [("server", "server"), ("ON", "on"), ("off", "off"), ("false", "off")])
def test_the_option_takes_server_on_or_off(text, mode):
    assert thinking_mode(text) == mode


def test_any_other_thinking_value_is_refused_in_one_line():
    with pytest.raises(argparse.ArgumentTypeError, match="expected server, on or off, got 'maybe'"):
        thinking_mode("maybe")


def test_server_sends_no_chat_template_kwargs_and_on_off_send_enable_thinking():
    assert "chat_template_kwargs" not in chat_body(ChatSettings("m", thinking="server"), MESSAGES)
    assert chat_body(ChatSettings("m", thinking="on"), MESSAGES)["chat_template_kwargs"] == {"enable_thinking": True}
    assert chat_body(ChatSettings("m"), MESSAGES)["chat_template_kwargs"] == {"enable_thinking": False}


def test_a_scenarios_thinking_overrides_the_runs_both_ways():
    assert "chat_template_kwargs" not in chat_body(ChatSettings("m"), MESSAGES, **request_params(thinking="server"))
    body = chat_body(ChatSettings("m", thinking="server"), MESSAGES, **request_params(thinking="off"))
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.processes
def test_server_default_on_the_simulator_answers_as_thinking_on_does(simulator):
    """The simulator's Qwen3 preset thinks when no enable_thinking is sent, as the real template does."""
    sim, _trace = simulator

    def answer(mode: str):
        client = ChatClient(sim.url, ChatSettings("sim", max_tokens=1024, thinking=mode))
        try:
            record = client.stream(chat_body(client.settings, MESSAGES), f"r-{mode}")
        finally:
            client.close()
        assert record.error is None, record.error
        return record.output_sha, record.completion_tokens

    assert answer("server") == answer("on") != answer("off")
