// @ts-check
// The room's overview: tasks by job and status (a compact table), and charts over a window
// (15 min, 1 h, 24 h) of completed and failed tasks, queue depth, waiting and running
// times, drawn with uPlot. uPlot draws on a canvas: next to each chart, a collapsible
// table holds the very series it draws (for screen readers, and for tests).
// Kept current by the page: `setStats` with a whole window, `mergeTail` with the buckets
// from the last one on (GET stats?since=), `applyDelta` for a task that changed status.

import uPlot from "uplot";
import { h } from "./dom.js";
import { clock, jobLabel } from "./format.js";
import { moveCount } from "./state.js";
import { STATUSES } from "./statuses.js";

/** @import { CountsRow } from "./state.js" */
/** @import { Bucket, BucketFigures, JobCounts, Stats, Status } from "./types.js" */

/**
 * @typedef {object} ChartSpec
 * @property {string} key
 * @property {string} title
 * @property {string} unit
 * @property {[keyof BucketFigures, string, string][]} series bucket key, label, CSS colour variable
 */

/**
 * @typedef {object} Chart
 * @property {ChartSpec} spec
 * @property {HTMLElement} plotEl
 * @property {HTMLElement} tbody
 * @property {uPlot | null} plot
 */

/** @type {ChartSpec[]} */
const CHARTS = [
  {
    key: "throughput",
    title: "Completed and failed",
    unit: "tasks",
    series: [["completed", "Completed", "--ok"], ["failed", "Failed", "--bad"]],
  },
  { key: "queue", title: "Queue depth", unit: "tasks", series: [["queue_depth", "Queued", "--running"]] },
  {
    key: "wait",
    title: "Waiting time",
    unit: "s",
    series: [["wait_p50", "Wait p50", "--claimed"], ["wait_p95", "Wait p95", "--warn"]],
  },
  {
    key: "run",
    title: "Running time",
    unit: "s",
    series: [["run_p50", "Run p50", "--running"], ["run_p95", "Run p95", "--bad"]],
  },
];

/** @param {string} variable */
function cssColor(variable) {
  return getComputedStyle(document.documentElement).getPropertyValue(variable).trim() || "#888";
}

/**
 * A figure as the table shows it: counts as they are, seconds to the millisecond.
 * @param {unknown} value
 * @param {string} unit
 */
function figure(value, unit) {
  if (value == null) return "–";
  return unit === "s" && typeof value === "number" ? value.toFixed(3) : String(value);
}


