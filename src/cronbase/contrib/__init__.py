"""Integrations with other frameworks: each module needs its extra (``cronbase[django]``...)."""
