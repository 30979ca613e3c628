"""The previous releases that the mixed-version test (test_two_versions.py) runs beside this code.

cronbase has no tagged release yet, so a previous release is a recorded commit of this
repository's history. Two are run: the furthest back a rolling deploy of this code has to reach,
and the last one before the claim changed its storage. When a release is tagged, the list names
the tags; the test reads them from here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    """A commit a team may be running when it deploys this code."""

    commit: str
    # The newest migration it knows: its require_current wants exactly this, or (from 0016 on,
    # when it is a worker starting) this or a newer schema with no contract migration past it.
    schema_version: int
    why: str

    @property
    def starts_on_newer_schema(self) -> bool:
        """Whether its worker starts on a schema newer than its code (from 0016 on) rather
        than refusing; its workers record the migration they know from then on too."""
        return self.schema_version >= 16


RELEASES = (
    Release(
        "b272863",
        13,
        "the second round's last commit (migrations 0001-0013), before the history (0015), the "
        "supervisor (0016), fair share (0017), task versions (0018) and priority aging (0019): "
        "the furthest back a rolling deploy of this code has to reach",
    ),
    Release(
        "37f9978",
        19,
        "the last commit before the engine (0020: tickets in lanes, claim_tickets): its workers "
        "claim through jobs_due_idx with FOR UPDATE SKIP LOCKED beside the new ones, and its "
        "producers insert without ready_xid (the column's default tickets them)",
    ),
)
