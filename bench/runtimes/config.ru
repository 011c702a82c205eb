# The runtimes benchmark's Ruby app (bench/runtimes/README.md), for Debian's puma in single
# mode with 8 threads: GET /work?mb=N builds N MB of strings of 1-64 KB (each buffer glibc's
# malloc, written), keeps 1 in 50 in a ring of 1500 shared by every thread and drops the rest
# (Ruby's GC frees them later); GET /big?mb=N fills one buffer of N MB outside glibc's arenas
# (one malloc that large is an anonymous mapping: what an upload takes at once), 64 KB at a
# time with a running checksum, and frees it; GET /ping answers at once.
require "digest"

RING = Array.new(1500)
$slot = 0
LOCK = Mutex.new

def work(mb)
  blocks, total, want = [], 0, mb << 20
  while total < want
    size = rand(1024..65536)
    blocks << ("x" * size)
    total += size
  end
  LOCK.synchronize do
    blocks.each_slice(50) do |s|
      RING[$slot] = s[0]
      $slot = ($slot + 1) % RING.size
    end
  end
  blocks.size
end

def big(mb)
  size = mb << 20
  buf = String.new(capacity: size) # one malloc of size: mapped, written as it arrives
  chunk = "x" * 65536
  digest = Digest::SHA256.new
  while buf.bytesize < size
    buf << chunk
    digest << chunk
  end
  buf.clear # its buffer freed now (unmapped), not at a later GC
  digest.hexdigest
end

run lambda { |env|
  case env["PATH_INFO"]
  when "/work"
    mb = (env["QUERY_STRING"].to_s[/(?:^|&)mb=(\d+)/, 1] || "16").to_i.clamp(1, 256)
    [200, {"content-type" => "text/plain"}, [work(mb).to_s]]
  when "/big"
    mb = (env["QUERY_STRING"].to_s[/(?:^|&)mb=(\d+)/, 1] || "16").to_i.clamp(1, 1024)
    [200, {"content-type" => "text/plain"}, [big(mb)]]
  when "/ping"
    [200, {"content-type" => "text/plain"}, ["pong"]]
  else
    [404, {"content-type" => "text/plain"}, ["no"]]
  end
}
