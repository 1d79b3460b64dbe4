// @ts-check
// The page as an OpenID Connect client of the hub's identity provider, with oauth4webapi:
// a public client (no secret), authorization code with PKCE (S256), `state` and `nonce`.
// The hub names the provider and the client at /auth/config.json ({} when it has none).
// What a sign-in is waiting for (its state, nonce and PKCE verifier) is kept in this tab's
// session storage until the provider sends the browser back to the page; a finished one
// (its ID token, for signing out at the provider) beside the token the page keeps.

import * as oauth from "oauth4webapi";

/** @import { AuthorizationServer, Client } from "oauth4webapi" */

/**
 * @typedef {object} ProviderConfig the page's client, as the hub says
 * @property {string} issuer
 * @property {string} client_id
 * @property {string} scopes space-separated
 * @property {string} name the provider's name, for the button
 */

/**
 * @typedef {object} PendingSignIn what a sign-in waits for, until the provider sends back
 * @property {string} state
 * @property {string} nonce
 * @property {string} verifier the PKCE code verifier
 * @property {boolean} remember keep the identity on this device (else this tab only)
 * @property {string} returnTo the page's address when the sign-in began
 */

/**
 * @typedef {object} ProviderSignIn a finished sign-in, kept beside the token
 * @property {string} issuer
 * @property {string} client_id
 * @property {string} id_token for the provider's sign-out (`id_token_hint`)
 */

/**
 * @typedef {object} SignedIn what the provider answered
 * @property {string[]} bearers the tokens the hub may accept, best first: the access token
 *   when it is a JWT, then the ID token
 * @property {ProviderSignIn} record
 * @property {boolean} remember
 * @property {string} returnTo
 */

const PENDING_KEY = "taskhub.sign-in.pending";
const RECORD_KEY = "taskhub.sign-in";
const CONFIG_URL = "/auth/config.json";

/** The page's own address at the provider: where it sends the browser back. */
export function redirectUri() {
  return `${location.origin}/`;
}

/** @type {Promise<ProviderConfig | null> | null} */
let configRead = null;

/**
 * The hub's provider for the page, or null when it has none (or cannot say).
 * @returns {Promise<ProviderConfig | null>}
 */
export function providerConfig() {
  configRead ??= fetch(CONFIG_URL, { headers: { Accept: "application/json" } })
    .then((response) => (response.ok ? response.json() : null))
    .then((config) => (config?.issuer && config?.client_id ? config : null))
    .catch(() => null);
  return configRead;
}

/**
 * Options that let oauth4webapi speak plain HTTP to an `http://` issuer (one the hub was
 * configured with: a provider on a private network or this machine).
 * @param {string} issuer
 */
function transport(issuer) {
  return { [oauth.allowInsecureRequests]: new URL(issuer).protocol === "http:" };
}

/** @type {Map<string, Promise<AuthorizationServer>>} */
const servers = new Map();

/**
 * The provider's metadata (its OpenID Connect discovery document), read once a page load.
 * @param {string} issuer
 */
function authorizationServer(issuer) {
  let read = servers.get(issuer);
  if (!read) {
    const url = new URL(issuer);
    read = oauth
      .discoveryRequest(url, { algorithm: "oidc", ...transport(issuer) })
      .then((response) => oauth.processDiscoveryResponse(url, response));
    read.catch(() => servers.delete(issuer)); // asked again next time
    servers.set(issuer, read);
  }
  return read;
}

/**
 * Leave for the provider's sign-in page; it sends the browser back to the page.
 * @param {ProviderConfig} config
 * @param {boolean} remember
 */
export async function beginSignIn(config, remember) {
  const server = await authorizationServer(config.issuer);
  if (!server.authorization_endpoint) throw new Error("The provider names no sign-in page.");
  const verifier = oauth.generateRandomCodeVerifier();
  /** @type {PendingSignIn} */
  const pending = {
    state: oauth.generateRandomState(),
    nonce: oauth.generateRandomNonce(),
    verifier,
    remember,
    returnTo: location.pathname + location.search + location.hash,
  };
  const url = new URL(server.authorization_endpoint);
  url.search = new URLSearchParams({
    response_type: "code",
    client_id: config.client_id,
    redirect_uri: redirectUri(),
    scope: config.scopes,
    state: pending.state,
    nonce: pending.nonce,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: "S256",
  }).toString();
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  location.assign(url);
}

