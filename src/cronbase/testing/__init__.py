"""Helpers for users' own tests: inline mode, draining a test database, enqueued-job assertions."""
