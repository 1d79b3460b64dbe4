// @ts-check
// A form generated from a job's JSON Schema (as pydantic writes it): string, number,
// integer and boolean properties, enums, defaults, required, nested objects, $ref into
// $defs, nullable fields (anyOf with null). Anything else (arrays, free objects) is a JSON
// text field; so is the whole payload when the form would need more than MAX_FIELDS
// fields. `read()` validates in the browser, all but patterns (the hub's, see
// `checkString`); `showErrors()` puts messages (the browser's, or the hub's 422 `errors`)
// next to the field they concern.

import { h, setFieldError } from "./dom.js";
import { messageOf } from "./format.js";

/** @import { JsonSchema } from "./types.js" */

/**
 * A problem with the payload: where (the path into it) and what.
 * @typedef {{ path: (string | number)[], msg: string }} FieldError
 */

/**
 * What a field holds: nothing (`present` false: left out of the payload), a value, or an
 * input that is no value at all (`error`: "Enter a number.").
 * @typedef {{ present: boolean, value?: unknown, error?: string }} Reading
 */

/**
 * A field or group of the form, for reading it and placing its errors.
 * @typedef {object} FormNode
 * @property {(string | number)[]} path
 * @property {HTMLElement} [input]
 * @property {HTMLElement} errorEl
 * @property {HTMLElement | null} [focusTarget]
 * @property {(errors: FieldError[]) => Reading} read adds what is wrong to `errors`
 */

/**
 * How to build one field.
 * @typedef {object} FieldSpec
 * @property {JsonSchema} prop its schema, resolved
 * @property {string[]} path
 * @property {string} label
 * @property {HTMLElement} container
 * @property {boolean} required
 * @property {unknown} [dflt]
 */

const MAX_DEPTH = 5;
// The most fields (inputs and groups) one form builds. MAX_DEPTH bounds nesting, not
// width: a small schema whose levels share `$ref`s names W^6 fields (a 1.5 KB one, 117,649
// inputs: the tab freezes for seconds, and a shared link does it to whoever opens it).
// Real jobs have tens of fields; beyond this the whole payload is one JSON text field.
export const MAX_FIELDS = 500;
const LARGEST = Number.MAX_SAFE_INTEGER.toLocaleString("en").replaceAll(",", " ");

/** Thrown while building a form that would have more than MAX_FIELDS fields. */
class TooManyFields extends Error {}

export class SchemaForm {
  #ids = new Map(); // field path (as JSON) -> element id
  #taken = new Set();
  #fields = 0; // built so far, for MAX_FIELDS

  /**
   * @param {unknown} schema
   * @param {string} [idPrefix]
   */
  constructor(schema, idPrefix = "field") {
    /** @type {JsonSchema} */
    this.root = schema && typeof schema === "object" ? schema : {};
    this.idPrefix = idPrefix;
    /** @type {FormNode[]} every field and group, for placing errors */
    this.nodes = [];
    this.element = h("div", { class: "schema-form" });
    const top = this.#resolve(this.root);
    if (Object.keys(top.properties ?? {}).length) {
      try {
        /** @type {Pick<FormNode, "path" | "read">} the payload's field or group */
        this.top = this.#object(top, [], this.element, top.default, 0);
      } catch (error) {
        if (!(error instanceof TooManyFields)) throw error;
        this.#wholePayload(top); // stopped at MAX_FIELDS + 1: cheap whatever the schema
      }
    } else if (top.additionalProperties === false) {
      this.element.append(h("p", { class: "hint" }, "This job takes no parameters."));
      this.top = { path: [], read: () => ({ present: true, value: {} }) };
    } else {
      // The schema names no fields: the whole payload as JSON (empty = {}).
      const f = { prop: top, path: [], label: "Payload", container: this.element, required: false };
      this.top = this.#json({ ...f, dflt: top.default });
    }
  }

