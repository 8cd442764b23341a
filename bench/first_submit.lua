-- first_submit.lua: the direct first submit. One operation = claim of a
-- fresh pre-issued token, then complete of that token (attempt 1), counted
-- once, when the complete answers 200.
--   wrk ... -s first_submit.lua URL -- TOKENS_FILE NTHREADS [claim-only]
-- TOKENS_FILE has one pre-issued token per line; each wrk thread takes every
-- NTHREADS-th line. wrk's response() does not say which connection or
-- request it belongs to, so every request carries X-Request-Id c<i> (claim
-- of token i) or d<i> (complete); idemd echoes it, and a token whose claim
-- answered 201 is queued for its complete, which the next request() sends.
-- With "claim-only" the completes are left out (claim latency alone).
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local tokens, next_fresh = {}, 1
local ready, rhead, rtail = {}, 1, 0
local claim_only = false
local headers = {}
local claim_body = '{"request":{"sku":"A-1","qty":2}}'
local complete_body = '{"attempt":1,"status":201,"headers":{"location":"/orders/1001"},' ..
   '"body":{"order_id":1001,"total":"19.99","currency":"EUR"}}'

ops, bad, exhausted = 0, 0, 0
setup = common.setup
done = common.done

function init(args)
   tokens = common.load_tokens(args[1], tonumber(args[2]))
   claim_only = args[3] == "claim-only"
   headers["Authorization"] = "Bearer " .. common.api_key
   headers["Content-Type"] = "application/json"
end

function request()
   if rhead <= rtail then
      local i = ready[rhead]
      ready[rhead] = nil
      rhead = rhead + 1
      headers["X-Request-Id"] = "d" .. i
      return wrk.format("POST", "/v1/tokens/" .. tokens[i] .. "/complete", headers, complete_body)
   end
   local i = next_fresh
   if i > #tokens then
      exhausted = 1
      headers["X-Request-Id"] = "x0"
      return wrk.format("GET", "/healthz", headers, nil)
   end
   next_fresh = i + 1
   headers["X-Request-Id"] = "c" .. i
   return wrk.format("POST", "/v1/tokens/" .. tokens[i] .. "/claim", headers, claim_body)
end

function response(status, hdrs, body)
   local rid = hdrs["X-Request-Id"] or hdrs["x-request-id"] or ""
   local kind, i = rid:sub(1, 1), tonumber(rid:sub(2))
   if kind == "c" then
      if status == 201 then
         if claim_only then
            ops = ops + 1
         else
            rtail = rtail + 1
            ready[rtail] = i
         end
      else
         bad = bad + 1
      end
   elseif kind == "d" then
      if status == 200 then ops = ops + 1 else bad = bad + 1 end
   elseif kind ~= "x" then
      bad = bad + 1
   end
end
