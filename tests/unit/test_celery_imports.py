"""A Celery import is ported by its prefix: ``celery.X`` becomes ``cronbase.contrib.celery.X``
for the modules and names people import (the guide's table of imports), checked against
Celery's own modules so that the table stays true to Celery too."""

from __future__ import annotations

import importlib

import pytest

PORTED = {
    "": ["Celery", "shared_task", "chain", "group", "chord", "signature", "current_app", "Task"],
    ".schedules": ["crontab"],
    ".result": ["AsyncResult", "GroupResult"],
    ".exceptions": ["MaxRetriesExceededError", "SoftTimeLimitExceeded", "Retry"],
    ".states": ["PENDING", "STARTED", "RETRY", "SUCCESS", "FAILURE", "REVOKED"],
}


@pytest.mark.parametrize("suffix", PORTED)
def test_each_celery_import_has_its_port(suffix: str) -> None:
    celery = importlib.import_module(f"celery{suffix}")
    ported = importlib.import_module(f"cronbase.contrib.celery{suffix}")
    for name in PORTED[suffix]:
        assert hasattr(celery, name), f"celery{suffix} has no {name}: the table is wrong"
        assert hasattr(ported, name), f"cronbase.contrib.celery{suffix} has no {name}"
    if suffix == ".states":
        assert [getattr(ported, n) for n in PORTED[suffix]] == PORTED[suffix]


def test_celery_signals_point_to_the_hooks() -> None:
    with pytest.raises(ImportError, match="on_job_start"):
        importlib.import_module("cronbase.contrib.celery.signals")
