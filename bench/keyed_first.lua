-- keyed_first.lua: first submits with keys the caller makes up (the IETF
-- Idempotency-Key draft): one POST per fresh key PREFIX-<thread>-<n>, the
-- same body and headers as gateway_first.lua. Used for idemd's gateway
-- route with key "header:Idempotency-Key" and for the Node peer alike.
--   wrk ... -s keyed_first.lua URL -- PATH PREFIX
-- Counts 2xx answers with Idempotent-Replayed: false as operations.
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local path, prefix, n = "/orders", "k", 0
local headers = { ["Content-Type"] = "application/json" }
local body = '{"sku":"A-1","qty":2}'

ops, bad, exhausted = 0, 0, 0
setup = common.setup
done = common.done

function init(args)
   path = args[1]
   prefix = args[2] .. "-" .. (thread_id or 0) .. "-"
end

function request()
   n = n + 1
   headers["Idempotency-Key"] = prefix .. n
   return wrk.format("POST", path, headers, body)
end

function response(status, hdrs, b)
   local replayed = hdrs["Idempotent-Replayed"] or hdrs["idempotent-replayed"]
   if status >= 200 and status < 300 and replayed == "false" then
      ops = ops + 1
   else
      bad = bad + 1
   end
end
