// @ts-check
// Tiny DOM helpers: element creation, finding the page's elements, the screen-reader
// announcer, the toast, field errors, and <select> options.

import { shortId } from "./format.js";
import { throttle } from "./throttle.js";

const TOAST_MS = 6000;

/**
 * @typedef {Record<string, unknown> & { class?: string, dataset?: Record<string, string> }} Props
 * @typedef {Node | string | null | undefined | false} Child
 */

/**
 * Create an element: h("button", { class: "x", onclick: fn }, "text", child). `on…` props
 * are listeners; `value` and `checked` are set after the children (a <select> finds its
 * option); null, undefined and false props are left out, true ones are empty attributes.
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Props | null} [props]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  /** @type {Record<string, unknown>} */
  const late = {};
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value == null || value === false) continue;
    if (key === "class") el.className = String(value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), /** @type {EventListener} */ (value));
    else if (key === "value" || key === "checked") late[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  /** @type {(Node | string)[]} */
  const nodes = [];
  for (const child of children.flat()) if (child != null && child !== false) nodes.push(child);
  el.append(...nodes);
  Object.assign(el, late);
  return el;
}

/**
 * The element `selector` finds (in `root`), of the class `type` (HTMLElement unless
 * given); throws when there is none, or it is something else: the page's elements are in
 * index.html, so either is a mistake in the page.
 * @template {Element} [T=HTMLElement]
 * @param {string} selector
 * @param {{ new (): T, prototype: T }} [type]
 * @param {ParentNode} [root]
 * @returns {T}
 */
export function $(selector, type, root = document) {
  const el = root.querySelector(selector);
  const wanted = type ?? HTMLElement;
  if (!(el instanceof wanted)) {
    throw new Error(`${selector}: ${el ? `not a ${wanted.name}` : "no such element"}`);
  }
  return /** @type {T} */ (el);
}

/**
 * Every element `selector` finds, of the class `type` (HTMLElement unless given).
 * @template {Element} [T=HTMLElement]
 * @param {string} selector
 * @param {{ new (): T, prototype: T }} [type]
 * @param {ParentNode} [root]
 * @returns {T[]}
 */
export function $$(selector, type, root = document) {
  const wanted = type ?? HTMLElement;
  return /** @type {T[]} */ ([...root.querySelectorAll(selector)].filter((el) => el instanceof wanted));
}

/**
 * Say something to screen readers (polite live region).
 * @param {string} message
 */
export function announce(message) {
  const region = $("#announcer");
  region.textContent = "";
  // A separate task, so repeating the same message is announced again.
  setTimeout(() => { region.textContent = message; }, 30);
}

const hideToast = throttle(() => { $("#toast").hidden = true; }, { delay: TOAST_MS, restart: true });

/**
 * Show a short message at the bottom of the screen (role=alert) for TOAST_MS.
 * @param {string} message
 */
export function toast(message) {
  const el = $("#toast");
  el.textContent = message;
  el.hidden = false;
  hideToast.schedule();
}

/**
 * Show or hide a field's error paragraph and mark its input.
 * @param {Element | null | undefined} input
 * @param {HTMLElement} errorEl
 * @param {string | null | undefined} message
 */
export function setFieldError(input, errorEl, message) {
  errorEl.textContent = message ?? "";
  errorEl.hidden = !message;
  if (input) {
    if (message) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
  }
}

/**
 * A <select> offers `value` even when the lists the page read do not (yet).
 * @param {HTMLSelectElement} select
 * @param {string} value
 */
export function ensureOption(select, value) {
  if (!value || [...select.options].some((option) => option.value === value)) return;
  select.append(new Option(value.length > 20 ? shortId(value) : value, value));
}

/**
 * Replace a <select>'s options, keeping the chosen value (offered even if no longer listed).
 * @param {HTMLSelectElement} select
 * @param {HTMLOptionElement[]} options
 */
export function replaceOptions(select, options) {
  const current = select.value;
  select.replaceChildren(...options);
  ensureOption(select, current);
  select.value = current;
}