  /**
   * Too many fields for a form: start again with the whole payload as JSON.
   * @param {JsonSchema} top
   */
  #wholePayload(top) {
    this.nodes = [];
    this.#ids.clear();
    this.#taken.clear();
    this.element = h("div", { class: "schema-form" });
    this.element.append(h("p", { class: "hint" },
      `This job's schema is too large for a form (over ${MAX_FIELDS} fields): `
      + "enter the payload as JSON."));
    const f = { prop: top, path: [], label: "Payload", container: this.element, required: false };
    this.top = this.#json({ ...f, dflt: top.default });
  }

  /**
   * The payload and the browser-side errors.
   * @returns {{ value: unknown, errors: FieldError[] }}
   */
  read() {
    /** @type {FieldError[]} */
    const errors = [];
    const { value } = this.top.read(errors);
    return { value: value ?? {}, errors };
  }

  clearErrors() {
    for (const node of this.nodes) setFieldError(node.input, node.errorEl, "");
  }

  /** Show `[{path, msg}]` next to the deepest field each path is inside; returns the
   * messages that belong to no field (e.g. about the payload as a whole).
   * @param {FieldError[]} errors
   */
  showErrors(errors) {
    this.clearErrors();
    /** @type {Map<FormNode, string[]>} */
    const byNode = new Map();
    /** @type {string[]} */
    const unplaced = [];
    for (const { path, msg } of errors) {
      const node = this.#nodeFor(path);
      if (!node) {
        unplaced.push(path.length ? `${path.join(".")}: ${msg}` : msg);
        continue;
      }
      const rest = path.slice(node.path.length);
      const where = rest.map((p) => (typeof p === "number" ? `[${p}]` : `.${p}`)).join("");
      const list = byNode.get(node) ?? [];
      list.push(where ? `${where.replace(/^\./, "")}: ${msg}` : msg);
      byNode.set(node, list);
    }
    for (const [node, messages] of byNode) {
      setFieldError(node.input, node.errorEl, messages.join("\n"));
    }
    const first = this.nodes.find((node) => byNode.has(node));
    (first?.input ?? first?.focusTarget)?.focus();
    return unplaced;
  }

  /**
   * The hub's 422 `errors` (`loc` = ["body", "payload", ...path]) → `showErrors`.
   * @param {{ loc?: (string | number)[], msg?: string }[]} problemErrors
   */
  showServerErrors(problemErrors) {
    /** @type {FieldError[]} */
    const errors = [];
    /** @type {string[]} */
    const elsewhere = [];
    for (const { loc = [], msg = "invalid" } of problemErrors ?? []) {
      if (loc[0] !== "body" || loc[1] !== "payload") {
        elsewhere.push(`${loc.join(".")}: ${msg}`);
        continue;
      }
      const path = loc.slice(2);
      const missing = /^'(.+)' is a required property$/.exec(msg);
      if (missing) errors.push({ path: [...path, missing[1]], msg: "Required." });
      else errors.push({ path, msg });
    }
    return [...elsewhere, ...this.showErrors(errors)];
  }

  /**
   * The deepest field or group `path` is inside, if any.
   * @param {(string | number)[]} path
   */
  #nodeFor(path) {
    /** @type {FormNode | null} */
    let best = null;
    for (const node of this.nodes) {
      const inside = node.path.length <= path.length
        && node.path.every((part, i) => String(part) === String(path[i]));
      if (inside && node.path.length > (best?.path.length ?? -1)) {
        best = node;
      }
    }
    return best;
  }

  // -- schema handling -----------------------------------------------------------------

  /**
   * What a local `$ref` ("#/$defs/X") points to ({} when nothing).
   * @param {unknown} ref
   * @returns {JsonSchema}
   */
  #lookup(ref) {
    if (typeof ref !== "string" || !ref.startsWith("#/")) return {};
    /** @type {any} */
    let target = this.root;
    for (const raw of ref.slice(2).split("/")) {
      target = target?.[raw.replaceAll("~1", "/").replaceAll("~0", "~")];
    }
    return target && typeof target === "object" ? target : {};
  }

  /**
   * Follow $ref / single allOf; turn "X or null" into X with `nullable`.
   * @param {unknown} schema
   * @returns {JsonSchema}
   */
  #resolve(schema) {
    /** @type {JsonSchema} */
    let s = schema && typeof schema === "object" ? schema : {};
    for (let hops = 0; hops < 16; hops += 1) {
      if (s.$ref) {
        const { $ref, ...rest } = s;
        s = { ...this.#lookup($ref), ...rest };
      } else if (Array.isArray(s.allOf) && s.allOf.length === 1) {
        const { allOf, ...rest } = s;
        s = { ...this.#resolve(allOf[0]), ...rest };
      } else break;
    }
    const alternatives = s.anyOf ?? s.oneOf;
    if (Array.isArray(alternatives)) {
      const real = alternatives.filter((/** @type {JsonSchema} */ alt) => alt?.type !== "null");
      if (real.length === 1 && real.length < alternatives.length) {
        const { anyOf, oneOf, ...rest } = s;
        return { ...this.#resolve(real[0]), ...rest, nullable: true };
      }
    }
    if (Array.isArray(s.type)) {
      const types = s.type.filter((/** @type {unknown} */ t) => t !== "null");
      if (types.length === 1) return { ...s, type: types[0], nullable: s.type.includes("null") };
    }
    return s;
  }

  /** The element id of the field at `path`: readable, and unique even when two property
   * names differ only in characters an id cannot hold ("名前" and "年齢").
   * @param {string[]} path
   */
  #id(path) {
    const key = JSON.stringify(path);
    let id = this.#ids.get(key);
    if (id === undefined) {
      const tail = path.length ? path.join("-") : "payload";
      const base = `${this.idPrefix}-${tail}`.replace(/[^A-Za-z0-9_-]/g, "_");
      id = base;
      for (let n = 2; this.#taken.has(id); n += 1) id = `${base}-${n}`;
      this.#ids.set(key, id);
      this.#taken.add(id);
    }
    return id;
  }

  // -- building ---------------------------------------------------------------------
  // A field spec `f`: { prop (resolved schema), path, label, container, required, dflt }.

  /**
   * The fields of an object's properties, into `container`.
   * @param {JsonSchema} s
   * @param {string[]} path
   * @param {HTMLElement} container
   * @param {any} fallbackDefault the object's default, whose members are its fields'
   * @param {number} depth
   * @returns {Pick<FormNode, "path" | "read">}
   */
  #object(s, path, container, fallbackDefault, depth) {
    const required = new Set(s.required ?? []);
    /** @type {[string, FormNode][]} */
    const children = [];
    for (const [key, raw] of Object.entries(s.properties ?? {})) {
      const prop = this.#resolve(raw);
      const f = {
        prop,
        path: [...path, key],
        label: raw?.title ?? humanize(key),
        container,
        required: required.has(key),
        dflt: "default" in prop ? prop.default : fallbackDefault?.[key],
      };
      children.push([key, this.#field(f, depth)]);
    }
    return {
      path,
      read(errors) {
        /** @type {Record<string, unknown>} */
        const value = {};
        let present = false;
        for (const [key, child] of children) {
          const result = child.read(errors);
          if (result.present) {
            value[key] = result.value;
            present = true;
          }
        }
        return { present, value };
      },
    };
  }

  /**
   * @param {FieldSpec} f
   * @param {number} depth
   * @returns {FormNode}
   */
  #field(f, depth) {
    this.#fields += 1;
    if (this.#fields > MAX_FIELDS) throw new TooManyFields();
    const { prop } = f;
    if (Array.isArray(prop.enum) || "const" in prop) return this.#choice(f);
    if (prop.type === "boolean") return prop.nullable ? this.#nullableBoolean(f) : this.#boolean(f);
    if (prop.type === "integer" || prop.type === "number") return this.#number(f);
    if (prop.type === "string") return this.#text(f);
    const isObject = prop.type === "object" || (!prop.type && prop.properties);
    if (isObject && prop.properties && depth < MAX_DEPTH) return this.#group(f, depth);
    return this.#json(f);
  }

  /**
   * A fieldset of a nested object's fields.
   * @param {FieldSpec} f
   * @param {number} depth
   * @returns {FormNode}
   */
  #group({ prop, path, label, container, required, dflt }, depth) {
    const id = this.#id(path);
    const errorEl = h("p", { class: "field-error", id: `${id}-error`, hidden: true });
    const legend = h("legend", {}, label, required ? requiredMark() : null);
    const fieldset = h("fieldset", { class: "group", "aria-describedby": errorEl.id }, legend);
    if (prop.description) fieldset.append(h("p", { class: "hint" }, prop.description));
    container.append(fieldset);
    const inner = this.#object(prop, path, fieldset, dflt, depth + 1);
    fieldset.append(errorEl);
    // An optional group is sent only once one of its fields was edited: left alone, the
    // hub's default applies (often null), and its required fields are not asked for.
    let touched = false;
    const touch = () => { touched = true; };
    fieldset.addEventListener("input", touch);
    fieldset.addEventListener("change", touch);
    /** @type {FormNode} */
    const node = {
      path,
      errorEl,
      focusTarget: fieldset.querySelector("input, select, textarea"),
      read(errors) {
        if (!required && !touched) return { present: false };
        const result = inner.read(errors);
        return { present: true, value: result.value };
      },
    };
    this.nodes.push(node);
    return node;
  }

  /** Label, hint and error paragraph around `input`; registers the field's node, whose
   * `read(errors)` reads the value with `read()` and checks it against the schema.
   * @param {FieldSpec} f
   * @param {HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement} input
   * @param {() => Reading} read
   * @param {{ inline?: boolean }} [options]
   * @returns {FormNode}
   */
  #wrap(f, input, read, { inline = false } = {}) {
    const { prop, path, label, container, required } = f;
    const hintText = [prop.description, constraintHint(prop)].filter(Boolean).join(" ");
    const hint = hintText ? h("p", { class: "hint", id: `${input.id}-hint` }, hintText) : null;
    const errorEl = h("p", { class: "field-error", id: `${input.id}-error`, hidden: true });
    input.setAttribute("aria-describedby", [hint?.id, errorEl.id].filter(Boolean).join(" "));
    const labelEl = h("label", { for: input.id }, label, required ? requiredMark() : null);
    const field = h("div", { class: inline ? "field inline" : "field" });
    if (inline) field.append(h("div", { class: "check" }, input, labelEl), hint ?? "", errorEl);
    else field.append(labelEl, input, hint ?? "", errorEl);
    container.append(field);
    /** @type {FormNode} */
    const node = {
      path,
      input,
      errorEl,
      read: (errors) => {
        let result = read();
        if (!result.present && !result.error && required && prop.nullable) {
          result = { present: true, value: null }; // left empty: the null the schema allows
        }
        const problem = result.error
          ?? (!result.present && required ? "Required." : null)
          ?? (result.present ? check(prop, result.value) : null);
        if (problem) errors.push({ path, msg: problem });
        return result;
      },
    };
    this.nodes.push(node);
    return node;
  }

  /**
   * @param {FieldSpec} f
   * @param {Record<string, unknown>} attributes
   */
  #input(f, attributes) {
    return h("input", { id: this.#id(f.path), name: f.path.join("."), ...attributes });
  }

  /** @param {FieldSpec} f */
  #text(f) {
    const input = this.#input(f, {
      type: f.prop.format === "password" ? "password" : "text",
      required: f.required,
      autocomplete: "off",
      value: typeof f.dflt === "string" ? f.dflt : "",
    });
    return this.#wrap(f, input, () => ({ present: input.value !== "", value: input.value }));
  }

  /** @param {FieldSpec} f */
  #number(f) {
    const integer = f.prop.type === "integer";
    const input = this.#input(f, {
      type: "number",
      inputmode: integer ? "numeric" : "decimal",
      step: integer ? 1 : "any",
      min: f.prop.minimum,
      max: f.prop.maximum,
      required: f.required,
      value: typeof f.dflt === "number" ? String(f.dflt) : "",
    });
    return this.#wrap(f, input, () => {
      if (input.validity.badInput) return { present: true, error: "Enter a number." };
      if (input.value === "") return { present: false };
      const value = Number(input.value);
      if (integer && !Number.isSafeInteger(value) && Number.isInteger(value)) {
        // A JavaScript number would send a neighbouring integer instead, silently.
        return { present: true, error: `Too large to send exactly (at most ${LARGEST}).` };
      }
      return { present: true, value };
    });
  }

  /** @param {FieldSpec} f */
  #boolean(f) {
    const input = this.#input(f, { type: "checkbox", checked: f.dflt === true });
    const read = () => ({ present: true, value: input.checked });
    return this.#wrap({ ...f, required: false }, input, read, { inline: true });
  }

  /**
   * true, false or not set: a checkbox cannot leave a nullable boolean unset.
   * @param {FieldSpec} f
   */
  #nullableBoolean(f) {
    const select = h("select", { id: this.#id(f.path), name: f.path.join(".") });
    /** @type {[string, string, boolean | null][]} */
    const options = [["", "(not set)", null], ["true", "Yes", true], ["false", "No", false]];
    for (const [value, label, meaning] of options) {
      select.append(h("option", { value, selected: f.dflt === meaning }, label));
    }
    return this.#wrap(f, select, () => {
      if (select.value === "") return { present: false }; // null when required (#wrap)
      return { present: true, value: select.value === "true" };
    });
  }

  /** @param {FieldSpec} f */
  #choice(f) {
    /** @type {unknown[]} */
    const values = Array.isArray(f.prop.enum) ? f.prop.enum : [f.prop.const];
    const select = h("select", {
      id: this.#id(f.path),
      name: f.path.join("."),
      required: f.required,
    });
    if (!values.some((v) => same(v, f.dflt))) {
      select.append(h("option", { value: "" }, f.required ? "Choose…" : "(not set)"));
    }
    // Strings as they are, unless one would look like another value (1 and "1").
    const show = new Set(values.map(display)).size < values.length ? JSON.stringify : display;
    values.forEach((v, i) => {
      select.append(h("option", { value: String(i), selected: same(v, f.dflt) }, show(v)));
    });
    return this.#wrap(f, select, () => {
      if (select.value === "") return { present: false };
      return { present: true, value: values[Number(select.value)] };
    });
  }

  /**
   * A JSON text field: arrays, free-form objects, anything the form has no control for.
   * @param {FieldSpec} f
   */
  #json(f) {
    const kind = f.prop.type ? `JSON ${[].concat(f.prop.type).join(" or ")}` : "JSON";
    const textarea = h("textarea", {
      id: this.#id(f.path),
      name: f.path.join(".") || "payload",
      class: "json",
      rows: 3,
      spellcheck: "false",
      required: f.required,
    });
    textarea.value = f.dflt === undefined ? "" : JSON.stringify(f.dflt);
    const read = () => {
      if (textarea.value.trim() === "") {
        return f.path.length ? { present: false } : { present: true, value: {} }; // payload: {}
      }
      try {
        return { present: true, value: JSON.parse(textarea.value) };
      } catch (error) {
        return { present: true, error: `Not valid JSON (${messageOf(error)}).` };
      }
    };
    return this.#wrap({ ...f, label: `${f.label} (${kind})` }, textarea, read);
  }
}

