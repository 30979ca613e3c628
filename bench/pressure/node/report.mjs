// What bench/pressure's Node children share: the harness's messages as JSON lines on stdout
// (bench/pressure/reporter.py describes them), the job mix's idents and codes, a clock in
// epoch seconds with sub-millisecond resolution, and "go" read from stdin.
import { createInterface } from 'node:readline'

export const ID_SHIFT = 2 ** 40
export const QUEUE = 'pressure'
export const FLUSH_MS = 500
export const CODE = { firstOk: 0, firstFails: 1, retryOk: 2 }

export const now = () => (performance.timeOrigin + performance.now()) / 1000

export function send (message) {
  process.stdout.write(JSON.stringify(message) + '\n')
}

export function connectionString () {
  const url = process.env.DATABASE_URL
  if (!url) throw new Error('DATABASE_URL is not set')
  return url
}

// Buffers columns and prints them as one message every FLUSH_MS.
export class Reporter {
  constructor (kind, columns) {
    this.kind = kind
    this.columns = columns
    this.reset()
    this.timer = setInterval(() => this.flush(), FLUSH_MS)
  }

  reset () {
    this.buffer = Object.fromEntries(this.columns.map(c => [c, []]))
  }

  record (...values) {
    this.columns.forEach((c, i) => this.buffer[c].push(values[i]))
  }

  flush () {
    if (this.buffer[this.columns[0]].length) {
      send({ kind: this.kind, ...this.buffer })
      this.reset()
    }
  }

  close () {
    clearInterval(this.timer)
    this.flush()
  }
}

// Resolves on the coordinator's "go" line (or stdin's end: the coordinator is gone).
export function waitForGo () {
  return new Promise(resolve => {
    const lines = createInterface({ input: process.stdin })
    lines.on('line', line => { if (line.trim() === 'go') resolve() })
    lines.on('close', resolve)
  })
}

// pg-boss's 'error' events (a failed fetch or maintenance round it retries) are warnings to
// the harness: they are listed in the report; a process that dies fails the scenario.
export function reportErrors (name, boss) {
  boss.on('error', error => send({ kind: 'warning', name, text: String(error?.stack || error) }))
}
