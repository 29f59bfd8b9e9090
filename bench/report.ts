/** docs/BENCHMARKS.md from the results of one run: nothing in it is written by hand. */
import type { Results } from './run.js';
import type { B1Result } from './scenarios/b1.js';
import type { EagerShapeResult } from './scenarios/b1-eager.js';
import type { B2Result } from './scenarios/b2.js';
import type { B3Result } from './scenarios/b3.js';
import type { B6Result } from './scenarios/b6.js';
import { b7Report } from './scenarios/b7.js';
import { b9Report } from './scenarios/b9-report.js';
import type { ProfileSummary } from './lib/profile.js';
import { fmt, mb } from './lib/util.js';

const ms = (n: number) => `${fmt(n, 2)} ms`;
const MB = (bytes: number) => `${fmt(mb(bytes), 1)} MB`;
const x = (n: number) => `${fmt(n, 2)}×`;

function isErr(v: unknown): v is Error {
  return v instanceof Error;
}

/** Share of the profile's busy time spent in socket write syscalls (Redis commands, WebSocket frames, HTTP). */
function writeShare(p: ProfileSummary | Error | undefined): number | null {
  if (!p || isErr(p)) return null;
  const names = new Set([
    'writev',
    'writeUtf8String',
    'writeBuffer',
    'writeLatin1String',
    'writeAsciiString',
  ]);
  return p.functions.filter((f) => names.has(f.name)).reduce((a, f) => a + f.share, 0);
}

function packageShare(p: ProfileSummary | Error | undefined, name: string): number | null {
  if (!p || isErr(p)) return null;
  return p.packages.find((r) => r.name === name)?.share ?? 0;
}

const pct = (share: number | null) => (share === null ? 'n/a' : `${fmt(share * 100, 0)} %`);

/** B2's run without followers: what the WebSocket followers cost (absent in results of older runs). */
function b2BareLines(b2: B2Result): string[] {
  const b = b2.bare;
  if (!b) return [];
  const cpu = (k: string, c: Record<string, number>) => ms(c[k] ?? NaN);
  return [
    `The same load with nobody following (each round, a third run between the two sides: the sessions created in ` +
      "the same burst, the end read from the fake's request count):",
    '',
    '| | service, followed | service, no followers |',
    '|---|---:|---:|',
    `| iterations/s (median) | ${fmt(b2.svc.itersPerSec, 0)} | ${fmt(b.itersPerSec, 0)} |`,
    `| ratio to in-process (per round) | ${x(b2.throughputRatio)} (${b2.ratios.map((v) => x(v)).join(', ')}) | **${x(b.ratio)}** (${b.ratios.map((v) => x(v)).join(', ')}) |`,
    ...['service', 'redis', 'fake', 'bench'].map(
      (k) => `| CPU per iteration: ${k} | ${cpu(k, b2.cpuPerIter.svc)} | ${cpu(k, b.cpuPerIter)} |`,
    ),
    `| errors | ${b2.svc.errors} | ${b.errors} |`,
    '',
    `- The followers' cost, per iteration: ${ms((b2.cpuPerIter.svc['service'] ?? NaN) - (b.cpuPerIter['service'] ?? NaN))} ` +
      `in the service (WebSocket upgrades, replay, frames) and ${ms((b2.cpuPerIter.svc['bench'] ?? NaN) - (b.cpuPerIter['bench'] ?? NaN))} ` +
      'in the clients, on the same 2 cores.',
    '',
  ];
}

function why(lines: string[]): string[] {
  return ['', '**Why it misses, and what would fix it.**', '', ...lines];
}

function b1EagerSection(b1: B1Result): string[] {
  const e = b1.eager;
  const head = '### B1 variant: a 50 ms tool, `run_tools_eagerly` off and on';
  // `undefined` in results rendered from an older run.
  if (e === undefined || typeof e === 'string') return [head, '', `FAILED or not run: ${e ?? 'not run'}`, ''];
  const row = (name: string, s: EagerShapeResult) =>
    `| ${name} | ${ms(s.offIterMs.p50)} | ${ms(s.onIterMs.p50)} | **${ms(s.gainMs)}** | ${ms(s.offIterMs.p99)} | ${ms(s.onIterMs.p99)} | ${s.samples.off} / ${s.samples.on} |`;
  return [
    head,
    '',
    `${e.runs} runs a side (after 1 warm-up run each), alternating off/on, of a ${b1.iterations}-iteration loop whose ` +
      `turns call \`sleep_idempotent\` (${e.toolMs} ms; SERVER_TOOLS_MODULE=test/tools/testing.ts). Iteration = request gap at the fake. ` +
      '"call last": the call ends the reply, so it is complete only at `message_delta` and at most the last event is ' +
      'overlapped; "text after": a sentence (4 text deltas) streams after the call, while the call runs.',
    '',
    '| reply shape | iteration p50, off | iteration p50, on | gain per iteration (p50 off − on) | p99 off | p99 on | samples off / on |',
    '|---|---:|---:|---:|---:|---:|---:|',
    row('call last', e.callLast),
    row('text after', e.textAfter),
    '',
  ];
}

