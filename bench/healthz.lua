-- healthz.lua: GET /healthz on keep-alive connections; used with -c2000 to
-- hold many connections open while idemd's memory is read.
package.path = (os.getenv("BENCH_DIR") or ".") .. "/?.lua;" .. package.path
local common = require("common")

wrk.method = "GET"
wrk.path = "/healthz"

setup = common.setup
done = common.done
