-- common.lua: helpers shared by the wrk scripts of bench/ (loaded with
-- require; run.sh puts bench/ on LUA_PATH). Every script prints one line
--   BENCH_RESULT key=value ...
-- from done(), which run.sh parses: requests, duration, p50/p99 latency,
-- wrk's error counters and the per-thread counters the script keeps
-- (ops = completed operations, bad = unexpected answers, exhausted = a
-- thread ran out of pre-issued tokens).
local M = {}

M.threads = {}
M.api_key = os.getenv("BENCH_API_KEY") or "missing"
M.operation = os.getenv("BENCH_OPERATION") or "order.create"

-- wrk calls setup() once per thread, before that thread's init().
function M.setup(thread)
   thread:set("thread_id", #M.threads)
   table.insert(M.threads, thread)
end

-- The lines of PATH whose number modulo NTHREADS is this thread's id: every
-- thread gets its own tokens. Only the first field of each line is kept.
function M.load_tokens(path, nthreads)
   local mine, n = {}, 0
   local id = thread_id or 0
   for line in io.lines(path) do
      if n % nthreads == id then
         local tok = line:match("^(%S+)")
         if tok then mine[#mine + 1] = tok end
      end
      n = n + 1
   end
   return mine
end

function M.done(summary, latency, requests)
   local ops, bad, exhausted = 0, 0, 0
   for _, t in ipairs(M.threads) do
      ops = ops + (t:get("ops") or 0)
      bad = bad + (t:get("bad") or 0)
      exhausted = exhausted + (t:get("exhausted") or 0)
   end
   local e = summary.errors
   io.write(string.format(
      "BENCH_RESULT requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d " ..
      "err_connect=%d err_read=%d err_write=%d err_status=%d err_timeout=%d " ..
      "ops=%d bad=%d exhausted=%d\n",
      summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
      latency:percentile(99), latency.max, e.connect, e.read, e.write, e.status, e.timeout,
      ops, bad, exhausted))
end

return M