function b1Remarks(r: Results): string[] {
  const b1 = r.B1 as B1Result;
  if (b1.verdict !== 'MISS') return [];
  const between = b1.split.svc.between - b1.split.sdk.between;
  const upstream = b1.split.svc.upstream - b1.split.sdk.upstream;
  const p = r.profiles['B1'];
  return why([
    `- Between turns the service takes ${ms(between)} more than the runner (split above): after the tool runs, the ` +
      'reply and its results are committed together (one fenced Lua `apply` for an idempotent tool: a round trip ' +
      'with the ops JSON-encoded and decoded by cjson) before the next request leaves.' +
      (upstream >= 0.5
        ? ` During the turn it takes ${ms(upstream)} more: every stream event is stringified and XADDed as it ` +
          'arrives (one pipelined write at a time), and the service writes a WebSocket frame per event to the client.'
        : ` During the turn it is on a par with the runner (${ms(upstream)}).`),
    ...(p && !isErr(p)
      ? [
          `- The profile spends ${pct(writeShare(p))} of the busy time in socket write syscalls (\`writev\`, ` +
            '`writeUtf8String`: Redis commands and WebSocket frames, one syscall per command batch or frame) and ' +
            `${pct(packageShare(p, '@anthropic-ai/sdk'))} in the SDK itself.`,
        ]
      : []),
    '- Done: one `apply` per iteration for idempotent tools; stream events appended by one script call per batch ' +
      'whose pub/sub notice carries them, so relays fan out without reading the log; one writev per fanned-out ' +
      "batch; compiled JavaScript in production. What remains is the commit's round trip and the per-event work " +
      '(stringify, log append, frame). Next step: skip the per-event append when no client watches the session ' +
      "(the turn's events then go with its commit).",
  ]);
}

function b2Remarks(r: Results): string[] {
  const b2 = r.B2 as B2Result;
  if (b2.verdict !== 'MISS') return [];
  const demand = (b2.sessions * 1000) / b2.baselineIterMs;
  const svcCpu = b2.cpuPerIter.svc['service']! + b2.cpuPerIter.svc['redis']!;
  const slow = b2.throughputRatio < 0.8;
  const p = r.profiles['B2'];
  return why([
    `- Both sides are CPU-bound here: ${b2.sessions} sessions with ${ms(b2.baselineIterMs)} iterations would need ` +
      `${fmt(demand, 0)} iterations/s, and ${r.machine.cores} cores are shared by the runner, Redis, the fake ` +
      'upstream and the clients. Throughput is then CPU per iteration: the service process spends ' +
      `${ms(b2.cpuPerIter.svc['service']!)} and Redis ${ms(b2.cpuPerIter.svc['redis']!)} per iteration, against ` +
      `${ms(b2.cpuPerIter.sdk['runner']!)} for the in-process runner (${fmt(svcCpu / b2.cpuPerIter.sdk['runner']!, 2)}×); ` +
      `the WebSocket clients add ${ms(b2.cpuPerIter.svc['bench']!)} on the same cores. A Node process uses one core.` +
      (slow
        ? ''
        : ` The throughput bound is met (${x(b2.throughputRatio)}); the miss is the p99 turn overhead.`),
    `- The p99 turn overhead is the wait for that CPU: the in-process runners, which persist nothing, show ` +
      `${ms(b2.sdk.overheadMs.p99)} at the same load. The 20 ms bound holds only below saturation (see B1 for the ` +
      'unloaded overhead).',
    ...(p && !isErr(p)
      ? [
          `- Profile: the SDK ${pct(packageShare(p, '@anthropic-ai/sdk'))}, ioredis ${pct(packageShare(p, 'ioredis'))}, ` +
            `the garbage collector ${pct(packageShare(p, '(garbage collector)'))}, socket write syscalls ` +
            `${pct(writeShare(p))} of the busy time.`,
        ]
      : []),
    ...(slow
      ? [
          '- For throughput: less CPU per iteration (see B1 for what is done and what remains), and more cores per ' +
            'host: the service runs as several replicas on one Redis (any replica serves any session), e.g. one ' +
            'process per core.',
        ]
      : []),
    `- Admission control (done, \`MAX_ACTIVE_RUNS\`): runs beyond the cap wait before their first turn (in ` +
      '`runs:due`, where any replica with room takes them) instead of slowing every running session. Measured ' +
      `above with a cap of ${b2.capped.maxActiveRuns}: p99 turn overhead ${ms(b2.capped.overheadMs.p99)} against ` +
      `${ms(b2.svc.overheadMs.p99)} uncapped, at ${fmt(b2.capped.itersPerSec, 0)} iterations/s. It cannot reach ` +
      `20 ms on this machine: the same process also answers the ${fmt(b2.sessions, 0)} create requests and WebSocket upgrades that ` +
      'arrive at once, and a lower cap (or an event-loop-driven one, which was tried) lowers the throughput ' +
      'further: fewer runs per loop turn amortize less. Below saturation the bound holds (B1).',
  ]);
}

