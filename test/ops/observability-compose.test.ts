import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { findExecutable } from '../../src/redis/embedded.js';
import { text, toolCall } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { families } from '../helpers/prometheus.js';

/**
 * The `observability` Compose profile (deploy/observability/): the compose file validated by Debian's
 * `docker-compose config` (skipped locally without it, required under CI=true), the Prometheus, collector and Grafana
 * configs checked against each other, and every metric the dashboard queries found in a running service's /metrics.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (file: string): string => readFileSync(path.join(root, file), 'utf8');
const PROFILE_SERVICES = ['prometheus', 'grafana', 'otel-collector', 'jaeger'];

interface Panel {
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  targets?: Array<{ expr: string; datasource?: { uid: string } }>;
}
const dashboard = JSON.parse(read('deploy/observability/grafana/dashboards/toolrunner-sessions.json')) as {
  uid: string;
  panels: Panel[];
};

/** PromQL keywords and aggregation modifiers that look like identifiers. */
const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'and',
  'or',
  'unless',
  'offset',
]);

/**
 * The metric names a PromQL expression reads: what is left once label matchers, ranges, strings and grouping clauses
 * are removed, minus function calls (an identifier before `(`) and keywords.
 */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring)\s*\([^)]*\)/g, '');
  const out: string[] = [];
  for (const m of bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const after = bare.slice(m.index + m[0].length);
    if (/^\s*\(/.test(after) || KEYWORDS.has(m[0])) continue;
    out.push(m[0]);
  }
  return out;
}

describe('observability profile: configs', () => {
  const compose = parseYaml(read('docker-compose.yml')) as {
    services: Record<
      string,
      {
        profiles?: string[];
        image?: string;
        volumes?: string[];
        environment?: Record<string, string>;
        ports?: string[];
      }
    >;
  };

  it('adds its services under the observability profile only, with images named by variables', () => {
    for (const name of PROFILE_SERVICES) {
      const s = compose.services[name];
      assert.ok(s, `service ${name}`);
      assert.deepEqual(s.profiles, ['observability'], `${name} is in the profile`);
      assert.match(
        s.image ?? '',
        /^\$\{[A-Z_]+_IMAGE:-[a-z0-9./-]+:[\w.-]+\}$/,
        `${name}'s image is a variable with a public default`,
      );
      for (const v of s.volumes ?? []) {
        const host = v.split(':')[0]!;
        if (host.startsWith('../'))
          assert.ok(existsSync(path.join(root, host)), `${name} mounts ${host}, which exists`);
      }
      for (const p of s.ports ?? []) assert.match(p, /^127\.0\.0\.1:/, `${name} publishes on loopback only`);
    }
    assert.equal(compose.services['api']?.profiles, undefined, 'the api is not in a profile');
    assert.equal(compose.services['redis']?.profiles, undefined, 'redis is not in a profile');
  });

  it('scrapes every api replica, sends the api spans to the collector and the collector to Jaeger', () => {
    const prom = parseYaml(read('deploy/observability/prometheus.yml')) as {
      scrape_configs: Array<{
        metrics_path?: string;
        dns_sd_configs?: Array<{ names: string[]; type: string; port: number }>;
      }>;
    };
    const job = prom.scrape_configs.find((j) => j.dns_sd_configs?.some((d) => d.names.includes('api')));
    assert.ok(job, 'a DNS service-discovery job on the api service (one A record per replica)');
    assert.equal(job.metrics_path, '/metrics');
    assert.deepEqual(
      job.dns_sd_configs!.map((d) => [d.type, d.port]),
      [['A', 3000]],
    );

    const env = compose.services['api']!.environment!;
    assert.equal(env['OTEL_TRACES_EXPORTER'], '${OTEL_TRACES_EXPORTER:-none}', 'traces stay off by default');
    assert.match(env['OTEL_EXPORTER_OTLP_ENDPOINT'] ?? '', /http:\/\/otel-collector:4318\}$/);
    const col = parseYaml(read('deploy/observability/otel-collector.yml')) as {
      receivers: { otlp: { protocols: { http: { endpoint: string } } } };
      exporters: Record<string, { endpoint: string }>;
      service: { pipelines: { traces: { receivers: string[]; exporters: string[] } } };
    };
    assert.match(col.receivers.otlp.protocols.http.endpoint, /:4318$/);
    const traces = col.service.pipelines.traces;
    assert.deepEqual(traces.receivers, ['otlp']);
    assert.deepEqual(
      traces.exporters.map((e) => col.exporters[e]?.endpoint),
      ['jaeger:4317'],
    );
  });

  it('provisions Grafana with the Prometheus data source every panel uses', () => {
    const ds = parseYaml(read('deploy/observability/grafana/provisioning/datasources/datasources.yml')) as {
      datasources: Array<{ uid: string; type: string; url: string }>;
    };
    const prom = ds.datasources.find((d) => d.type === 'prometheus');
    assert.equal(prom?.url, 'http://prometheus:9090');
    const providers = parseYaml(
      read('deploy/observability/grafana/provisioning/dashboards/dashboards.yml'),
    ) as {
      providers: Array<{ options: { path: string } }>;
    };
    const mount = compose.services['grafana']!.volumes!.find((v) => v.includes('grafana/dashboards'))!;
    assert.equal(providers.providers[0]!.options.path, mount.split(':')[1]);
    const graphs = dashboard.panels.filter((p) => p.type !== 'row');
    assert.ok(graphs.length >= 10);
    for (const p of graphs) {
      assert.equal(p.datasource?.uid, prom!.uid, p.title);
      assert.ok(p.targets?.length, `${p.title} has queries`);
    }
    const titles = dashboard.panels.filter((p) => p.type === 'row').map((p) => p.title);
    for (const want of [/latency/i, /throughput/i, /errors/i, /runs/i, /connections/i]) {
      assert.ok(
        titles.some((t) => want.test(t)),
        `a ${want} row; rows: ${titles.join(', ')}`,
      );
    }
  });

  it('reads metric names out of PromQL', () => {
    assert.deepEqual(
      metricNames(
        'histogram_quantile(0.95, sum by (le, tool) (rate(trs_tool_duration_seconds_bucket{tool!="x"}[$__rate_interval])))',
      ),
      ['trs_tool_duration_seconds_bucket'],
    );
    assert.deepEqual(metricNames('sum(rate(a_sum[5m])) / sum(rate(b_count[5m])) and on (x) c'), [
      'a_sum',
      'b_count',
      'c',
    ]);
  });
});

