"""Enqueueing: job options, the insert statements' parameters, and the caller's connection."""
