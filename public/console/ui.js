// Shared by the console's views: htm bound to Preact, the API (with the key from sessionStorage), small components.

import { h } from 'preact';
import htm from 'htm';
import { createApi } from './api.js';

export const html = htm.bind(h);

/** The pasted key lives in this tab's sessionStorage only: never in a URL, gone when the tab closes. */
export const KEY_STORAGE = 'toolrunner-sessions.key';
export const readKey = () => sessionStorage.getItem(KEY_STORAGE) ?? '';
export const api = createApi(readKey);

export function StatusBadge({ status }) {
  return html`<span class="badge status-${status}">${status?.replace('_', ' ') ?? '…'}</span>`;
}

export function ErrorNote({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert"><strong>${error.code ?? 'error'}</strong> ${error.message}</p>`;
}

/** JSON for a person: two-space indentation. */
export const pretty = (v) => (v === undefined ? '' : JSON.stringify(v, null, 2));
