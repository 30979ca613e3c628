"""Django integration (the ``django`` extra: ``pip install -e '.[django]'`` in cronbase's clone).

Add ``"cronbase.contrib.django"`` to ``INSTALLED_APPS``; ``settings.CRONBASE`` says which App:
``{"DATABASE": "default"}`` (the default) builds one on that database, ``{"APP": "pkg.mod:app"}``
uses yours. Then ``from cronbase.contrib.django import app`` in your apps' ``tasks.py``,
``manage.py migrate`` creates cronbase's tables, ``manage.py cronbase worker`` runs the jobs, and
a defer inside ``transaction.atomic()`` commits or rolls back with it. Under Django's test runner
the App follows Django to the test database (see ``follow.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...app import App

__all__ = ["app", "get_app"]


def get_app() -> App:
    """The App of ``settings.CRONBASE``, built on first use."""
    from .config import configured

    return configured()[1]


def __getattr__(name: str) -> App:
    # ``app`` is built on first access, when Django's settings are there to read; importing this
    # package stays free of Django (the console script's --app cronbase.contrib.django:app too).
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
