// The form's quick checks of a value against its field's schema (static/schema-form.js
// `check`): types, enums, bounds, lengths. Patterns are the hub's (RE2): never checked here.

import assert from "node:assert/strict";
import { test } from "node:test";

import { check, humanize } from "../../../static/schema-form.js";

test("types: a value of another type is named for what it should be", () => {
  assert.equal(check({ type: "string" }, "x"), null);
  assert.equal(check({ type: "string" }, 3), "Must be a string.");
  assert.equal(check({ type: "integer" }, 3), null);
  assert.equal(check({ type: "integer" }, 3.5), "Must be a whole number.");
  assert.equal(check({ type: "integer" }, "3"), "Must be an integer.");
  assert.equal(check({ type: "array" }, {}), "Must be a list.");
  assert.equal(check({ type: "object" }, []), "Must be an object.");
  assert.equal(check({ type: "object" }, null), "Must be an object.");
  assert.equal(check({ type: ["string", "null"] }, null), null);
  assert.equal(check({ type: ["number", "boolean"] }, "x"), "Must be a number or a boolean.");
});

test("nullable: null is allowed whatever the type", () => {
  assert.equal(check({ type: "integer", nullable: true }, null), null);
  assert.equal(check({ type: "integer" }, null), "Must be an integer.");
});

test("enums compare JSON values", () => {
  const s = { enum: ["a", 1, { k: [2] }] };
  assert.equal(check(s, "a"), null);
  assert.equal(check(s, { k: [2] }), null);
  assert.equal(check(s, "1"), 'Must be one of: a, 1, {"k":[2]}.');
});

test("numbers: minimum, maximum, exclusive bounds, multiples", () => {
  const s = { type: "number", minimum: 1, maximum: 10 };
  assert.equal(check(s, 1), null);
  assert.equal(check(s, 10), null);
  assert.equal(check(s, 0.5), "Must be at least 1.");
  assert.equal(check(s, 11), "Must be at most 10.");
  assert.equal(check({ exclusiveMinimum: 0 }, 0), "Must be greater than 0.");
  assert.equal(check({ exclusiveMaximum: 1 }, 1), "Must be less than 1.");
  assert.equal(check({ multipleOf: 0.1 }, 0.3), null); // 0.3 / 0.1 is not exactly 3
  assert.equal(check({ multipleOf: 5 }, 12), "Must be a multiple of 5.");
});

test("strings: lengths in code points; a minLength of 1 reads as required", () => {
  assert.equal(check({ type: "string", maxLength: 2 }, "😀😀"), null);
  assert.equal(check({ type: "string", maxLength: 2 }, "abc"), "At most 2 characters.");
  assert.equal(check({ type: "string", minLength: 1 }, ""), "Required.");
  assert.equal(check({ type: "string", minLength: 3 }, "ab"), "At least 3 characters.");
});

test("a pattern is left to the hub, even one that would backtrack for ages", () => {
  assert.equal(check({ type: "string", pattern: "^[0-9]+$" }, "abc"), null);
  assert.equal(check({ type: "string", pattern: "^(a+)+$" }, `${"a".repeat(40)}!`), null);
});

test("lists: at least and at most so many items", () => {
  assert.equal(check({ type: "array", minItems: 1 }, []), "At least 1 items.");
  assert.equal(check({ type: "array", maxItems: 1 }, [1, 2]), "At most 1 items.");
  assert.equal(check({ type: "array", maxItems: 2 }, [1, 2]), null);
});

test("property names become labels", () => {
  assert.equal(humanize("max_items"), "Max items");
  assert.equal(humanize("maxItems"), "Max Items");
  assert.equal(humanize("dry-run"), "Dry run");
});