function b3Remarks(r: Results): string[] {
  const b3 = r.B3 as B3Result;
  const relay =
    'At a paced stream every event goes through an XADD round trip (src/engine/engine.ts `StreamRelay`, at once ' +
    "unless a write is in flight), the pub/sub notice, the hub's XRANGE and the fan-out; resumable-stream " +
    'publishes each chunk at once and keeps no log (a reader that comes back after the producer is gone gets ' +
    'nothing).';
  const fix =
    'carry the event in the pub/sub notice itself so the hub fans it out without the XRANGE (the log stays the ' +
    'source for replay and gaps), which removes one round trip from every delivery.';
  if (b3.verdict !== 'MISS') {
    if (b3.svc.paced.p50 <= b3.peer.paced.p50) return [];
    return [
      '',
      `Note: the median latency is higher than the peer's (${ms(b3.svc.paced.p50)} against ` +
        `${ms(b3.peer.paced.p50)}) though the p99 is lower. ${relay} What would lower it: ${fix}`,
    ];
  }
  const lines: string[] = [];
  const p = r.profiles['B3'];
  if (b3.ratio < 2) {
    lines.push(
      `- Events/s: ${x(b3.ratio)} of resumable-stream's. Each delta is XADDed, read back (XRANGE) and sent to each ` +
        'client as its own frame, one write syscall per frame.',
    );
  }
  if (b3.svc.paced.p99 > b3.peer.paced.p99 || b3.svc.paced.p50 > b3.peer.paced.p50) {
    lines.push(`- Latency: p50 ${ms(b3.svc.paced.p50)} against ${ms(b3.peer.paced.p50)}. ${relay}`);
  }
  if (p && !isErr(p)) {
    lines.push(
      `- The profile of the service side: socket write syscalls take ${pct(writeShare(p))} of the busy time; ` +
        'each event is written to each client with a syscall of its own (ws corks and uncorks around every frame).',
    );
  }
  lines.push(`- What would fix it: ${fix}`);
  return why(lines);
}

function b6Remarks(r: Results): string[] {
  const b6 = r.B6 as B6Result;
  if (b6.verdict !== 'MISS') return [];
  const perConn = (b6.afterGc.connections.heapUsed - b6.afterGc.closed.heapUsed) / b6.connections / 1024;
  return why([
    `- ${MB(b6.rssModules)} of the fresh service's ${MB(b6.rssFresh)} is Node.js with the service's modules loaded ` +
      `(${MB(b6.rssNodeAlone)} the runtime alone); the service runs compiled JavaScript, as in production.`,
    `- Idle sessions retain nothing in the process (they live in Redis): after a forced GC with the connections ` +
      `closed the heap holds ${MB(b6.afterGc.closed.heapUsed)} and RSS falls to ${MB(b6.afterGc.closed.rss)}. The rise ` +
      'while creating them is garbage V8 had not collected yet (it grows the heap before collecting).',
    `- Each idle WebSocket connection retains ${fmt(perConn, 1)} kB of heap (the socket and its ws state: ` +
      'net.Socket, its TCP handle and its cleared timeout, the receiver and sender; one WsConn, its sink and the hub ' +
      'subscription and channel).',
    '- Done: compiled JavaScript in production (no TypeScript loader), one ping timer for all sockets, no ' +
      'upgrade request or response kept per connection, a connection as one object whose methods are on its ' +
      'prototype (no closures, logger or context objects per connection: 6.7 kB → 3.9 kB each), the MCP and ' +
      "OpenTelemetry SDKs loaded only when configured, helmet's headers built once, V8's young generation at Node " +
      "20's size (`--max-semi-space-size=16`: Node 24's default of 64 MB semi-spaces held 70-100 MB more garbage " +
      'here) and its old generation let grow 30 % past what survived the last full collection ' +
      "(`--heap-growing-percent=30`, in `npm start` and the image: V8's own factor is up to 4× with a heap limit " +
      "of 2 GB or more, as on this 24 GB host), and glibc's allocator held to two arenas (`MALLOC_ARENA_MAX=2`: " +
      'per-thread arenas kept 10-25 MB of freed memory).',
    '- What would cut more: fewer objects promoted per request while sessions are created (their garbage, not ' +
      'what they retain, is most of the rise), or a smaller young generation (`--max-semi-space-size=8`: about ' +
      '15 MB less, at a cost in scavenges not measured).',
  ]);
}

function genericRemarks(verdictOf: string, what: string): string[] {
  return verdictOf === 'MISS' ? why([`- ${what}`]) : [];
}