export class Overview {
  /**
   * @param {HTMLElement} chartsEl
   * @param {HTMLElement} countsBody
   */
  constructor(chartsEl, countsBody) {
    this.chartsEl = chartsEl;
    this.countsBody = countsBody;
    /** @type {Stats | null} */
    this.stats = null;
    /** @type {Map<string, CountsRow>} job -> {status: n} */
    this.counts = new Map();
    /** @type {Chart[]} */
    this.charts = [];
    this.build();
    this.resize = new ResizeObserver(() => this.#fit());
    this.resize.observe(chartsEl);
  }

  build() {
    this.chartsEl.replaceChildren();
    this.charts = CHARTS.map((spec) => {
      const plotEl = h("div", { class: "plot", "aria-hidden": "true" });
      const tbody = h("tbody");
      const table = h("table", { class: "chart-data", dataset: { chart: spec.key } },
        h("caption", {}, `${spec.title} (${spec.unit}) per bucket`),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Bucket start"),
          ...spec.series.map(([, label]) => h("th", { scope: "col" }, label)))),
        tbody);
      const figureEl = h("figure", { class: "chart", dataset: { chart: spec.key } },
        h("figcaption", {}, spec.title),
        plotEl,
        h("details", { class: "chart-table" }, h("summary", {}, "Data"), table));
      this.chartsEl.append(figureEl);
      return { spec, plotEl, tbody, plot: null };
    });
  }

  /**
   * A whole window's stats (a window change, a reconnect).
   * @param {Stats} stats
   */
  setStats(stats) {
    this.stats = stats;
    this.#setCounts(stats.counts ?? []);
    this.#draw();
  }

  /** The buckets from `stats.since` on replace those the page has (the last one, still
   * filling) and new ones are added; the oldest go so the window keeps its length.
   * @param {Stats} stats
   */
  mergeTail(stats) {
    if (!this.stats || stats.window !== this.stats.window) return;
    const buckets = this.stats.buckets;
    const length = buckets.length;
    const index = new Map(buckets.map((bucket, i) => [bucket.start, i]));
    for (const bucket of stats.buckets ?? []) {
      const at = index.get(bucket.start);
      if (at != null) buckets[at] = bucket;
      else {
        buckets.push(bucket);
        index.set(bucket.start, buckets.length - 1);
      }
    }
    buckets.sort((a, b) => Date.parse(a.start) - Date.parse(b.start));
    if (buckets.length > length) buckets.splice(0, buckets.length - length);
    this.stats.until = stats.until;
    if (stats.counts) this.#setCounts(stats.counts);
    this.#draw();
  }

  /** Where the next tail read starts: the last bucket's start. */
  get tailSince() {
    return this.stats?.buckets?.at(-1)?.start ?? null;
  }

  /**
   * A task moved from one status to another (from null: a new task).
   * @param {string} job
   * @param {Status | null} from
   * @param {Status | null} to
   */
  applyDelta(job, from, to) {
    if (!this.stats) return;
    this.counts.set(job, moveCount(this.counts.get(job), from, to));
    this.#renderCounts();
  }

  /** @param {JobCounts[]} counts */
  #setCounts(counts) {
    this.counts = new Map(counts.map(({ job, ...row }) => [job, row]));
    this.#renderCounts();
  }

  #renderCounts() {
    const jobs = [...this.counts.keys()].sort();
    const rows = jobs.map((job) => {
      const counts = this.counts.get(job) ?? {};
      const { name, scope } = jobLabel(job);
      return h("tr", { dataset: { job } },
        h("th", { scope: "row", title: job }, name, h("span", { class: "scope" }, ` ${scope}`)),
        ...STATUSES.map((status) => h("td", { dataset: { status } }, String(counts[status] ?? 0))));
    });
    if (!rows.length) {
      rows.push(h("tr", {}, h("td", { colspan: "7", class: "empty" }, "No tasks in this window.")));
    }
    this.countsBody.replaceChildren(...rows);
  }

  #draw() {
    const buckets = this.stats?.buckets ?? [];
    const xs = buckets.map((bucket) => Date.parse(bucket.start) / 1000);
    for (const chart of this.charts) {
      const { spec } = chart;
      /** @type {uPlot.AlignedData} */
      const data = [xs, ...spec.series.map(([key]) => buckets.map((bucket) => bucket[key] ?? null))];
      if (!chart.plot) {
        chart.plot = new uPlot({
          width: this.#width(chart.plotEl),
          height: 150,
          legend: { show: true },
          cursor: { drag: { x: false, y: false } },
          scales: { x: { time: true } },
          axes: [
            { stroke: cssColor("--muted"), grid: { stroke: cssColor("--border") } },
            { stroke: cssColor("--muted"), grid: { stroke: cssColor("--border") }, size: 60 },
          ],
          series: [
            {},
            ...spec.series.map(([, label, color]) => ({
              label, stroke: cssColor(color), width: 1.5, spanGaps: false,
            })),
          ],
        }, data, chart.plotEl);
      } else {
        chart.plot.setData(data);
      }
      this.#table(chart, buckets);
    }
  }

  /**
   * @param {Chart} chart
   * @param {Bucket[]} buckets
   */
  #table(chart, buckets) {
    const { spec, tbody } = chart;
    const rows = buckets.map((bucket) => h("tr", { dataset: { start: bucket.start } },
      h("th", { scope: "row" }, clock(bucket.start)),
      ...spec.series.map(([key]) => h("td", {
        dataset: { key, value: bucket[key] == null ? "" : String(bucket[key]) },
      }, figure(bucket[key], spec.unit)))));
    tbody.replaceChildren(...rows);
  }

  /** @param {HTMLElement} el */
  #width(el) {
    return Math.max(200, Math.floor(el.clientWidth || el.parentElement?.clientWidth || 300));
  }

  #fit() {
    for (const chart of this.charts) {
      if (chart.plot) chart.plot.setSize({ width: this.#width(chart.plotEl), height: 150 });
    }
  }
}
