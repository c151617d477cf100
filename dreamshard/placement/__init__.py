"""A plan's placement units, THE placement validator with memory accounting, device memory as a training job
needs it, and what changes between two plans (docs/architecture/data-model.md, "Sharding types")."""
