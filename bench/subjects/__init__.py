"""One module per system under test; each offers the same functions (see ``raw.py``)."""
