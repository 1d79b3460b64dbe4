// The page's state and the rules that change it (static/state.js), and which of two
// states of a task is the newer (static/statuses.js).

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ariaSort, createState, DEFAULT_SORT, emptyFilter, enterRoom, leaveRoom, matchesFilter,
  mayCancel, moveCount, nameOfSubmitter, nextSort, noteStatus, PAGE, pageOffset,
  parseRecentRooms, sameTable, tableFromParams, tableParams, withRecentRoom,
} from "../../../static/state.js";
import {
  eventFromTask, label, notOlder, RERUNNABLE, STATUSES, taskFromEvent, TERMINAL, UNFINISHED,
} from "../../../static/statuses.js";

const ME = { id: "u-me", name: "alice", is_superuser: false };

test("the table's state goes into the URL and comes back the same", () => {
  const table = {
    filter: { status: ["failed", "cancelled"], job: "lab:a:Brew", submitted_by: "me", worker_id: "w1", q: "oops" },
    sort: "status",
    offset: 100,
  };
  const params = new URLSearchParams(tableParams(table, "24h", "t-1"));
  assert.equal(params.toString(),
    "status=failed%2Ccancelled&tjob=lab%3Aa%3ABrew&by=me&worker=w1&q=oops&sort=status&offset=100&window=24h&task=t-1");
  const read = tableFromParams(params);
  assert.deepEqual(read, { ...table, window: "24h" });
});

test("the defaults stay out of the URL", () => {
  const table = { filter: emptyFilter(), sort: DEFAULT_SORT, offset: 0 };
  assert.deepEqual(tableParams(table, "1h"), []);
  assert.deepEqual(tableFromParams(new URLSearchParams("")),
    { filter: emptyFilter(), sort: DEFAULT_SORT, offset: 0, window: "1h" });
});

test("what a URL may not hold falls back: statuses dropped, sort and offset defaulted", () => {
  const read = tableFromParams(new URLSearchParams(
    "status=running,bogus,,pending&sort=payload&offset=-20&window=2h",
  ));
  assert.deepEqual(read.filter.status, ["running", "pending"]);
  assert.equal(read.sort, DEFAULT_SORT);
  assert.equal(read.offset, 0);
  assert.equal(read.window, null); // the page keeps the window it shows
  assert.equal(tableFromParams(new URLSearchParams("offset=abc")).offset, 0);
});

test("two states read the same page only with the same filter, sort and offset", () => {
  const a = { filter: emptyFilter(), sort: DEFAULT_SORT, offset: 0, total: 3, request: 1 };
  assert.equal(sameTable(a, { ...a, total: 9, request: 5 }), true);
  assert.equal(sameTable(a, { ...a, offset: PAGE }), false);
  assert.equal(sameTable(a, { ...a, filter: { ...emptyFilter(), q: "x" } }), false);
});

test("a column's first click sorts newest first, the next the other way round", () => {
  assert.equal(nextSort("-created_at", "started_at"), "-started_at");
  assert.equal(nextSort("-started_at", "started_at"), "started_at");
  assert.equal(nextSort("started_at", "started_at"), "-started_at");
  assert.equal(ariaSort("-status", "status"), "descending");
  assert.equal(ariaSort("status", "status"), "ascending");
  assert.equal(ariaSort("status", "created_at"), "none");
});

test("pages move by PAGE and never before the first", () => {
  assert.equal(pageOffset(0, 1), PAGE);
  assert.equal(pageOffset(PAGE, -1), 0);
  assert.equal(pageOffset(10, -1), 0);
});

test("an event's task joins the page only when the filter lets it", () => {
  const task = { id: "t", status: "running", job_name: "lab:a:Brew", submitted_by: "u-me", worker_id: "w1" };
  const filter = (changes) => ({ ...emptyFilter(), ...changes });
  assert.equal(matchesFilter(filter({}), task, ME.id), true);
  assert.equal(matchesFilter(filter({ status: ["running", "claimed"] }), task, ME.id), true);
  assert.equal(matchesFilter(filter({ status: ["pending"] }), task, ME.id), false);
  assert.equal(matchesFilter(filter({ job: "lab:a:Other" }), task, ME.id), false);
  assert.equal(matchesFilter(filter({ submitted_by: "me" }), task, ME.id), true);
  assert.equal(matchesFilter(filter({ submitted_by: "me" }), task, undefined), false);
  assert.equal(matchesFilter(filter({ submitted_by: "u-other" }), task, ME.id), false);
  assert.equal(matchesFilter(filter({ worker_id: "w2" }), task, ME.id), false);
  // A search needs the hub: nothing joins until the page is read again.
  assert.equal(matchesFilter(filter({ q: "Brew" }), task, ME.id), false);
});

test("Cancel is offered to the submitter, superusers and the taking worker's owner", () => {
  const workers = [{ id: "w-mine", owned_by: ME.id }, { id: "w-old", user_id: ME.id }, { id: "w-other", owned_by: "u-x" }];
  const task = (changes) => ({ id: "t", submitted_by: "u-x", worker_id: null, ...changes });
  assert.equal(mayCancel(ME, task({ submitted_by: ME.id }), workers), true);
  assert.equal(mayCancel(ME, task({}), workers), false);
  assert.equal(mayCancel(ME, task({ worker_id: "w-mine" }), workers), true);
  assert.equal(mayCancel(ME, task({ worker_id: "w-old" }), workers), true); // an older hub's field
  assert.equal(mayCancel(ME, task({ worker_id: "w-other" }), workers), false);
  assert.equal(mayCancel({ ...ME, is_superuser: true }, task({}), workers), true);
  // Not known who the viewer is, or who submitted it (an older hub): the hub's 403 decides.
  assert.equal(mayCancel(null, task({}), workers), true);
  assert.equal(mayCancel(ME, { id: "t" }, workers), true);
});

