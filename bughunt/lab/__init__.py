"""The lab layer for the notebooks: one module per lesson (experiments as DataFrames, plots as
Figures, a panel), plus the shared panel, plot style and exercise checks. Nothing here is imported
by the worker."""
