/**
 * The WebSocket subprotocol the server accepts. Browsers cannot set an Authorization header on a WebSocket, so they
 * authenticate with `new WebSocket(url, ['bearer', token])`: the request carries `Sec-WebSocket-Protocol: bearer,
 * <token>`, and the server must answer with one of the offered protocols or the browser fails the connection. It
 * answers `bearer`, never the token (which would echo the secret in a response header). With no `bearer` offered it
 * selects none: the service speaks no other subprotocol.
 *
 * Note for browser clients: a subprotocol must be an HTTP token, so a key used this way may hold letters, digits and
 * `!#$%&'*+-.^_`|~` only (no `/`, `=`, `:`).
 */
export function selectProtocol(protocols: Set<string>): string | false {
  return protocols.has('bearer') ? 'bearer' : false;
}