// -- validation ---------------------------------------------------------------------------

/** @type {Record<string, (value: unknown) => boolean>} */
const JSON_TYPES = {
  array: Array.isArray,
  object: (v) => v !== null && typeof v === "object" && !Array.isArray(v),
  string: (v) => typeof v === "string",
  number: (v) => typeof v === "number",
  integer: Number.isInteger,
  boolean: (v) => typeof v === "boolean",
  null: (v) => v === null,
};

/**
 * The first constraint of `s` that `value` breaks, as a message; null when none. The
 * form's quick answer (types, enums, bounds, lengths): the hub checks the payload again,
 * patterns included, and its 422 is the one that counts.
 * @param {JsonSchema} s
 * @param {unknown} value
 * @returns {string | null}
 */
export function check(s, value) {
  /** @type {string[]} */
  const types = [].concat(s.type ?? []);
  if (s.nullable && value === null) return null;
  if (types.length && !types.some((t) => JSON_TYPES[t]?.(value) ?? true)) {
    return types.includes("integer") && typeof value === "number"
      ? "Must be a whole number."
      : `Must be ${types.map(article).join(" or ")}.`;
  }
  if (Array.isArray(s.enum) && !s.enum.some((v) => same(v, value))) {
    return `Must be one of: ${s.enum.map(display).join(", ")}.`;
  }
  if (typeof value === "number") return checkNumber(s, value);
  if (typeof value === "string") return checkString(s, value);
  if (Array.isArray(value)) {
    if (s.minItems != null && value.length < s.minItems) return `At least ${s.minItems} items.`;
    if (s.maxItems != null && value.length > s.maxItems) return `At most ${s.maxItems} items.`;
  }
  return null;
}

