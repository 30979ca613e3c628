// Enqueue a job for cronbase's Python workers from Node, through the SQL interface
// (docs/reference/sql.md): cronbase.defer() checks what Python's defer checks, and wakes the
// workers with the same NOTIFY.
//
//   DATABASE_URL=postgresql://... node examples/node/defer.mjs send_email '{"to": "a@b.c"}' emails
//
// Without DATABASE_URL, node-postgres reads libpq's variables (PGHOST, PGPORT, PGUSER,
// PGDATABASE, PGPASSWORD), as psql does: the way to name a Unix socket's folder.
import pg from "pg";

const [task, args = "{}", queue = "default"] = process.argv.slice(2);
if (!task) {
  console.error("usage: node defer.mjs TASK [ARGS_JSON] [QUEUE]");
  process.exit(2);
}
const url = process.env.DATABASE_URL;
const client = new pg.Client(url ? { connectionString: url } : {});
await client.connect();
try {
  // Named arguments (=>) for everything after the task and its arguments: the rest keep the
  // defaults a task gives its jobs (priority 100, 20 attempts, a 1-minute lease).
  const { rows } = await client.query(
    "SELECT cronbase.defer($1, $2::jsonb, queue => $3) AS id",
    [task, args, queue],
  );
  console.log(`deferred job ${rows[0].id}`);
} catch (error) {
  // A refusal names the bad value, as Python's does (SQLSTATE 22023, or 54000 for a payload
  // too big): print it and exit non-zero, nothing was written.
  console.error(`refused: ${error.message} (SQLSTATE ${error.code})`);
  process.exitCode = 1;
} finally {
  await client.end();
}
