import { readFileSync } from 'node:fs';
import { newestProfile } from './lib/profile.js';
// inclusive time per function for call paths: find top-level callers of hot natives
const prof = JSON.parse(readFileSync(newestProfile(process.argv[2]!)!, 'utf8'));
const byId = new Map<number, any>(prof.nodes.map((n: any) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const self = new Map<number, number>();
for (let i = 0; i < prof.samples.length; i++) self.set(prof.samples[i], (self.get(prof.samples[i]) ?? 0) + (prof.timeDeltas[i + 1] ?? 0) / 1000);
// inclusive by function key
const incl = new Map<string, number>();
for (const [id, ms] of self) {
  const seen = new Set<string>();
  let cur: number | undefined = id;
  while (cur !== undefined) {
    const n = byId.get(cur); const cf = n.callFrame;
    const key = `${cf.functionName || '(anon)'} ${cf.url.replace(/^.*node_modules\//, '')}:${cf.lineNumber + 1}`;
    if (!seen.has(key)) { incl.set(key, (incl.get(key) ?? 0) + ms); seen.add(key); }
    cur = parent.get(cur);
  }
}
const rows = [...incl].sort((a, b) => b[1] - a[1]).slice(0, Number(process.argv[3] ?? 60));
for (const [k, v] of rows) console.log(v.toFixed(0).padStart(7), k);
