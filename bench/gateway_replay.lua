-- gateway_replay.lua: duplicates through a gateway route: tokens whose first
-- submit went through the gateway, sent again (cycling); every answer is the
-- stored upstream response with Idempotent-Replayed: true.
--   wrk ... -s gateway_replay.lua URL -- TOKENS_FILE NTHREADS
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local reqs, n, i = {}, 0, 0
local path = os.getenv("BENCH_GATEWAY_PATH") or "/bench/orders"
local body = '{"sku":"A-1","qty":2}'

setup = common.setup
done = common.done

function init(args)
   for _, tok in ipairs(common.load_tokens(args[1], tonumber(args[2]))) do
      reqs[#reqs + 1] = wrk.format("POST", path, {
         ["Content-Type"] = "application/json",
         ["Idempotency-Key"] = tok,
      }, body)
   end
   n = #reqs
end

function request()
   i = i % n + 1
   return reqs[i]
end
