"""Storage designs for cronbase's hot path, side by side while the xmin horizon is held
(docs/design/storage.md): each design is a schema and three statements (enqueue, claim,
complete) in ``designs.py``; ``run.py`` offers the same load to each, holds the horizon with an
idle transaction, and samples the claim's cost. ``python -m bench.storage_trial --help``."""
