"""Logging for the daemon: one structlog chain, console on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

LogFormat = Literal["auto", "console", "json"]


def configure(fmt: LogFormat = "auto") -> None:
    """Set up structlog for the process (libraries, the SDK included, never do this)."""
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
