-- also_ops.lua: the head of also.lua (see also.go). also.lua calls each
-- name's limit S through its functions ops: ops.load(S), ops.try(S, n,
-- wait_us), ops.available(S), ops.give(S, n), ops.save(S). For an
-- algorithm written as functions of a state (token_bucket.lua,
-- fixed_window.lua) ops is its alg and S its state: nothing built per
-- name but S. closure_ops() are the ops of a limit made of closures
-- (wrapLimit's, multi.lua's new_multi): built once per call, and only
-- when a name needs them.
local closure_ops
local function closures()
  if not closure_ops then
    closure_ops = {
      load = function(l) l.load() end,
      save = function(l) l.save() end,
      try = function(l, n, wait_us) return l.try(n, wait_us) end,
      available = function(l) return l.available() end,
      give = function(l, n) l.give(n) end,
    }
  end
  return closure_ops
end
