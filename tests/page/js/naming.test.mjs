// The page's copy of the hub's room-id rule (static/naming.js) against the table the hub's
// rule is tested with (tests/rules/room_ids.json, read by tests/rules/test_naming.py too).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  isInternalJob, isSharedJob, jobRoom, MAX_ROOM_ID_LENGTH, roomIdProblem,
} from "../../../static/naming.js";

const table = JSON.parse(readFileSync(new URL("../../rules/room_ids.json", import.meta.url), "utf8"));

test("the table has cases on both sides", () => {
  assert.ok(table.valid.length >= 5 && table.invalid.length >= 5);
});

for (const room of table.valid) {
  test(`the hub takes ${JSON.stringify(room.slice(0, 20))} (${[...room].length} code points)`, () => {
    assert.equal(roomIdProblem(room), null);
  });
}

for (const room of table.invalid) {
  test(`the hub refuses ${JSON.stringify(room.slice(0, 20))} (${[...room].length} code points)`, () => {
    const problem = roomIdProblem(room);
    assert.equal(typeof problem, "string");
    assert.ok(problem.length > 0);
  });
}

test("each problem is said in its own words", () => {
  assert.equal(roomIdProblem(""), "Enter a room name.");
  assert.equal(roomIdProblem("a:b"), "A room name cannot contain @ or :.");
  assert.equal(roomIdProblem(".."), "A room name cannot be . or .. alone.");
  assert.equal(roomIdProblem("x".repeat(MAX_ROOM_ID_LENGTH + 1)), "At most 128 characters.");
});

test("a job's room, and whether it is shared or the hub's own", () => {
  assert.equal(jobRoom("lab:analysis:Brew"), "lab");
  assert.equal(isSharedJob("lab:analysis:Brew"), false);
  assert.equal(isSharedJob("@global:modifiers:Rotate"), true);
  assert.equal(isSharedJob("@internal:checks:ValidatePayload"), true);
  assert.equal(isInternalJob("@internal:checks:ValidatePayload"), true);
  assert.equal(isInternalJob("@global:modifiers:Rotate"), false);
  assert.equal(isSharedJob("@globalx:a:b"), false);
});
