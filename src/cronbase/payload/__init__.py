"""Payloads: Python values to stored JSON at defer, and stored JSON to the handler's
annotated types at run time."""
