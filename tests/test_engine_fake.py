"""The fake engine's serving hooks (its server is the serving wing's runner/serve/fake_server.py):
the command line that starts it, and each knob's verdict from the settings line it prints into
engine.log; an engine without a server mode has neither."""

import json
import os
import sys
from pathlib import Path

import pytest

from runner.base.types import ModelSpec
from runner.engines.fake import DEFAULT_REPLY, SETTINGS_MARK, FakeSpec, served_reply
from runner.engines.transformers import TransformersSpec

ROOT = str(Path(__file__).resolve().parents[1])
MODEL = ModelSpec(id="builtin:demo")


def settings(reply, delay_s):
    return (
        "fake server pid 1 (process group "
        f"1)\n{SETTINGS_MARK}{json.dumps({'reply': reply, 'delay_s': delay_s})}\n"
    )


def test_the_command_starts_the_fake_server_with_the_reply_it_can_send(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    cmd, env = FakeSpec(kind="fake", reply="東京 です", delay_s=0.25).server_command(
        MODEL, "127.0.0.1", 8001
    )
    assert cmd == [
        sys.executable,
        *("-m", "runner.serve.fake_server", "--host", "127.0.0.1", "--port", "8001"),
        *("--reply", "東京 です", "--delay-s", "0.25"),
    ]
    # `-m runner.serve...` imports from here
    assert env == {"PYTHONPATH": os.pathsep.join([ROOT, "/elsewhere"])}
    monkeypatch.delenv("PYTHONPATH")
    cmd, env = FakeSpec(kind="fake", reply="{{ answers[0] }}", serve_fail=True).server_command(
        MODEL, "h", 1
    )
    assert cmd[7:] == ["--fail-start", "--reply", DEFAULT_REPLY, "--delay-s", "0.0"] and env == {
        "PYTHONPATH": ROOT
    }


def test_a_reply_template_is_sent_rendered_unless_it_needs_the_example():
    assert served_reply("{{ answers[0] }}") == DEFAULT_REPLY
    assert (
        served_reply("{{ 'a' ~ 'b' }} です") == "ab です"
        and served_reply("東京 です") == "東京 です"
    )


def test_verdicts_from_the_settings_line_the_fake_server_printed():
    info = FakeSpec(kind="fake", reply="hi", delay_s=0.5).served_evidence(
        MODEL, settings("hi", 0.5), {}, "fake"
    )
    assert [(k.name, k.requested, k.effective, k.status) for k in info.knobs] == [
        ("reply", "hi", "hi", "applied"),
        ("delay_s", 0.5, 0.5, "applied"),
    ]
    assert {k.evidence for k in info.knobs} == {"the fake server's settings line in engine.log"}
    assert (info.name, info.version, info.weights_gib, info.kv_cache_tokens) == (
        "fake",
        "fake",
        None,
        None,
    )
    assert info.notes == ["fake server: replies are a fixed text, no model ran"]
    # the last start's line counts; a delay the server did not take is ignored
    log = settings("hi", 0.5) + settings("hi", 0.0)
    knobs = FakeSpec(kind="fake", reply="hi", delay_s=0.5).served_evidence(MODEL, log, {}, "").knobs
    assert [(k.effective, k.status) for k in knobs] == [("hi", "applied"), (0.0, "ignored")]


def test_a_reply_template_with_variables_is_ignored_saying_why_and_verified_by_no_line():
    spec = FakeSpec(kind="fake", reply="{{ answers[0] }}")
    reply = spec.served_evidence(MODEL, settings(DEFAULT_REPLY, 0.0), {}, "").knobs[0]
    assert (reply.effective, reply.status) == (DEFAULT_REPLY, "ignored")
    assert reply.evidence == (
        "the fake server's settings line in engine.log; the server sees token ids, not the "
        "example, so a reply template with variables is sent as a fixed text"
    )
    knobs = FakeSpec(kind="fake").served_evidence(MODEL, "crashed before printing\n", {}, "").knobs
    assert [(k.effective, k.status) for k in knobs] == [(None, "ignored"), (None, "ignored")]


def test_an_engine_without_a_server_mode_has_no_command():
    # validation refuses `load` with it first (test_serving.py)
    with pytest.raises(NotImplementedError):
        TransformersSpec(kind="transformers").server_command(MODEL, "h", 1)


def test_the_offline_fake_engine_reports_each_setting_as_applied_and_how_it_counts_tokens():
    info = (
        FakeSpec(kind="fake", reply="x", delay_s=0.0, jitter=0.5)
        .build(ModelSpec(id="m"), None)
        .info
    )
    assert [(k.name, k.requested, k.effective, k.status, k.evidence) for k in info.knobs] == [
        ("reply", "x", "x", "applied", "per example"),
        ("delay_s", 0.0, 0.0, "applied", "slept"),
        ("jitter", 0.5, 0.5, "applied", "per call"),
        ("tokens", None, "whitespace words", "default", "how tokens are counted"),
    ]
    assert (info.name, info.device) == ("fake", "none (fake engine)")
