// A pg-boss worker process for bench/pressure: boss.work() until SIGTERM, reporting every
// attempt's start (bench/pressure/reporter.py's "ran"). Its defaults, except: a batch of 10 per
// fetch; polling every 0.5 s (the least pg-boss allows; its default is 2 s); burstWhenBatchFull,
// which fetches again at once while fetches come back full (without it a process takes 10 jobs
// per poll: 20 jobs/s); perJobResults, so that a failing job fails alone, not its whole batch.
import { PgBoss } from 'pg-boss'
import { CODE, ID_SHIFT, QUEUE, Reporter, connectionString, now, reportErrors, send } from './report.mjs'

const name = process.argv[2] || 'worker'
const WORK = { batchSize: 10, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true, perJobResults: true }

const reporter = new Reporter('ran', ['starts', 'pickups', 'ids', 'codes'])
const boss = new PgBoss({ connectionString: connectionString() })
reportErrors(name, boss)
await boss.start()

await boss.work(QUEUE, WORK, async jobs => jobs.map(job => {
  const start = now()
  const { p, n, t, f } = job.data
  // retry_count is 0 on the first attempt: pg-boss counts an attempt when started_on was set.
  const first = job.retryCount === 0
  const code = !first ? CODE.retryOk : f ? CODE.firstFails : CODE.firstOk
  reporter.record(start, first ? start - t : null, p * ID_SHIFT + n, code)
  return { id: job.id, status: code === CODE.firstFails ? 'failed' : 'completed' }
}))
send({ kind: 'ready', name })

let stopping = false
process.on('SIGTERM', async () => {
  if (stopping) return
  stopping = true
  await boss.stop({ graceful: true, timeout: 10_000 })
  reporter.close()
  process.exit(0)
})
