"""Logging for the daemon: one structlog chain, console on a terminal, JSON lines otherwise."""

from __future__ import annotations

import sys
from typing import Literal

LogFormat = Literal["auto", "console", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("auto", "console", "json")


def configure(fmt: LogFormat = "auto", *, debug: bool = False) -> None:
    """Set up structlog for the process (libraries, the SDK included, never do this).

    One line per request is logged only with ``debug``: at INFO a busy daemon's log says what
    happened to it (connections, plugins, failures), not everything it was asked."""
    # Imported here: the command line reads LOG_FORMATS for every command, the shell's
    # included, and only ``serve`` and ``migrate`` log.
    import logging

    import structlog

    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    # The console renderer prints a traceback itself; a JSON line needs it turned into data
    # first, or ``log.exception`` would record only ``"exc_info": true``. Neither shows the
    # frames' local variables (rich would): they hold tokens and whatever a client sent.
    tracebacks = structlog.processors.ExceptionRenderer(
        structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
    )
    renderers: list[structlog.typing.Processor] = (
        [structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)]
        if console
        else [tracebacks, structlog.processors.JSONRenderer()]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.DEBUG if debug else logging.INFO
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
