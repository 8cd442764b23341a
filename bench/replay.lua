-- replay.lua: claim of completed tokens (every answer is the stored
-- response, 200 with Idempotent-Replayed: true), cycling through the tokens
-- of TOKENS_FILE; requests are formatted in init(), so request() is a table
-- lookup. Also the load of baseline A at the replay settings.
--   wrk ... -s replay.lua URL -- TOKENS_FILE NTHREADS
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local reqs, n, i = {}, 0, 0
local claim_body = '{"request":{"sku":"A-1","qty":2}}'

setup = common.setup
done = common.done

function init(args)
   local headers = {
      ["Authorization"] = "Bearer " .. common.api_key,
      ["Content-Type"] = "application/json",
   }
   for _, tok in ipairs(common.load_tokens(args[1], tonumber(args[2]))) do
      reqs[#reqs + 1] = wrk.format("POST", "/v1/tokens/" .. tok .. "/claim", headers, claim_body)
   end
   n = #reqs
end

function request()
   i = i % n + 1
   return reqs[i]
end
