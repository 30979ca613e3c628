// The Node worker of test_sql_worker's cross-language test: examples/node/worker.mjs's loop with
// a handler that writes its effect through the transaction that completes the job, and, for a job
// deferred with block, marks that it holds the job and waits for the test's flag.
//   node tests/integration/sql_worker_node.mjs WORKER_ID
import { work } from "../../examples/node/worker.mjs";

const workerId = process.argv[2];
const flagPollMs = 50;

await work({
  workerId,
  queues: ["mixed"],
  pollMs: 200,
  handlers: {
    async node_work({ block }, tx, job) {
      if (block) {
        // Outside the job's transaction (the pool autocommits), so the test sees it at once.
        await job.pool.query("INSERT INTO sql_worker_holds VALUES ($1, $2, $3)", [
          job.id, job.attempt, workerId,
        ]);
        for (;;) {
          const { rows } = await tx.query("SELECT FROM sql_worker_flags WHERE name = 'go'");
          if (rows.length > 0) break;
          await new Promise((resolve) => setTimeout(resolve, flagPollMs));
        }
      }
      await tx.query("INSERT INTO sql_worker_effects VALUES ($1, $2, 'node', $3)", [
        job.id, job.attempt, workerId,
      ]);
      return { n: job.args.n };
    },
  },
});
