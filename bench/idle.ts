/** Does nothing until SIGTERM: B6's measure of what `node --import tsx` alone costs in RSS. */
process.stdout.write('{"ready":true}\n');
setInterval(() => {}, 60_000);
process.on('SIGTERM', () => process.exit(0));
