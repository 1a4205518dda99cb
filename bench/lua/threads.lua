-- Shared by the wrk scripts here (fill.lua, zipf.lua), which load it with
-- dofile from their own folder: numbers wrk's threads 1..T as they are set
-- up, so each thread's init sees its own `tid` (fill.lua's share of the
-- URLs, zipf.lua's seed).
local threads = 0
function setup(thread)
   threads = threads + 1
   thread:set("tid", threads)
end
