-- The entry: ARGV[1] names the command; ARGV[2] and ARGV[3] are the two
-- times (see base.lua); the rest go to the command.

local name, now, real = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local command = commands[name]
if not command then return ERR.invalid('no such command: ' .. tostring(name)) end
if not now or not real then return ERR.invalid('the times must be numbers') end
NOW = now
local args = {}
for i = 4, #ARGV do args[#args + 1] = ARGV[i] end
return command(now, real, args)
