"""The remote mode's plain rules (generation/upstream.py): what is sent, how the
upstream's events are read, and which envelope each upstream refusal becomes."""

from __future__ import annotations

import json

import pytest

from sift_server.errors import UpstreamBusy, UpstreamError, UpstreamRejected
from sift_server.generation.upstream import DONE, SseEvents, UpstreamPiece, UpstreamRequest, read_event, status_error


def test_the_body_names_the_upstream_model_and_always_streams_with_usage() -> None:
    request = UpstreamRequest("chat", {"messages": [], "max_tokens": 4, "model": "mine", "stream": False})
    assert request.body("theirs") == {
        "messages": [],
        "max_tokens": 4,
        "model": "theirs",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_events_are_joined_data_lines_ended_by_a_blank_line() -> None:
    events = SseEvents()
    fed = [events.feed(line) for line in [": keep-alive", "event: x", 'data: {"a":', "data:1}", "", ""]]
    assert fed == [None, None, None, None, '{"a":\n1}', None]
    assert events.feed("data: [DONE]") is None and events.end() == "[DONE]"


def test_chunks_are_read_by_endpoint() -> None:
    chat = {"choices": [{"index": 0, "delta": {"content": "hé"}, "finish_reason": None}]}
    assert read_event(json.dumps(chat), "chat") == UpstreamPiece("hé")
    done = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    assert read_event(json.dumps(done), "completions") == UpstreamPiece("", "length")
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}
    assert read_event(json.dumps(usage), "chat") == UpstreamPiece(prompt_tokens=5, completion_tokens=7)
    assert read_event(" [DONE]", "chat") is DONE


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"error": {"message": "boom"}}', "mid-answer: boom"),
        ('{"id": 1}', "without 'choices'"),
        ('{"choices": [{"delta": 3}]}', "without 'delta'"),
        ('{"choices": [{"delta": {"content": 3}}]}', "not a string"),
    ],
)
def test_a_chunk_not_in_the_openai_shape_ends_the_answer(data: str, why: str) -> None:
    with pytest.raises(UpstreamError, match=why):
        read_event(data, "chat")


def test_each_refusal_becomes_its_envelope() -> None:
    said = json.dumps({"error": {"message": "prompt too long\x00 for context"}}).encode()
    rejected = status_error(400, said)
    assert isinstance(rejected, UpstreamRejected) and rejected.status == 400
    assert rejected.message == "The upstream refused the request (400): prompt too long  for context"
    assert isinstance(status_error(429, b""), UpstreamBusy)
    for status in (401, 403, 404, 500, 503):
        error = status_error(status, b"<html>")
        assert type(error) is UpstreamError and error.status == 502
    assert "key" in status_error(401, b"").message
    long = json.dumps({"detail": "x" * 5000}).encode()
    assert len(status_error(422, long).message) < 400
