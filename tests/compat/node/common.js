'use strict';
// Helpers shared by the Node.js client programs of the compatibility matrix: the CHECK line
// convention of tests/compat/harness.py, bounded waits, and unique names per run.

const crypto = require('crypto');

const RUN = `${Date.now().toString(36)}-${crypto.randomBytes(3).toString('hex')}`;

function unique(prefix) {
  return `${prefix}-${RUN}`;
}

function sleep(ms) {
  return new Promise(resolve => setTimeout(resolve, ms));
}

// Polls `predicate` every 20 ms until it returns a truthy value; throws after `ms`.
async function waitFor(predicate, ms, what) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      const value = await predicate();
      if (value) return value;
    } catch (e) {
      last = e;
    }
    await sleep(20);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}` + (last ? ` (last error: ${last.message})` : ''));
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

function oneLine(text) {
  return String(text).replace(/\s+/g, ' ').trim();
}

// Runs one named check with a deadline and prints its CHECK line; returns true when it passed.
async function check(name, ms, body) {
  try {
    await withTimeout(Promise.resolve().then(body), ms, name);
    console.log(`CHECK ${name} ok`);
    return true;
  } catch (e) {
    const reason = e && (e.stack || e.message) ? `${e.name || 'Error'}: ${e.message}` : String(e);
    console.log(`CHECK ${name} FAIL ${oneLine(reason)}`);
    if (e && e.stack) console.error(e.stack);
    return false;
  }
}

// Stops the program if it somehow outlives its budget (the harness would kill it anyway).
function hardDeadline(ms) {
  const timer = setTimeout(() => {
    console.error(`(program budget of ${ms} ms exhausted; exiting)`);
    process.exit(3);
  }, ms);
  timer.unref();
}

// Clients the program made, disconnected when it ends (`runMain`).
const cleanups = [];

function track(client) {
  cleanups.push(client);
  return client;
}

async function stopClient(client) {
  try {
    await client.disconnect();
  } catch (e) {
    console.error(`disconnect: ${e.message}`);
  }
}

function values(records) {
  return records.map(r => r.value);
}

function sameSet(got, want) {
  const a = [...got].sort();
  const b = [...want].sort();
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** Runs the program's `main`, then disconnects every tracked client (3 s each at most) and exits. */
function runMain(main) {
  main()
    .catch(e => {
      console.error(`fatal: ${e.stack || e}`);
      process.exitCode = 1;
    })
    .finally(async () => {
      for (const client of cleanups.reverse()) {
        await Promise.race([client.disconnect().catch(() => {}), sleep(3000)]);
      }
      process.exit(process.exitCode || 0);
    });
}

module.exports = { RUN, unique, sleep, waitFor, withTimeout, assert, check, hardDeadline, track, stopClient, values, sameSet, runMain };
