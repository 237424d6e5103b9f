// The JavaScript REPL: runs each file named on fd $OI_CMD_FD in one context (see repl.py).
const fs = require('fs'), vm = require('vm'), util = require('util'), rl = require('readline');
globalThis.require = require;
let current = null;
function finish(token, status) {
  if (current !== token) return;
  current = null;
  process.stdout.write('__oi_end_' + token + '__' + status + '\n');
}
function fail(err) {
  process.stderr.write((err && err.stack) ? err.stack + '\n' : String(err) + '\n');
  if (current) finish(current, 1);
}
process.on('SIGINT', () => { if (current) { process.stderr.write('Interrupted\n');
                                            finish(current, 130); } });
process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);
const input = rl.createInterface({input: fs.createReadStream(null, {fd: +process.env.OI_CMD_FD})});
input.on('line', async (line) => {
  const {file, token} = JSON.parse(line);
  current = token;
  process.stdout.write('__oi_begin_' + token + '\n');
  try {
    let value = vm.runInThisContext(fs.readFileSync(file, 'utf8'), {filename: 'code'});
    if (value && typeof value.then === 'function') value = await value;
    if (value !== undefined) process.stdout.write(util.inspect(value) + '\n');
    finish(token, 0);
  } catch (err) { if (current === token) fail(err); }
});
input.on('close', () => process.exit(0));
