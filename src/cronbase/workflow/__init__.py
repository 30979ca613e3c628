"""Workflows: dependencies, chains and groups, durable steps, sleeps and events."""
