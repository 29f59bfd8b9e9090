// What both API layers of the console share (api.js, the console's own; api-client.js, over the typed client):
// the error the views show, and the order of event ids.

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** Event ids are `<ms>-<seq>`: compared as numbers, part by part. */
export function compareIds(a, b) {
  const [am, as] = a.split('-').map(Number);
  const [bm, bs] = b.split('-').map(Number);
  return am - bm || as - bs;
}
