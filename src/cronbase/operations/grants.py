"""``app.grants``: the privileges of the application role in a two-role setup (the statements come
from ``db/grants.py``, derived from what each statement needs); granting them is audited."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..db.grants import apply_grants, render_grants, require_role
from .audited import audit_params

if TYPE_CHECKING:
    from ..db.database import Database


class Grants:
    """``statements(role)`` to print, ``apply(role)`` to run them as the schema's owner."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def statements(self, role: str, *, interface: bool = False) -> list[str]:
        """The GRANT statements ``role`` needs, as SQL text (the role must exist); with
        ``interface``, those of a role that only uses the SQL interface (another language's)."""
        with self.db.connect(application_name="cronbase-grants") as conn:
            require_role(conn, role)
        return render_grants(self.db.schema, role, interface=interface)

    def apply(self, role: str, *, interface: bool = False, actor: str | None = None) -> list[str]:
        """Run them (this App's URL must be the schema owner's), audited as ``role.grant`` in
        the same transaction; returns them."""
        with self.db.connect(application_name="cronbase-grants") as conn, conn.transaction():
            applied = apply_grants(conn, self.db.schema, role, interface=interface)
            detail = {"statements": applied}
            conn.execute(
                self.db.queries.insert_audit,
                audit_params(actor, "role.grant", f"role:{role}", detail),
            )
        return applied