function profileSection(p: ProfileSummary | Error | undefined): string[] {
  if (!p) return [];
  if (isErr(p)) return ['', `CPU profile: could not be taken (${p.message}).`];
  const lines = [
    '',
    "CPU profile of the service for this scenario: its service side run again on a fresh service under V8's CPU " +
      'profiler (the one `node --cpu-prof` uses, 1 ms sampling), started and stopped over the inspector around the ' +
      `workload so start-up is left out; ${fmt(p.busyMs / 1000, 1)} s busy of ${fmt(p.totalMs / 1000, 1)} s ` +
      `(\`${p.file}\`).`,
    '',
    'Self time by package:',
    '',
    '| package | self ms | share of busy |',
    '|---|---:|---:|',
    ...p.packages.slice(0, 8).map((r) => `| ${r.name} | ${fmt(r.selfMs, 0)} | ${fmt(r.share * 100, 1)} % |`),
    '',
    'Top functions by self time:',
    '',
    '| function | where | self ms | share of busy |',
    '|---|---|---:|---:|',
    ...p.functions.map(
      (r) =>
        `| \`${r.name}\` | ${r.where ? `\`${r.where}\`` : ''} | ${fmt(r.selfMs, 0)} | ${fmt(r.share * 100, 1)} % |`,
    ),
  ];
  return lines;
}

/** The lowest and highest 1-minute load average seen at the scenarios' starts. */
function loadRange(r: Results): string {
  const v = Object.values(r.load);
  if (!v.length) return 'n/a';
  return `${fmt(Math.min(...v), 2)} to ${fmt(Math.max(...v), 2)} at the scenarios' starts`;
}

function loadLine(r: Results, name: string): string[] {
  const load = r.load[name];
  return load === undefined
    ? []
    : [
        `_Load average (1 min) of the machine when the scenario started: ${fmt(load, 2)} on ${r.machine.cores} cores._`,
        '',
      ];
}

export function report(r: Results): string {
  const m = r.machine;
  const L: string[] = [];
  const summary: string[] = [];
  L.push(
    '# Benchmarks',
    '',
    `Written by \`npm run bench${r.mode === 'quick' ? ' -- --quick' : ''}\` (bench/run.ts) on ${m.date}, ` +
      `${r.mode} run, ${fmt(r.seconds, 0)} s. Every figure below comes from that run; rerun the command to replace them.`,
    '',
    ...(r.overlay?.scenarios.length
      ? [
          `Except ${r.overlay.scenarios.join(', ')}: from a ${r.overlay.mode} run on ${r.overlay.date} ` +
            '(`--render … --overlay …`), at the sizes of the targets.',
          '',
        ]
      : []),
    ...(r.mode === 'quick'
      ? [
          '**Quick run**: reduced sizes (B1 6 runs a side, B2 200 sessions in 1 round, B3 fewer deltas in 1 round, ' +
            'B4 1 session per length, B5 50,000 events, B6 1,000 sessions and 500 connections, B9 N of 50 and 100); the verdicts apply to ' +
            'those sizes. ' +
            '`npm run bench` runs the sizes of the targets.',
          '',
        ]
      : []),
    '## Machine',
    '',
    '| | |',
    '|---|---|',
    `| CPU | ${m.cpu} |`,
    `| cores | ${m.cores} |`,
    `| RAM | ${fmt(m.ramGb, 1)} GB |`,
    `| OS | ${m.os} |`,
    `| Node.js | ${m.node} |`,
    `| Redis | ${m.redis} (private redis-server, appendonly yes, appendfsync everysec, no RDB) |`,
    `| open files limit | ${m.openFiles} |`,
    `| load average (1 min) | ${loadRange(r)} — the machine is shared (other engineers' builds and tests run on the same ${m.cores} cores), so absolute times carry their noise; ratios are measured within one run, both sides alternating |`,
    '',
    '## Setup',
    '',
    '- Every process runs on this machine on 127.0.0.1: a private `redis-server` on a free port (never 6379), the fake ' +
      'Messages API in its own process (`node test/fake/main.js`), and the service in its own process ' +
      '(`node src/server.js`, `PORT=0`), a fresh one for each scenario. No scenario runs the service in the bench ' +
      'process. The bench first compiles the sources to JavaScript (`bench/tsconfig.build.json`, into ' +
      '`.data/bench-dist`): the service, the fake and the peers run as `npm start` and the image run the service, ' +
      'without a TypeScript loader.',
    '- The in-process peer is `client.beta.messages.toolRunner` (SDK 1.14, `stream: true`, `thread: false`, the ' +
      "project's `tools/calculate_sum.ts`) in its own process (bench/inproc.ts), so its memory is measured the same way " +
      "as the service's. The B3 peer is the npm package `resumable-stream` (ioredis, same Redis) in its own process " +
      '(bench/peer-resumable.ts), serving the same WebSocket frames.',
    `- Clients (REST calls, WebSocket subscribers) run in the bench process; sessions are followed over ` +
      `${r.follow === 'ws' ? 'the WebSocket route `GET /v1/sessions/:id/stream`' : 'POLLING of `GET /v1/sessions/:id` (the WebSocket route was missing)'}.`,
    `- Tool loops (B1, B2): the fake's \`tool-loop\` script streams each turn as 8 SSE events ` +
      `${fmt(r.turnEventDelayMs, 1)} ms apart (${fmt(r.turnEventDelayMs * 8, 0)} ms of upstream streaming per turn).`,
    '- An iteration, as the upstream sees it, is the gap between two requests of one conversation at the fake ' +
      '(its `at` stamps): the streamed reply, plus everything the client does before the next request. "Added" ' +
      "is that gap minus the in-process runner's median gap at the same pacing.",
    '- Peak RSS: `/proc/<pid>/status` VmHWM reset before the measure (`clear_refs`) and VmRSS sampled every 50 ms.',
    '',
  );

  // ---- B1
  L.push('## B1 per-iteration overhead', '', ...loadLine(r, 'B1'));
  const b1 = r.B1;
  if (!b1) L.push('Not run.', '');
  else if (isErr(b1)) {
    L.push(`FAILED: ${b1.message}`, '');
    summary.push('| B1 per-iteration overhead | failed | p50 ≤ 2 ms added | | FAILED |');
  } else {
    L.push(
      `${b1.runs} runs of a ${b1.iterations}-iteration calculate_sum loop on each side (after ${b1.warm} warm-up run(s) each), ` +
        'alternating. The service side: `POST /v1/sessions` (`tools: ["calculate_sum"]`, `input`), then the ' +
        "session's WebSocket until `session.status` idle.",
      '',
      '| | service | in-process SDK runner |',
      '|---|---:|---:|',
      `| wall time per run, p50 | ${ms(b1.svcWallMs.p50)} | ${ms(b1.sdkWallMs.p50)} |`,
      `| wall time per run, p99 | ${ms(b1.svcWallMs.p99)} | ${ms(b1.sdkWallMs.p99)} |`,
      `| iteration (request gap at the fake), p50 | ${ms(b1.svcIterMs.p50)} | ${ms(b1.sdkIterMs.p50)} |`,
      `| iteration (request gap at the fake), p99 | ${ms(b1.svcIterMs.p99)} | ${ms(b1.sdkIterMs.p99)} |`,
      `| samples (gaps) | ${b1.samples.svc} | ${b1.samples.sdk} |`,
      `| split, p50: turn yielded by the runner → its final message (service: and its stream events written) | ${ms(b1.split.svc.upstream)} | ${ms(b1.split.sdk.upstream)} |`,
      `| split, p50: final message → next turn yielded (service: reply commit, tool, results commit) | ${ms(b1.split.svc.between)} | ${ms(b1.split.sdk.between)} |`,
      '',
      `- **Added per iteration: p50 ${ms(b1.addedMs.p50)}, p99 ${ms(b1.addedMs.p99)}** ` +
        `(mean ${ms(b1.addedMs.mean)}; from wall times, ${ms(b1.addedMs.fromWall)} per iteration including the ` +
        'create request and the WebSocket setup).',
      `- Wall time ratio service / in-process: **${x(b1.wallRatio)}**.`,
      `- Target: p50 ≤ 2 ms added per iteration. **${b1.verdict}**.`,
      ...b1Remarks(r),
      ...profileSection(r.profiles['B1']),
      '',
      ...b1EagerSection(b1),
    );
    summary.push(
      `| B1 per-iteration overhead | +${ms(b1.addedMs.p50)} p50, +${ms(b1.addedMs.p99)} p99 per iteration; wall ${x(b1.wallRatio)} | p50 ≤ 2 ms added | ${x(b1.addedMs.p50 / 2)} of the bound | ${b1.verdict} |`,
    );
  }

  // ---- B2
  L.push('## B2 concurrency', '', ...loadLine(r, 'B2'));
  const b2 = r.B2;
  if (!b2) L.push('Not run.', '');
  else if (isErr(b2)) {
    L.push(`FAILED: ${b2.message}`, '');
    summary.push('| B2 concurrency | failed | ≥ 0.8× in-process, p99 overhead ≤ 20 ms | | FAILED |');
  } else {
    L.push(
      `${b2.sessions} sessions started at once, ${b2.iterations} iterations each (${fmt(r.turnEventDelayMs * 8, 0)} ms of ` +
        'upstream streaming per turn); each created over REST and followed over its own WebSocket until idle. ' +
        `The peer: ${b2.sessions} concurrent in-process runners. ${b2.rounds} round(s), each measuring the service then ` +
        "the peer (fresh processes), so both sides of a ratio share the machine's state; figures are medians over " +
        `the rounds, gaps pooled. Overhead per iteration = request gap − ${ms(b2.baselineIterMs)} (the unloaded ` +
        'in-process median gap).',
      '',
      '| | service | in-process SDK runners |',
      '|---|---:|---:|',
      `| time to finish all | ${fmt(b2.svc.seconds, 2)} s | ${fmt(b2.sdk.seconds, 2)} s |`,
      `| iterations/s | **${fmt(b2.svc.itersPerSec, 0)}** | ${fmt(b2.sdk.itersPerSec, 0)} |`,
      `| iterations/s per round | ${b2.svc.perRound.map((v) => fmt(v, 0)).join(', ')} | ${b2.sdk.perRound.map((v) => fmt(v, 0)).join(', ')} |`,
      `| iteration gap p50 / p99 | ${ms(b2.svc.iterMs.p50)} / ${ms(b2.svc.iterMs.p99)} | ${ms(b2.sdk.iterMs.p50)} / ${ms(b2.sdk.iterMs.p99)} |`,
      `| turn overhead p50 / p99 | ${ms(b2.svc.overheadMs.p50)} / **${ms(b2.svc.overheadMs.p99)}** | ${ms(b2.sdk.overheadMs.p50)} / ${ms(b2.sdk.overheadMs.p99)} |`,
      `| peak RSS of the process | ${MB(b2.svc.rss.peak)} (from ${MB(b2.svc.rss.start)}) | ${MB(b2.sdk.rss.peak)} (from ${MB(b2.sdk.rss.start)}) |`,
      `| Redis used_memory after / peak | ${MB(b2.svc.redisUsedBytes)} / ${MB(b2.svc.redisPeakBytes)} | — |`,
      `| errors | ${b2.svc.errors} | ${b2.sdk.errors} |`,
      `| create requests retried: 503/429 after Retry-After, connection errors | ${b2.svc.retries.unavailable}, ${b2.svc.retries.network} | — |`,
      `| CPU per iteration: the runner's process | ${ms(b2.cpuPerIter.svc['service']!)} (service) | ${ms(b2.cpuPerIter.sdk['runner']!)} (in-process runner) |`,
      `| CPU per iteration: Redis | ${ms(b2.cpuPerIter.svc['redis']!)} | ${ms(b2.cpuPerIter.sdk['redis']!)} |`,
      `| CPU per iteration: the fake upstream | ${ms(b2.cpuPerIter.svc['fake']!)} | ${ms(b2.cpuPerIter.sdk['fake']!)} |`,
      `| CPU per iteration: the bench's clients (REST, WebSocket) | ${ms(b2.cpuPerIter.svc['bench']!)} | ${ms(b2.cpuPerIter.sdk['bench']!)} |`,
      '',
      `With \`MAX_ACTIVE_RUNS=${b2.capped.maxActiveRuns}\` (one more service run, same load; runs beyond the cap wait ` +
        'for a slot before their first turn):',
      '',
      '| | service, capped |',
      '|---|---:|',
      `| time to finish all | ${fmt(b2.capped.seconds, 2)} s |`,
      `| iterations/s | ${fmt(b2.capped.itersPerSec, 0)} (${x(b2.capped.itersPerSec / b2.sdk.itersPerSec)} of the in-process median) |`,
      `| turn overhead p50 / p99 | ${ms(b2.capped.overheadMs.p50)} / **${ms(b2.capped.overheadMs.p99)}** |`,
      `| errors | ${b2.capped.errors} |`,
      '',
      ...b2BareLines(b2),
      `- Throughput ratio service / in-process: **${x(b2.throughputRatio)}** (per round: ${b2.ratios.map((v) => x(v)).join(', ')}).`,
      `- Target: ≥ 0.8× the in-process throughput and p99 turn overhead ≤ 20 ms. **${b2.verdict}**.`,
      ...b2Remarks(r),
      ...profileSection(r.profiles['B2']),
      '',
    );
    summary.push(
      `| B2 concurrency (${b2.sessions} × ${b2.iterations}) | ${fmt(b2.svc.itersPerSec, 0)} vs ${fmt(b2.sdk.itersPerSec, 0)} iterations/s${b2.bare ? ` (${x(b2.bare.ratio)} without the followers)` : ''}; p99 overhead ${ms(b2.svc.overheadMs.p99)}; RSS ${MB(b2.svc.rss.peak)} vs ${MB(b2.sdk.rss.peak)}; Redis ${MB(b2.svc.redisUsedBytes)} | ≥ 0.8×, p99 ≤ 20 ms | ${x(b2.throughputRatio)} | ${b2.verdict} |`,
    );
  }

  // ---- B3
  L.push('## B3 fan-out', '', ...loadLine(r, 'B3'));
  const b3 = r.B3;
  if (!b3) L.push('Not run.', '');
  else if (isErr(b3)) {
    L.push(`FAILED: ${b3.message}`, '');
    summary.push('| B3 fan-out | failed | ≥ 2× resumable-stream events/s, p99 ≤ its p99 | | FAILED |');
  } else {
    L.push(
      `One streaming turn, ${b3.subscribers} WebSocket subscribers joined before it starts; ${b3.rounds} round(s), each ` +
        'a latency run and a burst run on each side, alternating (figures: latency samples pooled, events/s medians). ' +
        'Latency run: ' +
        `${b3.pacedDeltas} text deltas, the fake writing one SSE event every ${fmt(b3.paceMs, 0)} ms; latency is each ` +
        "delta's receipt time at a subscriber minus the time it crossed a tap in front of the fake (bench/tap.ts, its " +
        `own process, same clock). Burst run: ${b3.deltas} deltas written at once; deliveries (deltas × subscribers) ` +
        'per second from the first delta crossing the tap to the last receipt.',
      '',
      '| | service | resumable-stream |',
      '|---|---:|---:|',
      `| burst: deltas delivered per second | **${fmt(b3.svc.burst.eventsPerSec, 0)}** | ${fmt(b3.peer.burst.eventsPerSec, 0)} |`,
      `| burst: deltas delivered per second, per round | ${b3.svc.perRound.map((v) => fmt(v, 0)).join(', ')} | ${b3.peer.perRound.map((v) => fmt(v, 0)).join(', ')} |`,
      `| burst: time to deliver all | ${fmt(b3.svc.burst.seconds, 2)} s | ${fmt(b3.peer.burst.seconds, 2)} s |`,
      `| paced: latency p50 | ${ms(b3.svc.paced.p50)} | ${ms(b3.peer.paced.p50)} |`,
      `| paced: latency p99 | **${ms(b3.svc.paced.p99)}** | ${ms(b3.peer.paced.p99)} |`,
      `| paced: latency max | ${ms(b3.svc.paced.max)} | ${ms(b3.peer.paced.max)} |`,
      `| deliveries missing (paced + burst) | ${b3.svc.paced.missing + b3.svc.burst.missing} | ${b3.peer.paced.missing + b3.peer.burst.missing} |`,
      `| peak RSS of the process | ${MB(b3.svc.peakRssBytes)} | ${MB(b3.peer.peakRssBytes)} |`,
      '',
      `- Method floor (one SDK reader through the same tap, no relay): p50 ${ms(b3.floor.p50)}, p99 ${ms(b3.floor.p99)}.`,
      `- Events/s ratio service / resumable-stream: **${x(b3.ratio)}** (per round: ${b3.ratios.map((v) => x(v)).join(', ')}).`,
      `- Target: ≥ 2× resumable-stream's events/s at equal or better p99. **${b3.verdict}**.`,
      ...b3Remarks(r),
      ...profileSection(r.profiles['B3']),
      '',
    );
    summary.push(
      `| B3 fan-out (1 × ${b3.subscribers}) | ${fmt(b3.svc.burst.eventsPerSec, 0)} vs ${fmt(b3.peer.burst.eventsPerSec, 0)} deltas/s; p50 ${ms(b3.svc.paced.p50)} vs ${ms(b3.peer.paced.p50)}, p99 ${ms(b3.svc.paced.p99)} vs ${ms(b3.peer.paced.p99)} | ≥ 2×, p99 ≤ peer's | ${x(b3.ratio)} | ${b3.verdict} |`,
    );
  }

  // ---- B4
  L.push('## B4 persistence cost', '', ...loadLine(r, 'B4'));
  const b4 = r.B4;
  if (!b4) L.push('Not run.', '');
  else if (isErr(b4)) {
    L.push(`FAILED: ${b4.message}`, '');
    summary.push('| B4 persistence cost | failed | ratio ≤ 1.5 | | FAILED |');
  } else {
    L.push(
      `A ${b4.iterations}-iteration run (5 calculate_sum calls, then a text) of a session created with N earlier ` +
        'messages; Redis counters read before the message that starts the run and after the run ended.',
      '',
      '| earlier messages | sessions | bytes into Redis per iteration (`total_net_input_bytes`) | AOF bytes per iteration | Redis commands per iteration (`commandstats`, with those inside Lua) | bytes read by the service per run |',
      '|---:|---:|---:|---:|---:|---:|',
      ...b4.rows.map(
        (row) =>
          `| ${row.history} | ${row.sessions} | ${fmt(row.inputBytesPerIter, 0)} | ${fmt(row.aofBytesPerIter, 0)} | ${fmt(row.commandsPerIter, 1)} | ${fmt(row.outputBytesPerRun, 0)} |`,
      ),
      '',
      `- Ratio 1,000 vs 10 earlier messages: **${x(b4.ratio)}** (bytes in), ${x(b4.aofRatio)} (AOF).`,
      `- Target: ≤ 1.5. **${b4.verdict}**.`,
      ...genericRemarks(
        b4.verdict,
        "Bytes per iteration grow with the history: see the profile for the writes that carry it (the engine's " +
          'commits should append only the new reply and results).',
      ),
      ...profileSection(r.profiles['B4']),
      '',
    );
    summary.push(
      `| B4 persistence cost | ${b4.rows.map((row) => `${fmt(row.inputBytesPerIter, 0)} B`).join(' / ')} per iteration after ${b4.rows.map((row) => row.history).join(' / ')} messages | ratio ≤ 1.5 | ${x(b4.ratio)} | ${b4.verdict} |`,
    );
  }

  // ---- B5
  L.push('## B5 replay', '', ...loadLine(r, 'B5'));
  const b5 = r.B5;
  if (!b5) L.push('Not run.', '');
  else if (isErr(b5)) {
    L.push(`FAILED: ${b5.message}`, '');
    summary.push('| B5 replay | failed | RSS growth ≤ 100 MB | | FAILED |');
  } else {
    L.push(
      `${fmt(b5.events, 0)} \`stream.event\` entries (${fmt(b5.eventBytes, 0)} bytes of data each) written into one ` +
        `session's log with pipelined XADDs (${fmt(b5.writeSeconds, 2)} s), then a client reconnects over the WebSocket ` +
        'with the cursor of the event before them and reads until it has them all.',
      '',
      '| | |',
      '|---|---:|',
      `| events received | ${fmt(b5.received, 0)} |`,
      `| replay time | **${fmt(b5.seconds, 2)} s** (${fmt(b5.eventsPerSec, 0)} events/s) |`,
      `| service RSS before | ${MB(b5.rssBefore)} |`,
      `| service peak RSS during the replay | ${MB(b5.rssPeak)} |`,
      `| growth | **${MB(b5.growthBytes)}** |`,
      '',
      `- Target: RSS growth ≤ 100 MB. **${b5.verdict}**.`,
      ...genericRemarks(
        b5.verdict,
        'The replay grows the heap: events must be read page by page (src/events/hub.ts PAGE_SIZE) and sent only ' +
          "as fast as the socket drains (the sink's `ready()`), never buffered whole.",
      ),
      ...profileSection(r.profiles['B5']),
      '',
    );
    summary.push(
      `| B5 replay (${fmt(b5.events, 0)} events) | ${fmt(b5.seconds, 2)} s; RSS +${MB(b5.growthBytes)} | growth ≤ 100 MB | ${x(mb(b5.growthBytes) / 100)} of the bound | ${b5.verdict} |`,
    );
  }

  // ---- B6
  L.push('## B6 idle footprint', '', ...loadLine(r, 'B6'));
  const b6 = r.B6;
  if (!b6) L.push('Not run.', '');
  else if (isErr(b6)) {
    L.push(`FAILED: ${b6.message}`, '');
    summary.push('| B6 idle footprint | failed | ≤ 200 MB | | FAILED |');
  } else {
    L.push(
      `${fmt(b6.sessions, 0)} sessions created with \`start: false\` (${fmt(b6.createSeconds, 1)} s), then ` +
        `${fmt(b6.connections, 0)} WebSocket connections opened on ${fmt(b6.connections, 0)} of them ` +
        `(${fmt(b6.connectSeconds, 1)} s), each idle after its replay. RSS read once the service has had no request for 3 s, then settled (an idle replica: it gives back what a burst grew once quiet). Open files limit: ${b6.openFilesLimit}.`,
      '',
      '| | service RSS |',
      '|---|---:|',
      `| \`node\` running an idle one-liner (the runtime alone) | ${MB(b6.rssNodeAlone)} |`,
      `| \`node\` with the service's modules imported, nothing started | ${MB(b6.rssModules)} |`,
      `| fresh service | ${MB(b6.rssFresh)} |`,
      `| with ${fmt(b6.sessions, 0)} idle sessions | **${MB(b6.rssSessions)}** |`,
      `| and ${fmt(b6.connections, 0)} idle WebSocket connections | **${MB(b6.rssConnections)}** |`,
      `| Redis used_memory with the sessions | ${MB(b6.redisUsedSessions)} |`,
      '',
      'Then, to tell retained memory from garbage not yet collected, the V8 inspector is opened (SIGUSR1) and a full GC forced:',
      '',
      '| after a forced full GC | RSS | heap used |',
      '|---|---:|---:|',
      `| sessions and connections | ${MB(b6.afterGc.connections.rss)} | ${MB(b6.afterGc.connections.heapUsed)} |`,
      `| connections closed | ${MB(b6.afterGc.closed.rss)} | ${MB(b6.afterGc.closed.heapUsed)} |`,
      '',
      `Per connection: ${fmt((b6.afterGc.connections.heapUsed - b6.afterGc.closed.heapUsed) / b6.connections / 1024, 1)} kB of retained heap, ` +
        `${fmt((b6.rssConnections - b6.rssSessions) / b6.connections / 1024, 1)} kB of RSS.`,
      '',
      `- Target: ≤ 200 MB. **${b6.verdict}**.`,
      ...b6Remarks(r),
      ...profileSection(r.profiles['B6']),
      '',
    );
    summary.push(
      `| B6 idle footprint | ${MB(b6.rssSessions)} with ${fmt(b6.sessions, 0)} sessions; ${MB(b6.rssConnections)} with ${fmt(b6.connections, 0)} connections | ≤ 200 MB | ${x(mb(Math.max(b6.rssSessions, b6.rssConnections)) / 200)} of the bound | ${b6.verdict} |`,
    );
  }

  // ---- B7
  L.push('## B7 upstream bytes', '', ...loadLine(r, 'B7'));
  const b7 = r.B7;
  if (!b7) L.push('Not run.', '');
  else if (isErr(b7)) {
    L.push(`FAILED: ${b7.message}`, '');
    summary.push('| B7 upstream bytes | failed | ≤ 1.5× | | FAILED |');
  } else {
    const section = b7Report(b7);
    L.push(...section.lines, ...profileSection(r.profiles['B7']));
    summary.push(section.summary);
  }

  // ---- B8
  L.push('## B8 metrics cost', '', ...loadLine(r, 'B8'));
  const b8 = r.B8;
  if (!b8) L.push('Not run.', '');
  else if (isErr(b8)) {
    L.push(`FAILED: ${b8.message}`, '');
    summary.push('| B8 metrics cost | failed | ≤ 2 % of CPU per iteration | | FAILED |');
  } else {
    const us = (n: number) => `${fmt(n, 2)} µs`;
    L.push(
      'What the Prometheus metrics (prom-client, src/observability/) cost on the hot path. First the calls one streamed ' +
        'tool-loop iteration makes (turn start, reply, tool, commit wrapper, turn end, and ' +
        'four fanned-out relay batches), timed in the bench process against the same loop without them ' +
        `(${fmt(b8.microIterations, 0)} iterations, best of 3). Then the service under load ` +
        `(${fmt(b8.sessions, 0)} sessions × 5 iterations at once, as B2; ${b8.rounds} round(s), fresh processes), ` +
        `unscraped and with a scraper reading \`/metrics\` every ${fmt(b8.scrapeMs, 0)} ms (the compose profile's ` +
        'Prometheus reads it every 5 s). Traces are off (the default).',
      '',
      '| | |',
      '|---|---:|',
      `| metrics calls per iteration (CPU) | **${us(b8.instrumentationUsPerIter)}** |`,
      `| service CPU per iteration, unscraped | ${ms(b8.cpuPerIter.unscraped)} |`,
      `| service CPU per iteration, scraped every ${fmt(b8.scrapeMs, 0)} ms (${fmt(b8.scrapes, 0)} scrapes) | ${ms(b8.cpuPerIter.scraped)} |`,
      `| per round: service CPU / iterations, unscraped; scraped | ${b8.perRound.map((p) => `${fmt(p.unscraped[0], 0)} ms / ${fmt(p.unscraped[1], 0)}; ${fmt(p.scraped[0], 0)} ms / ${fmt(p.scraped[1], 0)}`).join(' · ')} |`,
      `| one scrape after the load: service CPU, answer size | ${ms(b8.perScrape.cpuMs)}, ${fmt(b8.perScrape.bytes / 1024, 1)} kB |`,
      '',
      `- The metrics calls are **${fmt(b8.share * 100, 2)} %** of the service's CPU per iteration. Target: ≤ 2 %. **${b8.verdict}**.`,
      `- A scrape costs the same whatever the load (its size depends on the label sets, which are bounded): at ` +
        `Prometheus's 5 s interval, ${fmt((b8.perScrape.cpuMs / 5000) * 100, 3)} % of one core. The scraped and ` +
        'unscraped CPU per iteration differ by the scrapes plus the noise of a shared machine.',
      ...profileSection(r.profiles['B8']),
      '',
    );
    summary.push(
      `| B8 metrics cost | ${us(b8.instrumentationUsPerIter)} per iteration; ${ms(b8.cpuPerIter.unscraped)} vs ${ms(b8.cpuPerIter.scraped)} CPU per iteration unscraped vs scraped | ≤ 2 % of CPU per iteration | ${fmt(b8.share * 100, 2)} % | ${b8.verdict} |`,
    );
  }

  // ---- B9
  L.push('## B9 capacity at realistic pacing', '', ...loadLine(r, 'B9'));
  const b9 = r.B9;
  if (!b9) L.push('Not run.', '');
  else if (isErr(b9)) {
    L.push(`FAILED: ${b9.message}`, '');
    summary.push('| B9 capacity at realistic pacing | failed | ≥ 0.8× | | FAILED |');
  } else {
    const section = b9Report(b9);
    L.push(...section.lines);
    summary.push(section.summary);
  }

  const head = L.indexOf('## Setup');
  L.splice(
    head,
    0,
    '## Summary',
    '',
    '| scenario | figures (service vs peer) | target | ratio | result |',
    '|---|---|---|---:|---|',
    ...summary,
    '',
  );
  return `${L.join('\n')}\n`;
}