describe('observability profile: the dashboard against a running service', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());

  it('queries only metrics that /metrics exposes', async () => {
    // One tool loop first, so the labelled series exist too (the families exist from the start).
    h.fake.setHandler((_req, i) => (i === 0 ? toolCall('get_weather', { location: 'Oslo' }) : text('Cold.')));
    const created = await h.api.post('/v1/sessions', { input: 'Weather in Oslo?', tools: ['get_weather'] });
    await h.api.waitStatus(created.body.id, ['idle', 'failed']);
    const exposed = families(String((await h.api.get('/metrics')).body));
    const queried = new Set(
      dashboard.panels.flatMap((p) => (p.targets ?? []).flatMap((t) => metricNames(t.expr))),
    );
    assert.ok(queried.size >= 15, `the dashboard reads ${queried.size} metrics`);
    const missing = [...queried].filter((name) => {
      if (exposed.has(name)) return false;
      const base = /^(.*)_(bucket|sum|count)$/.exec(name)?.[1];
      return !(base && exposed.get(base) === 'histogram');
    });
    assert.deepEqual(missing, [], 'every metric the dashboard queries is in /metrics');
  });
});

describe('observability profile: docker-compose config', () => {
  const dockerCompose = findExecutable('docker-compose', ['/usr/bin/docker-compose']);
  const skip =
    dockerCompose === null && process.env['CI'] !== 'true'
      ? 'docker-compose not installed (apt-get install docker-compose; test/deps.sh installs it)'
      : false;
  let envDir = '';
  let emptyEnvFile = '';
  before(async () => {
    envDir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-obs-compose-'));
    emptyEnvFile = path.join(envDir, 'empty.env');
    await writeFile(emptyEnvFile, '');
  });
  after(async () => {
    if (envDir) await rm(envDir, { recursive: true, force: true });
  });

  /** docker-compose with a controlled environment (and an empty env file, so a developer's .env is ignored). */
  function run(args: string[], env: Record<string, string>): Promise<{ code: number; out: string }> {
    assert.ok(dockerCompose, 'docker-compose is required under CI (apt-get install docker-compose)');
    const baseEnv: NodeJS.ProcessEnv = {};
    for (const key of ['PATH', 'HOME', 'LANG', 'LC_ALL'])
      if (process.env[key] !== undefined) baseEnv[key] = process.env[key];
    return new Promise((resolve) => {
      execFile(
        dockerCompose,
        ['--env-file', emptyEnvFile, '-f', path.join(root, 'docker-compose.yml'), ...args],
        { cwd: root, env: { ...baseEnv, ...env }, timeout: 60_000 },
        (err, stdout, stderr) => {
          const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
          resolve({ code, out: `${stdout}${stderr}` });
        },
      );
    });
  }

  it(
    'validates with the profile on, and resolves the images, mounts and trace settings',
    { skip },
    async () => {
      const quiet = await run(['--profile', 'observability', 'config', '-q'], { API_KEYS: 'ci:test-key' });
      assert.equal(quiet.code, 0, quiet.out);
      const resolved = await run(['--profile', 'observability', 'config'], {
        API_KEYS: 'ci:test-key',
        OTEL_TRACES_EXPORTER: 'otlp',
        GRAFANA_IMAGE: 'registry.example/grafana:pinned',
      });
      assert.equal(resolved.code, 0, resolved.out);
      const cfg = parseYaml(resolved.out) as {
        services: Record<
          string,
          {
            image?: string;
            environment?: Record<string, string>;
            volumes?: Array<{ source: string } | string>;
          }
        >;
      };
      for (const name of PROFILE_SERVICES) assert.ok(cfg.services[name], name);
      assert.equal(cfg.services['grafana']!.image, 'registry.example/grafana:pinned');
      assert.equal(cfg.services['prometheus']!.image, 'prom/prometheus:v3.5.0');
      assert.equal(cfg.services['api']!.environment!['OTEL_TRACES_EXPORTER'], 'otlp');
      assert.equal(
        cfg.services['api']!.environment!['OTEL_EXPORTER_OTLP_ENDPOINT'],
        'http://otel-collector:4318',
      );
      const mounts = (cfg.services['prometheus']!.volumes ?? []).map((v) =>
        typeof v === 'string' ? v.split(':')[0] : v.source,
      );
      assert.ok(mounts.includes(path.join(root, 'deploy/observability/prometheus.yml')), mounts.join(', '));

      const off = await run(['config'], { API_KEYS: 'ci:test-key' });
      assert.equal(off.code, 0, off.out);
      const base = parseYaml(off.out) as {
        services: Record<string, { environment?: Record<string, string> }>;
      };
      assert.equal(
        base.services['api']!.environment!['OTEL_TRACES_EXPORTER'],
        'none',
        'traces are off without the variable',
      );
    },
  );
});
