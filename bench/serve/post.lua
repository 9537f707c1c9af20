-- wrk script of the serving benchmark (bench/serve/run_serve.sh): POSTs one KServe v2 JSON
-- inference body, read from the file named after `--`, on every request, and at the end prints
-- one JSON line starting "WRK_JSON " with the request count, req/s, latency percentiles
-- (p50, p90, p99, p99.9 in microseconds) and the errors: answers with a status other than 200
-- (counted in response(), with the first such status and body) and wrk's socket errors.
--
--   wrk -t1 -c16 -d10s --latency -s bench/serve/post.lua \
--       http://127.0.0.1:8000/v2/models/mlp/infer -- build-bench/serve/bodies/mlp.json
--
-- The request is built once per thread in init() (wrk sends a static request when request()
-- is not overridden); response() runs per answer in each thread's Lua state, done() sums the
-- threads' counters.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local path = args[1]
  if path == nil then
    error("post.lua: pass the body file after --")
  end
  local f = assert(io.open(path, "rb"))
  local body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
  non200 = 0
  first_error = ""
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    if first_error == "" then
      first_error = status .. " " .. string.sub(body or "", 1, 200)
    end
  end
end

local function json_string(s)
  s = string.gsub(s, '[%c"\\]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end)
  return '"' .. s .. '"'
end

function done(summary, latency, requests)
  local non200_total, first = 0, ""
  for _, t in ipairs(threads) do
    non200_total = non200_total + (t:get("non200") or 0)
    if first == "" then
      first = t:get("first_error") or ""
    end
  end
  local e = summary.errors
  local seconds = summary.duration / 1e6
  io.write(string.format(
    'WRK_JSON {"requests": %d, "seconds": %.3f, "rps": %.2f, "bytes": %d, ' ..
    '"p50_us": %d, "p90_us": %d, "p99_us": %d, "p999_us": %d, "max_us": %d, "mean_us": %.1f, ' ..
    '"non200": %d, "connect_errors": %d, "read_errors": %d, "write_errors": %d, ' ..
    '"timeouts": %d, "status_errors": %d, "first_error": %s}\n',
    summary.requests, seconds, summary.requests / seconds, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean,
    non200_total, e.connect, e.read, e.write, e.timeout, e.status, json_string(first)))
end
