// @ts-check
// "Sign in with …" on the sign-in form, when the hub has an identity provider for the page
// (oidc.js): the button leaves for the provider; back on the page, the code is redeemed and
// the token the hub accepts is kept like a pasted one (session.js). Which token: the
// access token when it is a JWT the hub accepts, else the ID token (the hub's
// TASKHUB_JWT_AUDIENCE names the access tokens' audience, or the page's client id).

import { Api, ApiError } from "./api.js";
import { $, setFieldError } from "./dom.js";
import { messageOf } from "./format.js";
import { beginSignIn, finishSignIn, isSignInCallback, keepSignIn, providerConfig } from "./oidc.js";
import { show } from "./router.js";
import { keepToken, start } from "./session.js";

/** @import { User } from "./types.js" */

export { isSignInCallback };

/** Offer the provider's button on the sign-in form, when the hub has a provider. */
export async function offerProviderSignIn() {
  const config = await providerConfig();
  if (!config) return;
  const button = $("#provider-button", HTMLButtonElement);
  button.textContent = `Sign in with ${config.name}`;
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await beginSignIn(config, $("#remember-input", HTMLInputElement).checked);
    } catch (error) {
      button.disabled = false;
      failed(`Could not reach ${config.name}: ${messageOf(error)}`);
    }
  });
  $("#provider-sign-in").hidden = false;
}

/** Back from the provider: finish the sign-in and start, or say why not on the form. */
export async function finishProviderSignIn() {
  show(); // the sign-in form, while the code is redeemed
  const config = await providerConfig();
  if (!config) {
    history.replaceState(null, "", "/");
    failed("The hub has no identity provider for this page.");
    return;
  }
  let signedIn;
  try {
    signedIn = await finishSignIn(config);
  } catch (error) {
    failed(`Signing in with ${config.name} failed: ${messageOf(error)}`);
    return;
  }
  const accepted = await acceptedBearer(signedIn.bearers);
  if (accepted instanceof Error) {
    failed(`Signed in with ${config.name}, but ${accepted.message}`);
    return;
  }
  keepSignIn(keepToken(accepted.token, signedIn.remember), signedIn.record);
  start(accepted.token, accepted.me);
}

/**
 * The first of `bearers` the hub accepts, and its user; else why none.
 * @param {string[]} bearers
 * @returns {Promise<{ token: string, me: User | null } | Error>}
 */
async function acceptedBearer(bearers) {
  for (const token of bearers) {
    try {
      return { token, me: await new Api(token).me() };
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) {
        return new Error(`the hub could not be asked: ${messageOf(error)}`);
      }
    }
  }
  return new Error("the hub does not accept its tokens (see its TASKHUB_JWT_AUDIENCE).");
}

/** @param {string} message */
function failed(message) {
  setFieldError(null, $("#provider-error"), message);
}
