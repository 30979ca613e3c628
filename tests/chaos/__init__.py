"""The chaos tier: real worker processes drain real jobs while the test breaks things.

Run it with ``make chaos`` (full scale, some minutes) or ``CRONBASE_CHAOS_SCALE=0.1 make chaos``
(CI's reduced scale: 2,000 jobs where full scale has 20,000). ``make test`` skips it. Each
scenario runs on a PostgreSQL cluster of its own (``tests/servers.py``), with worker processes of
``tests/chaos/chaos_app.py``, whose tasks record every run in ``chaos_runs`` and perform their one
effect as a row in ``chaos_effects`` (no unique key there: a second effect is a second row):
``work`` through ``app.effects.once(key)``, and (one healthy job in four) ``work_in_transaction``
in the job's own ``transaction()``. The scenarios, what each breaks and what it checks:

1. worker SIGKILLs mid-drain: three workers; six times during the drain one is SIGKILLed and a
   new one started in its place. Its jobs come back when their leases run out.
2. two immediate PostgreSQL restarts mid-drain (no checkpoint, crash recovery at start), at a
   quarter and at 60% of the drain; the same three workers must live through both.
3. SIGSTOP past the lease, twice: a busy worker, then the worker of one chosen
   ``work_in_transaction`` job caught between its ``transaction()``'s write of the job's success
   and its COMMIT (a test trigger makes that write take 2 s, so the SIGSTOP lands there). Each
   stays stopped until every job it held has been reaped after its lease (or has been 5 s past
   it), then continues. Its late results must be fenced: each job it held succeeds in a later
   attempt, run elsewhere, and no job may stay out of the reapers' reach.
4. schedulers killed in a loop: three workers that also fire a schedule every second
   (``catch_up="all"``); each round one is SIGKILLed and replaced, but in the second round (and
   every fourth after it) all of them are, until two slots have passed unfired. Every second of
   the window must have exactly one job, none missing, each run to success with its effect once.
5. poison rows inserted by SQL among healthy jobs, while they drain: JSON nested 10,000 deep, a
   5,001-digit number, a payload that is a JSON array (each must end ``dead`` after one attempt,
   with the reason), and a job of a task no worker registers (it must stay ``queued`` with 0
   attempts: workers claim only the tasks they register). Every healthy job must succeed.
6. the pooler: the drain through pgbouncer in transaction mode, with a worker SIGKILL and an
   immediate PostgreSQL restart behind the pooler.

Each checks: lost = 0 (every healthy job, or slot, succeeded), duplicate effects = 0, missing
effects = 0 (no job succeeded without its effect), no job left ``running``, and no worker that
exited unasked (each must also exit 0 on the final SIGTERM). Re-runs are counted, not forbidden:
a killed worker's jobs run again, and a handler caught by a restart fails an attempt. Each prints
one line of figures (jobs, kills, restarts, stops, re-runs, lost, duplicate and missing effects,
stuck, worker exits, time to drain) and appends it to ``CRONBASE_CHAOS_SUMMARY``; ``make chaos``
prints them as a table at the end (``tests/chaos/figures.py``). No test asserts speed.
"""
