"""Embedding-table inventories and their lookups: generators (synth, families, presets), DLRM traces, the reuse
histogram, synthetic lookup indices and the index budget (docs/architecture/data-model.md, "Data model")."""
