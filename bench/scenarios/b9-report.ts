/** The B9 section of docs/BENCHMARKS.md (bench/report.ts calls it). */
import { fmt, mb } from '../lib/util.js';
import type { B9Result, B9Step } from './b9.js';

const ms = (n: number) => `${fmt(n, 1)} ms`;
const MB = (bytes: number) => `${fmt(mb(bytes), 1)} MB`;

/** CPU of the runner's process (the service, or the in-process runner: the first meter) per 1,000 text deltas. */
function perDeltas(s: B9Step): string {
  const [, ms] = Object.entries(s.cpu)[0] ?? [];
  return ms !== undefined && s.lateness.count > 0 ? `${fmt((ms / s.lateness.count) * 1000, 0)} ms` : 'n/a';
}

function row(side: string, s: B9Step): string {
  const cpu = Object.entries(s.cpu)
    .map(([k, v]) => `${k} ${fmt(v / 1000 / s.seconds, 2)}`)
    .join(', ');
  return (
    `| ${side} | ${fmt(s.n, 0)} | ${ms(s.lateness.p50)} / **${ms(s.lateness.p99)}** / ${ms(s.lateness.max)} | ` +
    `**${ms(s.eventLoopP99Ms)}**${s.clientLoopP99Ms === undefined ? '' : ` (clients ${ms(s.clientLoopP99Ms)})`} | ` +
    `${MB(s.rssPeak)} | ${fmt(s.seconds, 1)} s | ${fmt(s.lateness.count, 0)} | ${s.errors} | ${cpu} | ` +
    `${perDeltas(s)} | ` +
    `${s.ok ? 'held' : 'missed'} |`
  );
}

export function b9Report(b9: B9Result): { lines: string[]; summary: string } {
  const at = (list: B9Step[], n: number) => list.find((s) => s.n === n && s.ok);
  const svcAt = at(b9.svc, b9.svcN);
  const sdkAt = at(b9.sdk, b9.sdkN);
  const top = (list: B9Step[], n: number) =>
    n === b9.steps.at(-1) && list.at(-1)?.ok ? `≥ ${fmt(n, 0)}` : fmt(n, 0);
  const [lo, hi] = b9.deltasPerTurn;
  const ratio = Number.isFinite(b9.ratio) ? `${fmt(b9.ratio, 2)}×` : 'n/a';
  return {
    lines: [
      `N sessions of ${b9.turns} turns each (text, then a calculate_sum call; the last turn text only), every reply ` +
        `streaming one SSE event each ${b9.eventDelayMs} ms (${fmt(1000 / b9.eventDelayMs, 0)} deltas/s) with ` +
        `${lo}–${hi} text deltas, so a turn lasts ${fmt(((lo + 8) * b9.eventDelayMs) / 1000, 1)}–` +
        `${fmt(((hi + 10) * b9.eventDelayMs) / 1000, 1)} s (the fake's \`paced\` script). Service: each session ` +
        'created idle over REST, followed over its own WebSocket, then started by its first message (the follower ' +
        'is attached before the run starts, as on the relaying side below). Peer: N in-process SDK runners at the same pacing ' +
        '(bench/inproc.ts). For context, a third side: the same in-process runners each streaming every event to ' +
        'a WebSocket follower of the bench process, nothing persisted (what an app embedding the SDK does to reach ' +
        `its browsers); and the service as ${b9.replicas} replicas, one process per core. Starts spread over ${fmt(b9.staggerMs / 1000, 1)} s on every side. N steps through ` +
        `${b9.steps.map((n) => fmt(n, 0)).join(', ')}, the sides alternating at each N (fresh processes); a step ` +
        'that misses is run once more, and a side stops at its second miss in a row at one N (both tries are listed).',
      '',
      '- Relay lateness: receipt of each text delta (at the WebSocket follower, or in the in-process runner) minus the ' +
        "time the fake's schedule wrote it (the reply carries its start time). A late fake shows on both sides.",
      "- Event-loop delay p99 of the runner's process: the service's `nodejs_eventloop_lag_p99_seconds` over the step " +
        "(one scrape resets it before, one reads it after); the in-process runner's `monitorEventLoopDelay`. " +
        '"clients": the bench process\'s own, which holds the N WebSocket followers.',
      '- A step holds with lateness p99 ≤ 100 ms, event-loop delay p99 ≤ 50 ms, no error and every delta received.',
      "- CPU: cores used on average over the step, by process; and the CPU time of the runner's process (the " +
        'service, or the in-process runner) per 1,000 text deltas received, which depends less than the cores on ' +
        'what else runs on the machine.',
      '',
      '| side | N | lateness p50 / p99 / max | event-loop delay p99 | peak RSS | time | deltas | errors | CPU (cores) | ' +
        'CPU per 1,000 deltas | |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|',
      ...b9.svc.map((s) => row('service', s)),
      ...b9.sdk.map((s) => row('in-process', s)),
      ...(b9.rel ?? []).map((s) => row('in-process + WebSocket', s)),
      ...(b9.svc2 ?? []).map((s) => row(`service, ${b9.replicas} replicas`, s)),
      '',
      `- Largest N held: service **${top(b9.svc, b9.svcN)}**${svcAt ? ` (RSS ${MB(svcAt.rssPeak)})` : ''}, ` +
        `in-process **${top(b9.sdk, b9.sdkN)}**${sdkAt ? ` (RSS ${MB(sdkAt.rssPeak)})` : ''}: **${ratio}**. ` +
        `Target: ≥ 0.8× of the in-process N. **${b9.verdict}**.`,
      ...(b9.rel?.length
        ? [
            `- In-process runners relaying to a WebSocket follower each (nothing persisted): **${top(b9.rel, b9.relN)}**; ` +
              `the service holds ${Number.isFinite(b9.relRatio) ? `${fmt(b9.relRatio, 2)}×` : 'n/a'} of that.`,
          ]
        : []),
      ...(b9.svc2?.length
        ? [
            `- The service as ${b9.replicas} replicas on the one Redis (one process per core, sessions split between ` +
              `them as a balancer would): **${top(b9.svc2, b9.svc2N)}**` +
              `${b9.sdkN > 0 ? ` (${fmt(b9.svc2N / b9.sdkN, 2)}× of the in-process N)` : ''}; CPU and RSS are the ` +
              "replicas' sums, the event-loop delay the worst replica's. The in-process runners are one process " +
              'here; an app could shard them too.',
          ]
        : []),
      '',
    ],
    summary:
      `| B9 capacity at realistic pacing | N held ${top(b9.svc, b9.svcN)} vs ${top(b9.sdk, b9.sdkN)} ` +
      `(lateness p99 ≤ 100 ms, event-loop p99 ≤ 50 ms)` +
      `${b9.rel?.length ? `; in-process relaying to a WebSocket each ${top(b9.rel, b9.relN)}` : ''}` +
      `; RSS ${svcAt ? MB(svcAt.rssPeak) : 'n/a'} vs ` +
      `${sdkAt ? MB(sdkAt.rssPeak) : 'n/a'} | ≥ 0.8× | ${ratio} | ${b9.verdict} |`,
  };
}