/**
 * @param {JsonSchema} s
 * @param {number} v
 */
function checkNumber(s, v) {
  if (s.minimum != null && v < s.minimum) return `Must be at least ${s.minimum}.`;
  if (s.maximum != null && v > s.maximum) return `Must be at most ${s.maximum}.`;
  if (typeof s.exclusiveMinimum === "number" && v <= s.exclusiveMinimum) {
    return `Must be greater than ${s.exclusiveMinimum}.`;
  }
  if (typeof s.exclusiveMaximum === "number" && v >= s.exclusiveMaximum) {
    return `Must be less than ${s.exclusiveMaximum}.`;
  }
  if (s.multipleOf > 0) {
    const ratio = v / s.multipleOf;
    if (Math.abs(ratio - Math.round(ratio)) > 1e-9) return `Must be a multiple of ${s.multipleOf}.`;
  }
  return null;
}

/**
 * @param {JsonSchema} s
 * @param {string} v
 */
function checkString(s, v) {
  const length = [...v].length;
  if (s.minLength != null && length < s.minLength) {
    return s.minLength === 1 ? "Required." : `At least ${s.minLength} characters.`;
  }
  if (s.maxLength != null && length > s.maxLength) return `At most ${s.maxLength} characters.`;
  // No `pattern` here (nor `patternProperties` keys, nor `format: "regex"`): the browser's
  // RegExp backtracks, and the hub accepts any RE2 pattern, so a job's `^(a+)+$` against
  // its own default "aaaa…a!" would freeze the tab on Submit (time doubling with each
  // character). The hub matches patterns with RE2, in linear time; its 422 names the
  // field, and `showServerErrors` puts the message next to it.
  return null;
}

