/**
 * B6's baseline: `node` with the service's modules loaded (the app plugin, the engine, the SDK, fastify, ioredis…)
 * and nothing started; does nothing until SIGTERM.
 */
import '../src/boot.js';

process.stdout.write('{"ready":true}\n');
setInterval(() => {}, 60_000);
process.on('SIGTERM', () => process.exit(0));
