// A `node --test` suite written for the repro corpus (the npm registry is not reachable from the benchmark
// machine): timers, promises, a local TCP server and a child process, the event-loop work a real suite does.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { setTimeout: sleep } = require('node:timers/promises');

test('setTimeout waits at least its delay', async () => {
  const t0 = process.hrtime.bigint();
  await sleep(50);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  assert.ok(ms >= 49, `sleep(50) took ${ms} ms`);
});

test('timers fire in deadline order', async () => {
  const order = [];
  await new Promise((resolve) => {
    setTimeout(() => order.push(30), 30);
    setTimeout(() => order.push(10), 10);
    setTimeout(() => { order.push(50); resolve(); }, 50);
  });
  assert.deepStrictEqual(order, [10, 30, 50]);
});

test('setInterval ticks then clears', async () => {
  let ticks = 0;
  await new Promise((resolve) => {
    const id = setInterval(() => {
      ticks += 1;
      if (ticks === 5) { clearInterval(id); resolve(); }
    }, 5);
  });
  assert.strictEqual(ticks, 5);
});

test('Promise.race against a timeout', async () => {
  const never = new Promise(() => {});
  const winner = await Promise.race([never, sleep(20, 'timeout')]);
  assert.strictEqual(winner, 'timeout');
});
