-- key_claims.lua: claims of fresh caller keys on the direct API, one key
-- per request (POST /v1/operations/OP/keys/KEY/claim) or BATCH keys per
-- request (POST /v1/operations/OP/claims), keys PREFIX-<thread>-<n>.
--   wrk ... -s key_claims.lua URL -- single|batch PREFIX [BATCH]
-- Operations counted = keys answered 201 (for a batch, the items whose
-- status is 201; an answer with any other item counts as bad).
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

local batch, size, prefix, n = false, 1, "k", 0
local headers = {}
local item_request = '"request":{"sku":"A-1","qty":2}'

ops, bad, exhausted = 0, 0, 0
setup = common.setup
done = common.done

function init(args)
   batch = args[1] == "batch"
   prefix = args[2] .. "-" .. (thread_id or 0) .. "-"
   size = batch and tonumber(args[3] or "100") or 1
   headers["Authorization"] = "Bearer " .. common.api_key
   headers["Content-Type"] = "application/json"
end

function request()
   if not batch then
      n = n + 1
      return wrk.format("POST", "/v1/operations/" .. common.operation .. "/keys/" ..
                        prefix .. n .. "/claim", headers, "{" .. item_request .. "}")
   end
   local items = {}
   for k = 1, size do
      n = n + 1
      items[k] = '{"key":"' .. prefix .. n .. '",' .. item_request .. '}'
   end
   return wrk.format("POST", "/v1/operations/" .. common.operation .. "/claims", headers,
                     '{"items":[' .. table.concat(items, ",") .. ']}')
end

function response(status, hdrs, body)
   if not batch then
      if status == 201 then ops = ops + 1 else bad = bad + 1 end
      return
   end
   if status ~= 200 then
      bad = bad + 1
      return
   end
   local _, created = body:gsub('"status":201', "")
   ops = ops + created
   if created ~= size then bad = bad + 1 end
end
