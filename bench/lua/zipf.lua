-- wrk script: GET /o/K with K drawn from a Zipf distribution over 1..N
-- (P(K = k) proportional to 1 / k^S). Arguments: N [S, default 1.0] [SEED].
-- Each thread builds the cumulative table once (N doubles: 8 MB at
-- 1,000,000) and draws with a binary search (about 20 steps at 1,000,000),
-- seeded by SEED + thread number so every proxy sees the same sequence.
-- `tid`, the thread's number, from threads.lua beside this file.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "threads.lua")
function init(args)
   n = tonumber(args[1])
   local s = tonumber(args[2] or "1.0")
   math.randomseed(tonumber(args[3] or "29") + tid)
   cdf = {}
   local sum = 0.0
   for k = 1, n do
      sum = sum + 1.0 / (k ^ s)
      cdf[k] = sum
   end
   for k = 1, n do cdf[k] = cdf[k] / sum end
end
local function draw()
   local u = math.random()
   local lo, hi = 1, n
   while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if cdf[mid] < u then lo = mid + 1 else hi = mid end
   end
   return lo
end
request = function()
   return wrk.format("GET", "/o/" .. draw())
end
