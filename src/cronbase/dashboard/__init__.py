"""The operator's web dashboard: ``create_app(app)`` is a Starlette app to serve or to mount.

``cronbase dashboard`` serves it with uvicorn (see :func:`cronbase.dashboard.server.serve`).
Needs the ``dashboard`` extra (starlette, jinja2, uvicorn, python-multipart).
"""

from .app import create_app
from .auth import Credentials

__all__ = ["Credentials", "create_app"]
