"""The hosts tier: cronbase across several hosts and on a real high-availability cluster.

It runs in ``make test`` (about four minutes) and alone with ``make hosts``; both end with the
figures it measured (``tests/hosts/figures.py``). ``CRONBASE_HOSTS_SCALE=3`` runs three times the
jobs. What each test breaks and what it checks:

Hosts (``network.py``: Linux network namespaces and veth pairs, made and removed by the tests;
skipped with the kernel's reason where it refuses them). PostgreSQL 15 runs on host ``db``; each
worker process runs on a host of its own (``ip netns exec``), its jobs (``hosts_app.py``) record
every run and perform their effects where a duplicate shows.

1. ``test_partition.py``: a busy worker host cut off (its packets dropped at the router) past
   its lease, both ways, and one way (it can send, not receive; with cronbase's own TCP
   settings): its jobs are reaped and run on the other hosts; when the link heals, its late
   outcomes are refused by the lease token, no attempt of it that was lost commits or starts an
   effect, no effect happens twice, nothing is lost; it says it lost the database, says it works
   again, and the same process runs the next batch alone. And a scheduler cut off between
   locking a due schedule and its COMMIT: the other hosts go on firing its slots, once each.
2. ``test_slow_link.py``: a worker on a slow, lossy link (``tc netem`` delay and loss, or on a
   kernel without netem a narrow ``tbf`` link that queues and drops) holds jobs past twice their
   lease while the other hosts' reapers run: no lease is taken from it, nothing runs twice.
3. ``test_clock_skew.py``: workers whose clocks are 90 s ahead and 90 s behind (libfaketime):
   a durable sleep begun on one and ended on the other lasts its time, no job starts before its
   ``run_at``, a delay given on a skewed host counts from the database's clock, no lease is
   taken from a live worker, and a schedule firing every second fires each slot once, none early.

Patroni (``patroni.py``: three PostgreSQL 15 nodes, one etcd, REST APIs on 127.0.0.1, short
TTLs), workers and a producer on the multi-host URL with ``target_session_attrs=read-write``
(``test_patroni.py``):

4. synchronous mode, the leader SIGKILLed twice (its Patroni and its PostgreSQL) mid-drain and
   brought back as a replica: every acknowledged defer succeeds, no effect runs twice, workers
   never exit, the producer fails only during a switch, LISTEN follows the new leader;
5. a ``patronictl switchover`` under load: the same;
6. asynchronous mode: what a failover loses, measured, and that it is always the newest of
   what the old leader acknowledged.

docs/ha-and-hosts.md is the setup these tests recommend, with their figures.
"""
