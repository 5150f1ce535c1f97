"""Course tooling around the model, for the chapters: notebook helpers (seeding, printing, exercise
checks), plots, interactive (plotly) figures, the roofline cost model and the benchmark. The model (the
rest of `transformer_steps`) never imports from here."""

from .notebook import as_text, check, fmt, seed_everything, show

__all__ = ["as_text", "check", "fmt", "seed_everything", "show"]
