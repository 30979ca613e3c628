"""The worker: claims due jobs, runs them, records outcomes. Start at worker.py."""

from .worker import Worker

__all__ = ["Worker"]