test("a submitter's name: the summary's, one learnt elsewhere, or the short id", () => {
  const names = new Map([["0190c2a4-0000-7000-8000-0000000000aa", "bob"]]);
  assert.equal(nameOfSubmitter(names, { id: "t", submitter: "carol", submitted_by: "x" }), "carol");
  assert.equal(nameOfSubmitter(names, { id: "t", submitted_by: "0190c2a4-0000-7000-8000-0000000000aa" }), "bob");
  assert.equal(nameOfSubmitter(names, { id: "t", submitted_by: "0190c2a4-0000-7000-8000-0000000000bb" }), "000000bb");
  assert.equal(nameOfSubmitter(names, { id: "t" }), "");
});

test("the last status heard of each task: the one before is returned, the map stays bounded", () => {
  const heard = new Map();
  assert.equal(noteStatus(heard, "a", "pending", 2), undefined);
  assert.equal(noteStatus(heard, "a", "running", 2), "pending");
  noteStatus(heard, "b", "pending", 2);
  noteStatus(heard, "c", "pending", 2); // past the bound: the first heard of goes
  assert.deepEqual([...heard], [["b", "pending"], ["c", "pending"]]);
  noteStatus(heard, "b", "claimed", 2); // a known task makes no room
  assert.deepEqual([...heard], [["b", "claimed"], ["c", "pending"]]);
});

test("the counts table: a status change moves one task from a column to another", () => {
  const row = { pending: 1, claimed: 0, running: 0, completed: 0, failed: 0, cancelled: 0 };
  assert.deepEqual(moveCount(row, "pending", "claimed"), { ...row, pending: 0, claimed: 1 });
  assert.deepEqual(row.pending, 1); // a new row: the old one is left as it was
  assert.deepEqual(moveCount(undefined, null, "pending"),
    { pending: 1, claimed: 0, running: 0, completed: 0, failed: 0, cancelled: 0 });
  assert.equal(moveCount({ running: 0 }, "running", "completed").running, 0); // never below 0
});

test("opening a room forgets the one before; closing drops its late answers", () => {
  const s = createState();
  s.room.jobs = [];
  s.room.selected = "lab:a:Brew";
  s.table.total = 12;
  s.stats.loaded = true;
  s.lastStatus.set("t", "running");
  enterRoom(s, "lab");
  assert.equal(s.session.room, "lab");
  assert.equal(s.room.generation, 1);
  assert.equal(s.room.jobs, null);
  assert.equal(s.room.selected, null);
  assert.equal(s.table.total, 0);
  assert.equal(s.stats.loaded, false);
  assert.equal(s.lastStatus.size, 0);
  leaveRoom(s);
  assert.equal(s.session.room, null);
  assert.equal(s.room.generation, 2);
});

test("recent rooms: the latest first, no repeats, at most 8; anything else stored is none", () => {
  let rooms = [];
  for (const room of ["a", "b", "c", "d", "e", "f", "g", "h", "i", "c"]) rooms = withRecentRoom(rooms, room);
  assert.deepEqual(rooms, ["c", "i", "h", "g", "f", "e", "d", "b"]);
  assert.deepEqual(parseRecentRooms(JSON.stringify(["x", 3, null, "y"])), ["x", "y"]);
  assert.deepEqual(parseRecentRooms("{not json"), []);
  assert.deepEqual(parseRecentRooms('{"a": 1}'), []);
  assert.deepEqual(parseRecentRooms(null), []);
});

test("statuses: unfinished ones are the non-terminal ones; re-run from failed or cancelled", () => {
  assert.deepEqual([...UNFINISHED], ["pending", "claimed", "running"]);
  assert.deepEqual(STATUSES.filter((s) => TERMINAL.has(s)), ["completed", "failed", "cancelled"]);
  assert.deepEqual([...RERUNNABLE], ["failed", "cancelled"]);
  assert.equal(label("running"), "Running");
  assert.equal(label("someday"), "someday");
  assert.equal(label(undefined), "");
});

test("the newer of two states of a task: by version, else attempt, else status order", () => {
  assert.equal(notOlder({ version: 3, status: "pending" }, { version: 2, status: "running" }), true);
  assert.equal(notOlder({ version: 2 }, { version: 3 }), false);
  assert.equal(notOlder({ attempt: 2, status: "pending" }, { attempt: 1, status: "running" }), true);
  assert.equal(notOlder({ attempt: 1, status: "claimed" }, { attempt: 1, status: "running" }), false);
  assert.equal(notOlder({ attempt: 1, status: "failed" }, { attempt: 1, status: "running" }), true);
  assert.equal(notOlder({ status: "running" }, null), true);
});

test("an event's `name` is a task's `job_name`, and back", () => {
  const event = { id: "t", name: "lab:a:Brew", status: "pending", room_id: "lab", version: 1 };
  const task = taskFromEvent(event);
  assert.deepEqual(task, { id: "t", job_name: "lab:a:Brew", status: "pending", room_id: "lab", version: 1 });
  assert.equal(eventFromTask(task).name, "lab:a:Brew");
});
