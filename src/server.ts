import closeWithGrace from 'close-with-grace';
import { ConfigError } from './config.js';
import { BootError, startService } from './boot.js';

try {
  const service = await startService();
  closeWithGrace({ delay: service.config.SHUTDOWN_GRACE_MS + 5000 }, async ({ signal, err }) => {
    if (err) service.app.log.error({ err }, 'closing after an error');
    else service.app.log.info({ signal }, 'shutting down');
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
