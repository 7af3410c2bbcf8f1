// A Node.js service profiled by the real @pyroscope/nodejs SDK, for spanprof's tests
// (crates/spanprof-server/tests/it/pyroscope.rs). Its heap grows while it runs, and it burns CPU.
//   node app.js pull PORT           serves /debug/pprof/profile and /debug/pprof/heap (pull mode)
//   node app.js push SERVER_URL     pushes wall and heap profiles to SERVER_URL every second
// Prints one line, "ready <port or url>", once it serves or pushes.
'use strict'
const Pyroscope = require('@pyroscope/nodejs').default
const express = require('express')

const [mode, where] = process.argv.slice(2)
const config = {
  appName: mode === 'push' ? 'nodepush' : 'nodepull',
  heap: { samplingIntervalBytes: 16 * 1024, stackDepth: 64 },
  wall: { samplingDurationMs: 1000, samplingIntervalMicros: 10000 },
}
if (mode === 'push') {
  config.serverAddress = where
  config.flushIntervalMs = 1000
}
Pyroscope.init(config)

// Kept until exit: what the heap profile sees in use grows at every tick.
const retained = []
function growHeap() {
  const batch = []
  for (let i = 0; i < 2000; i++) batch.push({ index: i, text: 'retained-' + i + '-' + retained.length })
  retained.push(batch)
  // Outside the JS heap too (Buffers): the pull handler's heap profile counts this memory.
  retained.push(Buffer.alloc(64 * 1024, retained.length & 0xff))
}
function burn() {
  let x = 0
  for (let i = 0; i < 2e6; i++) x = (x * 31 + i) % 1000003
  return x
}
setInterval(() => { growHeap(); burn() }, 50)

if (mode === 'push') {
  Pyroscope.start()
  console.log('ready ' + where)
} else if (mode === 'pull') {
  const app = express()
  app.use(Pyroscope.expressMiddleware())
  const server = app.listen(Number(where || 0), '127.0.0.1', () => {
    console.log('ready ' + server.address().port)
  })
} else {
  console.error('usage: node app.js pull PORT | push SERVER_URL')
  process.exit(2)
}
