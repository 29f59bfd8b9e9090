/** Summaries of V8 CPU profiles (`node --cpu-prof`): where the self time went, by function and by package. */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileRow {
  name: string;
  where: string;
  selfMs: number;
  share: number;
}

export interface ProfileSummary {
  file: string;
  totalMs: number;
  /** Time not idle: everything but `(idle)`. */
  busyMs: number;
  functions: ProfileRow[];
  packages: ProfileRow[];
}

/** Where a script URL belongs: a package of node_modules, the project's own directory, or node's internals. */
export function packageOf(url: string): string {
  if (!url) return '(native / V8)';
  if (url.startsWith('node:')) return 'node: internals';
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  const m = /\/(src|routes|tools|bench|test)\/(.*)$/.exec(url);
  if (m) return `${m[1]}/${m[2]!.split('/')[0]}`;
  return url.replace(/^file:\/\//, '');
}

function shortWhere(url: string, line: number): string {
  if (!url) return '';
  const nm = url.lastIndexOf('/node_modules/');
  const rel =
    nm >= 0 ? url.slice(nm + '/node_modules/'.length) : url.replace(/^.*\/(src|routes|tools)\//, '$1/');
  return `${rel.replace(/^file:\/\//, '')}:${line + 1}`;
}

export function summarize(prof: CpuProfile, file: string, top = 15): ProfileSummary {
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  // timeDeltas[i] is the time before sample i; attribute the gap after sample i to it (the next delta).
  for (let i = 0; i < prof.samples.length; i++) {
    const dt = (prof.timeDeltas[i + 1] ?? 0) / 1000;
    self.set(prof.samples[i]!, (self.get(prof.samples[i]!) ?? 0) + dt);
  }
  const fns = new Map<string, ProfileRow>();
  const pkgs = new Map<string, ProfileRow>();
  let total = 0;
  let idle = 0;
  for (const [id, ms] of self) {
    const node = byId.get(id);
    if (!node) continue;
    total += ms;
    const { functionName, url, lineNumber } = node.callFrame;
    if (functionName === '(idle)') {
      idle += ms;
      continue;
    }
    const name = functionName || '(anonymous)';
    const where = shortWhere(url, lineNumber);
    const key = `${name}@${where}`;
    const row = fns.get(key) ?? { name, where, selfMs: 0, share: 0 };
    row.selfMs += ms;
    fns.set(key, row);
    const pkg = ['(garbage collector)', '(program)'].includes(name) ? name : packageOf(url);
    const prow = pkgs.get(pkg) ?? { name: pkg, where: '', selfMs: 0, share: 0 };
    prow.selfMs += ms;
    pkgs.set(pkg, prow);
  }
  const busy = total - idle;
  const rank = (rows: Iterable<ProfileRow>) =>
    [...rows]
      .sort((a, b) => b.selfMs - a.selfMs)
      .slice(0, top)
      .map((r) => ({ ...r, share: busy > 0 ? r.selfMs / busy : 0 }));
  return { file, totalMs: total, busyMs: busy, functions: rank(fns.values()), packages: rank(pkgs.values()) };
}
