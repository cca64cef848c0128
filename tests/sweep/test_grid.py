"""The configurations of a [server] table, in the order they run, with their commands."""

from __future__ import annotations

from loadlib.sweep.grid import configurations, label_of
from loadlib.sweep.spec import ServerSpec


def spec(**keys) -> ServerSpec:
    return ServerSpec.model_validate(keys)


def test_a_grid_runs_its_product_the_last_key_varying_fastest():
    found = configurations(spec(command="srv --port {port} -d {draft} -m {mrr}", grid={"draft": [4, 8], "mrr": [2, 4]}))
    assert [c.label for c in found] == ["draft=4,mrr=2", "draft=4,mrr=4", "draft=8,mrr=2", "draft=8,mrr=4"]
    assert found[1].values == {"draft": 4, "mrr": 4}
    assert found[1].command == "srv --port {port} -d 4 -m 4"


def test_the_grid_order_is_the_files_not_the_alphabets():
    found = configurations(spec(command="srv --port {port} {z} {a}", grid={"z": [1, 2], "a": ["x", "y"]}))
    assert [c.label for c in found] == ["z=1,a=x", "z=1,a=y", "z=2,a=x", "z=2,a=y"]


def test_named_configurations_run_in_the_files_order_under_their_labels():
    found = configurations(spec(command="srv --port {port} --attention-backend {attn}",
                                configs=[{"label": "triton", "values": {"attn": "triton"}},
                                         {"label": "fa3", "values": {"attn": "fa3"}}]))
    assert [(c.label, c.command) for c in found] == [("triton", "srv --port {port} --attention-backend triton"),
                                                      ("fa3", "srv --port {port} --attention-backend fa3")]


def test_no_grid_is_one_configuration_the_command_as_written():
    [only] = configurations(spec(command="srv --port {port} --tp 2"))
    assert (only.label, only.values, only.command) == ("server", {}, "srv --port {port} --tp 2")


def test_argv_fills_the_port_and_keeps_a_value_with_spaces_one_argument():
    [config] = configurations(spec(command="srv --port={port} --name 'a {name}' --flag {on}",
                                   configs=[{"label": "spaced", "values": {"name": "b c", "on": True}}]))
    assert config.argv(8123) == ["srv", "--port=8123", "--name", "a b c", "--flag", "true"]


def test_a_grid_label_writes_booleans_as_the_command_line_does():
    labels = [c.label for c in configurations(spec(command="srv --port {port} --x {on}", grid={"on": [True, False]}))]
    assert labels == ["on=true", "on=false"]


def test_literal_braces_stay_single_and_are_not_placeholders():
    [config] = configurations(spec(command="srv --port {port} --json '{{\"cuda_graph_max_bs\": {bs}}}'",
                                   grid={"bs": [16]}))
    assert config.argv(1) == ["srv", "--port", "1", "--json", '{"cuda_graph_max_bs": 16}']


def test_a_label_writes_floats_and_strings_as_given():
    assert label_of({"mem": 0.85, "dtype": "fp8_e5m2"}) == "mem=0.85,dtype=fp8_e5m2"
