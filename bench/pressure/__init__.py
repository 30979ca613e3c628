"""The pressure benchmark: queues under a disturbance at a fixed offered load, side by side.

``make pressure`` (``python -m bench.pressure``; bench/pressure/README.md). In order
(``run.py``):

1. Start one private PostgreSQL (``bench/cluster.py``; defaults, max_connections 200,
   pg_stat_statements when it starts with it).
2. For each subject (``subjects/``: cronbase, raw SQL, pgqueuer, procrastinate, pg-boss), one
   at a time: its clean capacity, the best of 3 burst drains by its scenario worker set-up.
3. For each scenario (``config.py``: idle, readers, overload), in a fresh database: start its
   workers, its claim probe (``probe.py``) and 2 producers (``producer.py``, the mix of
   ``mix.py``) at 40% of its capacity; a clean phase, the disturbance (``disturbances.py``;
   the overload is 1.5x capacity offered), the recovery. Every 10 s the coordinator records
   completions/s, depth, pickup and claim p99 (``collector.py``, from the children's reports:
   ``reporter.py``) and each table and index of the subject (``tables.py``).
4. Per scenario and subject, the figures per phase and the targets (``analysis.py``); the
   Markdown report (``report.py``), results.json and a PNG per scenario (``plot.py``).

Every child process has a timeout and is killed on the way out; the cluster is stopped and
deleted whatever happens.
"""
