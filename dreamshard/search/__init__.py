"""Planning on the learned cost (docs/architecture/learning.md, "Learning"): the learned sharders, their candidates and
local search, column splits, sharding-type choice and where a new unit goes in a placement that stays."""
