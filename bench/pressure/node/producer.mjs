// A pg-boss producer process for bench/pressure: boss.insert() of a call's jobs (one
// statement), paced without drift over a schedule of jobs/s, the mix of bench/pressure/mix.py
// (its call kinds and delays, repeated here), until SIGTERM.
// Usage: node producer.mjs INDEX '[[from_second, jobs_per_s, jobs_per_call], ...]'
// (bench/pressure/config.py's producer_schedule)
import { PgBoss } from 'pg-boss'
import { QUEUE, Reporter, connectionString, now, reportErrors, send, waitForGo } from './report.mjs'

const index = Number(process.argv[2])
const schedule = JSON.parse(process.argv[3])

// mix.py's call_kind and delay_of: 1 call in 10 scheduled 5-30 s ahead, 1 in 10 retry jobs.
const kindOf = call => (call % 10 === 3 ? 'scheduled' : call % 10 === 7 ? 'retry' : 'immediate')
const delayOf = call => (kindOf(call) === 'scheduled' ? 5 + (Math.floor(call / 10) * 7) % 26 : 0)
const segmentAt = t => schedule.reduce((chosen, entry) => (t + 1e-9 >= entry[0] ? entry : chosen), schedule[0])

const reporter = new Reporter('enqueued', ['times', 'seconds', 'dues', 'counts'])
// A producer only sends: no maintenance, no schedules, the schema is there (setup.mjs).
const boss = new PgBoss({ connectionString: connectionString(), supervise: false, schedule: false, migrate: false })
reportErrors(`producer ${index}`, boss)
await boss.start()

let stopping = false
let wake = null
process.on('SIGTERM', () => { stopping = true; if (wake) wake() })
send({ kind: 'ready', name: `producer ${index}` })
await waitForGo()

const sleep = ms => new Promise(resolve => { wake = resolve; setTimeout(resolve, ms) })
const start = performance.now()
let due = start
let n = 0
let calls = 0
while (!stopping) {
  const wait = due - performance.now()
  if (wait > 0) {
    await sleep(wait)
    if (stopping) break
  } else if (wait < -1000) {
    due = performance.now() // more than a second behind: restart rather than burst (mix.Pacer)
  }
  const kind = kindOf(calls)
  const delay = delayOf(calls)
  const batch = segmentAt((due - start) / 1000)[2]
  const t = now()
  const jobs = []
  for (let i = 0; i < batch; i++) {
    const job = { data: { p: index, n: n + i, t: t + delay, f: kind === 'retry' ? 1 : 0 } }
    if (delay) job.startAfter = delay
    jobs.push(job)
  }
  await boss.insert(QUEUE, jobs)
  reporter.record(t, now() - t, t + delay, batch)
  n += batch
  calls += 1
  const rate = segmentAt((due - start) / 1000)[1]
  due += rate > 0 ? (batch / rate) * 1000 : 1000
}
reporter.close()
send({ kind: 'deferred', producer: index, count: n })
await boss.stop({ graceful: false })
process.exit(0)
