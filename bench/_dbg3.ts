import { summarizeProfile, newestProfile } from './lib/profile.js';
const s = summarizeProfile(newestProfile(process.argv[2]!)!, 25);
console.log('busy', s.busyMs, 'total', s.totalMs);
for (const r of s.packages) console.log(r.name.padEnd(40), r.selfMs.toFixed(0), (r.share*100).toFixed(1));
for (const r of s.functions) console.log(r.name.padEnd(40), r.where.padEnd(70), r.selfMs.toFixed(0), (r.share*100).toFixed(1));
