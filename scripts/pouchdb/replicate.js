#!/usr/bin/env node
// Baseline for fdbrep's replication benchmark: one PouchDB.replicate run
// between two HTTP endpoints (PouchDB 7.3.1, the version pouchdb-server 4.2.0
// runs), printing one JSON line with the outcome and the elapsed time.
//
//   node replicate.js <source-url> <target-url> [batch_size] [batches_limit]
//
// batch_size and batches_limit default (when absent or 0) to PouchDB's own
// defaults (100, 10).
'use strict';

const PouchDB = require('pouchdb-core')
  .plugin(require('pouchdb-adapter-http'))
  .plugin(require('pouchdb-replication'));

function usage() {
  process.stderr.write('usage: replicate.js <source-url> <target-url> [batch_size] [batches_limit]\n');
  process.exit(2);
}

// count parses a batch option; 0 means PouchDB's default.
function count(arg, name) {
  const n = Number(arg);
  if (!Number.isInteger(n) || n < 0) {
    process.stderr.write(`replicate.js: ${name} must be a non-negative integer, got ${JSON.stringify(arg)}\n`);
    process.exit(2);
  }
  return n || undefined;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2 || args.length > 4) usage();
  const opts = {};
  if (args[2] !== undefined) opts.batch_size = count(args[2], 'batch_size');
  if (args[3] !== undefined) opts.batches_limit = count(args[3], 'batches_limit');
  const start = process.hrtime.bigint();
  const res = await PouchDB.replicate(args[0], args[1], opts);
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  process.stdout.write(JSON.stringify({
    ok: res.ok,
    docs_read: res.docs_read,
    docs_written: res.docs_written,
    doc_write_failures: res.doc_write_failures,
    last_seq: res.last_seq,
    elapsed_ms: ms,
  }) + '\n');
}

// redact hides URL passwords: http://user:secret@host -> http://user:*****@host.
function redact(s) {
  return String(s).replace(/(\w+:\/\/[^:\/@\s]*):[^\/\s]*@/g, '$1:*****@');
}

main().catch((err) => {
  const name = err && (err.name || err.error);
  const msg = err && (err.message || err.reason);
  process.stderr.write(redact(`replicate.js: ${name}: ${msg}`) + '\n');
  process.exit(1);
});
