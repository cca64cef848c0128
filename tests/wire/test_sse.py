"""The stream reader: the three servers' wire shapes, timing by arrival, malformed input."""

import orjson

from loadlib.figures.live import LiveCounters
from loadlib.wire.sse import StreamReader, http_error_reason, parse_stream


def sse(*events: dict | str) -> list[bytes]:
    """One piece per event, as a server flushing each event would deliver them."""
    out = []
    for event in events:
        payload = event if isinstance(event, str) else orjson.dumps(event).decode()
        out.append(f"data: {payload}\n\n".encode())
    return out


def sglang_chunk(content=None, reasoning=None, finish=None, role=None):
    return {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"role": role, "content": content,
                                                "reasoning_content": reasoning, "tool_calls": None},
                         "logprobs": None, "finish_reason": finish, "matched_stop": None}],
            "usage": None}


USAGE = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
         "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49,
                   "prompt_tokens_details": {"cached_tokens": 32}}}


def test_sglang_stream_times_first_and_last_content_chunk_and_done():
    pieces = sse(sglang_chunk(content="", role="assistant"), sglang_chunk(content="def f"),
                 sglang_chunk(content="(x):"), sglang_chunk(content="", finish="stop"), USAGE, "[DONE]")
    arrivals = [10.0, 10.5, 11.0, 11.2, 11.3, 11.4]
    s = parse_stream(pieces, arrivals)
    assert (s.first_token_at, s.last_token_at, s.done_at) == (10.5, 11.0, 11.4)
    assert s.chunks == 2
    assert (s.completion_tokens, s.prompt_tokens, s.cached_tokens) == (9, 40, 32)
    assert s.finish_reason == "stop"
    assert s.error is None
    assert s.output_sha is not None


def test_reasoning_counts_as_output_for_ttft_and_chunks():
    pieces = sse(sglang_chunk(reasoning="Let me think"), sglang_chunk(content="Answer"), USAGE, "[DONE]")
    s = parse_stream(pieces, [1.0, 2.0, 3.0, 4.0])
    assert s.first_token_at == 1.0 and s.chunks == 2


def test_vllm_reasoning_field_and_finish_on_last_token_chunk():
    first = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    think = {"id": "c", "choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]}
    last = {"id": "c", "choices": [{"index": 0, "delta": {"content": "done"}, "finish_reason": "length"}]}
    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17}}
    s = parse_stream(sse(first, think, last, usage, "[DONE]"), [1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.first_token_at, s.last_token_at, s.chunks) == (2.0, 3.0, 2)
    assert s.finish_reason == "length" and s.completion_tokens == 12 and s.cached_tokens is None


def test_llamacpp_role_chunk_comments_and_timings():
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}]}
    tok = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
    final = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
             "timings": {"predicted_per_second": 50.0}}
    pieces = [b": ping\n\n"] + sse(role, tok, tok, final, "[DONE]")
    s = parse_stream(pieces, [0.5, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.first_token_at, s.chunks, s.completion_tokens, s.done_at) == (2.0, 2, 4, 5.0)


def test_llamacpp_error_event_without_done_is_an_error():
    tok = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    err = {"error": {"code": 500, "message": "context shift disabled", "type": "server_error"}}
    s = parse_stream(sse(tok, err), [1.0, 2.0])
    assert s.error == "stream error: context shift disabled"
    assert s.done_at is None


def test_malformed_json_line_is_reported_and_the_rest_still_read():
    pieces = [b"data: {not json\n\n"] + sse(sglang_chunk(content="a"), USAGE, "[DONE]")
    s = parse_stream(pieces, [1.0, 2.0, 3.0, 4.0])
    assert s.error == "malformed JSON in stream"
    assert s.chunks == 1 and s.completion_tokens == 9


def test_event_split_across_pieces_is_timed_when_its_line_completes():
    whole = b"".join(sse(sglang_chunk(content="abc"), USAGE, "[DONE]"))
    cut = whole.index(b"abc") + 1
    s = parse_stream([whole[:cut], whole[cut:]], [1.0, 2.0])
    assert s.first_token_at == 2.0 and s.chunks == 1


def test_crlf_line_endings_and_data_without_space():
    pieces = [b"data:" + orjson.dumps(sglang_chunk(content="x")) + b"\r\n\r\n",
              b"data: " + orjson.dumps(USAGE) + b"\r\n\r\n", b"data: [DONE]\r\n\r\n"]
    s = parse_stream(pieces, [1.0, 2.0, 3.0])
    assert s.chunks == 1 and s.done_at == 3.0 and s.completion_tokens == 9


def test_tool_call_deltas_count_as_output():
    call = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "get", "arguments": "{\"a\":"}}]}}]}
    s = parse_stream(sse(call, USAGE, "[DONE]"), [1.0, 2.0, 3.0])
    assert s.first_token_at == 1.0 and s.chunks == 1


