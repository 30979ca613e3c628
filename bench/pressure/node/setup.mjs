// pg-boss's schema and the benchmark's queue (`node setup.mjs setup`), or N immediate no-op
// jobs for a capacity drain (`node setup.mjs preload N`), in DATABASE_URL's database.
import { PgBoss } from 'pg-boss'
import { QUEUE, connectionString } from './report.mjs'

const PRELOAD_PRODUCER = 7 // bench/pressure/mix.py's

const [command, count] = process.argv.slice(2)
const boss = new PgBoss({ connectionString: connectionString(), supervise: false, schedule: false })
boss.on('error', error => console.error(error))
await boss.start()
if (command === 'setup') {
  // retryDelay 1 s without backoff: the first failure comes back 1 s later, as for every subject.
  await boss.createQueue(QUEUE, { retryLimit: 2, retryDelay: 1, retryBackoff: false })
} else if (command === 'preload') {
  const n = Number(count)
  const t = Date.now() / 1000
  const jobs = []
  for (let i = 0; i < n; i++) jobs.push({ data: { p: PRELOAD_PRODUCER, n: i, t, f: 0 } })
  await boss.insert(QUEUE, jobs) // one statement: the drain starts on all of them at once
} else {
  throw new Error(`unknown command ${command}: setup or preload N`)
}
await boss.stop({ graceful: false })
