import closeWithGrace from 'close-with-grace';
import { ConfigError } from './config.js';
import { BootError, startService } from './boot.js';
import { componentLog, routeConsoleToLog } from './log.js';

/** package.json's `engines`: listening on several sockets of one port (src/accept-sockets.ts) needs Node.js 24's `reusePort`. */
const NODE_MAJOR = 24;

if (Number(process.versions.node.split('.')[0]) < NODE_MAJOR) {
  console.error(`Node.js ${NODE_MAJOR} or later is required (this is ${process.version}).`);
  process.exit(78);
}

try {
  const service = await startService();
  // From here every line of the process is a JSON log line, libraries' console warnings included.
  routeConsoleToLog(service.app.log);
  const log = componentLog(service.app.log, 'boot');
  closeWithGrace({ delay: service.config.SHUTDOWN_GRACE_MS + 5000 }, async ({ signal, err }) => {
    if (err) log.error({ err }, 'closing after an error');
    else log.info({ signal }, 'shutting down');
    await service.close();
  });
} catch (err) {
  if (err instanceof ConfigError || err instanceof BootError) {
    console.error(err.message);
    process.exit(78);
  }
  console.error(err);
  process.exit(1);
}
