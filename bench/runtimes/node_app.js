// The runtimes benchmark's Node app (bench/runtimes/README.md): Debian's nodejs, an HTTP server
// on the main thread handing each GET /work?mb=N to one of 4 worker_threads in turn. A worker
// builds N MB of Buffers of 1-64 KB (allocUnsafeSlow: each one glibc's malloc, never the
// pool; filled, so resident), keeps 1 in 50 in a ring of 400 of its own and drops the rest
// (V8's GC frees them later); GET /ping answers at once.
// Usage: node node_app.js PORT_FILE
const { Worker, isMainThread, parentPort } = require('worker_threads');

if (!isMainThread) {
  const ring = new Array(400);
  let slot = 0;
  parentPort.on('message', ({ id, mb }) => {
    const blocks = [];
    let total = 0;
    const want = mb * 1048576;
    while (total < want) {
      const size = 1024 + Math.floor(Math.random() * 64512);
      const b = Buffer.allocUnsafeSlow(size);
      b.fill(120);
      blocks.push(b);
      total += size;
    }
    for (let i = 0; i < blocks.length; i += 50) {
      ring[slot] = blocks[i];
      slot = (slot + 1) % ring.length;
    }
    parentPort.postMessage({ id, n: blocks.length });
  });
} else {
  const http = require('http');
  const fs = require('fs');
  const workers = [];
  const pending = new Map();
  let next = 0, seq = 0;
  for (let i = 0; i < 4; i++) {
    const w = new Worker(__filename);
    w.on('message', ({ id, n }) => {
      const res = pending.get(id);
      pending.delete(id);
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(String(n));
    });
    workers.push(w);
  }
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    if (url.pathname === '/work') {
      const mb = Math.max(1, Math.min(256, parseInt(url.searchParams.get('mb') || '16', 10) || 16));
      const id = seq++;
      pending.set(id, res);
      workers[next].postMessage({ id, mb });
      next = (next + 1) % workers.length;
    } else if (url.pathname === '/ping') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('pong');
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  server.listen(0, '127.0.0.1', () => {
    fs.writeFileSync(process.argv[2] + '.tmp', String(server.address().port));
    fs.renameSync(process.argv[2] + '.tmp', process.argv[2]);
  });
}
