-- wrk script of the soak test (bench/soak/run_soak.sh). Reads the request list written by
-- `bench/soak/soak.py bodies DIR` (DIR/requests.txt: "KIND GOOD|BAD PATH FILE" lines) and POSTs
-- the GOOD ones in rotation (digits_a, digits_b, echo, ...), every BAD_EVERY-th request one of the
-- BAD ones instead (in rotation). Counts the answers by status and keeps the first body (200
-- bytes) of every status other than 200; done() prints one line
--   SOAK_JSON {"requests", "seconds", "rps", "sent_good", "sent_bad", "statuses": {code: n},
--              "first_body": {code: text}, "errors": {connect, read, write, timeout, status},
--              "p50_us", "p99_us", "max_us"}
--
--   wrk -t1 -c64 -d60s --timeout 10s -s bench/soak/soak.lua http://127.0.0.1:8000 -- DIR/requests.txt 200

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

local good, bad = {}, {}
local bad_every, n = 200, 0

function init(args)
  local index = args[1] or error("soak.lua: pass DIR/requests.txt after --")
  bad_every = tonumber(args[2] or "200")
  for line in io.lines(index) do
    local kind, class, path, file = line:match("^(%S+) (%S+) (%S+) (%S+)$")
    local f = assert(io.open(file, "rb"))
    local body = f:read("*a")
    f:close()
    local req = wrk.format("POST", path, {["Content-Type"] = "application/json"}, body)
    table.insert(class == "GOOD" and good or bad, req)
  end
  assert(#good > 0 and #bad > 0, "soak.lua: " .. index .. " lists no GOOD or no BAD request")
  statuses, first_body, sent_good, sent_bad = {}, {}, 0, 0
end

function request()
  n = n + 1
  if bad_every > 0 and n % bad_every == 0 then
    sent_bad = sent_bad + 1
    return bad[math.floor(n / bad_every) % #bad + 1]
  end
  sent_good = sent_good + 1
  return good[n % #good + 1]
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if status ~= 200 and first_body[status] == nil then
    first_body[status] = string.sub(body or "", 1, 200)
  end
end

local function json_string(s)
  return '"' .. string.gsub(s, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end) .. '"'
end

function done(summary, latency, requests)
  local counts, bodies, good_total, bad_total = {}, {}, 0, 0
  for _, t in ipairs(threads) do
    for code, k in pairs(t:get("statuses") or {}) do counts[code] = (counts[code] or 0) + k end
    for code, text in pairs(t:get("first_body") or {}) do bodies[code] = bodies[code] or text end
    good_total = good_total + (t:get("sent_good") or 0)
    bad_total = bad_total + (t:get("sent_bad") or 0)
  end
  local cs, bs = {}, {}
  for code, k in pairs(counts) do table.insert(cs, string.format('"%d": %d', code, k)) end
  for code, text in pairs(bodies) do table.insert(bs, string.format('"%d": %s', code, json_string(text))) end
  local e, seconds = summary.errors, summary.duration / 1e6
  io.write(string.format(
    'SOAK_JSON {"requests": %d, "seconds": %.3f, "rps": %.2f, "sent_good": %d, "sent_bad": %d, ' ..
    '"statuses": {%s}, "first_body": {%s}, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}, ' ..
    '"p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, seconds, summary.requests / seconds, good_total, bad_total,
    table.concat(cs, ", "), table.concat(bs, ", "),
    e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(99), latency.max))
end
