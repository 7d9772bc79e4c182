"""Turnkeeper: the combat-clock daemon for tabletop RPG encounters."""

from __future__ import annotations

__version__ = "0.1.0"
