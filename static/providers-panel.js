// @ts-check
// The open room's providers (its own, @global's and @internal's) and a form to read from
// one: a field per parameter of its schema; the answer shown as JSON, or as its size and a
// download when it is bytes. Read on open and after a reconnect, and again when the list
// changes (providers_invalidate).

import { $, h } from "./dom.js";
import { messageOf } from "./format.js";
import { GLOBAL_ROOM, INTERNAL_ROOM } from "./naming.js";
import { api, signedOutBy } from "./session.js";
import { state } from "./state.js";
import { throttle } from "./throttle.js";

/** @import { Provider, ProviderAnswer } from "./types.js" */

const QUIET_MS = 120; // providers_invalidate comes in bursts: read once they pause
const READ_WAIT_SECONDS = 10;
const SHOWN_JSON_CHARS = 100_000;

/** @type {{ providers: Provider[], selected: string | null, download: string | null }} */
const panel = { providers: [], selected: null, download: null };

const refresh = throttle(() => state.session.room && refreshProviders(), {
  delay: QUIET_MS, restart: true,
});

/** The room's providers changed: read them again once the burst is over. */
export function scheduleProvidersRefresh() {
  refresh.schedule();
}

/** Forget the providers of the room left (opening another). */
export function clearProviders() {
  panel.providers = [];
  panel.selected = null;
  $("#providers").replaceChildren();
  $("#read-form").hidden = true;
  showAnswer(null);
}

export async function refreshProviders() {
  const room = state.session.room;
  if (!room) return;
  const { generation } = state.room;
  try {
    const page = await api().providers(room);
    if (generation !== state.room.generation) return;
    panel.providers = page.items;
    if (!panel.providers.some((p) => p.full_name === panel.selected)) select(null);
    drawProviders(room);
  } catch (error) {
    signedOutBy(error);
  }
}

/**
 * @param {Provider} provider
 * @param {string} room
 */
function scopeOf(provider, room) {
  if (provider.room_id === room) return "this room";
  if (provider.room_id === GLOBAL_ROOM) return "global";
  return provider.room_id === INTERNAL_ROOM ? "the hub's" : provider.room_id;
}

/** @param {string} room */
function drawProviders(room) {
  const list = $("#providers");
  if (!panel.providers.length) {
    list.replaceChildren(h("li", { class: "empty" }, "No providers in this room."));
    return;
  }
  const sorted = [...panel.providers].sort((a, b) => a.full_name.localeCompare(b.full_name));
  list.replaceChildren(...sorted.map((provider) => h("li", {}, h("button", {
    type: "button",
    class: "provider-button",
    "aria-pressed": String(provider.full_name === panel.selected),
    dataset: { provider: provider.full_name },
    onclick: () => select(provider.full_name === panel.selected ? null : provider.full_name),
  },
  h("span", { class: "provider-name" }, provider.name),
  h("span", { class: "provider-category" }, provider.category),
  h("span", { class: "provider-scope" }, scopeOf(provider, room))))));
}

/** @param {string | null} fullName */
function select(fullName) {
  panel.selected = fullName;
  const provider = panel.providers.find((p) => p.full_name === fullName) ?? null;
  const form = $("#read-form", HTMLFormElement);
  showAnswer(null);
  if (!provider) {
    form.hidden = true;
  } else {
    $("#read-provider-name").textContent = provider.name;
    $("#read-fields").replaceChildren(...parameterFields(provider));
    form.hidden = false;
  }
  if (state.session.room) drawProviders(state.session.room);
}

/**
 * A text field per parameter of the provider's schema (a read's parameters travel as
 * query text; the provider reads them into its own types).
 * @param {Provider} provider
 */
function parameterFields(provider) {
  /** @type {Record<string, { title?: string, description?: string, default?: unknown }>} */
  const properties = provider.schema?.properties ?? {};
  const names = Object.keys(properties);
  if (!names.length) return [h("p", { class: "hint" }, "This provider takes no parameters.")];
  return names.map((name, index) => {
    const spec = properties[name] ?? {};
    const id = `read-param-${index}`;
    const fallback = spec.default === undefined ? "" : JSON.stringify(spec.default);
    return h("div", { class: "field" },
      h("label", { for: id }, spec.title ?? name),
      h("input", {
        id, name, type: "text", autocomplete: "off", spellcheck: "false",
        placeholder: fallback, "aria-describedby": spec.description ? `${id}-hint` : null,
      }),
      spec.description ? h("p", { id: `${id}-hint`, class: "hint" }, spec.description) : null);
  });
}

/** @param {SubmitEvent} event */
export async function onRead(event) {
  event.preventDefault();
  const room = state.session.room;
  const name = panel.selected;
  if (!room || !name) return;
  const form = $("#read-form", HTMLFormElement);
  /** @type {Record<string, string>} */
  const params = {};
  for (const [key, value] of new FormData(form)) {
    if (typeof value === "string" && value !== "") params[key] = value;
  }
  const button = $("#read-form button[type=submit]", HTMLButtonElement);
  button.disabled = true;
  $("#read-status").textContent = "Reading…";
  try {
    const answer = await api().read(room, name, params, READ_WAIT_SECONDS);
    if (panel.selected === name) showAnswer(answer, name);
  } catch (error) {
    if (!signedOutBy(error) && panel.selected === name) {
      showAnswer(null);
      $("#read-status").textContent = messageOf(error);
    }
  } finally {
    button.disabled = false;
  }
}

/**
 * Show an answer (null: none): JSON as text, bytes as their size and a download.
 * @param {ProviderAnswer | null} answer
 * @param {string} [name]
 */
function showAnswer(answer, name = "") {
  if (panel.download) URL.revokeObjectURL(panel.download);
  panel.download = null;
  const out = $("#read-result");
  $("#read-status").textContent = answer ? `${answer.size} bytes of ${answer.contentType}` : "";
  if (!answer) {
    out.replaceChildren();
    return;
  }
  if (answer.blob === undefined) {
    const text = JSON.stringify(answer.json, null, 2) ?? "";
    const shown = text.length > SHOWN_JSON_CHARS ? `${text.slice(0, SHOWN_JSON_CHARS)}\n…` : text;
    out.replaceChildren(h("pre", { class: "read-json" }, shown));
    return;
  }
  panel.download = URL.createObjectURL(answer.blob);
  const file = `${name.split(":").slice(2).join(":") || "answer"}.bin`;
  out.replaceChildren(h("a", { href: panel.download, download: file, class: "download" },
    `Download (${answer.size} bytes)`));
}
