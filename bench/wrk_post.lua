-- wrk script for bench/http_bench.py: POST one fixed JSON body with a Bearer key,
-- and print one machine-readable summary line when the run is done.
--
--   WRK_BODY_FILE=body.json WRK_API_KEY=key wrk -t1 -c64 -d5s -s bench/wrk_post.lua URL
--
-- The summary line starts with "WRK_JSON " and holds the request count, the run's
-- duration, wrk's error counts (errors.status counts non-2xx/3xx answers) and
-- latency percentiles in microseconds.

local body_file = assert(os.getenv("WRK_BODY_FILE"), "set WRK_BODY_FILE")
local f = assert(io.open(body_file, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("WRK_API_KEY") or "bench-key")

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, '
      .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, '
      .. '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "max": %d, "mean": %.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean))
end
