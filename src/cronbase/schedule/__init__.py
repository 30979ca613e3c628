"""Schedules: cron expressions with time zones, turned into ordinary jobs once per slot."""
