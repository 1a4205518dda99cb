-- wrk script: fill a cache with /o/FIRST .. /o/LAST, each asked once.
-- Arguments: LAST THREADS [FIRST, default 1]. Thread t of T takes
-- FIRST + t - 1, FIRST + t - 1 + T, ...; a thread stops once all of its share
-- has been answered, and requests already sent past its share ask for
-- /o/FIRST (a hit). Used by bench/memory and bench/scaling.
-- `tid`, the thread's number, from threads.lua beside this file.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "threads.lua")
function init(args)
   local last = tonumber(args[1])
   step = tonumber(args[2])
   first = tonumber(args[3] or "1")
   total = last
   nxt = first + tid - 1
   share = 0
   for _ = nxt, total, step do share = share + 1 end
   answered = 0
   if share == 0 then wrk.thread:stop() end
end
request = function()
   local n = nxt
   if n > total then
      n = first
   else
      nxt = nxt + step
   end
   return wrk.format("GET", "/o/" .. n)
end
response = function(status, headers, body)
   answered = answered + 1
   if answered >= share then wrk.thread:stop() end
end