def test_same_text_in_different_chunking_gives_the_same_hash():
    a = parse_stream(sse(sglang_chunk(content="hello "), sglang_chunk(content="world")), [1.0, 2.0])
    b = parse_stream(sse(sglang_chunk(content="hel"), sglang_chunk(content="lo world")), [1.0, 2.0])
    assert a.output_sha == b.output_sha


def test_http_error_bodies_of_each_shape():
    assert http_error_reason(400, b'{"object":"error","message":"Input is too long","type":"BadRequestError","param":null,"code":400}') == "http 400: Input is too long"
    assert http_error_reason(429, b'{"error":{"message":"Rate limited","type":"rate_limit"}}') == "http 429: Rate limited"
    assert http_error_reason(502, b"<html>Bad Gateway</html>") == "http 502: <html>Bad Gateway</html>"
    assert http_error_reason(500, b"") == "http 500"


def test_any_split_of_the_body_gives_the_same_figures():
    whole = b"".join(sse(sglang_chunk(content="héllo"), sglang_chunk(reasoning="ok"), USAGE, "[DONE]"))
    reference = parse_stream([whole], [1.0])
    for cut in range(1, len(whole)):
        s = parse_stream([whole[:cut], whole[cut:]], [1.0, 2.0])
        assert (s.chunks, s.output_sha, s.completion_tokens, s.error) == (
            reference.chunks, reference.output_sha, 9, None)
        assert s.done_at == (1.0 if cut > whole.index(b"[DONE]") + 6 else 2.0)  # when its line ended


def test_first_read_events_counts_the_output_read_together_with_the_first_token():
    a, b, c = sse(sglang_chunk(content="a"), sglang_chunk(content="b"), sglang_chunk(content="c"))
    together = parse_stream([a + b, c], [1.0, 2.0])
    assert (together.first_token_at, together.first_read_events) == (1.0, 2)
    alone = parse_stream([a, b + c], [1.0, 2.0])
    assert (alone.first_token_at, alone.first_read_events) == (1.0, 1)


def memory_grown(reader: StreamReader, chunks: int) -> int:
    """Bytes the reader's process holds more after reading `chunks` one-token chunks, one a read."""
    import tracemalloc

    piece = b"".join(sse(sglang_chunk(content="token ")))
    tracemalloc.start()
    for i in range(chunks):
        reader.feed(piece, float(i))
    grown, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert reader.chunks == chunks
    return grown


def test_memory_of_a_reader_does_not_grow_with_the_answer():
    reader = StreamReader()
    assert memory_grown(reader, 20_000) < 20_000 and reader.chunk_times is None  # nothing kept per chunk


def test_chunk_times_keep_one_stamp_per_output_chunk_and_nothing_unasked():
    """The role chunk, the finish chunk without text and the usage chunk carry no output: no stamp;
    the chunks read together with the first share its stamp."""
    pieces = sse(sglang_chunk(content="", role="assistant"), sglang_chunk(content="a"), sglang_chunk(content="b"),
                 sglang_chunk(reasoning="hm"),
                 sglang_chunk(content="", finish="stop"), USAGE, "[DONE]")
    arrivals = [1.0, 2.0, 2.0, 3.5, 4.0, 4.0, 4.1]
    kept, plain = StreamReader(chunk_times=True), StreamReader()
    for piece, t in zip(pieces, arrivals):
        kept.feed(piece, t)
        plain.feed(piece, t)
    assert kept.chunk_times == [2.0, 2.0, 3.5] and kept.chunks == len(kept.chunk_times)
    assert plain.chunk_times is None and plain.chunks == kept.chunks
    assert memory_grown(StreamReader(chunk_times=True), 20_000) >= 20_000 * 8  # a reference a chunk


def test_live_counters_see_each_chunk_and_the_first_token_as_it_is_read():
    counters = LiveCounters()
    reader = StreamReader(sent_at=10.0, live=counters)
    for t, piece in zip((10.5, 11.0, 11.5), sse(sglang_chunk(content="a"), sglang_chunk(content="b"), USAGE)):
        reader.feed(piece, t)
        if t == 10.5:
            assert (counters.chunks, list(counters.ttfts)) == (1, [0.5])
    assert counters.chunks == 2 and counters.first_tokens == 1
