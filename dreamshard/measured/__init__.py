"""Measurement on hardware at plan time: the best predicted candidates measured interleaved (`candidates`) and
measured refinement of the kept plan (`refine`, its rounds in `duel`) (docs/architecture.md, "Learning")."""
