// Part of the `node --test` suite written for the repro corpus: loopback sockets and a child process.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const net = require('node:net');
const { execFile } = require('node:child_process');

test('echo over a loopback TCP server, closed by a timer', async () => {
  const server = net.createServer((sock) => sock.pipe(sock));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  const reply = await new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1', () => c.write('ping'));
    c.on('data', (d) => { c.end(); resolve(d.toString()); });
    c.on('error', reject);
  });
  assert.strictEqual(reply, 'ping');
  await new Promise((resolve) => setTimeout(() => server.close(resolve), 50));
});

test('a child process runs and exits', async () => {
  const out = await new Promise((resolve, reject) => {
    execFile(process.execPath, ['-e', 'console.log(6 * 7)'], (err, stdout) => (err ? reject(err) : resolve(stdout)));
  });
  assert.strictEqual(out.trim(), '42');
});
