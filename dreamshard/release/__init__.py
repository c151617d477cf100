"""The release gate for models: a new packaged model replaces the shipped one only when a paired, interleaved
bench on held-out generator families says it is no worse than the shipped model and beats the best heuristic
(docs/architecture/gate.md, "The release gate for models").

    stats      the paired bootstrap of a geomean ratio (pure numbers)
    bench      the held-out tasks planned by both models and the heuristics, measured interleaved
    report     the decision and its report (JSON and Markdown)
    promote    the candidate's files into the shipped model's directory, or nothing
"""