/**
 * The bounds of a field in words, for its hint.
 * @param {JsonSchema} s
 */
function constraintHint(s) {
  const parts = [];
  if (s.minimum != null && s.maximum != null) parts.push(`${s.minimum} to ${s.maximum}.`);
  else if (s.minimum != null) parts.push(`At least ${s.minimum}.`);
  else if (s.maximum != null) parts.push(`At most ${s.maximum}.`);
  if (s.maxLength != null) parts.push(`Up to ${s.maxLength} characters.`);
  return parts.join(" ");
}

// -- helpers ------------------------------------------------------------------------------

function requiredMark() {
  return h("span", { class: "required" }, h("span", { "aria-hidden": "true" }, " *"),
    h("span", { class: "visually-hidden" }, " (required)"));
}

/**
 * A property name as a label: "max_items" → "Max items", "maxItems" → "Max Items".
 * @param {string} key
 */
export function humanize(key) {
  const words = String(key).replace(/[_-]+/g, " ").replace(/([a-z])([A-Z])/g, "$1 $2").trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** @type {(a: unknown, b: unknown) => boolean} */
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
/** @type {(v: unknown) => string} */
const display = (v) => (typeof v === "string" ? v : JSON.stringify(v));
/** @type {Record<string, string>} */
const ARTICLES = { array: "a list", object: "an object", integer: "an integer", null: "null" };
/** @type {(type: string) => string} */
const article = (type) => ARTICLES[type] ?? `a ${type}`;
