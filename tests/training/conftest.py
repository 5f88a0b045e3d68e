"""Fixtures of the training tests: ``examples``, the schools questions on a fresh SQLite
database (tests/helpers/local_trainer.py), for every module that does not define its own."""

from __future__ import annotations

from tests.helpers.local_trainer import examples

__all__ = ["examples"]