/** Whether the page was opened by the provider sending the browser back from a sign-in. */
export function isSignInCallback() {
  const params = new URLSearchParams(location.search);
  return params.has("state") && (params.has("code") || params.has("error"));
}

/**
 * Finish the sign-in the provider sent the browser back from: check the answer against
 * what the sign-in waits for, and redeem the code at the token endpoint. The page's
 * address is put back as it was when the sign-in began, whatever happens.
 * @param {ProviderConfig} config
 * @returns {Promise<SignedIn>}
 */
export async function finishSignIn(config) {
  const callback = new URL(location.href);
  const stored = sessionStorage.getItem(PENDING_KEY);
  sessionStorage.removeItem(PENDING_KEY); // one answer per sign-in
  /** @type {PendingSignIn | null} */
  const pending = stored ? JSON.parse(stored) : null;
  history.replaceState(null, "", pending?.returnTo ?? "/");
  if (!pending) throw new Error("This page began no sign-in (or it was finished already).");
  const server = await authorizationServer(config.issuer);
  /** @type {Client} */
  const client = { client_id: config.client_id };
  const params = oauth.validateAuthResponse(server, client, callback, pending.state);
  const response = await oauth.authorizationCodeGrantRequest(
    server,
    client,
    oauth.None(),
    params,
    redirectUri(),
    pending.verifier,
    transport(config.issuer),
  );
  const tokens = await oauth.processAuthorizationCodeResponse(server, client, response, {
    expectedNonce: pending.nonce,
    requireIdToken: true,
  });
  const idToken = /** @type {string} */ (tokens.id_token);
  const bearers = isJwt(tokens.access_token) ? [tokens.access_token, idToken] : [idToken];
  return {
    bearers,
    record: { issuer: config.issuer, client_id: config.client_id, id_token: idToken },
    remember: pending.remember,
    returnTo: pending.returnTo,
  };
}

/**
 * Keep a finished sign-in in `storage` (where the page keeps its token).
 * @param {Storage} storage
 * @param {ProviderSignIn} record
 */
export function keepSignIn(storage, record) {
  storage.setItem(RECORD_KEY, JSON.stringify(record));
}

/** The kept sign-in with the provider, if the token the page keeps came from one. */
export function keptSignIn() {
  const stored = sessionStorage.getItem(RECORD_KEY) ?? localStorage.getItem(RECORD_KEY);
  if (!stored) return null;
  try {
    return /** @type {ProviderSignIn} */ (JSON.parse(stored));
  } catch {
    return null;
  }
}

/** Forget the kept sign-in (the page's own sign-out). */
export function forgetSignIn() {
  sessionStorage.removeItem(RECORD_KEY);
  localStorage.removeItem(RECORD_KEY);
}

/**
 * The provider's sign-out page for `record` (RP-initiated logout), which sends the browser
 * back to the page; null when the provider has none.
 * @param {ProviderSignIn} record
 */
export async function endSessionUrl(record) {
  const server = await authorizationServer(record.issuer);
  if (!server.end_session_endpoint) return null;
  const url = new URL(server.end_session_endpoint);
  url.searchParams.set("client_id", record.client_id);
  url.searchParams.set("id_token_hint", record.id_token);
  url.searchParams.set("post_logout_redirect_uri", redirectUri());
  return url;
}

/**
 * Whether `token` has a JWT's shape (three base64url parts).
 * @param {string} token
 */
export function isJwt(token) {
  return /^[\w-]+\.[\w-]+\.[\w-]*$/.test(token);
}

/**
 * When a JWT expires (its `exp`, in milliseconds since the epoch); null for a token that
 * is no JWT or has no `exp` (the hub's own `th_` tokens).
 * @param {string} token
 */
export function expiryOf(token) {
  if (!isJwt(token)) return null;
  try {
    const part = token.split(".")[1].replaceAll("-", "+").replaceAll("_", "/");
    const claims = JSON.parse(atob(part.padEnd(Math.ceil(part.length / 4) * 4, "=")));
    return typeof claims?.exp === "number" ? claims.exp * 1000 : null;
  } catch {
    return null;
  }
}
