-- keyed_replay.lua: duplicates of caller-made keys already completed
-- (benchlib.py seed-keys sent PREFIX-1 .. PREFIX-N once before), cycling;
-- every answer should be the stored one with Idempotent-Replayed: true.
--   wrk ... -s keyed_replay.lua URL -- PATH PREFIX N
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local reqs, n, i = {}, 0, 0

ops, bad, exhausted = 0, 0, 0
setup = common.setup
done = common.done

function init(args)
   local path, prefix, count = args[1], args[2], tonumber(args[3])
   for k = 1, count do
      reqs[k] = wrk.format("POST", path, {
         ["Content-Type"] = "application/json",
         ["Idempotency-Key"] = prefix .. "-" .. k,
      }, '{"sku":"A-1","qty":2}')
   end
   n = count
   i = (thread_id or 0) * math.floor(n / 2)
end

function request()
   i = i % n + 1
   return reqs[i]
end

function response(status, hdrs, b)
   local replayed = hdrs["Idempotent-Replayed"] or hdrs["idempotent-replayed"]
   if status >= 200 and status < 300 and replayed == "true" then
      ops = ops + 1
   else
      bad = bad + 1
   end
end
