// The page's one throttle (static/throttle.js), on Node's mocked clock.

import assert from "node:assert/strict";
import { afterEach, beforeEach, mock, test } from "node:test";

import { throttle } from "../../../static/throttle.js";

beforeEach(() => mock.timers.enable({ apis: ["setTimeout", "Date"], now: 10_000 }));
afterEach(() => mock.timers.reset());

/** A throttle of a counting function. */
function counted(options) {
  const runs = [];
  const t = throttle(() => runs.push(Date.now()), options);
  return { t, runs };
}

test("a burst of asks is one run, `delay` after the first", () => {
  const { t, runs } = counted({ delay: 500 });
  t.schedule();
  mock.timers.tick(300);
  t.schedule();
  t.schedule();
  assert.equal(t.pending, true);
  mock.timers.tick(199);
  assert.deepEqual(runs, []);
  mock.timers.tick(1);
  assert.deepEqual(runs, [10_500]);
  assert.equal(t.pending, false);
});

test("with restart, the run waits for a pause of `delay` (a debounce)", () => {
  const { t, runs } = counted({ delay: 300, restart: true });
  t.schedule();
  mock.timers.tick(200);
  t.schedule();
  mock.timers.tick(200);
  t.schedule();
  mock.timers.tick(299);
  assert.deepEqual(runs, []);
  mock.timers.tick(1);
  assert.deepEqual(runs, [10_700]);
});

test("an interval spaces runs, the first one right away", () => {
  const { t, runs } = counted({ interval: 1000 });
  t.schedule();
  mock.timers.tick(0);
  assert.deepEqual(runs, [10_000]);
  mock.timers.tick(250);
  t.schedule();
  t.schedule();
  mock.timers.tick(749);
  assert.deepEqual(runs, [10_000]);
  mock.timers.tick(1);
  assert.deepEqual(runs, [10_000, 11_000]);
  mock.timers.tick(5000); // long after: the next ask runs at once
  t.schedule();
  mock.timers.tick(0);
  assert.deepEqual(runs, [10_000, 11_000, 16_000]);
});

test("work done another way (ran) counts as a run for the interval", () => {
  const { t, runs } = counted({ interval: 2000 });
  mock.timers.tick(100);
  t.ran();
  mock.timers.tick(500);
  t.schedule();
  mock.timers.tick(1499);
  assert.deepEqual(runs, []);
  mock.timers.tick(1);
  assert.deepEqual(runs, [12_100]);
});

test("cancel drops the run that was due, and a later ask starts afresh", () => {
  const { t, runs } = counted({ delay: 250 });
  t.schedule();
  t.cancel();
  assert.equal(t.pending, false);
  mock.timers.tick(1000);
  assert.deepEqual(runs, []);
  t.schedule();
  mock.timers.tick(250);
  assert.deepEqual(runs, [11_250]);
});

test("a run may ask for the next one (it is no longer pending while it runs)", () => {
  let runs = 0;
  const t = throttle(() => {
    runs += 1;
    if (runs < 3) t.schedule();
  }, { delay: 100 });
  t.schedule();
  mock.timers.tick(100);
  mock.timers.tick(100);
  mock.timers.tick(100);
  mock.timers.tick(100);
  assert.equal(runs, 3);
});
