// Formatting for display (static/format.js).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ago, count, duration, jobLabel, json, messageOf, ordinal, pageRange, selectionText, shortId,
} from "../../../static/format.js";

test("a short id is the last 8 hex digits of a UUID", () => {
  assert.equal(shortId("0190c2a4-7d1e-7c3b-9f00-12345678abcd"), "5678abcd");
  assert.equal(shortId(null), "");
  assert.equal(shortId(undefined), "");
});

test("a job's full name is split into name, category, room and scope", () => {
  assert.deepEqual(jobLabel("lab:analysis:Brew"),
    { name: "Brew", category: "analysis", room: "lab", scope: "analysis" });
  assert.deepEqual(jobLabel("@global:modifiers:Rotate"),
    { name: "Rotate", category: "modifiers", room: "@global", scope: "modifiers · @global" });
  assert.equal(jobLabel("no-colons").name, "no-colons");
});

test("durations: hundredths under a second, tenths under a minute, then minutes", () => {
  const at = (seconds) => new Date(Date.UTC(2026, 0, 1) + seconds * 1000).toISOString();
  assert.equal(duration(at(0), at(0.42)), "0.42 s");
  assert.equal(duration(at(0), at(3.14)), "3.1 s");
  assert.equal(duration(at(0), at(125)), "2 min 5 s");
  assert.equal(duration(at(10), at(0)), "0.00 s"); // clocks apart: never negative
});

test("ago: just now, seconds, minutes, hours", () => {
  const now = Date.UTC(2026, 0, 1, 12);
  const before = (seconds) => new Date(now - seconds * 1000).toISOString();
  assert.equal(ago(before(4), now), "just now");
  assert.equal(ago(before(12), now), "12 s ago");
  assert.equal(ago(before(3 * 60 + 59), now), "3 min ago");
  assert.equal(ago(before(2 * 3600 + 5), now), "2 h ago");
  assert.equal(ago(before(-30), now), "just now"); // a clock ahead of ours
});

test("ordinals, the teens included", () => {
  assert.deepEqual([1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112].map(ordinal),
    ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th"]);
});

test("counts, the selection and the page's range in words", () => {
  assert.equal(count(1, "task"), "1 task");
  assert.equal(count(0, "task"), "0 tasks");
  assert.equal(count(2, "child", "children"), "2 children");
  assert.equal(selectionText(0), "No task selected.");
  assert.equal(selectionText(1), "1 task selected.");
  assert.equal(selectionText(7), "7 tasks selected.");
  assert.equal(pageRange(0, 0, 0), "");
  assert.equal(pageRange(50, 50, 230), "51–100 of 230");
});

test("JSON is indented; a thrown thing has a message", () => {
  assert.equal(json({ a: [1] }), '{\n  "a": [\n    1\n  ]\n}');
  assert.equal(messageOf(new Error("boom")), "boom");
  assert.equal(messageOf("plain"), "plain");
});
