// A cronbase worker in Node: it runs the jobs of its own tasks from the queue your Python workers
// share, through the SQL interface (docs/reference/sql.md, "Working a queue from another
// language"). The database decides everything (leases, fencing, retries); this file only loops.
//
//   DATABASE_URL=postgresql://... node examples/node/worker.mjs
//
// Without DATABASE_URL, node-postgres reads libpq's variables (PGHOST, PGPORT, ...), as psql does.
// Expired leases (a worker killed) are taken back by a Python worker's reaper: run at least one.
import os from "node:os";
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";
import pg from "pg";

// A handler gets the job's arguments, a client inside the transaction that completes the job (what
// it writes with `tx` commits only if the job is still its own: the fence below), and the job
// (id, attempt, ...; `pool` for writes that must stay whatever becomes of the attempt).
export const exampleHandlers = {
  async resize_image({ path, width }, tx, job) {
    await tx.query("SELECT pg_sleep(0.1)"); // the work, and its writes through tx
    return { path, width, by: job.worker };
  },
};

export async function work({
  handlers,
  queues = null, // null: every queue
  concurrency = 4,
  pollMs = 1000, // a claim this often when no NOTIFY comes (jobs due later, a missed wake)
  graceMs = 5000, // on SIGTERM, how long running jobs may finish before they are handed back
  workerId = `${os.hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`,
  log = (line) => console.error(`[${workerId}] ${line}`),
}) {
  const url = process.env.DATABASE_URL;
  const config = url ? { connectionString: url } : {};
  const pool = new pg.Pool({ ...config, max: concurrency + 2 });
  pool.on("error", (error) => log(`idle connection lost: ${error.message}`)); // the pool reconnects
  const held = new Map(); // job id -> { job, done (a promise), timer }
  let stopping = false;
  let wake = () => {};

  // Its tasks are required: a job of another task is left to the worker that knows it.
  const register = () =>
    pool.query("SELECT cronbase.register_worker($1, $2, $3, $4, $5, $6)", [
      workerId, queues, Object.keys(handlers), os.hostname(), process.pid, concurrency,
    ]);
  await register();
  log(`registered for ${Object.keys(handlers).join(", ")}`);

  // A due job is announced on the schema's channel (payload: its queue): wake the loop at once.
  const listener = new pg.Client(config);
  await listener.connect();
  listener.on("notification", () => wake());
  await listener.query("LISTEN cronbase_jobs");

  const stop = (signal) => {
    log(`${signal}: stopping`);
    stopping = true;
    wake();
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);

  async function run(job) {
    const tx = await pool.connect();
    try {
      await tx.query("BEGIN");
      const result = await handlers[job.task](job.args, tx, { ...job, worker: workerId, pool });
      // The fence: complete() in the handler's own transaction. False means the lease was lost
      // (reaped after a pause, retried by an operator): another attempt owns the job now, so
      // this one's writes are rolled back with it, and the job's effect happens once.
      const { rows } = await tx.query("SELECT cronbase.complete($1, $2, $3, $4::jsonb) AS ok", [
        workerId, job.id, job.lease_token, result == null ? null : JSON.stringify(result),
      ]);
      await tx.query(rows[0].ok ? "COMMIT" : "ROLLBACK");
      log(`job ${job.id} (${job.task}) ${rows[0].ok ? "succeeded" : "lost its lease: rolled back"}`);
    } catch (error) {
      await tx.query("ROLLBACK").catch(() => {});
      // A failure is written outside the rolled-back transaction: retried with Python's
      // backoff, or dead once its attempts are used up (NULL: the lease was lost meanwhile).
      const { rows } = await pool.query(
        "SELECT cronbase.fail($1, $2, $3, $4, error_type => $5, traceback => $6) AS status",
        [workerId, job.id, job.lease_token, String(error?.message ?? error), error?.name, error?.stack],
      );
      log(`job ${job.id} (${job.task}) failed: ${error?.message}; now ${rows[0].status}`);
    } finally {
      tx.release();
    }
  }

  // Renew a third of the way into the lease, so that two renewals can fail before it runs out.
  function renewEvery(job) {
    return setInterval(async () => {
      const { rows } = await pool
        .query("SELECT cronbase.renew($1, $2, $3) AS id", [workerId, [job.id], [job.lease_token]])
        .catch((error) => (log(`renew failed: ${error.message}`), { rows: [{}] }));
      if (rows.length === 0) log(`job ${job.id}: lease lost; its complete() will roll back`);
    }, (job.lease_seconds * 1000) / 3);
  }

  while (!stopping) {
    const free = concurrency - held.size;
    let jobs = [];
    if (free > 0) {
      try {
        // lease_seconds from the database's own clock: no skew with this host's.
        ({ rows: jobs } = await pool.query(
          "SELECT *, extract(epoch FROM lease_expires_at - now())::float8 AS lease_seconds" +
            " FROM cronbase.claim($1, $2)",
          [workerId, free],
        ));
      } catch (error) {
        log(`claim failed: ${error.message}`); // the database away: try again after a pause
        // Its row pruned as gone (cut off for a day): register again.
        if (/is not registered/.test(error.message)) await register().catch(() => {});
      }
    }
    for (const job of jobs) {
      const entry = { job, timer: renewEvery(job) };
      // An error here is the database's (its lease then runs out, and the job runs again).
      entry.done = run(job).catch((error) => log(`job ${job.id}: ${error.message}`)).finally(() => {
        clearInterval(entry.timer);
        held.delete(job.id);
        wake();
      });
      held.set(job.id, entry);
    }
    if (jobs.length === free && free > 0) continue; // took all it could: there may be more
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, pollMs);
      wake = () => (clearTimeout(timer), resolve());
    });
  }

  // Stopping: let running jobs finish for a while, then hand back the rest (queued again at
  // once, the attempt not counted); a handler still running then finds its complete() false.
  const running = [...held.values()].map((entry) => entry.done);
  await Promise.race([Promise.allSettled(running), new Promise((r) => setTimeout(r, graceMs))]);
  const left = [...held.values()].map((entry) => entry.job);
  if (left.length > 0) {
    await pool.query("SELECT cronbase.release($1, $2, $3)", [
      workerId, left.map((job) => job.id), left.map((job) => job.lease_token),
    ]);
    log(`handed back ${left.map((job) => job.id).join(", ")}`);
  }
  await pool.query("SELECT cronbase.unregister_worker($1)", [workerId]);
  await listener.end();
  log("stopped");
  process.exit(0); // handlers still running hold pool clients: leave without waiting for them
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  await work({ handlers: exampleHandlers });
}
