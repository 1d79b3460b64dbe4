// @ts-check
// The page's one way of putting work off: many asks, one run. Live events come in bursts
// (thousands a minute); each would read something again from the hub, and one read after
// the burst (or one per interval while it lasts) tells the same.

/**
 * @typedef {object} Throttle
 * @property {() => void} schedule Ask for a run (does nothing while one is already due,
 *   unless `restart`).
 * @property {() => void} cancel Drop the run that is due, if any.
 * @property {() => void} ran The work was just done some other way: the next run waits
 *   `interval` from now.
 * @property {boolean} pending Whether a run is due.
 */

/**
 * Coalesce the asks for `run`: however many `schedule()` calls come, one run follows,
 * `delay` ms after the first of them (with `restart`: after the last, a debounce), and
 * never sooner than `interval` ms after the previous run began (or `ran()` was called).
 * @param {() => unknown} run
 * @param {{ delay?: number, interval?: number, restart?: boolean }} [options]
 * @returns {Throttle}
 */
export function throttle(run, { delay = 0, interval = 0, restart = false } = {}) {
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  let last = -Infinity;

  const fire = () => {
    timer = null;
    last = Date.now();
    run();
  };

  return {
    schedule() {
      if (timer !== null) {
        if (!restart) return;
        clearTimeout(timer);
      }
      const wait = Math.max(delay, last + interval - Date.now());
      timer = setTimeout(fire, wait);
    },
    cancel() {
      if (timer !== null) clearTimeout(timer);
      timer = null;
    },
    ran() {
      last = Date.now();
    },
    get pending() {
      return timer !== null;
    },
  };
}
