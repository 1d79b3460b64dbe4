// Tiny DOM helpers: element creation, the screen-reader announcer, the toast.

/** Create an element: h("button", { class: "x", onclick: fn }, "text", child). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  const late = {};
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value == null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "value" || key === "checked") late[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  el.append(...children.flat().filter((child) => child != null && child !== false));
  Object.assign(el, late); // after the children, so a <select> finds its option
  return el;
}

export const $ = (selector, root = document) => root.querySelector(selector);

/** Say something to screen readers (polite live region). */
export function announce(message) {
  const region = $("#announcer");
  region.textContent = "";
  // A separate task, so repeating the same message is announced again.
  setTimeout(() => { region.textContent = message; }, 30);
}

let toastTimer;

/** Show a short message at the bottom of the screen (role=alert). */
export function toast(message, ms = 6000) {
  const el = $("#toast");
  el.textContent = message;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, ms);
}

/** Show or hide a field's error paragraph and mark its input. */
export function setFieldError(input, errorEl, message) {
  errorEl.textContent = message ?? "";
  errorEl.hidden = !message;
  if (input) {
    if (message) input.setAttribute("aria-invalid", "true");
    else input.removeAttribute("aria-invalid");
  }
}
