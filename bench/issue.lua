-- issue.lua: POST /v1/tokens, one token per request. The request never
-- changes, so wrk formats it once (no per-request Lua). Also the load of
-- baseline A (the trivial server answers it like any request).
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

wrk.method = "POST"
wrk.path = "/v1/tokens"
wrk.headers["Authorization"] = "Bearer " .. common.api_key
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"operation":"' .. common.operation .. '","subject":"user-42"}'

setup = common.setup
done = common.done
