import type { FastifyPluginAsync } from 'fastify';

/**
 * GET /demo: a page that shows the live stream of a session in a browser, for newcomers. It creates a session with
 * fetch (Authorization header), opens `new WebSocket(url, ['bearer', key])` (a browser cannot set headers on a
 * WebSocket), sends the prompt as a `message` frame, renders the text deltas as they arrive, and resumes with the
 * id of the last event it saw when the connection drops. Static HTML; the key never leaves the page but for the
 * requests to this service.
 */
export const demoHtml = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Tool-runner sessions: live demo</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 15px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
  label { display: block; margin: .5rem 0 .2rem; font-weight: 600; }
  input, textarea { width: 100%; box-sizing: border-box; font: inherit; padding: .4rem; }
  button { margin-top: .6rem; font: inherit; padding: .4rem 1rem; }
  .turn { white-space: pre-wrap; border-left: 3px solid #8ab; padding: .3rem .8rem; margin: .6rem 0; }
  #events { font: 12px/1.4 ui-monospace, monospace; color: #666; max-height: 14rem; overflow: auto; }
  #status { font-weight: 600; }
</style>
</head>
<body>
<h1>Live session demo</h1>
<p>Creates a session, sends your prompt over the WebSocket (<code>GET /v1/sessions/:id/stream</code>) and renders the
reply's text deltas as they stream. Leave the key empty when the service runs without <code>API_KEYS</code>.</p>
<label for="key">API key</label>
<input id="key" type="password" autocomplete="off" placeholder="the bearer key (letters, digits, - . _ ~)">
<label for="prompt">Prompt</label>
<textarea id="prompt" rows="3">What is the weather in Paris, and what is 2 + 3?</textarea>
<button id="start">Start a session</button>
<button id="send" disabled>Send as a follow-up</button>
<p>Session <code id="session">-</code> &middot; status <span id="status">-</span></p>
<div id="out"></div>
<h2>Events</h2>
<div id="events"></div>
<script>
(() => {
  const $ = (id) => document.getElementById(id);
  let session = null, ws = null, lastId = null, refs = 0, done = false;

  function log(line) {
    const div = document.createElement('div');
    div.textContent = line;
    $('events').prepend(div);
  }

  function turnBox(iteration) {
    let box = document.querySelector('.turn[data-iteration="' + iteration + '"]');
    if (!box) {
      box = document.createElement('div');
      box.className = 'turn';
      box.dataset.iteration = String(iteration);
      $('out').append(box);
    }
    return box;
  }

  function onEvent(ev) {
    lastId = ev.id;
    if (ev.type === 'stream.event') {
      const e = ev.data.event;
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') {
        turnBox(ev.data.iteration).append(document.createTextNode(e.delta.text));
      }
      return;
    }
    log(ev.type + (ev.type === 'session.status' ? ' ' + ev.data.status : ''));
    if (ev.type === 'turn.started') turnBox(ev.data.iteration).textContent = '';
    if (ev.type === 'session.status') $('status').textContent = ev.data.status;
  }

  function connect(key) {
    const url = new URL('/v1/sessions/' + session + '/stream', location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    if (lastId) url.searchParams.set('after', lastId);
    ws = key ? new WebSocket(url, ['bearer', key]) : new WebSocket(url);
    ws.onopen = () => { $('send').disabled = false; if (!lastId) send($('prompt').value); };
    ws.onmessage = (m) => {
      const msg = JSON.parse(m.data);
      if (msg.session_id) return onEvent(msg);
      log(msg.type + ' ' + (msg.ref || '') + (msg.error ? ' ' + msg.error.code + ': ' + msg.error.message : ''));
    };
    ws.onclose = (e) => {
      $('send').disabled = true;
      log('closed ' + e.code + ' ' + e.reason);
      // 1013: too slow, 1001/1006/1011: the server went away; resume from the last event seen.
      if (!done && [1001, 1006, 1011, 1013].includes(e.code)) setTimeout(() => connect(key), 1000);
    };
  }

  function send(text) {
    const ref = 'm' + ++refs;
    ws.send(JSON.stringify({ type: 'message', ref, text }));
  }

  $('start').onclick = async () => {
    const key = $('key').value.trim();
    if (ws) { done = true; ws.close(); }
    done = false; lastId = null; $('out').textContent = ''; $('events').textContent = '';
    const res = await fetch('/v1/sessions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: 'Bearer ' + key } : {}) },
      body: JSON.stringify({ tools: ['get_weather', 'calculate_sum'], start: false }),
    });
    const body = await res.json();
    if (!res.ok) { $('status').textContent = body.error.code + ': ' + body.error.message; return; }
    session = body.id;
    $('session').textContent = session;
    connect(key);
  };
  $('send').onclick = () => send($('prompt').value);
})();
</script>
</body>
</html>
`;

const routes: FastifyPluginAsync = async (app) => {
  app.get('/demo', { schema: { hide: true } }, async (_req, reply) =>
    reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(demoHtml),
  );
};

export default routes;
