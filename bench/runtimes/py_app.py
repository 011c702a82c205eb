"""The runtimes benchmark's Python app (bench/runtimes/README.md): Debian's python3 with the
standard library's ThreadingHTTPServer (a thread per connection). GET /work?mb=N builds N MB of
bytes objects of 1-64 KB (above pymalloc's 512 bytes: each one glibc's malloc, written so it
is resident), keeps 1 in 50 in a ring of RING entries shared by every thread (what a cache
keeps: it pins pages all over the arenas) and frees the rest; GET /big?mb=N fills one buffer of
N MB outside the arenas (an anonymous mapping: what an upload takes at once), 64 KB at a time
with a running checksum, and frees it; GET /ping answers at once.
Usage: python3 py_app.py PORT_FILE"""
import hashlib
import mmap
import random
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

RING = 1500
ring = [None] * RING
slot = 0
lock = threading.Lock()


def work(mb):
    global slot
    rnd = random.Random()
    blocks, total, want = [], 0, mb << 20
    while total < want:
        size = rnd.randint(1024, 65536)
        blocks.append(b"x" * size)
        total += size
    kept = blocks[::50]
    with lock:
        for b in kept:
            ring[slot] = b
            slot = (slot + 1) % RING
    return len(blocks)


def big(size):
    """One buffer of size bytes outside glibc's arenas (an anonymous mapping, as glibc's malloc
    gives a block that large), written 64 KB at a time and checksummed as it is (an upload
    checked as it arrives: about 200 MB/s on 2 cores at load 9, with SHA-NI), then freed."""
    buf = mmap.mmap(-1, size)
    view = memoryview(buf)
    digest = hashlib.sha256()
    chunk = b"x" * 65536
    for off in range(0, size, 65536):
        n = min(65536, size - off)
        view[off:off + n] = chunk[:n]
        digest.update(view[off:off + n])
    view.release()
    buf.close()
    return digest.hexdigest().encode()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/work":
            mb = int(parse_qs(url.query).get("mb", ["16"])[0])
            body = str(work(max(1, min(mb, 256)))).encode()
        elif url.path == "/big":
            mb = int(parse_qs(url.query).get("mb", ["16"])[0])
            body = big(max(1, min(mb, 1024)) << 20)
        elif url.path == "/ping":
            body = b"pong"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.request_queue_size = 128
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    server.serve_forever()
