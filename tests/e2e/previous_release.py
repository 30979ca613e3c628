"""The previous release that the mixed-version test (test_two_versions.py) runs beside this code.

cronbase has no tagged release yet, so the previous release is a recorded commit: b272863, the
last commit of the second round (migrations 0001-0013), before the history (0015), the
supervisor (0016), fair share (0017), task versions (0018) and priority aging (0019). It is what
a team running cronbase today deploys from, and the furthest back a rolling deploy of this code
has to reach. When a release is tagged, this names the tag before it; the test reads it from here
and nowhere else.
"""

from __future__ import annotations

COMMIT = "b272863"
# The newest migration the previous release knows (its require_current wants exactly this).
SCHEMA_VERSION = 13
