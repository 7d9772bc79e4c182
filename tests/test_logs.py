"""The daemon's JSON log lines: a failure is logged with its traceback, never with the values of
the frames' variables (a token, what a client sent)."""

from __future__ import annotations

import json

import pytest
import structlog

from turnkeeper.logs import configure


def test_a_json_log_line_carries_the_traceback_without_local_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure("json")
    try:
        secret = "s3cret-token-value"
        raise ValueError(f"bad request of length {len(secret)}")
    except ValueError:
        structlog.get_logger("test").exception("request_failed")
    finally:
        structlog.reset_defaults()
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    (exception,) = line["exception"]
    assert exception["exc_type"] == "ValueError"
    assert exception["frames"]
    assert "s3cret-token-value" not in json.dumps(line)
