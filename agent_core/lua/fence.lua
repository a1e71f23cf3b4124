-- The lease fence, shared by every fenced script (`--! uses: fence`; agent_core._lua).
-- A lease's value starts with its fencing token and a '|' (`<token>|<worker>|<turn>`,
-- bot.state.lease), the same test as `agent_core._store.Fence.holds`. Returns the lease's value
-- while `key` holds `token`, false otherwise; each script decides what a lost lease answers.
local function fenced(key, token)
  local held = redis.call('GET', key)
  if held and string.sub(held, 1, string.len(token) + 1) == token .. '|' then return held end
  return false
end
