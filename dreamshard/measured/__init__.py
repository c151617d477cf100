"""Measurement on hardware at plan time: the best predicted candidates measured interleaved (`candidates`) and
measured refinement of the kept plan (`refine`, its rounds in `duel`), the refined plan against its start and the
plan stage against the search-only plan (`stage`; its report sentence: dreamshard.values.stage_report)
(docs/architecture/learning.md, "Learning")."""
