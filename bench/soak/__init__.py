"""The soak: cronbase under sustained load for a while, to show that nothing grows without bound.

``make soak`` (``python -m bench.soak``; bench/README.md, "The soak"). In order (``run.py``):

1. Start a private PostgreSQL (``bench/cluster.py``), migrate, and measure capacity: a burst
   drain of pre-loaded no-op jobs by the soak's own worker set-up (``--workers`` processes at
   ``--concurrency``).
2. Start the long-running workers (real cronbase workers, ``app.worker()``, with ``Retention``
   set to a short window and a fast interval, and a schedule firing every few seconds), the
   producers (``defer_many``/``defer`` at ``--rate-fraction`` of the capacity) and the claim
   probe (``children.py``).
3. Every sample interval (a minute in the default 20-minute run, shorter in short runs), record
   every table of the cronbase schema and any partition under it (``tables.py``), and the
   interval's enqueue, claim and pickup p99 and throughput (``collector.py``). In the middle, a
   session sits idle in a REPEATABLE READ transaction for a while, then commits.
4. Stop the producers, let the workers drain, stop them; check that every job ran exactly once
   and every schedule slot fired once; fit slopes and check the bounds (``analysis.py``); print
   a Markdown table, write JSON, Markdown and (when matplotlib is importable) a PNG to
   ``bench/results/``. The exit status is non-zero when a check fails.

``--ci`` is the 2-minute version at small scale that ``tests/soak/test_soak_ci.py`` runs; it
needs only the project's ``.venv`` (psycopg, cronbase; no matplotlib).
"""
