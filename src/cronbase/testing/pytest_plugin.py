"""cronbase's pytest fixtures (registered as the ``cronbase`` pytest11 entry point)."""
