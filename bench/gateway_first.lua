-- gateway_first.lua: first submit through a gateway route: one request per
-- fresh pre-issued token, carried as Idempotency-Key; idemd claims, calls the
-- static upstream, stores its answer and replies.
--   wrk ... -s gateway_first.lua URL -- TOKENS_FILE NTHREADS
-- The route's path is BENCH_GATEWAY_PATH (default /bench/orders).
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local tokens, next_fresh = {}, 1
local path = os.getenv("BENCH_GATEWAY_PATH") or "/bench/orders"
local headers = { ["Content-Type"] = "application/json" }
local body = '{"sku":"A-1","qty":2}'

ops, bad, exhausted = 0, 0, 0
setup = common.setup
done = common.done

function init(args)
   tokens = common.load_tokens(args[1], tonumber(args[2]))
end

function request()
   local i = next_fresh
   if i > #tokens then
      exhausted = 1
      return wrk.format("GET", "/healthz", {}, nil)
   end
   next_fresh = i + 1
   headers["Idempotency-Key"] = tokens[i]
   return wrk.format("POST", path, headers, body)
end

function response(status, hdrs, b)
   local replayed = hdrs["Idempotent-Replayed"] or hdrs["idempotent-replayed"]
   if status >= 200 and status < 300 and replayed == "false" then
      ops = ops + 1
   elseif not (exhausted == 1 and status == 200 and replayed == nil) then
      bad = bad + 1
   end
end
