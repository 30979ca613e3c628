"""``app.effects``: the effects ledger handlers use (``effects.py``), with the operator's action on
it, ``forget``, audited as ``effect.forget`` in the transaction that deletes the row."""

from __future__ import annotations

from ..effects import EffectRecord, Effects, found_record
from .audited import Action, perform, perform_async


class Ledger(Effects):
    """``once`` / ``once_async``, ``get``, ``list``, and ``forget``."""

    def forget(self, key: str, *, actor: str | None = None) -> EffectRecord:
        """Delete the effect's row, so it can happen again (an operator's decision); audited as
        ``effect.forget`` by ``actor`` (default ``api``)."""
        return perform(self.db, actor, "effect.forget", f"effect:{key}", self._forget(key))

    async def forget_async(self, key: str, *, actor: str | None = None) -> EffectRecord:
        action = self._forget(key)
        return await perform_async(self.db, actor, "effect.forget", f"effect:{key}", action)

    def _forget(self, key: str) -> Action[EffectRecord]:
        rows = yield self.db.queries.forget_effect, {"key": key}
        forgotten = found_record(rows[0] if rows else None, key)
        # What it was, as the ledger no longer says once it is gone.
        detail = {"status": forgotten.status, "job_id": forgotten.job_id}
        return forgotten, detail
